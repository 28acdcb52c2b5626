/* Settings, prices and credits' rows (governance.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "governance.h"
#include "internal.h"


/* A copy of text column COL, NULL when it holds none (or no memory: *RET_OOM). */
static char *text_dup(json_t *row, const char *col, bool *ret_oom) {
    const char *t = json_string_value(json_object_get(row, col));
    char *c = t ? strdup(t) : NULL;
    if (t && !c)
        *ret_oom = true;
    return c;
}

/* ------------------------------------------------------------ settings */

void al_store_settings_done(al_store_settings *st) {
    if (!st)
        return;
    free(st->settings);
    free(st->secrets);
    st->settings = st->secrets = NULL;
}

int al_store_settings_get(al_store *s, const char *ws_id, al_store_settings *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    json_t *rows = al_store_query(s, err,
                                  "SELECT w.price_per_run AS price, t.settings, t.secrets FROM workspaces w "
                                  "LEFT JOIN workspace_settings t ON t.workspace_id = w.id WHERE w.id = ?",
                                  "s", ws_id);
    if (!rows)
        return al_err(err, "settings", EIO, "the workspace's settings cannot be read from the store");
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row) {
        r = al_err(err, "settings", ENOENT, "no workspace %s", ws_id);
        goto out;
    }
    /* a price that is not a whole number is none: the default applies */
    json_t *price = json_object_get(row, "price");
    ret->has_price = json_is_integer(price);
    ret->price_per_run = json_integer_value(price);
    ret->has_row = !json_is_null(json_object_get(row, "settings"));
    bool oom = false;
    ret->settings = text_dup(row, "settings", &oom);
    ret->secrets = text_dup(row, "secrets", &oom);
    if (oom) {
        al_store_settings_done(ret);
        r = al_err(err, "settings", ENOMEM, "out of memory");
    }
out:
    json_decref(rows);
    return r;
}

int al_store_settings_put(al_store *s, const char *ws_id, const char *settings, const char *secrets, const char *now,
                          al_error *err) {
    int r = al_store_exec(s, err,
                          "INSERT INTO workspace_settings (workspace_id, settings, secrets, updated_at) VALUES (?, ?, ?, ?) "
                          "ON CONFLICT (workspace_id) DO UPDATE SET settings = excluded.settings, "
                          "secrets = excluded.secrets, updated_at = excluded.updated_at",
                          "ssss", ws_id, settings, secrets, now);
    return r < 0 ? r : 0;
}

/* -------------------------------------------------------------- prices */

int al_store_price_set(al_store *s, const char *ws_id, int64_t price, al_error *err) {
    int r = al_store_exec(s, err, "UPDATE workspaces SET price_per_run = ? WHERE id = ?", "is", price, ws_id);
    if (r == 0)
        return al_err(err, "price", ENOENT, "no workspace %s", ws_id);
    return r < 0 ? r : 0;
}

/* ------------------------------------------------------------- credits */

int al_store_credit_balance(al_store *s, const char *org_id, int64_t *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT credit_balance FROM orgs WHERE id = ?", "s", org_id);
    if (!rows)
        return -EIO;
    json_t *b = json_object_get(json_array_get(rows, 0), "credit_balance");
    int r = 0;
    if (!json_array_size(rows))
        r = al_err(err, "credits", ENOENT, "no organisation %s", org_id);
    else if (!json_is_integer(b))
        r = al_err(err, "credits", EIO, "organisation %s's stored balance is malformed", org_id);
    else
        *ret = json_integer_value(b);
    json_decref(rows);
    return r;
}

static const char *const ledger_kinds[_AL_LEDGER_KIND_MAX] = {
    [AL_LEDGER_GRANT] = "grant",
    [AL_LEDGER_CHARGE] = "charge",
    [AL_LEDGER_REFUND] = "refund",
};

const char *al_ledger_kind_name(al_ledger_kind k) { return k >= 0 && k < _AL_LEDGER_KIND_MAX ? ledger_kinds[k] : NULL; }

static al_ledger_kind ledger_kind_from_name(const char *name) {
    for (int k = 0; name && k < _AL_LEDGER_KIND_MAX; k++)
        if (strcmp(name, ledger_kinds[k]) == 0)
            return (al_ledger_kind)k;
    return _AL_LEDGER_KIND_INVALID;
}

static bool ledger_from_row(json_t *row, al_store_ledger_entry *e) {
    memset(e, 0, sizeof *e);
    json_t *seq = json_object_get(row, "seq"), *amount = json_object_get(row, "amount");
    json_t *after = json_object_get(row, "balance_after");
    e->seq = json_integer_value(seq);
    e->amount = json_integer_value(amount);
    e->balance_after = json_integer_value(after);
    e->kind = ledger_kind_from_name(json_string_value(json_object_get(row, "kind")));
    return json_is_integer(seq) && json_is_integer(amount) && json_is_integer(after) &&
           e->kind != _AL_LEDGER_KIND_INVALID && al_col_text(row, "id", e->id, sizeof e->id, false) &&
           al_col_text(row, "org_id", e->org_id, sizeof e->org_id, false) &&
           al_col_text(row, "workspace_id", e->workspace_id, sizeof e->workspace_id, true) &&
           al_col_text(row, "run_id", e->run_id, sizeof e->run_id, true) &&
           al_col_text(row, "created_at", e->created_at, sizeof e->created_at, false);
}

int al_store_ledger_list(al_store *s, const al_store_ledger_filter *f, al_store_ledger_entry **ret, size_t *ret_n,
                         al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(
        s, err,
        "SELECT seq, id, org_id, workspace_id, run_id, kind, amount, balance_after, created_at FROM ledger "
        "WHERE org_id = ? AND (CAST(? AS TEXT) IS NULL OR workspace_id = ? "
        "OR (workspace_id IS NULL AND run_id IS NULL AND kind = 'grant')) "
        "AND (CAST(? AS TEXT) IS NULL OR created_at >= ?) AND (CAST(? AS TEXT) IS NULL OR created_at < ?) "
        "ORDER BY seq DESC LIMIT ?",
        "sSSSSSSi", f->org_id, f->workspace_id, f->workspace_id, f->from, f->from, f->to, f->to, f->limit);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t n = json_array_size(rows);
    al_store_ledger_entry *v = n ? calloc(n, sizeof *v) : NULL;
    if (n && !v)
        r = al_err(err, "credits", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++)
        if (!ledger_from_row(json_array_get(rows, i), &v[i]))
            r = al_err(err, "credits", EIO, "a stored ledger entry is malformed");
    json_decref(rows);
    if (r < 0) {
        free(v);
        return r;
    }
    *ret = v;
    *ret_n = n;
    return 0;
}
