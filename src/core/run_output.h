/* A run's output on its way out (run_output.c): redacted, paced into
 * stream events, and kept once in the store. The runner's (runner.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../util/hash.h"
#include "dlp.h"

typedef struct al_service al_service;

/* What a run's stream events carried of each stream (stdout, stderr): how
 * many bytes (the next event's place), their hash, and what the events'
 * documents take in the store; at its end, when the result holds the same
 * bytes, the events' data is dropped and read back from the result
 * (al_run_events_after): each byte of output is stored once. */
typedef struct output_sent {
    int64_t at;
    int64_t stored;
    struct sha256_ctx hash;
} output_sent;

/* A run's output events as paced (al_pace_output): how many so far, each
 * stream's bytes held to be joined, and what each stream's events carried. */
typedef struct output_pace {
    int events;
    struct {
        char *buf;
        size_t len;
        uint64_t since;
    } b[2];
    output_sent sent[2];
} output_pace;

/* The result's output (stdout, stderr) redacted with DLP: how many times. */
int al_output_redact(al_dlp *dlp, json_t *result);
void al_pace_init(output_pace *op);
/* Stream I's (0 stdout, 1 stderr) held bytes as an event of RUN_ID, if any. */
void al_pace_flush(al_service *s, const char *run_id, output_pace *op, int i);
/* N redacted BYTES of stream I: an event now, or held to be joined. */
void al_pace_output(al_service *s, const char *run_id, output_pace *op, int i, const char *bytes, size_t n);
/* Which of the streams RESULT (redacted) holds exactly as OP's events
 * carried them, into RET_SAME; and what the events of the others take in
 * the store, into *RET_STORED. */
void al_output_in_result(json_t *result, output_pace *op, bool ret_same[2], int64_t *ret_stored);
/* RESULT as the store keeps it (its output that is not text once, as
 * bytes): malloc'd JSON text, or NULL. */
char *al_result_text(json_t *result);
