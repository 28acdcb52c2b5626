/*
 * al_dns_answer_parse on a hostile nameserver's answer: the input is the
 * DNS message as it came off the wire. Each input is parsed as the answer
 * to an A query and to an AAAA query, into a fresh result and into one that
 * already holds addresses (al_resolve appends AAAA to A), and checks:
 *  - the result never holds more than AL_RESOLVE_MAX addresses, and nothing
 *    is written past the ones it counts (al_resolve trusts ret->n alone);
 *  - every address added has the family of the type asked (A -> AF_INET,
 *    AAAA -> AF_INET6), the port asked, zeroes elsewhere, and its address
 *    bytes are in the message (they came from a record, not from nowhere);
 *  - at most as many addresses are added as the header's answer count;
 *  - what was there before is left as it was;
 *  - the same bytes parse to the same result, twice;
 *  - the result is 0 or -EBADMSG; on -EBADMSG what was added (the records
 *    before the malformed one, which al_resolve still uses) obeys all the
 *    above.
 */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <stdbool.h>

#include "fuzz.h"
#include "proxy/resolve.h"

/* what the replayed corpus reached (fuzz_replay_check) */
static struct {
    unsigned a, aaaa, capped, partial_badmsg, badmsg, none;
} seen;

#define SENTINEL 0xa5

static void check_added(const uint8_t *data, size_t size, int type, uint16_t port, const al_resolved *res, size_t from) {
    for (size_t i = from; i < res->n; i++) {
        const struct sockaddr_storage *ss = &res->addr[i];
        const uint8_t *raw = (const uint8_t *)ss;
        if (type == ns_t_a) {
            const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
            FUZZ_CHECK(s->sin_family == AF_INET, "address %zu of an A answer has family %d", i, s->sin_family);
            FUZZ_CHECK(ntohs(s->sin_port) == port, "address %zu: port %u, not %u", i, ntohs(s->sin_port), port);
            FUZZ_CHECK(size >= 4 && memmem(data, size, &s->sin_addr, 4), "address %zu is not in the message", i);
            for (size_t k = sizeof *s; k < sizeof *ss; k++)
                FUZZ_CHECK(raw[k] == 0, "address %zu: byte %zu past the sockaddr_in is %#x", i, k, raw[k]);
        } else {
            const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
            FUZZ_CHECK(s->sin6_family == AF_INET6, "address %zu of an AAAA answer has family %d", i, s->sin6_family);
            FUZZ_CHECK(ntohs(s->sin6_port) == port, "address %zu: port %u, not %u", i, ntohs(s->sin6_port), port);
            FUZZ_CHECK(s->sin6_flowinfo == 0 && s->sin6_scope_id == 0, "address %zu: flowinfo or scope set", i);
            FUZZ_CHECK(size >= 16 && memmem(data, size, &s->sin6_addr, 16), "address %zu is not in the message", i);
            for (size_t k = sizeof *s; k < sizeof *ss; k++)
                FUZZ_CHECK(raw[k] == 0, "address %zu: byte %zu past the sockaddr_in6 is %#x", i, k, raw[k]);
        }
    }
}

/* Parse DATA as the answer to TYPE into a result that holds PRE addresses
 * already (sentinel bytes everywhere else), check it, and return it. */
static int parse_checked(const uint8_t *data, size_t size, int type, uint16_t port, size_t pre, al_resolved *res) {
    memset(res, SENTINEL, sizeof *res);
    for (size_t i = 0; i < pre; i++) {
        struct sockaddr_in *s = (struct sockaddr_in *)&res->addr[i];
        memset(s, 0, sizeof res->addr[i]);
        s->sin_family = AF_INET;
        s->sin_port = htons(1);
        s->sin_addr.s_addr = htonl(0x0a000000u + (uint32_t)i);
    }
    res->n = pre;
    int r = al_dns_answer_parse(data, size, type, port, res);
    FUZZ_CHECK(r == 0 || r == -EBADMSG, "al_dns_answer_parse returned %d", r);
    FUZZ_CHECK(res->n >= pre && res->n <= AL_RESOLVE_MAX, "%zu addresses (%zu before)", res->n, pre);
    /* the header's answer count bounds what a parse may add */
    size_t ancount = size >= 12 ? (size_t)(data[6] << 8 | data[7]) : 0;
    FUZZ_CHECK(res->n - pre <= ancount, "%zu addresses added from %zu answers", res->n - pre, ancount);
    for (size_t i = 0; i < pre; i++) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)&res->addr[i];
        FUZZ_CHECK(s->sin_family == AF_INET && s->sin_port == htons(1) && s->sin_addr.s_addr == htonl(0x0a000000u + (uint32_t)i),
                   "address %zu, there before the parse, changed", i);
    }
    check_added(data, size, type, port, res, pre);
    /* nothing past the addresses counted was touched */
    for (size_t i = res->n; i < AL_RESOLVE_MAX; i++) {
        const uint8_t *raw = (const uint8_t *)&res->addr[i];
        for (size_t k = 0; k < sizeof res->addr[i]; k++)
            FUZZ_CHECK(raw[k] == SENTINEL, "slot %zu (past the %zu counted) was written", i, res->n);
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact copy, so a read past the message's end is caught */
    uint8_t *msg = (uint8_t *)fuzz_copy(data, size, 0);
    static al_resolved a, b;
    /* the last byte picks how full the result is before (al_resolve parses
     * the AAAA answer into what the A answer left) */
    size_t pre = size ? data[size - 1] % (AL_RESOLVE_MAX + 1) : 0;
    const int types[2] = { ns_t_a, ns_t_aaaa };
    for (int t = 0; t < 2; t++) {
        uint16_t port = t ? 8443 : 443;
        int r1 = parse_checked(msg, size, types[t], port, 0, &a);
        int r2 = parse_checked(msg, size, types[t], port, 0, &b);
        FUZZ_CHECK(r1 == r2 && a.n == b.n && memcmp(a.addr, b.addr, a.n * sizeof a.addr[0]) == 0,
                   "the same answer parsed twice differs (%d/%zu, %d/%zu)", r1, a.n, r2, b.n);
        /* into a result already holding PRE: the same addresses, appended
         * as long as there is room */
        int r3 = parse_checked(msg, size, types[t], port, pre, &b);
        size_t room = AL_RESOLVE_MAX - pre, want = a.n < room ? a.n : room;
        FUZZ_CHECK(r3 == r1 && b.n == pre + want && memcmp(b.addr + pre, a.addr, want * sizeof a.addr[0]) == 0,
                   "appended after %zu, the answer gives %zu addresses, not %zu", pre, b.n - pre, want);
        if (r1 == 0 && a.n == 0)
            seen.none++;
        if (r1 == 0 && a.n > 0)
            t ? seen.aaaa++ : seen.a++;
        if (a.n == AL_RESOLVE_MAX)
            seen.capped++;
        if (r1 == -EBADMSG)
            a.n ? seen.partial_badmsg++ : seen.badmsg++;
    }
    free(msg);
    return 0;
}

/* The corpus must reach A and AAAA addresses, the cap, a message refused
 * whole and one refused after some of its records, and a valid answer
 * that holds no address of the type asked (a CNAME chain's end, the other
 * family). */
int fuzz_replay_check(void) {
    printf("dns: %u A answers, %u AAAA answers, %u at the cap, %u refused after some records, %u refused, %u with no "
           "address\n",
           seen.a, seen.aaaa, seen.capped, seen.partial_badmsg, seen.badmsg, seen.none);
    return seen.a && seen.aaaa && seen.capped && seen.partial_badmsg && seen.badmsg && seen.none ? 0 : 1;
}
