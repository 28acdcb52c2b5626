/* A workspace's activity as it happens (activity.h). */
#include "activity.h"
#include "service_int.h"

#include <stdio.h>
#include <string.h>

#include "../store/runs.h"

/* The store's time text (al_store_now's shape) MS milliseconds ago. */
static void time_ago(uint64_t ms, char *buf, size_t len) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t at = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 - (int64_t)ms;
    time_t secs = (time_t)(at / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", base, (int)(at % 1000));
}

void al_activity_init(al_activity *a, al_service *s, const al_principal *p) {
    memset(a, 0, sizeof *a);
    a->s = s;
    snprintf(a->ws_id, sizeof a->ws_id, "%s", p->workspace_id);
    al_store_now(a->since, sizeof a->since);
}

static uint64_t gen_now(al_service *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t g = s->event_gen;
    pthread_mutex_unlock(&s->mu);
    return g;
}

static bool was_sent(const al_activity *a, const al_store_run *r) {
    size_t n = a->nsent < AL_ACTIVITY_SENT ? a->nsent : AL_ACTIVITY_SENT;
    for (size_t i = 0; i < n; i++)
        if (a->sent[i].state == r->state && strcmp(a->sent[i].id, r->id) == 0 &&
            strcmp(a->sent[i].changed_at, r->changed_at) == 0)
            return true;
    return false;
}

static void mark_sent(al_activity *a, const al_store_run *r) {
    size_t i = a->nsent++ % AL_ACTIVITY_SENT;
    snprintf(a->sent[i].id, sizeof a->sent[i].id, "%s", r->id);
    snprintf(a->sent[i].changed_at, sizeof a->sent[i].changed_at, "%s", r->changed_at);
    a->sent[i].state = r->state;
}

/* One look at the store: what changed and was not handed out yet, in
 * *RET (kept in order, the rest freed). */
static int look(al_activity *a, al_view_run_brief **ret, size_t *ret_n, al_error *err) {
    char from[40];
    time_ago(AL_ACTIVITY_OVERLAP_MS, from, sizeof from);
    /* from the older of the last change seen and the overlap's start,
     * unless catching up on a full page */
    if (a->behind || strcmp(a->since, from) < 0)
        snprintf(from, sizeof from, "%s", a->since);
    al_store_run_brief *b = NULL;
    size_t n = 0;
    a->read_ms = al_now_ms();
    if (al_store_run_changes(a->s->store, a->ws_id, from, AL_ACTIVITY_PAGE, &b, &n, err) < 0)
        return -EIO;
    a->behind = n == AL_ACTIVITY_PAGE;
    /* the entries to hand out move to the front; the others are freed */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        al_store_run *r = &b[i].run;
        if (strcmp(r->changed_at, a->since) > 0)
            snprintf(a->since, sizeof a->since, "%s", r->changed_at);
        if (was_sent(a, r)) {
            al_store_run_brief_clear(&b[i]);
            continue;
        }
        mark_sent(a, r);
        if (k != i)
            b[k] = b[i];
        k++;
    }
    *ret = b;
    *ret_n = k;
    return 0;
}

al_follow_news al_activity_next(al_activity *a, const struct timespec *until, al_view_run_brief **ret, size_t *ret_n,
                                al_error *err) {
    al_service *s = a->s;
    *ret = NULL;
    *ret_n = 0;
    for (;;) {
        uint64_t gen = gen_now(s), since_read = al_now_ms() - a->read_ms;
        bool due = since_read >= AL_ACTIVITY_POLL_MS || (gen != a->gen && since_read >= AL_ACTIVITY_MIN_MS) ||
                   a->behind;
        if (due) {
            a->gen = gen;
            if (look(a, ret, ret_n, err) < 0)
                return AL_FOLLOW_FAILED;
            if (*ret_n > 0)
                return AL_FOLLOW_EVENTS;
            al_store_run_briefs_free(*ret, 0);
            *ret = NULL;
        }
        /* wait for a wake-up, the next look's time or UNTIL, whichever
         * comes first */
        struct timespec next;
        clock_gettime(CLOCK_REALTIME, &next);
        uint64_t wait_ms = gen != a->gen ? AL_ACTIVITY_MIN_MS : AL_ACTIVITY_POLL_MS;
        uint64_t waited = al_now_ms() - a->read_ms;
        wait_ms = waited < wait_ms ? wait_ms - waited : 1;
        next.tv_sec += (time_t)(wait_ms / 1000);
        next.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        bool last = next.tv_sec > until->tv_sec || (next.tv_sec == until->tv_sec && next.tv_nsec >= until->tv_nsec);
        const struct timespec *deadline = last ? until : &next;
        pthread_mutex_lock(&s->mu);
        while (s->event_gen == gen && !s->stopping &&
               pthread_cond_timedwait(&s->events_cond, &s->mu, deadline) != ETIMEDOUT)
            ;
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping)
            return AL_FOLLOW_STOPPING;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > until->tv_sec || (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))
            return AL_FOLLOW_QUIET;
    }
}
