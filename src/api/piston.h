/* The Piston API (POST /api/v2/execute) as a translation onto ours. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "../core/run_spec.h"
#include "../core/status.h"

/* The body of Piston's POST /api/v2/execute (a JSON object) as a run spec:
 * the language by Piston's aliases, files[0].content the code, the other
 * files by name with their content, stdin and args as REST reads them, and
 * run_timeout (ms, kept as ms: al_run_spec.timeout_ms) and run_memory_limit
 * (bytes, in MiB) as limits. AL_STATUS_OK and the spec in *RET (al_run_spec_free),
 * else the refusal (AL_STATUS_INVALID, or AL_STATUS_INTERNAL out of
 * memory) and why in MSG, and *RET holds nothing. It checks shapes only:
 * the spec then goes through al_run_spec_check like any other. */
al_status al_piston_translate(json_t *piston, al_run_spec *ret, char *msg, size_t msglen);

/* Piston's language names, and the one of ours each stands for. */
typedef struct al_piston_alias {
    const char *alias, *ours;
} al_piston_alias;
extern const al_piston_alias al_piston_aliases[];
extern const size_t al_piston_n_aliases;

/* GET /api/v2/runtimes: each language with its version and aliases (a new
 * reference each call, made once). */
json_t *al_piston_runtimes(void);
/* GET /api/v2/packages: each language of the runtimes as Piston lists a
 * package ({language, language_version, installed}). */
json_t *al_piston_packages(void);
/* RUN (a run object, whose reference this takes) as Piston's execute
 * answer for LANGUAGE at VERSION: run's stdout, stderr, output, code and
 * signal, and status (TO, OL, EL, SG, RE, XX; null when it exited 0),
 * message, cpu_time and wall_time (ms) and memory (bytes, its peak). */
json_t *al_piston_result(json_t *run, const char *language, const char *version);
