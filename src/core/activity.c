/* A workspace's activity as it happens (activity.h): the node's hub, one
 * look at the store for every open stream. */
#include "activity.h"
#include "runs.h"
#include "service_int.h"
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../store/runs.h"

typedef struct al_activity_hub {
    pthread_mutex_t mu;     /* guards everything here and each stream's pending text */
    pthread_cond_t cond;    /* a look was handed out */
    al_activity *streams;   /* open streams, linked */
    bool looking;           /* a stream is asking the store for all */
    bool behind;            /* the last look's page was full: read on from AT/SEQ */
    char since[40];         /* the latest change read (or the hub's start) */
    char at[40];            /* the last look's last row, to read on from */
    int64_t seq;
    uint64_t gen;           /* the followers' wake-ups as of the last look */
    uint64_t read_ms;       /* when the store was last asked */
    /* what was handed out (a run's id, change and state, hashed) and when:
     * an open-addressed set of AL_ACTIVITY_SENT slots, kept at most half
     * full by dropping what is older than a look reaches back (a ring of
     * the last 2,048 re-sent 10,253 of a burst of 8,000 changes, as looks
     * 3 s back read them again) */
    struct sent {
        uint64_t key, at_ms;
    } *sent;
    size_t nsent;
} al_activity_hub;

void al_activity_hub_free(al_activity_hub *h) {
    if (!h)
        return;
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cond);
    free(h->sent);
    free(h);
}

/* S's hub, made with its first stream (under S's lock). */
static al_activity_hub *hub_of(al_service *s) {
    pthread_mutex_lock(&s->mu);
    if (!s->activity) {
        al_activity_hub *h = calloc(1, sizeof *h);
        if (h && !(h->sent = calloc(AL_ACTIVITY_SENT, sizeof *h->sent))) {
            free(h);
            h = NULL;
        }
        if (h) {
            pthread_mutex_init(&h->mu, NULL);
            pthread_cond_init(&h->cond, NULL);
            al_store_now(h->since, sizeof h->since);
            s->activity = h;
        }
    }
    al_activity_hub *h = s->activity;
    pthread_mutex_unlock(&s->mu);
    return h;
}

int al_activity_init(al_activity *a, al_service *s, const al_principal *p) {
    memset(a, 0, sizeof *a);
    a->s = s;
    snprintf(a->ws_id, sizeof a->ws_id, "%s", p->workspace_id);
    al_activity_hub *h = hub_of(s);
    if (!h)
        return -ENOMEM;
    pthread_mutex_lock(&h->mu);
    /* the first stream after none: the hub starts from now, not from
     * whatever changed while nobody watched */
    if (!h->streams && !h->looking) {
        al_store_now(h->since, sizeof h->since);
        h->behind = false;
    }
    a->next = h->streams;
    h->streams = a;
    a->joined = true;
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void al_activity_done(al_activity *a) {
    if (a->joined) {
        al_activity_hub *h = a->s->activity;
        pthread_mutex_lock(&h->mu);
        for (al_activity **pp = &h->streams; *pp; pp = &(*pp)->next)
            if (*pp == a) {
                *pp = a->next;
                break;
            }
        pthread_mutex_unlock(&h->mu);
        a->joined = false;
    }
    free(a->pending);
    a->pending = NULL;
    a->len = 0;
}

/* A change's key in the set: FNV-1a of its id, time and state (never 0,
 * an empty slot). */
static uint64_t sent_key(const al_store_run *r) {
    uint64_t x = 1469598103934665603ULL;
    const char *parts[] = { r->id, r->changed_at };
    for (size_t p = 0; p < 2; p++)
        for (const char *c = parts[p];; c++) {
            x = (x ^ (unsigned char)*c) * 1099511628211ULL;
            if (!*c)
                break;
        }
    x = (x ^ (uint64_t)r->state) * 1099511628211ULL;
    return x ? x : 1;
}

static bool was_sent(const al_activity_hub *h, uint64_t key) {
    for (size_t i = key & (AL_ACTIVITY_SENT - 1); h->sent[i].key; i = (i + 1) & (AL_ACTIVITY_SENT - 1))
        if (h->sent[i].key == key)
            return true;
    return false;
}

static void sent_put(struct sent *v, uint64_t key, uint64_t at_ms) {
    size_t i = key & (AL_ACTIVITY_SENT - 1);
    while (v[i].key && v[i].key != key)
        i = (i + 1) & (AL_ACTIVITY_SENT - 1);
    v[i] = (struct sent){ key, at_ms };
}

static void mark_sent(al_activity_hub *h, uint64_t key) {
    uint64_t now = al_now_ms();
    if (h->nsent + 1 > AL_ACTIVITY_SENT / 2) {
        /* keep what a look may still read again (with room for another
         * node's clock), in place of a copy: all of it, when even that is
         * more than half (a repeat is harmless, a full set is not) */
        uint64_t keep = now > AL_ACTIVITY_OVERLAP_MS + 10000 ? now - AL_ACTIVITY_OVERLAP_MS - 10000 : 0;
        size_t kept = 0;
        for (size_t i = 0; i < AL_ACTIVITY_SENT; i++)
            kept += h->sent[i].key && h->sent[i].at_ms >= keep;
        struct sent *v = kept <= AL_ACTIVITY_SENT / 4 ? calloc(AL_ACTIVITY_SENT, sizeof *v) : NULL;
        for (size_t i = 0; v && i < AL_ACTIVITY_SENT; i++)
            if (h->sent[i].key && h->sent[i].at_ms >= keep)
                sent_put(v, h->sent[i].key, h->sent[i].at_ms);
        if (v) {
            free(h->sent);
            h->sent = v;
            h->nsent = kept;
        } else {
            memset(h->sent, 0, AL_ACTIVITY_SENT * sizeof *h->sent);
            h->nsent = 0;
        }
    }
    sent_put(h->sent, key, now);
    h->nsent++;
}

/* TEXT appended to A's pending events (under the hub's lock). */
static void hand(al_activity *a, const char *text, size_t len) {
    if (a->overflow)
        return;
    if (a->len + len > AL_ACTIVITY_PENDING_MAX) {
        a->overflow = true;
        return;
    }
    char *p = realloc(a->pending, a->len + len + 1);
    if (!p) {
        a->overflow = true;
        return;
    }
    memcpy(p + a->len, text, len + 1);
    a->pending = p;
    a->len += len;
}

/* The rows B of one look handed to the streams of their workspaces, each
 * formatted once (under the hub's lock). */
static void fan_out(al_activity_hub *h, al_store_run_brief *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        al_store_run *r = &b[i].run;
        if (strcmp(r->changed_at, h->since) > 0)
            snprintf(h->since, sizeof h->since, "%s", r->changed_at);
        uint64_t key = sent_key(r);
        if (was_sent(h, key))
            continue;
        mark_sent(h, key);
        bool wanted = false;
        for (al_activity *a = h->streams; a && !wanted; a = a->next)
            wanted = strcmp(a->ws_id, r->workspace_id) == 0;
        if (!wanted)
            continue;
        json_t *doc = al_run_summary_json(&b[i]);
        /* compact JSON is one line: no newline can split an event */
        char *json = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        json_decref(doc);
        char *text = NULL;
        int len = json ? asprintf(&text, "event: run\ndata: %s\n\n", json) : -1;
        free(json);
        for (al_activity *a = h->streams; len > 0 && a; a = a->next)
            if (strcmp(a->ws_id, r->workspace_id) == 0)
                hand(a, text, (size_t)len);
        if (len > 0)
            free(text);
    }
}

/* One look at the store for every stream (the caller took h->looking;
 * called without the hub's lock, returns with it held). */
static int look(al_activity_hub *h, al_service *s, al_error *err) {
    char from[40];
    int64_t seq = -1;
    pthread_mutex_lock(&h->mu);
    al_cluster_time_after(-(int64_t)AL_ACTIVITY_OVERLAP_MS, from, sizeof from);
    /* from the older of the last change read and the overlap's start; on
     * from the last row when catching up on a full page */
    if (h->behind) {
        snprintf(from, sizeof from, "%s", h->at);
        seq = h->seq;
    } else if (strcmp(h->since, from) < 0)
        snprintf(from, sizeof from, "%s", h->since);
    h->read_ms = al_now_ms();
    pthread_mutex_unlock(&h->mu);
    al_store_run_brief *b = NULL;
    size_t n = 0;
    int r = al_store_run_changes_all(s->store, from, seq, AL_ACTIVITY_PAGE, &b, &n, err);
    pthread_mutex_lock(&h->mu);
    if (r < 0)
        return -EIO;
    h->behind = n == AL_ACTIVITY_PAGE;
    if (n > 0) {
        snprintf(h->at, sizeof h->at, "%s", b[n - 1].run.changed_at);
        h->seq = b[n - 1].run.seq;
    }
    fan_out(h, b, n);
    al_store_run_briefs_free(b, n);
    return 0;
}

/* A's pending events into *RET (under the hub's lock): whether there were. */
static bool take(al_activity *a, char **ret, size_t *ret_len) {
    if (!a->len)
        return false;
    *ret = a->pending;
    *ret_len = a->len;
    a->pending = NULL;
    a->len = 0;
    return true;
}

static bool past(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

al_follow_news al_activity_next(al_activity *a, const struct timespec *until, char **ret, size_t *ret_len,
                                al_error *err) {
    al_service *s = a->s;
    al_activity_hub *h = s->activity;
    *ret = NULL;
    *ret_len = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        uint64_t gen = s->event_gen;
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping)
            return AL_FOLLOW_STOPPING;
        pthread_mutex_lock(&h->mu);
        if (a->overflow) {
            pthread_mutex_unlock(&h->mu);
            al_err(err, "activity", ENOBUFS, "the client read more slowly than the workspace changed");
            return AL_FOLLOW_FAILED;
        }
        if (take(a, ret, ret_len)) {
            pthread_mutex_unlock(&h->mu);
            return AL_FOLLOW_EVENTS;
        }
        uint64_t since_read = al_now_ms() - h->read_ms;
        bool due = !h->looking && (since_read >= AL_ACTIVITY_POLL_MS ||
                                   (gen != h->gen && since_read >= AL_ACTIVITY_MIN_MS) || h->behind);
        if (due) {
            h->looking = true;
            h->gen = gen;
            pthread_mutex_unlock(&h->mu);
            int r = look(h, s, err);
            h->looking = false;
            pthread_cond_broadcast(&h->cond);
            if (r < 0) {
                pthread_mutex_unlock(&h->mu);
                return AL_FOLLOW_FAILED;
            }
            pthread_mutex_unlock(&h->mu);
            continue;
        }
        /* wait for a look's result, or AL_ACTIVITY_MIN_MS (to see the
         * followers' wake-ups) or UNTIL, whichever comes first */
        struct timespec next;
        clock_gettime(CLOCK_REALTIME, &next);
        next.tv_nsec += (long)AL_ACTIVITY_MIN_MS * 1000000L;
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        bool last = next.tv_sec > until->tv_sec || (next.tv_sec == until->tv_sec && next.tv_nsec >= until->tv_nsec);
        pthread_cond_timedwait(&h->cond, &h->mu, last ? until : &next);
        bool got = a->len > 0 || a->overflow;
        pthread_mutex_unlock(&h->mu);
        if (!got && past(until))
            return AL_FOLLOW_QUIET;
    }
}
