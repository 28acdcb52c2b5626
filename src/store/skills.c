/* The skills' rows (skills.h), and the runs that stage a skill's bundle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "skills.h"

#define COLUMNS                                                                                                       \
    "seq, id, org_id, workspace_id, name, version, digest, manifest, state, uploaded_by, created_at, promoted_by, "   \
    "promoted_at, bytes"

/* The states in which a run has ended: a run in any other may still stage
 * its skill's bundle. */
#define RUN_ENDED "('succeeded', 'failed', 'timed_out', 'killed', 'canceled', 'error', 'denied')"

static const char *const state_names[_AL_STORE_SKILL_STATE_MAX] = {
    [AL_STORE_SKILL_UPLOADED] = "uploaded",
    [AL_STORE_SKILL_PROMOTED] = "promoted",
};

const char *al_store_skill_state_name(al_store_skill_state st) {
    return st >= 0 && st < _AL_STORE_SKILL_STATE_MAX ? state_names[st] : "uploaded";
}



static int from_row(json_t *row, al_store_skill *k, al_error *err) {
    memset(k, 0, sizeof *k);
    const char *manifest = json_string_value(json_object_get(row, "manifest"));
    const char *state = json_string_value(json_object_get(row, "state"));
    int st = -1;
    for (int i = 0; state && i < _AL_STORE_SKILL_STATE_MAX; i++)
        if (strcmp(state, state_names[i]) == 0)
            st = i;
    if (!al_col_text(row, "id", k->id, sizeof k->id, false) || !al_col_text(row, "org_id", k->org_id, sizeof k->org_id, false) ||
        !al_col_text(row, "workspace_id", k->workspace_id, sizeof k->workspace_id, false) ||
        !al_col_text(row, "name", k->name, sizeof k->name, false) ||
        !al_col_text(row, "version", k->version, sizeof k->version, false) ||
        !al_col_text(row, "digest", k->digest, sizeof k->digest, false) ||
        !al_col_text(row, "uploaded_by", k->uploaded_by, sizeof k->uploaded_by, false) ||
        !al_col_text(row, "created_at", k->created_at, sizeof k->created_at, false) ||
        !al_col_text(row, "promoted_by", k->promoted_by, sizeof k->promoted_by, true) ||
        !al_col_text(row, "promoted_at", k->promoted_at, sizeof k->promoted_at, true) || !manifest || st < 0)
        return al_err(err, "skill", EIO, "a stored skill version is malformed");
    if (!(k->manifest = strdup(manifest)))
        return al_err(err, "skill", ENOMEM, "out of memory");
    k->state = (al_store_skill_state)st;
    k->seq = json_integer_value(json_object_get(row, "seq"));
    k->bytes = json_integer_value(json_object_get(row, "bytes"));
    return 0;
}

void al_store_skill_done(al_store_skill *k) {
    if (!k)
        return;
    free(k->manifest);
    k->manifest = NULL;
}

void al_store_skills_free(al_store_skills *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        al_store_skill_done(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* ROWS (taken) as a list in RET. */
static int to_list(json_t *rows, al_store_skills *ret, al_error *err) {
    ret->v = NULL;
    ret->n = 0;
    if (!rows)
        return -EIO;
    int r = 0;
    size_t n = json_array_size(rows);
    if (n && !(ret->v = calloc(n, sizeof *ret->v)))
        r = al_err(err, "skill", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = from_row(json_array_get(rows, i), &ret->v[i], err);
        if (r == 0)
            ret->n++;
    }
    json_decref(rows);
    if (r < 0)
        al_store_skills_free(ret);
    return r;
}

/* The first of ROWS (taken) in RET: 0, -ENOENT, -errno. */
static int first(json_t *rows, al_store_skill *ret, al_error *err) {
    al_store_skills l;
    int r = to_list(rows, &l, err);
    if (r < 0)
        return r;
    if (l.n == 0)
        return -ENOENT;
    *ret = l.v[0];
    l.v[0].manifest = NULL;
    al_store_skills_free(&l);
    return 0;
}

int al_store_skill_get(al_store *s, const char *ws_id, const char *id, al_store_skill *ret, al_error *err) {
    return first(al_store_query(s, err, "SELECT " COLUMNS " FROM skills WHERE id = ? AND workspace_id = ?", "ss", id,
                                ws_id),
                 ret, err);
}

int al_store_skill_get_digest(al_store *s, const char *ws_id, const char *name, const char *digest,
                              al_store_skill *ret, al_error *err) {
    return first(al_store_query(s, err,
                                "SELECT " COLUMNS " FROM skills WHERE workspace_id = ? AND name = ? AND digest = ?", "sss",
                                ws_id, name, digest),
                 ret, err);
}

int al_store_skill_versions(al_store *s, const char *ws_id, const char *name, const char *digest, bool promoted_first,
                            size_t limit, al_store_skills *ret, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  promoted_first
                                      ? "SELECT " COLUMNS " FROM skills WHERE workspace_id = ? AND name = ? AND "
                                        "(CAST(? AS TEXT) IS NULL OR digest = ?) "
                                        "ORDER BY CASE WHEN state = 'promoted' THEN 0 ELSE 1 END, seq DESC LIMIT ?"
                                      : "SELECT " COLUMNS " FROM skills WHERE workspace_id = ? AND name = ? AND "
                                        "(CAST(? AS TEXT) IS NULL OR digest = ?) ORDER BY seq DESC LIMIT ?",
                                  "ssSSi", ws_id, name, digest, digest, al_store_row_limit(limit));
    return to_list(rows, ret, err);
}

int al_store_skills_list(al_store *s, const char *ws_id, size_t limit, al_store_skills *ret, al_error *err) {
    return to_list(al_store_query(s, err,
                                  "SELECT " COLUMNS " FROM skills WHERE workspace_id = ? ORDER BY name, "
                                  "CASE WHEN state = 'promoted' THEN 0 ELSE 1 END, seq DESC LIMIT ?",
                                  "si", ws_id, al_store_row_limit(limit)),
                   ret, err);
}

int al_store_skill_counts(al_store *s, const char *ws_id, const char *name, const char *digest, const char *org_id,
                          int64_t *ret_versions, bool *ret_held, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT (SELECT COUNT(*) FROM skills WHERE workspace_id = ? AND name = ? AND digest != ?) "
                                  "AS versions, (SELECT COUNT(*) FROM skills WHERE org_id = ? AND digest = ?) AS held",
                                  "sssss", ws_id, name, digest, org_id, digest);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    *ret_versions = json_integer_value(json_object_get(row, "versions"));
    *ret_held = json_integer_value(json_object_get(row, "held")) > 0;
    json_decref(rows);
    return 0;
}

int al_store_skill_add(al_store *s, const al_store_skill *k, al_error *err) {
    return al_store_exec(s, err,
                         "INSERT INTO skills (id, org_id, workspace_id, name, version, digest, manifest, state, "
                         "uploaded_by, created_at, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, 'uploaded', ?, ?, ?) "
                         "ON CONFLICT (workspace_id, name, digest) DO NOTHING",
                         "sssssssssi", k->id, k->org_id, k->workspace_id, k->name, k->version, k->digest,
                         k->manifest ? k->manifest : "{}", k->uploaded_by, k->created_at, k->bytes);
}

int al_store_skill_promote(al_store *s, const char *ws_id, const char *name, const char *digest, const char *by,
                           const char *now, al_error *err) {
    /* one promoted version per name: the others step back */
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    r = al_store_exec(s, err,
                      "UPDATE skills SET state = 'uploaded' WHERE workspace_id = ? AND name = ? AND state = 'promoted'",
                      "ss", ws_id, name);
    if (r >= 0)
        r = al_store_exec(s, err,
                          "UPDATE skills SET state = 'promoted', promoted_by = ?, promoted_at = ? "
                          "WHERE workspace_id = ? AND name = ? AND digest = ?",
                          "sssss", by, now, ws_id, name, digest);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

int al_store_skill_delete(al_store *s, const char *ws_id, const char *name, const char *version, al_store_skills *ret,
                          al_error *err) {
    ret->v = NULL;
    ret->n = 0;
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    r = to_list(al_store_query(s, err,
                               "SELECT " COLUMNS " FROM skills WHERE workspace_id = ? AND name = ? "
                               "AND (CAST(? AS TEXT) IS NULL OR version = ? OR digest = ?) ORDER BY seq",
                               "ssSSS", ws_id, name, version, version, version),
                ret, err);
    if (r == 0 && ret->n)
        r = al_store_exec(s, err,
                          "DELETE FROM skills WHERE workspace_id = ? AND name = ? "
                          "AND (CAST(? AS TEXT) IS NULL OR version = ? OR digest = ?)",
                          "ssSSS", ws_id, name, version, version, version);
    if (r < 0) {
        al_store_rollback(s);
        al_store_skills_free(ret);
        return r;
    }
    int c = al_store_commit(s, err);
    if (c < 0) {
        al_store_skills_free(ret);
        return c;
    }
    return r;
}

/* EACH with column COL of every one of ROWS (taken) that is text. */
static int each_text(json_t *rows, const char *col, int (*each)(const char *, void *), void *userdata) {
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *t = json_string_value(json_object_get(row, col));
        if (t && (r = each(t, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_skill_digests(al_store *s, int (*each)(const char *digest, void *userdata), void *userdata,
                           al_error *err) {
    return each_text(al_store_query(s, err, "SELECT DISTINCT digest FROM skills", NULL), "digest", each, userdata);
}

int al_store_skill_digests_live(al_store *s, int (*each)(const char *digest, void *userdata), void *userdata,
                                al_error *err) {
    return each_text(al_store_query(s, err,
                                    "SELECT DISTINCT skill_digest FROM runs WHERE state NOT IN " RUN_ENDED
                                    " AND skill_digest IS NOT NULL",
                                    NULL),
                     "skill_digest", each, userdata);
}

int al_store_skill_live_runs(al_store *s, const char *ws_id, const char *digest, char (*ret_ids)[40], size_t limit,
                             al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT id FROM runs WHERE workspace_id = ? AND state NOT IN " RUN_ENDED
                                  " AND skill_digest = ? ORDER BY seq LIMIT ?",
                                  "ssi", ws_id, digest, al_store_row_limit(limit));
    if (!rows)
        return -EIO;
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(rows) && n < limit; i++) {
        const char *id = json_string_value(json_object_get(json_array_get(rows, i), "id"));
        if (id && strlen(id) < 40)
            snprintf(ret_ids[n++], 40, "%s", id);
    }
    json_decref(rows);
    return (int)n;
}
