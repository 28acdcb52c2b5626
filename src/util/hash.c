/* SHA-256 in the one form airlock stores and compares: 64 lower-case hex
 * digits. Written once here: blobs, images, inputs, audit and approvals
 * all hash the same way. */
#include "hash.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

void al_hex(const uint8_t *d, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 0xf];
    }
    out[2 * n] = '\0';
}

static int nibble(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

bool al_unhex(const char *s, uint8_t *out, size_t n) {
    if (strlen(s) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

void al_sha256_finish_hex(struct sha256_ctx *c, char out[65]) {
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(c, sizeof d, d);
    al_hex(d, sizeof d, out);
}

void al_sha256_hex(const void *data, size_t len, char out[65]) {
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, len, data);
    al_sha256_finish_hex(&c, out);
}

int al_sha256_fd(int fd, char out[65], uint64_t *ret_size) {
    struct sha256_ctx c;
    uint8_t buf[65536];
    uint64_t total = 0;
    sha256_init(&c);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        sha256_update(&c, (size_t)n, buf);
        total += (uint64_t)n;
    }
    al_sha256_finish_hex(&c, out);
    if (ret_size)
        *ret_size = total;
    return 0;
}

bool al_is_sha256_hex(const char *s) {
    return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

int al_sha256_fd_capped(int fd, uint64_t max, int copy, char out[65], uint64_t *ret_got) {
    struct sha256_ctx c;
    sha256_init(&c);
    uint8_t buf[65536];
    uint64_t got = 0;
    while (got < max) {
        size_t want = max - got < sizeof buf ? (size_t)(max - got) : sizeof buf;
        ssize_t n = pread(fd, buf, want, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        sha256_update(&c, (size_t)n, buf);
        if (copy >= 0) {
            int r = al_write_all(copy, buf, (size_t)n);
            if (r < 0)
                return r;
        }
        got += (uint64_t)n;
    }
    al_sha256_finish_hex(&c, out);
    *ret_got = got;
    return 0;
}
