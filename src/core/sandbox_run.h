/*
 * An E2B sandbox's runs (issue 35): each command or code cell is an
 * ordinary run whose spec names the sandbox (al_run_spec.sandbox). Its box
 * stages the sandbox's home/ as /work and collects /work back; here the
 * core swaps what came back in for the sandbox's home/, and the box's /out
 * for its out/, after the run and before its end is published.
 */
#pragma once

#include <jansson.h>

#include "service.h"

/* The sandbox a run works in (its record's inputs.sandbox), into ID (N
 * bytes): true, or false for any other run. */
bool al_sandbox_run_of(const al_store_run *run, char *id, size_t n);
/* The host directory WHICH ("home" or "out") of sandbox ID:
 * STATE/sandboxes/ID/WHICH. 0 or -ENAMETOOLONG. */
int al_sandbox_run_dir(al_service *s, const char *id, const char *which, char *buf, size_t n);
/* RUN's box ended with RESULT, its directory DIR (runs/RUN): when the box
 * collected its /work whole (result.box.work_collected), DIR/work takes
 * the place of the sandbox's home/ and DIR/out of its out/, each by one
 * rename (RENAME_EXCHANGE: a reader sees the old tree or the new, never a
 * half), the old trees removed. Whichever of two concurrent runs of one
 * sandbox ends later wins. A sandbox killed meanwhile gets nothing back
 * (its directory is gone). 0, or -errno with ERR saying why (the run's
 * end is not changed by it: the caller logs it). */
int al_sandbox_run_flow_back(al_service *s, const al_store_run *run, const char *dir, json_t *result, al_error *err);
/* What a box collected into DIR/work and DIR/out, in place of sandbox
 * ID's home/ and out/ (as above, whoever's box it was: a session box's
 * too). */
int al_sandbox_flow_back_dir(al_service *s, const char *id, const char *dir, al_error *err);
