/* The answers every surface queues on a connection: a JSON document, an
 * error ({error: {code, message}}), text, a core part's status and
 * document (a 429 saying when to come back), a replayed idempotent answer.
 * One place, so that every surface answers the same way. */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>

#include "../core/service.h"

/* The shape of a surface's errors: airlock's {error: {code, message}},
 * or Piston's, whose clients read a top-level message (piston-client's
 * .message): {message, error: {code, message}}. */
typedef enum al_reply_shape {
    AL_REPLY_AIRLOCK,
    AL_REPLY_PISTON,
    _AL_REPLY_SHAPE_MAX,
} al_reply_shape;
/* The shape of every error this thread answers from now on: http.c sets it
 * from the path before each request is looked at, so that every answer of
 * it (the route table's 401 and 404, a 413 or 429 of the server glue, a
 * handler's 400, the core's refusals) has its surface's shape, whoever
 * makes it. A thread answers one connection at a time (libmicrohttpd's
 * thread per connection), so the setting is the request's. */
void al_reply_set_shape(al_reply_shape shape);

/* DOC (whose reference this takes; NULL: a 500 saying it could not be built). */
enum MHD_Result al_reply_json(struct MHD_Connection *c, unsigned status, json_t *doc);
/* An answer of STATUS with no body (204, a 405 to a bodiless method), with
 * the header NAME: VALUE when NAME. */
enum MHD_Result al_reply_empty(struct MHD_Connection *c, unsigned status, const char *name, const char *value);
/* TEXT (JSON, taken; NULL: no answer) answered with STATUS, not stored by
 * caches, with the header NAME: VALUE when NAME: the one maker of a JSON
 * answer, whatever shape its surface gives it. */
enum MHD_Result al_reply_json_text(struct MHD_Connection *c, unsigned status, char *text, const char *name,
                                   const char *value);
enum MHD_Result al_reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* TEXT (malloc'd; this takes it) as TYPE. */
enum MHD_Result al_reply_text(struct MHD_Connection *c, unsigned status, const char *type, char *text);
/* TEXT lives as long as the process: answered without a copy. */
enum MHD_Result al_reply_static(struct MHD_Connection *c, const char *type, const char *text);
/* A status and document from a connection-free part (runs, skills); a 429
 * says when to come back. */
enum MHD_Result al_reply_doc(struct MHD_Connection *c, unsigned status, json_t *doc);
/* al_reply_doc, saying that the answer is what an earlier request with the
 * same Idempotency-Key made. */
enum MHD_Result al_reply_doc_idem(struct MHD_Connection *c, unsigned status, json_t *doc, const al_idem *k);
/* A person holds their maximum (MAX, the setting KEY) of long-held
 * requests (WHAT): 429, come back when one has ended. */
enum MHD_Result al_reply_too_many(struct MHD_Connection *c, const char *what, int max, const char *key);
/* 401, with the scheme in WWW-Authenticate (RFC 6750), on every keyed route. */
enum MHD_Result al_reply_unauthorized(struct MHD_Connection *c);
/* 200, a text/event-stream that READ fills from CLS (DONE frees CLS, also
 * when no answer could be made): SSE's and MCP's streams. */
enum MHD_Result al_reply_event_stream(struct MHD_Connection *c, MHD_ContentReaderCallback read, void *cls,
                                      MHD_ContentReaderFreeCallback done);
/* 200, a body of CTYPE (Content-Disposition DISPOSITION when not NULL)
 * of unknown length that READ fills from CLS, as al_reply_event_stream. */
enum MHD_Result al_reply_stream(struct MHD_Connection *c, const char *ctype, const char *disposition,
                                MHD_ContentReaderCallback read, void *cls, MHD_ContentReaderFreeCallback done);
/* The next bytes of a stream for libmicrohttpd (at most MAX into OUT),
 * written once for every stream: what *BUF holds from *POS to *LEN, else
 * the buffer is freed and emptied and FILL(CLS) makes the next piece (0),
 * or ends the stream (a negative MHD_CONTENT_READER_END_*, given back). */
ssize_t al_reply_drain(char **buf, size_t *len, size_t *pos, ssize_t (*fill)(void *cls), void *cls, char *out,
                       size_t max);
/* 405, with the methods the path takes (ALLOW, "GET, POST") in Allow and
 * the message. */
enum MHD_Result al_reply_method(struct MHD_Connection *c, const char *allow);
/* The same, saying WHY after the methods ("use GET: ..."). */
enum MHD_Result al_reply_method_why(struct MHD_Connection *c, const char *allow, const char *why);
