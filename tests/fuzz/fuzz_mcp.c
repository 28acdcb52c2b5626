/*
 * Fuzz target for MCP's JSON-RPC envelope (src/api/mcp_rpc.c): the body
 * of POST /mcp, all of which a client controls. Each input is checked
 * against what the parser promises its caller: a message of the kind it
 * says, or an error answer that is a JSON-RPC 2.0 error with a code, on
 * one line (an SSE data line, a stdio line), whatever bytes the input held.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "api/mcp_rpc.h"


static long n_request, n_notification, n_response, n_error;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size heap copy, so a read past the end is caught */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    al_mcp_msg m;
    json_t *err = NULL;
    unsigned status = 0;
    int r = al_mcp_parse(buf, size, &m, &err, &status);
    if (r == 0) {
        if (err || !m.doc || m.kind >= _AL_MCP_KIND_MAX)
            abort();
        if (m.kind == AL_MCP_REQUEST && (!m.method || !(json_is_string(m.id) || json_is_integer(m.id))))
            abort();
        if (m.kind == AL_MCP_NOTIFICATION && (!m.method || m.id))
            abort();
        if (m.kind == AL_MCP_RESPONSE && (m.method || !m.id))
            abort();
        if (m.params && !json_is_object(m.params))
            abort();
        n_request += m.kind == AL_MCP_REQUEST;
        n_notification += m.kind == AL_MCP_NOTIFICATION;
        n_response += m.kind == AL_MCP_RESPONSE;
        /* what the handler does next with a request: negotiate a version */
        if (m.method && strcmp(m.method, "initialize") == 0) {
            const char *v = al_mcp_negotiate(json_string_value(json_object_get(m.params, "protocolVersion")));
            if (!al_mcp_version_supported(v))
                abort();
        }
        al_mcp_msg_free(&m);
    } else {
        if (status < 200 || status > 499 || m.doc)
            abort();
        if (err) {
            json_t *e = json_object_get(err, "error");
            if (strcmp(json_string_value(json_object_get(err, "jsonrpc")) ?: "", "2.0") != 0 ||
                !json_is_integer(json_object_get(e, "code")) || !json_is_string(json_object_get(e, "message")) ||
                !json_object_get(err, "id"))
                abort();
            char *t = json_dumps(err, JSON_COMPACT);
            if (!t || strchr(t, '\n'))
                abort(); /* one SSE data line, one stdio line */
            free(t);
            json_decref(err);
        } else if (status != 202) {
            abort(); /* nothing to say is only for notifications */
        }
        n_error++;
    }
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-mcp: %ld requests, %ld notifications, %ld responses, %ld refused\n", n_request, n_notification,
           n_response, n_error);
    return n_request && n_notification && n_response && n_error ? 0 : 1;
}
