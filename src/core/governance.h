/* Governance (governance.c): settings, credits, what an approval binds, audit. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"
#include "../store/runs.h"
#include "run_spec.h"
#include "settings.h"

typedef struct al_service al_service;

/* The workspace's effective settings (defaults, then what it set). NULL with
 * ERR when they cannot be read (a store error, a corrupt row): callers fail
 * closed (refuse the run, do not start it), never fall back to defaults. */
json_t *al_settings_load(al_service *s, const char *ws_id, al_error *err);
/* The same, typed (al_settings_done): 0, or -errno with ERR. */
int al_settings_get(al_service *s, const char *ws_id, al_settings *ret, al_error *err);
int al_settings_put(al_service *s, const char *ws_id, json_t *body, json_t **ret, al_error *err);
/* A run's charge and refund are the store's (al_store_run_charge, _refund). */
int64_t al_credits_balance(al_service *s, const char *org_id);
/* What a run puts in its box besides its code, as it is now: {files: [{name,
 * size, sha256}] (the run's inline files as stored, by name), stdin: {size,
 * sha256} or null, args, artifacts (the ids asked for), documents: [{id, path,
 * version, size, sha256}] as they will be staged (the pinned versions of
 * inputs.documents when the run has them), skill}. NULL on an error. */
json_t *al_approval_manifest(al_service *s, const al_store_run *run, al_error *err);
/* The documents RUN would get if it started now, one row per path, for
 * pinning at request time (inputs.documents). */
json_t *al_approval_documents(al_service *s, const al_store_run *run, al_error *err);
/* The identities MANIFEST names (its files, stdin and documents), typed
 * for al_run_spec_hash. 0, -ENOMEM, or -EBADMSG for one that is no manifest. */
int al_approval_staged(json_t *manifest, al_run_staged *ret);
/* What an approval binds, for the stored run RUN and its MANIFEST as read
 * now: al_run_spec_hash of the spec it was made from and its inputs as
 * staged. OUT is "" when it cannot be computed (whoever asked refuses). */
void al_approval_hash(const al_store_run *run, json_t *manifest, char out[65]);
/* Whether the stored bytes of each of MANIFEST's documents hash to the
 * sha256 it names (what staging links into the box); -EBADMSG when not. */
int al_approval_verify_documents(al_service *s, json_t *manifest, al_error *err);
/* The card's view of MANIFEST: the same, each input with the URL of its bytes. */
json_t *al_approval_card_inputs(const char *run_id, json_t *manifest);
/* An fd (O_RDONLY) on run RUN_ID's stored input WHICH: "stdin", or the
 * decimal index of a file of the manifest; its size and name. -ENOENT gone. */
int al_run_input_open(al_service *s, const char *run_id, const char *which, int *ret_fd, uint64_t *ret_size,
                      char **ret_name, al_error *err);
/* An audit event of RUN (al_governance_audit) or of P's workspace
 * (al_workspace_audit); steal DATA. A failure is logged (audit.failed) and
 * returned: the caller fails its operation. */
int al_governance_audit(al_service *s, const al_store_run *run, const char *kind, const char *person_id, json_t *data);
int al_workspace_audit(al_service *s, const al_principal *p, const char *kind, json_t *data, al_error *err);
