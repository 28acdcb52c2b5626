/*
 * Fuzz target for DLP over a script's output (src/core/dlp.c): bytes a
 * hostile script writes, which the service redacts as they stream by and
 * carries to the agent in JSON.
 *
 * The first two bytes seed how the rest is cut into chunks. What must hold:
 * - streaming the text in those chunks gives exactly the bytes, and the
 *   count, that redacting it whole does (a secret split across writes is
 *   caught the same);
 * - redacting is idempotent: what was released holds nothing more to redact;
 * - a known key placed on a line of its own is never released;
 * - the bytes survive JSON: al_output_set then al_output_get gives them back
 *   exactly, the text field is NUL-free, and base64 is used only when the
 *   text is not the bytes.
 */
#include <jansson.h>

#include "fuzz.h"
#include "core/dlp.h"

/* below the redactor's pending-line cap (64 KiB), past which a long line is
 * released in pieces that depend on the chunking by design */
#define TEXT_MAX 60000

static long n_inputs, n_redacted, n_base64, n_chunks;
static const char secret[] = "AKIAQWERTYUIOPASDFGH";

/* ALL (*N bytes) with R (RN bytes, freed; NULL: nothing released) after it */
static char *append(char *all, size_t *n, char *r, size_t rn) {
    if (!r)
        return all;
    all = realloc(all, *n + rn + 1);
    if (!all)
        abort();
    memcpy(all + *n, r, rn);
    *n += rn;
    free(r);
    return all;
}

static char *stream(al_dlp *d, const char *text, size_t len, uint32_t seed, size_t *ret_len, int *ret_count) {
    al_dlp_stream st = { .dlp = d };
    char *all = malloc(1);
    size_t n = 0;
    if (!all)
        abort();
    for (size_t at = 0; at < len;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 300;
        if (k > len - at)
            k = len - at;
        size_t rn = 0;
        char *r = al_dlp_stream_feed(&st, text + at, k, &rn);
        all = append(all, &n, r, rn);
        at += k;
        n_chunks++;
    }
    size_t rn = 0;
    char *r = al_dlp_stream_flush(&st, &rn);
    all = append(all, &n, r, rn);
    free(st.pending);
    all[n] = '\0';
    *ret_len = n;
    *ret_count = st.count;
    return all;
}

static void check_json(const char *bytes, size_t len) {
    json_t *o = json_object();
    FUZZ_CHECK(o && al_output_set(o, "data", bytes, len) == 0, "al_output_set failed");
    json_t *t = json_object_get(o, "data");
    FUZZ_CHECK(json_is_string(t) && !fuzz_has_nul(json_string_value(t), json_string_length(t)), "text holds NUL");
    bool b64 = json_object_get(o, "data_base64") != NULL;
    n_base64 += b64;
    FUZZ_CHECK(b64 == !(json_string_length(t) == len && memcmp(json_string_value(t), bytes, len) == 0),
               "base64 %s but the text %s the bytes", b64 ? "given" : "missing", b64 ? "is" : "is not");
    /* through a line of JSON, as the helper writes it and the service reads it */
    char *line = json_dumps(o, JSON_COMPACT);
    FUZZ_CHECK(line && !strchr(line, '\n'), "a newline in the JSON line");
    json_t *back = json_loads(line, JSON_ALLOW_NUL, NULL);
    size_t gl = 0;
    char *got = al_output_get(back, "data", &gl);
    FUZZ_CHECK(got && gl == len && memcmp(got, bytes, len) == 0, "bytes changed through JSON (%zu -> %zu)", len, gl);
    free(got);
    free(line);
    json_decref(back);
    json_decref(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > TEXT_MAX + 2)
        return 0;
    uint32_t seed = (uint32_t)data[0] << 8 | data[1];
    size_t len = size - 2;
    char *text = fuzz_copy(data + 2, len, 0);
    n_inputs++;
    /* the built-in patterns, made once; one input in eight also gets a
     * workspace pattern, in a redactor of its own: a workspace's patterns
     * have a CPU budget per run, which one redactor shared by millions of
     * inputs would spend, and then withhold lines where a run would not */
    static al_dlp *builtin;
    al_dlp *own = NULL, *d;
    al_error err = { 0 };
    if (!builtin)
        FUZZ_CHECK(al_dlp_new(NULL, &builtin, &err) == 0, "al_dlp_new: %s", err.msg);
    if ((seed & 7) == 0) {
        json_t *extra = json_pack("[{s:s, s:s}]", "name", "ticket", "pattern", "INTERNAL-[0-9]{6}");
        FUZZ_CHECK(al_dlp_new(extra, &own, &err) == 0, "al_dlp_new: %s", err.msg);
        json_decref(extra);
    }
    d = own ? own : builtin;

    int wc = 0;
    size_t wl = 0;
    char *whole = al_dlp_redact(d, text, len, &wc, &wl);
    FUZZ_CHECK(whole, "al_dlp_redact failed");
    n_redacted += wc > 0;
    size_t sl = 0;
    int sc = 0;
    char *streamed = stream(d, text, len, seed, &sl, &sc);
    FUZZ_CHECK(sl == wl && memcmp(streamed, whole, wl) == 0 && sc == wc,
               "streamed in chunks (%zu bytes, %d redactions) differs from whole (%zu bytes, %d)", sl, sc, wl, wc);
    int ac = 0;
    size_t al = 0;
    char *again = al_dlp_redact(d, whole, wl, &ac, &al);
    FUZZ_CHECK(again && al == wl && memcmp(again, whole, wl) == 0 && ac == 0, "redacting twice redacts more (%d)", ac);

    /* a key on a line of its own, put where the seed says */
    size_t at = len ? seed % (len + 1) : 0;
    size_t kl = len + sizeof secret + 2;
    char *keyed = malloc(kl);
    if (!keyed)
        abort();
    memcpy(keyed, text, at);
    keyed[at] = '\n';
    memcpy(keyed + at + 1, secret, sizeof secret - 1);
    keyed[at + sizeof secret] = '\n';
    memcpy(keyed + at + sizeof secret + 1, text + at, len - at);
    int kc = 0;
    size_t krl = 0;
    char *kr = al_dlp_redact(d, keyed, kl, &kc, &krl);
    FUZZ_CHECK(kr && !memmem(kr, krl, secret, sizeof secret - 1) && kc >= 1, "a key on its own line was released");

    check_json(text, len);
    check_json(whole, wl);
    free(kr);
    free(keyed);
    free(again);
    free(streamed);
    free(whole);
    free(text);
    al_dlp_free(own);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-dlp: %ld inputs in %ld chunks, %ld with a redaction, %ld carried as base64\n", n_inputs, n_chunks,
           n_redacted, n_base64);
    return n_redacted && n_base64 && n_inputs > n_redacted ? 0 : 1;
}
