/*
 * Drivers run a job somewhere: native (a box on this host, through a
 * single-threaded helper process), disabled (refuses). One ops table; the
 * service knows nothing of clone flags, the driver nothing of tenants.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

#include "../proxy/policy.h"
#include "../util/util.h"
#include "job.h"

typedef struct al_driver_run {
    pid_t pid;                    /* the helper running the job, or -1 */
    int events_fd;                /* JSON lines: started, stdout, stderr, result */
    int job_fd;                   /* kept open: its end tells the helper we are gone */
} al_driver_run;

typedef struct al_driver_ops {
    const char *name;
    /* What it enforces on this host, as {control: {level, detail}}. */
    json_t *(*capabilities)(void);
    /* 0 when it can run jobs here, else -errno with the reason in ERR. */
    int (*probe)(al_error *err);
    /* Start JOB (job.h). Called from a thread that lives as long as the
     * run: the helper dies with it. -E2BIG when the job is too large for
     * its helper (AL_JOB_MAX). */
    int (*start)(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err);
    int (*cancel)(al_driver_run *r);
    /* Reap after the events stream ended; returns the helper's wait status. */
    int (*wait)(al_driver_run *r);
    /* After a crash: remove what boxes of a dead airlock left (cgroups,
     * containers). Called at start and from time to time. */
    void (*sweep)(void);
    /* The service stops (its runs have ended): remove what the driver
     * made ahead of need. NULL: nothing to do. */
    void (*stop)(void);
    /* What it keeps made ahead of need, as al_docker_pool_json() says it
     * (per_shape, idle, in_use, removing, shapes with hits and misses).
     * NULL: it keeps nothing. */
    json_t *(*pool)(void);
    /* Runs need an image (a container cannot run on the host's /usr): a
     * run that names none gets the default image. */
    bool needs_image;
    /* It runs an image by its registry reference (oci.json's manifest
     * digest) and never reads the tree: an image directory's reference
     * entry (no rootfs, what the server image carries) is enough for it
     * (al_image_resolve_ref). */
    bool image_by_reference;
    /* Its helper installs a job's packages (pkg_* fields) before the run's
     * box (drivers/install.c): a run that asks for packages is refused on
     * a driver without, by this fact, not by the driver's name. */
    bool installs_packages;
    /* Whether its boxes are held to network mode MODE (their own network
     * namespace, and the egress proxy's listener in it, where the mode has
     * one); when not, *RET_WHY may say why. NULL: no mode is (no runs
     * execute). A fact of the driver, not a rule the API keeps by name. */
    bool (*net_mode_held)(al_net_mode mode, const char **ret_why);
} al_driver_ops;

extern const al_driver_ops al_driver_native;
extern const al_driver_ops al_driver_docker;
extern const al_driver_ops al_driver_disabled;
extern const al_driver_ops al_driver_e2b;
extern const al_driver_ops al_driver_daytona;
extern const al_driver_ops al_driver_kubernetes;

/* The docker driver's daemon and runtime, for the whole process (the
 * service's configuration, set once before any run): SOCKET NULL for
 * DOCKER_HOST or /var/run/docker.sock, RUNTIME "runc" or "runsc", POOL
 * the containers it makes ahead of need per shape of run (0: none). */
int al_driver_docker_configure(const char *socket, const char *runtime, int pool, al_error *err);

/* airlock's seccomp policy as the JSON profile the docker driver sends
 * (HostConfig.SecurityOpt seccomp=...), which is also the format of a
 * kubelet's Localhost profile (`airlock seccomp-profile`): malloc'd, or
 * NULL with why in ERR. */
char *al_driver_seccomp_profile(al_error *err);

/* The native driver, for the whole process (the service's configuration,
 * set once before any run): BOXES at once at most (what its badges weigh
 * host root's shared budgets against); warm boxes, at most WARM_POOL per
 * shape of Python or Node run (0: none), as demand asks, holding
 * MEMORY_BYTES in all; Python's import PRELOAD's modules ahead. */
int al_driver_native_configure(int boxes, int warm_pool, uint64_t memory_bytes, const char *preload, bool fork,
                               al_error *err);

/* A remote driver (KIND "e2b" or "daytona"), for the whole process (the
 * service's configuration, set once before any run): its service's
 * API_URL, E2B's SANDBOX_URL for every sandbox's envd ("" or NULL: each
 * sandbox's own), the key in KEY_FILE (NULL or "": E2B_API_KEY or
 * DAYTONA_API_KEY in the environment; none: the driver's probe refuses,
 * saying so), TEMPLATE (e2b's template, daytona's target; "": the
 * service's default), STATE_DIR naming this service's sandboxes beside
 * the host's name (a sweep deletes those of its dead instances). */
int al_driver_remote_configure(const char *kind, const char *api_url, const char *sandbox_url, const char *key_file,
                               const char *template_name, const char *state_dir, al_error *err);

/* The kubernetes driver (drivers/kubernetes.c), for the whole process (the
 * service's configuration, set once before any run): its config keys. */
typedef struct al_driver_kube_config {
    const char *kubeconfig;       /* NULL or "": in-cluster */
    const char *namespace_;       /* NULL or "": the context's */
    const char *registry;         /* where `airlock image export`'s images are pushed */
    const char *runtime_class;    /* NULL or "": none */
    const char *seccomp;          /* "runtime-default" (NULL, "") or "localhost:PATH" */
    int pool;                     /* warm pods per shape (not built yet: 0) */
    int schedule_timeout_s;       /* 0: 60 */
    /* the NetworkPolicy smoke test (kube/smoke.h) once at start, on the
     * "default" image of IMAGES_DIR: the network badge is "unconfirmed"
     * with the reason until it passes (kubernetes_smoke) */
    bool smoke;
    const char *images_dir;
} al_driver_kube_config;
/* K's cluster loaded (its kubeconfig read now: a bad one fails the start),
 * STATE_DIR naming this service's pods beside the host's name. */
int al_driver_kube_configure(const al_driver_kube_config *k, const char *state_dir, al_error *err);
/* The smoke test's word on the deny-all NetworkPolicy (the network badge). */
void al_driver_kube_network_confirmed(bool confirmed);

const al_driver_ops *al_driver_by_name(const char *name);
