/* The HTTP server (REST+SSE, MCP, Piston, the console's files) over the
 * core's typed calls; the wire's own pieces that more than one file needs. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "../core/service.h"

struct MHD_Connection;

typedef struct al_http al_http;

/* Listen (on S's listen_fd, or its host and port) and answer until
 * al_http_stop. */
int al_http_start(al_service *s, al_http **ret, al_error *err);
void al_http_stop(al_http *h);

/* The Idempotency-Key header of request C, bound as al_idem_init does (to
 * JSON when not NULL, else to RAW/LEN); -EINVAL also when the header is
 * sent twice (idempotency.c). */
int al_idem_from_request(struct MHD_Connection *c, const char *scope, json_t *json, const void *raw, size_t len,
                         al_idem *ret, al_error *err);
