/*
 * The store: tenants, keys, runs, their events and artifacts, as typed
 * records (this file and the headers beside it). Two backends sit behind
 * it (backend.h): SQLite, embedded, and PostgreSQL, which many nodes share.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"

typedef struct al_store al_store;

typedef struct al_principal {
    char org_id[40], workspace_id[40], person_id[40];
    char role[16];                /* admin | approver | member */
    /* the API key that authenticated the request ("" none: a console
     * session); a run records it, so that the console tells a person's
     * agents apart by their keys' names */
    char key_id[40];
} al_principal;

/* Where the store is: SETTING is the `store` configuration ("sqlite", the
 * default, for STATE_DIR/airlock.db; or a postgresql://USER@HOST/DB
 * address, libpq's connection URI). */
int al_store_locate(const char *setting, const char *state_dir, char *buf, size_t len, al_error *err);
/* Open TARGET (al_store_locate's answer: a file path for SQLite, a
 * postgresql:// address) and apply its missing migrations. */
int al_store_open(const char *target, al_store **ret, al_error *err);
/* The same, for a store that exists already: -ENOENT, said, where TARGET
 * holds none (a file that is not there, a database without airlock's
 * tables), and nothing is created. */
int al_store_open_existing(const char *target, al_store **ret, al_error *err);
/* Whether TARGET is the embedded store (a file of one state directory). */
bool al_store_is_embedded(const char *target);
/* "sqlite" or "postgresql". */
const char *al_store_backend_name(const al_store *s);
/* What the store has cost since it was opened: statements sent (each
 * query, write, BEGIN, COMMIT, savepoint, lock), units of work, the time
 * spent in the backend, waits for a connection of its pool included, and
 * where the engine tells it, the work its statements did. */
typedef struct al_store_stats {
    uint64_t statements, units, failures;
    uint64_t busy_ns;
    /* the engine's own measure of the work its statements did (SQLite: its
     * virtual machine's steps), and whether it tells one (PostgreSQL not) */
    uint64_t steps;
    bool has_steps;
} al_store_stats;
void al_store_get_stats(al_store *s, al_store_stats *ret);
void al_store_close(al_store *s);

/* A unit of work: the store calls made between begin and commit land
 * together or not at all (one begun inside another is a savepoint of it),
 * e.g. an operation and the audit event that says it happened. */
int al_store_begin(al_store *s, al_error *err);
int al_store_commit(al_store *s, al_error *err);
void al_store_rollback(al_store *s);

/* ---- tenants */
int al_store_new_id(const char *prefix, char *buf, size_t len);
void al_store_now(char *buf, size_t len);
int al_store_create_org(al_store *s, const char *name, char *ret_id, al_error *err);
int al_store_create_workspace(al_store *s, const char *org_id, const char *name, char *ret_id, al_error *err);
int al_store_create_person(al_store *s, const char *ws_id, const char *name, const char *role, char *ret_id,
                           al_error *err);
/* Credits: grant AMOUNT (may be negative to take back) with a ledger row. */
int al_store_grant_credits(al_store *s, const char *org_id, int64_t amount, al_error *err);
/* The key is returned once in RET_KEY (at least 64 bytes); only its hash is kept. */
int al_store_create_key(al_store *s, const char *person_id, char *ret_key, char *ret_id, al_error *err);
/* Revoke key KEY_ID at once (authentication reads the store on every
 * request: nothing caches a key). RET_PRINCIPAL (may be NULL) gets its
 * owner. -ENOENT no such key, -EALREADY revoked already. */
int al_store_revoke_key(al_store *s, const char *key_id, al_principal *ret_principal, al_error *err);
/* A new secret for the owner of KEY_ID and the old one revoked, in one
 * transaction (as al_store_create_key: RET_KEY shown once, RET_ID). */
int al_store_rotate_key(al_store *s, const char *key_id, char *ret_key, char *ret_id, al_principal *ret_principal,
                        al_error *err);
/* 1 and the principal when KEY is valid, 0 when not, -errno on failure. */
int al_store_authenticate(al_store *s, const char *key, al_principal *ret, al_error *err);

/* ---- idempotency keys (store/idempotency.c): what a person's
 * Idempotency-Key made, kept until EXPIRES_AT. Times are the store's
 * RFC 3339 text (al_store_now). */
typedef struct al_store_idem {
    char request_hash[65];        /* the request the key was bound to */
    char kind[16];                /* "run", "skill" */
    char resource_id[40];         /* what it made */
} al_store_idem;
/* 1 with *RET when PERSON_ID's KEY is held and not expired at NOW, 0 when
 * not, -EIO on failure (or a malformed row, with ERR saying so). */
int al_store_idem_get(al_store *s, const char *person_id, const char *key, const char *now, al_store_idem *ret,
                      al_error *err);
/* Record REC for PERSON_ID's KEY until EXPIRES_AT, in the caller's
 * transaction; a row of the same key expired at NOW goes first. -EEXIST
 * when the key is held (a concurrent request got there first). */
int al_store_idem_put(al_store *s, const char *person_id, const char *key, const al_store_idem *rec, const char *now,
                      const char *expires_at, al_error *err);
/* Drop PERSON_ID's KEY if it still names RESOURCE_ID. */
int al_store_idem_forget(al_store *s, const char *person_id, const char *key, const char *resource_id, al_error *err);
/* Drop every key expired at NOW: how many, or -errno. */
int al_store_idem_sweep(al_store *s, const char *now, al_error *err);
