/* Tenants and their keys: organisations, workspaces, people, API keys
 * (store.h, tenants.h). */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "signin.h"

void al_store_hash_secret(const char *key, char hex[65]) {
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, strlen(key), (const uint8_t *)key);
    sha256_digest(&c, sizeof d, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* New organisations start with this many credits (a ledger grant). */
#define INITIAL_CREDITS 1000

int al_store_create_org(al_store *s, const char *name, char *ret_id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    al_store_new_id("org", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO orgs (id, name, created_at) VALUES (?, ?, ?)", "sss", ret_id, name, now);
    if (r < 0)
        return r;
    return al_store_grant_credits(s, ret_id, INITIAL_CREDITS, err);
}

int al_store_grant_credits(al_store *s, const char *org_id, int64_t amount, al_error *err) {
    char now[40], id[40];
    al_store_now(now, sizeof now);
    al_store_new_id("led", id, sizeof id);
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    r = al_store_exec(s, err, "UPDATE orgs SET credit_balance = credit_balance + ? WHERE id = ? AND credit_balance + ? >= 0",
                      "isi", amount, org_id, amount);
    if (r == 0)
        r = al_err(err, "credits", ENOENT, "no organisation %s, or the balance would go below zero", org_id);
    if (r > 0)
        r = al_store_exec(s, err,
                          "INSERT INTO ledger (id, org_id, kind, amount, balance_after, created_at) "
                          "SELECT ?, id, 'grant', ?, credit_balance, ? FROM orgs WHERE id = ?",
                          "siss", id, amount, now, org_id);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

int al_store_create_workspace(al_store *s, const char *org_id, const char *name, char *ret_id, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    al_store_new_id("ws", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO workspaces (id, org_id, name, created_at) SELECT ?, id, ?, ? FROM orgs WHERE id = ?",
                          "ssss", ret_id, name, now, org_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no organisation %s", org_id);
    return r < 0 ? r : 0;
}

int al_store_create_person(al_store *s, const char *ws_id, const char *name, const char *role, char *ret_id,
                           al_error *err) {
    char now[40];
    if (strcmp(role, "admin") != 0 && strcmp(role, "approver") != 0 && strcmp(role, "member") != 0)
        return al_err(err, "store", EINVAL, "role must be admin, approver or member");
    al_store_now(now, sizeof now);
    al_store_new_id("per", ret_id, 40);
    int r = al_store_exec(s, err, "INSERT INTO people (id, org_id, workspace_id, name, role, created_at) "
                                  "SELECT ?, org_id, id, ?, ?, ? FROM workspaces WHERE id = ?",
                          "sssss", ret_id, name, role, now, ws_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no workspace %s", ws_id);
    return r < 0 ? r : 0;
}

int al_store_create_key(al_store *s, const char *person_id, char *ret_key, char *ret_id, al_error *err) {
    return al_store_create_key_named(s, person_id, "default", ret_key, ret_id, err);
}

/* The owner of key KEY_ID (revoked or not) into *RET; -ENOENT when none. */
static int key_owner(al_store *s, const char *key_id, al_principal *ret, bool *ret_revoked, al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.org_id, p.workspace_id, p.id AS person_id, p.role, k.revoked_at FROM api_keys k "
                                  "JOIN people p ON p.id = k.person_id WHERE k.id = ?",
                                  "s", key_id);
    if (!rows)
        return -EIO;
    if (json_array_size(rows) != 1) {
        json_decref(rows);
        return al_err(err, "store", ENOENT, "no key %s", key_id);
    }
    json_t *r = json_array_get(rows, 0);
    if (ret) {
        snprintf(ret->org_id, sizeof ret->org_id, "%s", json_string_value(json_object_get(r, "org_id")));
        snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", json_string_value(json_object_get(r, "workspace_id")));
        snprintf(ret->person_id, sizeof ret->person_id, "%s", json_string_value(json_object_get(r, "person_id")));
        snprintf(ret->role, sizeof ret->role, "%s", json_string_value(json_object_get(r, "role")));
    }
    *ret_revoked = json_is_string(json_object_get(r, "revoked_at"));
    json_decref(rows);
    return 0;
}

int al_store_revoke_key(al_store *s, const char *key_id, al_principal *ret_principal, al_error *err) {
    al_principal p;
    bool revoked = false;
    int r = key_owner(s, key_id, &p, &revoked, err);
    if (r < 0)
        return r;
    char now[40];
    al_store_now(now, sizeof now);
    r = al_store_exec(s, err, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", "ss", now, key_id);
    if (r == 0)
        return al_err(err, "store", EALREADY, "key %s was revoked already", key_id);
    if (r < 0)
        return r;
    if (ret_principal)
        *ret_principal = p;
    return 0;
}

int al_store_rotate_key(al_store *s, const char *key_id, char *ret_key, char *ret_id, al_principal *ret_principal,
                        al_error *err) {
    al_principal p;
    bool revoked = false;
    int r = key_owner(s, key_id, &p, &revoked, err);
    if (r < 0)
        return r;
    if (revoked)
        return al_err(err, "store", EALREADY, "key %s is revoked: create a new one (key create --person %s)", key_id,
                      p.person_id);
    if ((r = al_store_begin(s, err)) < 0)
        return r;
    r = al_store_create_key(s, p.person_id, ret_key, ret_id, err);
    if (r == 0)
        r = al_store_revoke_key(s, key_id, NULL, err);
    if (r < 0) {
        al_store_rollback(s);
        ret_key[0] = '\0';
        return r;
    }
    if ((r = al_store_commit(s, err)) < 0) {
        ret_key[0] = '\0';
        return r;
    }
    if (ret_principal)
        *ret_principal = p;
    return 0;
}

/* When a key was last used, written at most once a minute per key (a
 * write per request would make every read a write); a failure to record
 * it does not refuse the request. */
static void mark_used(al_store *s, json_t *row) {
    char now[40], last[40], id[40];
    if (!al_col_text(row, "id", id, sizeof id, false) || !al_col_text(row, "last_used_at", last, sizeof last, true))
        return;
    al_store_now(now, sizeof now);
    /* the same format: the first 16 characters are the minute */
    if (last[0] && strncmp(last, now, 16) == 0)
        return;
    al_error e = { 0 };
    (void)al_store_exec(s, &e, "UPDATE api_keys SET last_used_at = ? WHERE id = ?", "ss", now, id);
}

int al_store_authenticate(al_store *s, const char *key, al_principal *ret, al_error *err) {
    if (!key || strlen(key) > 128)
        return 0;
    char hex[65];
    al_store_hash_secret(key, hex);
    json_t *rows = al_store_query(s, err,
                                  "SELECT k.id, k.last_used_at, p.org_id, p.workspace_id, p.id AS person_id, p.role FROM api_keys k "
                                  "JOIN people p ON p.id = k.person_id WHERE k.hash = ? AND k.revoked_at IS NULL",
                                  "s", hex);
    if (!rows)
        return -EIO;
    int found = json_array_size(rows) == 1;
    if (found) {
        json_t *r = json_array_get(rows, 0);
        snprintf(ret->org_id, sizeof ret->org_id, "%s", json_string_value(json_object_get(r, "org_id")));
        snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", json_string_value(json_object_get(r, "workspace_id")));
        snprintf(ret->person_id, sizeof ret->person_id, "%s", json_string_value(json_object_get(r, "person_id")));
        snprintf(ret->role, sizeof ret->role, "%s", json_string_value(json_object_get(r, "role")));
        snprintf(ret->key_id, sizeof ret->key_id, "%s", json_string_value(json_object_get(r, "id")));
        mark_used(s, r);
    }
    json_decref(rows);
    return found;
}

#include "tenants.h"


int al_store_workspace_get(al_store *s, const char *id, al_store_workspace *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    json_t *rows = al_store_query(s, err,
                                  "SELECT id, org_id, max_timeout_s, max_memory_mb, max_cpus_milli, max_pids, price_per_run, "
                                  "created_at FROM workspaces WHERE id = ?",
                                  "s", id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row) {
        r = al_err(err, "store", ENOENT, "no workspace %s", id);
    } else if (!al_col_text(row, "id", ret->id, sizeof ret->id, false) ||
               !al_col_text(row, "org_id", ret->org_id, sizeof ret->org_id, false) ||
               !al_col_text(row, "created_at", ret->created_at, sizeof ret->created_at, false)) {
        r = al_err(err, "store", EIO, "workspace %s's stored row is malformed", id);
    } else {
        /* json_integer_value is 0 for what is not an integer */
        ret->max_timeout_s = json_integer_value(json_object_get(row, "max_timeout_s"));
        ret->max_memory_mb = json_integer_value(json_object_get(row, "max_memory_mb"));
        ret->max_cpus_milli = json_integer_value(json_object_get(row, "max_cpus_milli"));
        ret->max_pids = json_integer_value(json_object_get(row, "max_pids"));
        ret->has_price = json_is_integer(json_object_get(row, "price_per_run"));
        ret->price_per_run = json_integer_value(json_object_get(row, "price_per_run"));
    }
    json_decref(rows);
    return r;
}

int al_store_tenants_each(al_store *s, al_tenant_kind kind, int (*each)(const al_store_tenant *t, void *userdata),
                          void *userdata, al_error *err) {
    /* each listing's columns under the same names: id, parent_id, name,
     * prefix, created_at, revoked_at */
    static const char *const sql[_AL_TENANT_KIND_MAX] = {
        [AL_TENANT_ORG] = "SELECT id, name, created_at FROM orgs ORDER BY created_at, id",
        [AL_TENANT_WORKSPACE] = "SELECT id, org_id AS parent_id, name, created_at FROM workspaces ORDER BY created_at, id",
        [AL_TENANT_PERSON] = "SELECT id, workspace_id AS parent_id, name, created_at FROM people ORDER BY created_at, id",
        [AL_TENANT_KEY] = "SELECT id, person_id AS parent_id, name, prefix, created_at, revoked_at FROM api_keys "
                          "ORDER BY created_at, id",
    };
    if (kind < 0 || kind >= _AL_TENANT_KIND_MAX)
        return al_err(err, "store", EINVAL, "not a kind of tenant");
    json_t *rows = al_store_query(s, err, sql[kind], NULL);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        al_store_tenant t = { .name = json_string_value(json_object_get(row, "name")) };
        bool key = kind == AL_TENANT_KEY;
        if (!al_col_text(row, "id", t.id, sizeof t.id, false) || !al_col_text(row, "created_at", t.created_at, sizeof t.created_at, false) ||
            (kind != AL_TENANT_ORG && !al_col_text(row, "parent_id", t.parent_id, sizeof t.parent_id, false)) ||
            (!key && !t.name) || (key && !al_col_text(row, "prefix", t.key_prefix, sizeof t.key_prefix, false)) ||
            (key && !al_col_text(row, "revoked_at", t.revoked_at, sizeof t.revoked_at, true))) {
            r = al_err(err, "store", EIO, "a stored tenant is malformed");
            break;
        }
        if ((r = each(&t, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_keys_count(al_store *s, int64_t *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT COUNT(*) AS n FROM api_keys", NULL);
    if (!rows)
        return -EIO;
    *ret = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return 0;
}

/* The "id" of the one row of ROWS into RET_ID: 1, 0 none, -EIO. */
static int one_id(json_t *rows, char *ret_id) {
    if (!rows)
        return -EIO;
    const char *id = json_string_value(json_object_get(json_array_get(rows, 0), "id"));
    int r = id && strlen(id) < 40 ? (snprintf(ret_id, 40, "%s", id), 1) : 0;
    json_decref(rows);
    return r;
}

int al_store_person_named(al_store *s, const char *name, char *ret_id, al_error *err) {
    return one_id(al_store_query(s, err, "SELECT id FROM people WHERE name = ? ORDER BY created_at, id LIMIT 1", "s", name),
                  ret_id);
}

int al_store_first_workspace(al_store *s, char *ret_id, al_error *err) {
    return one_id(al_store_query(s, err, "SELECT id FROM workspaces ORDER BY created_at, id LIMIT 1", NULL), ret_id);
}

void al_store_people_free(al_store_person *p, size_t n) {
    for (size_t i = 0; p && i < n; i++)
        free(p[i].name);
    free(p);
}

static int person_read(json_t *row, void *rec, al_error *err) {
    al_store_person *p = rec;
    const char *name = json_string_value(json_object_get(row, "name"));
    if (!al_col_text(row, "id", p->id, sizeof p->id, false) || !al_col_text(row, "role", p->role, sizeof p->role, false) ||
        !name)
        return al_err(err, "people", EIO, "a stored person is malformed");
    return (p->name = strdup(name)) ? 0 : al_err(err, "people", ENOMEM, "out of memory");
}

static void people_drop(void *recs, size_t n) { al_store_people_free(recs, n); }

int al_store_people_list(al_store *s, const char *ws_id, int64_t limit, al_store_person **ret, size_t *ret_n,
                         al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    json_t *rows = al_store_query(s, err,
                                  "SELECT id, name, role FROM people WHERE workspace_id = ? ORDER BY created_at, id "
                                  "LIMIT ?",
                                  "si", ws_id, limit);
    void *v;
    int r = al_store_rows_read(rows, sizeof **ret, person_read, people_drop, &v, ret_n, err);
    *ret = v;
    return r;
}
