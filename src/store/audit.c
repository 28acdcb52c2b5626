/* The audit trail's rows (audit.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "internal.h"

#define COLUMNS "workspace_id, seq, org_id, kind, person_id, run_id, data, created_at, prev_hash, hash"


/* A column that may be NULL: *RET_HAS says which. */
static bool text_or_null(json_t *row, const char *col, char *buf, size_t len, bool *ret_has) {
    buf[0] = '\0';
    *ret_has = !json_is_null(json_object_get(row, col));
    return !*ret_has || al_col_text(row, col, buf, len, false);
}

/* ROW into EV: false when some field does not fit (EV holds what did). */
static bool from_row(json_t *row, al_store_audit_event *ev) {
    memset(ev, 0, sizeof *ev);
    json_t *seq = json_object_get(row, "seq");
    ev->seq = json_integer_value(seq);
    const char *data = json_string_value(json_object_get(row, "data"));
    ev->data = data ? strdup(data) : NULL;
    bool ok = json_is_integer(seq) && ev->data;
    ok &= al_col_text(row, "workspace_id", ev->workspace_id, sizeof ev->workspace_id, false);
    ok &= al_col_text(row, "org_id", ev->org_id, sizeof ev->org_id, false);
    ok &= al_col_text(row, "kind", ev->kind, sizeof ev->kind, false);
    ok &= text_or_null(row, "person_id", ev->person_id, sizeof ev->person_id, &ev->has_person_id);
    ok &= text_or_null(row, "run_id", ev->run_id, sizeof ev->run_id, &ev->has_run_id);
    ok &= al_col_text(row, "created_at", ev->created_at, sizeof ev->created_at, false);
    ok &= al_col_text(row, "prev_hash", ev->prev_hash, sizeof ev->prev_hash, false);
    ok &= al_col_text(row, "hash", ev->hash, sizeof ev->hash, false);
    return ok;
}

void al_store_audit_events_free(al_store_audit_events *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].data);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

int al_store_audit_append(al_store *s, al_store_audit_event *ev, al_store_audit_seal_fn seal, void *userdata,
                          al_error *err) {
    /* No lock: (workspace_id, seq) is the table's key, so of two writers
     * (on any node) that read one head, the second finds its number taken
     * when it writes, and reads the head again. Two statements, where a
     * unit of work with a lock was five: a run makes two audit events. */
    int r = -EEXIST;
    for (int tries = 0; r == -EEXIST && tries < 64; tries++) {
        if (tries && err)
            *err = (al_error){ 0 }; /* the taken number was no failure */
        json_t *head = al_store_query(s, err,
                                      "SELECT seq, hash FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
                                      "s", ev->workspace_id);
        if (!head)
            return al_err(err, "audit", EIO, "audit event %s: cannot read the chain's tail", ev->kind);
        ev->seq = 1;
        snprintf(ev->prev_hash, sizeof ev->prev_hash, "%s", AL_AUDIT_GENESIS);
        json_t *last = json_array_get(head, 0);
        r = 0;
        if (last) {
            json_t *seq = json_object_get(last, "seq");
            ev->seq = json_integer_value(seq) + 1;
            if (!json_is_integer(seq) || !al_col_text(last, "hash", ev->prev_hash, sizeof ev->prev_hash, false))
                r = al_err(err, "audit", EBADMSG, "audit event %s: the chain's tail is malformed", ev->kind);
        }
        json_decref(head);
        if (r < 0 || (r = seal(ev, userdata, err)) < 0)
            return r;
        r = al_store_exec(s, err, "INSERT INTO audit_events (" COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          "sissSSssss", ev->workspace_id, ev->seq, ev->org_id, ev->kind,
                          ev->has_person_id ? ev->person_id : NULL, ev->has_run_id ? ev->run_id : NULL, ev->data,
                          ev->created_at, ev->prev_hash, ev->hash);
    }
    return r < 0 ? r : 0;
}

int al_store_audit_workspaces(al_store *s, al_store_audit_ws_fn each, void *userdata, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT DISTINCT workspace_id FROM audit_events ORDER BY workspace_id", NULL);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *ws = json_string_value(json_object_get(row, "workspace_id"));
        if (!ws) {
            r = al_err(err, "audit", EIO, "a stored audit event has no workspace");
            break;
        }
        if ((r = each(ws, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

/* EACH called on every event of ROWS in order, a malformed one said so;
 * what the first negative answer was, else 0. */
static int each_row(json_t *rows, al_store_audit_event_fn each, void *userdata) {
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        al_store_audit_event ev;
        bool ok = from_row(row, &ev);
        int r = each(&ev, !ok, userdata);
        free(ev.data);
        if (r < 0)
            return r;
    }
    return 0;
}

int al_store_audit_chain(al_store *s, const char *workspace_id, al_store_audit_event_fn each, void *userdata,
                         al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT " COLUMNS " FROM audit_events WHERE workspace_id = ? ORDER BY seq",
                                  "s", workspace_id);
    if (!rows)
        return -EIO;
    int r = each_row(rows, each, userdata);
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_audit_chain_page(al_store *s, const char *workspace_id, int64_t after, int64_t limit,
                              al_store_audit_event_fn each, void *userdata, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT " COLUMNS " FROM audit_events WHERE workspace_id = ? AND seq > ? "
                                  "ORDER BY seq LIMIT ?",
                                  "sii", workspace_id, after, limit);
    if (!rows)
        return -EIO;
    int r = each_row(rows, each, userdata);
    size_t n = json_array_size(rows);
    json_decref(rows);
    return r < 0 ? r : (int)n;
}

int al_store_audit_list(al_store *s, const al_store_audit_filter *f, al_store_audit_events *ret, al_error *err) {
    ret->v = NULL;
    ret->n = 0;
    json_t *rows = al_store_query(s, err,
                                  "SELECT " COLUMNS " FROM audit_events WHERE workspace_id = ? "
                                  "AND (CAST(? AS TEXT) IS NULL OR kind = ?) AND (CAST(? AS TEXT) IS NULL OR person_id = ?) "
                                  "AND (CAST(? AS TEXT) IS NULL OR run_id = ?) "
                                  "AND (CAST(? AS TEXT) IS NULL OR created_at >= ?) AND (CAST(? AS TEXT) IS NULL OR created_at < ?) "
                                  "AND seq < ? ORDER BY seq DESC LIMIT ?",
                                  "sSSSSSSSSSSii", f->workspace_id, f->kind, f->kind, f->person_id, f->person_id,
                                  f->run_id, f->run_id, f->from, f->from, f->to, f->to, f->before_seq, f->limit);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t n = json_array_size(rows);
    if (n && !(ret->v = calloc(n, sizeof *ret->v)))
        r = al_err(err, "audit", ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++) {
        bool ok = from_row(json_array_get(rows, i), &ret->v[i]);
        ret->n++;
        if (!ok)
            r = al_err(err, "audit", EIO, "a stored audit event is malformed");
    }
    json_decref(rows);
    if (r < 0)
        al_store_audit_events_free(ret);
    return r;
}

int al_store_audit_heads(al_store *s, const char *workspace_id, al_store_audit_head_fn each, void *userdata,
                         al_error *err) {
    /* one row per chain: its greatest seq (the table's key makes it an index lookup per chain) */
    json_t *rows = al_store_query(s, err,
                                  "SELECT a.workspace_id, a.seq, a.hash FROM audit_events a JOIN "
                                  "(SELECT workspace_id, MAX(seq) AS seq FROM audit_events "
                                  "WHERE CAST(? AS TEXT) IS NULL OR workspace_id = ? GROUP BY workspace_id) m "
                                  "ON a.workspace_id = m.workspace_id AND a.seq = m.seq ORDER BY a.workspace_id",
                                  "SS", workspace_id, workspace_id);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *ws = json_string_value(json_object_get(row, "workspace_id"));
        json_t *seq = json_object_get(row, "seq");
        char hash[65];
        if (!ws || !json_is_integer(seq) || !al_col_text(row, "hash", hash, sizeof hash, false)) {
            r = al_err(err, "audit", EBADMSG, "the head of an audit chain is malformed");
            break;
        }
        if ((r = each(ws, json_integer_value(seq), hash, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_audit_hash_at(al_store *s, const char *workspace_id, int64_t seq, char ret_hash[65], al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT hash FROM audit_events WHERE workspace_id = ? AND seq = ?", "si",
                                  workspace_id, seq);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row)
        r = -ENOENT;
    else if (!al_col_text(row, "hash", ret_hash, 65, false))
        r = al_err(err, "audit", EBADMSG, "audit event %lld of %s: its hash is malformed", (long long)seq, workspace_id);
    json_decref(rows);
    return r;
}
