/* The proxy's own DNS lookups (libresolv, one query per family, per thread
 * state), so the resolver can be named (AIRLOCK_DNS) and no other source
 * (/etc/hosts, nss modules) decides where a box's traffic goes. */
#pragma once

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define AL_RESOLVE_MAX 16

typedef struct al_resolved {
    struct sockaddr_storage addr[AL_RESOLVE_MAX];
    size_t n;
} al_resolved;

/* A and AAAA records of NAME (port PORT set in each). RESOLVER: the server
 * to ask, or NULL for /etc/resolv.conf's. 0 with at least one address,
 * -ENOENT when the name has none, another negative errno on failure. */
int al_resolve(const char *name, uint16_t port, const struct sockaddr_in *resolver, al_resolved *ret);

/* Parse ANS (LEN bytes, a DNS answer to a query of TYPE, ns_t_a or
 * ns_t_aaaa, as a nameserver sent it) and append its addresses of that
 * type to RET, port PORT set in each, up to AL_RESOLVE_MAX in all (the rest
 * are dropped); other records (a CNAME chain) are skipped. 0, or -EBADMSG
 * when the message or one of its answer records is malformed: the
 * addresses of the records before it stay in RET, as al_resolve uses them.
 * Pure (no I/O), so it can be fuzzed. */
int al_dns_answer_parse(const unsigned char *ans, size_t len, int type, uint16_t port, al_resolved *ret);
