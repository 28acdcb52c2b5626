/* MCP: the Model Context Protocol over Streamable HTTP, at /mcp. */
#pragma once

#include <microhttpd.h>

#include "service.h"

/* The protocol versions served: the one the official TypeScript SDK
 * negotiates as latest, and the one before it. */
#define AL_MCP_VERSION_LATEST "2025-11-25"
#define AL_MCP_VERSION_PREVIOUS "2025-06-18"

typedef struct al_mcp al_mcp;

int al_mcp_new(al_mcp **ret);
void al_mcp_free(al_mcp *m);

/* One request to /mcp by P (already authenticated): METHOD is POST, GET or
 * DELETE, BODY the request body (NULL and TOO_LARGE past the cap). Queues
 * the answer on C. */
enum MHD_Result al_mcp_handle(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *method, const char *body, size_t len, bool too_large);
