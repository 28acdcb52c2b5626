#include "sni.h"

#include "addr.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

typedef struct rd {
    const unsigned char *p;
    size_t left;
} rd;

static int u8(rd *r, unsigned *v) {
    if (r->left < 1)
        return -1;
    *v = r->p[0];
    r->p++;
    r->left--;
    return 0;
}

static int u16(rd *r, unsigned *v) {
    if (r->left < 2)
        return -1;
    *v = (unsigned)r->p[0] << 8 | r->p[1];
    r->p += 2;
    r->left -= 2;
    return 0;
}

static int skip(rd *r, size_t n) {
    if (r->left < n)
        return -1;
    r->p += n;
    r->left -= n;
    return 0;
}

/* a sub-reader over the next N bytes */
static int sub(rd *r, size_t n, rd *ret) {
    if (r->left < n)
        return -1;
    *ret = (rd){ r->p, n };
    r->p += n;
    r->left -= n;
    return 0;
}

int al_tls_sni(const unsigned char *buf, size_t len, char *name, size_t n) {
    /* record header: handshake (22), TLS 1.0-1.3 record version, length */
    if (len >= 1 && buf[0] != 22)
        return -EPROTO;
    if (len >= 3 && (buf[1] != 3 || buf[2] > 4))
        return -EPROTO;
    if (len < 5)
        return -EAGAIN;
    size_t rec = (size_t)buf[3] << 8 | buf[4];
    if (rec < 4 || rec > 16384)
        return -EPROTO;
    if (len < 5 + rec)
        return -EAGAIN;
    rd r = { buf + 5, rec }, hs, ext;
    unsigned type, l1, l2, l3, v;
    if (u8(&r, &type) || type != 1 || u8(&r, &l1) || u16(&r, &l2))
        return -EPROTO;
    size_t hlen = (size_t)l1 << 16 | l2;
    /* the whole ClientHello must be in this first record: a name split
     * across records is refused rather than reassembled */
    if (sub(&r, hlen, &hs) < 0)
        return -EPROTO;
    if (u16(&hs, &v) || skip(&hs, 32) ||                 /* legacy_version, random */
        u8(&hs, &l1) || l1 > 32 || skip(&hs, l1) ||      /* session id */
        u16(&hs, &l2) || l2 < 2 || (l2 & 1) || skip(&hs, l2) || /* cipher suites */
        u8(&hs, &l3) || l3 < 1 || skip(&hs, l3))         /* compression methods */
        return -EPROTO;
    if (hs.left == 0)
        return 0;                                        /* no extensions at all */
    if (u16(&hs, &l1) || sub(&hs, l1, &ext) < 0 || hs.left != 0)
        return -EPROTO;
    int found = 0;
    while (ext.left > 0) {
        unsigned et, el;
        rd body;
        if (u16(&ext, &et) || u16(&ext, &el) || sub(&ext, el, &body) < 0)
            return -EPROTO;
        if (et != 0)
            continue;
        if (found)
            return -EPROTO;                              /* two server_name extensions */
        rd list;
        unsigned ll;
        if (u16(&body, &ll) || sub(&body, ll, &list) < 0 || body.left != 0)
            return -EPROTO;
        while (list.left > 0) {
            unsigned nt, nl;
            if (u8(&list, &nt) || u16(&list, &nl) || list.left < nl)
                return -EPROTO;
            if (nt == 0) {
                /* one host_name only, a plain DNS name */
                if (found || nl == 0 || nl >= n || nl > 253)
                    return -EPROTO;
                for (unsigned i = 0; i < nl; i++) {
                    unsigned char c = list.p[i];
                    if (c >= 'A' && c <= 'Z')
                        c = (unsigned char)(c - 'A' + 'a');
                    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_')) {
                        name[0] = '\0'; /* not shown: it is not text */
                        return -EINVAL;
                    }
                    name[i] = (char)c;
                }
                name[nl] = '\0';
                /* and a name by its structure too (labels, not an address:
                 * RFC 6066 allows no literal and no trailing dot), as
                 * fuzz-sni found "169.254.169.254" and "a..b" passing */
                al_host h;
                if (al_host_parse(name, &h) != AL_HOST_NAME || strcmp(h.name, name) != 0)
                    return -EINVAL;
                found = 1;
            }
            skip(&list, nl);
        }
        if (!found)
            return -EPROTO;
    }
    return found;
}
