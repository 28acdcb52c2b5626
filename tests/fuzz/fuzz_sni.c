/*
 * Fuzz target for the TLS ClientHello's server name (src/proxy/sni.c): the
 * first bytes a script sends through a CONNECT tunnel, which the proxy
 * reads to check that the name it asks the server for is the one allowed.
 *
 * What must hold: a name found is a plain host name (al_host_parse: NAME,
 * the same name), lower case, and fits its buffer; the answer depends on
 * the first record alone (bytes after it change nothing); and a prefix of
 * an input that gave an answer is "need more" (-EAGAIN) or that same
 * answer, never another name or a refusal.
 */
#include <arpa/inet.h>
#include <errno.h>

#include "fuzz.h"
#include "proxy/addr.h"
#include "proxy/sni.h"
#include "util/util.h"

static long n_name, n_none, n_again, n_bad, n_not_name;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 20000)
        return 0;
    unsigned char *buf = (unsigned char *)fuzz_copy(data, size, 0);
    char name[256];
    memset(name, 0x55, sizeof name);
    int rc = al_tls_sni(buf, size, name, sizeof name);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == -EAGAIN || rc == -EPROTO || rc == -EINVAL, "answer %d", rc);
    if (rc == 1) {
        n_name++;
        FUZZ_CHECK(memchr(name, 0, sizeof name) && name[0], "name not terminated or empty");
        /* a plain host name, checked here on its own terms, not with the
         * parser's helper: labels of 1-63 of [a-z0-9_-], not starting or
         * ending with '-', 253 in all, no trailing dot, and not something a
         * resolver or a client would read as an address */
        size_t nl = strlen(name);
        FUZZ_CHECK(nl <= 253 && name[nl - 1] != '.', "SNI %s: long or a trailing dot", name);
        for (const char *l = name; *l;) {
            size_t k = strcspn(l, ".");
            FUZZ_CHECK(k >= 1 && k <= 63 && l[0] != '-' && l[k - 1] != '-', "SNI %s: a bad label", name);
            for (size_t i = 0; i < k; i++)
                FUZZ_CHECK((l[i] >= 'a' && l[i] <= 'z') || (l[i] >= '0' && l[i] <= '9') || l[i] == '-' || l[i] == '_',
                           "SNI %s: a character", name);
            l += k + (l[k] == '.');
        }
        struct in_addr a4;
        struct in6_addr a6;
        FUZZ_CHECK(inet_aton(name, &a4) == 0 && inet_pton(AF_INET6, name, &a6) == 0, "SNI %s is an address", name);
    } else if (rc == 0) {
        n_none++;
    } else if (rc == -EAGAIN) {
        n_again++;
    } else if (rc == -EINVAL) {
        n_not_name++;
        FUZZ_CHECK(memchr(name, 0, sizeof name), "a refused name not terminated");
    } else {
        n_bad++;
    }
    if (rc == 1 || rc == 0) {
        /* a prefix: need more, or the same answer */
        size_t cuts[] = { size / 2, size > 0 ? size - 1 : 0, 5 };
        for (size_t i = 0; i < ELEMENTSOF(cuts); i++) {
            if (cuts[i] >= size)
                continue;
            unsigned char *p = (unsigned char *)fuzz_copy(buf, cuts[i], 0);
            char pn[256];
            int pr = al_tls_sni(p, cuts[i], pn, sizeof pn);
            FUZZ_CHECK(pr == -EAGAIN || (pr == rc && (rc == 0 || strcmp(pn, name) == 0)),
                       "a %zu-byte prefix answers %d, the whole %d", cuts[i], pr, rc);
            free(p);
        }
        /* bytes after the input change nothing */
        unsigned char *more = malloc(size + 64);
        if (!more)
            abort();
        memcpy(more, buf, size);
        memset(more + size, 0x16, 64);
        char mn[256];
        int mr = al_tls_sni(more, size + 64, mn, sizeof mn);
        FUZZ_CHECK(mr == rc && (rc == 0 || strcmp(mn, name) == 0), "trailing bytes changed the answer");
        free(more);
    }
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-sni: %ld names, %ld without one, %ld incomplete, %ld refused, %ld not host names\n", n_name, n_none,
           n_again, n_bad, n_not_name);
    return n_name && n_none && n_again && n_bad && n_not_name ? 0 : 1;
}
