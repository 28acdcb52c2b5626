/*
 * The fuzz targets' standalone driver parts, used when libFuzzer is not
 * there: a fixed-seed PRNG (runs repeat exactly), one mutation step over a
 * buffer, and a time budget. Each target keeps its own seeds, dictionary
 * and invariants.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static uint64_t fuzz_rng = 0x9e3779b97f4a7c15ULL;

static inline uint64_t fuzz_next(void) {
    fuzz_rng ^= fuzz_rng << 13;
    fuzz_rng ^= fuzz_rng >> 7;
    fuzz_rng ^= fuzz_rng << 17;
    return fuzz_rng;
}

/* One mutation of BUF (*LEN bytes, CAP room): flip a bit, set a byte,
 * delete a span, insert a word of DICT, truncate, or (with DUPLICATE)
 * repeat a span. */
static inline void fuzz_mutate(uint8_t *buf, size_t *len, size_t cap, const char *const *dict, size_t ndict,
                               bool duplicate) {
    size_t l = *len, at = l ? fuzz_next() % (l + 1) : 0;
    switch (fuzz_next() % (duplicate ? 6 : 5)) {
    case 0:
        if (l)
            buf[at % l] ^= (uint8_t)(1u << (fuzz_next() % 8));
        break;
    case 1:
        if (l)
            buf[at % l] = (uint8_t)fuzz_next();
        break;
    case 2:
        if (l) {
            size_t n = 1 + fuzz_next() % 8;
            if (at + n > l)
                n = l - at;
            memmove(buf + at, buf + at + n, l - at - n);
            l -= n;
        }
        break;
    case 3: {
        const char *w = dict[fuzz_next() % ndict];
        size_t n = w[0] ? strlen(w) : 1; /* "" stands for one NUL byte */
        if (l + n < cap) {
            memmove(buf + at + n, buf + at, l - at);
            memcpy(buf + at, w, n);
            l += n;
        }
        break;
    }
    case 4:
        l = at;
        break;
    default:
        if (l && l * 2 < cap) {
            size_t n = 1 + fuzz_next() % l;
            if (at + n > l)
                n = l - at;
            memmove(buf + at + n, buf + at, l - at);
            l += n;
        }
        break;
    }
    *len = l;
}

/* Whether BUDGET seconds have passed since T0 (checked every 1024 inputs). */
static inline bool fuzz_over(long i, const struct timespec *t0, double budget) {
    if ((i & 1023) != 0)
        return false;
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9 > budget;
}
