#include "request.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* the next CRLF at or after P, before END (the head is known to hold one) */
static const char *crlf(const char *p, const char *end) {
    const char *e = memmem(p, (size_t)(end - p), "\r\n", 2);
    return e ? e : end;
}

static bool tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Printable bytes (and obs-text) an authority or target may hold: no
 * space, no control, no DEL. */
static bool vchar(unsigned char c) { return c > 0x20 && c != 0x7f; }

int al_proxy_split_authority(const char *a, size_t n, uint16_t defport, char *host, size_t hostn, uint16_t *port) {
    /* no userinfo, no IPv6 zone (meaningless for a remote host), and only
     * ASCII: what is checked is exactly what is logged and connected to */
    if (n == 0 || n >= hostn || memchr(a, '@', n) || memchr(a, '%', n))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)a[i] >= 0x80 || (unsigned char)a[i] <= 0x20)
            return -EINVAL;
    size_t hl;
    const char *rest;
    if (a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!close || close == a + 1)
            return -EINVAL;
        hl = (size_t)(close - a) + 1;
        rest = close + 1;
    } else {
        const char *colon = memchr(a, ':', n);
        hl = colon ? (size_t)(colon - a) : n;
        rest = a + hl;
    }
    if (hl == 0)
        return -EINVAL;
    size_t rl = n - (size_t)(rest - a);
    unsigned long p = defport;
    if (rl > 0) {
        if (rest[0] != ':' || rl < 2 || rl > 6)
            return -EINVAL;
        p = 0;
        for (size_t i = 1; i < rl; i++) {
            if (rest[i] < '0' || rest[i] > '9')
                return -EINVAL;
            p = p * 10 + (unsigned long)(rest[i] - '0');
        }
    }
    if (p == 0 || p > 65535)
        return -EINVAL;
    memcpy(host, a, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return 0;
}

bool al_proxy_looks_like_request(const char *buf, size_t len) {
    size_t i = 0;
    while (i < len && i < 16 && buf[i] >= 'A' && buf[i] <= 'Z')
        i++;
    return i > 0 && i < len && buf[i] == ' ';
}

static bool name_is(const char *line, size_t len, const char *name) {
    size_t k = strlen(name);
    return len > k && line[k] == ':' && strncasecmp(line, name, k) == 0;
}

bool al_proxy_header_dropped(const char *line, size_t len) {
    static const char *const drop[] = { "host", "connection", "proxy-connection", "proxy-authorization",
                                        "keep-alive", "te", "upgrade" };
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (name_is(line, len, drop[i]))
            return true;
    return false;
}

#define BAD(w)                                                                                     \
    do {                                                                                           \
        *ret_why = (w);                                                                            \
        return -EINVAL;                                                                            \
    } while (0)

int al_proxy_req_parse(const char *buf, size_t len, al_proxy_req *r, const char **ret_why) {
    memset(r, 0, sizeof *r);
    *ret_why = NULL;
    /* the head ends at the first blank line */
    const char *end = NULL;
    for (size_t i = 0; i + 3 < len; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            end = buf + i + 4;
            break;
        }
    if (memchr(buf, '\0', end ? (size_t)(end - buf) : len))
        BAD("a NUL byte in the request");
    if (!end) {
        /* a bare LF where a line should end is refused now, not after 8 KiB */
        for (size_t i = 0; i < len; i++)
            if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
                BAD("a line that does not end in CRLF");
        return -EAGAIN;
    }
    r->head_len = (size_t)(end - buf);

    /* request line: METHOD SP target SP HTTP/1.x CRLF, single spaces */
    const char *p = buf, *eol = crlf(buf, end);
    size_t m = 0;
    while (p + m < eol && tchar((unsigned char)p[m]))
        m++;
    if (m == 0 || m >= sizeof r->method || p[m] != ' ')
        BAD("a malformed request line (METHOD SP target SP HTTP/1.1)");
    memcpy(r->method, p, m);
    const char *t = p + m + 1, *te = t;
    while (te < eol && vchar((unsigned char)*te))
        te++;
    if (te == t || te >= eol || *te != ' ' || (size_t)(te - t) > 4096)
        BAD("a malformed request target");
    const char *v = te + 1;
    if (eol - v != 8 || strncmp(v, "HTTP/1.", 7) != 0 || (v[7] != '0' && v[7] != '1'))
        BAD("not HTTP/1.0 or HTTP/1.1");
    r->minor = v[7] - '0';
    size_t tl = (size_t)(te - t);

    if (strcmp(r->method, "CONNECT") == 0) {
        r->connect = true;
        if (al_proxy_split_authority(t, tl, 0, r->host, sizeof r->host, &r->port) < 0)
            BAD("CONNECT needs host:port (no userinfo, no path)");
    } else {
        if (tl >= 8 && strncasecmp(t, "https://", 8) == 0) {
            *ret_why = "https:// URLs go through CONNECT, not in absolute form";
            return -EPROTONOSUPPORT;
        }
        if (tl < 8 || strncasecmp(t, "http://", 7) != 0) {
            *ret_why = t[0] == '/' ? "this is a proxy: the request must name its host (absolute form, http://host/...)"
                                   : "only http:// URLs (or CONNECT) are proxied";
            return -EPROTONOSUPPORT;
        }
        const char *a = t + 7, *ae = a;
        while (ae < te && *ae != '/' && *ae != '?' && *ae != '#')
            ae++;
        if (memchr(a, '@', (size_t)(ae - a)) || memchr(a, '\\', (size_t)(ae - a)))
            BAD("userinfo (@) in the URL's authority is refused");
        if (al_proxy_split_authority(a, (size_t)(ae - a), 80, r->host, sizeof r->host, &r->port) < 0)
            BAD("a malformed authority in the URL");
        if (ae < te && *ae == '#')
            BAD("a fragment in the request target");
        r->path_off = (size_t)(ae - buf);
        r->path_len = (size_t)(te - ae);
    }

    /* headers: name ":" value CRLF; no folding; one body length at most */
    r->hdr_off = (size_t)(eol + 2 - buf);
    const char *h = eol + 2;
    int count = 0, clen = 0;
    bool te_chunked = false;
    while (h < end - 2) {
        const char *he = crlf(h, end);
        if (h[0] == ' ' || h[0] == '\t')
            BAD("folded header lines are refused");
        if (++count > AL_REQ_HEADERS_MAX)
            BAD("too many header lines");
        size_t k = 0;
        while (h + k < he && tchar((unsigned char)h[k]))
            k++;
        if (k == 0 || h[k] != ':')
            BAD("a malformed header line");
        for (const char *c = h + k + 1; c < he; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t')
                BAD("a control byte in a header value");
        if (name_is(h, (size_t)(he - h), "content-length"))
            clen++;
        if (name_is(h, (size_t)(he - h), "transfer-encoding"))
            te_chunked = true;
        h = he + 2;
    }
    if (clen > 1 || (clen && te_chunked))
        BAD("an ambiguous body length (several Content-Length, or with Transfer-Encoding)");
    if (r->connect && (clen || te_chunked))
        BAD("CONNECT with a body");
    return 0;
}

ssize_t al_proxy_req_rewrite(const char *buf, const al_proxy_req *r, char *out, size_t cap) {
    if (r->connect || cap < r->head_len + AL_REQ_REWRITE_EXTRA)
        return -ENOSPC;
    const char *path = buf + r->path_off;
    bool slash = r->path_len == 0 || path[0] != '/';
    size_t o = 0;
    int k = snprintf(out, cap, "%s %s%.*s HTTP/1.1\r\nHost: ", r->method, slash ? "/" : "", (int)r->path_len, path);
    if (k < 0 || (size_t)k >= cap)
        return -ENOSPC;
    o = (size_t)k;
    k = r->port == 80 ? snprintf(out + o, cap - o, "%s\r\n", r->host)
                      : snprintf(out + o, cap - o, "%s:%u\r\n", r->host, (unsigned)r->port);
    if (k < 0 || (size_t)k >= cap - o)
        return -ENOSPC;
    o += (size_t)k;
    for (size_t at = r->hdr_off; at + 2 < r->head_len;) {
        const char *line = buf + at, *e = memmem(line, r->head_len - at, "\r\n", 2);
        if (!e)
            return -EINVAL;
        size_t ll = (size_t)(e - line);
        if (!al_proxy_header_dropped(line, ll)) {
            /* never drop a header for want of room: losing a length
             * header would split the request differently upstream */
            if (o + ll + 2 >= cap)
                return -ENOSPC;
            memcpy(out + o, line, ll + 2);
            o += ll + 2;
        }
        at += ll + 2;
    }
    static const char tail[] = "Connection: close\r\n\r\n";
    if (o + sizeof tail > cap)
        return -ENOSPC;
    memcpy(out + o, tail, sizeof tail - 1);
    return (ssize_t)(o + sizeof tail - 1);
}
