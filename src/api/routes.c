/*
 * The route table: every path the service answers, its method, who may
 * take it and the handler that answers it, in one place (as h2o and nginx
 * keep one handler module per path). http.c is the server glue around it;
 * each surface is a module of handlers that translate the wire onto the
 * core's typed calls.
 *
 * To add a surface (the E2B API, the console's routes): write its module
 * (src/api/<surface>.c, handlers of type al_route_fn, added to
 * src/meson.build), declare its handlers in handlers.h under its name, and
 * add its rows to the table below. Nothing else changes: authentication, 401/403, 404,
 * 405 with Allow, HEAD for GET and the access log's route pattern all come
 * from the row. A surface whose path carries its own key (Piston's) says
 * AL_AUTH_URL_KEY and puts the key first among its {parameters}. A surface
 * whose clients read errors in another shape than airlock's adds it to
 * al_reply_shape (reply.h) and its prefix to al_route_shape_of below:
 * every error answered under it, whoever makes it, then has that shape.
 *
 * E2B's API has two planes on the one port: its control plane is rows of
 * the table below (AL_AUTH_E2B_KEY); its sandbox plane (envd and the code
 * interpreter, whose paths the SDK sends to the same URL) is chosen by the
 * header E2b-Sandbox-Id whatever the path, and has a table of its own,
 * sandbox_routes, whose rows are reached only with the sandbox's access
 * token (http.c admits it on the headers).
 */
#include <stdio.h>
#include <string.h>

#include "handlers.h"
#include "operator.h"
#include "reply.h"
#include "route.h"

/* ------------------------------------------------------------------ table */

/* A row's auth is its own (the console's sign-in, POST /v1/session, needs
 * no key where GET and DELETE of that path do); a method no row of a path
 * takes is answered (405) under the path's first row's. A row
 * whose method is NULL takes every method its rows above do not: its
 * handler answers each (MCP's transport, Piston's own 404). */

static const al_route routes[] = {
    /* the operations' own */
    { "GET", "/healthz", AL_AUTH_NONE, al_ops_health },
    { "GET", "/openapi.json", AL_AUTH_NONE, al_ops_openapi },
    { "GET", "/metrics", AL_AUTH_OPERATOR, al_ops_metrics },
    { "GET", "/operator/status", AL_AUTH_OPERATOR, al_ops_status },
    /* the web console's files (console.c): the shell and its assets; what
     * it reads and changes is the /v1 API below, as an agent's */
    { "GET", "/", AL_AUTH_NONE, al_console_shell },
    { "GET", "/login", AL_AUTH_NONE, al_console_shell },
    { "GET", "/assets/{file}", AL_AUTH_NONE, al_console_asset },
    { "GET", "/assets/pages/{file}", AL_AUTH_NONE, al_console_page },
    /* Piston */
    { "GET", "/piston/{key}/api/v2/runtimes", AL_AUTH_URL_KEY, al_piston_route_runtimes },
    { "POST", "/piston/{key}/api/v2/execute", AL_AUTH_URL_KEY, al_piston_route_execute },
    { "GET", "/piston/{key}/api/v2/packages", AL_AUTH_URL_KEY, al_piston_route_packages },
    { NULL, "/piston/{key}/api/v2/{other}", AL_AUTH_URL_KEY, al_piston_route_other },
    /* MCP */
    { NULL, "/mcp", AL_AUTH_KEY, al_mcp_route },
    /* E2B's control plane (e2b.c): the SDK 2.x sends /v2/sandboxes for
     * create, list and connect, older ones /sandboxes; both are served */
    { "POST", "/sandboxes", AL_AUTH_E2B_KEY, al_e2b_create },
    { "GET", "/sandboxes", AL_AUTH_E2B_KEY, al_e2b_list },
    { "POST", "/v2/sandboxes", AL_AUTH_E2B_KEY, al_e2b_create },
    { "GET", "/v2/sandboxes", AL_AUTH_E2B_KEY, al_e2b_list },
    { "GET", "/sandboxes/{id}", AL_AUTH_E2B_KEY, al_e2b_get },
    { "DELETE", "/sandboxes/{id}", AL_AUTH_E2B_KEY, al_e2b_kill },
    { "POST", "/sandboxes/{id}/timeout", AL_AUTH_E2B_KEY, al_e2b_timeout },
    { "POST", "/sandboxes/{id}/refreshes", AL_AUTH_E2B_KEY, al_e2b_refresh },
    { "POST", "/sandboxes/{id}/connect", AL_AUTH_E2B_KEY, al_e2b_connect },
    { "POST", "/v2/sandboxes/{id}/connect", AL_AUTH_E2B_KEY, al_e2b_connect },
    { "POST", "/sandboxes/{id}/pause", AL_AUTH_E2B_KEY, al_e2b_pause },
    { "POST", "/sandboxes/{id}/resume", AL_AUTH_E2B_KEY, al_e2b_resume },
    /* REST: runs */
    { "POST", "/v1/runs", AL_AUTH_KEY, al_rest_runs_create },
    { "GET", "/v1/runs", AL_AUTH_KEY, al_rest_runs_list },
    { "GET", "/v1/runs/{id}", AL_AUTH_KEY, al_rest_runs_get },
    { "GET", "/v1/runs/{id}/events", AL_AUTH_KEY, al_sse_run_events },
    { "GET", "/v1/runs/{id}/trace", AL_AUTH_KEY, al_rest_runs_trace },
    { "GET", "/v1/runs/{id}/inputs/{which}", AL_AUTH_KEY, al_rest_runs_input },
    { "POST", "/v1/runs/{id}/approve", AL_AUTH_KEY, al_rest_runs_approve },
    { "POST", "/v1/runs/{id}/deny", AL_AUTH_KEY, al_rest_runs_deny },
    { "POST", "/v1/runs/{id}/cancel", AL_AUTH_KEY, al_rest_runs_cancel },
    /* REST: the workspace as the console reads it (rest_events.c, rest_workspace.c) */
    { "GET", "/v1/events", AL_AUTH_KEY, al_rest_events },
    { "GET", "/v1/persons", AL_AUTH_KEY, al_rest_persons },
    { "GET", "/v1/threads", AL_AUTH_KEY, al_rest_threads },
    { "GET", "/v1/sandboxes", AL_AUTH_KEY, al_rest_sandboxes },
    { "DELETE", "/v1/sandboxes/{id}", AL_AUTH_KEY, al_rest_sandbox_kill },
    { "GET", "/v1/sandboxes/{id}/files", AL_AUTH_KEY, al_rest_sandbox_files },
    /* REST: artifacts and threads */
    { "GET", "/v1/artifacts/{id}", AL_AUTH_KEY, al_rest_artifact_get },
    { "GET", "/v1/artifacts/{id}/content", AL_AUTH_KEY, al_rest_artifact_content },
    { "GET", "/v1/threads/{thread}/artifacts", AL_AUTH_KEY, al_rest_thread_artifacts },
    /* REST: connected folders (read-only) */
    { "GET", "/v1/folders", AL_AUTH_KEY, al_rest_folders },
    { "GET", "/v1/folders/{name}/entries", AL_AUTH_KEY, al_rest_folder_entries },
    { "GET", "/v1/threads/{thread}/packages", AL_AUTH_KEY, al_rest_thread_packages },
    /* REST: skills */
    { "POST", "/v1/skills", AL_AUTH_KEY, al_rest_skills_upload },
    { "GET", "/v1/skills", AL_AUTH_KEY, al_rest_skills_list },
    { "GET", "/v1/skills/{name}", AL_AUTH_KEY, al_rest_skills_get },
    { "DELETE", "/v1/skills/{name}", AL_AUTH_KEY, al_rest_skills_delete },
    { "DELETE", "/v1/skills/{name}/versions/{digest}", AL_AUTH_KEY, al_rest_skills_delete_version },
    { "POST", "/v1/skills/{name}/run", AL_AUTH_KEY, al_rest_skills_run },
    { "POST", "/v1/skills/{name}/test", AL_AUTH_KEY, al_rest_skills_test },
    { "POST", "/v1/skills/{name}/promote", AL_AUTH_KEY, al_rest_skills_promote },
    /* REST: settings, usage, audit */
    { "GET", "/v1/settings", AL_AUTH_KEY, al_rest_settings_get },
    { "PUT", "/v1/settings", AL_AUTH_KEY, al_rest_settings_put },
    { "PATCH", "/v1/settings", AL_AUTH_KEY, al_rest_settings_put },
    { "GET", "/v1/usage", AL_AUTH_KEY, al_rest_usage },
    { "GET", "/v1/audit", AL_AUTH_KEY, al_rest_audit },
    { "GET", "/v1/audit/checkpoint", AL_AUTH_KEY, al_rest_audit_checkpoint },
    { "GET", "/v1/audit/verify", AL_AUTH_KEY, al_rest_audit_verify },
    /* REST: the console's sign-in and a person's keys (rest_session.c) */
    { "GET", "/v1/session", AL_AUTH_KEY, al_rest_session_get },
    { "POST", "/v1/session", AL_AUTH_SIGNIN, al_rest_session_create },
    { "DELETE", "/v1/session", AL_AUTH_KEY, al_rest_session_delete },
    { "GET", "/v1/keys", AL_AUTH_KEY, al_rest_keys_list },
    { "POST", "/v1/keys", AL_AUTH_KEY, al_rest_keys_create },
    { "DELETE", "/v1/keys/{id}", AL_AUTH_KEY, al_rest_keys_revoke },
};

/* E2B's sandbox plane (a request with E2b-Sandbox-Id): envd on port 49983,
 * the code interpreter on 49999. */
static const al_route sandbox_routes[] = {
    { "GET", "/health", AL_AUTH_SANDBOX, al_e2b_health },
    { "GET", "/files", AL_AUTH_SANDBOX, al_e2b_files_get },
    { "POST", "/files", AL_AUTH_SANDBOX, al_e2b_files_post },
    { "POST", "/filesystem.Filesystem/{method}", AL_AUTH_SANDBOX, al_e2b_filesystem },
    /* commands (e2b_process.c) and the code interpreter (e2b_execute.c);
     * its contexts are labels that need no token (http.c) */
    { "POST", "/process.Process/{method}", AL_AUTH_SANDBOX, al_e2b_process },
    { "POST", "/execute", AL_AUTH_SANDBOX, al_e2b_execute },
    { "POST", "/contexts", AL_AUTH_SANDBOX_OPEN, al_e2b_contexts_create },
    { "GET", "/contexts", AL_AUTH_SANDBOX_OPEN, al_e2b_contexts_list },
    { "DELETE", "/contexts/{id}", AL_AUTH_SANDBOX_OPEN, al_e2b_contexts_delete },
    { "POST", "/contexts/{id}/restart", AL_AUTH_SANDBOX_OPEN, al_e2b_contexts_restart },
};

/* Areas: a path under one that no row matches still needs the area's auth
 * before it is told 404, so that one without a key learns nothing of what
 * is there; FN, when set, answers it (E2B's paths airlock does not serve
 * get E2B's shape of error). */
static const struct {
    const char *first;
    al_route_auth auth;
    al_route_fn fn;
} areas[] = {
    { "v1", AL_AUTH_KEY, NULL },
    { "operator", AL_AUTH_OPERATOR, NULL },
    /* the rest of E2B's API (templates, snapshots, metrics, logs, ...) */
    { "sandboxes", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "v2", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "v3", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "templates", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "snapshots", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "volumes", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "teams", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "nodes", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "access-tokens", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "api-keys", AL_AUTH_E2B_KEY, al_e2b_unsupported },
    { "secrets", AL_AUTH_E2B_KEY, al_e2b_unsupported },
};

/* ---------------------------------------------------------------- matching */

/* URL's segments into PARTS, and their count: -1 when one is longer than
 * any route's (404 before anything), AL_ROUTE_SEGS + 1 when there are more
 * than any route has (only the first AL_ROUTE_SEGS kept). */
static int split(const char *url, char parts[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX]) {
    int n = 0;
    for (const char *p = url; *p;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        if (n == AL_ROUTE_SEGS)
            return n + 1; /* deeper than any route: no row matches, its area still counts */
        size_t l = strcspn(p, "/");
        if (l >= AL_ROUTE_SEG_MAX)
            return -1;
        memcpy(parts[n], p, l);
        parts[n][l] = '\0';
        n++;
        p += l;
    }
    return n;
}

/* Whether SEG (N of them) is PATTERN's path; its {parameters} into ARG. */
static bool path_match(const char *pattern, char seg[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX], int n,
                       const char *arg[AL_ROUTE_SEGS]) {
    int i = 0, a = 0;
    for (const char *p = pattern; *p;) {
        p += strspn(p, "/");
        if (!*p)
            break;
        size_t l = strcspn(p, "/");
        if (i >= n)
            return false;
        if (*p == '{')
            arg[a++] = seg[i];
        else if (strlen(seg[i]) != l || memcmp(seg[i], p, l) != 0)
            return false;
        i++;
        p += l;
    }
    return i == n;
}

static bool method_match(const char *want, const char *method) {
    return !want || strcmp(want, method) == 0 || (strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0);
}

typedef struct found {
    al_route_fn area_fn;     /* no row's path: the area's answer, if it has one */
    const al_route *row;     /* path and method */
    const al_route *path;    /* the first row of the path, whatever its method */
    char allow[64];          /* the path's methods, for a 405 */
    const char *arg[AL_ROUTE_SEGS], *path_arg[AL_ROUTE_SEGS];
} found;

/* URL's row (into F) in the table of the plane (SANDBOX: E2B's sandbox
 * plane), else of its area; false: no such path. */
static bool lookup(bool sandbox, const char *url, const char *method, char seg[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX],
                   found *f, al_route_auth *ret_auth) {
    memset(f, 0, sizeof *f);
    int n = split(url, seg);
    if (n < 0)
        return false;
    const al_route *table = sandbox ? sandbox_routes : routes;
    size_t rows = sandbox ? ELEMENTSOF(sandbox_routes) : ELEMENTSOF(routes);
    for (size_t i = 0; i < rows; i++) {
        const char *arg[AL_ROUTE_SEGS] = { 0 };
        if (!path_match(table[i].pattern, seg, n, arg))
            continue;
        if (!f->path) {
            f->path = &table[i];
            memcpy(f->path_arg, arg, sizeof arg);
        }
        if (table[i].method && !strstr(f->allow, table[i].method)) {
            size_t o = strlen(f->allow);
            snprintf(f->allow + o, sizeof f->allow - o, "%s%s", o ? ", " : "", table[i].method);
        }
        if (!f->row && method && method_match(table[i].method, method)) {
            f->row = &table[i];
            memcpy(f->arg, arg, sizeof arg);
        }
    }
    if (f->path) {
        *ret_auth = f->row ? f->row->auth : f->path->auth;
        return true;
    }
    if (sandbox) {
        *ret_auth = AL_AUTH_SANDBOX;
        f->area_fn = al_e2b_sandbox_unknown;
        return true;
    }
    for (size_t i = 0; n > 0 && i < ELEMENTSOF(areas); i++)
        if (strcmp(seg[0], areas[i].first) == 0) {
            *ret_auth = areas[i].auth;
            f->area_fn = areas[i].fn;
            return true;
        }
    return false;
}

bool al_route_auth_of(const char *url, const char *method, al_route_auth *ret, char keybuf[AL_ROUTE_SEG_MAX],
                      const char **ret_key) {
    char seg[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX];
    found f;
    *ret_key = NULL;
    if (!lookup(false, url, method, seg, &f, ret))
        return false;
    /* the key a URL carries is its route's first {parameter} */
    if (*ret == AL_AUTH_URL_KEY && f.path && f.path_arg[0]) {
        snprintf(keybuf, AL_ROUTE_SEG_MAX, "%s", f.path_arg[0]);
        *ret_key = keybuf;
    }
    return true;
}

al_reply_shape al_route_shape_of(const char *url) {
    /* Piston's clients read its shape of an error on every path under
     * /piston/, a path no row has included (the router skips empty
     * segments: so does this) */
    url += strspn(url, "/");
    return strncmp(url, "piston", 6) == 0 && (url[6] == '/' || url[6] == '\0') ? AL_REPLY_PISTON : AL_REPLY_AIRLOCK;
}

bool al_route_pattern(const char *url, char *out, size_t cap) {
    char seg[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX];
    found f;
    al_route_auth auth;
    if (!lookup(false, url, NULL, seg, &f, &auth) || !f.path)
        return false;
    /* the log's one spelling: every value a client chose is {id}, the key
     * a URL carries {key} */
    size_t o = 0;
    int a = 0;
    out[0] = '\0';
    for (const char *p = f.path->pattern; *p && o + 1 < cap;) {
        size_t l = strcspn(p + 1, "/") + 1;
        const char *shown = p[1] != '{' ? NULL : a++ == 0 && f.path->auth == AL_AUTH_URL_KEY ? "/{key}" : "/{id}";
        int w = shown ? snprintf(out + o, cap - o, "%s", shown) : snprintf(out + o, cap - o, "%.*s", (int)l, p);
        if (w < 0 || (size_t)w >= cap - o)
            return false;
        o += (size_t)w;
        p += l;
    }
    return true;
}

enum MHD_Result al_route_dispatch(const al_http_parts *h, struct MHD_Connection *c, const char *url,
                                  const char *method, al_request *rq) {
    char seg[AL_ROUTE_SEGS][AL_ROUTE_SEG_MAX];
    found f;
    al_route_auth auth = AL_AUTH_NONE;
    if (!lookup(rq->sandbox_plane, url, method, seg, &f, &auth))
        return al_reply_error(c, 404, "not_found", "no such path");
    /* who may ask comes first: the key was checked on the headers (admit) */
    if (auth == AL_AUTH_OPERATOR && !al_operator_allowed(h->op, c))
        return al_reply_error(c, 403, "operator_only", "service-wide figures are the operator's: ask from a loopback "
                              "address or with the operator token (operator_access, docs/operations.md)");
    if (auth == AL_AUTH_KEY && !rq->authed)
        return al_reply_unauthorized(c);
    if (auth == AL_AUTH_URL_KEY && !rq->authed)
        return al_reply_error(c, 401, "unauthorized", "a valid API key is required in the URL: /piston/KEY/api/v2/...");
    if (auth == AL_AUTH_E2B_KEY && !rq->authed)
        return al_e2b_reply_error(c, 401, "a valid airlock API key is required in X-API-KEY");
    /* the sandbox plane is admitted on the headers (http.c) or answered there */
    if (auth == AL_AUTH_SANDBOX && !rq->authed)
        return al_e2b_reply_error(c, 401, "the sandbox's access token (X-Access-Token) is required");
    al_route_ctx x = { .h = h, .s = h->s, .c = c, .rq = rq, .p = rq->authed ? &rq->p : NULL, .method = method,
                       .sb = rq->sandbox_plane ? &rq->sb : NULL };
    if (!f.path && f.area_fn)
        return f.area_fn(&x);
    if (!f.path)
        return al_reply_error(c, 404, "not_found", "no such path");
    if (!f.row)
        return al_reply_method(c, f.allow);
    memcpy(x.arg, f.arg, sizeof x.arg);
    return f.row->fn(&x);
}
