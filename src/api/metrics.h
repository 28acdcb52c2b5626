/*
 * The text of GET /metrics (Prometheus' text format): the runs by state,
 * the store's, the pool's, the queue's and the connections' figures. Who
 * may read it is operator.h's; its caching, http.c's.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/service.h"

/* The run states in the order of their names: the order the lines always had. */
extern const al_run_state al_run_states_by_name[];
extern const size_t al_run_states_by_name_n;

/* /metrics is read often (by anyone, where operator_access is open): its
 * count of the runs table is made at most once a second, by one caller at
 * a time. */
typedef struct al_metrics_cache {
    pthread_mutex_t mu;
    int64_t counts[_AL_RUN_STATE_MAX];
    bool have;
    uint64_t at_ms;
    bool counting;
} al_metrics_cache;

void al_metrics_cache_init(al_metrics_cache *mc);
void al_metrics_cache_destroy(al_metrics_cache *mc);

/* The text (malloc'd), from S, the runs by state (through MC), LATE and
 * EVICTED (the connections the guard cut): NULL out of memory. */
char *al_metrics_text(al_metrics_cache *mc, al_service *s, unsigned long long late, unsigned long long evicted);
