/*
 * The body of POST /v1/runs (a JSON object) read into a run spec
 * (core/run_spec.h). Only the JSON is checked here: each field's type, a
 * file's base64, the names of the limits; every rule of the values is the
 * spec's own check (al_run_spec_check), which the core makes for every
 * interface alike. MCP and Piston read the fields their shapes share with
 * ours through al_run_body_field, so that a field of the wrong type gets
 * the same answer whichever way it came. Pure (no store, no log), so that
 * a fuzzer can drive it alone (tests/fuzz/fuzz_run_body.c).
 */
#pragma once

#include <jansson.h>

#include "../core/run_spec.h"

/* The fields of the body, in the order they are read (and a fault named). */
typedef enum al_run_field {
    AL_RUN_F_ARGS,
    AL_RUN_F_STDIN,
    AL_RUN_F_IMAGE,
    AL_RUN_F_LANGUAGE,
    AL_RUN_F_CODE,
    AL_RUN_F_THREAD_ID,
    AL_RUN_F_NETWORK,
    AL_RUN_F_DESCRIPTION,
    AL_RUN_F_FILES,
    AL_RUN_F_ARTIFACTS,
    AL_RUN_F_LIMITS,
    AL_RUN_F_FOLDERS,
    AL_RUN_F_PACKAGES,
    _AL_RUN_F_MAX,
} al_run_field;

/* Their names in the body, indexed by al_run_field. */
extern const char *const al_run_field_names[_AL_RUN_F_MAX];

/* Field F of the body, V (NULL or null: not given), into SP. AL_STATUS_OK,
 * or the refusal (AL_STATUS_INVALID; AL_STATUS_INTERNAL out of memory)
 * with its message in MSG and its code ("bad_request", "internal") in
 * *CODE. */
al_status al_run_body_field(al_run_spec *sp, al_run_field f, json_t *v, char *msg, size_t msglen, const char **code);
/* A `limits` object V (NULL or null: none) into RET (what was not given
 * left as it is), as al_run_body_field answers. */
al_status al_run_body_limits(json_t *v, al_run_limit_req ret[_AL_LIMIT_MAX], char *msg, size_t msglen,
                             const char **code);
/* BODY into *RET (al_run_spec_free), field by field in the order above;
 * on a refusal *RET holds nothing. */
al_status al_run_body_parse(json_t *body, al_run_spec *ret, char *msg, size_t msglen, const char **code);
