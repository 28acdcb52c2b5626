/* The artifacts' rows (artifacts.h), and the organisation's storage use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "artifacts.h"
#include "internal.h"

#define COLUMNS                                                                                                       \
    "id, org_id, workspace_id, thread_id, thread_key, run_id, path, version, seq, size, sha256, content_type, "     \
    "created_at"



static int from_row(json_t *row, al_store_artifact *a, al_error *err) {
    memset(a, 0, sizeof *a);
    const char *path = json_string_value(json_object_get(row, "path"));
    if (!al_col_text(row, "id", a->id, sizeof a->id, false) || !al_col_text(row, "org_id", a->org_id, sizeof a->org_id, false) ||
        !al_col_text(row, "workspace_id", a->workspace_id, sizeof a->workspace_id, false) ||
        !al_col_text(row, "thread_id", a->thread_id, sizeof a->thread_id, true) ||
        !al_col_text(row, "thread_key", a->thread_key, sizeof a->thread_key, false) ||
        !al_col_text(row, "run_id", a->run_id, sizeof a->run_id, false) ||
        !al_col_text(row, "sha256", a->sha256, sizeof a->sha256, false) ||
        !al_col_text(row, "content_type", a->content_type, sizeof a->content_type, false) ||
        !al_col_text(row, "created_at", a->created_at, sizeof a->created_at, false) || !path ||
        !json_is_integer(json_object_get(row, "version")) || !json_is_integer(json_object_get(row, "size")))
        return al_err(err, "artifacts", EIO, "a stored artifact is malformed");
    if (!(a->path = strdup(path)))
        return al_err(err, "artifacts", ENOMEM, "out of memory");
    a->version = json_integer_value(json_object_get(row, "version"));
    a->seq = json_integer_value(json_object_get(row, "seq"));
    a->size = json_integer_value(json_object_get(row, "size"));
    return 0;
}

void al_store_artifact_done(al_store_artifact *a) {
    if (!a)
        return;
    free(a->path);
    a->path = NULL;
}

void al_store_artifacts_free(al_store_artifacts *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        al_store_artifact_done(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* ROWS (taken) as a list in RET. */
static int to_list(json_t *rows, al_store_artifacts *ret, al_error *err) {
    ret->v = NULL;
    ret->n = 0;
    if (!rows)
        return -EIO;
    int r = 0;
    size_t n = json_array_size(rows);
    if (n && !(ret->v = calloc(n, sizeof *ret->v)))
        r = al_err(err, "artifacts", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = from_row(json_array_get(rows, i), &ret->v[i], err);
        if (r == 0)
            ret->n++;
    }
    json_decref(rows);
    if (r < 0)
        al_store_artifacts_free(ret);
    return r;
}

int al_store_artifact_get(al_store *s, const char *ws_id, const char *id, al_store_artifact *ret, al_error *err) {
    al_store_artifacts l;
    int r = to_list(al_store_query(s, err, "SELECT " COLUMNS " FROM artifacts WHERE id = ? AND workspace_id = ?", "ss",
                                   id, ws_id),
                    &l, err);
    if (r < 0)
        return r;
    if (l.n == 0)
        return -ENOENT;
    *ret = l.v[0];
    l.v[0].path = NULL;
    al_store_artifacts_free(&l);
    return 0;
}

int al_store_artifacts_of_thread(al_store *s, const char *ws_id, const char *thread_key, const char *run_id, bool all,
                                 size_t limit, al_store_artifacts *ret, al_error *err) {
    json_t *rows =
        al_store_query(s, err,
                       all ? "SELECT " COLUMNS " FROM artifacts WHERE workspace_id = ? AND thread_key = ? "
                             "AND (CAST(? AS TEXT) IS NULL OR run_id = ?) ORDER BY path, version LIMIT ?"
                           : "SELECT " COLUMNS " FROM artifacts WHERE workspace_id = ? AND thread_key = ? "
                             "AND (CAST(? AS TEXT) IS NULL OR run_id = ?) AND superseded = 0 ORDER BY path LIMIT ?",
                       "ssSSi", ws_id, thread_key, run_id, run_id, al_store_row_limit(limit));
    return to_list(rows, ret, err);
}

int al_store_artifacts_latest(al_store *s, const char *ws_id, const char *thread_key, size_t limit,
                              al_store_artifacts *ret, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT " COLUMNS " FROM artifacts WHERE workspace_id = ? AND thread_key = ? AND "
                                  "superseded = 0 ORDER BY seq DESC LIMIT ?",
                                  "ssi", ws_id, thread_key, al_store_row_limit(limit));
    return to_list(rows, ret, err);
}

int al_store_artifacts_of_run(al_store *s, const char *run_id, al_store_artifacts *ret, al_error *err) {
    return to_list(al_store_query(s, err, "SELECT " COLUMNS " FROM artifacts WHERE run_id = ? ORDER BY path", "s", run_id),
                   ret, err);
}

int al_store_artifacts_recent(al_store *s, const char *ws_id, size_t limit, al_store_artifacts *ret, al_error *err) {
    return to_list(al_store_query(s, err,
                                  "SELECT " COLUMNS " FROM artifacts WHERE workspace_id = ? "
                                  "ORDER BY created_at DESC, id LIMIT ?",
                                  "si", ws_id, al_store_row_limit(limit)),
                   ret, err);
}

int al_store_artifact_add(al_store *s, al_store_artifact *a, al_error *err) {
    char lock[160];
    if (snprintf(lock, sizeof lock, "artifact:%s", a->thread_key) >= (int)sizeof lock)
        return al_err(err, "artifacts", ENAMETOOLONG, "thread key too long");
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* the next version of the path and the next place in the thread: read
     * and written under the thread's lock, so two runs of one thread that
     * end together on two nodes cannot take the same number; each is the
     * last entry of an index (the path's versions, the thread's order), not
     * a read of every artifact the thread holds */
    json_t *rows = NULL;
    if ((r = al_store_lock(s, err, lock)) == 0 &&
        !(rows = al_store_query(s, err,
                                "SELECT COALESCE((SELECT version FROM artifacts WHERE workspace_id = ? AND thread_key = ? "
                                "AND path = ? ORDER BY version DESC LIMIT 1), 0) AS version, COALESCE((SELECT seq FROM "
                                "artifacts WHERE workspace_id = ? AND thread_key = ? ORDER BY seq DESC LIMIT 1), 0) AS seq",
                                "sssss", a->workspace_id, a->thread_key, a->path, a->workspace_id, a->thread_key)))
        r = -EIO;
    if (r == 0) {
        json_t *row = json_array_get(rows, 0);
        a->version = json_integer_value(json_object_get(row, "version")) + 1;
        a->seq = json_integer_value(json_object_get(row, "seq")) + 1;
        /* the insert's trigger (migration 016) marks the version it
         * replaces and adds its size to the organisation's artifact_bytes */
        r = al_store_exec(s, err,
                          "INSERT INTO artifacts (id, org_id, workspace_id, thread_id, thread_key, run_id, path, version, "
                          "seq, size, sha256, content_type, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          "sssSsssiiisss", a->id, a->org_id, a->workspace_id, a->thread_id[0] ? a->thread_id : NULL,
                          a->thread_key, a->run_id, a->path, a->version, a->seq, a->size, a->sha256, a->content_type,
                          a->created_at);
    }
    json_decref(rows);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

int al_store_artifact_blobs(al_store *s, int (*each)(const char *sha256, void *userdata), void *userdata,
                            al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT DISTINCT sha256 FROM artifacts", NULL);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *sha = json_string_value(json_object_get(row, "sha256"));
        if (sha && (r = each(sha, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_org_storage_used(al_store *s, const char *org_id, int64_t *ret_bytes, al_error *err) {
    /* artifacts, what its runs hold (code, output, events), each skill
     * bundle the organisation keeps, once, and its E2B sandboxes' files */
    json_t *rows = al_store_query(s, err,
                                  "SELECT COALESCE((SELECT artifact_bytes + run_bytes FROM orgs WHERE id = ?), 0) + "
                                  "(SELECT COALESCE(SUM(b), 0) FROM (SELECT MAX(bytes) AS b FROM skills WHERE org_id = ? "
                                  "GROUP BY digest) AS held) + "
                                  "(SELECT COALESCE(SUM(bytes), 0) FROM sandboxes WHERE org_id = ?) AS used",
                                  "sss", org_id, org_id, org_id);
    if (!rows)
        return -EIO;
    json_t *used = json_object_get(json_array_get(rows, 0), "used");
    int r = json_is_integer(used) ? 0 : al_err(err, "artifacts", EIO, "the storage in use does not read as a number");
    *ret_bytes = json_integer_value(used);
    json_decref(rows);
    return r;
}

int al_store_org_storage_quota(al_store *s, const char *org_id, int64_t *ret_bytes, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT storage_quota_bytes AS q FROM orgs WHERE id = ?", "s", org_id);
    if (!rows)
        return -EIO;
    *ret_bytes = json_integer_value(json_object_get(json_array_get(rows, 0), "q"));
    json_decref(rows);
    return 0;
}
