/*
 * Fuzz target for the egress proxy's parsers: the request head, the TLS
 * ClientHello's SNI, and the host/authority parser, which is what a hostile
 * script controls. LLVMFuzzerTestOneInput is libFuzzer's entry point (build
 * with clang -fsanitize=fuzzer,address to use it); without libFuzzer, main()
 * below mutates a seed corpus with a fixed-seed PRNG for N iterations, which
 * `meson test` runs under the ASan+UBSan build.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proxy/addr.h"
#include "proxy/policy.h"
#include "proxy/request.h"
#include "proxy/sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* how deep the inputs got: a loop that never parses a request proves little */
static long n_parsed, n_connect, n_allowed, n_sni, n_rewritten;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size heap copy, so a read past the end is caught */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    al_proxy_req r;
    const char *why = NULL;
    int rc = al_proxy_req_parse(buf, size, &r, &why);
    if (rc == 0) {
        n_parsed++;
        n_connect += r.connect;
        /* what a parsed request promises its user */
        if (r.head_len > size || r.path_off + r.path_len > size || r.hdr_off > r.head_len || r.port == 0)
            abort();
        al_host h;
        al_host_parse(r.host, &h);
        static al_net_policy pol;
        static int init;
        al_error err;
        if (!init && al_net_policy_parse("hosts:allowed.example", &pol, &err) == 0)
            init = 1;
        char w[384];
        if (init && al_net_decide(&pol, &h, r.port, w, sizeof w) &&
            (h.kind != AL_HOST_NAME || strcmp(h.name, "allowed.example") != 0))
            abort(); /* only the listed name may ever pass */
        n_allowed += init && al_net_decide(&pol, &h, r.port, w, sizeof w);
        if (!r.connect) {
            /* the forwarded head fits its bound, and says what was checked */
            size_t cap = r.head_len + AL_REQ_REWRITE_EXTRA;
            char *out = malloc(cap + 1);
            ssize_t n = out ? al_proxy_req_rewrite(buf, &r, out, cap) : 0;
            if (out && (n <= 0 || (size_t)n > cap))
                abort();
            if (out) {
                out[n] = '\0';
                if (!strstr(out, "\r\nHost: ") || memcmp(out + n - 4, "\r\n\r\n", 4) != 0 ||
                    strncmp(out, r.method, strlen(r.method)) != 0)
                    abort();
                n_rewritten++;
            }
            free(out);
        }
        for (size_t at = r.hdr_off; at + 2 < r.head_len;) {
            const char *e = memmem(buf + at, r.head_len - at, "\r\n", 2);
            if (!e)
                abort();
            al_proxy_header_dropped(buf + at, (size_t)(e - buf - at));
            at = (size_t)(e - buf) + 2;
        }
    } else if (rc != -EAGAIN && !why) {
        abort(); /* every refusal says why */
    }
    al_proxy_looks_like_request(buf, size);
    char name[256];
    rc = al_tls_sni((const unsigned char *)buf, size, name, sizeof name);
    if (rc == 1 && strlen(name) == 0)
        abort();
    n_sni += rc == 1;
    char host[300];
    uint16_t port;
    al_proxy_split_authority(buf, size, 80, host, sizeof host, &port);
    if (size < 300) {
        char s[300];
        memcpy(s, buf, size);
        s[size] = '\0';
        al_host h;
        al_host_parse(s, &h);
    }
    free(buf);
    return 0;
}

#ifndef AIRLOCK_LIBFUZZER
#include "mutate.h"

static const char *const seeds[] = {
    "CONNECT allowed.example:443 HTTP/1.1\r\nHost: allowed.example:443\r\n\r\n",
    "GET http://allowed.example/path?q=1 HTTP/1.1\r\nHost: evil.example\r\nAccept: */*\r\n\r\n",
    "POST http://allowed.example:80/ HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    "CONNECT [::ffff:169.254.169.254]:443 HTTP/1.1\r\n\r\nCONNECT evil:443 HTTP/1.1\r\n\r\n",
    "GET http://user@allowed.example@evil.net/ HTTP/1.0\r\n\r\n",
    "\x16\x03\x01\x00\x3a\x01\x00\x00\x36\x03\x03" "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x00\x00\x02\x13\x01\x01\x00"
    "\x00\x0b\x00\x00\x00\x07\x00\x05\x00\x00\x02\x61\x62",
};

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    double budget = argc > 2 ? atof(argv[2]) : 30.0;
    static const char *const dict[] = { "\r\n", "\r\n\r\n", ":", "@", "[", "]", "%", " ", "CONNECT ", "http://",
                                        "https://", "HTTP/1.1", "Content-Length: 1\r\n", "Transfer-Encoding: chunked\r\n",
                                        "\x16\x03\x01", "\x00", "0x7f.1", "::ffff:", "65535", "99999" };
    uint8_t buf[AL_REQ_HEAD_MAX + 64];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long i = 0;
    for (; i < iters; i++) {
        const char *seed = seeds[fuzz_next() % (sizeof seeds / sizeof seeds[0])];
        size_t len = strlen(seed);
        if (seed == seeds[5])
            len = 63;
        memcpy(buf, seed, len);
        int muts = 1 + (int)(fuzz_next() % 8);
        for (int m = 0; m < muts; m++)
            fuzz_mutate(buf, &len, sizeof buf, dict, sizeof dict / sizeof dict[0], true);
        LLVMFuzzerTestOneInput(buf, len);
        if (fuzz_over(i, &t0, budget))
            break;
    }
    printf("fuzz_proxy: %ld inputs, no crash; %ld parsed (%ld CONNECT, %ld allowed, %ld rewritten), %ld with an SNI\n",
           i, n_parsed, n_connect, n_allowed, n_rewritten, n_sni);
    /* the mutations must keep reaching the deep paths */
    return n_parsed > i / 50 && n_allowed > 0 && n_sni > 0 && n_rewritten > 0 ? 0 : 1;
}
#endif
