/*
 * The console's sign-in (console_auth.c): one-time login links, 12-hour
 * sessions carried by a cookie, their CSRF token, and a person's API keys
 * by name. The API layer calls these; only here does the console's
 * sign-in reach the store.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../store/signin.h"
#include "status.h"

typedef struct al_service al_service;

#define AL_LOGIN_LINK_TTL_S 900         /* a login link's life: 15 minutes, the most */
#define AL_SESSION_TTL_S (12 * 3600)    /* a session's: 12 hours, absolute */
#define AL_KEY_NAME_MAX 64              /* a key's name: 1-64 printable characters */
#define AL_KEYS_PER_PERSON 100          /* keys not revoked, per person */
#define AL_KEYS_LISTED 1000             /* the most GET /v1/keys lists */

/* A session as a request carries it: its id, end and CSRF token. */
typedef struct al_console_session {
    char id[40], expires_at[40];
    char csrf[65];                      /* derived from the cookie; never stored */
} al_console_session;

typedef al_store_person_card al_person_card;
typedef al_store_key al_key;

/* A login link for PERSON_ID valid TTL_S seconds (1..AL_LOGIN_LINK_TTL_S),
 * audited (login_link.created) in the person's workspace: its token
 * (shown once) into RET_TOKEN (64 bytes). For `airlock admin`, which holds
 * the store itself. */
int al_login_link_issue(al_store *st, const char *person_id, int64_t ttl_s, char ret_token[64], char ret_expires_at[40],
                        al_error *err);
/* Redeem login link TOKEN: a new session (its cookie's value into
 * RET_SECRET, 64 bytes), audited (session.signed_in). -EACCES when the
 * link is unknown, used or expired (ERR says which and what to do). */
int al_session_open(al_service *s, const char *token, char ret_secret[64], al_console_session *ret, al_principal *ret_p,
                    al_error *err);
/* 1 with the person and session when SECRET (a cookie's value) is a live
 * session, 0 when not, -errno when the store fails. */
int al_session_admit(al_service *s, const char *secret, al_principal *ret_p, al_console_session *ret, al_error *err);
/* Whether GIVEN is SES's CSRF token (compared in constant time). */
bool al_session_csrf_ok(const al_console_session *ses, const char *given);
/* Sign out: SES revoked at once on every node, audited (session.signed_out). */
int al_session_close(al_service *s, const al_principal *p, const al_console_session *ses, al_error *err);
/* Who P is, with their workspace's and organisation's names. */
int al_person_card_get(al_service *s, const al_principal *p, al_person_card *ret, al_error *err);

/* Forget login links and sessions that ended more than a day ago (the
 * scheduler, each minute); how many, or -errno. */
int al_signin_sweep(al_service *s, al_error *err);

/* Whether NAME is a key's name (1..AL_KEY_NAME_MAX printable characters). */
bool al_key_name_ok(const char *name);
/* The keys P sees: their own; an admin's, the workspace's. An array the
 * caller frees. */
al_status al_keys_list(al_service *s, const al_principal *p, al_key **ret, size_t *ret_n, al_error *err);
/* A key named NAME for P (CREATED), its secret (shown once) into
 * RET_SECRET (64 bytes), audited (key.created). INVALID for a bad name,
 * CONFLICT past AL_KEYS_PER_PERSON. */
al_status al_key_create(al_service *s, const al_principal *p, const char *name, char ret_secret[64], al_key *ret,
                        al_error *err);
/* Revoke key ID (P's own; an admin's, any of the workspace's), audited
 * (key.revoked); NOT_FOUND for another's or none. A key revoked already
 * is answered as it is (OK). */
al_status al_key_revoke(al_service *s, const al_principal *p, const char *id, al_key *ret, al_error *err);
