/* A thread's package set (packages.h). */
#include "packages.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void al_store_thread_packages_free(al_store_thread_packages *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].specs);
        free(v[i].layer);
        free(v[i].resolved);
    }
    free(v);
}

static int from_row(json_t *row, void *rec, al_error *err) {
    al_store_thread_packages *r = rec;
    const char *specs = json_string_value(json_object_get(row, "specs"));
    const char *layer = json_string_value(json_object_get(row, "layer"));
    const char *resolved = json_string_value(json_object_get(row, "resolved"));
    if (!al_col_text(row, "lang", r->lang, sizeof r->lang, false) ||
        !al_col_text(row, "updated_at", r->updated_at, sizeof r->updated_at, false) || !specs || !layer || !resolved)
        return al_err(err, "packages", EIO, "a thread's stored package set is malformed");
    if (!(r->specs = strdup(specs)) || !(r->layer = strdup(layer)) || !(r->resolved = strdup(resolved)))
        return al_err(err, "packages", ENOMEM, "out of memory");
    return 0;
}

static void drop(void *recs, size_t n) { al_store_thread_packages_free(recs, n); }

int al_store_thread_packages_get(al_store *s, const char *ws_id, const char *thread_id,
                                 al_store_thread_packages **ret, size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    /* one row per language: two at most, whatever the thread holds */
    json_t *rows = al_store_query(s, err,
                                  "SELECT lang, specs, layer, resolved, updated_at FROM thread_packages "
                                  "WHERE workspace_id = ? AND thread_id = ? ORDER BY lang LIMIT 8",
                                  "ss", ws_id, thread_id);
    void *v = NULL;
    int r = al_store_rows_read(rows, sizeof(al_store_thread_packages), from_row, drop, &v, ret_n, err);
    if (r < 0)
        return r;
    *ret = v;
    return 0;
}

int al_store_thread_packages_put(al_store *s, const char *org_id, const char *ws_id, const char *thread_id,
                                 const al_store_thread_packages *r, al_error *err) {
    int n = al_store_exec(s, err,
                          "INSERT INTO thread_packages (org_id, workspace_id, thread_id, lang, specs, layer, resolved, "
                          "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (workspace_id, thread_id, lang) "
                          "DO UPDATE SET specs = excluded.specs, layer = excluded.layer, resolved = excluded.resolved, "
                          "updated_at = excluded.updated_at",
                          "ssssssss", org_id, ws_id, thread_id, r->lang, r->specs, r->layer ? r->layer : "",
                          r->resolved ? r->resolved : "[]", r->updated_at);
    return n < 0 ? n : 0;
}

int al_store_thread_packages_lock(al_store *s, const char *ws_id, const char *thread_id, al_error *err) {
    char key[256];
    if (snprintf(key, sizeof key, "thread_packages:%s:%s", ws_id, thread_id) >= (int)sizeof key)
        return al_err(err, "packages", ENAMETOOLONG, "thread %s: its id is too long", thread_id);
    return al_store_lock(s, err, key);
}
