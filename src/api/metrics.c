/* The text of GET /metrics (metrics.h). */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/views.h"
#include "../util/util.h"

const al_run_state al_run_states_by_name[] = { AL_RUN_CANCELED,     AL_RUN_DENIED,  AL_RUN_ERROR,  AL_RUN_FAILED,
                                               AL_RUN_KILLED,       AL_RUN_PENDING_APPROVAL,       AL_RUN_PROVISIONING,
                                               AL_RUN_QUEUED,       AL_RUN_RUNNING, AL_RUN_SUCCEEDED, AL_RUN_TIMED_OUT };

const size_t al_run_states_by_name_n = ELEMENTSOF(al_run_states_by_name);

#define CACHE_MS 1000

void al_metrics_cache_init(al_metrics_cache *mc) {
    *mc = (al_metrics_cache){ 0 };
    pthread_mutex_init(&mc->mu, NULL);
}

void al_metrics_cache_destroy(al_metrics_cache *mc) { pthread_mutex_destroy(&mc->mu); }

/* The runs by state into RET, counted at most every CACHE_MS;
 * false when they never could be. */
static bool runs_by_state(al_metrics_cache *mc, al_service *s, int64_t ret[_AL_RUN_STATE_MAX]) {
    pthread_mutex_lock(&mc->mu);
    if ((!mc->have || al_now_ms() - mc->at_ms >= CACHE_MS) && !mc->counting) {
        mc->counting = true;
        pthread_mutex_unlock(&mc->mu);
        al_error err = { 0 };
        int64_t counts[_AL_RUN_STATE_MAX];
        int r = al_view_runs_by_state(s, counts, &err);
        pthread_mutex_lock(&mc->mu);
        mc->counting = false;
        if (r == 0) {
            memcpy(mc->counts, counts, sizeof counts);
            mc->have = true;
        }
        mc->at_ms = al_now_ms();
    }
    bool have = mc->have;
    memcpy(ret, mc->counts, sizeof mc->counts);
    pthread_mutex_unlock(&mc->mu);
    return have;
}

char *al_metrics_text(al_metrics_cache *mc, al_service *s, unsigned long long late, unsigned long long evicted) {
    int64_t counts[_AL_RUN_STATE_MAX];
    bool have = runs_by_state(mc, s, counts);
    size_t cap = 8192;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    size_t o = 0;
#define OUT(...) o += (size_t)snprintf(t + o, o < cap ? cap - o : 0, __VA_ARGS__)
    OUT("# HELP airlock_runs Runs by state.\n# TYPE airlock_runs gauge\n");
    /* a state no run is in has no line, as a GROUP BY has no row */
    for (size_t i = 0; have && i < al_run_states_by_name_n; i++)
        if (counts[al_run_states_by_name[i]] > 0)
            OUT("airlock_runs{state=\"%s\"} %lld\n", al_run_state_name(al_run_states_by_name[i]),
                (long long)counts[al_run_states_by_name[i]]);
    al_view_figures fig;
    al_view_figures_get(s, &fig);
    const al_view_figures *st = &fig;
    OUT("# HELP airlock_store_statements_total Statements the store sent to its backend (%s).\n"
        "# TYPE airlock_store_statements_total counter\nairlock_store_statements_total %llu\n",
        st->store_backend, (unsigned long long)st->store.statements);
    OUT("# HELP airlock_store_failures_total Statements that failed.\n# TYPE airlock_store_failures_total counter\n"
        "airlock_store_failures_total %llu\n", (unsigned long long)st->store.failures);
    OUT("# HELP airlock_store_units_total Units of work (transactions) begun.\n# TYPE airlock_store_units_total counter\n"
        "airlock_store_units_total %llu\n", (unsigned long long)st->store.units);
    OUT("# HELP airlock_store_busy_seconds_total Time spent in the store, waits for its connection included.\n"
        "# TYPE airlock_store_busy_seconds_total counter\nairlock_store_busy_seconds_total %.6f\n",
        (double)st->store.busy_ns / 1e9);
    if (st->store.has_steps)
        OUT("# HELP airlock_store_vm_steps_total The work of the store's statements as SQLite counts it (virtual "
            "machine steps): it grows with the rows their plans read, a history read whole included.\n"
            "# TYPE airlock_store_vm_steps_total counter\nairlock_store_vm_steps_total %llu\n",
            (unsigned long long)st->store.steps);
    al_view_driver drv;
    al_view_driver_get(s, false, &drv);
    json_t *pool = drv.pool;
    if (pool) {
        uint64_t hits = (uint64_t)json_integer_value(json_object_get(pool, "hits"));
        uint64_t misses = (uint64_t)json_integer_value(json_object_get(pool, "misses"));
        OUT("# HELP airlock_pool_boxes Boxes the driver made ahead of need, by state.\n"
            "# TYPE airlock_pool_boxes gauge\nairlock_pool_boxes{state=\"idle\"} %lld\n"
            "airlock_pool_boxes{state=\"starting\"} %lld\n"
            "airlock_pool_boxes{state=\"in_use\"} %lld\nairlock_pool_boxes{state=\"removing\"} %lld\n",
            (long long)json_integer_value(json_object_get(pool, "idle")),
            (long long)json_integer_value(json_object_get(pool, "starting")),
            (long long)json_integer_value(json_object_get(pool, "in_use")),
            (long long)json_integer_value(json_object_get(pool, "removing")));
        OUT("# HELP airlock_pool_per_shape Boxes the pool may keep for each shape of run (warm_pool).\n"
            "# TYPE airlock_pool_per_shape gauge\nairlock_pool_per_shape %lld\n"
            "# HELP airlock_pool_shapes Shapes of run the pool keeps boxes for.\n"
            "# TYPE airlock_pool_shapes gauge\nairlock_pool_shapes %zu\n",
            (long long)json_integer_value(json_object_get(pool, "per_shape")),
            json_array_size(json_object_get(pool, "shapes")));
        /* (a pool that counts what its boxes hold: the native driver's) */
        if (json_object_get(pool, "memory_budget_bytes"))
            OUT("# HELP airlock_pool_memory_bytes What the pool's boxes hold, and may hold in all.\n"
                "# TYPE airlock_pool_memory_bytes gauge\nairlock_pool_memory_bytes{of=\"held\"} %lld\n"
                "airlock_pool_memory_bytes{of=\"budget\"} %lld\n",
                (long long)json_integer_value(json_object_get(pool, "memory_bytes")),
                (long long)json_integer_value(json_object_get(pool, "memory_budget_bytes")));
        OUT("# HELP airlock_pool_runs_total Runs that found a box made for them (hit) or made their own (miss).\n"
            "# TYPE airlock_pool_runs_total counter\nairlock_pool_runs_total{result=\"hit\"} %llu\n"
            "airlock_pool_runs_total{result=\"miss\"} %llu\n", (unsigned long long)hits, (unsigned long long)misses);
    }
    al_view_driver_done(&drv);
    OUT("# HELP airlock_http_connections_cut_total Connections closed by airlock: a request not in by its deadline "
        "(request_timeout_s), or the oldest without a valid key, to keep connections_reserved.\n"
        "# TYPE airlock_http_connections_cut_total counter\nairlock_http_connections_cut_total{reason=\"deadline\"} "
        "%llu\nairlock_http_connections_cut_total{reason=\"reserve\"} %llu\n", late, evicted);
    OUT("# HELP airlock_queue_length Runs waiting for a slot (every node's).\n# TYPE airlock_queue_length gauge\n"
        "airlock_queue_length %d\n", st->queued);
    OUT("# HELP airlock_boxes_alive Runs being provisioned or running.\n# TYPE airlock_boxes_alive gauge\nairlock_boxes_alive %d\n",
        st->boxes_alive);
    OUT("# HELP airlock_runs_started_total Runs started since the service started.\n# TYPE airlock_runs_started_total counter\n"
        "airlock_runs_started_total %llu\n", (unsigned long long)st->runs_started);
    OUT("# HELP airlock_package_layers_removed_total Package layers removed by the layer collection (unused past "
        "package_layer_retention_days, or the least recently used over package_layers_max_mb).\n"
        "# TYPE airlock_package_layers_removed_total counter\nairlock_package_layers_removed_total %llu\n",
        (unsigned long long)st->layers_removed);
    static const char *const le[12] = { "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "+Inf" };
    OUT("# HELP airlock_run_duration_seconds Time from provisioning to the end of a run.\n"
        "# TYPE airlock_run_duration_seconds histogram\n");
    for (int i = 0; i < 12; i++)
        OUT("airlock_run_duration_seconds_bucket{le=\"%s\"} %llu\n", le[i], (unsigned long long)st->duration_buckets[i]);
    OUT("airlock_run_duration_seconds_sum %.3f\nairlock_run_duration_seconds_count %llu\n", st->duration_sum,
        (unsigned long long)st->runs_finished);
#undef OUT
    return t;
}
