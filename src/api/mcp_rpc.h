/* MCP's JSON-RPC envelope and protocol versions (mcp_rpc.c): pure. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "../util/util.h"

/* The protocol versions served: the one the official TypeScript SDK
 * negotiates as latest, and the one before it. */
#define AL_MCP_VERSION_LATEST "2025-11-25"
#define AL_MCP_VERSION_PREVIOUS "2025-06-18"

bool al_mcp_version_supported(const char *v);
/* The version to answer initialize with when the client asks for WANTED. */
const char *al_mcp_negotiate(const char *wanted);

typedef enum al_mcp_kind {
    AL_MCP_REQUEST,      /* method and id: answered */
    AL_MCP_NOTIFICATION, /* method, no id: 202 */
    AL_MCP_RESPONSE,     /* id and result or error: 202 (we send no requests) */
    _AL_MCP_KIND_MAX,
} al_mcp_kind;

typedef struct al_mcp_msg {
    json_t *doc; /* owned */
    al_mcp_kind kind;
    json_t *id;         /* borrowed from doc: a string or an integer; NULL for a notification */
    const char *method; /* borrowed; NULL for a response */
    json_t *params;     /* borrowed: an object, or NULL when absent */
} al_mcp_msg;

/*
 * One message of the Streamable HTTP transport (one per POST: no batches).
 * 0 and RET; or -EINVAL with *RET_STATUS the HTTP status to answer with and
 * *RET_ERROR the JSON-RPC error response to send (NULL: answer nothing, 202).
 */
int al_mcp_parse(const char *body, size_t len, al_mcp_msg *ret, json_t **ret_error, unsigned *ret_status);
void al_mcp_msg_free(al_mcp_msg *m);

/* A JSON-RPC error response (ID may be NULL: null). */
json_t *al_mcp_rpc_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A JSON-RPC result response; steals RESULT (NULL: an internal error). */
json_t *al_mcp_rpc_result(json_t *id, json_t *result);
