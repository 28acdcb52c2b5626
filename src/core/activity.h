/*
 * A workspace's activity as it happens (GET /v1/events): each run of the
 * workspace made or moved to another state, on this node or any other on
 * a shared store, handed out as its list entry.
 *
 * How it hears: the store's runs carry changed_at (set with every state
 * move), and a watcher reads "what changed since my last look" with one
 * indexed query (runs_changed): at once when a run of this node (or, on
 * PostgreSQL, of another, through the event notifications) woke the
 * service's followers, at most every AL_ACTIVITY_MIN_MS, and every
 * AL_ACTIVITY_POLL_MS in any case (a missed wake-up costs that much
 * delay). Each look reads at most AL_ACTIVITY_PAGE rows. Looks reach back
 * AL_ACTIVITY_OVERLAP_MS before the last change seen, so that a change
 * committed late (another node's clock, a long transaction) is not
 * skipped; what was already handed out in that window is not handed out
 * again (and an entry is the whole run, so a repeat would be harmless).
 */
#pragma once

#include <time.h>

#include "follow.h"
#include "views.h"

#define AL_ACTIVITY_POLL_MS 1000
#define AL_ACTIVITY_MIN_MS 200
#define AL_ACTIVITY_OVERLAP_MS 3000
#define AL_ACTIVITY_PAGE 100
#define AL_ACTIVITY_SENT 256

typedef struct al_activity {
    al_service *s;
    char ws_id[40];
    char since[40];     /* the latest change handed out (or the start) */
    bool behind;        /* the last look's page was full: read on from SINCE, no overlap */
    uint64_t gen;       /* the followers' wake-ups as of the last look */
    uint64_t read_ms;   /* when the store was last asked */
    struct {
        char id[40];
        char changed_at[40];
        al_run_state state;
    } sent[AL_ACTIVITY_SENT]; /* a ring of what was handed out */
    size_t nsent;
} al_activity;

/* Watch P's workspace from now on. */
void al_activity_init(al_activity *a, al_service *s, const al_principal *p);
/* The runs that changed since the last call into *RET (al_view_run_briefs_free),
 * waiting until UNTIL (CLOCK_REALTIME) for one: AL_FOLLOW_EVENTS,
 * AL_FOLLOW_QUIET, AL_FOLLOW_STOPPING or AL_FOLLOW_FAILED (ERR). */
al_follow_news al_activity_next(al_activity *a, const struct timespec *until, al_view_run_brief **ret, size_t *ret_n,
                                al_error *err);
