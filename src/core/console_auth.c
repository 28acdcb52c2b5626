/* The console's sign-in: login links, sessions, CSRF, named keys
 * (console_auth.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console_auth.h"
#include "audit.h"
#include "governance.h"
#include "roles.h"
#include "service_int.h"
#include "../util/hash.h"

int al_login_link_issue(al_store *st, const char *person_id, int64_t ttl_s, char ret_token[64], char ret_expires_at[40],
                        al_error *err) {
    if (ttl_s < 1 || ttl_s > AL_LOGIN_LINK_TTL_S)
        return al_err(err, "signin", EINVAL, "a login link lives 1 to %d seconds", AL_LOGIN_LINK_TTL_S);
    char id[40], token[64];
    al_principal p;
    int r = al_store_begin(st, err);
    if (r < 0)
        return r;
    /* the link and its audit event land together: no link nobody can see */
    if ((r = al_store_login_link_create(st, person_id, ttl_s, token, id, ret_expires_at, &p, err)) < 0 ||
        (r = al_audit_append(st, p.org_id, p.workspace_id, "login_link.created", p.person_id, NULL,
                             json_pack("{s:s, s:s, s:s}", "link_id", id, "expires_at", ret_expires_at, "via",
                                       "airlock admin"),
                             err)) < 0) {
        al_store_rollback(st);
        return r;
    }
    if ((r = al_store_commit(st, err)) < 0)
        return r;
    snprintf(ret_token, 64, "%s", token);
    return 0;
}

/* The CSRF token of the session whose cookie is SECRET: a hash of it under
 * a label of its own. Page script can read it (GET /v1/session) though not
 * the HttpOnly cookie; another site can read neither; and the store, which
 * keeps only the cookie's plain hash, cannot make it. */
static void csrf_of(const char *secret, char out[65]) {
    char buf[200];
    int n = snprintf(buf, sizeof buf, "airlock-csrf:%s", secret);
    al_sha256_hex(buf, n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0, out);
}

int al_session_open(al_service *s, const char *token, char ret_secret[64], al_console_session *ret, al_principal *ret_p,
                    al_error *err) {
    al_store_session ses;
    char secret[64];
    memset(ret, 0, sizeof *ret);
    int r = al_store_login_link_redeem(s->store, token, AL_SESSION_TTL_S, secret, &ses, ret_p, err);
    if (r == -ENOENT || r == -EALREADY || r == -ETIMEDOUT) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        *err = (al_error){ 0 }; /* the store's words, said again with what to do */
        return al_err(err, "signin", EACCES,
                      "%s: ask for a new one (an operator runs: airlock admin login-link --person YOUR_PERSON_ID)", why);
    }
    if (r < 0)
        return r;
    snprintf(ret->id, sizeof ret->id, "%s", ses.id);
    snprintf(ret->expires_at, sizeof ret->expires_at, "%s", ses.expires_at);
    csrf_of(secret, ret->csrf);
    /* a session nobody can see in the audit trail is not handed out */
    if ((r = al_workspace_audit(s, ret_p, "session.signed_in",
                                json_pack("{s:s, s:s}", "session_id", ses.id, "expires_at", ses.expires_at), err)) < 0) {
        al_error e2 = { 0 };
        (void)al_store_session_revoke(s->store, ses.id, &e2);
        return r;
    }
    snprintf(ret_secret, 64, "%s", secret);
    return 0;
}

int al_session_admit(al_service *s, const char *secret, al_principal *ret_p, al_console_session *ret, al_error *err) {
    al_store_session ses;
    int r = al_store_session_authenticate(s->store, secret, ret_p, &ses, err);
    if (r <= 0)
        return r;
    memset(ret, 0, sizeof *ret);
    snprintf(ret->id, sizeof ret->id, "%s", ses.id);
    snprintf(ret->expires_at, sizeof ret->expires_at, "%s", ses.expires_at);
    csrf_of(secret, ret->csrf);
    return 1;
}

bool al_session_csrf_ok(const al_console_session *ses, const char *given) {
    if (!given || !ses->csrf[0])
        return false;
    /* every byte compared whatever differs, so the time says nothing of
     * how much of a guess was right */
    size_t n = strlen(ses->csrf), g = strnlen(given, n + 1);
    unsigned char d = g != n;
    /* a shorter guess is read only up to its end (past it, as zeros):
     * given[i] beyond its NUL is outside the header's bytes */
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(ses->csrf[i] ^ (i < g ? (unsigned char)given[i] : 0));
    return d == 0;
}

int al_session_close(al_service *s, const al_principal *p, const al_console_session *ses, al_error *err) {
    int r = al_store_session_revoke(s->store, ses->id, err);
    if (r < 0)
        return r;
    return al_workspace_audit(s, p, "session.signed_out", json_pack("{s:s}", "session_id", ses->id), err);
}

int al_person_card_get(al_service *s, const al_principal *p, al_person_card *ret, al_error *err) {
    return al_store_person_card_get(s->store, p->person_id, ret, err);
}

int al_signin_sweep(al_service *s, al_error *err) {
    /* a day's grace: a link's "expired" (not "unknown") is said meanwhile */
    char before[40];
    al_store_time_from_now(-24 * 3600, before);
    return al_store_signin_sweep(s->store, before, err);
}

bool al_key_name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n < 1 || n > AL_KEY_NAME_MAX)
        return false;
    /* printable ASCII: a name is shown in lists and logs, not a document */
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] > 0x7e)
            return false;
    return true;
}

al_status al_keys_list(al_service *s, const al_principal *p, al_key **ret, size_t *ret_n, al_error *err) {
    bool admin = al_principal_role(p) == AL_ROLE_ADMIN;
    int r = al_store_keys_list(s->store, p->workspace_id, admin ? NULL : p->person_id, AL_KEYS_LISTED, ret, ret_n, err);
    return r < 0 ? AL_STATUS_INTERNAL : AL_STATUS_OK;
}

al_status al_key_create(al_service *s, const al_principal *p, const char *name, char ret_secret[64], al_key *ret,
                        al_error *err) {
    if (!al_key_name_ok(name))
        return al_err(err, "keys", EINVAL, "a key's name is 1 to %d printable characters (e.g. \"ci-agent\")",
                      AL_KEY_NAME_MAX), AL_STATUS_INVALID;
    int64_t active = 0;
    if (al_store_keys_active(s->store, p->person_id, &active, err) < 0)
        return AL_STATUS_INTERNAL;
    if (active >= AL_KEYS_PER_PERSON)
        return al_err(err, "keys", EMLINK, "you have %d keys that are not revoked, the most one person may: revoke one "
                      "first (DELETE /v1/keys/ID)", AL_KEYS_PER_PERSON), AL_STATUS_CONFLICT;
    char id[40], secret[64];
    int r = al_store_begin(s->store, err);
    if (r < 0)
        return AL_STATUS_INTERNAL;
    /* the key and its audit event land together: an unaudited key is not handed out */
    if ((r = al_store_create_key_named(s->store, p->person_id, name, secret, id, err)) < 0 ||
        (r = al_workspace_audit(s, p, "key.created", json_pack("{s:s, s:s, s:s}", "key_id", id, "name", name, "via", "api"),
                                err)) < 0 ||
        (r = al_store_key_get(s->store, id, ret, err)) < 0) {
        al_store_rollback(s->store);
        return AL_STATUS_INTERNAL;
    }
    if (al_store_commit(s->store, err) < 0)
        return AL_STATUS_INTERNAL;
    snprintf(ret_secret, 64, "%s", secret);
    memset(secret, 0, sizeof secret);
    return AL_STATUS_CREATED;
}

al_status al_key_revoke(al_service *s, const al_principal *p, const char *id, al_key *ret, al_error *err) {
    int r = al_store_key_get(s->store, id, ret, err);
    if (r == -ENOENT)
        return al_err(err, "keys", ENOENT, "no key %s", id), AL_STATUS_NOT_FOUND;
    if (r < 0)
        return AL_STATUS_INTERNAL;
    /* another workspace's key, or (for all but an admin) another person's,
     * is not there for P: 404, as for a key that does not exist */
    bool admin = al_principal_role(p) == AL_ROLE_ADMIN;
    if (strcmp(ret->workspace_id, p->workspace_id) != 0 || (!admin && strcmp(ret->person_id, p->person_id) != 0))
        return al_err(err, "keys", ENOENT, "no key %s", id), AL_STATUS_NOT_FOUND;
    if (ret->revoked_at[0])
        return AL_STATUS_OK;
    if ((r = al_store_begin(s->store, err)) < 0)
        return AL_STATUS_INTERNAL;
    if ((r = al_store_revoke_key(s->store, id, NULL, err)) < 0 && r != -EALREADY) {
        al_store_rollback(s->store);
        return AL_STATUS_INTERNAL;
    }
    if (r == 0 && ((r = al_workspace_audit(s, p, "key.revoked",
                                           json_pack("{s:s, s:s, s:s, s:s}", "key_id", id, "name", ret->name, "owner_id",
                                                     ret->person_id, "via", "api"),
                                           err)) < 0)) {
        al_store_rollback(s->store);
        return AL_STATUS_INTERNAL;
    }
    if (al_store_commit(s->store, err) < 0 || al_store_key_get(s->store, id, ret, err) < 0)
        return AL_STATUS_INTERNAL;
    return AL_STATUS_OK;
}
