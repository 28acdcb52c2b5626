/*
 * The egress proxy's deny set: which destination addresses a box may never
 * reach, in any spelling. Pure logic, no I/O (issue 4 builds the proxy on
 * it). An IPv6 address that embeds an IPv4 one (mapped, compatible, NAT64,
 * 6to4) is judged by the IPv4 address it reaches.
 */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum al_host_kind {
    AL_HOST_NAME,                 /* a DNS name (normalised) */
    AL_HOST_IPV4,                 /* an IPv4 literal, in any spelling inet_aton takes */
    AL_HOST_IPV6,                 /* an IPv6 literal, brackets and zone removed */
    AL_HOST_INVALID,
} al_host_kind;

typedef struct al_host {
    al_host_kind kind;
    char name[256];               /* NAME: lower case, no trailing dot */
    struct in_addr v4;
    struct in6_addr v6;
} al_host;

/* Classify the host part of an authority ("Example.COM.", "0xA9FEA9FE",
 * "127.1", "[::ffff:169.254.169.254]", "[fe80::1%eth0]"). Names are checked:
 * labels of 1-63 of [a-z0-9-_], not starting or ending with '-', 253 in all. */
al_host_kind al_host_parse(const char *in, al_host *ret);

/* Why an address is not a public destination, or NULL when it is one. */
const char *al_addr4_private(struct in_addr a);
const char *al_addr6_private(const struct in6_addr *a);

/* Names that always mean this machine: localhost and *.localhost. */
bool al_name_is_local(const char *normalised);

/* Exact-hostname allow-list match (whole name, case-insensitive, trailing
 * dot ignored; no wildcards). LIST is N normalised names. */
bool al_name_allowed(const char *normalised, const char *const *list, size_t n);
