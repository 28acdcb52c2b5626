/*
 * HTTP: the server glue. libmicrohttpd, a request's life (authenticated on
 * its headers, its body read under the caps, the connection guard told),
 * the access log; what each path answers is the route table's (routes.c)
 * and its surfaces'. One thread per connection, so an event stream may
 * block waiting for the next event; connections are capped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <string.h>

#include "conn_guard.h"
#include "e2b.h"
#include "http.h"
#include "http_log.h"
#include "mcp.h"
#include "metrics.h"
#include "operator.h"
#include "reply.h"
#include "route.h"
#include "../core/views.h"

struct al_http {
    struct MHD_Daemon *d;
    al_service *s;
    al_mcp *mcp;
    al_operator op; /* who may read the service-wide figures */
    al_guard *guard; /* slow clients: a request's deadline, the reserve */
    al_metrics_cache metrics;
    al_http_parts parts; /* what the handlers are given of the above */
};

static enum MHD_Result reply_too_many_bodies(al_service *s, struct MHD_Connection *c) {
    char msg[300];
    snprintf(msg, sizeof msg, "your requests' bodies being received come to %llu MiB already, the most one person "
             "may (body_mb_per_person); retry when one has been answered",
             (unsigned long long)(al_view_config(s)->body_bytes_per_person >> 20));
    return al_reply_doc(c, 429, json_pack("{s:{s:s, s:s}}", "error", "code", "too_many_requests", "message", msg));
}

/* Who asks is known (P): the body the request declares is taken from the
 * person's budget up front, so that one more is refused on its headers,
 * unread. */
static enum MHD_Result hold_body(al_service *s, struct MHD_Connection *c, al_request *rq) {
    rq->authed = true;
    al_guard_authenticated(c);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t len;
    if (cl && al_parse_u64(cl, &len) == 0 && len > 0 && len <= al_view_config(s)->body_max) {
        if (!al_service_hold_bytes(s, rq->p.person_id, len)) {
            rq->answered = true;
            return reply_too_many_bodies(s, c);
        }
        rq->reserved = len;
    }
    return MHD_YES;
}

/* E2B's sandbox plane (E2b-Sandbox-Id: ID), on the headers: the sandbox
 * whose access token X-Access-Token is, and its owner as who asks; else
 * answered now in E2B's shapes (its proxy's 502 for a sandbox that is not
 * running, which the SDK reads as "not running"; 401 for a wrong token). */
static enum MHD_Result admit_sandbox(al_http *h, struct MHD_Connection *c, const char *url, const char *id,
                                     al_request *rq) {
    const char *token = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
    /* the code interpreter's context calls come without the token (the JS
     * SDK sends none): a context is a label that holds nothing of the
     * sandbox (e2b_execute.c), answered alike for any id, so they pass
     * unadmitted, with a body of at most a few KiB (their rows need no key) */
    if (!token && strncmp(url, "/contexts", 9) == 0 && (url[9] == '\0' || url[9] == '/')) {
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        uint64_t len = 0;
        if ((cl && (al_parse_u64(cl, &len) < 0 || len > 4096)) ||
            (!cl && MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))) {
            rq->answered = true;
            return al_e2b_reply_error(c, 413, "a context's request is at most 4 KiB");
        }
        return MHD_YES;
    }
    al_error err = { 0 };
    int r = al_sandbox_admit(h->s, id, token, &rq->sb, &err);
    if (r == 0) {
        rq->p = rq->sb.owner;
        return hold_body(h->s, c, rq);
    }
    rq->answered = true;
    bool rpc = al_e2b_is_rpc(url);
    if (r == -EACCES)
        return rpc ? al_e2b_connect_error(c, "unauthenticated", "%s", err.msg) : al_e2b_reply_error(c, 401, "%s", err.msg);
    if (r == -ENOENT)
        return rpc ? al_e2b_connect_error(c, "unavailable", "%s", err.msg) : al_e2b_reply_error(c, 502, "%s", err.msg);
    return rpc ? al_e2b_connect_error(c, "internal", "%s", err.msg) : al_e2b_reply_error(c, 500, "%s", err.msg);
}

/* Whether the request's Content-Type is application/json (parameters
 * such as "; charset=utf-8" aside). */
static bool json_content(struct MHD_Connection *c) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct)
        return false;
    ct += strspn(ct, " \t");
    size_t n = strlen("application/json");
    return strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ' || ct[n] == '\t');
}

/* The console's sign-in (POST /v1/session), which needs no key: its body,
 * a token, is read without one, so it is bounded here, on the headers:
 * at most 4 KiB, declared up front (a chunked body is refused unread).
 * And it must say it is JSON: another site's page can send a text/plain
 * body (a form, or fetch without CORS) but not an application/json one
 * without our consent (a CORS preflight, which we never grant); so no
 * page elsewhere can sign a visitor in to the attacker's session, whose
 * workspace would then receive whatever the visitor types (login CSRF). */
#define SIGNIN_BODY_MAX 4096
static enum MHD_Result admit_signin(struct MHD_Connection *c, al_request *rq) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t len = 0;
    if (!cl || al_parse_u64(cl, &len) < 0 || len > SIGNIN_BODY_MAX) {
        rq->answered = true;
        return al_reply_error(c, 413, "payload_too_large", "a sign-in's body is at most %d bytes, sent with Content-Length: "
                              "{\"token\": \"...\"}", SIGNIN_BODY_MAX);
    }
    if (!json_content(c)) {
        rq->answered = true;
        return al_reply_error(c, 415, "unsupported_media_type", "a sign-in's body is JSON, sent with Content-Type: "
                              "application/json: {\"token\": \"...\"}");
    }
    return MHD_YES;
}

static enum MHD_Result count_session_cookie(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    if (strcmp(key, "airlock_session") == 0)
        (*(unsigned *)cls)++;
    return MHD_YES;
}

/* Whether URL lies in the /v1 area: the only one a console session opens
 * (not /mcp, /piston, E2B's: agents' surfaces take keys alone). */
static bool in_v1(const char *url) {
    url += strspn(url, "/");
    return strncmp(url, "v1", 2) == 0 && (url[2] == '/' || url[2] == '\0');
}

/* A request of the /v1 area with no key: its session cookie, if it has one
 * (airlock_session, set by POST /v1/session). One that changes something
 * (not GET or HEAD) must also carry the session's CSRF token in
 * X-CSRF-Token: a cookie is sent by the browser whatever page asks, the
 * header only by the console's own script. */
static enum MHD_Result admit_session(al_http *h, struct MHD_Connection *c, const char *url, const char *method,
                                     al_request *rq) {
    /* Two cookies of the name: one was set by someone else (a neighbouring
     * subdomain may set a cookie for ours, with a longer Path that the
     * browser sends first). Taking either would let that someone choose
     * the session the person works in (their CSRF token comes with it):
     * refused, whichever is valid. */
    unsigned cookies = 0;
    MHD_get_connection_values(c, MHD_COOKIE_KIND, count_session_cookie, &cookies);
    if (cookies > 1) {
        rq->answered = true;
        return al_reply_error(c, 400, "ambiguous_session", "this request carries %u airlock_session cookies, where the "
                              "console sets one: another site may have set the others; clear this site's cookies and "
                              "sign in again with a new login link", cookies);
    }
    const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, "airlock_session");
    al_error err = { 0 };
    int a = cookie ? al_session_admit(h->s, cookie, &rq->p, &rq->ses, &err) : 0;
    if (a < 0) {
        rq->answered = true;
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    }
    if (a == 0) {
        rq->answered = true;
        if (cookie)
            return al_reply_error(c, 401, "session_ended", "your console session has ended (signed out, past its 12 "
                                  "hours, or not this service's): sign in again with a new login link");
        return al_route_dispatch(&h->parts, c, url, method, rq);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
        !al_session_csrf_ok(&rq->ses, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-CSRF-Token"))) {
        rq->answered = true;
        return al_reply_error(c, 403, "csrf_required", "a request signed in by the console's session that changes "
                              "something must carry X-CSRF-Token: the csrf_token of GET /v1/session");
    }
    rq->via_session = true;
    return hold_body(h->s, c, rq);
}

/* The first call, on the headers alone, before libmicrohttpd reads a byte of
 * the body: who asks is known here, so a request without a valid key (and
 * one that needs no key, if it comes with a body: it needs none) is
 * answered now and its body is never taken in. Answering now makes
 * libmicrohttpd close the connection instead of reading what follows. */
static enum MHD_Result admit(al_http *h, struct MHD_Connection *c, const char *url, const char *method,
                             al_request *rq) {
    al_service *s = h->s;
    /* E2B's SDK sends its sandbox plane to the same URL, named by a header */
    const char *sandbox = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id");
    if (sandbox) {
        rq->sandbox_plane = true;
        return admit_sandbox(h, c, url, sandbox, rq);
    }
    al_route_auth auth = AL_AUTH_NONE;
    char keybuf[AL_ROUTE_SEG_MAX];
    const char *key = NULL;
    bool known = al_route_auth_of(url, method, &auth, keybuf, &key);
    if (known && auth == AL_AUTH_SIGNIN)
        return admit_signin(c, rq);
    if (!known || (auth != AL_AUTH_KEY && auth != AL_AUTH_URL_KEY && auth != AL_AUTH_E2B_KEY)) {
        /* an answer queued now closes the connection after it: only when
         * there is a body to refuse (else it keeps alive) */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if ((!cl || strcmp(cl, "0") == 0) &&
            !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            return MHD_YES;
        rq->answered = true;
        return al_route_dispatch(&h->parts, c, url, method, rq);
    }
    if (auth == AL_AUTH_E2B_KEY) /* E2B's SDK sends X-API-KEY; a Bearer key serves too */
        key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
    if ((auth == AL_AUTH_KEY || auth == AL_AUTH_E2B_KEY) && !key) {
        const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        key = authz && strncmp(authz, "Bearer ", 7) == 0 ? authz + 7 : NULL;
    }
    /* a key, when one is sent, is the request's only credential */
    if (!key && auth == AL_AUTH_KEY && in_v1(url))
        return admit_session(h, c, url, method, rq);
    al_error err = { 0 };
    int a = key ? al_view_authenticate(s, key, &rq->p, &err) : 0;
    if (a <= 0) {
        rq->answered = true;
        if (a < 0)
            return al_reply_error(c, 500, "internal", "%s", err.msg);
        /* the route table's 401, as the request would have got it */
        return al_route_dispatch(&h->parts, c, url, method, rq);
    }
    return hold_body(s, c, rq);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    al_http *h = cls;
    al_service *s = h->s;
    al_request *rq = *con_cls;
    /* whatever is answered in this call, its errors in the path's shape */
    al_reply_set_shape(al_route_shape_of(url));
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
        rq->t0_ms = al_now_ms();
        /* a method is a token; whatever else a client sends there is not logged as sent */
        for (size_t i = 0; method[i] && i + 1 < sizeof rq->method; i++)
            rq->method[i] = method[i] >= 'A' && method[i] <= 'Z' ? method[i] : '?';
        /* the route table's pattern; a path no row has, by its words */
        if (!al_route_pattern(url, rq->route, sizeof rq->route))
            al_http_route_pattern(url, rq->route, sizeof rq->route);
        enum MHD_Result ret = admit(h, c, url, method, rq);
        if (rq->answered)
            al_guard_answering(c);
        return ret;
    }
    if (*upload_size && rq->answered) {
        /* answered on the headers (admit): the body is nobody's */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        /* bytes past what the headers declared (a chunked body) come from
         * the person's budget too; past it we keep nothing and answer 429 */
        uint64_t want = rq->len + *upload_size;
        uint64_t body_max = al_view_config(s)->body_max;
        if (!rq->too_large && !rq->over_budget && rq->authed && want <= body_max && want > rq->reserved) {
            if (al_service_hold_bytes(s, rq->p.person_id, want - rq->reserved))
                rq->reserved = want;
            else
                rq->over_budget = true;
        }
        /* bodies are capped: past the cap we keep nothing and answer 413 */
        if (!rq->too_large && !rq->over_budget && rq->len + *upload_size <= body_max) {
            char *nb = realloc(rq->body, rq->len + *upload_size + 1);
            if (!nb)
                return MHD_NO;
            rq->body = nb;
            memcpy(rq->body + rq->len, upload, *upload_size);
            rq->len += *upload_size;
            rq->body[rq->len] = '\0';
        } else {
            rq->too_large = true;
            free(rq->body);
            rq->body = NULL;
            rq->len = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
    al_guard_answering(c);
    if (rq->over_budget)
        return reply_too_many_bodies(s, c);
    enum MHD_Result ret = al_route_dispatch(&h->parts, c, url, method, rq);
    /* answered (or streaming): the body is no longer needed */
    free(rq->body);
    rq->body = NULL;
    rq->len = 0;
    if (rq->reserved)
        al_service_unhold_bytes(s, rq->p.person_id, rq->reserved);
    rq->reserved = 0;
    return ret;
}

/* One line per request (access_log = true): its method, route pattern,
 * status (0: none was sent), time and person, and how it ended. */
static void access_log(al_service *s, struct MHD_Connection *c, const al_request *rq,
                       enum MHD_RequestTerminationCode toe) {
    static const char *const ends[] = {
        [MHD_REQUEST_TERMINATED_COMPLETED_OK] = "completed", [MHD_REQUEST_TERMINATED_WITH_ERROR] = "error",
        [MHD_REQUEST_TERMINATED_TIMEOUT_REACHED] = "timeout", [MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN] = "shutdown",
        [MHD_REQUEST_TERMINATED_READ_ERROR] = "client_gone", [MHD_REQUEST_TERMINATED_CLIENT_ABORT] = "client_gone",
    };
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    al_service_log(s, AL_LOG_INFO, "http.access",
                   json_pack("{s:s, s:s, s:i, s:I, s:s?, s:s}", "method", rq->method, "route", rq->route, "status",
                             ci ? (int)ci->http_status : 0, "ms", (json_int_t)(al_now_ms() - rq->t0_ms), "person_id",
                             rq->authed ? rq->p.person_id : NULL, "end",
                             (size_t)toe < sizeof ends / sizeof *ends && ends[toe] ? ends[toe] : "error"));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    al_http *h = cls;
    al_request *rq = *con_cls;
    al_guard_request_done(c);
    if (rq) {
        if (al_view_config(h->s)->access_log)
            access_log(h->s, c, rq, toe);
        if (rq->reserved)
            al_service_unhold_bytes(h->s, rq->p.person_id, rq->reserved);
        al_sandbox_clear(&rq->sb);
        free(rq->body);
        free(rq);
    }
    *con_cls = NULL;
}

/* Make TEXT (NUL-terminated, in place) safe to log: whatever a client put in
 * a URL or a header may be a secret (the key of a Piston URL; a query
 * string), and libmicrohttpd's messages quote the URL. So the segment after
 * "/piston/", query strings and anything shaped like an API key (al_...)
 * become "[redacted]". */
static void redact(char *text, size_t cap) {
    static const char mark[] = "[redacted]";
    char out[1024];
    size_t o = 0;
    /* one step writes at most 8 + sizeof mark bytes */
    for (const char *p = text; *p && o + 8 + sizeof mark < sizeof out;) {
        size_t skip = 0;
        if (strncmp(p, "/piston/", 8) == 0) {
            memcpy(out + o, p, 8);
            o += 8;
            p += 8;
            /* the router skips empty segments: so does this */
            p += strspn(p, "/");
            skip = strcspn(p, "/?#' \"`\t\r\n");
        } else if (*p == '?') {
            out[o++] = *p++;
            skip = strcspn(p, "#' \"`\t\r\n");
        } else if (strncmp(p, "al_", 3) == 0 && (p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                                                               (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9')))) {
            skip = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
            if (skip < 8) /* a word, not a key */
                skip = 0;
        }
        if (skip) {
            memcpy(out + o, mark, sizeof mark - 1);
            o += sizeof mark - 1;
            p += skip;
            continue;
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
    snprintf(text, cap, "%s", out);
}

/* libmicrohttpd's own messages, as our log lines (and redacted: they quote
 * URLs). */
/* A path or query value percent-decoded in place, as libmicrohttpd does,
 * except that a decoded NUL (%00) becomes DEL: with the NUL, every C string
 * after it was cut there, so "DELETE /v1/sandboxes/ID%00/files" was served
 * as "DELETE /v1/sandboxes/ID" (a kill) and "thread_id=a%00junk" as "a".
 * DEL is no character of an id or a route, so such a request matches what
 * it says or nothing. */
static size_t unescape(void *cls, struct MHD_Connection *c, char *uri) {
    /* ('+' in a query is libmicrohttpd's, before this) */
    (void)cls;
    (void)c;
    size_t n = MHD_http_unescape(uri);
    for (size_t i = 0; i < n; i++)
        if (uri[i] == '\0')
            uri[i] = 0x7f;
    return n;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) _printf_(2, 0);
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    al_service *s = cls;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    redact(msg, sizeof msg);
    const char *event = NULL;
    al_log_level level = al_http_mhd_level(msg, &event);
    al_service_log(s, level, event, json_pack("{s:s}", "message", msg));
}

int al_http_start(al_service *s, al_http **ret, al_error *err) {
    const al_service_config *cfg = al_view_config(s);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port) };
    if (inet_pton(AF_INET, cfg->listen_host, &sa.sin_addr) != 1)
        return al_err(err, "listen", EINVAL, "listen address %s is not an IPv4 address", cfg->listen_host);
    al_http *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->s = s;
    int r = al_operator_init(&h->op, cfg, err);
    if (r < 0) {
        free(h);
        return r;
    }
    if ((r = al_guard_new(cfg->max_connections, cfg->connections_reserved, cfg->request_timeout_s,
                          &h->guard)) < 0) {
        free(h);
        return al_err(err, "listen", -r, "cannot start the connection guard");
    }
    al_metrics_cache_init(&h->metrics);
    if (al_mcp_new(&h->mcp) < 0) {
        al_guard_free(h->guard);
        al_metrics_cache_destroy(&h->metrics);
        free(h);
        return -ENOMEM;
    }
    /* complete before the daemon starts: its first request may come at once */
    h->parts = (al_http_parts){ .s = s, .mcp = h->mcp, .op = &h->op, .guard = h->guard, .metrics = &h->metrics };
    /* an inherited listening socket (listen_fd), else one bound here: alone
     * on its address (SO_REUSEADDR only, libmicrohttpd's default) unless
     * the operator shares the port (listen_shared: SO_REUSEPORT, which lets
     * another service take part of this one's connections) */
    struct MHD_OptionItem where[] = {
        cfg->listen_fd >= 0 ? (struct MHD_OptionItem){ MHD_OPTION_LISTEN_SOCKET, cfg->listen_fd, NULL }
                              : (struct MHD_OptionItem){ MHD_OPTION_SOCK_ADDR, 0, &sa },
        cfg->listen_shared && cfg->listen_fd < 0
            ? (struct MHD_OptionItem){ MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL }
            : (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    /* the logger first: libmicrohttpd reads its options in order, and what
     * it says of the options before the logger would go to its own (it
     * warned of that, through ours, at every start) */
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            (uint16_t)cfg->port, NULL, NULL, handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_ARRAY, where, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->connections_per_address,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->connection_timeout_s,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                            MHD_OPTION_NOTIFY_CONNECTION, al_guard_notify, h->guard, MHD_OPTION_END);
    if (!h->d) {
        al_guard_free(h->guard);
        al_mcp_free(h->mcp);
        al_metrics_cache_destroy(&h->metrics);
        free(h);
        return al_err(err, "listen", EADDRINUSE,
                      "cannot listen on %s:%d: another program listens there, or the address is not this host's "
                      "(to share one port between services on purpose: listen_shared = true on each)",
                      cfg->listen_host, cfg->port);
    }
    *ret = h;
    return 0;
}

void al_http_stop(al_http *h) {
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    al_guard_free(h->guard);
    al_mcp_free(h->mcp);
    al_metrics_cache_destroy(&h->metrics);
    free(h);
}
