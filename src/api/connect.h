/*
 * The Connect protocol's framing (connectrpc.com, protocol v1 with the JSON
 * codec), which E2B's envd speaks and its SDKs expect: a streaming call's
 * request body is one envelope, its response a sequence of envelopes ended
 * by an end-stream frame; a unary call's error is a JSON body with a code
 * name and a matching HTTP status. Pure (no HTTP, no store), so that a unit
 * test and a fuzzer can drive it with hostile bytes alone.
 *
 * An envelope: 1 flags byte, a 4-byte big-endian length, that many bytes
 * of JSON. Flag 0x01 is a compressed message (no compression is ever
 * offered, so one is refused); 0x02 marks the end-stream frame.
 */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define AL_CONNECT_FLAG_COMPRESSED 0x01
#define AL_CONNECT_FLAG_END_STREAM 0x02
#define AL_CONNECT_HEADER 5

/* Connect's error codes (connectrpc.com/docs/protocol#error-codes) that
 * airlock answers, and their names on the wire. */
typedef enum al_connect_code {
    AL_CONNECT_CANCELED,
    AL_CONNECT_UNKNOWN,
    AL_CONNECT_INVALID_ARGUMENT,
    AL_CONNECT_DEADLINE_EXCEEDED,
    AL_CONNECT_NOT_FOUND,
    AL_CONNECT_ALREADY_EXISTS,
    AL_CONNECT_PERMISSION_DENIED,
    AL_CONNECT_RESOURCE_EXHAUSTED,
    AL_CONNECT_FAILED_PRECONDITION,
    AL_CONNECT_ABORTED,
    AL_CONNECT_UNIMPLEMENTED,
    AL_CONNECT_INTERNAL,
    AL_CONNECT_UNAVAILABLE,
    AL_CONNECT_UNAUTHENTICATED,
    _AL_CONNECT_CODE_MAX,
} al_connect_code;

/* Its name ("not_found") and the HTTP status a unary error carries. */
const char *al_connect_code_name(al_connect_code c);
int al_connect_code_http(al_connect_code c);

/* A request's body (LEN bytes of BUF) as one envelope of at most MAX bytes
 * of JSON, the whole body: its message, a JSON object, in *RET (the caller
 * owns it). 0; -EINVAL (not one whole envelope, or a flag set, or no JSON
 * object), -EPROTONOSUPPORT (compressed), -E2BIG (longer than MAX); WHY
 * says which in words fit for the client. */
int al_connect_decode(const void *buf, size_t len, size_t max, json_t **ret, const char **why);
/* The envelope of MSG with FLAGS (its JSON compact) in *RET (malloc'd), of
 * *RET_LEN bytes. 0 or -ENOMEM. */
int al_connect_encode(unsigned flags, const json_t *msg, char **ret, size_t *ret_len);
/* The end-stream frame: {} (CODE < 0: a clean end) or {"error": {"code",
 * "message"}}. 0 or -ENOMEM. */
int al_connect_end_stream(int code, const char *message, char **ret, size_t *ret_len);
/* A unary call's error body {"code", "message"} (owned). */
json_t *al_connect_error(al_connect_code code, const char *message);
