/* What MCP's tools answer with, for the tools (mcp_tools.c) and the
 * artifacts they read (mcp_results.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../core/service.h"

#define URI_PREFIX "airlock://artifacts/"
#define INLINE_IMAGE_MAX (512u << 10) /* a PNG or JPEG up to this is also sent inline */

/* {type: text, text} */
json_t *al_mcp_text_item(const char *text);
/* A CallToolResult with isError, its text made as printf does. */
json_t *al_mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Append S to the growing buffer B (LEN, CAP). */
void al_mcp_append_str(char **b, size_t *len, size_t *cap, const char *s);
/* N bytes of DATA as base64 (malloc'd; NULL out of memory). */
char *al_mcp_b64_of(const char *data, size_t n);
/* Whether an image of type T may go inline (PNG, JPEG, ...). */
bool al_mcp_inline_image_type(const char *t);
/* Only bytes that start as the type says go inline as an image. */
bool al_mcp_image_bytes_ok(const char *type, const char *data, size_t n);
/* Artifact A (its document) as a resource_link item, and as a brief for
 * structuredContent. */
json_t *al_mcp_artifact_link(json_t *a);
json_t *al_mcp_artifact_brief(json_t *a);
/* RUN (a run document) ended, as a CallToolResult: what it printed, how it
 * ended, its files as links (small images inline). */
json_t *al_mcp_run_result(al_service *s, json_t *run);
