/*
 * The console's sign-in as the store keeps it (store/signin.c): one-time
 * login links, console sessions, and API keys by name. Only sha256 hashes
 * of every secret are stored; the secrets are returned once, to the caller
 * that made them. Times are the store's RFC 3339 text (al_store_now).
 */
#pragma once

#include "store.h"

/* The store's time (al_store_now's format) DELTA_S seconds from now. */
void al_store_time_from_now(int64_t delta_s, char buf[40]);

/* A session as authentication reads it. */
typedef struct al_store_session {
    char id[40], person_id[40], expires_at[40];
} al_store_session;

/* A person with the names of what they belong to (GET /v1/session). */
typedef struct al_store_person_card {
    al_principal p;
    char person_name[128], workspace_name[128], org_name[128];
} al_store_person_card;

/* An API key as a listing shows it: never its secret nor its hash. */
typedef struct al_store_key {
    char id[40], person_id[40], workspace_id[40];
    char person_name[128], name[72], prefix[16];
    char created_at[40], revoked_at[40], last_used_at[40]; /* "" when none */
} al_store_key;

/* A login link for PERSON_ID valid TTL_S seconds: its token (shown once)
 * into RET_TOKEN (64 bytes), id and expiry; RET_P (may be NULL) the
 * person's principal. -ENOENT no such person. */
int al_store_login_link_create(al_store *s, const char *person_id, int64_t ttl_s, char ret_token[64], char ret_id[40],
                               char ret_expires_at[40], al_principal *ret_p, al_error *err);
/* Redeem TOKEN and open a session of SESSION_TTL_S seconds for its person,
 * in one unit of work: the link is marked used by the same statement that
 * checks it is unused and unexpired, so two redemptions at once (on two
 * nodes) open one session. The session's secret (the cookie's value) into
 * RET_SECRET (64 bytes). -ENOENT an unknown token, -EALREADY a used link,
 * -ETIMEDOUT an expired one. */
int al_store_login_link_redeem(al_store *s, const char *token, int64_t session_ttl_s, char ret_secret[64],
                               al_store_session *ret, al_principal *ret_p, al_error *err);
/* 1 with the principal and session when SECRET is a session neither
 * expired nor revoked, 0 when not, -errno on failure. */
int al_store_session_authenticate(al_store *s, const char *secret, al_principal *ret_p, al_store_session *ret,
                                  al_error *err);
/* Revoke session ID at once (1), 0 when it was revoked already. */
int al_store_session_revoke(al_store *s, const char *id, al_error *err);
/* PERSON_ID and the names of its workspace and organisation; -ENOENT. */
int al_store_person_card_get(al_store *s, const char *person_id, al_store_person_card *ret, al_error *err);
/* The oldest admin of the oldest workspace: 1 with its id, 0 none. */
int al_store_first_admin(al_store *s, char ret_id[40], al_error *err);

/* Forget login links and sessions that ended before BEFORE (expired, used
 * or signed out: the audit trail keeps what happened); how many, or -errno. */
int al_store_signin_sweep(al_store *s, const char *before, al_error *err);

/* A key named NAME for PERSON_ID (as al_store_create_key, which names its
 * keys "default"). */
int al_store_create_key_named(al_store *s, const char *person_id, const char *name, char *ret_key, char *ret_id,
                              al_error *err);
/* The keys of WORKSPACE_ID, or of PERSON_ID alone when it is not NULL,
 * newest first, at most LIMIT (> 0): an array the caller frees. */
int al_store_keys_list(al_store *s, const char *workspace_id, const char *person_id, size_t limit, al_store_key **ret,
                       size_t *ret_n, al_error *err);
/* Key ID in *RET; -ENOENT when there is none. */
int al_store_key_get(al_store *s, const char *id, al_store_key *ret, al_error *err);
/* How many of PERSON_ID's keys are not revoked. */
int al_store_keys_active(al_store *s, const char *person_id, int64_t *ret, al_error *err);
