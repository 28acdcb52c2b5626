/*
 * REST: the console's sign-in and a person's API keys.
 *
 * POST /v1/session redeems a login link (`airlock admin login-link`) for a
 * session cookie; GET /v1/session says who asks (by key or by session) and
 * gives the console its CSRF token; DELETE /v1/session signs out. GET and
 * POST /v1/keys, DELETE /v1/keys/{id}: a person's keys by name, a new one's
 * secret answered once. The cookie itself is admitted in http.c.
 */
#include <string.h>

#include "handlers.h"
#include "reply.h"
#include "route.h"
#include "status.h"
#include "../core/console_auth.h"
#include "../core/views.h"

#define COOKIE_NAME "airlock_session"

/* Whether the browser reaches us over https: airlock itself serves plain
 * HTTP, so that is a TLS-terminating proxy in front, which the operator
 * says (public_url = https://...) or the proxy does (X-Forwarded-Proto);
 * then the cookie is sent over https alone. */
static bool over_https(al_route_ctx *x) {
    if (strncmp(al_view_config(x->s)->public_url, "https://", 8) == 0)
        return true;
    const char *proto = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND, "X-Forwarded-Proto");
    return proto && strcasecmp(proto, "https") == 0;
}

/* The Set-Cookie of VALUE for MAX_AGE seconds (0: clear it). HttpOnly: no
 * script reads it; SameSite=Strict: no other site's page sends it. */
static void cookie_header(al_route_ctx *x, const char *value, int max_age, char *out, size_t cap) {
    snprintf(out, cap, COOKIE_NAME "=%s; HttpOnly; SameSite=Strict; Path=/; Max-Age=%d%s", value, max_age,
             over_https(x) ? "; Secure" : "");
}

/* GET /v1/session's document: who P is, and how they are signed in. */
static json_t *session_doc(al_route_ctx *x, al_error *err) {
    al_person_card card;
    if (al_person_card_get(x->s, x->p, &card, err) < 0)
        return NULL;
    bool ses = x->rq->via_session;
    return json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}, s:s, s:s?, s:s?}", "person", "id",
                     card.p.person_id, "name", card.person_name, "role", card.p.role, "workspace", "id",
                     card.p.workspace_id, "name", card.workspace_name, "org", "id", card.p.org_id, "name",
                     card.org_name, "via", ses ? "session" : "key", "csrf_token", ses ? x->rq->ses.csrf : NULL,
                     "expires_at", ses ? x->rq->ses.expires_at : NULL);
}

enum MHD_Result al_rest_session_create(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    if (x->rq->too_large)
        return al_req_too_large(x, "a sign-in");
    enum MHD_Result bad;
    json_t *body = al_req_body_json(x, "{\"token\": \"the token of the login link\"}", &bad);
    if (!body)
        return bad;
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) if (strcmp(k, "token") != 0) {
        enum MHD_Result r = al_reply_error(c, 400, "bad_request", "unknown field \"%.64s\": the body is {\"token\": ...}", k);
        json_decref(body);
        return r;
    }
    const char *token = json_string_value(json_object_get(body, "token"));
    if (!token || !token[0]) {
        json_decref(body);
        return al_reply_error(c, 400, "bad_request", "token is required: the text after #token= in the login link");
    }
    char secret[64];
    al_error err = { 0 };
    al_principal p;
    int r = al_session_open(x->s, token, secret, &x->rq->ses, &p, &err);
    json_decref(body);
    if (r == -EACCES)
        return al_reply_error(c, 401, "login_link_invalid", "%s", err.msg);
    if (r < 0)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    /* the answer is the session as GET /v1/session gives it */
    x->rq->p = p;
    x->rq->via_session = true;
    x->p = &x->rq->p;
    json_t *doc = session_doc(x, &err);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    char cookie[256];
    cookie_header(x, secret, AL_SESSION_TTL_S, cookie, sizeof cookie);
    memset(secret, 0, sizeof secret);
    if (!text)
        return al_reply_error(c, 500, "internal", "%s", err.msg[0] ? err.msg : "the answer could not be built");
    return al_reply_json_text(c, 201, text, "Set-Cookie", cookie);
}

enum MHD_Result al_rest_session_get(al_route_ctx *x) {
    al_error err = { 0 };
    json_t *doc = session_doc(x, &err);
    if (!doc)
        return al_reply_error(x->c, 500, "internal", "%s", err.msg);
    return al_reply_json(x->c, 200, doc);
}

enum MHD_Result al_rest_session_delete(al_route_ctx *x) {
    if (!x->rq->via_session)
        return al_reply_error(x->c, 400, "not_a_session", "this request is signed in with an API key, not a console "
                              "session: a key is revoked with DELETE /v1/keys/ID");
    al_error err = { 0 };
    if (al_session_close(x->s, x->p, &x->rq->ses, &err) < 0)
        return al_reply_error(x->c, 500, "internal", "%s", err.msg);
    char cookie[128];
    cookie_header(x, "", 0, cookie, sizeof cookie);
    return al_reply_empty(x->c, 204, "Set-Cookie", cookie);
}

/* ------------------------------------------------------------------ keys */

/* A key as the API shows it: never its secret nor its hash. */
static json_t *key_doc(const al_key *k) {
    return json_pack("{s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:s?, s:s?}", "id", k->id, "name", k->name, "prefix", k->prefix,
                     "person", "id", k->person_id, "name", k->person_name, "created_at", k->created_at, "revoked_at",
                     k->revoked_at[0] ? k->revoked_at : NULL, "last_used_at",
                     k->last_used_at[0] ? k->last_used_at : NULL);
}

static enum MHD_Result key_refused(struct MHD_Connection *c, al_status st, const al_error *err) {
    static const char *const codes[_AL_STATUS_MAX] = {
        [AL_STATUS_INVALID] = "bad_request", [AL_STATUS_NOT_FOUND] = "not_found", [AL_STATUS_CONFLICT] = "limit_reached",
    };
    const char *code = (unsigned)st < _AL_STATUS_MAX && codes[st] ? codes[st] : "internal";
    return al_reply_error(c, al_status_http(st), code, "%s", err->msg);
}

enum MHD_Result al_rest_keys_list(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_key *keys = NULL;
    size_t n = 0;
    al_error err = { 0 };
    al_status st = al_keys_list(x->s, x->p, &keys, &n, &err);
    if (st != AL_STATUS_OK)
        return key_refused(x->c, st, &err);
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++)
        if (json_array_append_new(rows, key_doc(&keys[i])) < 0) {
            json_decref(rows);
            rows = NULL;
        }
    free(keys);
    return al_reply_json(x->c, 200, rows ? json_pack("{s:o}", "keys", rows) : NULL);
}

enum MHD_Result al_rest_keys_create(al_route_ctx *x) {
    if (x->rq->too_large)
        return al_req_too_large(x, "a key's request");
    enum MHD_Result bad;
    json_t *body = al_req_body_json(x, "{\"name\": \"ci-agent\"}", &bad);
    if (!body)
        return bad;
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) if (strcmp(k, "name") != 0) {
        enum MHD_Result r = al_reply_error(x->c, 400, "bad_request", "unknown field \"%.64s\": the body is {\"name\": ...}", k);
        json_decref(body);
        return r;
    }
    char secret[64];
    al_key key;
    al_error err = { 0 };
    al_status st = al_key_create(x->s, x->p, json_string_value(json_object_get(body, "name")), secret, &key, &err);
    json_decref(body);
    if (st != AL_STATUS_CREATED)
        return key_refused(x->c, st, &err);
    json_t *doc = json_pack("{s:o, s:s}", "key", key_doc(&key), "secret", secret);
    memset(secret, 0, sizeof secret);
    return al_reply_json(x->c, 201, doc);
}

enum MHD_Result al_rest_keys_revoke(al_route_ctx *x) {
    al_key key;
    al_error err = { 0 };
    al_status st = al_key_revoke(x->s, x->p, x->arg[0], &key, &err);
    if (st != AL_STATUS_OK)
        return key_refused(x->c, st, &err);
    return al_reply_json(x->c, 200, key_doc(&key));
}
