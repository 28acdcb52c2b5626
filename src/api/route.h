/*
 * The route table's types: a request as the server glue (http.c) reads it,
 * what a handler is given, and one row of the table (routes.c). A surface
 * is a module of handlers (rest_runs.c, sse.c, mcp.c, ...) and its rows.
 */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/console_auth.h"
#include "../core/sandbox.h"
#include "../core/service.h"
#include "reply.h"

struct al_mcp;
struct al_guard;
struct al_metrics_cache;
struct al_operator;

#define AL_ROUTE_SEGS 6
#define AL_ROUTE_SEG_MAX 128

/* One request, from its headers to its answer (http.c keeps it). */
typedef struct al_request {
    char *body;
    size_t len;
    bool too_large;
    bool answered;
    bool authed;       /* P is who asks: authenticated on the headers */
    bool over_budget;  /* P's bodies being received were at their maximum */
    uint64_t reserved; /* bytes of P's body budget this request holds */
    al_principal p;
    /* for the access log (access_log = true), taken as the request came */
    uint64_t t0_ms;
    char method[16];
    char route[96];
    /* E2B's sandbox plane (a request carrying E2b-Sandbox-Id, whatever
     * its path): the sandbox admitted on the headers (X-Access-Token),
     * whose owner is P */
    bool sandbox_plane;
    al_sandbox sb;
    /* the console: P was admitted by its session cookie (http.c), not a
     * key; the session, with its CSRF token */
    bool via_session;
    al_console_session ses;
} al_request;

/* What the server shares with the handlers that need it. */
typedef struct al_http_parts {
    al_service *s;
    struct al_mcp *mcp;
    const struct al_operator *op;
    struct al_guard *guard;
    struct al_metrics_cache *metrics;
} al_http_parts;

/* What a handler is given: the request, who asks (NULL on a route that
 * needs no key) and the path's {parameters} in the order of the pattern. */
typedef struct al_route_ctx {
    const al_http_parts *h;
    al_service *s;
    struct MHD_Connection *c;
    al_request *rq;
    const al_principal *p;
    const char *method;
    const char *arg[AL_ROUTE_SEGS];
    const al_sandbox *sb;          /* the sandbox plane's admitted sandbox; NULL elsewhere */
} al_route_ctx;

typedef enum MHD_Result (*al_route_fn)(al_route_ctx *x);

/* Who may take a route, checked before its method and its handler. */
typedef enum al_route_auth {
    AL_AUTH_NONE,     /* anyone */
    AL_AUTH_OPERATOR, /* the operator's view (operator.h): else 403 */
    AL_AUTH_KEY,      /* an API key in Authorization: Bearer (else 401) */
    AL_AUTH_URL_KEY,  /* an API key as the path's first {parameter} (Piston's clients send no header) */
    AL_AUTH_E2B_KEY,  /* E2B's control plane: an API key in X-API-KEY (or Authorization: Bearer), else E2B's 401 */
    AL_AUTH_SANDBOX,  /* E2B's sandbox plane: the sandbox's X-Access-Token, checked on the headers (http.c) */
    AL_AUTH_SANDBOX_OPEN, /* E2B's sandbox plane without the token (the code interpreter's contexts: http.c) */
    AL_AUTH_SIGNIN,   /* the console's sign-in: anyone, with a small JSON body read without a key (http.c) */
    _AL_AUTH_MAX,
} al_route_auth;

typedef struct al_route {
    const char *method;  /* GET (HEAD too), POST, PUT, PATCH, DELETE; NULL: any, the handler answers each */
    const char *pattern; /* "/v1/runs/{id}/events": {name} takes one segment */
    al_route_auth auth;
    al_route_fn fn;
} al_route;

/* The auth of METHOD on the path URL (admit, on the headers alone): of the
 * row its path and method match, else of the path's first row, else of the
 * area (/v1, /operator) it lies in. *RET_KEY: the
 * key a URL_KEY route carries in its path (into KEYBUF). False: no such
 * path (it needs no key, and is answered 404). */
bool al_route_auth_of(const char *url, const char *method, al_route_auth *ret, char keybuf[AL_ROUTE_SEG_MAX], const char **ret_key);
/* The shape of the errors answered on URL (reply.h): Piston's under
 * /piston/, else airlock's. */
al_reply_shape al_route_shape_of(const char *url);
/* The pattern of URL's route for the access log (its values as {id}, a
 * URL's key as {key}) into OUT; false when no row's path is URL's. */
bool al_route_pattern(const char *url, char *out, size_t cap);
/* Find URL's row (in the sandbox plane's table when RQ is of that plane)
 * and call its handler, or answer 404, 405 (with Allow), 401 or 403. */
enum MHD_Result al_route_dispatch(const al_http_parts *h, struct MHD_Connection *c, const char *url,
                                  const char *method, al_request *rq);

/* ------------------------------------------------ reading a request (request.c) */

/* Whether every query parameter of C is one of ALLOWED (query.h); else a
 * 400 naming it, queued in *RET. */
bool al_req_query_ok(struct MHD_Connection *c, const char *const *allowed, size_t n, enum MHD_Result *ret);
/* ?limit=N&cursor=C of a listing newest first; false (and a 400 queued)
 * when either is malformed. */
bool al_req_page(struct MHD_Connection *c, uint64_t max, uint64_t *limit, uint64_t *cursor, enum MHD_Result *ret);
/* ?wait and ?timeout_s of a run's POST into X (WAIT_ALWAYS: Piston's, which
 * always waits); false (and a 400 queued in *RET) when either is
 * malformed. */
bool al_req_wait(struct MHD_Connection *c, bool wait_always, al_run_extra *x, enum MHD_Result *ret);
/* The request's Idempotency-Key (docs/api.md), bound to SCOPE and the
 * request's body: JSON (hashed in canonical form) or else the bytes RAW.
 * False, with a 400 queued in *RET, when it is malformed or sent twice. */
bool al_req_idem(struct MHD_Connection *c, const char *scope, json_t *json, const void *raw, size_t len, al_idem *k,
                 enum MHD_Result *ret);
/* An optional JSON object body: none at all reads as {}, but a body cut at
 * the cap (too_large, nothing kept) is never read as empty: the caller
 * answers 413 first. NULL: malformed (400). */
json_t *al_req_body_object(const al_request *rq);
/* The body as a JSON object, else NULL and a 400 (saying it must be WANT)
 * queued in *RET. */
json_t *al_req_body_json(al_route_ctx *x, const char *want, enum MHD_Result *ret);
/* ?NAME=true|1 */
bool al_req_flag(struct MHD_Connection *c, const char *name);
/* Whether P is an admin of its workspace; whether P decides approvals (an
 * admin or an approver). The one place the API asks for a role (the core's
 * typed roles, once merged, answer it: al_principal_role). */
bool al_req_is_admin(const al_principal *p);
bool al_req_decides(const al_principal *p);
/* 413 for a body past the cap. */
enum MHD_Result al_req_too_large(al_route_ctx *x, const char *what);
/* Run SP for P, asked for as X says, and the answer: the run, or with
 * PISTON ({language, version}) Piston's shape of it (rest_runs.c). */
enum MHD_Result al_rest_start_run(al_route_ctx *x, al_run_spec *sp, al_run_extra *ex, const char *const *piston,
                                  al_idem *idem);
/* The audit events F names in P's workspace, as rows (audit_rows.c). */
struct al_view_audit_filter;
json_t *al_rest_audit_rows(al_service *s, const al_principal *p, const struct al_view_audit_filter *f, al_error *err);
/* Those events as an NDJSON download, from F's cursor on (rest_audit_export.c). */
enum MHD_Result al_rest_audit_export(al_route_ctx *x, const struct al_view_audit_filter *f);
/* Whether the client of C has closed its side (or the connection broke):
 * an event stream's wait ends at once (sse.c). */
bool al_sse_peer_gone(struct MHD_Connection *c);
/* The console session an event stream was opened by ("" for a key), and
 * when it was last asked about: a stream asks al_sse_session_lives as it
 * waits and ends when it says no, so that no stream outlives its session
 * (sign-out, its 12 hours, its person gone) by more than a few seconds. */
typedef struct al_sse_session {
    char id[40];
    uint64_t checked_ms;
} al_sse_session;
void al_sse_session_init(al_sse_session *ss, const al_route_ctx *x);
bool al_sse_session_lives(al_service *s, al_sse_session *ss);
