/* The execution service: shared state of the daemon's parts. */
#pragma once

#include "../proxy/policy.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include "../drivers/driver.h"
#include "../store/approvals.h"
#include "../store/runs.h"
#include "../store/store.h"
#include "roles.h"
#include "run_spec.h"
#include "settings.h"
#include "status.h"

/* Who may read the service-wide figures (docs/operations.md). */
typedef enum al_operator_access {
    AL_OPERATOR_LOOPBACK, /* a client on a loopback address, or one with the operator token */
    AL_OPERATOR_TOKEN,    /* the operator token only */
    AL_OPERATOR_OPEN,     /* anyone (a scraper's network is the boundary) */
    _AL_OPERATOR_ACCESS_MAX,
} al_operator_access;

typedef struct al_service_config {
    char listen_host[64];
    int port;
    int listen_fd;                /* >= 0: listen on this inherited socket (airlock mcp --local) */
    bool listen_shared;           /* SO_REUSEPORT: the operator shares the port with other services */
    int stop_grace_s;             /* a stop lets running runs finish this long, then ends the rest */
    char state_dir[PATH_MAX];
    char store[1024]; /* "sqlite" (default) or a postgresql:// address */
    char driver[16];
    char docker_socket[108];      /* driver = docker: "" for DOCKER_HOST or /var/run/docker.sock */
    char engine_runtime[16];      /* driver = docker: runc (default) or runsc */
    int docker_pool;              /* driver = docker: containers made ahead of need, per shape of run */
    int warm_pool;                /* driver = native: warm Python and Node boxes per shape of run, at most */
    int warm_pool_memory_mb;      /* what all warm boxes may hold */
    bool warm_fork;               /* Python's warm boxes without preloads forked by a zygote */
    char warm_preload[512];       /* the modules a warm box imports ahead, comma-separated */
    int node_lease_s;             /* a node that does not renew its lease this long is dead */
    int run_sweep_s;              /* how often one node sweeps runs past their retention */
    int max_concurrent;           /* boxes at once on this node, all people */
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
    char images_dir[PATH_MAX];    /* runtime images; "" = STATE/images */
    /* what one client can hold of the daemon (http.c) */
    int max_connections;          /* HTTP connections at once, everyone */
    int connections_per_address;  /* of those, from one client address */
    int connection_timeout_s;     /* a connection idle this long is closed */
    int followers_per_person;     /* event streams (/v1/runs/{id}/events) one person follows at once */
    int waits_per_person;         /* requests one person has waiting for a run's end (?wait=true, Piston) */
    uint64_t body_bytes_per_person; /* request bodies one person has being received at once */
    bool access_log;              /* a log line per HTTP request (method, route, status, time, person) */
    char audit_key[PATH_MAX];     /* the checkpoints' signing key; "" = STATE/audit.key (checkpoint.h) */
    int audit_checkpoint_s;       /* how often the heads that moved are signed and logged */
    int request_timeout_s;        /* a request's headers and body are in within this, however they trickle */
    int connections_reserved;     /* of max_connections, kept for requests whose key is valid */
    /* service-wide figures (/metrics, /operator/status) are the operator's */
    al_operator_access operator_access;
    char operator_token_file[PATH_MAX]; /* holds the operator's token; "" = none */
} al_service_config;

void al_service_config_default(al_service_config *c);
/* Read `key = value` lines; unknown keys are an error. */
int al_service_config_load(al_service_config *c, const char *path, al_error *err);
int al_service_config_set(al_service_config *c, const char *key, const char *value, al_error *err);
/* Where the service's runtime images are: the images setting, else
 * STATE/images. */
void al_service_images_dir(const al_service_config *c, char *buf, size_t len);

typedef struct active_run active_run;


typedef struct al_service {
    al_service_config cfg;
    al_store *store;
    const al_driver_ops *driver;
    char self_exe[PATH_MAX];
    int state_lock_fd;            /* the embedded store's state directory, held (flock) while served */
    char blobs_dir[PATH_MAX + 8], runs_dir[PATH_MAX + 8];

    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t sched_cond;    /* queue or capacity changed */
    /* bumped with a broadcast of sched_cond when a run may have been
     * queued (queue_gen) or a slot freed (slot_gen), here or on another
     * node: the scheduler claims again when one moved that could change
     * its last claim's answer (and each second in any case) */
    uint64_t queue_gen, slot_gen;
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
    active_run *active;           /* linked list */
    int active_count;
    bool draining;                /* a stop began: no new claim, running runs finish */
    bool stopping;
    pthread_t scheduler;

    /* cluster.c: this node among those on the store */
    char node_id[40];
    char store_target[PATH_MAX + 1024];
    bool multi_node;              /* the store is shared (PostgreSQL): tell and watch the others */
    bool declared_dead;           /* another node declared this one dead (or its lease ran out) */
    bool cluster_running;
    pthread_t lease_thread, watch_thread;
    struct al_store_watch *watch;
    al_store *lease_store;        /* a connection of the lease's own: never queued behind the others' lock waits */
    uint64_t next_reap_ms;        /* the scheduler's next look for dead nodes */

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

    /* service.c: long-held requests per person (under mu) */
    struct person_holds *holds;
    /* service.c: the cached answer of /healthz (under health_mu) */
    pthread_mutex_t health_mu;
    char *health_text;
    uint64_t health_at_ms;        /* al_now_ms() of its probe */
    bool health_probing;
    struct al_checkpointer *checkpointer; /* checkpointer.c: the audit heads' signer */
} al_service;

/* service.c: the service's life. al_service_open opens the store, joins
 * the cluster, recovers what a previous run left and starts the scheduler
 * (threads: the caller blocks the signals it waits for before). On a
 * failure the threads it started are left to the process's exit.
 * al_service_drain: take no new run from the queue and let the running
 * ones go on (al_service_running_count says how many are still running).
 * al_service_stop: stop taking runs, end the active ones (airlock's own
 * stop: error, refunded, never "canceled"), wait for their runners and the
 * scheduler (queued runs stay queued for the next start).
 * al_service_close: leave the cluster, close the store, free S; -ESTALE
 * when this node was fenced (declared dead by the others) meanwhile. */
int al_service_open(const al_service_config *cfg, al_service **ret, al_error *err);
void al_service_drain(al_service *s);
int al_service_active_count(al_service *s);
/* Of those, the runs whose end is not written yet (the rest are cleaning
 * up, which takes a bounded moment): what a drain waits for. */
int al_service_running_count(al_service *s);
void al_service_stop(al_service *s);
int al_service_close(al_service *s, al_error *err);
/* Queue a run. SHARE: hold it to the person's and organisation's share of
 * the queue (a new run; not one an approver let through, nor one queued
 * before a restart). -EAGAIN the queue is full, -EDQUOT the person's share
 * is, -EUSERS the organisation's, -EIO the store failed; ERR (may be NULL)
 * says which. */
int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       al_error *err);
/* Whether a new run of PERSON_ID in ORG_ID would find room (as above, and
 * counting PENDING runs of the person that wait for an approval). */
int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, al_error *err);
/* 1 when it was queued or running and is now being canceled; 0 if ended.
 * A run active on another node is asked there. */
int al_service_cancel(al_service *s, const char *run_id);
/* Whether this node's runner holds RUN_ID. */
bool al_service_is_active(al_service *s, const char *run_id);
/* Cancel RUN_ID if this node runs its box: whether it does. */
bool al_service_cancel_local(al_service *s, const char *run_id);
/* The cap a run of a workspace whose concurrency is WORKSPACE_CAP runs under. */
int al_service_queue_cap(al_service *s, int workspace_cap);
/* Run ID, active on a node that is gone, ends in error (lost) and is
 * refunded, once however many nodes try. */
void al_service_lose_run(al_service *s, const char *id, const char *why);

/* cluster.c: many nodes on one store (docs/operations.md "Many nodes") */
int al_cluster_start(al_service *s, al_error *err);
void al_cluster_stop(al_service *s);
/* Declare dead the nodes whose lease ran out (ALL_OTHERS: every other
 * node, which SQLite's one node does at start) and end their runs. */
void al_cluster_reap(al_service *s, bool all_others);
/* The scheduler's periodic share of it: dead nodes, and cancels of this
 * node's runs asked elsewhere (a notification may have been lost). */
void al_cluster_tick(al_service *s);
/* Tell the other nodes (nothing on SQLite). */
void al_cluster_notify(al_service *s, const char *channel, const char *run_id);
int al_service_person_queued(al_service *s, const char *person_id);
/* A run recorded as queued that did not get into the queue: it ends as an
 * error CODE (queue_full, store; WHY says why), never as canceled, which
 * only its requester does, and its inputs are removed. */
void al_service_end_unqueued(al_service *s, const char *run_id, const char *code, const char *why);
/* Remove the inputs of a run that will not reach a box (canceled, denied,
 * expired): they are on disk only for a box to stage. */
void al_service_drop_inputs(al_service *s, const char *run_id);
/* The credits of ORG_ID that its queued runs (charged when they start, which
 * is soon) do not hold already; what they hold in *RET_RESERVED. A run that
 * waits for an approval holds none: it may wait for days, or be denied. */
int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved);
/* What al_artifacts_org_usage and al_runs_pending_input_bytes answer when
 * the store cannot say: more than any quota (fail closed), and small
 * enough that adding three of them cannot overflow. */
#define AL_USAGE_UNKNOWN (INT64_MAX / 4)
/* Bytes the inputs of ORG_ID's runs that have not ended hold on disk. */
int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id);
int64_t al_service_append_event(al_service *s, const char *run_id, const char *type, json_t *data);
/* A run's last event, "result": {"ref":"run"}, which names the run rather
 * than copying it (its documents hold its output and approval card, code
 * included: megabytes); al_run_events_after reads it as al_run_json of
 * the run, what GET /v1/runs/{id} shows. al_service_result_ref: its
 * document. */
json_t *al_service_result_ref(void);
void al_service_result_event(al_service *s, const char *run_id);
/* Wait until an event of RUN_ID newer than GEN (from
 * al_service_run_event_gen) or the deadline; false on timeout or when the
 * service is stopping. What every follower of a run uses. */
uint64_t al_service_run_event_gen(al_service *s, const char *run_id);
bool al_service_wait_run_event(al_service *s, const char *run_id, uint64_t gen, const struct timespec *until);
/* Wake RUN_ID's followers (another node appended to it). */
void al_service_wake_run(al_service *s, const char *run_id);
/* Kill every box this node runs (a fenced node): airlock's own stop, so
 * what it ends is never reported as canceled. */
void al_service_cancel_all(al_service *s);
/* Wake every waiter, whatever it follows (shutdown, a stream taken over). */
void al_service_wake_all(al_service *s);
/* Long-held requests of one person: event-stream followers and requests
 * waiting for a run's end. al_service_hold takes one (false: the person
 * holds their maximum of KIND already); al_service_unhold gives it back. */
typedef enum { AL_HOLD_FOLLOW, AL_HOLD_WAIT, _AL_HOLD_MAX } al_hold;
bool al_service_hold(al_service *s, const char *person_id, al_hold kind);
void al_service_unhold(al_service *s, const char *person_id, al_hold kind);
/* The same for the bytes of request bodies being received (N more). */
bool al_service_hold_bytes(al_service *s, const char *person_id, uint64_t n);
void al_service_unhold_bytes(al_service *s, const char *person_id, uint64_t n);
/* The body of GET /healthz (malloc'd JSON): the driver's probe, run at most
 * every HEALTH_PROBE_S and never two at once; NULL on no memory. */
#define AL_HEALTH_PROBE_S 30
char *al_service_health(al_service *s);
/* A structured log line (JSON) on stderr, with its LEVEL; steals FIELDS.
 * info: what happened as it should (a start, a run's end, a client that
 * left); warn: something an operator may want to look at but that the
 * service has handled (a run ended in error, a limit reached); error: the
 * service could not do what it should (a write that failed, a node fenced). */
typedef enum { AL_LOG_INFO, AL_LOG_WARN, AL_LOG_ERROR, _AL_LOG_MAX } al_log_level;
void al_service_log(al_service *s, al_log_level level, const char *event, json_t *fields);
/* The run.end line of RUN, ended in STATE (ERR_CODE, NULL for none) with
 * the box's RESULT (NULL when it never reached one: denied, expired,
 * canceled or refused while it waited): who ran what where, and how it
 * ended, so an operator answers "whose run failed, in what, on which
 * driver" from this line alone. Every end of a run writes one. */
void al_service_log_run_end(al_service *s, const al_store_run *run, al_run_state state, const char *err_code,
                            json_t *result);

/* artifacts.c */
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

/* governance.c */
/* runs.c: a state that does not change again (a thread id's syntax,
 * al_valid_thread_id, is in run_spec.h) */
bool al_run_state_terminal(const char *state);
/* JSON TEXT (a document column of a record), parsed (json null when NULL or bad). */
json_t *al_json_text(const char *text);
/* The run ID of P's workspace (al_store_run_free), or NULL: other
 * workspaces' runs do not exist for P. */
al_store_run *al_run_load(al_service *s, const al_principal *p, const char *id);
/* Run ID of P as GET /v1/runs/{id} shows it, in *RET_DOC: OK and the run;
 * GONE (past its retention) and what was kept of it ({"error", "run": its
 * summary}); NOT_FOUND. */
al_status al_run_view(al_service *s, const al_principal *p, const char *id, json_t **ret_doc);

/* The workspace's effective settings (defaults, then what it set). NULL with
 * ERR when they cannot be read (a store error, a corrupt row): callers fail
 * closed (refuse the run, do not start it), never fall back to defaults. */
json_t *al_settings_load(al_service *s, const char *ws_id, al_error *err);
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
void al_rfc3339_after(int64_t secs, char *buf, size_t len);
bool al_rfc3339_valid(const char *t);
/* An audit event of RUN (al_governance_audit) or of P's workspace
 * (al_workspace_audit); steal DATA. A failure is logged (audit.failed) and
 * returned: the caller fails its operation. */
int al_governance_audit(al_service *s, const al_store_run *run, const char *kind, const char *person_id, json_t *data);
int al_workspace_audit(al_service *s, const al_principal *p, const char *kind, json_t *data, al_error *err);
/* service.c: an approver's decision; -EEXIST decided already (or expired,
 * withdrawn), -ESTALE hash differs, -EPERM the requester deciding their own */
int al_service_decide(al_service *s, const al_store_run *run, const char *person_id, bool approve, const char *hash,
                      const char *reason, al_error *err);
void al_service_expire_approvals(al_service *s);
/* Close run ID's open approval with DECISION and move the run out of
 * pending_approval (to queued, or ended in TO) in one transaction;
 * 1 won, 0 something else decided first. */
int al_service_close_approval(al_service *s, const char *id, al_approval_decision decision, const char *by,
                              const char *reason, const char *not_after, al_run_state to, const char *ecode,
                              const char *emsg, al_error *err);
/* A pending run withdrawn by PERSON_ID: 1 canceled, 0 it was decided first. */
int al_service_withdraw(al_service *s, const char *id, const char *person_id, al_error *err);

/* idempotency.c: the Idempotency-Key of a creating POST (docs/api.md) */
#define AL_IDEM_KEY_MAX 255
#define AL_IDEM_TTL_S (24 * 3600)     /* how long a key is kept: at least a day */
typedef struct al_idem {
    char key[AL_IDEM_KEY_MAX + 1];    /* "": the request had none */
    char hash[65];                    /* sha256 of the request's route and canonical body */
    bool replayed;                    /* out: answered with what an earlier request created */
} al_idem;
/* Bind KEY (a header's value; NULL: none) to the request SCOPE ("POST
 * /v1/runs") with the bytes BODY. 0 no key, 1 a key, -EINVAL a bad key. */
int al_idem_init(al_idem *ret, const char *key, const char *scope, const void *body, size_t len, al_error *err);
/* The same, over the canonical JSON (sorted keys, compact) of BODY. */
int al_idem_init_json(al_idem *ret, const char *key, const char *scope, json_t *body, al_error *err);
/* What K of P created: 1 and RET_ID when K was used for this same request
 * (KIND "run" or "skill"), 0 never (or expired), -EEXIST for another request. */
int al_idem_lookup(al_store *st, const al_principal *p, const al_idem *k, const char *kind, char ret_id[40],
                   al_error *err);
/* In the caller's transaction, with what it creates: K of P made RESOURCE_ID.
 * -EEXIST: the key is taken (a concurrent request got there first). */
int al_idem_record(al_store *st, const al_principal *p, const al_idem *k, const char *kind, const char *resource_id,
                   al_error *err);
/* Forget K of P again, if it still names RESOURCE_ID (what it made was
 * undone before anything ran: a retry is a new attempt). */
int al_idem_forget(al_store *st, const al_principal *p, const al_idem *k, const char *resource_id, al_error *err);
/* Forget the keys past their time; how many, or -errno. */
int al_idem_sweep(al_store *st, al_error *err);

/* runs.c */
/* How a run is asked for, besides what it is (its al_run_spec). */
typedef struct al_run_extra {
    const char *tool;             /* the allow-listed tool it is; NULL: "code_execution" */
    bool wait;                    /* answer when the run has ended */
    uint64_t wait_secs;           /* 0: the run's timeout + 30 s */
    const char *via;              /* the interface: "rest" (NULL), "piston", "mcp"; audited */
    al_idem *idem;                /* the request's Idempotency-Key, or NULL */
} al_run_extra;

/* Create a run of SP (built by whichever interface asked: REST, Piston,
 * MCP, a skill) for P: the spec's check against the workspace's bounds,
 * the tool allow-list, image and network policy (SP is resolved in place),
 * approval, credits, queue and audit. Returns the status (CREATED, or OK
 * when X->wait and it has ended) and the document to answer (the run
 * object, or {"error": ...}); *RET_DOC is always set. X may be NULL. */
al_status al_run_create(al_service *s, const al_principal *p, al_run_spec *sp, const al_run_extra *x, json_t **ret_doc);
/* When X's Idempotency-Key was used by an earlier request of P: true, and
 * the status and document of the answer (the run it made, waited on with
 * X->wait; CONFLICT for another request). false: go on and create. */
bool al_run_replay(al_service *s, const al_principal *p, const al_run_extra *x, al_status *ret_status,
                   json_t **ret_doc);
/* Cancel run ID of P's workspace: withdrawn while it waits for approval,
 * taken off the queue, or killed. 1 done, 0 it had ended, -ENOENT no such run. */
int al_run_cancel(al_service *s, const al_principal *p, const char *id);
/* RFC 3339 text (the store's) of now plus MS (may be negative). */
void al_cluster_time_after(int64_t ms, char *buf, size_t len);
/* The runs past their workspace's run_retention_s lose their code, output
 * and events (retention.c), if this node claims the sweep that is due: how
 * many, or -errno. */
int al_retention_sweep(al_service *s);
json_t *al_run_json(al_service *s, const al_store_run *run);
/* Up to LIMIT events of RUN_ID after AFTER, as its stream carried them
 * (run_events.c: an output event whose bytes the result holds, and the
 * result event, read back from the run), in *RET (al_store_events_free). */
int al_run_events_after(al_service *s, const char *run_id, int64_t after, int64_t limit, al_store_event **ret,
                        size_t *ret_n, al_error *err);
/* Whether RUN_ID's events will never come (the run expired under its
 * workspace's retention, or is not there): its followers end. */
bool al_run_events_gone(al_service *s, const char *run_id);
/* runs.c: a run list's entry */
json_t *al_run_summary_json(const al_store_run_brief *b);
/* What a list shows of RESULT (the box's result) without loading it: its
 * small fields, kept beside it (al_store_run.result_summary); NULL when
 * RESULT is not an object. */
json_t *al_run_result_summary(json_t *result);
