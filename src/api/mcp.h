/* MCP: the Model Context Protocol over Streamable HTTP, at /mcp. */
#pragma once

#include <microhttpd.h>

#include "mcp_rpc.h"
#include "../core/service.h"

typedef struct al_mcp al_mcp;

int al_mcp_new(al_mcp **ret);
void al_mcp_free(al_mcp *m);

/* One request to /mcp by P (already authenticated): METHOD is POST, GET or
 * DELETE, BODY the request body (NULL and TOO_LARGE past the cap). Queues
 * the answer on C. */
enum MHD_Result al_mcp_handle(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *method, const char *body, size_t len, bool too_large);
