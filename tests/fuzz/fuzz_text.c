/*
 * Fuzz target for the small text parsers in src/util/util.c that read what
 * a tenant types: numbers in query strings (?limit, ?cursor, ?timeout_s),
 * sizes and durations on the command line and in settings, and the UTF-8
 * repairs applied to error messages and previews that quote a tenant's
 * bytes (jansson refuses to carry anything that is not UTF-8).
 *
 * What must hold: each number parser agrees with an independent reference
 * (computed in 128 bits, so an overflow is never hidden); al_utf8_fix and
 * al_utf8_scrub give text jansson accepts, never longer, unchanged when it
 * was valid already; al_utf8_cut never cuts inside a character.
 */
#include <errno.h>
#include <jansson.h>

#include "fuzz.h"
#include "util/util.h"

static long n_u64, n_size, n_millis, n_fixed;

/* digits only, within 2^64 - 1: the value; -1 otherwise */
static int ref_u64(const char *s, size_t n, unsigned __int128 *v) {
    *v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        *v = *v * 10 + (unsigned)(s[i] - '0');
        if (*v > UINT64_MAX)
            *v = (unsigned __int128)UINT64_MAX + 1; /* saturate: too big */
    }
    return *v > UINT64_MAX ? -2 : 0;
}

static void numbers(const char *s) {
    size_t n = strlen(s);
    uint64_t got;
    unsigned __int128 ref;
    int rr = ref_u64(s, n, &ref);
    int r = al_parse_u64(s, &got);
    FUZZ_CHECK((r == 0) == (rr == 0) && (r != 0 || got == (uint64_t)ref), "u64 %s: %d, reference %d", s, r, rr);
    n_u64 += r == 0;

    /* sizes: digits, then K M G T (either case), then an optional B */
    r = al_parse_size(s, &got);
    size_t m = n;
    if (m >= 2 && (s[m - 1] == 'b' || s[m - 1] == 'B'))
        m--;
    unsigned shift = 0;
    if (m >= 1) {
        switch (s[m - 1]) {
        case 'k': case 'K': shift = 10; m--; break;
        case 'm': case 'M': shift = 20; m--; break;
        case 'g': case 'G': shift = 30; m--; break;
        case 't': case 'T': shift = 40; m--; break;
        default: break;
        }
    }
    rr = m <= 20 ? ref_u64(s, m, &ref) : -1;
    bool ok = rr == 0 && (ref << shift) <= UINT64_MAX && !(n == 1 && (s[0] == 'b' || s[0] == 'B'));
    FUZZ_CHECK((r == 0) == ok && (r != 0 || got == (uint64_t)(ref << shift)), "size %s: %d", s, r);
    n_size += r == 0;

    /* durations: seconds with up to three decimals, as milliseconds */
    r = al_parse_millis(s, &got);
    const char *dot = strchr(s, '.');
    size_t wl = dot ? (size_t)(dot - s) : n, fl = dot ? n - wl - 1 : 0;
    unsigned __int128 w = 0, f = 0;
    ok = (wl > 0 || fl > 0) && wl < 24 && (wl == 0 || ref_u64(s, wl, &w) == 0) &&
         (!dot || (fl >= 1 && fl <= 3 && ref_u64(dot + 1, fl, &f) == 0));
    for (size_t i = fl; ok && i < 3; i++)
        f *= 10;
    ok = ok && w <= UINT64_MAX / 1000 - 1;
    FUZZ_CHECK((r == 0) == ok && (r != 0 || got == (uint64_t)(w * 1000 + f)), "millis %s: %d", s, r);
    n_millis += r == 0;
}

static void utf8(const uint8_t *data, size_t size) {
    char *s = fuzz_copy(data, size, 1);
    size_t n = strlen(s);
    json_t *j = json_stringn(s, n);
    bool valid = j != NULL;
    json_decref(j);
    char *orig = fuzz_copy((const uint8_t *)s, n, 1);
    al_utf8_fix(s);
    size_t fn = strlen(s);
    j = json_stringn(s, fn);
    FUZZ_CHECK(j && fn <= n, "al_utf8_fix left invalid UTF-8 or grew");
    json_decref(j);
    FUZZ_CHECK(!valid || (fn == n && memcmp(s, orig, n) == 0), "al_utf8_fix changed valid text");
    n_fixed += !valid;

    /* scrub keeps the length and the NULs */
    char *b = fuzz_copy(data, size, 0);
    FUZZ_CHECK(al_utf8_scrub(b, size) == size, "scrub changed the length");
    for (size_t i = 0; i < size; i++)
        FUZZ_CHECK((b[i] == 0) == (data[i] == 0), "scrub moved a NUL");
    j = json_stringn(b, size);
    FUZZ_CHECK(j || fuzz_has_nul(b, size), "scrubbed text is not UTF-8");
    json_decref(j);

    /* a cut at every length keeps whole characters */
    for (size_t max = 0; max <= n && max < 64; max++) {
        size_t c = al_utf8_cut(orig, n, max);
        FUZZ_CHECK(c <= max, "cut past its maximum");
        if (valid) {
            json_t *p = json_stringn(orig, c);
            FUZZ_CHECK(p, "a cut at %zu of valid text ends inside a character", c);
            json_decref(p);
        }
    }
    free(b);
    free(orig);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096)
        return 0;
    if (size <= 64) {
        char *s = fuzz_copy(data, size, 1);
        numbers(s);
        free(s);
    }
    utf8(data, size);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-text: %ld numbers, %ld sizes, %ld durations accepted; %ld texts repaired\n", n_u64, n_size, n_millis,
           n_fixed);
    return n_u64 && n_size && n_millis && n_fixed ? 0 : 1;
}
