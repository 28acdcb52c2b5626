/*
 * Fuzz target for the Kubernetes watch stream (src/kube/watch.c): the
 * newline-delimited events the API server sends on a pod's watch, and the
 * pod objects in them, hostile bytes all. The input's first byte picks the
 * chunk size the stream is fed in (a cut anywhere must parse as whole), the
 * rest is the stream.
 *
 * What must hold: no line over AL_KUBE_LINE_MAX is ever held; the same
 * bytes fed whole or in chunks give the same events and the same end; a
 * state's strings are NUL-terminated within their size and its phase one
 * of the enum's; an exit code is -1 or 0-255 and set only when main ended.
 */
#include "fuzz.h"
#include "kube/kube_int.h"

typedef struct seen {
    unsigned n;
    unsigned long sum;
} seen;

static int on_event(al_kube_event ev, const al_kube_pod_state *st, void *ud) {
    seen *s = ud;
    FUZZ_CHECK(ev <= AL_KEV_ERROR, "event %d", (int)ev);
    FUZZ_CHECK(st->phase <= AL_KPOD_FAILED, "phase %d", (int)st->phase);
    FUZZ_CHECK(memchr(st->why, '\0', sizeof st->why) && memchr(st->rv, '\0', sizeof st->rv), "unterminated");
    FUZZ_CHECK(st->exit_code >= -1 && st->exit_code <= 255, "exit code %d", st->exit_code);
    FUZZ_CHECK(st->phase == AL_KPOD_DONE || st->exit_code == -1 || ev == AL_KEV_BOOKMARK || ev >= AL_KEV_EXPIRED,
               "an exit code without main's end");
    s->n++;
    s->sum = s->sum * 31 + (unsigned long)ev * 7 + (unsigned long)st->phase + (unsigned long)(st->exit_code + 1);
    return 0;
}

static int feed(const uint8_t *d, size_t n, size_t chunk, seen *s) {
    al_kube_watch w = { .on_event = on_event, .ud = s };
    int r = 0;
    for (size_t off = 0; off < n && r == 0; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        r = al_kube_watch_feed(&w, (const char *)d + off, k);
        FUZZ_CHECK(w.len <= AL_KUBE_LINE_MAX, "held a line of %zu bytes", w.len);
    }
    al_kube_watch_free(&w);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    seen a = { 0 }, b = { 0 };
    int ra = feed(data + 1, size - 1, size, &a);
    int rb = feed(data + 1, size - 1, chunk, &b);
    FUZZ_CHECK(ra == rb && a.n == b.n && a.sum == b.sum, "whole (%d, %u) and in chunks of %zu (%d, %u) differ", ra,
               a.n, chunk, rb, b.n);
    return 0;
}
