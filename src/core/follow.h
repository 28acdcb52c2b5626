/*
 * One follower of a run's events, for every surface that streams them
 * (the REST event stream, MCP's calls): it reads what came after the last
 * event it handed out and, when nothing did, waits for the run's next
 * event, and it says when nothing more will come. A surface decides only
 * what to make of the events and how long to wait.
 */
#pragma once

#include <time.h>

#include "service.h"

typedef al_store_event al_follow_event;

typedef struct al_follow {
    al_service *s;
    char run_id[40];
    int64_t last;       /* the number of the last event handed out */
    bool quiet;         /* the last call waited for nothing: */
    uint64_t quiet_gen; /* ... at this generation of the run's events */
    uint64_t read_ms;   /* when the store was last asked */
} al_follow;

typedef enum al_follow_news {
    AL_FOLLOW_EVENTS,   /* events came: in *RET, LAST moved past them */
    AL_FOLLOW_QUIET,    /* nothing came before UNTIL */
    AL_FOLLOW_DONE,     /* nothing more will: the result is behind LAST, or the run's events were swept */
    AL_FOLLOW_STOPPING, /* the service stops */
    AL_FOLLOW_FAILED,   /* the store failed: ERR says why */
    _AL_FOLLOW_MAX,
} al_follow_news;

/* Follow RUN_ID of S from after event LAST (0: from the start). */
void al_follow_init(al_follow *f, al_service *s, const char *run_id, int64_t last);
/* At most MAX events after F's last into *RET and *RET_N (al_follow_events_free),
 * waiting for one until UNTIL (CLOCK_REALTIME) when none has come. */
al_follow_news al_follow_next(al_follow *f, int64_t max, const struct timespec *until, al_follow_event **ret,
                              size_t *ret_n, al_error *err);
void al_follow_events_free(al_follow_event *evs, size_t n);
