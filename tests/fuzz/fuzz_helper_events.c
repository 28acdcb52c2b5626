/*
 * The run helper's event lines as the service reads them
 * (al_helper_event_parse): what they carry is the box's, output bytes and
 * the result's text and names. Two uses of each input:
 *  1. as the helper's stdout, cut into lines as getline cuts them: every
 *     line gives one of the kinds, bytes only for output (NUL after them),
 *     a value only for a result or an error; the same line twice gives the
 *     same event; and an output event's bytes, sent again the helper's way,
 *     come back the same;
 *  2. as output bytes B, any bytes at all: B in an event line made as the
 *     helper makes it (data_base64, json_dumps JSON_COMPACT, one newline),
 *     in one made by al_output_set (text, and base64 only when the text is
 *     not B exactly), and as a result's stdout, parses back to exactly B;
 *     and no such line holds a newline before its end (one line, one event).
 */
#include <nettle/base64.h>
#include <stdbool.h>

#include "fuzz.h"
#include "core/dlp.h"
#include "core/helper_events.h"

/* what the replayed corpus reached (fuzz_replay_check) */
static struct {
    unsigned kinds[AL_HELPER_EVENT_KINDS];
    unsigned output_bytes, output_none, exact_text, with_base64, nul_in_line;
} seen;

/* LINE as json_dumps made it, with the newline emit() adds. */
static char *as_line(json_t *ev, size_t *ret_len) {
    char *s = json_dumps(ev, JSON_COMPACT);
    FUZZ_CHECK(s, "json_dumps of an event failed");
    size_t n = strlen(s);
    FUZZ_CHECK(!memchr(s, '\n', n), "an event line holds a newline before its end: %s", s);
    char *line = realloc(s, n + 2);
    if (!line)
        abort();
    line[n] = '\n';
    line[n + 1] = '\0';
    *ret_len = n + 1;
    return line;
}

/* Parse LINE, expecting an output event of KIND with exactly B. */
static void expect_bytes(const char *line, size_t len, al_helper_event_kind kind, const char *b, size_t blen,
                         const char *how) {
    al_helper_event ev;
    FUZZ_CHECK(al_helper_event_parse(line, len, &ev) == kind, "%s: kind %d, not %d", how, ev.kind, kind);
    FUZZ_CHECK(ev.data && ev.len == blen && memcmp(ev.data, b, blen) == 0 && ev.data[blen] == '\0',
               "%s: %zu bytes came back, %zu were sent (or they differ)", how, ev.len, blen);
    al_helper_event_clear(&ev);
}

/* B sent the three ways the service may see it. */
static void round_trip(const char *b, size_t blen, al_helper_event_kind kind) {
    const char *type = kind == AL_HELPER_EVENT_STDOUT ? "stdout" : "stderr";
    size_t n;
    /* the helper's way (src/drivers/helper_main.c on_output, al_box_result_base64) */
    char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(blen) + 1);
    if (!b64)
        abort();
    base64_encode_raw(b64, blen, (const uint8_t *)b);
    json_t *ev = json_pack("{s:s, s:s%}", "type", type, "data_base64", b64, (size_t)BASE64_ENCODE_RAW_LENGTH(blen));
    free(b64);
    FUZZ_CHECK(ev, "json_pack of a base64 event failed");
    char *line = as_line(ev, &n);
    json_decref(ev);
    expect_bytes(line, n, kind, b, blen, "data_base64");
    free(line);

    /* al_output_set's: text, and base64 beside it when the text is not B */
    ev = json_pack("{s:s}", "type", type);
    FUZZ_CHECK(ev && al_output_set(ev, "data", b, blen) == 0, "al_output_set failed");
    bool exact = !json_object_get(ev, "data_base64");
    exact ? seen.exact_text++ : seen.with_base64++;
    if (exact) {
        json_t *t = json_object_get(ev, "data");
        FUZZ_CHECK(json_string_length(t) == blen && memcmp(json_string_value(t), b, blen) == 0,
                   "al_output_set gave no base64, and its text is not the bytes");
    }
    line = as_line(ev, &n);
    json_decref(ev);
    expect_bytes(line, n, kind, b, blen, "al_output_set");
    free(line);

    /* a result's output, as cli_result_json sets it */
    json_t *res = json_object();
    FUZZ_CHECK(res && al_output_set(res, "stdout", b, blen) == 0, "al_output_set failed");
    ev = json_pack("{s:s, s:o}", "type", "result", "result", res);
    FUZZ_CHECK(ev, "json_pack of a result event failed");
    line = as_line(ev, &n);
    json_decref(ev);
    al_helper_event he;
    FUZZ_CHECK(al_helper_event_parse(line, n, &he) == AL_HELPER_EVENT_RESULT && json_is_object(he.value),
               "a result event came back as kind %d", he.kind);
    size_t got = 0;
    char *out = al_output_get(he.value, "stdout", &got);
    FUZZ_CHECK(out && got == blen && memcmp(out, b, blen) == 0, "a result's stdout came back as %zu bytes, not %zu", got,
               blen);
    free(out);
    al_helper_event_clear(&he);
    free(line);
}

/* One line of the helper's stdout, as getline gave it. */
static void one_line(const char *line, size_t len) {
    al_helper_event a, b;
    al_helper_event_kind k = al_helper_event_parse(line, len, &a);
    FUZZ_CHECK(k == a.kind && k >= AL_HELPER_EVENT_IGNORED && k < AL_HELPER_EVENT_KINDS, "kind %d", k);
    seen.kinds[k]++;
    if (memchr(line, '\0', len))
        seen.nul_in_line++;
    bool output = k == AL_HELPER_EVENT_STDOUT || k == AL_HELPER_EVENT_STDERR || k == AL_HELPER_EVENT_INSTALLING;
    FUZZ_CHECK(output || (!a.data && a.len == 0), "a kind %d event carries bytes", k);
    FUZZ_CHECK(k == AL_HELPER_EVENT_INSTALLING ? a.stream >= 0 && a.stream <= 2 && (a.stream || !a.data) : a.stream == 0,
               "a kind %d event has stream %d (with bytes: %d)", k, a.stream, a.data != NULL);
    FUZZ_CHECK(!a.data || a.data[a.len] == '\0', "the bytes are not NUL terminated");
    FUZZ_CHECK(a.data || a.len == 0, "no bytes, but a length of %zu", a.len);
    FUZZ_CHECK(k == AL_HELPER_EVENT_RESULT || k == AL_HELPER_EVENT_ERROR || k == AL_HELPER_EVENT_INSTALLED || !a.value,
               "a kind %d event carries a value", k);
    FUZZ_CHECK(k != AL_HELPER_EVENT_INSTALLED || json_is_object(a.value), "an installed event's value is not the event");
    if (output)
        a.data ? seen.output_bytes++ : seen.output_none++;
    FUZZ_CHECK(al_helper_event_parse(line, len, &b) == k && a.len == b.len && (!a.data) == (!b.data) &&
                   (!a.data || memcmp(a.data, b.data, a.len) == 0) && (!a.value) == (!b.value) &&
                   (!a.value || json_equal(a.value, b.value)) && a.stream == b.stream,
               "the same line parsed twice differs");
    /* what the service will show, sent again: the same bytes (an install's
     * output goes the way a run's does) */
    if (a.data)
        round_trip(a.data, a.len, k == AL_HELPER_EVENT_INSTALLING ? AL_HELPER_EVENT_STDERR : k);
    al_helper_event_clear(&a);
    al_helper_event_clear(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = fuzz_copy(data, size, 0);
    /* 1. the input as the helper's stdout: lines as getline cuts them (the
     * newline kept, NULs inside kept) */
    for (size_t at = 0; at < size;) {
        const char *nl = memchr(buf + at, '\n', size - at);
        size_t n = nl ? (size_t)(nl - (buf + at)) + 1 : size - at;
        /* an exact copy of the line: a read past its end is caught */
        char *line = fuzz_copy((const uint8_t *)buf + at, n, 0);
        one_line(line, n);
        free(line);
        at += n;
    }
    /* 2. the input as a script's output bytes */
    round_trip(buf, size, size % 2 ? AL_HELPER_EVENT_STDERR : AL_HELPER_EVENT_STDOUT);
    free(buf);
    return 0;
}

/* The corpus must reach every kind, output with bytes and without, lines
 * with a NUL, and bytes that are text exactly and that need base64. */
int fuzz_replay_check(void) {
    printf("helper-events: %u ignored, %u started, %u stdout, %u stderr, %u result, %u error, %u installing, %u installed "
           "lines; output %u with bytes, %u without; %u lines with a NUL; round trips %u as text, %u with base64\n",
           seen.kinds[0], seen.kinds[1], seen.kinds[2], seen.kinds[3], seen.kinds[4], seen.kinds[5], seen.kinds[6],
           seen.kinds[7], seen.output_bytes,
           seen.output_none, seen.nul_in_line, seen.exact_text, seen.with_base64);
    for (int k = 0; k < AL_HELPER_EVENT_KINDS; k++)
        if (!seen.kinds[k])
            return 1;
    return seen.output_bytes && seen.output_none && seen.nul_in_line && seen.exact_text && seen.with_base64 ? 0 : 1;
}
