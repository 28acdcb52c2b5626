/*
 * A run's output on its way out of the runner: redacted as bytes, paced
 * into the stream events its followers read, and kept once in the store
 * (the events that carried the same bytes as the result give theirs up).
 */
#include <string.h>

#include "run_output.h"
#include "service.h"
#include "service_int.h"

/* The result's output as the agent will see it: redacted, and the count.
 * Output is bytes (NULs, bytes that are not UTF-8): redacted as bytes, and
 * shown as al_output_set does. */
int al_output_redact(al_dlp *dlp, json_t *result) {
    int count = 0;
    static const char *const keys[] = { "stdout", "stderr" };
    for (size_t i = 0; dlp && json_is_object(result) && i < 2; i++) {
        size_t len = 0, n = 0;
        char *bytes = al_output_get(result, keys[i], &len);
        if (!bytes)
            continue;
        char *red = al_dlp_redact(dlp, bytes, len, &count, &n);
        free(bytes);
        if (!red || al_output_set(result, keys[i], red, n) < 0) {
            /* not shown unredacted, whatever failed */
            json_object_set_new(result, keys[i], json_string(""));
            char k[32];
            snprintf(k, sizeof k, "%s_base64", keys[i]);
            json_object_del(result, k);
        }
        free(red);
    }
    /* the error's message too: a failed install's names the lines of its
     * output that say why (the installing events are redacted; so is this) */
    json_t *e = dlp && json_is_object(result) ? json_object_get(result, "error") : NULL;
    const char *m = json_string_value(json_object_get(e, "message"));
    if (m) {
        size_t n = 0;
        char *red = al_dlp_redact(dlp, m, strlen(m), &count, &n);
        json_t *v = red ? json_stringn(red, n) : NULL;
        json_object_set_new(e, "message", v ? v : json_string("")); /* never left unredacted */
        free(red);
    }
    return count;
}

/* An output event of the run's stream: redacted bytes, shown as al_output_set
 * does, with their place in the stream. */
static void output_event(al_service *s, const char *run_id, output_sent *sent, const char *type, const char *bytes,
                         size_t len) {
    json_t *o = json_object();
    char *text = o && al_output_set(o, "data", bytes, len) == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    al_error err = { 0 };
    if (!text || al_store_output_event_append(s->store, run_id, type, text, sent->at, (int64_t)len, &err) < 0) {
        /* lost: said, not silent; and the stream no longer matches the
         * result, so its bytes stay in the events it has */
        al_service_log(s, AL_LOG_ERROR, "event.failed", json_pack("{s:s, s:s, s:s}", "run_id", run_id, "type", type, "error",
                                                    text ? err.msg : "the event's document could not be built"));
        sent->at = -1;
    } else if (sent->at >= 0) {
        sent->at += (int64_t)len;
        sha256_update(&sent->hash, len, (const uint8_t *)bytes);
    }
    if (text)
        sent->stored += (int64_t)strlen(text);
    free(text);
    al_service_wake_run(s, run_id);
}

/* A run's output events: one per piece the redactor releases while they are
 * few; past OUTPUT_EVENTS_MAX, pieces are joined up to OUTPUT_PIECE bytes
 * (or OUTPUT_HOLD_MS of output), so that whatever a run prints, its stored
 * events and its followers' wake-ups stay bounded (a line per write used to
 * be an event each: a million for a run that printed a million lines). */
#define OUTPUT_EVENTS_MAX 1000
#define OUTPUT_PIECE (64 * 1024)
#define OUTPUT_HOLD_MS 250

void al_pace_init(output_pace *op) {
    *op = (output_pace){ 0 };
    for (int i = 0; i < 2; i++)
        sha256_init(&op->sent[i].hash);
}

void al_pace_flush(al_service *s, const char *run_id, output_pace *op, int i) {
    if (op->b[i].len == 0)
        return;
    output_event(s, run_id, &op->sent[i], i ? "stderr" : "stdout", op->b[i].buf, op->b[i].len);
    op->events++;
    op->b[i].len = 0;
}

void al_pace_output(al_service *s, const char *run_id, output_pace *op, int i, const char *bytes, size_t n) {
    if (op->events < OUTPUT_EVENTS_MAX && op->b[i].len == 0) {
        output_event(s, run_id, &op->sent[i], i ? "stderr" : "stdout", bytes, n);
        op->events++;
        return;
    }
    char *nb = realloc(op->b[i].buf, op->b[i].len + n);
    if (!nb) {
        al_pace_flush(s, run_id, op, i);
        output_event(s, run_id, &op->sent[i], i ? "stderr" : "stdout", bytes, n);
        return;
    }
    op->b[i].buf = nb;
    if (op->b[i].len == 0)
        op->b[i].since = al_now_ms();
    memcpy(op->b[i].buf + op->b[i].len, bytes, n);
    op->b[i].len += n;
    if (op->b[i].len >= OUTPUT_PIECE || al_now_ms() - op->b[i].since >= OUTPUT_HOLD_MS)
        al_pace_flush(s, run_id, op, i);
}

/* Which of the streams RESULT (redacted) holds exactly as OP's events
 * carried them, into RET_SAME; and what the events of the others take in
 * the store, into *RET_STORED. */
void al_output_in_result(json_t *result, output_pace *op, bool ret_same[2], int64_t *ret_stored) {
    static const char *const keys[] = { "stdout", "stderr" };
    *ret_stored = 0;
    for (int i = 0; i < 2; i++) {
        ret_same[i] = false;
        if (!op)
            continue;
        output_sent *st = &op->sent[i];
        size_t len = 0;
        char *bytes = st->at > 0 && json_is_object(result) ? al_output_get(result, keys[i], &len) : NULL;
        if (bytes && (int64_t)len == st->at) {
            char streamed[65], kept[65];
            al_sha256_finish_hex(&st->hash, streamed);
            al_sha256_hex(bytes, len, kept);
            ret_same[i] = strcmp(streamed, kept) == 0;
        }
        free(bytes);
        if (!ret_same[i])
            *ret_stored += st->stored;
    }
}

/* RESULT as the store keeps it: output that is not text is kept once, as
 * its exact bytes (KEY_base64); the text that shows it (U+FFFD for each
 * byte that is not UTF-8, up to three times its size) is made again from
 * them when the run is read (al_run_json). */
char *al_result_text(json_t *result) {
    if (!result)
        return NULL;
    json_t *kept = json_copy(result);
    static const char *const keys[][2] = { { "stdout", "stdout_base64" }, { "stderr", "stderr_base64" } };
    for (size_t i = 0; kept && i < ELEMENTSOF(keys); i++)
        if (json_is_string(json_object_get(kept, keys[i][1])))
            json_object_del(kept, keys[i][0]);
    char *text = kept ? json_dumps(kept, JSON_COMPACT) : NULL;
    json_decref(kept);
    return text;
}

