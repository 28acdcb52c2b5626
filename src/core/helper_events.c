/*
 * The run helper's event lines -> typed events. Pure (no I/O, no store), so
 * the service's read loop only acts on what this gives it, and the parse
 * can be fuzzed alone (tests/fuzz/fuzz_helper_events.c).
 */
#include "helper_events.h"

#include <string.h>

#include "dlp.h"

static al_helper_event_kind kind_of(const char *type) {
    if (!type)
        return AL_HELPER_EVENT_IGNORED;
    if (strcmp(type, "started") == 0)
        return AL_HELPER_EVENT_STARTED;
    if (strcmp(type, "stdout") == 0)
        return AL_HELPER_EVENT_STDOUT;
    if (strcmp(type, "stderr") == 0)
        return AL_HELPER_EVENT_STDERR;
    if (strcmp(type, "result") == 0)
        return AL_HELPER_EVENT_RESULT;
    if (strcmp(type, "error") == 0)
        return AL_HELPER_EVENT_ERROR;
    if (strcmp(type, "installing") == 0)
        return AL_HELPER_EVENT_INSTALLING;
    if (strcmp(type, "installed") == 0)
        return AL_HELPER_EVENT_INSTALLED;
    return AL_HELPER_EVENT_IGNORED;
}

al_helper_event_kind al_helper_event_parse(const char *line, size_t len, al_helper_event *ret) {
    memset(ret, 0, sizeof *ret);
    /* json_loads on the line getline gave stopped at a NUL in it: so does
     * this (a helper line never holds one; JSON escapes it) */
    const char *nul = memchr(line, '\0', len);
    if (nul)
        len = (size_t)(nul - line);
    /* the result's text may hold NULs (its exact bytes come beside it) */
    json_t *e = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
    ret->kind = kind_of(json_string_value(json_object_get(e, "type")));
    switch (ret->kind) {
    case AL_HELPER_EVENT_STDOUT:
    case AL_HELPER_EVENT_STDERR:
        ret->data = al_output_get(e, "data", &ret->len);
        break;
    case AL_HELPER_EVENT_RESULT:
        ret->value = json_incref(json_object_get(e, "result"));
        break;
    case AL_HELPER_EVENT_ERROR:
        ret->value = json_incref(json_object_get(e, "error"));
        break;
    case AL_HELPER_EVENT_INSTALLING: {
        /* bytes only with a stream named: an install's output is one of its two */
        const char *st = json_string_value(json_object_get(e, "stream"));
        ret->stream = st && strcmp(st, "stdout") == 0 ? 1 : st && strcmp(st, "stderr") == 0 ? 2 : 0;
        if (ret->stream)
            ret->data = al_output_get(e, "data", &ret->len);
        break;
    }
    case AL_HELPER_EVENT_INSTALLED:
        ret->value = json_incref(e);
        break;
    default:
        break;
    }
    json_decref(e);
    return ret->kind;
}

void al_helper_event_clear(al_helper_event *ev) {
    free(ev->data);
    json_decref(ev->value);
    memset(ev, 0, sizeof *ev);
}
