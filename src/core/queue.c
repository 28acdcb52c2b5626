/*
 * The queue's admission (its bounds: all, per person, per organisation),
 * what the queued runs hold of an organisation's credits and disk, and the
 * cancel of a run wherever it is.
 */
#include <string.h>

#include "../store/nodes.h"
#include "run_end.h"
#include "runner.h"
#include "service.h"
#include "service_int.h"

/* Say why a run found no room (al_store_queue_admit's answer R, C; WHAT
 * the store's error), in ERR: -EDQUOT, -EUSERS or -EAGAIN for a share or
 * the queue that is full; -EIO the store's own failure, which is airlock's,
 * not a full queue (the caller ends the run as an error and answers 503,
 * not 429). */
static int no_room(al_service *s, int r, const al_store_queue_counts *c, const char *what, al_error *err) {
    al_error scratch = { 0 };
    if (!err)
        err = &scratch;
    if (r == -EDQUOT)
        return al_err(err, "queue", EDQUOT,
                      "you have %d runs waiting (queued or for approval), the most one person may have "
                      "(queue_per_person = %d); retry when some have started",
                      c->person, s->cfg.queue_per_person);
    if (r == -EUSERS)
        return al_err(err, "queue", EUSERS,
                      "your organisation has %d runs queued, the most one organisation may have (queue_per_org = "
                      "%d); retry when some have started",
                      c->org, s->cfg.queue_per_org);
    if (r == -EAGAIN)
        return al_err(err, "queue", EAGAIN, "the run queue is full (%d runs, queue_max); retry later",
                      s->cfg.queue_max);
    return al_err(err, "queue", EIO, "the run queue cannot be read: %s", what);
}

static al_store_queue_limits limits_for(al_service *s, const char *person_id, const char *org_id, int extra, bool share) {
    return (al_store_queue_limits){ .node_id = s->node_id, .queue_max = s->cfg.queue_max,
                                    .person_id = share ? person_id : NULL,
                                    .org_id = share ? org_id : NULL, .person_extra = extra,
                                    .per_person = s->cfg.queue_per_person, .per_org = s->cfg.queue_per_org };
}

int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, al_error *ret_err) {
    /* the same counts as an admission, without one: an early answer for a
     * run not recorded yet (its admission decides, under the lock) */
    al_error err = { 0 };
    al_store_queue_counts c = { 0 };
    if (al_store_queue_counts_of(s->store, person_id, org_id, NULL, &c, &err) < 0)
        return no_room(s, -EIO, &c, err.msg, ret_err);
    c.person += pending;
    if (c.all >= s->cfg.queue_max)
        return no_room(s, -EAGAIN, &c, NULL, ret_err);
    if (c.person >= s->cfg.queue_per_person)
        return no_room(s, -EDQUOT, &c, NULL, ret_err);
    if (org_id && c.org >= s->cfg.queue_per_org)
        return no_room(s, -EUSERS, &c, NULL, ret_err);
    return 0;
}

int al_service_queue_cap(al_service *s, int workspace_cap) {
    return workspace_cap > 0 && workspace_cap < s->cfg.per_person ? workspace_cap : s->cfg.per_person;
}

int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       al_error *ret_err) {
    al_error err = { 0 };
    al_store_queue_counts c;
    al_store_queue_limits lim = limits_for(s, person_id, org_id, 0, share);
    int r = al_store_queue_admit(s->store, run_id, al_service_queue_cap(s, cap), &lim, &c, &err);
    if (r < 0)
        return no_room(s, r, &c, err.msg, ret_err);
    /* any node may claim it now */
    al_cluster_notify(s, AL_NOTIFY_QUEUE, run_id);
    pthread_mutex_lock(&s->mu);
    s->queue_gen++;
    pthread_cond_broadcast(&s->sched_cond);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int al_service_person_queued(al_service *s, const char *person_id) {
    al_error err = { 0 };
    int n = al_store_queued_count(s->store, person_id, NULL, NULL, &err);
    return n < 0 ? 0 : n;
}

int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved) {
    al_error err = { 0 };
    int64_t held = 0;
    if (al_store_runs_queued_price(s->store, org_id, &held, &err) < 0)
        held = 0;
    *ret_reserved = held;
    return al_credits_balance(s, org_id) - held;
}

int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id) {
    al_error err = { 0 };
    int64_t b = 0;
    /* a failed read counts as full: fail closed */
    if (al_store_runs_input_bytes(s->store, org_id,
                                  AL_RUN_BIT(AL_RUN_PENDING_APPROVAL) | AL_RUN_BIT(AL_RUN_QUEUED) |
                                      AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING),
                                  &b, &err) < 0)
        b = AL_USAGE_UNKNOWN;
    return b;
}

int al_service_cancel(al_service *s, const char *run_id) {
    if (al_service_cancel_local(s, run_id))
        return 1;
    /* Queued (claimed by some node or not): the store's state decides; a
     * run moved from queued to canceled here is never charged or started
     * (the move to provisioning is conditional on queued). */
    if (al_service_finish_canceled_queued(s, run_id) > 0)
        return 1;
    /* Active on another node: asked there (its watcher is told; its
     * runner reads the request after its box starts, in case the telling
     * came first). */
    al_error err = { 0 };
    if (al_store_run_cancel_request(s->store, run_id, &err) > 0) {
        al_cluster_notify(s, AL_NOTIFY_CANCEL, run_id);
        return 1;
    }
    return 0;
}
