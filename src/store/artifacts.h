/*
 * Artifacts' rows (store/artifacts.c): one row per version of a path in a
 * thread, its bytes in the blob store by sha256. Lists come back as counted
 * arrays that al_store_artifacts_free releases.
 */
#pragma once

#include "store.h"

typedef struct al_store_artifact {
    char id[40];
    char org_id[40], workspace_id[40];
    char thread_id[72];           /* "" for a run without a thread */
    char thread_key[128];         /* "t:" thread id, or "r:" run id */
    char run_id[40];
    char *path;                   /* relative to the run's /out */
    int64_t version;              /* 1, 2, ... per (thread_key, path) */
    int64_t seq;                  /* 1, 2, ... per thread_key: the order of ingest */
    int64_t size;
    char sha256[65];
    char content_type[128];
    char created_at[40];
} al_store_artifact;

typedef struct al_store_artifacts {
    al_store_artifact *v;
    size_t n;
} al_store_artifacts;

void al_store_artifacts_free(al_store_artifacts *l);
/* A record's owned parts (its path). */
void al_store_artifact_done(al_store_artifact *a);

/* Artifact ID of workspace WS_ID: 0, -ENOENT when there is none, -EIO. */
int al_store_artifact_get(al_store *s, const char *ws_id, const char *id, al_store_artifact *ret, al_error *err);

/* A thread's artifacts (THREAD_KEY in WS_ID), only RUN_ID's when it is not
 * NULL: every version (ALL) or the latest of each path, ordered by path and
 * version, at most LIMIT (0: no bound). */
int al_store_artifacts_of_thread(al_store *s, const char *ws_id, const char *thread_key, const char *run_id, bool all,
                                 size_t limit, al_store_artifacts *ret, al_error *err);
/* The latest version of each path of THREAD_KEY in WS_ID, the most recently
 * ingested first, at most LIMIT. */
int al_store_artifacts_latest(al_store *s, const char *ws_id, const char *thread_key, size_t limit,
                              al_store_artifacts *ret, al_error *err);
/* What run RUN_ID published, ordered by path. */
int al_store_artifacts_of_run(al_store *s, const char *run_id, al_store_artifacts *ret, al_error *err);
/* WS_ID's artifacts, the newest first, at most LIMIT. */
int al_store_artifacts_recent(al_store *s, const char *ws_id, size_t limit, al_store_artifacts *ret, al_error *err);

/* Record A (every field but version and seq, which the store numbers and
 * sets in A): the next version of its path in its thread. */
int al_store_artifact_add(al_store *s, al_store_artifact *a, al_error *err);

/* Call EACH with every distinct sha256 the artifacts name; stops at and
 * returns EACH's first negative answer. */
int al_store_artifact_blobs(al_store *s, int (*each)(const char *sha256, void *userdata), void *userdata,
                            al_error *err);

/* The bytes ORG_ID keeps: its artifacts, and each skill bundle it holds
 * counted once. */
int al_store_org_storage_used(al_store *s, const char *org_id, int64_t *ret_bytes, al_error *err);
/* ORG_ID's own storage quota (0 none set, or no such organisation). */
int al_store_org_storage_quota(al_store *s, const char *org_id, int64_t *ret_bytes, al_error *err);
