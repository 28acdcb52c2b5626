/* E2B-compatible sandboxes' rows (sandboxes.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/hash.h"
#include "internal.h"
#include "sandboxes.h"

/* the owner's role as the person has it now: a demoted person's
 * sandboxes act as what the person is */
#define SELECT_FROM                                                                                                   \
    "SELECT b.seq, b.id, b.org_id, b.workspace_id, b.person_id, p.role, b.key_id, b.token_hash, b.template_id, "     \
    "b.image, b.network, b.metadata, b.env_vars, b.started_at, b.end_at, b.state, b.bytes, p.name AS owner_name "    \
    "FROM sandboxes b "                                                                                           \
    "JOIN people p ON p.id = b.person_id "

void al_store_sandbox_done(al_store_sandbox *b) {
    if (!b)
        return;
    free(b->metadata);
    free(b->env_vars);
    free(b->owner_name);
    b->metadata = b->env_vars = b->owner_name = NULL;
}

void al_store_sandboxes_free(al_store_sandboxes *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        al_store_sandbox_done(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static int from_row(json_t *row, al_store_sandbox *b, al_error *err) {
    memset(b, 0, sizeof *b);
    const char *md = json_string_value(json_object_get(row, "metadata"));
    const char *ev = json_string_value(json_object_get(row, "env_vars"));
    if (!al_col_text(row, "id", b->id, sizeof b->id, false) ||
        !al_col_text(row, "org_id", b->owner.org_id, sizeof b->owner.org_id, false) ||
        !al_col_text(row, "workspace_id", b->owner.workspace_id, sizeof b->owner.workspace_id, false) ||
        !al_col_text(row, "person_id", b->owner.person_id, sizeof b->owner.person_id, false) ||
        !al_col_text(row, "role", b->owner.role, sizeof b->owner.role, false) ||
        !al_col_text(row, "key_id", b->key_id, sizeof b->key_id, false) ||
        /* the sandbox plane acts as its owner, by the key that made it:
         * the runs its commands make are that key's */
        !al_col_text(row, "key_id", b->owner.key_id, sizeof b->owner.key_id, false) ||
        !al_col_text(row, "token_hash", b->token_hash, sizeof b->token_hash, false) ||
        !al_col_text(row, "template_id", b->template_id, sizeof b->template_id, false) ||
        !al_col_text(row, "image", b->image, sizeof b->image, false) ||
        !al_col_text(row, "network", b->network, sizeof b->network, false) ||
        !al_col_text(row, "started_at", b->started_at, sizeof b->started_at, false) ||
        !al_col_text(row, "end_at", b->end_at, sizeof b->end_at, false) ||
        !al_col_text(row, "state", b->state, sizeof b->state, false) || !md || !ev)
        return al_err(err, "sandbox", EIO, "a stored sandbox is malformed");
    b->seq = json_integer_value(json_object_get(row, "seq"));
    b->bytes = json_integer_value(json_object_get(row, "bytes"));
    const char *owner = json_string_value(json_object_get(row, "owner_name"));
    if (!(b->metadata = strdup(md)) || !(b->env_vars = strdup(ev)) || (owner && !(b->owner_name = strdup(owner)))) {
        al_store_sandbox_done(b);
        return al_err(err, "sandbox", ENOMEM, "out of memory");
    }
    return 0;
}

/* ROWS (taken) as a list in RET. */
static int to_list(json_t *rows, al_store_sandboxes *ret, al_error *err) {
    ret->v = NULL;
    ret->n = 0;
    if (!rows)
        return -EIO;
    int r = 0;
    size_t n = json_array_size(rows);
    if (n && !(ret->v = calloc(n, sizeof *ret->v)))
        r = al_err(err, "sandbox", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++)
        if ((r = from_row(json_array_get(rows, i), &ret->v[i], err)) == 0)
            ret->n++;
    json_decref(rows);
    if (r < 0)
        al_store_sandboxes_free(ret);
    return r;
}

int al_store_key_id_of(al_store *s, const char *key, char *ret_id, al_error *err) {
    if (!key || strlen(key) > 128)
        return 0;
    char hex[65];
    al_sha256_hex(key, strlen(key), hex);
    json_t *rows = al_store_query(s, err, "SELECT id FROM api_keys WHERE hash = ? AND revoked_at IS NULL", "s", hex);
    if (!rows)
        return -EIO;
    int found = json_array_size(rows) == 1 && al_col_text(json_array_get(rows, 0), "id", ret_id, 40, false);
    json_decref(rows);
    return found;
}

int al_store_sandbox_put(al_store *s, const al_store_sandbox *b, int64_t max, int64_t max_person, al_error *err) {
    char lock[64];
    snprintf(lock, sizeof lock, "sandboxes:%s", b->owner.workspace_id);
    int64_t n = 0;
    int r = al_store_lock(s, err, lock);
    if (r < 0 || (r = al_store_sandboxes_count(s, b->owner.workspace_id, &n, err)) < 0)
        return r;
    if (n >= max)
        return al_err(err, "sandbox", EDQUOT, "the workspace holds %lld sandboxes, the most it may: kill one first",
                      (long long)max);
    /* one person's share, so that one person (or one leaked key) cannot
     * take every sandbox the workspace may hold */
    json_t *rows = al_store_query(s, err, "SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = ? AND person_id = ?",
                                  "ss", b->owner.workspace_id, b->owner.person_id);
    if (!rows)
        return -EIO;
    n = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    if (n >= max_person)
        return al_err(err, "sandbox", EDQUOT,
                      "you hold %lld sandboxes, the most one person may in a workspace: kill one first",
                      (long long)max_person);
    return al_store_exec(s, err,
                         "INSERT INTO sandboxes (id, org_id, workspace_id, person_id, key_id, token_hash, template_id, "
                         "image, network, metadata, env_vars, started_at, end_at, state) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         "ssssssssssssss", b->id, b->owner.org_id, b->owner.workspace_id, b->owner.person_id,
                         b->key_id, b->token_hash, b->template_id, b->image, b->network, b->metadata, b->env_vars,
                         b->started_at, b->end_at, b->state);
}

int al_store_sandbox_get(al_store *s, const char *ws_id, const char *id, bool key_valid, al_store_sandbox *ret,
                         al_error *err) {
    al_store_sandboxes l;
    int r = to_list(al_store_query(s, err,
                                   SELECT_FROM "WHERE b.id = ? AND (CAST(? AS TEXT) IS NULL OR b.workspace_id = ?) "
                                               "AND (? = 0 OR EXISTS (SELECT 1 FROM api_keys k WHERE k.id = b.key_id "
                                               "AND k.revoked_at IS NULL))",
                                   "sSSi", id, ws_id, ws_id, (int64_t)key_valid),
                    &l, err);
    if (r < 0)
        return r;
    if (l.n == 0)
        return -ENOENT;
    *ret = l.v[0];
    l.v[0].metadata = l.v[0].env_vars = l.v[0].owner_name = NULL; /* moved into *RET */
    al_store_sandboxes_free(&l);
    return 0;
}

int al_store_sandboxes_list(al_store *s, const char *ws_id, size_t limit, al_store_sandboxes *ret, al_error *err) {
    return to_list(al_store_query(s, err, SELECT_FROM "WHERE b.workspace_id = ? ORDER BY b.seq DESC LIMIT ?", "si",
                                  ws_id, al_store_row_limit(limit)),
                   ret, err);
}

int al_store_sandboxes_count(al_store *s, const char *ws_id, int64_t *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = ?", "s", ws_id);
    if (!rows)
        return -EIO;
    *ret = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return 0;
}

int al_store_sandbox_set(al_store *s, const char *id, const char *end_at, const char *state, al_error *err) {
    return al_store_exec(s, err,
                         "UPDATE sandboxes SET end_at = COALESCE(CAST(? AS TEXT), end_at), "
                         "state = COALESCE(CAST(? AS TEXT), state) WHERE id = ?",
                         "SSs", end_at, state, id);
}

int al_store_sandbox_set_bytes(al_store *s, const char *id, int64_t bytes, al_error *err) {
    return al_store_exec(s, err, "UPDATE sandboxes SET bytes = ? WHERE id = ?", "is", bytes, id);
}

int al_store_sandbox_set_token(al_store *s, const char *id, const char *token_hash, al_error *err) {
    return al_store_exec(s, err, "UPDATE sandboxes SET token_hash = ? WHERE id = ?", "ss", token_hash, id);
}

int al_store_sandbox_delete(al_store *s, const char *id, al_error *err) {
    return al_store_exec(s, err, "DELETE FROM sandboxes WHERE id = ?", "s", id);
}

int al_store_sandboxes_ended(al_store *s, const char *now, size_t limit, al_store_sandboxes *ret, al_error *err) {
    return to_list(al_store_query(s, err, SELECT_FROM "WHERE b.end_at < ? AND b.state = 'running' ORDER BY b.end_at LIMIT ?", "si", now,
                                  al_store_row_limit(limit)),
                   ret, err);
}
