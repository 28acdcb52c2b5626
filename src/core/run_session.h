/*
 * A run of a sandbox whose session box is on (session_box.h): the
 * runner's session step. The run stays an ordinary run (its record,
 * approval, credits, DLP, events); only where it executes changes: its
 * code goes to the sandbox's session box as one request, its output comes
 * back through the channel into the run's events, its end is the agent's.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "runner.h"
#include "service.h"
#include "settings.h"

/* Whether RUN executes in its sandbox's session box under ST (a sandbox's
 * run, e2b_session_box on, the native driver): true with the sandbox's id
 * in ID (N bytes). */
bool al_run_session_wanted(al_service *s, const al_settings *st, const al_store_run *run, char *id, size_t n);

/* Each output chunk of the call: STREAM 0 stdout, 1 stderr. */
typedef void (*al_run_session_out_fn)(void *ud, int stream, const char *data, size_t n);

/* RUN (A's) executed in sandbox ID's session box, started if none: its
 * output given to OUT as it comes, its end as a box's result (reason
 * exited / timeout / canceled, exit_code, stdout and stderr up to 1 MiB
 * each, box.session true). NULL when the call could not run or its
 * session box ended under it: ERR says why (the run ends error). */
json_t *al_run_session_call(al_service *s, active_run *a, const al_store_run *run, const char *id,
                            al_run_session_out_fn out, void *ud, al_error *err);
