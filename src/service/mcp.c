/*
 * MCP over the Streamable HTTP transport: each POST /mcp carries one
 * JSON-RPC 2.0 message. A request is answered with one JSON response, or,
 * for a tools/call that started a run and a client that accepts
 * text/event-stream, with an SSE stream of notifications (progress, live
 * output, approval waits) that ends with the response. Sessions (the
 * Mcp-Session-Id header) are made by initialize, bound to the person whose
 * key made them, kept in memory (a restart ends them: clients then get 404
 * and initialize again, as the specification says), and ended by DELETE.
 * There is no server-initiated stream: GET answers 405. A client's
 * notifications/cancelled for a tools/call under way cancels its run.
 */
#include <string.h>
#include <sys/random.h>

#include "mcp.h"
#include "mcp_tools.h"

#define SESSIONS_MAX 4096
#define SESSIONS_PER_PERSON_MAX 64
#define SESSION_IDLE_MS (24ull * 3600 * 1000) /* an idle session is forgotten after a day */
#define KEEPALIVE_S 15
#define INFLIGHT_MAX 1024 /* calls that can be cancelled at once */

typedef struct session {
    char id[33];
    char person_id[40];
    char version[16];
    int log_level; /* index into levels: the least severe a client wants */
    uint64_t last_ms;
} session;

/* A tools/call following a run, so notifications/cancelled can find it. */
typedef struct inflight {
    char session[33]; /* empty: a free slot */
    char request[72]; /* the request's id as compact JSON */
    char run_id[40];
} inflight;

struct al_mcp {
    pthread_mutex_t mu;
    session *sessions; /* SESSIONS_MAX slots; id[0] == 0 is free */
    inflight *calls;   /* INFLIGHT_MAX slots */
};

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
    *ret = m;
    return 0;
}

void al_mcp_free(al_mcp *m) {
    if (!m)
        return;
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
static bool session_get(al_mcp *m, const char *id, const al_principal *p, session *ret) {
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
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* ------------------------------------------------------ calls under way */

/* Remember that request ID of session SID follows RUN_ID; the slot, or -1 when
 * none is free (the call then cannot be cancelled, only waited for). */
static int inflight_add(al_mcp *m, const char *sid, json_t *id, const char *run_id) {
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    int slot = -1;
    if (key && strlen(key) < sizeof m->calls[0].request) {
        pthread_mutex_lock(&m->mu);
        for (int i = 0; i < INFLIGHT_MAX && slot < 0; i++) {
            inflight *x = &m->calls[i];
            if (x->session[0])
                continue;
            snprintf(x->session, sizeof x->session, "%s", sid);
            snprintf(x->request, sizeof x->request, "%s", key);
            snprintf(x->run_id, sizeof x->run_id, "%s", run_id);
            slot = i;
        }
        pthread_mutex_unlock(&m->mu);
    }
    free(key);
    return slot;
}

static void inflight_del(al_mcp *m, int slot) {
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
        if (x->session[0] && strcmp(x->session, sid) == 0 && strcmp(x->request, key) == 0) {
            memcpy(ret_run_id, x->run_id, sizeof x->run_id);
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    free(key);
    return found;
}

/* -------------------------------------------------------------- replies */

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *doc, const char *session_id) {
    char *t = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!t)
        return MHD_NO;
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
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt,
                                  ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, al_mcp_rpc_error(id, code, "%s", msg), NULL);
}

static enum MHD_Result send_empty(struct MHD_Connection *c, unsigned status, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* ------------------------------------------------------------ streaming */

typedef struct stream {
    al_mcp *m;
    int slot;
    al_mcp_call *k;
    json_t *id;
    bool send_output;
    char *buf;
    size_t len, pos;
    bool done;
} stream;

static void sse_append(stream *st, json_t *msg) {
    char *t = json_dumps(msg, JSON_COMPACT);
    if (!t)
        return;
    /* compact JSON has no newline, so one data line holds it */
    size_t n = strlen(t) + 32;
    char *nb = realloc(st->buf, st->len + n + 1);
    if (nb) {
        st->buf = nb;
        st->len += (size_t)snprintf(st->buf + st->len, n + 1, "event: message\ndata: %s\n\n", t);
    }
    free(t);
}

static ssize_t stream_read(void *cls, uint64_t off, char *out, size_t max) {
    stream *st = cls;
    while (st->pos >= st->len) {
        if (st->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        free(st->buf);
        st->buf = NULL;
        st->len = st->pos = 0;
        json_t *notes = json_array(), *result = NULL;
        bool quiet = al_mcp_call_step(st->k, KEEPALIVE_S, st->send_output, notes, &result);
        size_t i;
        json_t *n;
        json_array_foreach(notes, i, n) sse_append(st, n);
        json_decref(notes);
        if (result) {
            json_t *resp = al_mcp_rpc_result(st->id, result);
            sse_append(st, resp);
            json_decref(resp);
            st->done = true;
        }
        if (st->len == 0 && !st->done && quiet) {
            /* a comment keeps proxies and clients from giving up on a quiet stream */
            st->buf = strdup(": keepalive\n\n");
            st->len = st->buf ? strlen(st->buf) : 0;
        }
    }
    size_t n = st->len - st->pos < max ? st->len - st->pos : max;
    memcpy(out, st->buf + st->pos, n);
    st->pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream *st = cls;
    /* a client that went away does not cancel the run (the specification:
     * a disconnect is not a cancellation); the run ends on its own */
    inflight_del(st->m, st->slot);
    al_mcp_call_free(st->k);
    json_decref(st->id);
    free(st->buf);
    free(st);
}

static enum MHD_Result follow(al_mcp *m, const char *sid, struct MHD_Connection *c, al_mcp_call *k, json_t *id,
                              bool sse, bool send_output) {
    int slot = inflight_add(m, sid, id, al_mcp_call_run_id(k));
    if (!sse) {
        /* plain JSON: wait here for the end, sending nothing before it */
        json_t *result = NULL;
        while (!result) {
            json_t *notes = json_array();
            al_mcp_call_step(k, KEEPALIVE_S, false, notes, &result);
            json_decref(notes);
        }
        inflight_del(m, slot);
        al_mcp_call_free(k);
        return send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
    }
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        inflight_del(m, slot);
        al_mcp_call_free(k);
        return MHD_NO;
    }
    st->m = m;
    st->slot = slot;
    st->k = k;
    st->id = json_incref(id);
    st->send_output = send_output;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, st, stream_free);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
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

static enum MHD_Result post(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p, const char *body,
                            size_t len) {
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (accept && !strstr(accept, "application/json") && !strstr(accept, "text/event-stream") && !strstr(accept, "*/*"))
        return send_error(c, 406, NULL, -32000, "Not Acceptable: accept application/json and text/event-stream");
    bool sse = accept && strstr(accept, "text/event-stream");
    al_mcp_msg msg;
    json_t *perr = NULL;
    unsigned pstatus = 0;
    if (al_mcp_parse(body, len, &msg, &perr, &pstatus) < 0)
        return perr ? send_json(c, pstatus, perr, NULL) : send_empty(c, pstatus, NULL);
    enum MHD_Result ret;
    json_t *id = msg.id, *params = msg.params;
    const char *method = msg.method;
    if (msg.kind == AL_MCP_RESPONSE) {
        /* a response to a request of ours: we send none, so nothing waits for it */
        ret = send_empty(c, 202, NULL);
        goto out;
    }
    const char *hv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (hv && !al_mcp_version_supported(hv)) {
        ret = send_error(c, 400, id, -32000,
                         "Bad Request: unsupported MCP-Protocol-Version %.40s (this server "
                         "speaks %s and %s)",
                         hv, AL_MCP_VERSION_LATEST, AL_MCP_VERSION_PREVIOUS);
        goto out;
    }

    if (strcmp(method, "initialize") == 0) {
        if (!id) {
            ret = send_error(c, 400, NULL, -32600, "Invalid Request: initialize is a request (it needs an id)");
            goto out;
        }
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        if (!want) {
            ret = send_error(c, 200, id, -32602, "Invalid params: protocolVersion is required");
            goto out;
        }
        const char *version = al_mcp_negotiate(want);
        char sid[33];
        if (!session_new(m, p, version, sid)) {
            ret = send_error(c, 503, id, -32603, "cannot make a session now");
            goto out;
        }
        ret = send_json(c, 200, al_mcp_rpc_result(id, initialize_result(version)), sid);
        goto out;
    }

    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    session sess;
    if (!sid) {
        ret = send_error(c, 400, id, -32000,
                         "Bad Request: the Mcp-Session-Id header is required (send "
                         "initialize first)");
        goto out;
    }
    if (!session_get(m, sid, p, &sess)) {
        ret = send_error(c, 404, id, -32001, "Session not found: it ended or never existed; initialize again");
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
        ret = send_empty(c, 202, NULL);
        goto out;
    }
    if (strcmp(method, "ping") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
    } else if (strcmp(method, "tools/list") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "tools", al_mcp_tools_list(s, p))), NULL);
    } else if (strcmp(method, "resources/list") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "resources", al_mcp_resources_list(s, p))),
                        NULL);
    } else if (strcmp(method, "resources/templates/list") == 0) {
        ret = send_json(c, 200,
                        al_mcp_rpc_result(id, json_pack("{s:[{s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
                                                        "airlock://artifacts/{id}", "name", "artifact", "description",
                                                        "a file a run wrote, by its artifact id")),
                        NULL);
    } else if (strcmp(method, "resources/read") == 0) {
        const char *uri = json_string_value(json_object_get(params, "uri"));
        json_t *res = NULL;
        int r = uri ? al_mcp_resource_read(s, p, uri, &res) : -EINVAL;
        if (r == -EINVAL)
            ret = send_error(c, 200, id, -32602, "Invalid params: uri is required");
        else if (r == -ENOENT)
            ret = send_error(c, 200, id, -32002, "Resource not found: %.200s", uri);
        else if (r == -EFBIG)
            ret = send_error(c, 200, id, -32603,
                             "%.200s is too large to read over MCP; use GET "
                             "/v1/artifacts/{id}/content",
                             uri);
        else if (r < 0)
            ret = send_error(c, 200, id, -32603, "cannot read %.200s", uri);
        else
            ret = send_json(c, 200, al_mcp_rpc_result(id, res), NULL);
    } else if (strcmp(method, "logging/setLevel") == 0) {
        const char *lv = json_string_value(json_object_get(params, "level"));
        int li = -1;
        for (size_t i = 0; lv && i < ELEMENTSOF(levels); i++)
            if (strcmp(lv, levels[i]) == 0)
                li = (int)i;
        if (li < 0) {
            ret = send_error(c, 200, id, -32602,
                             "Invalid params: level must be one of debug, info, notice, "
                             "warning, error, critical, alert, emergency");
        } else {
            session_set_level(m, sess.id, li);
            ret = send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
        }
    } else if (strcmp(method, "tools/call") == 0) {
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name) {
            ret = send_error(c, 200, id, -32602, "Invalid params: name (the tool's) is required");
            goto out;
        }
        json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (token && !json_is_string(token) && !json_is_integer(token))
            token = NULL;
        al_mcp_call *k = NULL;
        json_t *result = NULL;
        if (al_mcp_tool_call(s, p, name, json_object_get(params, "arguments"), token, &k, &result) == -ENOENT)
            ret = send_error(c, 200, id, -32602, "Unknown tool: %.100s", name);
        else if (result)
            ret = send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
        else
            ret = follow(m, sess.id, c, k, id, sse, sess.log_level <= 1);
    } else {
        ret = send_error(c, 200, id, -32601, "Method not found: %.100s", method);
    }
out:
    al_mcp_msg_free(&msg);
    return ret;
}

enum MHD_Result al_mcp_handle(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *method, const char *body, size_t len, bool too_large) {
    if (!origin_ok(c))
        return send_error(c, 403, NULL, -32000, "Forbidden: the Origin header does not match the host");
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
        /* no server-initiated stream: everything comes as answers to POSTs */
        return send_empty(c, 405, "POST, DELETE");
    if (strcmp(method, "DELETE") == 0) {
        const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
        if (!sid)
            return send_error(c, 400, NULL, -32000, "Bad Request: the Mcp-Session-Id header is required");
        if (!session_end(m, sid, p))
            return send_error(c, 404, NULL, -32001, "Session not found");
        return send_empty(c, 204, NULL);
    }
    if (strcmp(method, "POST") != 0)
        return send_empty(c, 405, "POST, DELETE");
    if (too_large)
        return send_error(c, 413, NULL, -32600, "Invalid Request: the message is larger than %llu bytes",
                          (unsigned long long)s->cfg.body_max);
    return post(m, s, c, p, body, len);
}
