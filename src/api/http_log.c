/* The HTTP layer's log lines: route patterns and libmicrohttpd's messages
 * sorted by level. */
#include <string.h>

#include "http_log.h"

/* For a path that no row of the route table has (routes.c names the
 * others' patterns): the fixed words of the routes; any other segment is a
 * value a client chose. */
static const char *const words[] = {
    "v1",       "runs",     "events",   "trace",    "inputs",       "approve",  "deny",
    "cancel",   "skills",   "settings", "threads",  "artifacts",    "content",  "usage",
    "audit",    "mcp",      "healthz",  "metrics",  "openapi.json", "piston",   "api",
    "v2",       "execute",  "runtimes", "packages", "promote",      "versions", "test",
    "run",      "checkpoint", "operator", "status",
};

static bool is_word(const char *seg, size_t len) {
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strlen(words[i]) == len && memcmp(words[i], seg, len) == 0)
            return true;
    return false;
}

void al_http_route_pattern(const char *url, char *out, size_t cap) {
    size_t o = 0;
    int n = 0;
    bool piston = false;
    out[0] = '\0';
    for (const char *p = url ? url : ""; *p;) {
        /* the router skips empty segments: so does this */
        p += strspn(p, "/");
        if (!*p)
            break;
        size_t len = strcspn(p, "/?#");
        /* a Piston URL's second segment is its key, whatever it looks like */
        const char *shown = piston && n == 1 ? "{key}" : is_word(p, len) ? NULL : "{id}";
        size_t want = 1 + (shown ? strlen(shown) : len);
        if (o + want + 5 > cap) {
            /* room is kept for this mark: a cut pattern says so */
            snprintf(out + o, cap - o, "/...");
            return;
        }
        out[o++] = '/';
        memcpy(out + o, shown ? shown : p, want - 1);
        o += want - 1;
        out[o] = '\0';
        piston |= n == 0 && len == 6 && memcmp(p, "piston", 6) == 0;
        n++;
        p += len;
        if (*p == '?' || *p == '#')
            break;
    }
    if (o == 0)
        snprintf(out, cap, "/");
}

/* libmicrohttpd 0.9.75's words for a peer that went away (its
 * str_conn_error_ and the read path's messages); a message is all it gives
 * its logger, with no code */
static const char *const gone[] = {
    "forcibly closed by remote peer",
    "no longer available for sending",
    "socket is not connected",
    "Socket has been disconnected",
    "closed by remote side",
    "socket is closed when reading",
};

al_log_level al_http_mhd_level(const char *msg, const char **ret_event) {
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++)
        if (strstr(msg, gone[i])) {
            /* a client that stops reading (an event stream it leaves, a
             * timeout of its own) is its choice, not the service's error */
            *ret_event = "http.client_gone";
            return AL_LOG_INFO;
        }
    /* a request libmicrohttpd refused itself (malformed, headers too big,
     * a Content-Length it cannot read): the client's fault, which an
     * operator may still want to see (a scanner, a broken proxy) */
    static const char refused[] = "Error processing request (HTTP response code is 4";
    if (strncmp(msg, refused, sizeof refused - 1) == 0 ||
        strstr(msg, "`Content-Length' header") || strstr(msg, "'Content-Length' header")) {
        *ret_event = "http.client_error";
        return AL_LOG_WARN;
    }
    if (strstr(msg, "reached connection limit") || strstr(msg, "resource limit")) {
        *ret_event = "http.limit";
        return AL_LOG_WARN;
    }
    *ret_event = "http.error";
    return AL_LOG_ERROR;
}
