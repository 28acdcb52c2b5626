/*
 * Network policy: which destinations a box may reach through the egress
 * proxy. Pure logic, no I/O: the proxy (proxy.c) asks it about each
 * request's authority before any DNS lookup, and again about each address
 * the name resolved to.
 */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "../util/util.h"
#include "addr.h"

typedef enum al_net_mode {
    AL_NET_OFFLINE,               /* nothing: only lo, no proxy at all */
    AL_NET_PACKAGES,              /* the package registries only */
    AL_NET_HOSTS,                 /* an exact-hostname allow-list */
    AL_NET_INTERNET,              /* any public address */
    _AL_NET_MODE_MAX,
} al_net_mode;

#define AL_NET_MAX_HOSTS 64
#define AL_NET_MAX_PORTS 16
#define AL_NET_NAME_MAX 254

/* The registries `packages` allows, unless AIRLOCK_PACKAGE_HOSTS (or the
 * policy itself, "packages:LIST") says others */
#define AL_NET_DEFAULT_PACKAGES "pypi.org,files.pythonhosted.org,registry.npmjs.org"

/* A registry's address ranges (issue 38's package_registries: HOST=CIDR+CIDR):
 * a registry with ranges may be reached only at addresses within them,
 * private ones included, on purpose (an index inside the platform's
 * network); one without is held to the public-address rule. */
#define AL_NET_MAX_RANGES 8
typedef struct al_net_range {
    int family;                   /* AF_INET, AF_INET6 */
    unsigned bits;
    unsigned char addr[16];       /* network order; 4 bytes for AF_INET */
} al_net_range;

typedef struct al_net_policy {
    al_net_mode mode;
    bool with_packages;           /* hosts mode: the registries as well */
    bool sni_check;               /* CONNECT: the ClientHello's SNI must equal the host */
    size_t n_hosts, n_packages, n_ports;
    char hosts[AL_NET_MAX_HOSTS][AL_NET_NAME_MAX];
    char packages[AL_NET_MAX_HOSTS][AL_NET_NAME_MAX];
    uint16_t ports[AL_NET_MAX_PORTS];
    /* the registries' ranges (by PACKAGES' index; 0: none, public only),
     * and whether the registries are the policy's own ("packages:LIST"),
     * not the environment's */
    unsigned char n_ranges[AL_NET_MAX_HOSTS];
    al_net_range ranges[AL_NET_MAX_HOSTS][AL_NET_MAX_RANGES];
    bool packages_listed;
    /* limits, per run */
    uint32_t max_conns;           /* open at once */
    uint32_t max_conns_total;     /* over the run's life */
    uint64_t max_bytes;           /* both ways, all connections */
    uint32_t idle_ms;             /* a connection with no bytes either way */
    uint32_t conn_ms;             /* a connection's whole life */
    /* the resolver the proxy asks (AIRLOCK_DNS), or none: /etc/resolv.conf */
    bool has_resolver;
    struct sockaddr_in resolver;
    /* this host's own addresses (and its gateways): never a destination,
     * even when public, since the proxy runs on the host */
    size_t n_local4, n_local6;
    struct in_addr local4[64];
    struct in6_addr local6[64];
    /* test builds only (-Dtest_hooks=true): one IPv4 range treated as public,
     * so tests can stand up "internet" hosts on addresses of their own */
    bool has_test_public;
    uint32_t test_net, test_mask;
} al_net_policy;

const char *al_net_mode_name(al_net_mode m);

/*
 * Parse a policy: "offline", "packages", "packages:REGISTRIES", "internet",
 * "hosts:a.example,b.example" or "hosts+packages:a.example". REGISTRIES
 * (and AIRLOCK_PACKAGE_HOSTS) is package_registries' form: a comma-separated
 * list of HOST or HOST=CIDR[+CIDR...] (spaces around entries ignored), at
 * most AL_NET_MAX_RANGES ranges a host. Names are normalised (lower case, no
 * trailing dot); IP literals, wildcards and localhost names are refused.
 * Defaults for ports (80, 443), limits, SNI checking (on for hosts and
 * packages) and the registry list come from al_net_policy_env().
 */
int al_net_policy_parse(const char *spec, al_net_policy *ret, al_error *err);

/* Apply the environment's settings: AIRLOCK_PACKAGE_HOSTS, AIRLOCK_PROXY_PORTS,
 * AIRLOCK_DNS (ip[:port]), the limits AIRLOCK_PROXY_MAX_CONNS,
 * AIRLOCK_PROXY_MAX_TOTAL, AIRLOCK_PROXY_MAX_BYTES (a size),
 * AIRLOCK_PROXY_IDLE_S, AIRLOCK_PROXY_CONN_S, and in test builds
 * AIRLOCK_TEST_PUBLIC_NET. */
int al_net_policy_env(al_net_policy *p, al_error *err);

/* Parse REGISTRIES (package_registries' form, above) into P's registries
 * (replacing them). WHAT names the setting in an error. */
int al_net_registries_parse(al_net_policy *p, const char *registries, const char *what, al_error *err);

/* The ranges NAME (normalised) has as a registry P's mode reaches (in
 * packages mode, or hosts+packages where NAME is not on the hosts list),
 * their number in *RET_N; NULL (and 0) when it has none. */
const al_net_range *al_net_registry_ranges(const al_net_policy *p, const char *name, size_t *ret_n);

/* Whether a connection to NAME (normalised; NULL for a literal) at SA may
 * be made: NULL when it may, or why not. A registry with ranges: SA within
 * one of them (the public rule does not apply); else al_net_addr_denied. */
const char *al_net_dest_denied(const al_net_policy *p, const char *name, const struct sockaddr *sa);

/* Whether a plain-HTTP request (not CONNECT) to H may go on: in packages
 * mode (and to a registry in hosts+packages) only to a registry given
 * ranges, whose operator chose its address; a public registry is reached
 * over TLS. True, or false with WHY. */
bool al_net_plain_http_ok(const al_net_policy *p, const al_host *h, char *why, size_t n);

/* Add ADDR (port ignored) to the host's own addresses. */
void al_net_policy_add_local(al_net_policy *p, const struct sockaddr *addr);

/* The policy in its canonical spelling (what a run records). */
void al_net_policy_format(const al_net_policy *p, char *buf, size_t n);

/*
 * The decision on a request's authority, before anything is resolved.
 * Returns true when the proxy may go on to resolve (names) or connect (an
 * allowed literal); false with WHY, a sentence for the agent, otherwise.
 */
bool al_net_decide(const al_net_policy *p, const al_host *h, uint16_t port, char *why, size_t n);

/* Whether a resolved (or literal) address may be connected to: NULL when
 * it may, or why not. */
const char *al_net_addr_denied(const al_net_policy *p, const struct sockaddr *sa);
const char *al_net_addr4_denied(const al_net_policy *p, struct in_addr a);
const char *al_net_addr6_denied(const al_net_policy *p, const struct in6_addr *a);

/* How well this policy is enforced by a native box on this host. */
typedef struct al_net_badge {
    const char *level;            /* boundary, boundary-conditional, applied, unconfirmed, not-enforced */
    const char *detail;
} al_net_badge;
al_net_badge al_net_policy_badge(const al_net_policy *p);
/* The badge of MODE with this environment's settings (doctor, settings). */
al_net_badge al_net_mode_badge(al_net_mode m);
