/*
 * Fuzz target for the egress proxy's request parser (src/proxy/request.c):
 * the bytes a hostile script sends to the proxy before anything is checked.
 *
 * What must hold for a parsed request: its offsets lie within the input,
 * its port is not 0, its head ends in a blank line, and its authority
 * splits the same way al_proxy_split_authority does. For an absolute-form
 * request, the head the proxy forwards fits its bound, is made only of
 * CRLF-terminated lines (no bare CR or LF, no NUL), holds exactly one Host
 * (the checked authority's) and one Connection (close), none of the headers
 * the proxy drops, and starts with the request's method and an origin-form
 * path. Under a hosts policy, only the listed name may pass. Every refusal
 * says why; -EAGAIN is only for a head that has not ended yet.
 */
#include <errno.h>
#include <strings.h>

#include "fuzz.h"
#include "proxy/addr.h"
#include "proxy/policy.h"
#include "proxy/request.h"

static long n_parsed, n_connect, n_allowed, n_rewritten, n_refused, n_again;

static size_t count_lines_named(const char *head, size_t len, const char *name) {
    size_t n = 0, nl = strlen(name);
    for (size_t at = 0; at < len;) {
        const char *e = memmem(head + at, len - at, "\r\n", 2);
        size_t ll = e ? (size_t)(e - head - at) : len - at;
        if (ll > nl && strncasecmp(head + at, name, nl) == 0 && head[at + nl] == ':')
            n++;
        at += ll + 2;
    }
    return n;
}

static void check_rewrite(const char *buf, const al_proxy_req *r) {
    size_t cap = r->head_len + AL_REQ_REWRITE_EXTRA;
    char *out = malloc(cap + 1);
    if (!out)
        abort();
    ssize_t n = al_proxy_req_rewrite(buf, r, out, cap);
    FUZZ_CHECK(n > 0 && (size_t)n <= cap, "rewrite of a parsed head failed: %zd", n);
    size_t len = (size_t)n;
    out[len] = '\0';
    FUZZ_CHECK(!fuzz_has_nul(out, len), "NUL in the forwarded head");
    FUZZ_CHECK(len >= 4 && memcmp(out + len - 4, "\r\n\r\n", 4) == 0, "forwarded head does not end in CRLF CRLF");
    /* every CR is followed by LF and every LF preceded by CR */
    for (size_t i = 0; i < len; i++) {
        if (out[i] == '\r')
            FUZZ_CHECK(i + 1 < len && out[i + 1] == '\n', "bare CR at %zu", i);
        if (out[i] == '\n')
            FUZZ_CHECK(i > 0 && out[i - 1] == '\r', "bare LF at %zu", i);
    }
    size_t ml = strlen(r->method);
    FUZZ_CHECK(strncmp(out, r->method, ml) == 0 && out[ml] == ' ' && out[ml + 1] == '/', "request line %.40s", out);
    const char *line_end = strstr(out, "\r\n");
    const char *proto = line_end ? line_end - 9 : NULL;
    FUZZ_CHECK(proto && memcmp(proto, " HTTP/1.1", 9) == 0, "request line does not end in HTTP/1.1");
    for (const char *c = out + ml + 1; c < proto; c++)
        FUZZ_CHECK(*c != ' ' && *c != '\t', "whitespace inside the forwarded path");
    FUZZ_CHECK(count_lines_named(out, len, "Host") == 1, "not exactly one Host");
    FUZZ_CHECK(count_lines_named(out, len, "Connection") == 1, "not exactly one Connection");
    char host_line[300];
    if (r->port == 80)
        snprintf(host_line, sizeof host_line, "\r\nHost: %s\r\n", r->host);
    else
        snprintf(host_line, sizeof host_line, "\r\nHost: %s:%u\r\n", r->host, (unsigned)r->port);
    FUZZ_CHECK(strstr(out, host_line), "Host is not the checked authority");
    /* no header the proxy drops survives (the Host it wrote aside) */
    for (const char *at = line_end + 2; at < out + len - 2;) {
        const char *e = strstr(at, "\r\n");
        if (strncmp(at, "Host: ", 6) != 0 && strncmp(at, "Connection: close\r\n", 19) != 0)
            FUZZ_CHECK(!al_proxy_header_dropped(at, (size_t)(e - at)), "a dropped header was forwarded: %.*s",
                       (int)(e - at), at);
        at = e + 2;
    }
    n_rewritten++;
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > AL_REQ_HEAD_MAX + 1024)
        return 0;
    char *buf = fuzz_copy(data, size, 0);
    al_proxy_req r;
    const char *why = NULL;
    int rc = al_proxy_req_parse(buf, size, &r, &why);
    if (rc == 0) {
        n_parsed++;
        n_connect += r.connect;
        FUZZ_CHECK(r.head_len <= size && r.head_len >= 4 && memcmp(buf + r.head_len - 4, "\r\n\r\n", 4) == 0,
                   "head does not end in a blank line");
        FUZZ_CHECK(r.path_off + r.path_len <= r.head_len && r.hdr_off <= r.head_len && r.port != 0, "offsets");
        FUZZ_CHECK(r.host[0] && !fuzz_has_nul(r.method, strlen(r.method)), "host or method");
        /* parsing is a function of the head alone: more bytes after it
         * (a body, the next request) change nothing */
        al_proxy_req r2;
        const char *why2;
        FUZZ_CHECK(al_proxy_req_parse(buf, r.head_len, &r2, &why2) == 0 && r2.head_len == r.head_len &&
                       r2.port == r.port && strcmp(r2.host, r.host) == 0,
                   "the head parses differently alone");
        al_host h;
        al_host_parse(r.host, &h);
        static al_net_policy pol;
        static int init;
        al_error err;
        if (!init && al_net_policy_parse("hosts:allowed.example", &pol, &err) == 0)
            init = 1;
        char w[384];
        if (init && al_net_decide(&pol, &h, r.port, w, sizeof w)) {
            FUZZ_CHECK(h.kind == AL_HOST_NAME && strcmp(h.name, "allowed.example") == 0, "%s passed", r.host);
            n_allowed++;
        }
        if (!r.connect)
            check_rewrite(buf, &r);
        else {
            /* room enough: a refusal is for the CONNECT, not for want of room */
            char *room = malloc(r.head_len + AL_REQ_REWRITE_EXTRA);
            if (!room)
                abort();
            FUZZ_CHECK(al_proxy_req_rewrite(buf, &r, room, r.head_len + AL_REQ_REWRITE_EXTRA) == -ENOSPC,
                       "a CONNECT head was rewritten");
            free(room);
        }
    } else if (rc == -EAGAIN) {
        n_again++;
        FUZZ_CHECK(!memmem(buf, size, "\r\n\r\n", 4) || size > AL_REQ_HEAD_MAX, "a complete head needs more bytes");
    } else {
        n_refused++;
        FUZZ_CHECK(why && why[0], "a refusal (%d) without a reason", rc);
    }
    al_proxy_looks_like_request(buf, size);
    char host[300];
    uint16_t port;
    if (al_proxy_split_authority(buf, size, 80, host, sizeof host, &port) == 0)
        FUZZ_CHECK(host[0] && port != 0 && !strchr(host, '@'), "authority split to an empty host or port 0");
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-proxy-head: %ld parsed (%ld CONNECT, %ld allowed, %ld rewritten), %ld refused, %ld incomplete\n",
           n_parsed, n_connect, n_allowed, n_rewritten, n_refused, n_again);
    return n_connect && n_allowed && n_rewritten && n_refused && n_again ? 0 : 1;
}
