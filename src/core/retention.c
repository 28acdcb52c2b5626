/*
 * Retention: an ended run keeps its code, inputs, output and events for
 * its workspace's run_retention_s (30 days unless set), then loses them;
 * its row stays as its summary (state, times, exit, sizes, error, price),
 * and its audit events stay in the audit chain. Artifacts keep their own
 * lifecycle. The sweep runs on one node at a time: whichever first moves
 * the store's due time forward (al_store_sweep_claim), so two nodes never
 * both sweep, and a node that dies mid-sweep leaves the rest to the next.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../drivers/install.h"

#include "service.h"
#include "service_int.h"

/* At most this many runs a sweep: the scheduler's thread does it between
 * claims, so one sweep stays short; the rest is the next sweep's. */
#define SWEEP_RUNS_MAX 512
#define SWEEP_PAGE 64

/* WS_ID's retention in seconds: its setting (the default included); 0,
 * nothing of it swept this time, when its settings cannot be read: a
 * failure never makes a sweep keep less. */
static int64_t retention_of(al_service *s, const char *ws_id) {
    al_error err = { 0 };
    al_settings st;
    int64_t secs = al_settings_get(s, ws_id, &st, &err) == 0 ? st.run_retention_s : 0;
    al_settings_done(&st);
    return secs;
}

/* Expire up to BUDGET runs of WS_ID: how many, or -errno. */
static int sweep_workspace(al_service *s, const char *ws_id, int budget) {
    int64_t secs = retention_of(s, ws_id);
    if (secs <= 0)
        return 0;
    char before[40], now[40];
    al_cluster_time_after(-secs * 1000, before, sizeof before);
    al_store_now(now, sizeof now);
    char ids[SWEEP_PAGE][40];
    al_error err = { 0 };
    int done = 0;
    while (done < budget) {
        int want = budget - done < SWEEP_PAGE ? budget - done : SWEEP_PAGE;
        int n = al_store_runs_expirable(s->store, ws_id, before, ids, want, &err);
        if (n < 0)
            return n;
        int expired = 0;
        for (int i = 0; i < n; i++) {
            int r = al_store_run_expire(s->store, ids[i], now, &err);
            if (r < 0)
                return r;
            expired += r;
        }
        done += expired;
        if (n < want || expired == 0)
            break;
    }
    return done;
}

/* One layer removed: logged (a layer is shared by every workspace whose
 * threads name the same set, so it is no workspace's audit chain's) and
 * counted. */
static void layer_removed(void *ud, const al_layer_info *li, const char *why) {
    al_service *s = ud;
    pthread_mutex_lock(&s->mu);
    s->layers_removed++;
    pthread_mutex_unlock(&s->mu);
    al_service_log(s, AL_LOG_INFO, "layer.removed", json_pack("{s:s, s:I, s:s, s:I}", "key", li->key, "bytes",
                                                              (json_int_t)li->bytes, "why", why, "last_used",
                                                              (json_int_t)li->used));
}

int al_layers_collect(al_service *s) {
    char layers[PATH_MAX + 16];
    snprintf(layers, sizeof layers, "%s/layers", s->cfg.state_dir);
    al_error err = { 0 };
    int r = al_install_layers_collect(layers, (int64_t)time(NULL), (int64_t)s->cfg.package_layer_retention_days * 86400,
                                      (uint64_t)s->cfg.package_layers_max_mb << 20, layer_removed, s, &err);
    if (r < 0)
        al_service_log(s, AL_LOG_WARN, "layers.collect_failed", json_pack("{s:s}", "error", err.msg));
    return r;
}

int al_retention_sweep(al_service *s) {
    /* this node's layers (each node has its own store of them): not the
     * claimed sweep's, which is one node's for the cluster */
    al_layers_collect(s);
    char now[40], next[40];
    al_store_now(now, sizeof now);
    al_cluster_time_after((int64_t)s->cfg.run_sweep_s * 1000, next, sizeof next);
    al_error err = { 0 };
    int c = al_store_sweep_claim(s->store, "runs", s->node_id, now, next, &err);
    if (c <= 0)
        return c;
    char after[40] = "", ws[SWEEP_PAGE][40];
    int total = 0, r = 0;
    while (total < SWEEP_RUNS_MAX) {
        int n = al_store_workspace_ids(s->store, after, ws, SWEEP_PAGE, &err);
        if (n <= 0) {
            r = n;
            break;
        }
        for (int i = 0; i < n && total < SWEEP_RUNS_MAX && r >= 0; i++)
            if ((r = sweep_workspace(s, ws[i], SWEEP_RUNS_MAX - total)) > 0)
                total += r;
        if (r < 0)
            break;
        memcpy(after, ws[n - 1], sizeof after);
        if (n < SWEEP_PAGE)
            break;
    }
    if (total > 0 || r < 0)
        al_service_log(s, r < 0 ? AL_LOG_ERROR : AL_LOG_INFO, r < 0 ? "runs.sweep_failed" : "runs.expired",
                       json_pack("{s:i, s:s?}", "runs", total, "error", r < 0 ? err.msg : NULL));
    return r < 0 ? r : total;
}
