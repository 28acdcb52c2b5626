/* The execution service: shared state of the daemon's parts. */
#pragma once

#include "../proxy/policy.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include "../drivers/driver.h"
#include "../store/store.h"

typedef struct al_service_config {
    char listen_host[64];
    int port;
    int listen_fd;                /* >= 0: listen on this inherited socket (airlock mcp --local) */
    char state_dir[PATH_MAX];
    char driver[16];
    int max_concurrent;           /* boxes at once, all people */
    int per_person;               /* boxes at once, one person */
    int queue_max;                /* queued runs before 429 */
    int queue_per_person;         /* of those, one person's (queued or waiting for approval) */
    int queue_per_org;            /* of those, one organisation's */
    int max_timeout_s;            /* ceiling over every workspace's maximum */
    uint64_t body_max;            /* request body bytes */
    uint64_t code_max;            /* code bytes */
    uint64_t files_max;           /* inline files per run */
    uint64_t storage_quota_bytes; /* per organisation; 0: each one's own setting */
    char skills_dir[PATH_MAX];    /* bundled skills; "" = beside the binary or installed */
} al_service_config;

void al_service_config_default(al_service_config *c);
/* Read `key = value` lines; unknown keys are an error. */
int al_service_config_load(al_service_config *c, const char *path, al_error *err);
int al_service_config_set(al_service_config *c, const char *key, const char *value, al_error *err);

typedef struct active_run active_run;

typedef struct queued_run {
    char run_id[40], person_id[40], org_id[40];
    int cap;                      /* the person's concurrency cap in its workspace */
} queued_run;

typedef struct al_service {
    al_service_config cfg;
    al_store *store;
    const al_driver_ops *driver;
    char self_exe[PATH_MAX];
    char blobs_dir[PATH_MAX + 8], runs_dir[PATH_MAX + 8];

    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t sched_cond;    /* queue or capacity changed */
    pthread_cond_t events_cond;   /* a run got a new event or ended */
    uint64_t event_gen;           /* bumped with every broadcast of events_cond */
    /* A run's followers wait on their run's bucket only, so one run's output
     * wakes the followers of about 1/AL_EVENT_BUCKETS of the others, not
     * every follower of every tenant. wake_gen: al_service_wake_all. */
#define AL_EVENT_BUCKETS 256
    struct {
        uint64_t gen;
        pthread_cond_t cond;
    } ev_buckets[AL_EVENT_BUCKETS];
    uint64_t wake_gen;
    queued_run *queue;
    int queue_len;
    active_run *active;           /* linked list */
    int active_count;
    bool stopping;
    pthread_t scheduler;

    /* metrics */
    uint64_t runs_started, runs_finished;
    uint64_t duration_buckets[12]; /* histogram of run wall time */
    double duration_sum;

    json_t *skills_bundled;       /* [{manifest, digest}], read-only after start */
    /* skills.c: stored bundles change (upload, delete, collection) under
     * skills_mu, so a collection never removes a bundle that an upload is
     * about to record or a run is about to use */
    pthread_mutex_t skills_mu;
    json_t *skills_pins;          /* {digest: count}: runs being created from a bundle */
    bool skills_gc_pending;       /* a deleted bundle waits for its live runs to end */
} al_service;

/* service.c */
int al_service_run(al_service_config *cfg, al_error *err);
/* Queue a run. SHARE: hold it to the person's and organisation's share of
 * the queue (a new run; not one an approver let through, nor one queued
 * before a restart). -EAGAIN the queue is full, -EDQUOT the person's share
 * is, -EUSERS the organisation's; MSG (may be NULL) says which. */
int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       char *msg, size_t msg_len);
/* Whether a new run of PERSON_ID in ORG_ID would find room (as above, and
 * counting PENDING runs of the person that wait for an approval). */
int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, char *msg,
                          size_t msg_len);
/* 1 when it was queued or running and is now being canceled; 0 if ended. */
int al_service_cancel(al_service *s, const char *run_id);
int al_service_person_queued(al_service *s, const char *person_id);
/* A run recorded as queued that did not get into the queue: it ends
 * canceled (WHY says why) and its inputs are removed. */
void al_service_end_unqueued(al_service *s, const char *run_id, const char *why);
/* Remove the inputs of a run that will not reach a box (canceled, denied,
 * expired): they are on disk only for a box to stage. */
void al_service_drop_inputs(al_service *s, const char *run_id);
/* The credits of ORG_ID that its queued runs (charged when they start, which
 * is soon) do not hold already; what they hold in *RET_RESERVED. A run that
 * waits for an approval holds none: it may wait for days, or be denied. */
int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved);
/* Bytes the inputs of ORG_ID's runs that have not ended hold on disk. */
int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id);
int64_t al_service_append_event(al_service *s, const char *run_id, const char *type, json_t *data);
/* Wait until an event newer than GEN (from al_service_event_gen) or the
 * deadline; returns false on timeout or when the service is stopping. */
uint64_t al_service_event_gen(al_service *s);
bool al_service_wait_event(al_service *s, uint64_t gen, const struct timespec *until);
/* The same for one run's events only (and al_service_wake_all): what every
 * follower of a run uses. */
uint64_t al_service_run_event_gen(al_service *s, const char *run_id);
bool al_service_wait_run_event(al_service *s, const char *run_id, uint64_t gen, const struct timespec *until);
/* Wake every waiter, whatever it follows (shutdown, a stream taken over). */
void al_service_wake_all(al_service *s);
/* A structured log line (JSON) on stderr; steals FIELDS. */
void al_service_log(al_service *s, const char *event, json_t *fields);

/* artifacts.c */
int al_artifacts_stage(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                       const char *dir, al_error *err);
int al_artifacts_ingest(al_service *s, json_t *run, const char *out_dir, json_t *result, json_t **ret_published,
                        json_t **ret_previews, json_t *skipped, al_error *err);
const char *al_content_type(const char *path);
int64_t al_artifacts_org_usage(al_service *s, const char *org_id);
int64_t al_artifacts_org_quota(al_service *s, const char *org_id);
void al_blob_path(al_service *s, const char *sha, char *buf, size_t len);
/* Remove a directory tree we made (no links followed). */
void al_rm_rf(const char *path);

/* governance.c */
/* runs.c: a state that does not change again; a thread id's syntax */
bool al_run_state_terminal(const char *state);
bool al_valid_thread_id(const char *t);
/* The JSON text in column KEY of ROW, parsed (json null when absent or bad). */
json_t *al_row_json(json_t *row, const char *key);
/* The run ID of P's workspace (its row), or NULL: other workspaces' runs do
 * not exist for P. */
json_t *al_run_load(al_service *s, const al_principal *p, const char *id);
json_t *al_settings_load(al_service *s, const char *ws_id);
/* Whether ALLOWED (a settings network_allowed list) holds MODE. */
bool al_network_mode_allowed(json_t *allowed, al_net_mode mode);
int al_settings_put(al_service *s, const char *ws_id, json_t *body, json_t **ret, al_error *err);
/* 1 charged (and moved to provisioning), 0 no longer queued, -ENOSPC cannot pay. */
int al_credits_charge(al_service *s, const char *run_id, al_error *err);
int al_credits_refund(al_service *s, const char *run_id, al_error *err);
int64_t al_credits_balance(al_service *s, const char *org_id);
void al_approval_hash(json_t *run, char out[65]);
void al_rfc3339_after(int64_t secs, char *buf, size_t len);
bool al_rfc3339_valid(const char *t);
int al_governance_audit(al_service *s, json_t *run, const char *kind, const char *person_id, json_t *data);
/* service.c: an approver's decision; -EEXIST decided already, -ESTALE hash differs */
int al_service_decide(al_service *s, json_t *run, const char *person_id, bool approve, const char *hash,
                      const char *reason, al_error *err);
void al_service_expire_approvals(al_service *s);

/* http.c */
typedef struct al_http al_http;

/* What a caller other than POST /v1/runs adds to a run (a skill's run). */
typedef struct al_run_extra {
    const char *tool;             /* the allow-listed tool it is; NULL: "code_execution" */
    json_t *skill;                /* {name, version, digest, entrypoint, script, mode}, or NULL */
    const char *args_json;        /* a skill's arguments, staged as /work/args.json */
    bool wait;                    /* answer when the run has ended */
    uint64_t wait_secs;           /* 0: the run's timeout + 30 s */
    const char *via;              /* the interface: "rest" (NULL), "piston", "mcp"; audited */
} al_run_extra;

/* Create a run from BODY (the JSON of POST /v1/runs) for P: validation,
 * the tool allow-list, approval, credits, queue and audit. Returns the HTTP
 * status and the document to answer (the run object, or {"error": ...});
 * *RET_DOC is always set. X may be NULL. */
unsigned al_run_create(al_service *s, const al_principal *p, json_t *body, const al_run_extra *x, json_t **ret_doc);
/* Cancel run ID of P's workspace: withdrawn while it waits for approval,
 * taken off the queue, or killed. 1 done, 0 it had ended, -ENOENT no such run. */
int al_run_cancel(al_service *s, const al_principal *p, const char *id);
int al_http_start(al_service *s, al_http **ret, al_error *err);
void al_http_stop(al_http *h);
json_t *al_run_json(al_service *s, json_t *row);
/* runs.c: a run list's entry, from a row of AL_RUN_SUMMARY_COLUMNS */
json_t *al_run_summary_json(json_t *row);
/* What a list selects FROM runs: small fields only; what a run printed is
 * measured inside the store and never loaded. */
#define AL_RUN_SUMMARY_COLUMNS                                                                                      \
    "seq, id, state, language, thread_id, description, network, limits, image, created_at, started_at, "           \
    "finished_at, error_code, error_message, redactions, price, result IS NOT NULL AS has_result, "                \
    "json_extract(result, '$.exit_code') AS exit_code, json_extract(result, '$.signal') AS signal, "               \
    "json_extract(result, '$.reason') AS reason, json_extract(result, '$.stdout_bytes') AS stdout_bytes, "         \
    "json_extract(result, '$.stderr_bytes') AS stderr_bytes, "                                                      \
    "json_extract(result, '$.stdout_truncated') AS stdout_truncated, "                                              \
    "json_extract(result, '$.stderr_truncated') AS stderr_truncated, json_extract(result, '$.wall_ms') AS wall_ms, " \
    "json_extract(result, '$.cpu_ms') AS cpu_ms, json_extract(result, '$.peak_memory_bytes') AS peak_memory_bytes, " \
    "CASE WHEN json_valid(previews) THEN json_array_length(previews) ELSE 0 END AS preview_count, "                \
    "CASE WHEN json_valid(skipped) THEN json_array_length(skipped) ELSE 0 END AS skipped_count, "                  \
    "(SELECT COUNT(*) FROM artifacts a WHERE a.run_id = runs.id) AS artifact_count, "                              \
    "EXISTS (SELECT 1 FROM approval_requests q WHERE q.run_id = runs.id) AS has_approval, "                        \
    "(SELECT decision FROM approval_requests q WHERE q.run_id = runs.id) AS approval_decision, "                   \
    "(SELECT expires_at FROM approval_requests q WHERE q.run_id = runs.id) AS approval_expires_at, "               \
    "(SELECT id FROM approval_requests q WHERE q.run_id = runs.id) AS approval_id, "                               \
    "(SELECT hash FROM approval_requests q WHERE q.run_id = runs.id) AS approval_hash, "                           \
    "json_extract(inputs, '$.skill.name') AS skill_name, json_extract(inputs, '$.skill.version') AS skill_version"
