/*
 * Strict query parameters: a route that reads parameters from its query
 * refuses one it does not read, named, as its body refuses a field
 * (util/json_keys.h): `GET /v1/audit?run=X` (for run_id) answered every
 * event, and `POST /v1/runs?wiat=true` did not wait.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct MHD_Connection;

/* True when every query parameter of C is one of the N names of ALLOWED;
 * else false, and MSG says which is not and which are taken. */
bool al_query_check(struct MHD_Connection *c, const char *const *allowed, size_t n, char *msg, size_t msglen);
