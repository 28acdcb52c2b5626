/*
 * Strict field validation: an object a client (or a skill's author) sent
 * holds only the keys its reader knows. A field that is not read is
 * refused, named, rather than dropped: `{"thread": "t1"}` (MCP's name for
 * REST's thread_id) made a run with no thread, and `{"timeout": 5}` ran for
 * the default 60 s. Every reader of a JSON object that comes from outside
 * checks it here, so that the rule and its words are written once.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The first key of OBJ (in its order) that is not one of the N names of
 * ALLOWED, or NULL when there is none (or OBJ is not an object). */
const char *al_json_unknown_key(json_t *obj, const char *const *allowed, size_t n);

/* The same as a verdict: true when OBJ holds only ALLOWED's keys; else
 * false, and MSG says which field WHERE ("the body", "files[2]", "limits")
 * held that it does not know and what it does: `unknown field "timeout" in
 * the body (it takes: code, language, ...)`. The field's name is cut at 64
 * bytes (it is the client's). */
bool al_json_keys_check(json_t *obj, const char *where, const char *const *allowed, size_t n, char *msg,
                        size_t msglen);
