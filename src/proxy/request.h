/*
 * The egress proxy's request parser: one request head, CONNECT in
 * authority form or a plain-HTTP request in absolute form. Pure and strict
 * (it is the part a hostile script talks to): CRLF only, no folded
 * headers, no userinfo, one unambiguous body length. Fuzzed in tests/fuzz.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define AL_REQ_HEAD_MAX 8192      /* a head that does not end within this is refused */
#define AL_REQ_HEADERS_MAX 64

typedef struct al_proxy_req {
    bool connect;
    char method[16];
    char host[256];               /* the authority's host as written; [v6] keeps its brackets */
    uint16_t port;
    size_t head_len;              /* bytes through the blank line */
    size_t path_off, path_len;    /* absolute form: the origin-form target in the buffer */
    size_t hdr_off;               /* where the header lines start */
    int minor;                    /* HTTP/1.minor */
} al_proxy_req;

/*
 * Parse the head in BUF. Returns 0 with *RET filled, -EAGAIN when more bytes
 * are needed (the caller refuses heads longer than AL_REQ_HEAD_MAX), or
 * -EINVAL (malformed: a 400), -EPROTONOSUPPORT (https:// in absolute form,
 * another scheme, or an origin-form request that names no host) with
 * *RET_WHY saying why.
 */
int al_proxy_req_parse(const char *buf, size_t len, al_proxy_req *ret, const char **ret_why);

/* Whether BUF starts like another request line (METHOD SP): bytes after a
 * CONNECT head that are a second request, not tunnel data. */
bool al_proxy_looks_like_request(const char *buf, size_t len);

/*
 * A header is one the proxy drops when it forwards an absolute-form request
 * (hop-by-hop, proxy credentials, and Host, which it writes itself from
 * the authority it checked).
 */
bool al_proxy_header_dropped(const char *line, size_t len);

/* Split "host:port" / "[v6]:port" / "host" into HOST (brackets kept) and
 * PORT (DEFPORT when absent; 0 means a port is required). -EINVAL when
 * malformed: userinfo, an empty host, a bad or zero port. */
int al_proxy_split_authority(const char *a, size_t n, uint16_t defport, char *host, size_t hostn, uint16_t *port);

/* Room the rewrite needs beyond the request head: a "/" before a bare
 * query, Host with the port, and Connection: close. */
#define AL_REQ_REWRITE_EXTRA 600

/*
 * The head of an absolute-form request R (parsed from BUF) as the proxy
 * forwards it: origin form, Host written from the checked authority, the
 * client's end-to-end headers, Connection: close. Returns its length, or
 * -ENOSPC when CAP (at least head_len + AL_REQ_REWRITE_EXTRA) is short.
 */
ssize_t al_proxy_req_rewrite(const char *buf, const al_proxy_req *r, char *out, size_t cap);
