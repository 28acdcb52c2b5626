/*
 * E2B-compatible sandboxes' rows (store/sandboxes.c). A sandbox is a
 * workspace's kept directory and the settings its runs get; the row says
 * whose it is, which key made it, its access token's hash and its end.
 */
#pragma once

#include "store.h"

typedef struct al_store_sandbox {
    int64_t seq;                  /* the order of creation: the listing's cursor */
    char id[32];
    al_principal owner;           /* role read from the person as it is now */
    char key_id[40];
    char token_hash[65];
    char template_id[64];
    char image[160];
    char network[512];
    char *metadata, *env_vars;    /* JSON objects of strings, as text (owned) */
    char started_at[40], end_at[40];
    char state[16];               /* "running" | "paused" */
    int64_t bytes;                /* what it holds on disk, as last counted */
    char *owner_name;             /* its person's name (owned; NULL when gone) */
} al_store_sandbox;

typedef struct al_store_sandboxes {
    al_store_sandbox *v;
    size_t n;
} al_store_sandboxes;

void al_store_sandbox_done(al_store_sandbox *b);
void al_store_sandboxes_free(al_store_sandboxes *l);

/* The id of the valid (not revoked) API key KEY into RET_ID (40 bytes):
 * 1, 0 when KEY is no valid key, -errno. */
int al_store_key_id_of(al_store *s, const char *key, char *ret_id, al_error *err);
/* Add B (its seq is the store's) unless its workspace holds MAX already, or its
 * person MAX_PERSON in that workspace
 * (-EDQUOT): counted under the workspace's lock, inside the caller's unit
 * of work, so that concurrent creates (on any node) never pass MAX. */
int al_store_sandbox_put(al_store *s, const al_store_sandbox *b, int64_t max, int64_t max_person, al_error *err);
/* Sandbox ID of WS_ID (the control plane), or of whichever workspace when
 * WS_ID is NULL (the sandbox plane, which then checks the token), whose
 * creating key is still valid when KEY_VALID: 0, -ENOENT, -errno. */
int al_store_sandbox_get(al_store *s, const char *ws_id, const char *id, bool key_valid, al_store_sandbox *ret,
                         al_error *err);
/* WS_ID's sandboxes, the newest first, at most LIMIT. */
int al_store_sandboxes_list(al_store *s, const char *ws_id, size_t limit, al_store_sandboxes *ret, al_error *err);
/* How many sandboxes WS_ID holds. */
int al_store_sandboxes_count(al_store *s, const char *ws_id, int64_t *ret, al_error *err);
/* Set sandbox ID's end (END_AT, when not NULL) and state (STATE, when not
 * NULL): 1, 0 when there is no such sandbox. */
int al_store_sandbox_set(al_store *s, const char *id, const char *end_at, const char *state, al_error *err);
/* What sandbox ID holds on disk (home/ and out/), which its organisation's
 * storage use counts: 1, 0 when there is no such sandbox. */
int al_store_sandbox_set_bytes(al_store *s, const char *id, int64_t bytes, al_error *err);
/* Set sandbox ID's access token hash: 1, 0 when there is no such sandbox. */
int al_store_sandbox_set_token(al_store *s, const char *id, const char *token_hash, al_error *err);
/* Delete sandbox ID: 1, 0 when there was none. */
int al_store_sandbox_delete(al_store *s, const char *id, al_error *err);
/* Up to LIMIT sandboxes whose end is before NOW, the oldest end first. */
int al_store_sandboxes_ended(al_store *s, const char *now, size_t limit, al_store_sandboxes *ret, al_error *err);
