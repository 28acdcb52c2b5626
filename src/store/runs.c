/* Runs, their events and analytics, and a run's charge and refund
 * (store/runs.h), in the SQL both backends speak. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "runs.h"

/* ---------------------------------------------------------------- states */

static const char *const state_names[_AL_RUN_STATE_MAX] = {
    [AL_RUN_PENDING_APPROVAL] = "pending_approval",
    [AL_RUN_QUEUED] = "queued",
    [AL_RUN_PROVISIONING] = "provisioning",
    [AL_RUN_RUNNING] = "running",
    [AL_RUN_SUCCEEDED] = "succeeded",
    [AL_RUN_FAILED] = "failed",
    [AL_RUN_TIMED_OUT] = "timed_out",
    [AL_RUN_KILLED] = "killed",
    [AL_RUN_CANCELED] = "canceled",
    [AL_RUN_ERROR] = "error",
    [AL_RUN_DENIED] = "denied",
};

const char *al_run_state_name(al_run_state st) {
    return st >= 0 && st < _AL_RUN_STATE_MAX ? state_names[st] : NULL;
}

al_run_state al_run_state_from_name(const char *name) {
    for (int i = 0; name && i < _AL_RUN_STATE_MAX; i++)
        if (strcmp(name, state_names[i]) == 0)
            return (al_run_state)i;
    return _AL_RUN_STATE_INVALID;
}

bool al_run_state_ended(al_run_state st) {
    return st >= AL_RUN_SUCCEEDED && st < _AL_RUN_STATE_MAX;
}

bool al_run_transition_ok(al_run_state from, al_run_state to) {
    if (from < 0 || from >= _AL_RUN_STATE_MAX || to < 0 || to >= _AL_RUN_STATE_MAX || al_run_state_ended(from))
        return false;
    switch (from) {
    case AL_RUN_PENDING_APPROVAL:
        return to == AL_RUN_QUEUED || to == AL_RUN_DENIED || to == AL_RUN_CANCELED || to == AL_RUN_ERROR;
    case AL_RUN_QUEUED:
        return to == AL_RUN_PROVISIONING || to == AL_RUN_CANCELED || to == AL_RUN_ERROR;
    case AL_RUN_PROVISIONING:
        return to == AL_RUN_RUNNING || (al_run_state_ended(to) && to != AL_RUN_DENIED);
    case AL_RUN_RUNNING:
        return al_run_state_ended(to) && to != AL_RUN_DENIED;
    default:
        return false;
    }
}

/* ---------------------------------------------------------------- reading */

/* Column KEY of ROW into BUF ("" for NULL); false when it does not fit
 * (a row that does not fit the record is not read as another one). */
/* Column KEY of ROW, copied (NULL for NULL); false on no memory. */
static bool text_dup(json_t *row, const char *key, char **ret) {
    json_t *v = json_object_get(row, key);
    *ret = NULL;
    if (!json_is_string(v))
        return true;
    *ret = strndup(json_string_value(v), json_string_length(v));
    return *ret != NULL;
}

static int64_t int_of(json_t *row, const char *key) {
    json_t *v = json_object_get(row, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : json_is_real(v) ? (int64_t)json_real_value(v) : 0;
}

static void run_clear(al_store_run *r) {
    char **texts[] = { &r->code,   &r->description, &r->network,        &r->limits,     &r->inputs,
                       &r->result, &r->previews,    &r->skipped,        &r->error_message, &r->result_summary,
                       &r->skill_name, &r->skill_version, &r->skill_digest, &r->person_name,
                       &r->key_name };
    for (size_t i = 0; i < ELEMENTSOF(texts); i++) {
        free(*texts[i]);
        *texts[i] = NULL;
    }
}

void al_store_run_free(al_store_run *r) {
    if (!r)
        return;
    run_clear(r);
    free(r);
}

/* ROW into *R, every column ROW has (the others stay NULL / ""). */
static int run_from_row(json_t *row, al_store_run *r, al_error *err) {
    *r = (al_store_run){ .state = _AL_RUN_STATE_INVALID };
    r->seq = int_of(row, "seq");
    r->price = int_of(row, "price");
    r->redactions = int_of(row, "redactions");
    r->input_bytes = int_of(row, "input_bytes");
    r->cap = int_of(row, "cap");
    r->preview_count = int_of(row, "preview_count");
    r->skipped_count = int_of(row, "skipped_count");
    r->credits = int_of(row, "credits");
    r->state = al_run_state_from_name(json_string_value(json_object_get(row, "state")));
    bool fits = al_col_text(row, "id", r->id, sizeof r->id, true) && al_col_text(row, "org_id", r->org_id, sizeof r->org_id, true) &&
                al_col_text(row, "workspace_id", r->workspace_id, sizeof r->workspace_id, true) &&
                al_col_text(row, "person_id", r->person_id, sizeof r->person_id, true) &&
                al_col_text(row, "thread_id", r->thread_id, sizeof r->thread_id, true) &&
                al_col_text(row, "language", r->language, sizeof r->language, true) &&
                al_col_text(row, "error_code", r->error_code, sizeof r->error_code, true) &&
                al_col_text(row, "created_at", r->created_at, sizeof r->created_at, true) &&
                al_col_text(row, "started_at", r->started_at, sizeof r->started_at, true) &&
                al_col_text(row, "finished_at", r->finished_at, sizeof r->finished_at, true) &&
                al_col_text(row, "image", r->image, sizeof r->image, true) &&
                al_col_text(row, "node_id", r->node_id, sizeof r->node_id, true) &&
                al_col_text(row, "expired_at", r->expired_at, sizeof r->expired_at, true) &&
                al_col_text(row, "via", r->via, sizeof r->via, true) &&
                al_col_text(row, "person_role", r->person_role, sizeof r->person_role, true) &&
                al_col_text(row, "changed_at", r->changed_at, sizeof r->changed_at, true) &&
                al_col_text(row, "key_id", r->key_id, sizeof r->key_id, true);
    if (!fits || !r->id[0] || r->state == _AL_RUN_STATE_INVALID)
        return al_err(err, "runs", EIO, "a stored run is malformed");
    bool ok = text_dup(row, "code", &r->code) && text_dup(row, "description", &r->description) &&
              text_dup(row, "network", &r->network) && text_dup(row, "limits", &r->limits) &&
              text_dup(row, "inputs", &r->inputs) && text_dup(row, "result", &r->result) &&
              text_dup(row, "previews", &r->previews) && text_dup(row, "skipped", &r->skipped) &&
              text_dup(row, "error_message", &r->error_message) &&
              text_dup(row, "result_summary", &r->result_summary) && text_dup(row, "skill_name", &r->skill_name) &&
              text_dup(row, "skill_version", &r->skill_version) && text_dup(row, "skill_digest", &r->skill_digest) &&
              text_dup(row, "person_name", &r->person_name) && text_dup(row, "key_name", &r->key_name);
    if (!ok) {
        run_clear(r);
        return al_err(err, "runs", ENOMEM, "out of memory");
    }
    return 0;
}

#define RUN_COLUMNS                                                                                               \
    "seq, id, org_id, workspace_id, person_id, thread_id, language, code, description, network, limits, inputs, " \
    "state, result, previews, skipped, error_code, error_message, created_at, started_at, finished_at, price, "   \
    "redactions, image, input_bytes, result_summary, preview_count, skipped_count, skill_name, skill_version, "  \
    "skill_digest, node_id, cap, expired_at, " RUN_PERSON_COLUMNS

/* Who asked (the person's name and role, the key's name: api_keys' primary
 * key, one lookup in the same statement) and what the run cost (its
 * ledger's charge less its refund: the ledger's (run_id, kind) key is the
 * index), beside the run's own columns. */
#define RUN_PERSON_COLUMNS                                                                                        \
    "via, changed_at, (SELECT name FROM people pp WHERE pp.id = runs.person_id) AS person_name, "                \
    "(SELECT role FROM people pp WHERE pp.id = runs.person_id) AS person_role, "                                 \
    "(SELECT CAST(COALESCE(-SUM(amount), 0) AS BIGINT) FROM ledger l WHERE l.run_id = runs.id) AS credits, "   \
    "key_id, (SELECT name FROM api_keys kk WHERE kk.id = runs.key_id) AS key_name"

/* ---------------------------------------------------------------- rows */

static size_t len_of(const char *text) {
    return text ? strlen(text) : 0;
}

int al_store_run_insert(al_store *s, const al_store_run *r, al_error *err) {
    /* what the row holds counts against its organisation's storage from
     * the start (the code is most of it), in the same unit as the row */
    int64_t bytes = (int64_t)(len_of(r->code) + len_of(r->description) + len_of(r->network) + len_of(r->limits) +
                              len_of(r->inputs));
    int n = al_store_begin(s, err);
    if (n < 0)
        return n;
    n = al_store_exec(s, err,
                      "INSERT INTO runs (id, org_id, workspace_id, person_id, thread_id, language, code, description, "
                      "network, limits, inputs, state, created_at, price, image, input_bytes, skill_name, "
                      "skill_version, skill_digest, cap, node_id, stored_bytes, via, changed_at, key_id) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      "ssssSssssssssiSiSSSiSissS", r->id, r->org_id, r->workspace_id, r->person_id,
                      r->thread_id[0] ? r->thread_id : NULL, r->language, r->code,
                      r->description ? r->description : "", r->network, r->limits, r->inputs,
                      al_run_state_name(r->state), r->created_at, r->price, r->image[0] ? r->image : NULL,
                      r->input_bytes, r->skill_name, r->skill_version, r->skill_digest, r->cap > 0 ? r->cap : 3,
                      r->node_id[0] ? r->node_id : NULL, bytes, r->via[0] ? r->via : "rest", r->created_at,
                      r->key_id[0] ? r->key_id : NULL);
    if (n < 0) {
        al_store_rollback(s);
        return n;
    }
    n = al_store_exec_commit(s, err, "UPDATE orgs SET run_bytes = run_bytes + ? WHERE id = ?", "is", bytes, r->org_id);
    return n < 0 ? n : 0;
}

int al_store_run_get(al_store *s, const char *id, const char *ws_id, al_store_run **ret, al_error *err) {
    *ret = NULL;
    json_t *rows = al_store_query(s, err,
                                  "SELECT " RUN_COLUMNS " FROM runs WHERE id = ? "
                                  "AND (CAST(? AS TEXT) IS NULL OR workspace_id = ?)",
                                  "sSS", id, ws_id, ws_id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = -ENOENT;
    if (row) {
        al_store_run *run = malloc(sizeof *run);
        r = run ? run_from_row(row, run, err) : al_err(err, "runs", ENOMEM, "out of memory");
        if (r == 0)
            *ret = run;
        else
            free(run);
    }
    json_decref(rows);
    return r;
}

int al_store_run_state(al_store *s, const char *id, al_run_state *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT state FROM runs WHERE id = ?", "s", id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = row ? 0 : -ENOENT;
    if (row && (*ret = al_run_state_from_name(json_string_value(json_object_get(row, "state")))) ==
                   _AL_RUN_STATE_INVALID)
        r = al_err(err, "runs", EIO, "run %s has a malformed state", id);
    json_decref(rows);
    return r;
}

int al_store_run_move(al_store *s, const char *id, al_run_state from, al_run_state to, al_error *err) {
    if (!al_run_transition_ok(from, to))
        return al_err(err, "runs", EINVAL, "no such move of a run");
    char now[40];
    al_store_now(now, sizeof now);
    return al_store_exec(s, err, "UPDATE runs SET state = ?, changed_at = ? WHERE id = ? AND state = ?", "ssss",
                         al_run_state_name(to), now, id, al_run_state_name(from));
}

/* The names of MASK's states as a list for IN (...), into BUF; false when
 * MASK names none. Only names of the closed set go into the text. */
static bool state_list(unsigned mask, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < _AL_RUN_STATE_MAX; i++)
        if (mask & AL_RUN_BIT(i))
            o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s'%s'", o ? ", " : "", state_names[i]);
    return o > 0 && o < len;
}

int al_store_run_end(al_store *s, const char *id, unsigned from_mask, al_run_state to, const char *ecode,
                     const char *emsg, const char *finished_at, al_error *err) {
    char states[256], sql[512];
    bool ok = al_run_state_ended(to);
    for (int i = 0; i < _AL_RUN_STATE_MAX; i++)
        ok &= !(from_mask & AL_RUN_BIT(i)) || al_run_transition_ok((al_run_state)i, to);
    if (!ok || !state_list(from_mask, states, sizeof states))
        return al_err(err, "runs", EINVAL, "no such move of a run");
    snprintf(sql, sizeof sql,
             "UPDATE runs SET state = ?, error_code = ?, error_message = ?, finished_at = ?, changed_at = ? "
             "WHERE id = ? AND state IN (%s)",
             states);
    char now[40];
    al_store_now(now, sizeof now);
    return al_store_exec(s, err, sql, "SSSsss", al_run_state_name(to), ecode, emsg, finished_at, now, id);
}

int al_store_run_finish(al_store *s, const al_store_run *r, al_error *err) {
    /* from the states not ended that may move to this end: a run's end is
     * written only while it is queued or active */
    unsigned from = 0;
    static const al_run_state live[] = { AL_RUN_QUEUED, AL_RUN_PROVISIONING, AL_RUN_RUNNING };
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++)
        if (al_run_transition_ok(live[i], r->state))
            from |= AL_RUN_BIT(live[i]);
    char states[256], sql[512];
    if (!al_run_state_ended(r->state) || !state_list(from, states, sizeof states))
        return al_err(err, "runs", EINVAL, "no such end of a run");
    snprintf(sql, sizeof sql,
             "UPDATE runs SET state = ?, result = ?, previews = ?, skipped = ?, error_code = ?, "
             "error_message = ?, finished_at = ?, redactions = ?, result_summary = ?, preview_count = ?, "
             "skipped_count = ?, stored_bytes = stored_bytes + ?, changed_at = ? WHERE id = ? AND state IN (%s)",
             states);
    /* the documents written now, and what the caller says the run's
     * events hold (r->stored_bytes), join the organisation's count */
    int64_t bytes = (int64_t)(len_of(r->result) + len_of(r->previews) + len_of(r->skipped) +
                              len_of(r->error_message) + len_of(r->result_summary)) + r->stored_bytes;
    int n = al_store_begin(s, err);
    if (n < 0)
        return n;
    char now[40];
    al_store_now(now, sizeof now);
    n = al_store_exec(s, err, sql, "sSSSSSsiSiiiss", al_run_state_name(r->state), r->result, r->previews, r->skipped,
                      r->error_code[0] ? r->error_code : NULL, r->error_message, r->finished_at, r->redactions,
                      r->result_summary, r->preview_count, r->skipped_count, bytes, now, r->id);
    if (n <= 0) {
        al_store_rollback(s);
        return n < 0 ? n : 0;
    }
    n = al_store_exec_commit(s, err, "UPDATE orgs SET run_bytes = run_bytes + ? WHERE id = (SELECT org_id FROM runs "
                             "WHERE id = ?)", "is", bytes, r->id);
    return n < 0 ? n : 1;
}

/* ---------------------------------------------------------------- credits */

int al_store_run_charge(al_store *s, const char *id, const char *node_id, const char *now, al_error *err) {
    char led[40];
    al_store_new_id("led", led, sizeof led);
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* a run moved already (a restart, a race with a cancel, another node)
     * is left alone; and only the node that holds the claim starts it (a
     * node thought dead and back may not start what another now holds) */
    r = al_store_exec(s, err,
                      "UPDATE runs SET state = 'provisioning', started_at = ?, changed_at = ? WHERE id = ? "
                      "AND state = 'queued' AND node_id = ?",
                      "ssss", now, now, id, node_id);
    if (r <= 0) {
        al_store_rollback(s);
        return r < 0 ? r : 0;
    }
    /* the balance check and the debit are one guarded statement: two
     * charges of one organisation (on any node) cannot both see the same
     * balance, and the row stays locked to the commit, so the ledger's
     * balance_after is this charge's */
    r = al_store_exec(s, err,
                      "UPDATE orgs SET credit_balance = credit_balance - (SELECT price FROM runs WHERE id = ?) "
                      "WHERE id = (SELECT org_id FROM runs WHERE id = ?) "
                      "AND credit_balance >= (SELECT price FROM runs WHERE id = ?)",
                      "sss", id, id, id);
    if (r == 0) {
        al_store_rollback(s);
        return -ENOSPC;
    }
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    /* the ledger's row, and the commit with it */
    r = al_store_exec_commit(s, err,
                             "INSERT INTO ledger (id, org_id, workspace_id, run_id, kind, amount, balance_after, created_at) "
                             "SELECT ?, r.org_id, r.workspace_id, r.id, 'charge', -r.price, o.credit_balance, ? "
                             "FROM runs r JOIN orgs o ON o.id = r.org_id WHERE r.id = ?",
                             "sss", led, now, id);
    return r < 0 ? r : 1;
}

int al_store_run_refund(al_store *s, const char *id, const char *now, al_error *err) {
    char led[40], key[64];
    al_store_new_id("led", led, sizeof led);
    snprintf(key, sizeof key, "refund:%s", id);
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* read then write: whoever holds the run's refund lock is the one that
     * may find it unrefunded ((run_id, kind) unique is the last word) */
    r = al_store_lock(s, err, key);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    json_t *c = al_store_query(s, err,
                               "SELECT amount FROM ledger WHERE run_id = ? AND kind = 'charge' AND NOT EXISTS "
                               "(SELECT 1 FROM ledger WHERE run_id = ? AND kind = 'refund')",
                               "ss", id, id);
    if (!c || !json_array_size(c)) {
        json_decref(c);
        al_store_rollback(s);
        return c ? 0 : -EIO;
    }
    int64_t amount = -int_of(json_array_get(c, 0), "amount");
    json_decref(c);
    r = al_store_exec(s, err,
                      "UPDATE orgs SET credit_balance = credit_balance + ? WHERE id = (SELECT org_id FROM runs WHERE id = ?)",
                      "is", amount, id);
    if (r >= 0)
        r = al_store_exec(s, err,
                          "INSERT INTO ledger (id, org_id, workspace_id, run_id, kind, amount, balance_after, created_at) "
                          "SELECT ?, r.org_id, r.workspace_id, r.id, 'refund', ?, o.credit_balance, ? "
                          "FROM runs r JOIN orgs o ON o.id = r.org_id WHERE r.id = ?",
                          "siss", led, amount, now, id);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    r = al_store_commit(s, err);
    return r < 0 ? r : 1;
}

/* ---------------------------------------------------------------- lists */

static int ref_read(json_t *row, void *rec, al_error *err) {
    al_store_run_ref *ref = rec;
    ref->seq = int_of(row, "seq");
    if (!al_col_text(row, "id", ref->id, sizeof ref->id, true) ||
        !al_col_text(row, "org_id", ref->org_id, sizeof ref->org_id, true) ||
        !al_col_text(row, "workspace_id", ref->workspace_id, sizeof ref->workspace_id, true) ||
        !al_col_text(row, "person_id", ref->person_id, sizeof ref->person_id, true))
        return al_err(err, "runs", EIO, "a stored run is malformed");
    return 0;
}

static int refs_of(json_t *rows, al_store_run_ref **ret, size_t *ret_n, al_error *err) {
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, ref_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

int al_store_run_refs(al_store *s, unsigned mask, al_store_run_ref **ret, size_t *ret_n, al_error *err) {
    char states[256], sql[512];
    if (!state_list(mask, states, sizeof states))
        return al_err(err, "runs", EINVAL, "no states to list");
    snprintf(sql, sizeof sql,
             "SELECT seq, id, org_id, workspace_id, person_id FROM runs WHERE state IN (%s) ORDER BY seq", states);
    return refs_of(al_store_query(s, err, sql, NULL), ret, ret_n, err);
}

int al_store_run_refs_unrequested(al_store *s, al_store_run_ref **ret, size_t *ret_n, al_error *err) {
    return refs_of(al_store_query(s, err,
                                  "SELECT seq, id, org_id, workspace_id, person_id FROM runs r "
                                  "WHERE state = 'pending_approval' AND NOT EXISTS "
                                  "(SELECT 1 FROM approval_requests a WHERE a.run_id = r.id) ORDER BY seq",
                                  NULL),
                   ret, ret_n, err);
}

int al_store_run_refs_unrefunded(al_store *s, al_store_run_ref **ret, size_t *ret_n, al_error *err) {
    return refs_of(al_store_query(s, err,
                                  "SELECT r.seq, r.id, r.org_id, r.workspace_id, r.person_id FROM runs r "
                                  "JOIN ledger c ON c.run_id = r.id AND c.kind = 'charge' "
                                  "WHERE r.state = 'error' AND NOT EXISTS "
                                  "(SELECT 1 FROM ledger f WHERE f.run_id = r.id AND f.kind = 'refund') ORDER BY r.seq",
                                  NULL),
                   ret, ret_n, err);
}

int al_store_run_refs_approval_due(al_store *s, const char *now, al_store_run_ref **ret, size_t *ret_n,
                                   al_error *err) {
    return refs_of(al_store_query(s, err,
                                  "SELECT r.seq, r.id, r.org_id, r.workspace_id, r.person_id FROM approval_requests a "
                                  "JOIN runs r ON r.id = a.run_id WHERE a.decision IS NULL AND a.expires_at <= ? "
                                  "ORDER BY r.seq",
                                  "s", now),
                   ret, ret_n, err);
}

/* ---------------------------------------------------------------- sums */

static int one_int(json_t *rows, const char *key, int64_t *ret) {
    if (!rows)
        return -EIO;
    *ret = int_of(json_array_get(rows, 0), key);
    json_decref(rows);
    return 0;
}

int al_store_runs_queued_price(al_store *s, const char *org_id, int64_t *ret, al_error *err) {
    return one_int(al_store_query(s, err,
                                  "SELECT COALESCE(SUM(price), 0) AS n FROM runs WHERE org_id = ? AND state = 'queued'",
                                  "s", org_id),
                   "n", ret);
}

int al_store_runs_input_bytes(al_store *s, const char *org_id, unsigned mask, int64_t *ret, al_error *err) {
    char states[256], sql[512];
    if (!state_list(mask, states, sizeof states))
        return al_err(err, "runs", EINVAL, "no states to sum");
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(SUM(input_bytes), 0) AS n FROM runs WHERE org_id = ? AND state IN (%s)", states);
    return one_int(al_store_query(s, err, sql, "s", org_id), "n", ret);
}

int al_store_runs_count_of(al_store *s, const char *person_id, al_run_state st, int64_t *ret, al_error *err) {
    return one_int(al_store_query(s, err, "SELECT COUNT(*) AS n FROM runs WHERE person_id = ? AND state = ?", "ss",
                                  person_id, al_run_state_name(st)),
                   "n", ret);
}

#define RANGE_WHERE                                                                     \
    "WHERE workspace_id = ? AND (CAST(? AS TEXT) IS NULL OR created_at >= ?) "          \
    "AND (CAST(? AS TEXT) IS NULL OR created_at < ?) "

int al_store_runs_by_state(al_store *s, const char *ws_id, const char *from, const char *to,
                           int64_t ret[_AL_RUN_STATE_MAX], al_error *err) {
    /* every run's (the metrics) reads no other column */
    json_t *rows = ws_id ? al_store_query(s, err, "SELECT state, COUNT(*) AS n FROM runs " RANGE_WHERE "GROUP BY state",
                                          "sSSSS", ws_id, from, from, to, to)
                         : al_store_query(s, err, "SELECT state, COUNT(*) AS n FROM runs GROUP BY state", NULL);
    if (!rows)
        return -EIO;
    memset(ret, 0, sizeof(int64_t) * _AL_RUN_STATE_MAX);
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        al_run_state st = al_run_state_from_name(json_string_value(json_object_get(row, "state")));
        if (st != _AL_RUN_STATE_INVALID)
            ret[st] += int_of(row, "n");
    }
    json_decref(rows);
    return 0;
}

static int language_count_read(json_t *row, void *rec, al_error *err) {
    al_store_count *c = rec;
    c->n = int_of(row, "n");
    return al_col_text(row, "language", c->key, sizeof c->key, true)
               ? 0 : al_err(err, "runs", EIO, "a stored run's language is malformed");
}

int al_store_runs_by_language(al_store *s, const char *ws_id, const char *from, const char *to, al_store_count **ret,
                              size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err, "SELECT language, COUNT(*) AS n FROM runs " RANGE_WHERE "GROUP BY language",
                                  "sSSSS", ws_id, from, from, to, to);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, language_count_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

/* ---------------------------------------------------------------- list */

void al_store_run_brief_clear(al_store_run_brief *b) { run_clear(&b->run); }

void al_store_run_briefs_free(al_store_run_brief *b, size_t n) {
    for (size_t i = 0; b && i < n; i++)
        run_clear(&b[i].run);
    free(b);
}

/* A list's columns: small ones only, what a run printed (its result, up
 * to megabytes) is summarised when it ends, never loaded for a list. */
#define BRIEF_SELECT                                                                                               \
    "SELECT seq, id, org_id, workspace_id, person_id, thread_id, language, description, network, limits, state, "   \
    "error_code, error_message, created_at, started_at, finished_at, price, redactions, image, input_bytes, "       \
    "result_summary, preview_count, skipped_count, skill_name, skill_version, " RUN_PERSON_COLUMNS ", "             \
    "(SELECT COUNT(*) FROM artifacts a WHERE a.run_id = runs.id) AS artifact_count, "                              \
    "(SELECT id FROM approval_requests q WHERE q.run_id = runs.id) AS approval_id, "                               \
    "(SELECT hash FROM approval_requests q WHERE q.run_id = runs.id) AS approval_hash, "                           \
    "(SELECT decision FROM approval_requests q WHERE q.run_id = runs.id) AS approval_decision, "                   \
    "(SELECT expires_at FROM approval_requests q WHERE q.run_id = runs.id) AS approval_expires_at "                \
    "FROM runs "

/* ROWS (BRIEF_SELECT's, taken) into list entries. */
static int brief_read(json_t *row, void *rec, al_error *err) {
    al_store_run_brief *b = rec;
    int r = run_from_row(row, &b->run, err);
    if (r < 0)
        return r;
    b->artifact_count = int_of(row, "artifact_count");
    b->has_approval = json_is_string(json_object_get(row, "approval_id"));
    if (!al_col_text(row, "approval_id", b->approval_id, sizeof b->approval_id, true) ||
        !al_col_text(row, "approval_hash", b->approval_hash, sizeof b->approval_hash, true) ||
        !al_col_text(row, "approval_decision", b->approval_decision, sizeof b->approval_decision, true) ||
        !al_col_text(row, "approval_expires_at", b->approval_expires_at, sizeof b->approval_expires_at, true))
        return al_err(err, "runs", EIO, "a stored approval is malformed");
    return 0;
}

static void briefs_drop(void *recs, size_t n) { al_store_run_briefs_free(recs, n); }

static int briefs_from_rows(json_t *rows, al_store_run_brief **ret, size_t *ret_n, al_error *err) {
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, brief_read, briefs_drop, &v, ret_n, err);
    *ret = v;
    return r;
}

int al_store_run_list(al_store *s, const al_store_run_filter *f, al_store_run_brief **ret, size_t *ret_n,
                      al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    const char *state = al_run_state_name(f->state);
    json_t *rows = al_store_query(
        s, err,
        BRIEF_SELECT "WHERE workspace_id = ? AND (CAST(? AS TEXT) IS NULL OR state = ?) "
                     "AND (CAST(? AS TEXT) IS NULL OR thread_id = ?) AND (CAST(? AS TEXT) IS NULL OR person_id = ?) "
                     "AND (CAST(? AS TEXT) IS NULL OR via = ?) AND (CAST(? AS TEXT) IS NULL OR key_id = ?) "
                     "AND seq < ? ORDER BY seq DESC LIMIT ?",
        "sSSSSSSSSSSii", f->ws_id, state, state, f->thread_id, f->thread_id, f->person_id, f->person_id, f->via, f->via,
        f->key_id, f->key_id, f->before_seq, f->limit);
    return briefs_from_rows(rows, ret, ret_n, err);
}

int al_store_run_changes(al_store *s, const char *ws_id, const char *since, int64_t limit, al_store_run_brief **ret,
                         size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err,
                                  BRIEF_SELECT "WHERE workspace_id = ? AND changed_at >= ? "
                                               "ORDER BY changed_at, seq LIMIT ?",
                                  "ssi", ws_id, since, limit);
    return briefs_from_rows(rows, ret, ret_n, err);
}

int al_store_run_changes_all(al_store *s, const char *at, int64_t seq, int64_t limit, al_store_run_brief **ret,
                             size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    /* the range on changed_at is the index's; the seq test only splits the
     * rows of AT itself, so a page of many runs changed in one millisecond
     * is read on from its last, never again from its first */
    json_t *rows = al_store_query(s, err,
                                  BRIEF_SELECT "WHERE changed_at >= ? AND (changed_at > ? OR seq > ?) "
                                               "ORDER BY changed_at, seq LIMIT ?",
                                  "ssii", at, at, seq, limit);
    return briefs_from_rows(rows, ret, ret_n, err);
}

/* ---------------------------------------------------------------- by day */

static int day_count_read(json_t *row, void *rec, al_error *err) {
    al_store_day_count *d = rec;
    d->state = al_run_state_from_name(json_string_value(json_object_get(row, "state")));
    d->n = int_of(row, "n");
    if (!al_col_text(row, "day", d->day, sizeof d->day, false) ||
        !al_col_text(row, "language", d->language, sizeof d->language, false) ||
        !al_col_text(row, "via", d->via, sizeof d->via, false) || d->state == _AL_RUN_STATE_INVALID)
        return al_err(err, "runs", EIO, "a stored run is malformed");
    return 0;
}

int al_store_runs_by_day(al_store *s, const char *ws_id, const char *since, al_store_day_count **ret, size_t *ret_n,
                         al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err,
                                  "SELECT SUBSTR(created_at, 1, 10) AS day, state, language, via, COUNT(*) AS n "
                                  "FROM runs WHERE workspace_id = ? AND created_at >= ? "
                                  "GROUP BY SUBSTR(created_at, 1, 10), state, language, via",
                                  "ss", ws_id, since);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, day_count_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

static int day_credits_read(json_t *row, void *rec, al_error *err) {
    al_store_day_credits *d = rec;
    d->credits = int_of(row, "credits");
    return al_col_text(row, "day", d->day, sizeof d->day, false)
               ? 0 : al_err(err, "ledger", EIO, "a stored ledger entry is malformed");
}

int al_store_credits_by_day(al_store *s, const char *ws_id, const char *since, al_store_day_credits **ret,
                            size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err,
                                  "SELECT SUBSTR(created_at, 1, 10) AS day, CAST(-SUM(amount) AS BIGINT) AS credits "
                                  "FROM ledger WHERE workspace_id = ? AND created_at >= ? "
                                  "AND kind IN ('charge', 'refund') GROUP BY SUBSTR(created_at, 1, 10)",
                                  "ss", ws_id, since);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, day_credits_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

/* ---------------------------------------------------------------- threads */

static int thread_read(json_t *row, void *rec, al_error *err) {
    al_store_thread *t = rec;
    t->runs = int_of(row, "runs");
    t->artifacts = int_of(row, "artifacts");
    t->last_seq = int_of(row, "last_seq");
    if (!al_col_text(row, "thread_id", t->id, sizeof t->id, false) ||
        !al_col_text(row, "last_run_at", t->last_run_at, sizeof t->last_run_at, false))
        return al_err(err, "threads", EIO, "a stored thread id is malformed");
    return 0;
}

int al_store_threads_list(al_store *s, const char *ws_id, int64_t before, int64_t limit, int64_t scan,
                          al_store_thread **ret, size_t *ret_n, int64_t *ret_more, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    *ret_more = 0;
    /* the window: the SCAN runs below BEFORE, threaded or not (so that a
     * history of runs without a thread costs no more than SCAN) */
    json_t *win = al_store_query(s, err,
                                 "SELECT COUNT(*) AS n, MIN(seq) AS low FROM (SELECT seq FROM runs "
                                 "WHERE workspace_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?) w",
                                 "sii", ws_id, before, scan);
    if (!win)
        return -EIO;
    json_t *w0 = json_array_get(win, 0);
    if (int_of(w0, "n") >= scan)
        *ret_more = int_of(w0, "low");
    json_decref(win);
    /* the window's threads with no run at BEFORE or later (those were on
     * an earlier page), each counted whole */
    json_t *rows = al_store_query(
        s, err,
        "SELECT t.thread_id, t.last_seq, "
        "(SELECT COUNT(*) FROM runs r WHERE r.workspace_id = ? AND r.thread_id = t.thread_id) AS runs, "
        "(SELECT created_at FROM runs r WHERE r.seq = t.last_seq) AS last_run_at, "
        "(SELECT COUNT(*) FROM artifacts a WHERE a.workspace_id = ? AND a.thread_key = 't:' || t.thread_id "
        "AND a.superseded = 0) AS artifacts "
        "FROM (SELECT thread_id, MAX(seq) AS last_seq FROM (SELECT thread_id, seq FROM runs "
        "WHERE workspace_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?) w WHERE thread_id IS NOT NULL "
        "GROUP BY thread_id) t "
        "WHERE NOT EXISTS (SELECT 1 FROM runs r2 WHERE r2.workspace_id = ? AND r2.thread_id = t.thread_id "
        "AND r2.seq >= ?) ORDER BY t.last_seq DESC LIMIT ?",
        "sssiisii", ws_id, ws_id, ws_id, before, scan, ws_id, before, limit);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, thread_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

/* ---------------------------------------------------------------- events */

int al_store_event_append(al_store *s, const char *run_id, const char *type, const char *data, al_error *err) {
    return al_store_output_event_append(s, run_id, type, data, -1, 0, err);
}

int al_store_output_event_append(al_store *s, const char *run_id, const char *type, const char *data, int64_t at,
                                 int64_t len, al_error *err) {
    /* The next number, read and written in one statement: two appends to
     * one run at once (its runner, a cancel from another node) may read the
     * same number; the primary key refuses the second, which reads again.
     * One statement is a round trip, where a unit of work with a lock was
     * five: events are most of a run's writes. */
    int r = -EEXIST;
    for (int tries = 0; r == -EEXIST && tries < 16; tries++) {
        if (tries && err)
            *err = (al_error){ 0 }; /* the taken number was no failure */
        r = at < 0 ? al_store_exec(s, err,
                                   "INSERT INTO run_events (run_id, seq, type, data) "
                                   "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM run_events WHERE run_id = ?",
                                   "ssss", run_id, type, data, run_id)
                   : al_store_exec(s, err,
                                   "INSERT INTO run_events (run_id, seq, type, data, out_at, out_len) "
                                   "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM run_events WHERE run_id = ?",
                                   "sssiis", run_id, type, data, at, len, run_id);
    }
    return r < 0 ? r : 0;
}

int al_store_events_append(al_store *s, const char *run_id, size_t n, const char *const *types, const char *const *datas,
                           al_error *err) {
    /* as al_store_event_append, several in one statement: numbered after
     * the run's last as the statement found it, in order */
    enum { CHUNK = 8 };
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        if (k == 1) {
            int r = al_store_event_append(s, run_id, types[done], datas[done], err);
            if (r < 0)
                return r;
            done++;
            continue;
        }
        char sql[1024], fmt[2 + 3 * CHUNK + 1];
        size_t o = (size_t)snprintf(sql, sizeof sql,
                                    "WITH m AS (SELECT COALESCE(MAX(seq), 0) AS n FROM run_events WHERE run_id = ?) "
                                    "INSERT INTO run_events (run_id, seq, type, data) ");
        for (size_t i = 0; i < k; i++)
            o += (size_t)snprintf(sql + o, sizeof sql - o, "%sSELECT ?, n + %zu, ?, ? FROM m", i ? " UNION ALL " : "",
                                  i + 1);
        snprintf(fmt, sizeof fmt, "s%.*s", (int)(3 * k), "ssssssssssssssssssssssss");
        const char *a[1 + 3 * CHUNK] = { run_id };
        for (size_t i = 0; i < k; i++) {
            a[1 + 3 * i] = run_id;
            a[2 + 3 * i] = types[done + i];
            a[3 + 3 * i] = datas[done + i];
        }
        int r = -EEXIST;
        for (int tries = 0; r == -EEXIST && tries < 16; tries++) {
            if (tries && err)
                *err = (al_error){ 0 }; /* the taken number was no failure */
            /* CHUNK is 8: twenty-five parameters at most, all text */
            r = al_store_exec(s, err, sql, fmt, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                              a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24]);
        }
        if (r < 0)
            return r;
        done += k;
    }
    return 0;
}

void al_store_events_free(al_store_event *ev, size_t n) {
    for (size_t i = 0; ev && i < n; i++)
        free(ev[i].data);
    free(ev);
}

static int event_read(json_t *row, void *rec, al_error *err) {
    al_store_event *ev = rec;
    ev->seq = int_of(row, "seq");
    json_t *at = json_object_get(row, "out_at");
    ev->out_at = json_is_integer(at) ? json_integer_value(at) : -1;
    ev->out_len = int_of(row, "out_len");
    if (!al_col_text(row, "type", ev->type, sizeof ev->type, true))
        return al_err(err, "events", EIO, "a stored event is malformed");
    if (!text_dup(row, "data", &ev->data))
        return al_err(err, "events", ENOMEM, "out of memory");
    return ev->data ? 0 : al_err(err, "events", EIO, "a stored event is malformed");
}

static void events_drop(void *recs, size_t n) { al_store_events_free(recs, n); }

int al_store_events_after(al_store *s, const char *run_id, int64_t after, int64_t limit, al_store_event **ret,
                          size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err,
                                  "SELECT seq, type, data, out_at, out_len FROM run_events WHERE run_id = ? AND seq > ? "
                                  "ORDER BY seq LIMIT ?",
                                  "sii", run_id, after, limit);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, event_read, events_drop, &v, ret_n, err);
    *ret = v;
    return r;
}

int al_store_events_drop_output(al_store *s, const char *run_id, const char *type, al_error *err) {
    int n = al_store_exec(s, err, "UPDATE run_events SET data = '' WHERE run_id = ? AND type = ? AND out_at IS NOT NULL",
                          "ss", run_id, type);
    return n < 0 ? n : 0;
}

int al_store_event_result_by(al_store *s, const char *run_id, int64_t upto, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT 1 AS one FROM run_events WHERE run_id = ? AND type = 'result' AND seq <= ?",
                                  "si", run_id, upto);
    if (!rows)
        return -EIO;
    int r = json_array_size(rows) > 0;
    json_decref(rows);
    return r;
}

/* ---------------------------------------------------------------- analytics */

int al_store_analytics_put(al_store *s, const al_store_analytics *a, al_error *err) {
    int n = al_store_exec(s, err,
                          "INSERT INTO analytics (run_id, org_id, workspace_id, language, state, exit_code, duration_ms, "
                          "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET "
                          "org_id = excluded.org_id, workspace_id = excluded.workspace_id, language = excluded.language, "
                          "state = excluded.state, exit_code = excluded.exit_code, duration_ms = excluded.duration_ms, "
                          "created_at = excluded.created_at",
                          "sssssiis", a->run_id, a->org_id, a->workspace_id, a->language, al_run_state_name(a->state),
                          a->exit_code, a->duration_ms, a->created_at);
    return n < 0 ? n : 0;
}

/* ---------------------------------------------------------------- nodes */

int al_store_run_release(al_store *s, const char *id, const char *node_id, int64_t cap, al_error *err) {
    int n = al_store_exec(s, err, "UPDATE runs SET node_id = NULL, cap = ? WHERE id = ? AND state = 'queued' AND node_id = ?",
                          "iss", cap, id, node_id);
    return n < 0 ? n : n > 0;
}

int al_store_run_cancel_request(al_store *s, const char *id, al_error *err) {
    int n = al_store_exec(s, err,
                          "UPDATE runs SET cancel_requested = 1 WHERE id = ? AND state IN ('provisioning', 'running')", "s",
                          id);
    return n < 0 ? n : n > 0;
}

int al_store_run_cancel_requested(al_store *s, const char *id, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT cancel_requested FROM runs WHERE id = ?", "s", id);
    if (!rows)
        return -EIO;
    int r = json_integer_value(json_object_get(json_array_get(rows, 0), "cancel_requested")) != 0;
    json_decref(rows);
    return r;
}

int al_store_run_approved(al_store *s, const char *id, const char *node_id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    int n = al_store_exec(s, err,
                          "UPDATE runs SET state = 'queued', node_id = ?, changed_at = ? WHERE id = ? "
                          "AND state = 'pending_approval'",
                          "sss", node_id, now, id);
    return n < 0 ? n : n > 0;
}

int al_store_node_cancels(al_store *s, const char *node_id, char (*ret_ids)[40], int max, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT id FROM runs WHERE node_id = ? AND cancel_requested = 1 "
                                  "AND state IN ('provisioning', 'running') ORDER BY seq",
                                  "s", node_id);
    if (!rows)
        return -EIO;
    int n = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *v = json_string_value(json_object_get(row, "id"));
        if (v && strlen(v) < 40 && n < max)
            snprintf(ret_ids[n++], 40, "%s", v);
    }
    json_decref(rows);
    return n;
}

/* ---------------------------------------------------------------- retention */

int al_store_sweep_claim(al_store *s, const char *name, const char *node_id, const char *now, const char *next_at,
                         al_error *err) {
    /* one statement: of two nodes that read the same due time, the second
     * finds it moved and sweeps nothing */
    int n = al_store_exec(s, err, "UPDATE sweeps SET next_at = ?, node_id = ? WHERE name = ? AND next_at <= ?", "ssss",
                          next_at, node_id, name, now);
    return n < 0 ? n : n > 0;
}

int al_store_workspace_ids(al_store *s, const char *after, char (*ret_ids)[40], int max, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT id FROM workspaces WHERE id > ? ORDER BY id LIMIT ?", "si", after,
                                  (int64_t)max);
    if (!rows)
        return -EIO;
    int n = 0;
    for (size_t i = 0; i < json_array_size(rows) && n < max; i++)
        if (al_col_text(json_array_get(rows, i), "id", ret_ids[n], sizeof ret_ids[n], false))
            n++;
    json_decref(rows);
    return n;
}

int al_store_runs_expirable(al_store *s, const char *ws_id, const char *before, char (*ret_ids)[40], int max,
                            al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT id FROM runs WHERE workspace_id = ? AND expired_at IS NULL AND finished_at IS NOT "
                                  "NULL AND finished_at < ? ORDER BY finished_at LIMIT ?",
                                  "ssi", ws_id, before, (int64_t)max);
    if (!rows)
        return -EIO;
    int n = 0;
    for (size_t i = 0; i < json_array_size(rows) && n < max; i++)
        if (al_col_text(json_array_get(rows, i), "id", ret_ids[n], sizeof ret_ids[n], false))
            n++;
    json_decref(rows);
    return n;
}

int al_store_run_expire(al_store *s, const char *id, const char *now, al_error *err) {
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    /* the organisation gets back what the run counted; then the row keeps
     * its summary (state, times, result_summary, error, price) and loses
     * its code, inputs and documents; its events go (its audit events are
     * the audit chain's, not touched) */
    r = al_store_exec(s, err,
                      "UPDATE orgs SET run_bytes = run_bytes - (SELECT stored_bytes FROM runs WHERE id = ?) "
                      "WHERE id = (SELECT org_id FROM runs WHERE id = ? AND expired_at IS NULL)",
                      "ss", id, id);
    int changed = 0;
    if (r >= 0)
        r = changed = al_store_exec(s, err,
                                    "UPDATE runs SET code = '', inputs = '{}', result = NULL, previews = NULL, "
                                    "skipped = NULL, stored_bytes = 0, expired_at = ? WHERE id = ? AND expired_at IS NULL",
                                    "ss", now, id);
    if (r < 0 || changed == 0) {
        al_store_rollback(s);
        return r < 0 ? r : 0;
    }
    /* the approval card's copy of the code goes with the code: its hash
     * (a column of its own) and the decision stay */
    if ((r = al_store_exec(s, err, "UPDATE approval_requests SET card = '{\"expired\":true}' WHERE run_id = ?", "s",
                           id)) < 0) {
        al_store_rollback(s);
        return r;
    }
    r = al_store_exec_commit(s, err, "DELETE FROM run_events WHERE run_id = ?", "s", id);
    return r < 0 ? r : 1;
}
