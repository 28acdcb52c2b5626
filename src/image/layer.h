/*
 * The package layer store (issue 38): a run's installed packages, one
 * directory per set, under the state's layers/ directory:
 *
 *   layers/sha256-KEY/           a complete layer (layer.json written last)
 *     python/                    pip --target's tree (the box's /opt/airlock/python)
 *     node/node_modules/         npm's tree (the box's /node_modules)
 *     python-report.json, node/package.json, node/package-lock.json
 *     layer.json                 what is in it (below)
 *   layers/sha256-KEY.lock       flock'd while one helper installs KEY
 *   layers/tmp-XXXXXX/           an install under way (renamed when done)
 *
 * KEY is the sha256 of everything the install depends on (al_layer_key),
 * so a layer is reused only for the same specs on the same images from
 * the same registries. What is in a layer came out of an install box: its
 * files were copied by the box's collect (regular files and directories
 * only, beneath its /out, within caps), and the reports layer.json is made
 * from (pip's --report, npm's package-lock.json) are read as hostile data,
 * with caps. The store never logs or exits.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* what a layer's key is made of */
typedef struct al_layer_want {
    const char *image;            /* the run's image digest, or "host" */
    const char *installer;        /* the installer image's digest */
    char *const *python;
    size_t n_python;
    char *const *node;
    size_t n_node;
    const char *index_python, *registry_node;
    bool scripts;
} al_layer_want;

/* The most a report may be, and hold: bigger is refused, not cut */
#define AL_LAYER_REPORT_MAX (16u << 20)
#define AL_LAYER_PACKAGES_MAX 10000

/* The key: sha256 over ("airlock-layer-1", image, installer, "python", the
 * python specs sorted, "node", the node specs sorted, index, registry,
 * scripts), each NUL-terminated, as 64 hex digits. */
void al_layer_key(const al_layer_want *w, char ret_key[65]);

/* LAYERS_DIR (made, 0755, when missing) opened in *RET_FD. */
int al_layer_dir_open(const char *layers_dir, int *ret_fd, al_error *err);

/* The complete layer KEY under LAYERS_FD: 1 with its directory in
 * *RET_FD (O_PATH) and its layer.json in *RET_META (both may be NULL), 0
 * when there is none (or none complete), -errno on failure. */
int al_layer_find(int layers_fd, const char *key, int *ret_fd, json_t **ret_meta, al_error *err);

/* KEY's lock held (flock, exclusive) in *RET_FD: polled every 100 ms, for
 * at most TIMEOUT_MS, giving up (-ECANCELED) as soon as CANCEL_FD (-1:
 * none) is readable; -ETIMEDOUT when another helper held it that long. */
int al_layer_lock(int layers_fd, const char *key, int cancel_fd, uint64_t timeout_ms, int *ret_fd, al_error *err);

/* KEY's lock held shared in *RET_FD while a run's box has the layer
 * mounted: a collector (al_layer_remove) takes it exclusively, so a layer
 * in use is never removed. Waits as al_layer_lock does (an install holds
 * it exclusively). Take it, then find the layer again: it may have been
 * removed before. */
int al_layer_use(int layers_fd, const char *key, int cancel_fd, uint64_t timeout_ms, int *ret_fd, al_error *err);

/* The layer's last use (LAYER_FD's used file, its mtime) set to now. */
int al_layer_touch(int layer_fd);

/* A layer as the collector sees it. */
typedef struct al_layer_info {
    char key[65];
    int64_t used;   /* last use, seconds since the epoch (made, when never used) */
    uint64_t bytes; /* its blocks */
} al_layer_info;

/* The complete-or-not layers under LAYERS_FD, least recently used first,
 * in *RET (free()) and *RET_N. */
int al_layer_list(int layers_fd, al_layer_info **ret, size_t *ret_n, al_error *err);

/* KEY's layer removed unless in use: 1 removed, 0 busy or absent. */
int al_layer_remove(int layers_fd, const char *key, al_error *err);

typedef void (*al_layer_removed_fn)(void *ud, const al_layer_info *li, const char *why);

/* Garbage collection, a function of the directory alone: each layer
 * unused for MAX_AGE_S or more (-1: no age rule; 0: every one) is removed ("unused"),
 * then, least recently used first, layers while the store holds more than
 * MAX_BYTES ("store_full"). A layer in use (al_layer_use) or being
 * installed is skipped. FN is told each removal. How many were removed,
 * or -errno. */
int al_layer_collect(int layers_fd, int64_t now, int64_t max_age_s, uint64_t max_bytes, al_layer_removed_fn fn,
                     void *ud, al_error *err);

/* A new empty directory tmp-XXXXXX under LAYERS_FD (its name in RET_NAME,
 * its fd in *RET_FD, holding the directory's flock: keep it open while the
 * install lives; a tmp- directory whose lock is free is a dead install's,
 * removed by the next al_layer_dir_open). */
int al_layer_tmp(int layers_fd, char ret_name[16], int *ret_fd, al_error *err);

/* pip's --report (TMP_FD/python-report.json) as [{"name","version",
 * "sha256"}] in *RET; node's lock (TMP_FD/node/package-lock.json) as
 * [{"name","version","integrity"}]. A missing report is an empty list; one
 * that is too big, not JSON, or holds a field of the wrong form, an error. */
int al_layer_python_report(int tmp_fd, json_t **ret, al_error *err);
int al_layer_node_report(int tmp_fd, json_t **ret, al_error *err);

/* META (layer.json's fields) written as TMP_NAME/layer.json, synced, and
 * TMP_NAME renamed to sha256-KEY. Another helper's complete layer there
 * already (it installed the same set without this one's lock: never, but
 * harmless) wins: TMP_NAME is removed and 0 returned. */
int al_layer_commit(int layers_fd, const char *tmp_name, const char *key, json_t *meta, al_error *err);

/* TMP_NAME removed (a failed install). */
void al_layer_discard(int layers_fd, const char *tmp_name);
