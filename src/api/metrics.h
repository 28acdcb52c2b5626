/*
 * The text of GET /metrics (Prometheus' text format): the runs by state,
 * the store's, the pool's, the queue's and the connections' figures. Who
 * may read it is operator.h's; its caching, http.c's.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "../core/service.h"

/* The run states in the order of their names: the order the lines always had. */
extern const al_run_state al_run_states_by_name[];
extern const size_t al_run_states_by_name_n;

/* The text (malloc'd), from S and COUNTS (the runs by state; HAVE: they
 * could be counted), LATE and EVICTED (the connections the guard cut):
 * NULL out of memory. */
char *al_metrics_text(al_service *s, const int64_t counts[_AL_RUN_STATE_MAX], bool have, unsigned long long late,
                      unsigned long long evicted);
