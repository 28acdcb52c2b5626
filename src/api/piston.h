/* The Piston API (POST /api/v2/execute) as a translation onto ours. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "../core/status.h"

/* The body of Piston's POST /api/v2/execute (a JSON object) as ours: the
 * language by Piston's aliases, files[0].content the code, the other files
 * by name with their content in base64, stdin and args as they are, and
 * run_timeout (ms, rounded up to seconds) and run_memory_limit (bytes, in
 * MiB) as limits. AL_STATUS_OK and the body in *RET, else the refusal
 * (AL_STATUS_INVALID, or AL_STATUS_INTERNAL out of memory) and why in MSG.
 * It checks shapes only: the body then goes through al_run_request_parse
 * like any other. */
al_status al_piston_translate(json_t *piston, json_t **ret, char *msg, size_t msglen);

/* Piston's language names, and the one of ours each stands for. */
typedef struct al_piston_alias {
    const char *alias, *ours;
} al_piston_alias;
extern const al_piston_alias al_piston_aliases[];
extern const size_t al_piston_n_aliases;
