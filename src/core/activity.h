/*
 * A workspace's activity as it happens (GET /v1/events): each run of the
 * workspace made or moved to another state, on this node or any other on
 * a shared store, handed out as its list entry.
 *
 * How it hears: the store's runs carry changed_at (set with every state
 * move). The node takes ONE look at the store for all its open streams,
 * whatever their number and workspaces (the hub): "every run changed since
 * the last look", a single indexed query (runs_changed_all), each entry
 * formatted once and handed to the streams of its workspace. A look is
 * taken by whichever waiting stream finds it due: at once when a run of
 * this node (or, on PostgreSQL, of another, through the event
 * notifications) woke the service's followers, at most every
 * AL_ACTIVITY_MIN_MS, and every AL_ACTIVITY_POLL_MS in any case; never
 * while no stream is open. So the store sees at most 1000/MIN_MS looks a
 * second from a node, not that many per stream. Each look reads at most
 * AL_ACTIVITY_PAGE rows (a fuller backlog is read on, page after page,
 * from the last row's (changed_at, seq)). Looks reach back
 * AL_ACTIVITY_OVERLAP_MS, so that a change committed late (another node's
 * clock, a long transaction) is not skipped; what was already handed out
 * in that window is not handed out again (and an entry is the whole run,
 * so a repeat would be harmless).
 *
 * A stream whose client does not read keeps at most AL_ACTIVITY_PENDING_MAX
 * bytes waiting; past that it is ended (the page lists again and reopens
 * it), so a reader that never reads cannot grow the node's memory.
 */
#pragma once

#include <time.h>

#include "follow.h"
#include "views.h"

#define AL_ACTIVITY_POLL_MS 1000
#define AL_ACTIVITY_MIN_MS 200
#define AL_ACTIVITY_OVERLAP_MS 3000
#define AL_ACTIVITY_PAGE 500
#define AL_ACTIVITY_SENT 65536 /* slots of the set of what was handed out: a power of 2 */
#define AL_ACTIVITY_PENDING_MAX (1u << 20)

typedef struct al_activity {
    al_service *s;
    struct al_activity *next; /* the hub's list of open streams */
    char ws_id[40];
    char *pending;            /* the events handed to it and not taken yet */
    size_t len;
    bool overflow;            /* PENDING passed AL_ACTIVITY_PENDING_MAX */
    bool joined;
} al_activity;

struct al_activity_hub;
/* The node's hub (service_int.h holds one; freed with the service). */
void al_activity_hub_free(struct al_activity_hub *h);
/* Watch P's workspace from now on: -ENOMEM, or 0 (al_activity_done after). */
int al_activity_init(al_activity *a, al_service *s, const al_principal *p);
void al_activity_done(al_activity *a);
/* The events ("event: run\ndata: ENTRY\n\n"...) since the last call into
 * *RET (free), waiting until UNTIL (CLOCK_REALTIME) for one:
 * AL_FOLLOW_EVENTS, AL_FOLLOW_QUIET, AL_FOLLOW_STOPPING or AL_FOLLOW_FAILED
 * (ERR: the store failed, or the client read too slowly). */
al_follow_news al_activity_next(al_activity *a, const struct timespec *until, char **ret, size_t *ret_len,
                                al_error *err);
