/* What the HTTP layer writes to the service's log: the route a request took
 * (for the access log) and the level of libmicrohttpd's own messages. */
#pragma once

#include <stddef.h>

#include "../core/service.h"

/* URL's path as its route's pattern ("/v1/runs/{id}/events"), in OUT (CAP
 * bytes, at least 16): words of airlock's routes are kept, every other
 * segment is "{id}" and a Piston URL's key "{key}", so the line carries no
 * identifier, name or key a client sent. A path too long for OUT ends in
 * "/...". */
void al_http_route_pattern(const char *url, char *out, size_t cap);

/* The level of MSG, a message of libmicrohttpd, and its log event in
 * *RET_EVENT: a client that left (its connection reset or closed under a
 * response) is info; a request it refused as malformed, and the connection
 * limit reached, are warnings; the rest an error. */
al_log_level al_http_mhd_level(const char *msg, const char **ret_event);
