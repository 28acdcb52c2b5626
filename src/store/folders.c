/* Connected folders' rows (folders.h), in the SQL both backends speak. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "folders.h"
#include "internal.h"

#define COLUMNS "org_id, workspace_id, name, path, glob, dev, ino, created_at"

void al_store_folder_done(al_store_folder *f) {
    if (!f)
        return;
    free(f->path);
    free(f->glob);
    f->path = f->glob = NULL;
}

void al_store_folders_free(al_store_folder *v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        al_store_folder_done(&v[i]);
    free(v);
}

/* a decimal u64 column (dev and ino are unsigned 64-bit: text, not a
 * signed integer column) */
static bool col_u64(json_t *row, const char *col, uint64_t *ret) {
    const char *t = json_string_value(json_object_get(row, col));
    if (!t || !*t)
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno || *end || t[0] == '-')
        return false;
    *ret = (uint64_t)v;
    return true;
}

static int folder_read(json_t *row, void *rec, al_error *err) {
    al_store_folder *f = rec;
    const char *path = json_string_value(json_object_get(row, "path"));
    const char *glob = json_string_value(json_object_get(row, "glob"));
    if (!al_col_text(row, "org_id", f->org_id, sizeof f->org_id, false) ||
        !al_col_text(row, "workspace_id", f->workspace_id, sizeof f->workspace_id, false) ||
        !al_col_text(row, "name", f->name, sizeof f->name, false) ||
        !al_col_text(row, "created_at", f->created_at, sizeof f->created_at, false) || !path || !glob ||
        !col_u64(row, "dev", &f->dev) || !col_u64(row, "ino", &f->ino))
        return al_err(err, "folders", EIO, "a stored folder is malformed");
    if (!(f->path = strdup(path)) || !(f->glob = strdup(glob))) {
        al_store_folder_done(f);
        return al_err(err, "folders", ENOMEM, "out of memory");
    }
    return 0;
}

static void folders_drop(void *recs, size_t n) { al_store_folders_free(recs, n); }

int al_store_folder_add(al_store *s, al_store_folder *f, al_error *err) {
    char dev[24], ino[24];
    snprintf(dev, sizeof dev, "%" PRIu64, f->dev);
    snprintf(ino, sizeof ino, "%" PRIu64, f->ino);
    al_store_now(f->created_at, sizeof f->created_at);
    json_t *rows = al_store_query(s, err, "SELECT org_id FROM workspaces WHERE id = ?", "s", f->workspace_id);
    if (!rows)
        return -EIO;
    bool found = json_array_size(rows) == 1 &&
                 al_col_text(json_array_get(rows, 0), "org_id", f->org_id, sizeof f->org_id, false);
    json_decref(rows);
    if (!found)
        return al_err(err, "folders", ENOENT, "no workspace %s", f->workspace_id);
    int r = al_store_exec(s, err, "INSERT INTO folders (" COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)", "ssssssss",
                          f->org_id, f->workspace_id, f->name, f->path, f->glob ? f->glob : "", dev, ino,
                          f->created_at);
    if (r == -EEXIST) {
        *err = (al_error){ 0 };
        return al_err(err, "folders", EEXIST, "workspace %s already has a folder named %s", f->workspace_id, f->name);
    }
    return r < 0 ? r : 0;
}

int al_store_folder_get(al_store *s, const char *ws_id, const char *name, al_store_folder *ret, al_error *err) {
    *ret = (al_store_folder){ 0 };
    json_t *rows = al_store_query(s, err, "SELECT " COLUMNS " FROM folders WHERE workspace_id = ? AND name = ?", "ss",
                                  ws_id, name);
    if (!rows)
        return -EIO;
    int r = json_array_size(rows) == 1 ? folder_read(json_array_get(rows, 0), ret, err) : -ENOENT;
    json_decref(rows);
    return r;
}

int al_store_folders_list(al_store *s, const char *ws_id, int64_t limit, al_store_folder **ret, size_t *ret_n,
                          al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err, "SELECT " COLUMNS " FROM folders WHERE workspace_id = ? ORDER BY name LIMIT ?",
                                  "si", ws_id, limit);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, folder_read, folders_drop, &v, ret_n, err);
    *ret = v;
    return r;
}

int al_store_folder_remove(al_store *s, const char *ws_id, const char *name, al_error *err) {
    int r = al_store_exec(s, err, "DELETE FROM folders WHERE workspace_id = ? AND name = ?", "ss", ws_id, name);
    return r < 0 ? r : r > 0;
}
