/*
 * The end of a run (run_end.h): what every terminal path does after it
 * wrote the run's state, in one place, and the simple paths that end a
 * run with one conditional move: a queued run canceled or refused, a run
 * lost with its node.
 */
#include <string.h>

#include "../store/audit.h"
#include "../store/nodes.h"
#include "run_end.h"
#include "runner.h"
#include "service.h"
#include "service_int.h"
#include "skills.h"

void al_service_drop_inputs(al_service *s, const char *run_id) {
    char dir[PATH_MAX + 64];
    if (!run_id || !run_id[0] || strchr(run_id, '/') || run_id[0] == '.')
        return;
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, run_id);
    al_rm_rf(dir);
}

/* The events that say RUN_ID ended in STATE_NAME: its artifacts PUBLISHED,
 * its state (unless STATE_SAID) and its result (which names the run: its
 * document is the run's as GET /v1/runs/{id} shows it, read when the event
 * is, not a second copy of its output); one statement, one wake-up. */
static void publish_end(al_service *s, const char *run_id, json_t *published, const char *state_name,
                        bool state_said) {
    size_t na = json_array_size(published), n = 0;
    const char **types = calloc(na + 2, sizeof *types);
    json_t **docs = calloc(na + 2, sizeof *docs);
    if (types && docs) {
        for (size_t i = 0; i < na; i++) {
            types[n] = "artifact";
            docs[n++] = json_incref(json_array_get(published, i));
        }
        if (!state_said) {
            types[n] = "state";
            docs[n++] = json_pack("{s:s}", "state", state_name);
        }
        types[n] = "result";
        docs[n++] = al_service_result_ref();
        al_service_append_events(s, run_id, n, types, docs);
    } else {
        for (size_t i = 0; i < na; i++)
            al_service_append_event(s, run_id, "artifact", json_incref(json_array_get(published, i)));
        if (!state_said)
            al_service_state_event(s, run_id, state_name);
        al_service_result_event(s, run_id);
    }
    free(types);
    free(docs);
}

/* The tool.call of RUN, lost: one per run, so none when its runner
 * recorded its own before the run's end was written (a service killed
 * between the two left one already, what ran, said by the runner that saw
 * it; a second would count the run twice). */
static void audit_lost(al_service *s, const al_store_run *run, const char *code) {
    al_error err = { 0 };
    al_store_audit_filter f = { .workspace_id = run->workspace_id, .kind = "tool.call", .run_id = run->id,
                                .before_seq = INT64_MAX, .limit = 1 };
    al_store_audit_events had = { 0 };
    int listed = al_store_audit_list(s->store, &f, &had, &err);
    bool recorded = listed == 0 && had.n > 0;
    al_store_audit_events_free(&had);
    if (!recorded)
        al_governance_audit(s, run, "tool.call", NULL,
                            json_pack("{s:s, s:s, s:s}", "invocation_id", run->id, "state", "error", "error",
                                      code ? code : "lost"));
}

void al_run_ended(al_service *s, const char *run_id, const al_store_run *run, const al_run_end *how) {
    if (how->charged && how->state == AL_RUN_ERROR) {
        /* airlock's own failure is not charged (the store refunds once) */
        char now[40];
        al_error err = { 0 };
        al_store_now(now, sizeof now);
        al_store_run_refund(s->store, run_id, now, &err);
    }
    /* it never reaches a box again: what it brought for one, and what its
     * box left (its artifacts are in the store by now), goes before anyone
     * is told it ended, so whoever sees the end finds nothing of it on disk */
    al_service_drop_inputs(s, run_id);
    publish_end(s, run_id, how->published, al_run_state_name(how->state), how->state_said);
    if (run) {
        al_service_log_run_end(s, run, how->state, how->error_code, how->result);
        if (how->audit_lost)
            audit_lost(s, run, how->error_code);
    }
    /* a deleted skill's bundle that waited for this run goes with it */
    al_skills_run_ended(s);
    if (how->freed_slot)
        /* the person's slot is free on every node (its end is in the store) */
        al_cluster_notify(s, AL_NOTIFY_QUEUE, "");
}

int al_run_end_from(al_service *s, const char *run_id, unsigned from, al_run_state state, const char *code,
                    const char *why, const al_run_end *how) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    int n = al_store_run_end(s->store, run_id, from, state, code, why, now, &err);
    if (n <= 0)
        return n;
    /* read again for its run.end line: who, what, why (a run that ends
     * without its runner ends rarely: one read is cheap) */
    _cleanup_run_ al_store_run *run = NULL;
    if (al_store_run_get(s->store, run_id, NULL, &run, &err) < 0)
        run = NULL;
    al_run_end h = *how;
    h.state = state;
    h.error_code = code;
    al_run_ended(s, run_id, run, &h);
    return n;
}

int al_service_finish_canceled_queued(al_service *s, const char *run_id) {
    /* nothing was charged: it never left the queue */
    return al_run_end_from(s, run_id, AL_RUN_BIT(AL_RUN_QUEUED), AL_RUN_CANCELED, "canceled",
                           "canceled before it started", &(al_run_end){ 0 });
}

void al_service_end_unqueued(al_service *s, const char *run_id, const char *code, const char *why) {
    /* refused, not canceled: no one asked for it to end (and nothing was
     * charged: it never left the queue) */
    al_run_end_from(s, run_id, AL_RUN_BIT(AL_RUN_QUEUED), AL_RUN_ERROR, code,
                    why && *why ? why : "the run queue was full", &(al_run_end){ 0 });
}

void al_service_lose_run(al_service *s, const char *id, const char *why) {
    /* once: whichever node gets here first ends it, the others find it
     * ended; airlock's own failure, refunded; its slot was its node's */
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    unsigned active = AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING);
    if (al_store_run_end(s->store, id, active, AL_RUN_ERROR, "lost", why, now, &err) <= 0)
        return;
    al_service_log(s, AL_LOG_WARN, "run.lost", json_pack("{s:s, s:s}", "run_id", id, "why", why));
    _cleanup_run_ al_store_run *run = NULL;
    if (al_store_run_get(s->store, id, NULL, &run, &err) < 0)
        run = NULL;
    al_run_ended(s, id, run,
                 &(al_run_end){ .state = AL_RUN_ERROR, .error_code = "lost", .charged = true, .audit_lost = true,
                                .freed_slot = true });
}
