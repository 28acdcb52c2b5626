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
    /* driver = e2b, daytona (drivers/remote.c): the service's URLs, the
     * file holding its key ("": E2B_API_KEY / DAYTONA_API_KEY in the
     * environment; the key itself is never kept here), template / target */
    char e2b_api_url[512], e2b_sandbox_url[512], e2b_api_key_file[PATH_MAX], e2b_template[128];
    char daytona_api_url[512], daytona_api_key_file[PATH_MAX], daytona_target[128];
    /* driver = kubernetes (drivers/kubernetes.c): the kubeconfig ("":
     * in-cluster), namespace ("": the context's), the registry the images
     * are pushed to, RuntimeClass, seccomp profile, warm pods (0), how long
     * a pod may stay unschedulable */
    char kubeconfig[PATH_MAX], kubernetes_namespace[64], kubernetes_registry[256], kubernetes_runtime_class[254];
    char kubernetes_seccomp[PATH_MAX + 16];
    int kubernetes_pool, kubernetes_schedule_timeout_s;
    bool kubernetes_smoke;        /* the NetworkPolicy smoke test at start (default on) */
    /* where people reach the web console (https://airlock.example.com), ""
     * when unset: an https one makes the session cookie Secure */
    char public_url[512];
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
    /* package installs (issue 38; core/packages.c): the default of the
     * workspaces' package_installs (thread: true) and package_install_scripts
     * (a workspace may refuse scripts where the service allows them, never
     * the other way), the index and registry the install step is pointed
     * at, and its limits */
    bool package_installs, package_install_scripts;
    char package_index_python[512], package_registry_node[512];
    /* the hosts installs may reach, HOST or HOST=CIDR[+CIDR...], comma
     * separated ("": the default registries; proxy/policy.h) */
    char package_registries[2048];
    int package_install_timeout_s, package_install_memory_mb, package_layer_max_mb, package_layer_max_files;
    /* layer garbage collection: a layer unused this long goes, and the
     * least recently used go while the store holds more than this */
    int package_layer_retention_days, package_layers_max_mb;
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


/* The service: opaque outside src/core (service_int.h holds what it is);
 * the API and the CLI read it through functions (views.h and the
 * headers below), never take its lock. */
typedef struct al_service al_service;

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

/* The rest of the core's contract, a header per concern. */
#include "active.h"
#include "approvals.h"
#include "artifacts.h"
#include "cluster.h"
#include "events.h"
#include "governance.h"
#include "health.h"
#include "holds.h"
#include "idempotency.h"
#include "log.h"
#include "queue.h"
#include "run_end.h"
#include "runs.h"
#include "text.h"
