/* DLP: redaction of secrets in output that goes back to an agent. Works
 * line by line, so a streaming redactor that holds back a partial line
 * catches a secret split across output chunks. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../util/util.h"

typedef struct al_dlp al_dlp;

/* Built-in patterns plus EXTRA ([{name, pattern}], PCRE2 matched on bytes;
 * may be NULL). Every pattern's cost is bounded: see dlp.c. */
int al_dlp_new(json_t *extra, al_dlp **ret, al_error *err);
void al_dlp_free(al_dlp *d);
/* Check one custom pattern (for settings validation). */
int al_dlp_check_pattern(const char *pattern, al_error *err);

/* Redact a whole text; returns a new buffer (NUL-terminated, but it may
 * hold NULs: its length is *RET_LEN), adds matches to *COUNT. */
char *al_dlp_redact(al_dlp *d, const char *text, size_t len, int *count, size_t *ret_len);

/* Streaming: feed chunks, get back what can be released (complete lines,
 * redacted; NULL when nothing yet); flush at the end. */
typedef struct al_dlp_stream {
    al_dlp *dlp;
    char *pending;
    size_t len;
    bool in_key;
    int count;
} al_dlp_stream;

char *al_dlp_stream_feed(al_dlp_stream *st, const char *chunk, size_t len, size_t *ret_len);
char *al_dlp_stream_flush(al_dlp_stream *st, size_t *ret_len);

/* Output is bytes. In a JSON object they are KEY, text: valid UTF-8 without
 * NUL, where each byte that cannot be shown so is U+FFFD; and only when that
 * text is not the bytes exactly, KEY_base64: the exact bytes. */
int al_output_set(json_t *obj, const char *key, const char *bytes, size_t len);
/* The exact bytes of KEY in OBJ (from KEY_base64 when there is one), NUL
 * terminated (their length in *RET_LEN); NULL when OBJ has no KEY. */
char *al_output_get(json_t *obj, const char *key, size_t *ret_len);
