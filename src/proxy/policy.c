#include "policy.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const mode_names[_AL_NET_MODE_MAX] = { "offline", "packages", "hosts", "internet" };

const char *al_net_mode_name(al_net_mode m) { return m < _AL_NET_MODE_MAX ? mode_names[m] : "offline"; }

/* Add a comma-separated list of names to LIST; every entry must be a plain
 * DNS name: a literal or a wildcard would make the list mean more than it says. */
static int add_names(const char *csv, char (*list)[AL_NET_NAME_MAX], size_t *count, const char *what,
                     al_error *err) {
    const char *p = csv;
    while (*p) {
        size_t k = strcspn(p, ",");
        if (k == 0 || k >= AL_NET_NAME_MAX)
            return al_err(err, "network", EINVAL, "%s: an empty or overlong host name", what);
        char name[AL_NET_NAME_MAX];
        memcpy(name, p, k);
        name[k] = '\0';
        al_host h;
        al_host_kind kind = al_host_parse(name, &h);
        if (strchr(name, '*'))
            return al_err(err, "network", EINVAL, "%s: \"%s\": wildcards are not allowed, list each host", what, name);
        if (kind == AL_HOST_IPV4 || kind == AL_HOST_IPV6)
            return al_err(err, "network", EINVAL, "%s: \"%s\" is an IP address; list host names", what, name);
        if (kind != AL_HOST_NAME)
            return al_err(err, "network", EINVAL, "%s: \"%s\" is not a valid host name", what, name);
        if (al_name_is_local(h.name))
            return al_err(err, "network", EINVAL, "%s: \"%s\" names this machine", what, name);
        bool dup = false;
        for (size_t i = 0; i < *count; i++)
            dup |= strcmp(list[i], h.name) == 0;
        if (!dup) {
            if (*count == AL_NET_MAX_HOSTS)
                return al_err(err, "network", E2BIG, "%s: more than %d hosts", what, AL_NET_MAX_HOSTS);
            snprintf(list[(*count)++], AL_NET_NAME_MAX, "%s", h.name);
        }
        p += k;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* One CIDR (a.b.c.d[/n] or v6[/n]) of WHAT's HOST into *RET; host bits
 * beyond the prefix are cleared. */
static int parse_range(const char *text, size_t len, const char *what, const char *host, al_net_range *ret,
                       al_error *err) {
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return al_err(err, "network", EINVAL, "%s: %s: an empty or overlong address range", what, host);
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *slash = strchr(buf, '/');
    long bits = -1;
    if (slash) {
        char *end;
        *slash = '\0';
        bits = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || bits < 0)
            bits = 999;
    }
    memset(ret, 0, sizeof *ret);
    if (inet_pton(AF_INET, buf, ret->addr) == 1)
        ret->family = AF_INET;
    else if (inet_pton(AF_INET6, buf, ret->addr) == 1)
        ret->family = AF_INET6;
    else
        return al_err(err, "network", EINVAL, "%s: %s=%.*s: not an address range (a.b.c.d/n or an IPv6 one)", what,
                      host, (int)len, text);
    unsigned max = ret->family == AF_INET ? 32 : 128;
    if (bits < 0)
        bits = max;
    if ((unsigned long)bits > max)
        return al_err(err, "network", EINVAL, "%s: %s=%.*s: a prefix of 0 to %u bits", what, host, (int)len, text, max);
    ret->bits = (unsigned)bits;
    for (unsigned i = ret->bits; i < max; i++)
        ret->addr[i / 8] &= (unsigned char)~(0x80u >> (i % 8));
    return 0;
}

int al_net_registries_parse(al_net_policy *p, const char *registries, const char *what, al_error *err) {
    p->n_packages = 0;
    memset(p->n_ranges, 0, sizeof p->n_ranges);
    for (const char *s = registries; *s;) {
        size_t k = strcspn(s, ",");
        const char *e = s + k;
        /* spaces around an entry, as "a.example, b.example" is written */
        while (s < e && *s == ' ')
            s++;
        while (e > s && e[-1] == ' ')
            e--;
        const char *eq = memchr(s, '=', (size_t)(e - s));
        size_t hl = (size_t)((eq ? eq : e) - s);
        char name[AL_NET_NAME_MAX];
        if (hl == 0 || hl >= sizeof name)
            return al_err(err, "network", EINVAL, "%s: an empty or overlong host name", what);
        memcpy(name, s, hl);
        name[hl] = '\0';
        size_t before = p->n_packages;
        int r = add_names(name, p->packages, &p->n_packages, what, err);
        if (r < 0)
            return r;
        if (p->n_packages == before)
            return al_err(err, "network", EINVAL, "%s: %s is listed twice", what, name);
        size_t at = before;
        for (const char *c = eq ? eq + 1 : NULL; c && c <= e;) {
            size_t cl = (size_t)((memchr(c, '+', (size_t)(e - c)) ? (const char *)memchr(c, '+', (size_t)(e - c)) : e) - c);
            if (p->n_ranges[at] == AL_NET_MAX_RANGES)
                return al_err(err, "network", E2BIG, "%s: %s: more than %d address ranges", what, name,
                              AL_NET_MAX_RANGES);
            if ((r = parse_range(c, cl, what, name, &p->ranges[at][p->n_ranges[at]], err)) < 0)
                return r;
            p->n_ranges[at]++;
            c += cl + 1;
        }
        s += k;
        if (*s == ',')
            s++;
    }
    return 0;
}

int al_net_policy_env(al_net_policy *p, al_error *err) {
    const char *pk = getenv("AIRLOCK_PACKAGE_HOSTS");
    int r = al_net_registries_parse(p, pk && *pk ? pk : AL_NET_DEFAULT_PACKAGES, "AIRLOCK_PACKAGE_HOSTS", err);
    if (r < 0)
        return r;
    const char *ports = getenv("AIRLOCK_PROXY_PORTS");
    p->n_ports = 0;
    if (!ports || !*ports) {
        p->ports[p->n_ports++] = 80;
        p->ports[p->n_ports++] = 443;
    } else {
        for (const char *s = ports; *s;) {
            char *end;
            unsigned long v = strtoul(s, &end, 10);
            if (end == s || v == 0 || v > 65535 || (*end && *end != ',') || p->n_ports == AL_NET_MAX_PORTS)
                return al_err(err, "network", EINVAL, "AIRLOCK_PROXY_PORTS: \"%s\" is not a list of ports", ports);
            p->ports[p->n_ports++] = (uint16_t)v;
            s = *end ? end + 1 : end;
        }
    }
    const char *dns = getenv("AIRLOCK_DNS");
    p->has_resolver = false;
    if (dns && *dns) {
        char host[64];
        unsigned port = 53;
        const char *colon = strchr(dns, ':');
        size_t hl = colon ? (size_t)(colon - dns) : strlen(dns);
        if (hl >= sizeof host)
            return al_err(err, "network", EINVAL, "AIRLOCK_DNS: \"%s\" is not IPv4[:port]", dns);
        memcpy(host, dns, hl);
        host[hl] = '\0';
        char *end = NULL;
        if (colon)
            port = (unsigned)strtoul(colon + 1, &end, 10);
        memset(&p->resolver, 0, sizeof p->resolver);
        p->resolver.sin_family = AF_INET;
        p->resolver.sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &p->resolver.sin_addr) != 1 || port == 0 || port > 65535 || (end && *end))
            return al_err(err, "network", EINVAL, "AIRLOCK_DNS: \"%s\" is not IPv4[:port]", dns);
        p->has_resolver = true;
    }
    static const struct {
        const char *name;
        uint64_t min, max;
        int kind; /* 0 count, 1 size, 2 seconds */
    } lims[] = {
        { "AIRLOCK_PROXY_MAX_CONNS", 1, 256, 0 }, { "AIRLOCK_PROXY_MAX_TOTAL", 1, 1000000, 0 },
        { "AIRLOCK_PROXY_MAX_BYTES", 1, 1ULL << 40, 1 }, { "AIRLOCK_PROXY_IDLE_S", 1, 3600, 2 },
        { "AIRLOCK_PROXY_CONN_S", 1, 24 * 3600, 2 },
    };
    for (size_t i = 0; i < sizeof lims / sizeof lims[0]; i++) {
        const char *v = getenv(lims[i].name);
        uint64_t x;
        if (!v || !*v)
            continue;
        if ((lims[i].kind == 1 ? al_parse_size(v, &x) : al_parse_u64(v, &x)) < 0 || x < lims[i].min || x > lims[i].max)
            return al_err(err, "network", EINVAL, "%s: \"%s\" is not a number from %llu to %llu", lims[i].name, v,
                          (unsigned long long)lims[i].min, (unsigned long long)lims[i].max);
        switch (i) {
        case 0: p->max_conns = (uint32_t)x; break;
        case 1: p->max_conns_total = (uint32_t)x; break;
        case 2: p->max_bytes = x; break;
        case 3: p->idle_ms = (uint32_t)x * 1000; break;
        default: p->conn_ms = (uint32_t)x * 1000; break;
        }
    }
    p->has_test_public = false;
#ifdef AIRLOCK_TEST_HOOKS
    const char *tp = getenv("AIRLOCK_TEST_PUBLIC_NET");
    if (tp && *tp) {
        char net[32];
        unsigned bits = 32;
        struct in_addr a;
        if (sscanf(tp, "%31[0-9.]/%u", net, &bits) < 1 || bits > 32 || inet_pton(AF_INET, net, &a) != 1)
            return al_err(err, "network", EINVAL, "AIRLOCK_TEST_PUBLIC_NET: \"%s\" is not a.b.c.d/n", tp);
        p->test_mask = bits ? ~0u << (32 - bits) : 0;
        p->test_net = ntohl(a.s_addr) & p->test_mask;
        p->has_test_public = true;
    }
#endif
    return 0;
}

int al_net_policy_parse(const char *spec, al_net_policy *p, al_error *err) {
    memset(p, 0, sizeof *p);
    p->max_conns = 32;
    p->max_conns_total = 1024;
    p->max_bytes = 1ULL << 30;
    p->idle_ms = 60 * 1000;
    p->conn_ms = 10 * 60 * 1000;
    int r = al_net_policy_env(p, err);
    if (r < 0)
        return r;
    if (!spec || strcmp(spec, "offline") == 0) {
        p->mode = AL_NET_OFFLINE;
    } else if (strcmp(spec, "packages") == 0 || strncmp(spec, "packages:", 9) == 0) {
        p->mode = AL_NET_PACKAGES;
        p->sni_check = true;
        /* the registries the policy names itself (an install box's, from
         * the service's package_registries), instead of the environment's */
        if (spec[8] == ':') {
            if (!spec[9])
                return al_err(err, "network", EINVAL, "packages: name at least one registry (packages:HOST[=CIDR],...)");
            if ((r = al_net_registries_parse(p, spec + 9, "packages", err)) < 0)
                return r;
            p->packages_listed = true;
        }
    } else if (strcmp(spec, "internet") == 0) {
        p->mode = AL_NET_INTERNET;
    } else if (strncmp(spec, "hosts:", 6) == 0 || strncmp(spec, "hosts+packages:", 15) == 0) {
        p->mode = AL_NET_HOSTS;
        p->sni_check = true;
        p->with_packages = spec[5] == '+';
        const char *list = spec + (p->with_packages ? 15 : 6);
        if (!*list)
            return al_err(err, "network", EINVAL, "hosts: name at least one host (hosts:a.example,b.example)");
        if ((r = add_names(list, p->hosts, &p->n_hosts, "hosts", err)) < 0)
            return r;
    } else {
        return al_err(err, "network", EINVAL,
                      "unknown network policy \"%.64s\" (offline, packages, packages:REGISTRY[=CIDR],..., internet, "
                      "hosts:a.example,b.example, hosts+packages:a.example)", spec);
    }
    /* SNI checking is on for the name-based modes and off for internet;
     * AIRLOCK_PROXY_SNI=on|off says otherwise for every mode */
    const char *sni = getenv("AIRLOCK_PROXY_SNI");
    if (sni && *sni) {
        if (strcmp(sni, "on") != 0 && strcmp(sni, "off") != 0)
            return al_err(err, "network", EINVAL, "AIRLOCK_PROXY_SNI: \"%s\" is not on or off", sni);
        p->sni_check = strcmp(sni, "on") == 0;
    }
    return 0;
}

static size_t format_range(const al_net_range *r, char *buf, size_t n) {
    char a[INET6_ADDRSTRLEN];
    inet_ntop(r->family, r->addr, a, sizeof a);
    int k = snprintf(buf, n, "%s/%u", a, r->bits);
    return k < 0 ? 0 : (size_t)k;
}

void al_net_policy_format(const al_net_policy *p, char *buf, size_t n) {
    if (p->mode == AL_NET_PACKAGES && p->packages_listed) {
        /* the registries, as they were given (normalised) */
        size_t off = (size_t)snprintf(buf, n, "packages:");
        for (size_t i = 0; i < p->n_packages && off < n; i++) {
            off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? "," : "", p->packages[i]);
            for (size_t k = 0; k < p->n_ranges[i] && off < n; k++) {
                off += (size_t)snprintf(buf + off, n - off, "%s", k ? "+" : "=");
                if (off < n)
                    off += format_range(&p->ranges[i][k], buf + off, n - off);
            }
        }
        return;
    }
    if (p->mode != AL_NET_HOSTS) {
        snprintf(buf, n, "%s", al_net_mode_name(p->mode));
        return;
    }
    size_t off = (size_t)snprintf(buf, n, "%s:", p->with_packages ? "hosts+packages" : "hosts");
    for (size_t i = 0; i < p->n_hosts && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? "," : "", p->hosts[i]);
}

static bool in_list(const char *name, const char (*list)[AL_NET_NAME_MAX], size_t count) {
    for (size_t i = 0; i < count; i++)
        if (strcmp(name, list[i]) == 0)
            return true;
    return false;
}

const al_net_range *al_net_registry_ranges(const al_net_policy *p, const char *name, size_t *ret_n) {
    *ret_n = 0;
    if (!name || !(p->mode == AL_NET_PACKAGES || (p->mode == AL_NET_HOSTS && p->with_packages)))
        return NULL;
    /* a name on the hosts list is a host's, held to the public rule */
    if (p->mode == AL_NET_HOSTS && in_list(name, p->hosts, p->n_hosts))
        return NULL;
    for (size_t i = 0; i < p->n_packages; i++)
        if (strcmp(name, p->packages[i]) == 0) {
            *ret_n = p->n_ranges[i];
            return p->n_ranges[i] ? p->ranges[i] : NULL;
        }
    return NULL;
}

static bool in_range(const al_net_range *r, int family, const unsigned char *addr) {
    if (r->family != family)
        return false;
    unsigned full = r->bits / 8, rest = r->bits % 8;
    if (memcmp(r->addr, addr, full) != 0)
        return false;
    if (!rest)
        return true;
    unsigned char mask = (unsigned char)(0xffu << (8 - rest));
    return (addr[full] & mask) == r->addr[full];
}

/* Socket addresses are read by family into their own types: reading a
 * sockaddr_in through a struct sockaddr lvalue is an aliasing violation
 * the optimiser may act on. */
void al_net_policy_add_local(al_net_policy *p, const struct sockaddr *sa) {
    sa_family_t fam;
    memcpy(&fam, (const char *)sa + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam == AF_INET && p->n_local4 < sizeof p->local4 / sizeof p->local4[0]) {
        struct sockaddr_in sin;
        memcpy(&sin, sa, sizeof sin);
        p->local4[p->n_local4++] = sin.sin_addr;
    } else if (fam == AF_INET6 && p->n_local6 < sizeof p->local6 / sizeof p->local6[0]) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, sa, sizeof sin6);
        p->local6[p->n_local6++] = sin6.sin6_addr;
    }
}

static bool local4(const al_net_policy *p, struct in_addr a) {
    for (size_t i = 0; i < p->n_local4; i++)
        if (p->local4[i].s_addr == a.s_addr)
            return true;
    return false;
}

static bool local6(const al_net_policy *p, const struct in6_addr *a) {
    for (size_t i = 0; i < p->n_local6; i++)
        if (memcmp(&p->local6[i], a, sizeof *a) == 0)
            return true;
    return false;
}

static bool test_public4(const al_net_policy *p, struct in_addr a) {
    return p->has_test_public && (ntohl(a.s_addr) & p->test_mask) == p->test_net;
}

/* The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4),
 * or false. */
static bool embedded_v4(const struct in6_addr *a, struct in_addr *ret) {
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    static const uint8_t zero[12] = { 0 };
    static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
    if (memcmp(a->s6_addr, mapped, 12) == 0 || memcmp(a->s6_addr, zero, 12) == 0 || memcmp(a->s6_addr, nat64, 12) == 0) {
        memcpy(&ret->s_addr, &a->s6_addr[12], 4);
        return true;
    }
    if (a->s6_addr[0] == 0x20 && a->s6_addr[1] == 0x02) {
        memcpy(&ret->s_addr, &a->s6_addr[2], 4);
        return true;
    }
    return false;
}

const char *al_net_addr4_denied(const al_net_policy *p, struct in_addr a) {
    if (local4(p, a))
        return "an address of this host or its gateway";
    return test_public4(p, a) ? NULL : al_addr4_private(a);
}

const char *al_net_addr6_denied(const al_net_policy *p, const struct in6_addr *a) {
    if (local6(p, a))
        return "an address of this host or its gateway";
    /* an IPv6 socket reaches a mapped or compatible address over IPv4 on
     * this host: such a form is never a destination of its own */
    static const uint8_t zero10[10] = { 0 };
    if (memcmp(a->s6_addr, zero10, 10) == 0 &&
        ((a->s6_addr[10] == 0xff && a->s6_addr[11] == 0xff) || (a->s6_addr[10] == 0 && a->s6_addr[11] == 0)))
        return "an IPv4 address written as IPv6 (::ffff:a.b.c.d or ::a.b.c.d): use the IPv4 address";
    struct in_addr v4;
    if (embedded_v4(a, &v4) && local4(p, v4))
        return "an address of this host or its gateway, inside an IPv6 address";
    return al_addr6_private(a);
}

const char *al_net_addr_denied(const al_net_policy *p, const struct sockaddr *sa) {
    sa_family_t fam;
    memcpy(&fam, (const char *)sa + offsetof(struct sockaddr, sa_family), sizeof fam);
    if (fam == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, sa, sizeof sin);
        return al_net_addr4_denied(p, sin.sin_addr);
    }
    if (fam == AF_INET6) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, sa, sizeof sin6);
        return al_net_addr6_denied(p, &sin6.sin6_addr);
    }
    return "not an internet address";
}

const char *al_net_dest_denied(const al_net_policy *p, const char *name, const struct sockaddr *sa) {
    size_t nr = 0;
    const al_net_range *r = al_net_registry_ranges(p, name, &nr);
    if (!r)
        return al_net_addr_denied(p, sa);
    sa_family_t fam;
    memcpy(&fam, (const char *)sa + offsetof(struct sockaddr, sa_family), sizeof fam);
    unsigned char addr[16];
    if (fam == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, sa, sizeof sin);
        memcpy(addr, &sin.sin_addr, 4);
    } else if (fam == AF_INET6) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, sa, sizeof sin6);
        memcpy(addr, &sin6.sin6_addr, 16);
    } else {
        return "not an internet address";
    }
    for (size_t i = 0; i < nr; i++)
        if (in_range(&r[i], fam, addr))
            return NULL;
    return "outside the address ranges package_registries gives this registry";
}

bool al_net_plain_http_ok(const al_net_policy *p, const al_host *h, char *why, size_t n) {
    if (p->mode != AL_NET_PACKAGES && !(p->mode == AL_NET_HOSTS && p->with_packages))
        return true;
    if (h->kind != AL_HOST_NAME)
        return true;
    if (p->mode == AL_NET_HOSTS && in_list(h->name, p->hosts, p->n_hosts))
        return true;
    size_t nr = 0;
    if (al_net_registry_ranges(p, h->name, &nr))
        return true;
    snprintf(why, n, "network policy \"%s\": %s is a public package registry: reach it over https (plain http "
             "only to a registry whose address ranges package_registries gives)", al_net_mode_name(p->mode), h->name);
    return false;
}

bool al_net_decide(const al_net_policy *p, const al_host *h, uint16_t port, char *why, size_t n) {
    const char *mode = al_net_mode_name(p->mode);
    bool port_ok = false;
    for (size_t i = 0; i < p->n_ports; i++)
        port_ok |= p->ports[i] == port;
    if (p->mode == AL_NET_OFFLINE) {
        snprintf(why, n, "network policy \"offline\": no destination is reachable");
        return false;
    }
    if (h->kind == AL_HOST_INVALID) {
        snprintf(why, n, "network policy \"%s\": the host is not a valid name or address", mode);
        return false;
    }
    if (!port_ok) {
        char list[96] = "";
        for (size_t i = 0, off = 0; i < p->n_ports && off < sizeof list; i++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%u", i ? ", " : "", p->ports[i]);
        snprintf(why, n, "network policy \"%s\": port %u is not allowed (ports %s)", mode, port, list);
        return false;
    }
    if (h->kind == AL_HOST_NAME && al_name_is_local(h->name)) {
        snprintf(why, n, "network policy \"%s\": %s always means this machine", mode, h->name);
        return false;
    }
    if (h->kind != AL_HOST_NAME && p->mode != AL_NET_INTERNET) {
        snprintf(why, n, "network policy \"%s\": IP addresses are refused, name the host", mode);
        return false;
    }
    switch (p->mode) {
    case AL_NET_PACKAGES:
        if (in_list(h->name, p->packages, p->n_packages))
            return true;
        snprintf(why, n, "network policy \"packages\": %s is not a package registry", h->name);
        return false;
    case AL_NET_HOSTS:
        if (in_list(h->name, p->hosts, p->n_hosts) || (p->with_packages && in_list(h->name, p->packages, p->n_packages)))
            return true;
        snprintf(why, n, "network policy \"hosts\": %s is not on the allow-list", h->name);
        return false;
    case AL_NET_INTERNET:
        if (h->kind == AL_HOST_NAME)
            return true;
        {
            const char *w = h->kind == AL_HOST_IPV4 ? al_net_addr4_denied(p, h->v4) : al_net_addr6_denied(p, &h->v6);
            if (!w)
                return true;
            snprintf(why, n, "network policy \"internet\": the address is not public: %s", w);
            return false;
        }
    default:
        snprintf(why, n, "network policy \"%s\": denied", mode);
        return false;
    }
}

al_net_badge al_net_policy_badge(const al_net_policy *p) {
    switch (p->mode) {
    case AL_NET_OFFLINE:
        return (al_net_badge){ "boundary", "offline: a new network namespace holding only lo; no DNS" };
    case AL_NET_PACKAGES:
    case AL_NET_HOSTS:
        if (p->sni_check)
            return (al_net_badge){ "boundary-conditional",
                                   "the box holds only lo and a listener served by the egress proxy, which allows the "
                                   "listed names (checked before any DNS lookup, TLS SNI checked) and connects only to "
                                   "the public address it resolved; condition: an allowed host does not serve other "
                                   "sites by the HTTP Host header (domain fronting on a shared CDN)" };
        return (al_net_badge){ "boundary-conditional",
                               "the box holds only lo and a listener served by the egress proxy, which allows the "
                               "listed names (checked before any DNS lookup; TLS SNI not checked: AIRLOCK_PROXY_SNI=off) "
                               "and connects only to the public address it resolved; condition: an allowed host does "
                               "not serve other sites by TLS SNI or the HTTP Host header (domain fronting)" };
    case AL_NET_INTERNET:
        return (al_net_badge){ "boundary-conditional",
                               "the box holds only lo and a listener served by the egress proxy, which connects only "
                               "to the public address it resolved (private, loopback, link-local, CGNAT, ULA, "
                               "multicast, reserved, metadata and this host's addresses refused in every spelling); "
                               "condition: this host routes no internal network through public addresses" };
    default:
        return (al_net_badge){ "not-enforced", "unknown mode" };
    }
}

al_net_badge al_net_mode_badge(al_net_mode m) {
    al_net_policy p = { .mode = m, .sni_check = m == AL_NET_HOSTS || m == AL_NET_PACKAGES };
    const char *sni = getenv("AIRLOCK_PROXY_SNI");
    if (sni && (strcmp(sni, "on") == 0 || strcmp(sni, "off") == 0))
        p.sni_check = strcmp(sni, "on") == 0;
    return al_net_policy_badge(&p);
}
