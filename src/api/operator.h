/*
 * The operator's view: service-wide figures (/metrics, GET
 * /operator/status: every tenant's run shapes in the pool with live hit and
 * miss counts, queue and store counters) are not a tenant's to read. Who
 * may is the configuration's operator_access: a client on a loopback
 * address or one presenting the operator token (the default), the token
 * only, or anyone. docs/operations.md "The operator's view".
 */
#pragma once

#include <stdbool.h>

#include "../core/service.h"

struct MHD_Connection;

typedef struct al_operator {
    al_operator_access access;
    char token[256]; /* "" = none configured */
} al_operator;

/* O from CFG, reading its operator_token_file (which must be the owner's
 * alone: mode 0600 or stricter, and hold 16-255 printable bytes). */
int al_operator_init(al_operator *o, const al_service_config *cfg, al_error *err);
/* Whether the client of C may read the operator's view. */
bool al_operator_allowed(const al_operator *o, struct MHD_Connection *c);
