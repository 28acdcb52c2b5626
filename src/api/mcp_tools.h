/* The tools airlock offers over MCP (mcp_tools.c), for the transport (mcp.c). */
#pragma once

#include <jansson.h>

#include "../core/service.h"

/* The tools P may call: code_execution and run_skill_script when on the
 * workspace's allow-list, list_artifacts and read_artifact always. */
json_t *al_mcp_tools_list(al_service *s, const al_principal *p);

/* resources/list: the workspace's newest artifacts as resources. */
json_t *al_mcp_resources_list(al_service *s, const al_principal *p);
/* resources/read of an artifact URI: 0 and *RET ({contents}); -ENOENT no
 * such artifact in P's workspace; -EFBIG too large to send. */
int al_mcp_resource_read(al_service *s, const al_principal *p, const char *uri, json_t **ret);

/* A call that started a run and is followed to its end. */
typedef struct al_mcp_call al_mcp_call;

/*
 * tools/call of NAME with ARGS. -ENOENT: no such tool (a protocol error).
 * Otherwise 0 and either *RET_RESULT (a CallToolResult, done) or *RET_CALL
 * (a run was started: step it until it gives the result). IDEM (may be
 * NULL): the request's Idempotency-Key; a retry with it follows the run
 * the first attempt started.
 */
int al_mcp_tool_call(al_service *s, const al_principal *p, const char *name, json_t *args, json_t *progress_token,
                     al_idem *idem, al_mcp_call **ret_call, json_t **ret_result);

/*
 * Wait at most WAIT_S for news of the call's run. Appends the JSON-RPC
 * notifications to send (progress when the request had a token, output and
 * state as log messages) to NOTES; sets *RET_RESULT (a CallToolResult) when
 * the call is over: the run ended, was denied, or waited too long.
 * SEND_OUTPUT: whether live output is wanted as log messages. Returns true
 * when it waited and nothing happened (time for a keepalive).
 */
bool al_mcp_call_step(al_mcp_call *k, int wait_s, bool send_output, json_t *notes, json_t **ret_result);
const char *al_mcp_call_run_id(const al_mcp_call *k);
void al_mcp_call_free(al_mcp_call *k);
