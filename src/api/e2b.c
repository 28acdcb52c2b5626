/*
 * E2B's control plane (routes.c: /sandboxes, /v2/sandboxes): the E2B SDK's
 * Sandbox.create, getInfo, list, setTimeout, connect, pause, kill, read
 * onto the core's typed sandbox calls (core/sandbox.h). X-API-KEY is an
 * airlock API key; errors are E2B's {"code": <status>, "message"}, which
 * the SDK reads (a 404 with code 404 is "not found", kill's false).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b.h"
#include "handlers.h"
#include "reply.h"
#include "route.h"
#include "../core/packages.h"
#include "../core/sandbox.h"
#include "../core/views.h"

/* What airlock's envd answers as: multipart uploads, no closeStdin
 * (the SDK gates features on it: e2b src/envd/versions.ts). */
#define ENVD_VERSION "0.4.0"
/* the SDK shows it; E2B's is the node's */
#define CLIENT_ID "airlock"

/* ------------------------------------------------------------ E2B's errors */


static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *doc, const char *name,
                             const char *value) {
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text)
        return al_reply_json_text(c, 500, strdup("{\"code\":500,\"message\":\"no answer could be made\"}"), NULL, NULL);
    return al_reply_json_text(c, status, text, name, value);
}


enum MHD_Result al_e2b_reply_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return reply(c, status, json_pack("{s:i, s:s}", "code", (int)status, "message", msg), NULL, NULL);
}

/* Connect's codes and the HTTP status each maps to (connectrpc.com/docs/protocol) */
static const struct {
    const char *code;
    unsigned status;
} connect_codes[] = {
    { "canceled", 499 },          { "unknown", 500 },           { "invalid_argument", 400 },
    { "deadline_exceeded", 504 }, { "not_found", 404 },         { "already_exists", 409 },
    { "permission_denied", 403 }, { "resource_exhausted", 429 }, { "failed_precondition", 400 },
    { "aborted", 409 },           { "out_of_range", 400 },      { "unimplemented", 501 },
    { "internal", 500 },          { "unavailable", 503 },       { "data_loss", 500 },
    { "unauthenticated", 401 },
};

enum MHD_Result al_e2b_connect_error(struct MHD_Connection *c, const char *code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned status = 500;
    for (size_t i = 0; i < sizeof connect_codes / sizeof *connect_codes; i++)
        if (strcmp(code, connect_codes[i].code) == 0)
            status = connect_codes[i].status;
    return reply(c, status, json_pack("{s:s, s:s}", "code", code, "message", msg), NULL, NULL);
}

const char *al_e2b_connect_code(int r) {
    switch (-r) {
    case ENOENT: return "not_found";
    case EEXIST: return "already_exists";
    case EINVAL: case ENAMETOOLONG: case ENOTDIR: case EISDIR: case ELOOP: return "invalid_argument";
    case EACCES: return "unauthenticated";
    case EPERM: return "permission_denied";
    case EDQUOT: case ENOSPC: case EMFILE: return "resource_exhausted";
    case ENOSYS: return "unimplemented";
    case ENOTEMPTY: case EBUSY: return "failed_precondition";
    default: return "internal";
    }
}

unsigned al_e2b_status(int r) {
    switch (-r) {
    case ENOENT: return 404;
    case EINVAL: case EPERM: return 400;
    case EACCES: return 401;
    case EDQUOT: return 429;
    case EALREADY: case EEXIST: return 409;
    default: return 500;
    }
}

bool al_e2b_is_rpc(const char *url) {
    const char *p = url + strspn(url, "/");
    size_t l = strcspn(p, "/");
    return memchr(p, '.', l) != NULL && p[l] == '/';
}

static enum MHD_Result reply_err(struct MHD_Connection *c, int r, const al_error *err) {
    return al_e2b_reply_error(c, al_e2b_status(r), "%s", err->msg[0] ? err->msg : "the operation failed");
}

/* ------------------------------------------------------------ documents */

/* Sandbox SB as E2B's Sandbox (create, connect): with TOKEN, its access token. */
static json_t *sandbox_json(const al_sandbox *sb, const char *token) {
    /* the SDK sends the sandbox plane to https://PORT-ID.DOMAIN unless it
     * was given E2B_SANDBOX_URL, and DOMAIN null means E2B's own cloud: a
     * client set up without it would send the access token and the files
     * to e2b.app. A name under .invalid (RFC 6761) resolves nowhere, so it
     * fails at once, and its words say why (getHost's names are under it
     * too: ports are not served) */
    return json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:n}", "sandboxID", sb->id, "templateID", sb->template_id,
                     "clientID", CLIENT_ID, "envdVersion", ENVD_VERSION, "envdAccessToken", token, "domain",
                     AL_E2B_DOMAIN, "trafficAccessToken");
}

/* Sandbox SB as E2B's SandboxDetail (getInfo) or ListedSandbox (list): the
 * box's shape its runs get (the workspace's settings, SET) and its network
 * as E2B says it (hosts as allowOut, offline as no internet access). */
static json_t *detail_json(const al_sandbox *sb, json_t *set) {
    double cpus = json_number_value(json_object_get(set, "cpus"));
    json_t *d = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:O}", "sandboxID", sb->id, "templateID",
                          sb->template_id, "clientID", CLIENT_ID, "startedAt", sb->started_at, "endAt", sb->end_at,
                          "state", al_sandbox_state_name(sb->state), "cpuCount", cpus > 1 ? (int)cpus + (cpus > (int)cpus) : 1,
                          "memoryMB", (int)json_number_value(json_object_get(set, "memory_mb")), "diskSizeMB",
                          (int)(AL_SANDBOX_BYTES_MAX >> 20), "envdVersion", ENVD_VERSION, "metadata", sb->metadata);
    if (!d)
        return NULL;
    json_object_set_new(d, "allowInternetAccess", json_boolean(strcmp(sb->network, "offline") != 0));
    /* its calls share a session box (docs/api.md, "Session box"): said,
     * with its limits, and what a pause does to it */
    if (json_is_true(json_object_get(set, "e2b_session_box")))
        json_object_set_new(d, "airlock", json_pack("{s:{s:b, s:i, s:f, s:I, s:s, s:s, s:s}}", "sessionBox",
                                                     "shared", 1, "memoryMB",
                                                     (int)json_number_value(json_object_get(set, "memory_mb")),
                                                     "cpus", cpus, "lifetimeMaxS",
                                                     json_integer_value(json_object_get(set, "sandbox_max_timeout_s")),
                                                     "callTimeout", "each call's own timeout kills that call only",
                                                     "pause", "files kept, processes ended",
                                                     "credits", "each call is charged as a run; the idle box is not"));
    if (strncmp(sb->network, "hosts:", 6) == 0) {
        json_t *hosts = json_array();
        for (const char *p = sb->network + 6; *p;) {
            size_t l = strcspn(p, ",");
            json_array_append_new(hosts, json_stringn(p, l));
            p += l + (p[l] == ',');
        }
        json_object_set_new(d, "network", json_pack("{s:o, s:[s]}", "allowOut", hosts, "denyOut", "0.0.0.0/0"));
    }
    return d;
}

/* The workspace's effective settings (the box's shape); {} when unread. */
static json_t *settings_of(al_route_ctx *x) {
    al_error err = { 0 };
    json_t *set = al_view_settings(x->s, x->p->workspace_id, &err);
    return set ? set : json_object();
}

/* ------------------------------------------------------------ create */

/* The key of the request: X-API-KEY, else Authorization: Bearer. */
static const char *request_key(struct MHD_Connection *c) {
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
    if (k)
        return k;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return a && strncmp(a, "Bearer ", 7) == 0 ? a + 7 : NULL;
}

/* What of E2B's create airlock does not do: asked for, it is refused, not
 * ignored (a sandbox that is not what was asked for is worse than none). */
static const char *unsupported_field(json_t *body) {
    static const char *const fields[] = { "mcp", "iam", "volumeMounts", "autoResume" };
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        json_t *v = json_object_get(body, fields[i]);
        if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0) &&
            !(json_is_object(v) && json_object_size(v) == 0))
            return fields[i];
    }
    if (json_is_true(json_object_get(body, "autoPause")))
        return "autoPause (airlock kills a sandbox at its end)";
    static const char *const net[] = { "egressProxy", "rules", "maskRequestHost", "httpsPorts", "allowPublicTraffic" };
    json_t *n = json_object_get(body, "network");
    for (size_t i = 0; i < sizeof net / sizeof *net; i++) {
        json_t *v = json_object_get(n, net[i]);
        if (v && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0))
            return net[i];
    }
    return NULL;
}

/* BODY (E2B's NewSandbox) into SP: false with a 400 queued in *RET. */
static bool read_spec(al_route_ctx *x, json_t *body, al_sandbox_spec *sp, enum MHD_Result *ret) {
    *sp = (al_sandbox_spec){ .timeout_s = -1, .allow_internet = -1 };
    json_t *t = json_object_get(body, "templateID"), *to = json_object_get(body, "timeout");
    json_t *ai = json_object_get(body, "allow_internet_access");
    if (!ai)
        ai = json_object_get(body, "allowInternetAccess");
    json_t *net = json_object_get(body, "network");
    const char *bad = unsupported_field(body);
    if (bad)
        *ret = al_e2b_reply_error(x->c, 400, "%s: not served by airlock's E2B compatibility (docs/api.md)", bad);
    else if (t && !json_is_string(t))
        *ret = al_e2b_reply_error(x->c, 400, "templateID: want a string");
    else if (to && !json_is_null(to) && !json_is_integer(to))
        *ret = al_e2b_reply_error(x->c, 400, "timeout: want whole seconds");
    else if (ai && !json_is_null(ai) && !json_is_boolean(ai))
        *ret = al_e2b_reply_error(x->c, 400, "allow_internet_access: want true or false");
    else if (net && !json_is_null(net) && !json_is_object(net))
        *ret = al_e2b_reply_error(x->c, 400, "network: want an object");
    else {
        sp->template_id = json_string_value(t);
        if (json_is_integer(to))
            sp->timeout_s = json_integer_value(to) < 0 ? 0 : json_integer_value(to);
        if (json_is_boolean(ai))
            sp->allow_internet = json_is_true(ai);
        json_t *md = json_object_get(body, "metadata"), *ev = json_object_get(body, "envVars");
        sp->metadata = json_is_null(md) ? NULL : md;
        sp->env_vars = json_is_null(ev) ? NULL : ev;
        json_t *ao = json_object_get(net, "allowOut"), *dn = json_object_get(net, "denyOut");
        sp->allow_out = json_is_null(ao) ? NULL : ao;
        sp->deny_out = json_is_null(dn) ? NULL : dn;
        return true;
    }
    return false;
}

enum MHD_Result al_e2b_create(al_route_ctx *x) {
    if (x->rq->too_large)
        return al_e2b_reply_error(x->c, 413, "the body is larger than the service takes");
    json_t *body = al_req_body_object(x->rq);
    if (!json_is_object(body)) {
        json_decref(body);
        return al_e2b_reply_error(x->c, 400, "the body must be a JSON object (E2B's NewSandbox)");
    }
    al_sandbox_spec sp;
    enum MHD_Result ret = MHD_NO;
    if (!read_spec(x, body, &sp, &ret)) {
        json_decref(body);
        return ret;
    }
    /* its packages: well formed, and installs the workspace allows, or
     * no sandbox (a refusal at its first command would come too late) */
    al_run_spec pk = { 0 };
    char pmsg[2048];
    const char *pcode = NULL;
    al_status pst = al_packages_of_metadata(sp.metadata, &pk, pmsg, sizeof pmsg, &pcode);
    if (pst == AL_STATUS_OK)
        pst = al_packages_admit_for(x->s, x->p, &pk, &pcode, pmsg, sizeof pmsg);
    al_run_spec_free(&pk);
    if (pst != AL_STATUS_OK) {
        json_decref(body);
        return al_e2b_reply_error(x->c, pst == AL_STATUS_INVALID ? 400 : pst == AL_STATUS_UNAVAILABLE ? 503 : 500,
                                  "%s", pmsg);
    }
    al_sandbox sb;
    char token[72];
    al_error err = { 0 };
    int r = al_sandbox_create(x->s, x->p, request_key(x->c), &sp, &sb, token, &err);
    json_decref(body);
    if (r < 0)
        return reply_err(x->c, r, &err);
    ret = reply(x->c, 201, sandbox_json(&sb, token), NULL, NULL);
    al_sandbox_clear(&sb);
    return ret;
}

/* ------------------------------------------------------------ reads */

enum MHD_Result al_e2b_get(al_route_ctx *x) {
    al_sandbox sb;
    al_error err = { 0 };
    int r = al_sandbox_get(x->s, x->p, x->arg[0], &sb, &err);
    if (r < 0)
        return reply_err(x->c, r, &err);
    json_t *set = settings_of(x);
    enum MHD_Result ret = reply(x->c, 200, detail_json(&sb, set), NULL, NULL);
    json_decref(set);
    al_sandbox_clear(&sb);
    return ret;
}

/* E2B's metadata query, "k1=v1&k2=v2" with each key and value URL-encoded
 * (once more than the query itself), as an object in *RET; -EINVAL. */
static int metadata_filter(const char *q, json_t **ret) {
    *ret = NULL;
    if (!q || !*q)
        return 0;
    if (strlen(q) > 4096)
        return -EINVAL;
    json_t *f = json_object();
    char *copy = strdup(q), *save = NULL;
    int r = copy && f ? 0 : -ENOMEM;
    for (char *pair = copy ? strtok_r(copy, "&", &save) : NULL; r == 0 && pair; pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (!eq) {
            r = -EINVAL;
            break;
        }
        *eq = '\0';
        MHD_http_unescape(pair);
        MHD_http_unescape(eq + 1);
        if (!*pair || json_object_size(f) >= AL_SANDBOX_META_MAX)
            r = -EINVAL;
        else
            json_object_set_new(f, pair, json_string(eq + 1));
    }
    free(copy);
    if (r < 0)
        json_decref(f);
    else
        *ret = f;
    return r;
}

/* E2B's state query ("running", "paused", or both, comma-separated) as bits. */
static int state_filter(const char *q, unsigned *ret) {
    *ret = 0;
    for (const char *p = q; p && *p;) {
        size_t l = strcspn(p, ",");
        if (l == 7 && strncmp(p, "running", 7) == 0)
            *ret |= 1u << AL_SANDBOX_RUNNING;
        else if (l == 6 && strncmp(p, "paused", 6) == 0)
            *ret |= 1u << AL_SANDBOX_PAUSED;
        else
            return -EINVAL;
        p += l + (p[l] == ',');
    }
    return 0;
}

/* E2B's startedAfter (an ISO time, the SDK's toISOString) in the store's
 * form, YYYY-MM-DDTHH:MM:SS.mmmZ, into OUT: -EINVAL for any other. */
static int time_arg(const char *q, char out[40]) {
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t n = strlen(q);
    if (n < sizeof shape - 1 || n > 30)
        return -EINVAL;
    for (size_t i = 0; i < sizeof shape - 1; i++)
        if (shape[i] == 'd' ? !(q[i] >= '0' && q[i] <= '9') : q[i] != shape[i])
            return -EINVAL;
    const char *p = q + sizeof shape - 1;
    char ms[4] = "000";
    if (*p == '.') {
        size_t d = strspn(p + 1, "0123456789");
        if (d == 0)
            return -EINVAL;
        memcpy(ms, p + 1, d < 3 ? d : 3);
        p += 1 + d;
    }
    if (strcmp(p, "Z") != 0)
        return -EINVAL;
    snprintf(out, 40, "%.19s.%sZ", q, ms);
    return 0;
}

enum MHD_Result al_e2b_list(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    const char *md = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "metadata");
    const char *st = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *order = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order");
    const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "startedAfter");
    const char *tmpl = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "template");
    uint64_t limit = 100;
    char after[40];
    al_sandbox_query q = { .template_id = tmpl && tmpl[0] ? tmpl : NULL,
                           .after = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "nextToken") };
    if (lim && (al_parse_u64(lim, &limit) < 0 || limit < 1 || limit > 100))
        return al_e2b_reply_error(c, 400, "limit: between 1 and 100");
    q.limit = (size_t)limit;
    if (state_filter(st, &q.states) < 0)
        return al_e2b_reply_error(c, 400, "state: running, paused, or both");
    if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
        return al_e2b_reply_error(c, 400, "order: asc or desc");
    q.oldest_first = order && strcmp(order, "asc") == 0;
    if (since && since[0] && time_arg(since, after) < 0)
        return al_e2b_reply_error(c, 400, "startedAfter: want an ISO time in UTC (2026-01-02T03:04:05.000Z)");
    q.started_after = since && since[0] ? after : NULL;
    if (metadata_filter(md, &q.metadata) < 0)
        return al_e2b_reply_error(c, 400, "metadata: want key=value pairs joined by &, each URL-encoded");
    al_sandbox_list l;
    al_error err = { 0 };
    int r = al_sandbox_list_page(x->s, x->p, &q, &l, &err);
    json_decref(q.metadata);
    if (r < 0)
        return reply_err(c, r, &err);
    json_t *set = settings_of(x), *out = json_array();
    for (size_t i = 0; i < l.n; i++)
        json_array_append_new(out, detail_json(&l.v[i], set));
    json_decref(set);
    enum MHD_Result ret = reply(c, 200, out, "X-Next-Token", l.next[0] ? l.next : NULL);
    al_sandbox_list_free(&l);
    return ret;
}

/* ------------------------------------------------------------ changes */

/* BODY's whole seconds FIELD into *RET (-1 absent): false on a bad one. */
static bool body_seconds(al_route_ctx *x, const char *field, int64_t *ret) {
    *ret = -1;
    json_t *body = al_req_body_object(x->rq);
    json_t *v = json_object_get(body, field);
    bool ok = json_is_object(body) && (!v || json_is_null(v) || json_is_integer(v));
    if (ok && json_is_integer(v))
        *ret = json_integer_value(v) < 0 ? 0 : json_integer_value(v);
    json_decref(body);
    return ok;
}

static enum MHD_Result set_timeout(al_route_ctx *x, const char *field) {
    int64_t secs;
    if (!body_seconds(x, field, &secs) || secs < 0)
        return al_e2b_reply_error(x->c, 400, "the body must be {\"%s\": <seconds>}", field);
    al_error err = { 0 };
    int r = al_sandbox_set_timeout(x->s, x->p, x->arg[0], secs, &err);
    return r < 0 ? reply_err(x->c, r, &err) : al_reply_empty(x->c, 204, NULL, NULL);
}

enum MHD_Result al_e2b_timeout(al_route_ctx *x) { return set_timeout(x, "timeout"); }

enum MHD_Result al_e2b_refresh(al_route_ctx *x) { return set_timeout(x, "duration"); }

enum MHD_Result al_e2b_connect(al_route_ctx *x) {
    int64_t secs;
    if (!body_seconds(x, "timeout", &secs))
        return al_e2b_reply_error(x->c, 400, "the body must be {\"timeout\": <seconds>}");
    al_sandbox before, sb;
    al_error err = { 0 };
    int r = al_sandbox_get(x->s, x->p, x->arg[0], &before, &err);
    if (r == 0 && al_sandbox_owner_check(&before, x->p, &err) < 0) {
        al_sandbox_clear(&before);
        return al_e2b_reply_error(x->c, 403, "%s", err.msg);
    }
    if (r == 0)
        r = al_sandbox_connect(x->s, x->p, x->arg[0], secs, &sb, &err);
    char token[72] = "";
    if (r == 0 && (r = al_sandbox_token(x->s, sb.id, token, &err)) < 0)
        al_sandbox_clear(&sb);
    bool resumed = r == 0 && before.state == AL_SANDBOX_PAUSED;
    al_sandbox_clear(&before);
    if (r < 0)
        return reply_err(x->c, r, &err);
    /* E2B: 200 for one that was running, 201 for one resumed */
    enum MHD_Result ret = reply(x->c, resumed ? 201 : 200, sandbox_json(&sb, token), NULL, NULL);
    al_sandbox_clear(&sb);
    return ret;
}

enum MHD_Result al_e2b_pause(al_route_ctx *x) {
    al_error err = { 0 };
    int r = al_sandbox_pause(x->s, x->p, x->arg[0], true, &err);
    return r < 0 ? reply_err(x->c, r, &err) : al_reply_empty(x->c, 204, NULL, NULL);
}

/* the deprecated POST /sandboxes/{id}/resume: E2B's Sandbox in 201 */
enum MHD_Result al_e2b_resume(al_route_ctx *x) {
    al_error err = { 0 };
    al_sandbox sb;
    char token[72] = "";
    /* it answers the token: its creator's alone */
    int r = al_sandbox_get(x->s, x->p, x->arg[0], &sb, &err);
    if (r == 0) {
        r = al_sandbox_owner_check(&sb, x->p, &err);
        al_sandbox_clear(&sb);
        if (r < 0)
            return al_e2b_reply_error(x->c, 403, "%s", err.msg);
    }
    if (r == 0)
        r = al_sandbox_pause(x->s, x->p, x->arg[0], false, &err);
    if (r == 0 && (r = al_sandbox_get(x->s, x->p, x->arg[0], &sb, &err)) == 0 &&
        (r = al_sandbox_token(x->s, sb.id, token, &err)) < 0)
        al_sandbox_clear(&sb);
    if (r < 0)
        return reply_err(x->c, r, &err);
    enum MHD_Result ret = reply(x->c, 201, sandbox_json(&sb, token), NULL, NULL);
    al_sandbox_clear(&sb);
    return ret;
}

enum MHD_Result al_e2b_kill(al_route_ctx *x) {
    al_error err = { 0 };
    int r = al_sandbox_kill(x->s, x->p, x->arg[0], &err);
    return r < 0 ? reply_err(x->c, r, &err) : al_reply_empty(x->c, 204, NULL, NULL);
}

enum MHD_Result al_e2b_unsupported(al_route_ctx *x) {
    return al_e2b_reply_error(x->c, 501,
                              "this %s is part of E2B's API that airlock does not serve (templates, snapshots, volumes, "
                              "metrics and logs are not kept: docs/api.md, \"E2B compatibility\")",
                              x->method);
}
