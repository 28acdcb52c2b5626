/*
 * MCP's JSON-RPC 2.0 envelope: what one POST /mcp body is (a request, a
 * notification or a response), and the error to answer when it is none of
 * them; and the protocol versions. Pure (no HTTP, no store), so the fuzz
 * target in tests/fuzz drives exactly what a client controls.
 */
#include <string.h>

#include "mcp_rpc.h"

bool al_mcp_version_supported(const char *v) {
    return v && (strcmp(v, AL_MCP_VERSION_LATEST) == 0 || strcmp(v, AL_MCP_VERSION_PREVIOUS) == 0);
}

const char *al_mcp_negotiate(const char *wanted) {
    /* the client's version when we speak it, else our latest: the client
     * then decides whether it can go on */
    return al_mcp_version_supported(wanted) ? wanted : AL_MCP_VERSION_LATEST;
}

json_t *al_mcp_rpc_error(json_t *id, int code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the message quotes what the client sent (a method, a tool name, a
     * URI, a header, the parser's view of a bad body), cut at a byte
     * count: made valid UTF-8, so every error has its JSON-RPC reply */
    al_utf8_fix(msg);
    return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code", code,
                     "message", msg);
}

json_t *al_mcp_rpc_result(json_t *id, json_t *result) {
    if (!result)
        return al_mcp_rpc_error(id, -32603, "Internal error: the result could not be built");
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result", result);
}

static int fail(json_t **ret_error, unsigned *ret_status, unsigned status, json_t *err) {
    *ret_error = err;
    *ret_status = status;
    return -EINVAL;
}

int al_mcp_parse(const char *body, size_t len, al_mcp_msg *ret, json_t **ret_error, unsigned *ret_status) {
    memset(ret, 0, sizeof *ret);
    *ret_error = NULL;
    *ret_status = 200;
    json_error_t jerr;
    /* any JSON text: a string or a number is an invalid request, not a parse error */
    json_t *msg = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!msg)
        return fail(ret_error, ret_status, 400, al_mcp_rpc_error(NULL, -32700, "Parse error: %s", jerr.text));
    int r = -EINVAL;
    json_t *id = NULL;
    if (json_is_array(msg)) {
        /* JSON-RPC batches left MCP with 2025-06-18, the oldest version served here */
        r = fail(ret_error, ret_status, 400,
                 al_mcp_rpc_error(NULL, -32600,
                                  "Invalid Request: batches are not "
                                  "supported; send one JSON-RPC message per request"));
        goto out;
    }
    if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "jsonrpc")) ||
        strcmp(json_string_value(json_object_get(msg, "jsonrpc")), "2.0") != 0) {
        r = fail(ret_error, ret_status, 400,
                 al_mcp_rpc_error(NULL, -32600, "Invalid Request: want a JSON-RPC 2.0 object"));
        goto out;
    }
    id = json_object_get(msg, "id");
    if (id && !json_is_string(id) && !json_is_integer(id)) {
        r = fail(ret_error, ret_status, 400,
                 al_mcp_rpc_error(NULL, -32600, "Invalid Request: id must be a string or an integer"));
        goto out;
    }
    json_t *method = json_object_get(msg, "method");
    if (!method) {
        /* a response to a request of ours */
        if (!id || !(json_object_get(msg, "result") || json_object_get(msg, "error"))) {
            r = fail(ret_error, ret_status, 400, al_mcp_rpc_error(id, -32600, "Invalid Request: no method"));
            goto out;
        }
        ret->kind = AL_MCP_RESPONSE;
    } else if (!json_is_string(method)) {
        r = fail(ret_error, ret_status, 400, al_mcp_rpc_error(id, -32600, "Invalid Request: method must be a string"));
        goto out;
    } else {
        ret->kind = id ? AL_MCP_REQUEST : AL_MCP_NOTIFICATION;
        ret->method = json_string_value(method);
        ret->params = json_object_get(msg, "params");
        if (ret->params && !json_is_object(ret->params)) {
            /* a notification with bad params is simply dropped: no one waits for an answer */
            r = fail(ret_error, ret_status, id ? 200 : 202,
                     id ? al_mcp_rpc_error(id, -32602, "Invalid params: params must be an object") : NULL);
            goto out;
        }
    }
    ret->id = id;
    ret->doc = msg;
    return 0;
out:
    json_decref(msg);
    memset(ret, 0, sizeof *ret);
    return r;
}

void al_mcp_msg_free(al_mcp_msg *m) {
    json_decref(m->doc);
    memset(m, 0, sizeof *m);
}
