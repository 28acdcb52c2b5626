#include "addr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

typedef struct range4 {
    uint32_t net, mask;
    const char *why;
} range4;

#define R4(a, b, c, d, bits, why) { ((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d), \
                                    (bits) ? ~0u << (32 - (bits)) : 0, why }

/* RFC 6890 special-purpose ranges that are not globally reachable, plus
 * multicast and the cloud metadata and DNS addresses inside them. */
static const range4 deny4[] = {
    R4(0, 0, 0, 0, 8, "\"this network\" (0.0.0.0/8)"),
    R4(10, 0, 0, 0, 8, "private (10.0.0.0/8)"),
    R4(100, 64, 0, 0, 10, "carrier-grade NAT (100.64.0.0/10)"),
    R4(127, 0, 0, 0, 8, "loopback (127.0.0.0/8)"),
    R4(169, 254, 0, 0, 16, "link-local, cloud metadata (169.254.0.0/16)"),
    R4(172, 16, 0, 0, 12, "private (172.16.0.0/12)"),
    R4(192, 0, 0, 0, 24, "IETF protocol assignments (192.0.0.0/24)"),
    R4(192, 0, 2, 0, 24, "documentation (192.0.2.0/24)"),
    R4(192, 88, 99, 0, 24, "6to4 relay anycast (192.88.99.0/24)"),
    R4(192, 168, 0, 0, 16, "private (192.168.0.0/16)"),
    R4(198, 18, 0, 0, 15, "benchmarking (198.18.0.0/15)"),
    R4(198, 51, 100, 0, 24, "documentation (198.51.100.0/24)"),
    R4(203, 0, 113, 0, 24, "documentation (203.0.113.0/24)"),
    R4(224, 0, 0, 0, 4, "multicast (224.0.0.0/4)"),
    R4(240, 0, 0, 0, 4, "reserved, broadcast (240.0.0.0/4)"),
    /* cloud metadata outside the ranges above: Alibaba, Azure's wire server */
    R4(100, 100, 100, 200, 32, "cloud metadata (100.100.100.200)"),
    R4(168, 63, 129, 16, 32, "cloud metadata (168.63.129.16)"),
};

const char *al_addr4_private(struct in_addr a) {
    uint32_t h = ntohl(a.s_addr);
    for (size_t i = 0; i < sizeof deny4 / sizeof deny4[0]; i++)
        if ((h & deny4[i].mask) == deny4[i].net)
            return deny4[i].why;
    return NULL;
}

static bool prefix6(const struct in6_addr *a, const uint8_t *p, unsigned bits) {
    for (unsigned i = 0; i < bits / 8; i++)
        if (a->s6_addr[i] != p[i])
            return false;
    unsigned rem = bits % 8;
    if (rem) {
        uint8_t m = (uint8_t)(0xff << (8 - rem));
        if ((a->s6_addr[bits / 8] & m) != (p[bits / 8] & m))
            return false;
    }
    return true;
}

static const char *embedded(const struct in6_addr *a, unsigned off) {
    struct in_addr v4;
    memcpy(&v4.s_addr, &a->s6_addr[off], 4);
    return al_addr4_private(v4);
}

const char *al_addr6_private(const struct in6_addr *a) {
    static const uint8_t zero[16] = { 0 };
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    static const uint8_t nat64_local[6] = { 0, 0x64, 0xff, 0x9b, 0, 1 };
    static const uint8_t six_to_four[2] = { 0x20, 0x02 };
    static const uint8_t teredo[4] = { 0x20, 0x01, 0, 0 };
    static const uint8_t doc[4] = { 0x20, 0x01, 0x0d, 0xb8 };
    static const uint8_t discard[8] = { 0x01, 0 };
    static const uint8_t ula[1] = { 0xfc }, ll[2] = { 0xfe, 0x80 }, site[2] = { 0xfe, 0xc0 }, mc[1] = { 0xff };
    static const uint8_t orchid[4] = { 0x20, 0x01, 0x00, 0x10 };

    if (memcmp(a->s6_addr, zero, 16) == 0)
        return "unspecified (::)";
    if (memcmp(a->s6_addr, zero, 15) == 0 && a->s6_addr[15] == 1)
        return "loopback (::1)";
    /* forms that carry an IPv4 address: judged by it */
    if (prefix6(a, mapped, 96)) {
        const char *w = embedded(a, 12);
        return w ? w : NULL;
    }
    if (prefix6(a, zero, 96))
        return embedded(a, 12) ? embedded(a, 12) : "IPv4-compatible (::/96, deprecated)";
    if (prefix6(a, nat64, 96))
        return embedded(a, 12);
    if (prefix6(a, nat64_local, 48))
        return "local-use NAT64 (64:ff9b:1::/48)";
    if (prefix6(a, six_to_four, 16))
        return embedded(a, 2) ? embedded(a, 2) : NULL;
    if (prefix6(a, teredo, 32))
        return "Teredo (2001::/32): tunnels to an address that cannot be checked";
    if (prefix6(a, doc, 32))
        return "documentation (2001:db8::/32)";
    if (prefix6(a, orchid, 28))
        return "ORCHID (2001:10::/28)";
    if (prefix6(a, discard, 64))
        return "discard (100::/64)";
    if (prefix6(a, ula, 7))
        return "unique local, cloud metadata (fc00::/7)";
    if (prefix6(a, ll, 10))
        return "link-local (fe80::/10)";
    if (prefix6(a, site, 10))
        return "site-local (fec0::/10)";
    if (prefix6(a, mc, 8))
        return "multicast (ff00::/8)";
    return NULL;
}

static bool valid_name(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len > 253)
        return false;
    for (const char *l = n; *l;) {
        size_t k = strcspn(l, ".");
        if (k == 0 || k > 63 || l[0] == '-' || l[k - 1] == '-')
            return false;
        for (size_t i = 0; i < k; i++) {
            char c = l[i];
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
                return false;
        }
        l += k;
        if (*l == '.')
            l++;
        if (*l == '\0' && l[-1] == '.')
            return false; /* an empty last label */
    }
    return true;
}

al_host_kind al_host_parse(const char *in, al_host *ret) {
    memset(ret, 0, sizeof *ret);
    ret->kind = AL_HOST_INVALID;
    size_t n = strlen(in);
    if (n == 0 || n > 255)
        return ret->kind;
    char buf[256];
    if (in[0] == '[') {
        /* [v6] with an optional %zone: the zone is dropped */
        if (in[n - 1] != ']')
            return ret->kind;
        snprintf(buf, sizeof buf, "%.*s", (int)(n - 2), in + 1);
        buf[strcspn(buf, "%")] = '\0';
        if (inet_pton(AF_INET6, buf, &ret->v6) == 1)
            ret->kind = AL_HOST_IPV6;
        return ret->kind;
    }
    snprintf(buf, sizeof buf, "%s", in);
    /* an unbracketed v6 literal (in a CONNECT authority it would be bracketed;
     * as a resolved name it is still an address) */
    if (strchr(buf, ':')) {
        buf[strcspn(buf, "%")] = '\0';
        if (inet_pton(AF_INET6, buf, &ret->v6) == 1)
            ret->kind = AL_HOST_IPV6;
        return ret->kind;
    }
    /* one trailing dot is the root label of a name ("example.com."); it is
     * dropped before the address check too, or "0xa9fea9fe." would pass as
     * a name while a resolver or a client reads it as 169.254.169.254 */
    size_t l = strlen(buf);
    if (l > 1 && buf[l - 1] == '.')
        buf[l - 1] = '\0';
    /* inet_aton takes every historic IPv4 spelling: decimal, hex, octal, and
     * the short forms (127.1, 169.254.43518); any of them is an address */
    if (inet_aton(buf, &ret->v4) == 1) {
        ret->kind = AL_HOST_IPV4;
        return ret->kind;
    }
    for (char *c = buf; *c; c++)
        if (*c >= 'A' && *c <= 'Z')
            *c = (char)(*c - 'A' + 'a');
    /* a name whose last label is all digits is no name (and not an address
     * either: inet_aton said no), e.g. 1.2.3.4.5 */
    const char *last = strrchr(buf, '.');
    last = last ? last + 1 : buf;
    if (strspn(last, "0123456789") == strlen(last) || !valid_name(buf))
        return ret->kind;
    snprintf(ret->name, sizeof ret->name, "%s", buf);
    ret->kind = AL_HOST_NAME;
    return ret->kind;
}

bool al_name_is_local(const char *n) {
    size_t l = strlen(n);
    return strcmp(n, "localhost") == 0 || (l > 10 && strcmp(n + l - 10, ".localhost") == 0);
}

bool al_name_allowed(const char *n, const char *const *list, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(n, list[i]) == 0)
            return true;
    return false;
}
