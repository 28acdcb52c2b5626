/* The run helper's events: one JSON line each on its stdout (see
 * src/drivers/helper_main.c), read by the service. The helper is ours, but what its
 * lines carry is the box's: output bytes and the result's names and text
 * are a script's choice, so a line is parsed as hostile. */
#pragma once

#include <jansson.h>
#include <stddef.h>

typedef enum al_helper_event_kind {
    AL_HELPER_EVENT_IGNORED = 0, /* not JSON, no "type", or a type the service does not know */
    AL_HELPER_EVENT_STARTED,     /* the box is running */
    AL_HELPER_EVENT_STDOUT,      /* output bytes */
    AL_HELPER_EVENT_STDERR,
    AL_HELPER_EVENT_RESULT,      /* the run's result document */
    AL_HELPER_EVENT_ERROR,       /* the helper failed before a result */
    AL_HELPER_EVENT_INSTALLING,  /* the package install's output bytes (stream, data), before the box */
    AL_HELPER_EVENT_INSTALLED,   /* the packages' layer is ready (value: the event) */
    AL_HELPER_EVENT_KINDS,
} al_helper_event_kind;

typedef struct al_helper_event {
    al_helper_event_kind kind;
    /* STDOUT, STDERR, INSTALLING: the exact bytes (data_base64, else data),
     * owned, NUL after them (they may hold NULs: their length is LEN); NULL
     * when the event has none */
    char *data;
    size_t len;
    /* INSTALLING: which of the install's streams (1 stdout, 2 stderr; 0:
     * the event named neither, and carries no bytes) */
    int stream;
    /* RESULT: its "result", ERROR: its "error", INSTALLED: the event
     * itself ({"type", "layer", "reused", "ms", "python", "node"}: as the
     * box's, what is in it is checked by whoever reads it), a reference
     * owned (NULL when the event has none: a result event without one
     * clears the result the service held, as it always did) */
    json_t *value;
} al_helper_event;

/* Parse one line (LEN bytes, its newline or not) into RET, which
 * al_helper_event_clear frees. As the service read lines with json_loads,
 * the line ends at its first NUL byte. Returns RET->kind. */
al_helper_event_kind al_helper_event_parse(const char *line, size_t len, al_helper_event *ret);
void al_helper_event_clear(al_helper_event *ev);
