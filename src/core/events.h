/* A run's events and its followers (events.c), and the other nodes told. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "../store/store.h"

typedef struct al_service al_service;

int64_t al_service_append_event(al_service *s, const char *run_id, const char *type, json_t *data);
/* A run's last event, "result": {"ref":"run"}, which names the run rather
 * than copying it (its documents hold its output and approval card, code
 * included: megabytes); al_run_events_after reads it as al_run_json of
 * the run, what GET /v1/runs/{id} shows. al_service_result_ref: its
 * document. */
json_t *al_service_result_ref(void);
void al_service_result_event(al_service *s, const char *run_id);
/* Wait until an event of RUN_ID newer than GEN (from
 * al_service_run_event_gen) or the deadline; false on timeout or when the
 * service is stopping. What every follower of a run uses. */
uint64_t al_service_run_event_gen(al_service *s, const char *run_id);
bool al_service_wait_run_event(al_service *s, const char *run_id, uint64_t gen, const struct timespec *until);
/* Wake RUN_ID's followers (another node appended to it). */
void al_service_wake_run(al_service *s, const char *run_id);
/* Wake every waiter, whatever it follows (shutdown, a stream taken over). */
void al_service_wake_all(al_service *s);
/* Tell the other nodes (nothing on SQLite). */
void al_cluster_notify(al_service *s, const char *channel, const char *run_id);
