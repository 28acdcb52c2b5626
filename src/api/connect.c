/* The Connect protocol's framing (connect.h). */
#include "connect.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int http;
} codes[_AL_CONNECT_CODE_MAX] = {
    /* the HTTP statuses of connectrpc.com/docs/protocol#error-codes */
    [AL_CONNECT_CANCELED] = { "canceled", 499 },
    [AL_CONNECT_UNKNOWN] = { "unknown", 500 },
    [AL_CONNECT_INVALID_ARGUMENT] = { "invalid_argument", 400 },
    [AL_CONNECT_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
    [AL_CONNECT_NOT_FOUND] = { "not_found", 404 },
    [AL_CONNECT_ALREADY_EXISTS] = { "already_exists", 409 },
    [AL_CONNECT_PERMISSION_DENIED] = { "permission_denied", 403 },
    [AL_CONNECT_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
    [AL_CONNECT_FAILED_PRECONDITION] = { "failed_precondition", 400 },
    [AL_CONNECT_ABORTED] = { "aborted", 409 },
    [AL_CONNECT_UNIMPLEMENTED] = { "unimplemented", 501 },
    [AL_CONNECT_INTERNAL] = { "internal", 500 },
    [AL_CONNECT_UNAVAILABLE] = { "unavailable", 503 },
    [AL_CONNECT_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

const char *al_connect_code_name(al_connect_code c) {
    return (unsigned)c < _AL_CONNECT_CODE_MAX ? codes[c].name : "unknown";
}

int al_connect_code_http(al_connect_code c) { return (unsigned)c < _AL_CONNECT_CODE_MAX ? codes[c].http : 500; }

int al_connect_decode(const void *buf, size_t len, size_t max, json_t **ret, const char **why) {
    const unsigned char *b = buf;
    *ret = NULL;
    if (!b || len < AL_CONNECT_HEADER) {
        *why = "the request must be one Connect envelope (flags, length, JSON)";
        return -EINVAL;
    }
    uint32_t n = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
    if (b[0] & AL_CONNECT_FLAG_COMPRESSED) {
        *why = "compressed messages are not accepted (no Connect-Content-Encoding is offered)";
        return -EPROTONOSUPPORT;
    }
    if (b[0] != 0) {
        *why = "the request envelope has flags set that a request may not carry";
        return -EINVAL;
    }
    if (n > max) {
        *why = "the request message is larger than the service takes";
        return -E2BIG;
    }
    /* exactly one envelope: a server-streaming request has one message */
    if ((size_t)n != len - AL_CONNECT_HEADER) {
        *why = "the request body must be exactly one Connect envelope";
        return -EINVAL;
    }
    json_error_t e;
    json_t *msg = json_loadb((const char *)b + AL_CONNECT_HEADER, n, JSON_REJECT_DUPLICATES, &e);
    if (!json_is_object(msg)) {
        json_decref(msg);
        *why = "the request message must be a JSON object";
        return -EINVAL;
    }
    *ret = msg;
    return 0;
}

int al_connect_encode(unsigned flags, const json_t *msg, char **ret, size_t *ret_len) {
    *ret = NULL;
    *ret_len = 0;
    char *text = json_dumps(msg, JSON_COMPACT);
    if (!text)
        return -ENOMEM;
    size_t n = strlen(text);
    if (n > UINT32_MAX) {
        free(text);
        return -E2BIG;
    }
    char *b = malloc(AL_CONNECT_HEADER + n);
    if (!b) {
        free(text);
        return -ENOMEM;
    }
    b[0] = (char)(flags & 0xff);
    b[1] = (char)(n >> 24);
    b[2] = (char)(n >> 16);
    b[3] = (char)(n >> 8);
    b[4] = (char)n;
    memcpy(b + AL_CONNECT_HEADER, text, n);
    free(text);
    *ret = b;
    *ret_len = AL_CONNECT_HEADER + n;
    return 0;
}

json_t *al_connect_error(al_connect_code code, const char *message) {
    return json_pack("{s:s, s:s}", "code", al_connect_code_name(code), "message", message ? message : "");
}

int al_connect_end_stream(int code, const char *message, char **ret, size_t *ret_len) {
    json_t *doc = code < 0 ? json_object()
                           : json_pack("{s:o}", "error", al_connect_error((al_connect_code)code, message));
    if (!doc)
        return -ENOMEM;
    int r = al_connect_encode(AL_CONNECT_FLAG_END_STREAM, doc, ret, ret_len);
    json_decref(doc);
    return r;
}
