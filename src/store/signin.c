/* The console's sign-in: login links, sessions, named keys (signin.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "signin.h"

void al_store_time_from_now(int64_t delta_s, char buf[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t t = ts.tv_sec + (time_t)delta_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, 40, "%s.%03ldZ", base, ts.tv_nsec / 1000000);
}

/* A secret of about 200 random bits, PREFIX_..., into RET (64 bytes). */
static int new_secret(const char *prefix, char ret[64]) {
    char a[32], b[32];
    int r;
    if ((r = al_store_new_id("x", a, sizeof a)) < 0 || (r = al_store_new_id("x", b, sizeof b)) < 0)
        return r;
    snprintf(ret, 64, "%s%s%s", prefix, a + 2, b + 2);
    return 0;
}

/* Columns org_id, workspace_id, person_id, role of ROW into P: a person
 * signed in, whom no API key authenticates (no key_id). */
static bool row_principal(json_t *row, al_principal *p) {
    p->key_id[0] = '\0';
    return al_col_text(row, "org_id", p->org_id, sizeof p->org_id, false) &&
           al_col_text(row, "workspace_id", p->workspace_id, sizeof p->workspace_id, false) &&
           al_col_text(row, "person_id", p->person_id, sizeof p->person_id, false) &&
           al_col_text(row, "role", p->role, sizeof p->role, false);
}

static int principal_of(al_store *s, const char *person_id, al_principal *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT org_id, workspace_id, id AS person_id, role FROM people WHERE id = ?",
                                  "s", person_id);
    if (!rows)
        return -EIO;
    int r = 0;
    if (json_array_size(rows) != 1)
        r = al_err(err, "store", ENOENT, "no person %s", person_id);
    else if (!row_principal(json_array_get(rows, 0), ret))
        r = al_err(err, "store", EIO, "person %s's stored row is malformed", person_id);
    json_decref(rows);
    return r;
}

int al_store_login_link_create(al_store *s, const char *person_id, int64_t ttl_s, char ret_token[64], char ret_id[40],
                               char ret_expires_at[40], al_principal *ret_p, al_error *err) {
    al_principal p;
    int r = principal_of(s, person_id, &p, err);
    if (r < 0)
        return r;
    char now[40], token[64], hex[65];
    al_store_now(now, sizeof now);
    al_store_time_from_now(ttl_s, ret_expires_at);
    if ((r = new_secret("ll_", token)) < 0 || (r = al_store_new_id("lnk", ret_id, 40)) < 0)
        return al_err(err, "store", -r, "no randomness for a login link");
    al_store_hash_secret(token, hex);
    r = al_store_exec(s, err, "INSERT INTO login_links (id, person_id, hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)",
                      "sssss", ret_id, person_id, hex, now, ret_expires_at);
    if (r < 0)
        return r;
    snprintf(ret_token, 64, "%s", token);
    if (ret_p)
        *ret_p = p;
    return 0;
}

/* Why TOKEN's link cannot be redeemed (its hash HEX): -ENOENT, -EALREADY
 * or -ETIMEDOUT, said in ERR. */
static int link_refused(al_store *s, const char *hex, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT used_at FROM login_links WHERE hash = ?", "s", hex);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = !row ? al_err(err, "signin", ENOENT, "this sign-in link is not known")
            : json_is_string(json_object_get(row, "used_at")) ? al_err(err, "signin", EALREADY, "this sign-in link was used already")
            : al_err(err, "signin", ETIMEDOUT, "this sign-in link has expired");
    json_decref(rows);
    return r;
}

int al_store_login_link_redeem(al_store *s, const char *token, int64_t session_ttl_s, char ret_secret[64],
                               al_store_session *ret, al_principal *ret_p, al_error *err) {
    /* a token is "ll_" and 40 of new_secret's letters: anything else is
     * unknown without a look at the store */
    if (!token || strncmp(token, "ll_", 3) != 0 || strlen(token) != 43 ||
        strspn(token + 3, "0123456789abcdefghjkmnpqrstvwxyz") != 40)
        return al_err(err, "signin", ENOENT, "this sign-in link is not known");
    char hex[65], now[40], secret[64], shex[65];
    al_store_hash_secret(token, hex);
    /* and one the store does not hold is said from a read: guesses, however
     * many, never open a write transaction (on SQLite, the lock the runs'
     * writes wait on) */
    json_t *known = al_store_query(s, err, "SELECT 1 AS one FROM login_links WHERE hash = ?", "s", hex);
    if (!known)
        return -EIO;
    size_t n_known = json_array_size(known);
    json_decref(known);
    if (n_known == 0)
        return al_err(err, "signin", ENOENT, "this sign-in link is not known");
    al_store_now(now, sizeof now);
    memset(ret, 0, sizeof *ret);
    int r;
    if ((r = new_secret("cs_", secret)) < 0 || (r = al_store_new_id("ses", ret->id, sizeof ret->id)) < 0)
        return al_err(err, "store", -r, "no randomness for a session");
    al_store_hash_secret(secret, shex);
    al_store_time_from_now(session_ttl_s, ret->expires_at);
    if ((r = al_store_begin(s, err)) < 0)
        return r;
    /* the check and the mark are one statement: of two at once, one wins */
    r = al_store_exec(s, err, "UPDATE login_links SET used_at = ? WHERE hash = ? AND used_at IS NULL AND expires_at > ?",
                      "sss", now, hex, now);
    if (r == 0) {
        al_store_rollback(s);
        return link_refused(s, hex, err);
    }
    json_t *rows = r < 0 ? NULL : al_store_query(s, err, "SELECT id, person_id FROM login_links WHERE hash = ?", "s", hex);
    json_t *row = json_array_get(rows, 0);
    char link_id[40];
    if (!rows || !al_col_text(row, "id", link_id, sizeof link_id, false) ||
        !al_col_text(row, "person_id", ret->person_id, sizeof ret->person_id, false)) {
        json_decref(rows);
        al_store_rollback(s);
        return rows ? al_err(err, "store", EIO, "a login link's stored row is malformed") : -EIO;
    }
    json_decref(rows);
    if ((r = principal_of(s, ret->person_id, ret_p, err)) < 0 ||
        (r = al_store_exec(s, err,
                           "INSERT INTO console_sessions (id, person_id, hash, link_id, created_at, expires_at) "
                           "VALUES (?, ?, ?, ?, ?, ?)",
                           "ssssss", ret->id, ret->person_id, shex, link_id, now, ret->expires_at)) < 0) {
        al_store_rollback(s);
        return r;
    }
    if ((r = al_store_commit(s, err)) < 0)
        return r;
    snprintf(ret_secret, 64, "%s", secret);
    return 0;
}

int al_store_session_authenticate(al_store *s, const char *secret, al_principal *ret_p, al_store_session *ret,
                                  al_error *err) {
    if (!secret || strlen(secret) > 128)
        return 0;
    char hex[65], now[40];
    al_store_hash_secret(secret, hex);
    al_store_now(now, sizeof now);
    json_t *rows = al_store_query(s, err,
                                  "SELECT c.id, c.expires_at, p.org_id, p.workspace_id, p.id AS person_id, p.role "
                                  "FROM console_sessions c JOIN people p ON p.id = c.person_id "
                                  "WHERE c.hash = ? AND c.revoked_at IS NULL AND c.expires_at > ?",
                                  "ss", hex, now);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (row) {
        memset(ret, 0, sizeof *ret);
        r = al_col_text(row, "id", ret->id, sizeof ret->id, false) &&
            al_col_text(row, "expires_at", ret->expires_at, sizeof ret->expires_at, false) && row_principal(row, ret_p)
                ? 1 : al_err(err, "store", EIO, "a session's stored row is malformed");
        snprintf(ret->person_id, sizeof ret->person_id, "%s", ret_p->person_id);
    }
    json_decref(rows);
    return r;
}

int al_store_session_live(al_store *s, const char *id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    json_t *rows = al_store_query(s, err,
                                  "SELECT 1 AS one FROM console_sessions c JOIN people p ON p.id = c.person_id "
                                  "WHERE c.id = ? AND c.revoked_at IS NULL AND c.expires_at > ?",
                                  "ss", id, now);
    if (!rows)
        return -EIO;
    int r = json_array_size(rows) == 1;
    json_decref(rows);
    return r;
}

int al_store_session_revoke(al_store *s, const char *id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    int r = al_store_exec(s, err, "UPDATE console_sessions SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", "ss",
                          now, id);
    return r < 0 ? r : r > 0;
}

int al_store_person_card_get(al_store *s, const char *person_id, al_store_person_card *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.org_id, p.workspace_id, p.id AS person_id, p.role, p.name AS person_name, "
                                  "w.name AS workspace_name, o.name AS org_name FROM people p "
                                  "JOIN workspaces w ON w.id = p.workspace_id JOIN orgs o ON o.id = p.org_id WHERE p.id = ?",
                                  "s", person_id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row)
        r = al_err(err, "store", ENOENT, "no person %s", person_id);
    else if (!row_principal(row, &ret->p) ||
             !al_col_text(row, "person_name", ret->person_name, sizeof ret->person_name, false) ||
             !al_col_text(row, "workspace_name", ret->workspace_name, sizeof ret->workspace_name, false) ||
             !al_col_text(row, "org_name", ret->org_name, sizeof ret->org_name, false))
        r = al_err(err, "store", EIO, "person %s's stored row is malformed", person_id);
    json_decref(rows);
    return r;
}

int al_store_signin_sweep(al_store *s, const char *before, al_error *err) {
    int a = al_store_exec(s, err, "DELETE FROM login_links WHERE expires_at < ?", "s", before);
    if (a < 0)
        return a;
    int b = al_store_exec(s, err, "DELETE FROM console_sessions WHERE expires_at < ? OR revoked_at < ?", "ss", before,
                          before);
    return b < 0 ? b : a + b;
}

int al_store_first_admin(al_store *s, char ret_id[40], al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.id FROM people p JOIN workspaces w ON w.id = p.workspace_id "
                                  "WHERE p.role = 'admin' ORDER BY w.created_at, w.id, p.created_at, p.id LIMIT 1",
                                  NULL);
    if (!rows)
        return -EIO;
    int r = al_col_text(json_array_get(rows, 0), "id", ret_id, 40, false) ? 1 : 0;
    json_decref(rows);
    return r;
}

int al_store_create_key_named(al_store *s, const char *person_id, const char *name, char *ret_key, char *ret_id,
                              al_error *err) {
    char now[40], secret[64], hex[65], prefix[16];
    al_store_now(now, sizeof now);
    int r;
    if ((r = al_store_new_id("key", ret_id, 40)) < 0 || (r = new_secret("al_", secret)) < 0)
        return al_err(err, "store", -r, "no randomness for a key");
    al_store_hash_secret(secret, hex);
    snprintf(prefix, sizeof prefix, "%.10s", secret);
    r = al_store_exec(s, err, "INSERT INTO api_keys (id, person_id, hash, prefix, created_at, name) "
                              "SELECT ?, id, ?, ?, ?, ? FROM people WHERE id = ?",
                      "ssssss", ret_id, hex, prefix, now, name, person_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no person %s", person_id);
    if (r < 0)
        return r;
    snprintf(ret_key, 64, "%s", secret);
    return 0;
}

#define KEY_COLUMNS                                                                                                    \
    "SELECT k.id, k.person_id, p.workspace_id, p.name AS person_name, k.name, k.prefix, k.created_at, k.revoked_at, " \
    "k.last_used_at FROM api_keys k JOIN people p ON p.id = k.person_id "

static bool row_key(json_t *row, al_store_key *k) {
    memset(k, 0, sizeof *k);
    return al_col_text(row, "id", k->id, sizeof k->id, false) &&
           al_col_text(row, "person_id", k->person_id, sizeof k->person_id, false) &&
           al_col_text(row, "workspace_id", k->workspace_id, sizeof k->workspace_id, false) &&
           al_col_text(row, "person_name", k->person_name, sizeof k->person_name, false) &&
           al_col_text(row, "name", k->name, sizeof k->name, false) &&
           al_col_text(row, "prefix", k->prefix, sizeof k->prefix, false) &&
           al_col_text(row, "created_at", k->created_at, sizeof k->created_at, false) &&
           al_col_text(row, "revoked_at", k->revoked_at, sizeof k->revoked_at, true) &&
           al_col_text(row, "last_used_at", k->last_used_at, sizeof k->last_used_at, true);
}

static int key_read(json_t *row, void *rec, al_error *err) {
    return row_key(row, rec) ? 0 : al_err(err, "store", EIO, "a stored key is malformed");
}

int al_store_keys_list(al_store *s, const char *workspace_id, const char *person_id, size_t limit, al_store_key **ret,
                       size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = person_id
                       ? al_store_query(s, err, KEY_COLUMNS "WHERE p.workspace_id = ? AND k.person_id = ? "
                                                            "ORDER BY k.created_at DESC, k.id DESC LIMIT ?",
                                        "ssi", workspace_id, person_id, al_store_row_limit(limit))
                       : al_store_query(s, err, KEY_COLUMNS "WHERE p.workspace_id = ? ORDER BY k.created_at DESC, k.id DESC LIMIT ?",
                                        "si", workspace_id, al_store_row_limit(limit));
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, key_read, NULL, &v, ret_n, err);
    *ret = v;
    return r;
}

int al_store_key_get(al_store *s, const char *id, al_store_key *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, KEY_COLUMNS "WHERE k.id = ?", "s", id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = !row ? al_err(err, "store", ENOENT, "no key %s", id)
            : row_key(row, ret) ? 0 : al_err(err, "store", EIO, "key %s's stored row is malformed", id);
    json_decref(rows);
    return r;
}

int al_store_keys_active(al_store *s, const char *person_id, int64_t *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT COUNT(*) AS n FROM api_keys WHERE person_id = ? AND revoked_at IS NULL",
                                  "s", person_id);
    if (!rows)
        return -EIO;
    *ret = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return 0;
}

int al_store_keys_lock(al_store *s, const char *person_id, al_error *err) {
    char key[80];
    snprintf(key, sizeof key, "keys:%s", person_id);
    return al_store_lock(s, err, key);
}
