/* Inside the core: what the service (service.c), its scheduler and
 * runners (runner.c) and the files below them share. Nothing outside src/core includes this. */
#pragma once

#include <jansson.h>

#include "service_int.h"

/* A run this node is running: one runner thread each, on s->active. */
struct active_run {
    active_run *next;
    char run_id[40], person_id[40], org_id[40];
    int cap;
    al_driver_run dr;
    bool cancel_requested;
    /* airlock's own stop ended it: never reported as its requester's
     * cancel, never charged */
    bool stop_requested;
    /* its end is written (or was another node's): what is left is cleanup,
     * which a drain does not wait for and does not count as running */
    bool settled;
};

/* Events of RUN_ID appended together, in order (TYPES[i] with DATA[i],
 * whose references it takes), its followers woken once. */
void al_service_append_events(al_service *s, const char *run_id, size_t n, const char *const *types, json_t **data);
/* A "state" event of RUN_ID. */
void al_service_state_event(al_service *s, const char *run_id, const char *state);
/* holds.c: what the person holds are freed with the service. */
void al_service_holds_free(al_service *s);
/* End RUN_ID as canceled if it is still queued: rows changed (0 or 1). */
int al_service_finish_canceled_queued(al_service *s, const char *run_id);

/* The scheduler thread (scheduler.c; P: the service): claims queued runs
 * as the caps allow and starts a runner for each. */
void *al_service_scheduler_main(void *p);
/* A's runner, a detached thread (runner.c), which takes A off s->active
 * when it is done: 0, or -errno and nothing started. */
int al_runner_start(al_service *s, active_run *a);
/* Test builds (-Dtest_hooks=true) alone: as many ms as the setting NAME
 * says, a window a test can act in; nothing otherwise. */
void al_test_pause(const char *name);
