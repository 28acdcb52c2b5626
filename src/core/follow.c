/* One follower of a run's events (follow.h). */
#include "follow.h"
#include "service_int.h"

#include <stdio.h>

#include "views.h"
#include "../store/runs.h"

/* A quiet follower asks the store again at least this often, woken or not:
 * a wake-up that was missed (another node's event, told late) costs at most
 * this much delay, as the streams' keepalive always did. */
#define REREAD_MS 15000

void al_follow_init(al_follow *f, al_service *s, const char *run_id, int64_t last) {
    *f = (al_follow){ .s = s, .last = last };
    snprintf(f->run_id, sizeof f->run_id, "%s", run_id);
}

void al_follow_events_free(al_follow_event *evs, size_t n) { al_store_events_free(evs, n); }

al_follow_news al_follow_next(al_follow *f, int64_t max, const struct timespec *until, al_follow_event **ret,
                              size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    for (;;) {
        /* the generation first: an event written after it wakes the wait below */
        uint64_t gen = al_service_run_event_gen(f->s, f->run_id);
        /* a follower that waited for nothing and was not woken since has
         * nothing new to read: it waits again without asking the store */
        if (!(f->quiet && gen == f->quiet_gen && al_now_ms() - f->read_ms < REREAD_MS)) {
            f->quiet = false;
            f->read_ms = al_now_ms();
            if (al_run_events_after(f->s, f->run_id, f->last, max, ret, ret_n, err) < 0)
                return AL_FOLLOW_FAILED;
            if (*ret_n > 0) {
                f->last = (*ret)[*ret_n - 1].seq;
                return AL_FOLLOW_EVENTS;
            }
            al_store_events_free(*ret, *ret_n);
            *ret = NULL;
            /* one who already has the result (Last-Event-ID past it) has
             * nothing more coming */
            if (al_store_event_result_by(f->s->store, f->run_id, f->last, err) > 0)
                return AL_FOLLOW_DONE;
            /* expired while it was followed: its events (the result too)
             * were swept, and nothing more will come */
            if (al_run_events_gone(f->s, f->run_id))
                return AL_FOLLOW_DONE;
        }
        if (al_service_wait_run_event(f->s, f->run_id, gen, until))
            continue;
        if (al_view_stopping(f->s))
            return AL_FOLLOW_STOPPING;
        f->quiet = true;
        f->quiet_gen = gen;
        return AL_FOLLOW_QUIET;
    }
}
