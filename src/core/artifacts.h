/* Artifacts and their blobs (artifacts.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"
#include "../store/runs.h"

typedef struct al_service al_service;

/* The artifact rows ({id, path, version, size, sha256}) a run of THREAD_ID
 * with ARTIFACT_IDS gets in /work/documents, in staging order (the named
 * artifacts, then the thread's latest versions, newest first), one a path;
 * *RET_CUT when the thread held more than can be staged. NULL on a store error. */
json_t *al_artifacts_select(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                            bool *ret_cut, al_error *err);
/* Stage what can be staged into DIR; what cannot is listed in SKIPPED
 * (may be NULL) with the reason. The count staged, or -errno. */
int al_artifacts_stage(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                       const char *dir, json_t *skipped, al_error *err);
/* The artifacts' key of THREAD_ID, or of RUN_ID for a run without a thread. */
int al_artifacts_thread_key(const char *thread_id, const char *run_id, char *buf, size_t len);
int al_artifacts_ingest(al_service *s, const al_store_run *run, const char *out_dir, json_t *result, json_t **ret_published,
                        json_t **ret_previews, json_t *skipped, al_error *err);
const char *al_content_type(const char *path);
int64_t al_artifacts_org_usage(al_service *s, const char *org_id);
int64_t al_artifacts_org_quota(al_service *s, const char *org_id);
/* An artifact as the API shows it: {id, thread_id, run_id, path, version,
 * size, sha256, content_type, created_at}; a list of them, as an array. */
struct al_store_artifact;
struct al_store_artifacts;
json_t *al_artifact_json(const struct al_store_artifact *a);
json_t *al_artifacts_json(const struct al_store_artifacts *l);
/* What of an artifact stages and is hashed for approval: {id, path,
 * version, size, sha256}. */
json_t *al_artifact_doc(const struct al_store_artifact *a);
void al_blob_path(al_service *s, const char *sha, char *buf, size_t len);
/* Once per store: remove every blob that does not hold its hash; how many. */
int al_blobs_verify_once(al_service *s, al_error *err);
/* The blob SHA, opened read-only (no link followed), when it is a regular
 * file of SIZE bytes; else -errno (-EIO: not what the row says). */
int al_blob_open(al_service *s, const char *sha, int64_t size);
/* Remove a directory tree we made (no links followed). */
void al_rm_rf(const char *path);
