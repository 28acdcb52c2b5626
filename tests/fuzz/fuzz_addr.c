/*
 * Fuzz target for the spellings of a destination (src/proxy/addr.c) and the
 * network policy a tenant writes (src/proxy/policy.c): "hosts:a.example,..."
 * in a run's request or a workspace's settings.
 *
 * The input is one string (up to its first NUL). What must hold:
 * - a host classified as a NAME is never something inet_aton or inet_pton
 *   would read as an address (its trailing dot dropped); it is lower
 *   case, has no trailing dot, and parses again to itself;
 * - an IPv4 host is what inet_aton reads from the spelling;
 * - "hosts:<input>" is either refused with a reason, or every name it lists
 *   is a NAME (never a literal, a wildcard or localhost), and the canonical
 *   spelling of the policy parses back to the same canonical spelling;
 * - under that policy, only a listed name may pass al_net_decide;
 * - the deny set holds in every spelling: an IPv6 address that carries an
 *   IPv4 one (mapped, compatible, NAT64, 6to4) is denied whenever that IPv4
 *   address is; under "internet" a literal passes al_net_decide exactly
 *   when al_net_addr_denied lets it be connected to; this host's own
 *   addresses are never a destination, public or not; and no address is
 *   ever allowed under the other modes.
 */
#include <arpa/inet.h>
#include <string.h>

#include "fuzz.h"
#include "proxy/addr.h"
#include "proxy/policy.h"
#include "util/util.h"

static long n_name, n_v4, n_v6, n_policy, n_refused, n_public, n_private;

static al_net_policy *internet(void) {
    static al_net_policy p;
    static int init;
    al_error err;
    if (!init) {
        FUZZ_CHECK(al_net_policy_parse("internet", &p, &err) == 0, "internet: %s", err.msg);
        /* this host: one public address of its own, which is never a destination */
        struct sockaddr_in self = { .sin_family = AF_INET };
        inet_pton(AF_INET, "93.184.216.34", &self.sin_addr);
        al_net_policy_add_local(&p, (struct sockaddr *)&self);
        init = 1;
    }
    return &p;
}

/* The embedded forms of A (network order) that must be judged by A. */
static void check_embedded(struct in_addr a, bool denied) {
    static const uint8_t prefixes[][12] = {
        { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff }, /* mapped */
        { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 }, /* NAT64 */
    };
    struct in6_addr v6;
    for (size_t i = 0; i < ELEMENTSOF(prefixes); i++) {
        memcpy(v6.s6_addr, prefixes[i], 12);
        memcpy(v6.s6_addr + 12, &a.s_addr, 4);
        if (denied)
            FUZZ_CHECK(al_net_addr6_denied(internet(), &v6), "an embedded form %zu of a denied IPv4 address passes", i);
    }
    memset(&v6, 0, sizeof v6); /* 6to4: 2002:AABB:CCDD:: */
    v6.s6_addr[0] = 0x20, v6.s6_addr[1] = 0x02;
    memcpy(v6.s6_addr + 2, &a.s_addr, 4);
    if (denied)
        FUZZ_CHECK(al_net_addr6_denied(internet(), &v6), "the 6to4 form of a denied IPv4 address passes");
    memset(&v6, 0, sizeof v6); /* compatible: ::A, deprecated, always denied */
    memcpy(v6.s6_addr + 12, &a.s_addr, 4);
    FUZZ_CHECK(al_net_addr6_denied(internet(), &v6), "an IPv4-compatible address passes");
}

static void check_literal(const al_host *h) {
    char why[384];
    bool pass = al_net_decide(internet(), h, 443, why, sizeof why);
    const char *denied;
    if (h->kind == AL_HOST_IPV4) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = h->v4, .sin_port = htons(443) };
        denied = al_net_addr_denied(internet(), (struct sockaddr *)&sa);
        FUZZ_CHECK(!al_addr4_private(h->v4) || denied, "a private IPv4 address is not denied");
        check_embedded(h->v4, denied != NULL);
        if (ntohl(h->v4.s_addr) == 0x5db8d822)
            FUZZ_CHECK(denied, "this host's own address passes");
    } else {
        struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = h->v6, .sin6_port = htons(443) };
        denied = al_net_addr_denied(internet(), (struct sockaddr *)&sa);
        FUZZ_CHECK(!al_addr6_private(&h->v6) || denied, "a private IPv6 address is not denied");
    }
    FUZZ_CHECK(pass == (denied == NULL), "decide (%d) and the address check (%s) disagree", pass, denied ? denied : "-");
    n_public += pass;
    n_private += !pass;
    static al_net_policy hosts;
    static int init;
    al_error err;
    if (!init && al_net_policy_parse("hosts+packages:a.example", &hosts, &err) == 0)
        init = 1;
    FUZZ_CHECK(init && !al_net_decide(&hosts, h, 443, why, sizeof why), "a literal passes a hosts policy");
}

static void check_name(const char *name) {
    struct in_addr a4;
    struct in6_addr a6;
    FUZZ_CHECK(name[0] && strlen(name) <= 253, "empty or long name");
    FUZZ_CHECK(name[strlen(name) - 1] != '.', "name %s keeps its trailing dot", name);
    for (const char *c = name; *c; c++)
        FUZZ_CHECK(!(*c >= 'A' && *c <= 'Z'), "name %s is not lower case", name);
    /* (glibc's inet_aton reads no spelling that ends in a dot, so the name
     * without its dot is what counts: al_host_parse drops it) */
    FUZZ_CHECK(inet_aton(name, &a4) == 0, "name %s is an IPv4 spelling", name);
    FUZZ_CHECK(inet_pton(AF_INET6, name, &a6) == 0, "name %s is an IPv6 spelling", name);
    al_host again;
    FUZZ_CHECK(al_host_parse(name, &again) == AL_HOST_NAME && strcmp(again.name, name) == 0,
               "name %s does not parse to itself", name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096)
        return 0;
    char *s = fuzz_copy(data, size, 1);
    al_host h;
    al_host_kind k = al_host_parse(s, &h);
    FUZZ_CHECK(k == h.kind && k <= AL_HOST_INVALID, "kind");
    if (k == AL_HOST_NAME) {
        n_name++;
        check_name(h.name);
    } else if (k == AL_HOST_IPV4) {
        n_v4++;
        char plain[300];
        snprintf(plain, sizeof plain, "%s", s);
        size_t l = strlen(plain);
        if (l > 1 && plain[l - 1] == '.')
            plain[l - 1] = '\0';
        struct in_addr a;
        FUZZ_CHECK(inet_aton(plain, &a) == 1 && a.s_addr == h.v4.s_addr, "IPv4 %s is not inet_aton's", s);
        check_literal(&h);
    } else if (k == AL_HOST_IPV6) {
        n_v6++;
        check_literal(&h);
    }

    /* the same text as a tenant's allow-list */
    static al_net_policy pol, again;
    char spec[4200], canon[AL_NET_MAX_HOSTS * AL_NET_NAME_MAX + 64], canon2[sizeof canon];
    snprintf(spec, sizeof spec, "hosts:%s", s);
    al_error err = { 0 };
    if (al_net_policy_parse(spec, &pol, &err) == 0) {
        n_policy++;
        FUZZ_CHECK(pol.mode == AL_NET_HOSTS && pol.n_hosts >= 1 && pol.n_hosts <= AL_NET_MAX_HOSTS, "hosts mode");
        for (size_t i = 0; i < pol.n_hosts; i++) {
            FUZZ_CHECK(!strchr(pol.hosts[i], '*'), "wildcard %s listed", pol.hosts[i]);
            FUZZ_CHECK(!al_name_is_local(pol.hosts[i]), "local name %s listed", pol.hosts[i]);
            check_name(pol.hosts[i]);
        }
        al_net_badge b = al_net_policy_badge(&pol);
        FUZZ_CHECK(strcmp(b.level, "boundary-conditional") == 0 && b.detail[0], "a hosts policy's badge: %s", b.level);
        al_net_policy_format(&pol, canon, sizeof canon);
        al_error e2 = { 0 };
        FUZZ_CHECK(al_net_policy_parse(canon, &again, &e2) == 0, "canonical %s does not parse: %s", canon, e2.msg);
        al_net_policy_format(&again, canon2, sizeof canon2);
        FUZZ_CHECK(strcmp(canon, canon2) == 0, "canonical spelling is not stable: %s / %s", canon, canon2);
        /* only what is listed passes, on an allowed port */
        char why[384];
        if (al_net_decide(&pol, &h, 443, why, sizeof why)) {
            FUZZ_CHECK(h.kind == AL_HOST_NAME, "a literal passed a hosts policy");
            bool listed = false;
            for (size_t i = 0; i < pol.n_hosts; i++)
                listed |= strcmp(pol.hosts[i], h.name) == 0;
            for (size_t i = 0; i < pol.n_packages && pol.with_packages; i++)
                listed |= strcmp(pol.packages[i], h.name) == 0;
            FUZZ_CHECK(listed, "%s passed without being listed", h.name);
        }
    } else {
        n_refused++;
        FUZZ_CHECK(err.msg[0], "a refusal without a reason");
    }
    free(s);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-addr: %ld names, %ld IPv4, %ld IPv6; %ld policies accepted, %ld refused\n", n_name, n_v4, n_v6,
           n_policy, n_refused);
    printf("fuzz-addr: literals under internet: %ld may be connected to, %ld denied\n", n_public, n_private);
    return n_name && n_v4 && n_v6 && n_policy && n_refused && n_public && n_private ? 0 : 1;
}
