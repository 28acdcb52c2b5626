/* Tenants and their keys: organisations, workspaces, people, API keys. */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static void hash_key(const char *key, char hex[65]) {
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
    char now[40], secret[48], hex[65], prefix[16];
    al_store_now(now, sizeof now);
    al_store_new_id("key", ret_id, 40);
    /* two random ids back to back: 200 bits from getrandom */
    char a[32], b[32];
    al_store_new_id("x", a, sizeof a);
    al_store_new_id("x", b, sizeof b);
    snprintf(secret, sizeof secret, "al_%s%s", a + 2, b + 2);
    hash_key(secret, hex);
    snprintf(prefix, sizeof prefix, "%.10s", secret);
    int r = al_store_exec(s, err, "INSERT INTO api_keys (id, person_id, hash, prefix, created_at) "
                                  "SELECT ?, id, ?, ?, ? FROM people WHERE id = ?",
                          "sssss", ret_id, hex, prefix, now, person_id);
    if (r == 0)
        return al_err(err, "store", ENOENT, "no person %s", person_id);
    if (r < 0)
        return r;
    snprintf(ret_key, 64, "%s", secret);
    return 0;
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

int al_store_authenticate(al_store *s, const char *key, al_principal *ret, al_error *err) {
    if (!key || strlen(key) > 128)
        return 0;
    char hex[65];
    hash_key(key, hex);
    json_t *rows = al_store_query(s, err,
                                  "SELECT p.org_id, p.workspace_id, p.id AS person_id, p.role FROM api_keys k "
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
    }
    json_decref(rows);
    return found;
}
