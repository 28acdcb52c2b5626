/*
 * A job: one run (or a warm box, a zygote, a container's keeper) as the
 * core hands it to its driver, and as the driver hands it to the
 * single-threaded helper process that runs the box. In process it is this
 * struct; across the one process boundary (driver -> `airlock helper`'s
 * stdin) it is one line of JSON, written and read by job_codec.c alone.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../box/box.h"
#include "../lang/lang.h"
#include "../util/util.h"

/* The most a job may take as one line of JSON (the helper reads no more):
 * sized so that whatever the service's default caps accept (code_max's 1
 * MiB and 256 arguments of 4 KiB, each JSON-escaped at up to six bytes a
 * byte, beside AL_JOB_RESERVE of paths, limits and policy) fits; the core
 * refuses at the API, with 413, a run whose job would not
 * (al_run_spec_check), so that an accepted run is never lost on the way. */
#define AL_JOB_MAX (16u << 20)
/* what the service adds to a job beside a run's code and arguments: host
 * paths (PATH_MAX each, a few), limits, the network policy (its at most
 * 64 names of 254 bytes), the image and skill */
#define AL_JOB_RESERVE (64u << 10)
/* the host paths staged into /work, and the script's arguments */
#define AL_JOB_INPUTS_MAX 1024
#define AL_JOB_ARGS_MAX 256
/* a run's packages (issue 38): at most this many specs per language, each
 * at most AL_JOB_PKG_SPEC_MAX bytes (npm's longest package name), checked
 * by al_pkg_spec_check (pkg_spec.h) wherever they come in */
#define AL_JOB_PKG_MAX 32
#define AL_JOB_PKG_SPEC_MAX 214

typedef enum al_job_driver {
    AL_JOB_NATIVE,                /* a box on this host */
    AL_JOB_DOCKER,                /* a container (airlock-server's helper only) */
    AL_JOB_E2B,                   /* an E2B sandbox (airlock-server's helper only) */
    AL_JOB_DAYTONA,               /* a Daytona sandbox (airlock-server's helper only) */
    AL_JOB_KUBERNETES,            /* a pod of a Kubernetes cluster (airlock-server's helper only) */
    _AL_JOB_DRIVER_MAX,
} al_job_driver;

/* Uids the service holds the locks of, its locks passed to the helper as
 * its fds LOCK_FDS (the same open files). */
typedef struct al_job_uids {
    bool set;
    uid_t holder, uid;
    int lock_fds[2];
} al_job_uids;

/* A container the service made ahead of need (docker_pool.c). */
typedef struct al_job_held {
    bool set;
    char id[80];
    char image_id[80];
    int64_t hold_until_s;
    al_job_uids uids;
} al_job_held;

typedef struct al_job {
    /* the run: NULL (or 0) where it has none */
    const al_lang *lang;
    char *code;
    char **inputs;                /* host paths staged into /work */
    size_t n_inputs;
    char *out_dir;                /* host dir /out is collected to */
    al_box_limits limits;         /* wall, memory, cpu, pids, output, tmpfs cross the wire; the rest are defaults */
    char *image_dir, *image_digest; /* run on that image (both, or neither: the host's runtime) */
    bool has_args;
    char **args;
    size_t n_args;
    char *stdin_path;
    char *network;                /* the policy, as `airlock run --net` takes it; NULL: offline */
    char *skill_dir, *script;     /* a skill's bundle (bound at /skill) and the path of its entrypoint in the box */
    /* a working directory that outlives the run (an E2B sandbox's home):
     * WORK_IN's entries staged as /work's own, and /work collected into
     * WORK_OUT after the run (both, or neither); such a run is always cold */
    char *work_in, *work_out;
    /* a warm box (made now, its run later), a zygote (warm boxes of its
     * shape are forked from it, on requests at fd ZYGOTE_FD), or a run
     * whose box a zygote forks now (at fd FORK_FD); PRELOAD: the modules a
     * warm Python imports ahead */
    bool warm, zygote;
    int fork_fd, zygote_fd;       /* -1: none */
    char *preload;
    /* where: this host, or a container of DOCKER_SOCKET's daemon (NULL:
     * the default) under DOCKER_RUNTIME (runc, runsc) */
    al_job_driver driver;
    char *docker_socket, *docker_runtime;
    al_job_held docker_box;       /* the container made ahead of need to run in, if still fit */
    al_job_uids docker_uids;      /* else the uids of the container to make */
    al_job_held docker_keep;      /* this helper is the keeper of that container (id and uids only) */
    /* e2b, daytona: the service's API (and E2B's envd for every sandbox,
     * NULL: each sandbox's own), its key (a secret: in the job on the
     * helper's stdin, never in its argv or environment), the template
     * (e2b) or target (daytona), and the sandbox's tag ("<node>/<run>") */
    char *remote_api_url, *remote_sandbox_url, *remote_key, *remote_template, *remote_tag;
    /* kubernetes: the kubeconfig (NULL: in-cluster; its token is read
     * there, never carried here), the namespace (NULL: the context's), the
     * image by digest (REPO@sha256:HEX), the RuntimeClass (NULL: none),
     * the seccomp profile ("runtime-default" or "localhost:PATH"), the
     * pod's name ("airlock-<16 hex>"), this service's node and instance
     * labels (12 hex each), how long a pod may stay unschedulable */
    char *kube_config, *kube_namespace, *kube_image_ref, *kube_runtime_class, *kube_seccomp, *kube_name,
        *kube_node, *kube_instance;
    int kube_schedule_timeout_s;
    /* packages (issue 38; all NULL/0 when the run has none): the specs
     * (as checked), installed before the run's box into a layer under
     * PKG_LAYERS_DIR (src/drivers/install.c) by an install box on the
     * installer image (PKG_INSTALLER_DIR, its directory holding rootfs;
     * NULL: an install is refused), from PKG_INDEX_PYTHON and
     * PKG_REGISTRY_NODE, under the network policy PKG_NETWORK (as
     * `airlock run --net` takes it: `packages` with the registries), with
     * their scripts and source builds run in that box (PKG_SCRIPTS) or
     * refused, within PKG_LIMITS and the layer's caps */
    char **pkg_python;
    size_t n_pkg_python;
    char **pkg_node;
    size_t n_pkg_node;
    char *pkg_layers_dir;
    char *pkg_installer_dir;
    char *pkg_index_python, *pkg_registry_node;
    char *pkg_network;
    bool pkg_scripts;
    al_box_limits pkg_limits;
    uint64_t pkg_layer_max_bytes, pkg_layer_max_files;
} al_job;

/* An empty job: no run, the default limits, no fds. */
void al_job_init(al_job *job);
/* What JOB owns (every string and array), freed; JOB is empty after. */
void al_job_free(al_job *job);
/* JOB's strings and arrays copied into RET (which owns them). */
int al_job_copy(const al_job *job, al_job *ret);
/* A copy of S into *DST (freeing what was there); S NULL: NULL. */
int al_job_set(char **dst, const char *s);
/* An input path, or an argument, appended (each at most its _MAX). */
int al_job_add_input(al_job *job, const char *path);
int al_job_add_arg(al_job *job, const char *arg);
/* A package spec appended to the job's python or node list (each at most
 * AL_JOB_PKG_MAX; the spec is not checked here: al_pkg_spec_check). */
int al_job_add_pkg_python(al_job *job, const char *spec);
int al_job_add_pkg_node(al_job *job, const char *spec);
/* Whether JOB installs packages before its box. */
bool al_job_has_packages(const al_job *job);

/* JOB as one line of JSON, without its newline, in *RET_TEXT (the caller
 * frees it), of *RET_LEN bytes: -E2BIG (and why, under step "provisioning",
 * in ERR) when it would be AL_JOB_MAX bytes or more. */
int al_job_encode(const al_job *job, char **ret_text, size_t *ret_len, al_error *err);
/* LEN bytes of TEXT as a job into RET (which the caller frees with
 * al_job_free, also on failure): strict (no unknown field, every field of
 * its type, within its cap), else -EINVAL and why in ERR (step "job"). */
int al_job_decode(const char *text, size_t len, al_job *ret, al_error *err);
