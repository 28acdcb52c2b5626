/*
 * MCP over the Streamable HTTP transport: each POST /mcp carries one
 * JSON-RPC 2.0 message. A request is answered with one JSON response, or,
 * for a tools/call that started a run and a client that accepts
 * text/event-stream, with an SSE stream of notifications (progress, live
 * output, approval waits) that ends with the response. Sessions (the
 * Mcp-Session-Id header) are made by initialize, bound to the person whose
 * key made them, kept in memory (a restart ends them: clients then get 404
 * and initialize again, as the specification says), and ended by DELETE.
 * There is no server-initiated stream: GET answers 405, unless it carries
 * Last-Event-ID, which resumes a tools/call stream (below). A client's
 * notifications/cancelled for a tools/call under way cancels its run.
 */
#include <string.h>
#include <sys/random.h>

#include "http.h"
#include "mcp.h"
#include "mcp_tools.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

#include "mcp_internal.h"

static const char *const levels[] = { "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency" };

int al_mcp_new(al_mcp **ret) {
    al_mcp *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->sessions = calloc(SESSIONS_MAX, sizeof *m->sessions);
    m->calls = calloc(INFLIGHT_MAX, sizeof *m->calls);
    if (!m->sessions || !m->calls) {
        free(m->sessions);
        free(m->calls);
        free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cond, NULL);
    *ret = m;
    return 0;
}

void al_mcp_free(al_mcp *m) {
    if (!m)
        return;
    while (m->streams)
        al_mcp_rstream_drop(m, m->streams);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->mu);
    free(m->sessions);
    free(m->calls);
    free(m);
}

/* ------------------------------------------------------------- sessions */

/* A new session for P; false when every slot is taken by a live one. */
static bool session_new(al_mcp *m, const al_principal *p, const char *version, char ret_id[33]) {
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return false;
    for (int i = 0; i < 16; i++)
        snprintf(ret_id + 2 * i, 3, "%02x", rnd[i]);
    uint64_t now = al_now_ms();
    pthread_mutex_lock(&m->mu);
    session *slot = NULL, *oldest = NULL, *own_oldest = NULL;
    int own = 0;
    for (int i = 0; i < SESSIONS_MAX; i++) {
        session *x = &m->sessions[i];
        if (!x->id[0] || now - x->last_ms > SESSION_IDLE_MS) {
            if (!slot)
                slot = x;
            continue;
        }
        if (strcmp(x->person_id, p->person_id) == 0) {
            own++;
            if (!own_oldest || x->last_ms < own_oldest->last_ms)
                own_oldest = x;
        }
        if (!oldest || x->last_ms < oldest->last_ms)
            oldest = x;
    }
    /* a person's many sessions (a client that never says DELETE) push out
     * that person's own oldest, not other people's; a table full of live
     * sessions gives up its least recently used one (its client gets 404
     * and initializes again) rather than refusing a new client */
    if (own >= SESSIONS_PER_PERSON_MAX)
        slot = own_oldest;
    else if (!slot)
        slot = oldest;
    memset(slot, 0, sizeof *slot);
    memcpy(slot->id, ret_id, 33);
    snprintf(slot->person_id, sizeof slot->person_id, "%s", p->person_id);
    snprintf(slot->version, sizeof slot->version, "%s", version);
    slot->last_ms = now;
    pthread_mutex_unlock(&m->mu);
    return true;
}

/* Find session ID of P and copy it to RET; false when there is none (or it is another person's). */
bool al_mcp_session_get(al_mcp *m, const char *id, const al_principal *p, session *ret) {
    bool found = false;
    if (strlen(id) != 32)
        return false;
    uint64_t now = al_now_ms();
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX && !found; i++) {
        session *x = &m->sessions[i];
        if (x->id[0] && strcmp(x->id, id) == 0 && strcmp(x->person_id, p->person_id) == 0 &&
            now - x->last_ms <= SESSION_IDLE_MS) {
            x->last_ms = now;
            *ret = *x;
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return found;
}

static void session_set_level(al_mcp *m, const char *id, int level) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX; i++)
        if (strcmp(m->sessions[i].id, id) == 0)
            m->sessions[i].log_level = level;
    pthread_mutex_unlock(&m->mu);
}

/* The number of session ID's next event stream (from 1). Under m->mu. */
uint64_t al_mcp_session_next_stream(al_mcp *m, const char *id) {
    for (int i = 0; i < SESSIONS_MAX; i++)
        if (strcmp(m->sessions[i].id, id) == 0)
            return ++m->sessions[i].streams;
    return 0;
}

static bool session_end(al_mcp *m, const char *id, const al_principal *p) {
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX; i++) {
        session *x = &m->sessions[i];
        if (x->id[0] && strcmp(x->id, id) == 0 && strcmp(x->person_id, p->person_id) == 0) {
            memset(x, 0, sizeof *x);
            found = true;
        }
    }
    if (found)
        al_mcp_rstreams_end_session(m, id);
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* ------------------------------------------------------ calls under way */

/* The number of P's calls that connections follow. Under m->mu. */
int al_mcp_inflight_attached(al_mcp *m, const char *person) {
    int n = 0;
    for (int i = 0; i < INFLIGHT_MAX; i++)
        n += m->calls[i].session[0] && m->calls[i].attached && strcmp(m->calls[i].person, person) == 0;
    return n;
}

void al_mcp_rstreams_reap(al_mcp *m, const char *sid);

/* A slot for request ID of session SID of PERSON, followed by this
 * connection; -EBUSY when PERSON has CALLS_PER_PERSON_MAX followed already,
 * -EAGAIN when the service has INFLIGHT_MAX under way. */
static int inflight_take(al_mcp *m, const char *sid, const char *person, json_t *id) {
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    int slot = -EAGAIN;
    pthread_mutex_lock(&m->mu);
    if (al_mcp_inflight_attached(m, person) >= CALLS_PER_PERSON_MAX) {
        slot = -EBUSY;
        goto out;
    }
    al_mcp_rstreams_reap(m, NULL); /* parked streams past their time give their slots back */
    for (int i = 0; i < INFLIGHT_MAX && slot < 0; i++) {
        inflight *x = &m->calls[i];
        if (x->session[0])
            continue;
        memset(x, 0, sizeof *x);
        snprintf(x->session, sizeof x->session, "%s", sid);
        snprintf(x->person, sizeof x->person, "%s", person);
        if (key && strlen(key) < sizeof x->request)
            snprintf(x->request, sizeof x->request, "%s", key);
        x->attached = true;
        slot = i;
    }
out:
    pthread_mutex_unlock(&m->mu);
    free(key);
    return slot;
}

void al_mcp_inflight_set_run(al_mcp *m, int slot, const char *run_id) {
    pthread_mutex_lock(&m->mu);
    snprintf(m->calls[slot].run_id, sizeof m->calls[slot].run_id, "%s", run_id);
    pthread_mutex_unlock(&m->mu);
}

void al_mcp_inflight_del(al_mcp *m, int slot) {
    if (slot < 0)
        return;
    pthread_mutex_lock(&m->mu);
    memset(&m->calls[slot], 0, sizeof m->calls[slot]);
    pthread_mutex_unlock(&m->mu);
}

static bool inflight_find(al_mcp *m, const char *sid, json_t *id, char ret_run_id[40]) {
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; key && i < INFLIGHT_MAX && !found; i++) {
        inflight *x = &m->calls[i];
        if (x->session[0] && x->request[0] && x->run_id[0] && strcmp(x->session, sid) == 0 &&
            strcmp(x->request, key) == 0) {
            memcpy(ret_run_id, x->run_id, sizeof x->run_id);
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    free(key);
    return found;
}

/* -------------------------------------------------------------- replies */

enum MHD_Result al_mcp_send_json(struct MHD_Connection *c, unsigned status, json_t *doc, const char *session_id) {
    char *t = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!t) {
        /* an answer that could not be built is still an answer */
        status = 500;
        t = strdup("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"Internal error: "
                   "the response could not be built\"}}");
        if (!t)
            return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (session_id)
        MHD_add_response_header(r, "Mcp-Session-Id", session_id);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A JSON-RPC error response with HTTP STATUS. */
enum MHD_Result al_mcp_send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt,
                                  ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return al_mcp_send_json(c, status, al_mcp_rpc_error(id, code, "%s", msg), NULL);
}


/* ------------------------------------------------------------- requests */

static json_t *initialize_result(const char *version) {
    return json_pack(
        "{s:s, s:{s:{s:b}, s:{s:b, s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version, "capabilities",
        "tools", "listChanged", false, "resources", "subscribe", false, "listChanged", false, "logging", "serverInfo",
        "name", "airlock", "title", "airlock: sandboxed code execution", "version", AIRLOCK_VERSION, "instructions",
        "airlock runs code in a fresh sandbox per call. Use code_execution to run Python, Node.js or Bash; "
        "give a thread to keep files between calls (what a run writes to /out/ the next finds in "
        "/work/documents/), and read them with list_artifacts and read_artifact. A workspace may "
        "require a person to approve each run: the call then waits and says so.");
}

/* The Host header's host (without port) matches ORIGIN's host. A page in a
 * browser on another origin cannot drive the server through a rebound DNS
 * name, as the transport's specification asks. */
static bool origin_ok(struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin || strcmp(origin, "null") == 0)
        return origin == NULL;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *o = strstr(origin, "://");
    if (!host || !o)
        return false;
    o += 3;
    size_t ol = strcspn(o, ":/"), hl = strcspn(host, ":");
    return ol == hl && strncasecmp(o, host, ol) == 0;
}

/* initialize: a new session, in the version both speak */
static enum MHD_Result initialize(al_mcp *m, struct MHD_Connection *c, const al_principal *p, json_t *id,
                                  json_t *params) {
    if (!id)
        return al_mcp_send_error(c, 400, NULL, -32600, "Invalid Request: initialize is a request (it needs an id)");
    const char *want = json_string_value(json_object_get(params, "protocolVersion"));
    if (!want)
        return al_mcp_send_error(c, 200, id, -32602, "Invalid params: protocolVersion is required");
    const char *version = al_mcp_negotiate(want);
    char sid[33];
    if (!session_new(m, p, version, sid))
        return al_mcp_send_error(c, 503, id, -32603, "cannot make a session now");
    return al_mcp_send_json(c, 200, al_mcp_rpc_result(id, initialize_result(version)), sid);
}

/* resources/read of an artifact's URI */
static enum MHD_Result resource_read(al_service *s, struct MHD_Connection *c, const al_principal *p, json_t *id,
                                     json_t *params) {
    enum MHD_Result ret;
    const char *uri = json_string_value(json_object_get(params, "uri"));
    json_t *res = NULL;
    int r = uri ? al_mcp_resource_read(s, p, uri, &res) : -EINVAL;
    if (r == -EINVAL)
        ret = al_mcp_send_error(c, 200, id, -32602, "Invalid params: uri is required");
    else if (r == -ENOENT)
        ret = al_mcp_send_error(c, 200, id, -32002, "Resource not found: %.200s", uri);
    else if (r == -EFBIG)
        ret = al_mcp_send_error(c, 200, id, -32603,
                         "%.200s is too large to read over MCP; use GET "
                         "/v1/artifacts/{id}/content",
                         uri);
    else if (r < 0)
        ret = al_mcp_send_error(c, 200, id, -32603, "cannot read %.200s", uri);
    else
        ret = al_mcp_send_json(c, 200, al_mcp_rpc_result(id, res), NULL);
    return ret;
}

/* logging/setLevel: the least severe log message the session wants */
static enum MHD_Result set_level(al_mcp *m, struct MHD_Connection *c, const session *sess, json_t *id, json_t *params) {
    const char *lv = json_string_value(json_object_get(params, "level"));
    int li = -1;
    for (size_t i = 0; lv && i < ELEMENTSOF(levels); i++)
        if (strcmp(lv, levels[i]) == 0)
            li = (int)i;
    if (li < 0)
        return al_mcp_send_error(c, 200, id, -32602,
                                 "Invalid params: level must be one of debug, info, notice, "
                                 "warning, error, critical, alert, emergency");
    session_set_level(m, sess->id, li);
    return al_mcp_send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
}

/* tools/call: a tool's answer, or the run it started followed (al_mcp_follow) */
static enum MHD_Result tools_call(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                                  const session *sess, json_t *id, json_t *params, bool sse) {
    enum MHD_Result ret;
    const char *name = json_string_value(json_object_get(params, "name"));
    if (!name)
        return al_mcp_send_error(c, 200, id, -32602, "Invalid params: name (the tool's) is required");
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (token && !json_is_string(token) && !json_is_integer(token))
        token = NULL;
    /* a retried call with its Idempotency-Key follows the run its first
     * attempt started; the key binds the tool and its arguments, not
     * the JSON-RPC id a retry renumbers */
    char scope[160];
    snprintf(scope, sizeof scope, "POST /mcp tools/call %.100s", name);
    json_t *call_args = json_object_get(params, "arguments");
    json_t *no_args = call_args ? NULL : json_object();
    al_idem idem;
    al_error ierr = { 0 };
    int ir = al_idem_from_request(c, scope, call_args ? call_args : no_args, NULL, 0, &idem, &ierr);
    json_decref(no_args);
    if (ir < 0)
        return al_mcp_send_error(c, 400, id, -32600, "Invalid Request: %s", ierr.msg);
    /* a slot first, so a call over the limits starts no run */
    int slot = inflight_take(m, sess->id, p->person_id, id);
    if (slot == -EBUSY)
        return al_mcp_send_error(c, 429, id, -32000,
                         "Too Many Requests: at most %d tools/call of one person are followed at once (JSON "
                         "answers, event streams and their resumptions); wait for one to end",
                         CALLS_PER_PERSON_MAX);
    if (slot < 0)
        return al_mcp_send_error(c, 503, id, -32000,
                         "Service Unavailable: %d tools/call are under way on this service; try again shortly",
                         INFLIGHT_MAX);
    al_mcp_call *k = NULL;
    json_t *result = NULL;
    if (al_mcp_tool_call(s, p, name, call_args, token, &idem, &k, &result) == -ENOENT) {
        al_mcp_inflight_del(m, slot);
        ret = al_mcp_send_error(c, 200, id, -32602, "Unknown tool: %.100s", name);
    } else if (result) {
        al_mcp_inflight_del(m, slot);
        ret = al_mcp_send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
    } else {
        ret = al_mcp_follow(m, sess, p, c, k, id, sse, sess->log_level <= 1, slot);
    }
    return ret;
}

static enum MHD_Result post(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p, const char *body,
                            size_t len) {
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (accept && !strstr(accept, "application/json") && !strstr(accept, "text/event-stream") && !strstr(accept, "*/*"))
        return al_mcp_send_error(c, 406, NULL, -32000, "Not Acceptable: accept application/json and text/event-stream");
    bool sse = accept && strstr(accept, "text/event-stream");
    al_mcp_msg msg;
    json_t *perr = NULL;
    unsigned pstatus = 0;
    if (al_mcp_parse(body, len, &msg, &perr, &pstatus) < 0)
        return perr ? al_mcp_send_json(c, pstatus, perr, NULL) : al_reply_empty(c, pstatus, NULL, NULL);
    enum MHD_Result ret;
    json_t *id = msg.id, *params = msg.params;
    const char *method = msg.method;
    if (msg.kind == AL_MCP_RESPONSE) {
        /* a response to a request of ours: we send none, so nothing waits for it */
        ret = al_reply_empty(c, 202, NULL, NULL);
        goto out;
    }
    const char *hv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (hv && !al_mcp_version_supported(hv)) {
        ret = al_mcp_send_error(c, 400, id, -32000,
                         "Bad Request: unsupported MCP-Protocol-Version %.40s (this server "
                         "speaks %s and %s)",
                         hv, AL_MCP_VERSION_LATEST, AL_MCP_VERSION_PREVIOUS);
        goto out;
    }

    if (strcmp(method, "initialize") == 0) {
        ret = initialize(m, c, p, id, params);
        goto out;
    }

    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    session sess;
    if (!sid) {
        ret = al_mcp_send_error(c, 400, id, -32000,
                         "Bad Request: the Mcp-Session-Id header is required (send "
                         "initialize first)");
        goto out;
    }
    if (!al_mcp_session_get(m, sid, p, &sess)) {
        ret = al_mcp_send_error(c, 404, id, -32001, "Session not found: it ended, never existed, or lives on another airlock node (sessions stay on the node that made them); initialize again");
        goto out;
    }
    if (!id) {
        /* a call the client gave up on: its run is canceled, so it does not
         * go on using a box (and credits) for nobody. The call then ends
         * as canceled; its answer the client ignores. */
        char run_id[40];
        json_t *rid = json_object_get(params, "requestId");
        if (strcmp(method, "notifications/cancelled") == 0 && rid && inflight_find(m, sess.id, rid, run_id))
            al_run_cancel(s, p, run_id);
        /* notifications/initialized, roots changes and the like: nothing to answer */
        ret = al_reply_empty(c, 202, NULL, NULL);
        goto out;
    }
    if (strcmp(method, "ping") == 0) {
        ret = al_mcp_send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
    } else if (strcmp(method, "tools/list") == 0) {
        ret = al_mcp_send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "tools", al_mcp_tools_list(s, p))), NULL);
    } else if (strcmp(method, "resources/list") == 0) {
        ret = al_mcp_send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "resources", al_mcp_resources_list(s, p))),
                        NULL);
    } else if (strcmp(method, "resources/templates/list") == 0) {
        ret = al_mcp_send_json(c, 200,
                        al_mcp_rpc_result(id, json_pack("{s:[{s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
                                                        "airlock://artifacts/{id}", "name", "artifact", "description",
                                                        "a file a run wrote, by its artifact id")),
                        NULL);
    } else if (strcmp(method, "resources/read") == 0) {
        ret = resource_read(s, c, p, id, params);
    } else if (strcmp(method, "logging/setLevel") == 0) {
        ret = set_level(m, c, &sess, id, params);
    } else if (strcmp(method, "tools/call") == 0) {
        ret = tools_call(m, s, c, p, &sess, id, params, sse);
    } else {
        ret = al_mcp_send_error(c, 200, id, -32601, "Method not found: %.100s", method);
    }
out:
    al_mcp_msg_free(&msg);
    return ret;
}

enum MHD_Result al_mcp_handle(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *method, const char *body, size_t len, bool too_large) {
    if (!origin_ok(c))
        return al_mcp_send_error(c, 403, NULL, -32000, "Forbidden: the Origin header does not match the host");
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
        if (last && strcmp(method, "GET") == 0)
            return al_mcp_resume(m, s, c, p, last);
        /* no server-initiated stream: everything comes as answers to POSTs
         * (and their resumptions) */
        return al_reply_empty(c, 405, "Allow", "POST, DELETE");
    }
    if (strcmp(method, "DELETE") == 0) {
        const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
        if (!sid)
            return al_mcp_send_error(c, 400, NULL, -32000, "Bad Request: the Mcp-Session-Id header is required");
        if (!session_end(m, sid, p))
            return al_mcp_send_error(c, 404, NULL, -32001, "Session not found");
        return al_reply_empty(c, 204, NULL, NULL);
    }
    if (strcmp(method, "POST") != 0)
        return al_reply_empty(c, 405, "Allow", "POST, DELETE");
    if (too_large)
        return al_mcp_send_error(c, 413, NULL, -32600, "Invalid Request: the message is larger than %llu bytes",
                          (unsigned long long)al_view_config(s)->body_max);
    return post(m, s, c, p, body, len);
}

/* the route table's row for /mcp: every method is MCP's to answer */
enum MHD_Result al_mcp_route(al_route_ctx *x) {
    return al_mcp_handle(x->h->mcp, x->s, x->c, x->p, x->method, x->rq->body, x->rq->len, x->rq->too_large);
}
