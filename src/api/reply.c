/* The answers every surface queues (reply.h). */
#include "reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../util/util.h"

static _Thread_local al_reply_shape shape = AL_REPLY_AIRLOCK;

void al_reply_set_shape(al_reply_shape s) { shape = s < _AL_REPLY_SHAPE_MAX ? s : AL_REPLY_AIRLOCK; }

/* DOC, an answer of STATUS, in the shape of this request's surface: an
 * error of Piston's has its message at the top too (airlock's error object
 * stays beside, for its code). */
static json_t *shaped(json_t *doc, unsigned status) {
    json_t *m = json_object_get(json_object_get(doc, "error"), "message");
    if (shape == AL_REPLY_PISTON && status >= 400 && json_is_string(m) && !json_object_get(doc, "message"))
        json_object_set(doc, "message", m);
    return doc;
}

/* TEXT (malloc'd, taken) as a JSON answer of STATUS that no cache keeps,
 * with the header NAME: VALUE beside when NAME is not NULL. */
enum MHD_Result al_reply_json_text(struct MHD_Connection *c, unsigned status, char *text, const char *name,
                                   const char *value) {
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    /* a message may quote what a client sent (an id, a path): no browser
     * may take the answer for anything but the JSON it says it is */
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (name)
        MHD_add_response_header(r, name, value);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result al_reply_empty(struct MHD_Connection *c, unsigned status, const char *name, const char *value) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    if (name)
        MHD_add_response_header(r, name, value);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result al_reply_json(struct MHD_Connection *c, unsigned status, json_t *doc) {
    char *s = doc ? json_dumps(shaped(doc, status), JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!s) {
        /* a document that could not be built still gets an answer, not a
         * dropped connection */
        status = 500;
        s = strdup(shape == AL_REPLY_PISTON
                       ? "{\"message\":\"the answer could not be built\",\"error\":{\"code\":\"internal\","
                         "\"message\":\"the answer could not be built\"}}"
                       : "{\"error\":{\"code\":\"internal\",\"message\":\"the answer could not be built\"}}");
        if (!s)
            return MHD_NO;
    }
    return al_reply_json_text(c, status, s, NULL, NULL);
}

enum MHD_Result al_reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the message may quote what a client sent, cut at a byte count */
    al_utf8_fix(msg);
    return al_reply_json(c, status, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
}

enum MHD_Result al_reply_text(struct MHD_Connection *c, unsigned status, const char *type, char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* TEXT lives as long as the process: answered without a copy (it is asked
 * for without a key) */
enum MHD_Result al_reply_static(struct MHD_Connection *c, const char *type, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* A status and document from a connection-free part (runs, skills); a 429
 * says when to come back. */
enum MHD_Result al_reply_doc(struct MHD_Connection *c, unsigned status, json_t *doc) {
    if (!doc || status < 200 || status > 599) {
        json_decref(doc);
        return al_reply_error(c, 500, "internal", "no answer was made (status %u)", status);
    }
    if (status != 429)
        return al_reply_json(c, status, doc);
    char *text = json_dumps(shaped(doc, 429), JSON_COMPACT);
    json_decref(doc);
    return text ? al_reply_json_text(c, 429, text, "Retry-After", "5") : MHD_NO;
}

/* reply_doc, saying that the answer is what an earlier request with the
 * same Idempotency-Key made */
enum MHD_Result al_reply_doc_idem(struct MHD_Connection *c, unsigned status, json_t *doc, const al_idem *k) {
    if (!k->replayed || !doc || status < 200 || status > 299)
        return al_reply_doc(c, status, doc);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return text ? al_reply_json_text(c, status, text, "Idempotent-Replayed", "true") : MHD_NO;
}

/* A person holds their maximum of long-held requests (WHAT): 429, come back
 * when one has ended. */
enum MHD_Result al_reply_too_many(struct MHD_Connection *c, const char *what, int max, const char *key) {
    char msg[300];
    snprintf(msg, sizeof msg, "you have %d %s under way already, the most one person may (%s); retry when one has ended",
             max, what, key);
    return al_reply_doc(c, 429, json_pack("{s:{s:s, s:s}}", "error", "code", "too_many_requests", "message", msg));
}

/* 401, saying the scheme in WWW-Authenticate (RFC 6750): MCP clients look
 * for it there */
enum MHD_Result al_reply_unauthorized(struct MHD_Connection *c) {
    json_t *doc = json_pack("{s:{s:s, s:s}}", "error", "code", "unauthorized", "message",
                            "a valid API key is required (Authorization: Bearer KEY)");
    char *m = doc ? json_dumps(shaped(doc, 401), JSON_COMPACT) : NULL;
    json_decref(doc);
    return m ? al_reply_json_text(c, 401, m, "WWW-Authenticate", "Bearer realm=\"airlock\"") : MHD_NO;
}

enum MHD_Result al_reply_method(struct MHD_Connection *c, const char *allow) { return al_reply_method_why(c, allow, NULL); }

enum MHD_Result al_reply_method_why(struct MHD_Connection *c, const char *allow, const char *why) {
    char msg[512];
    snprintf(msg, sizeof msg, "use %s", allow);
    /* "GET, POST" reads "use GET or POST" as it always did */
    char *comma = strrchr(msg, ',');
    if (comma) {
        char tail[64];
        snprintf(tail, sizeof tail, "%s", comma + 2);
        snprintf(comma, sizeof msg - (size_t)(comma - msg), " or %s", tail);
    }
    if (why) {
        size_t o = strlen(msg);
        snprintf(msg + o, sizeof msg - o, ": %s", why);
    }
    char *text = NULL;
    json_t *doc = json_pack("{s:{s:s, s:s}}", "error", "code", "method_not_allowed", "message", msg);
    text = doc ? json_dumps(shaped(doc, 405), JSON_COMPACT) : NULL;
    json_decref(doc);
    return al_reply_json_text(c, 405, text, "Allow", allow);
}

ssize_t al_reply_drain(char **buf, size_t *len, size_t *pos, ssize_t (*fill)(void *cls), void *cls, char *out,
                       size_t max) {
    while (*pos >= *len) {
        free(*buf);
        *buf = NULL;
        *len = *pos = 0;
        ssize_t r = fill(cls);
        if (r < 0)
            return r;
    }
    size_t n = *len - *pos < max ? *len - *pos : max;
    memcpy(out, *buf + *pos, n);
    *pos += n;
    return (ssize_t)n;
}

enum MHD_Result al_reply_stream(struct MHD_Connection *c, const char *ctype, const char *disposition,
                                MHD_ContentReaderCallback read, void *cls, MHD_ContentReaderFreeCallback done) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, read, cls, done);
    if (!r) {
        done(cls);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    /* an export of what tenants wrote (audit details): never sniffed, and
     * a sandbox, not this origin, should a browser ever show it */
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", "sandbox");
    if (disposition)
        MHD_add_response_header(r, "Content-Disposition", disposition);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result al_reply_event_stream(struct MHD_Connection *c, MHD_ContentReaderCallback read, void *cls,
                                      MHD_ContentReaderFreeCallback done) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, read, cls, done);
    if (!r) {
        done(cls);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}
