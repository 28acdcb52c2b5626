/*
 * A run's packages installed before its box (issue 38; install.c): the
 * layer its job's specs make, found in the layer store (src/image/layer.h)
 * or made there by install boxes on the installer image, and what the
 * run's box then gets of it: read-only binds and PYTHONPATH.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../box/box.h"
#include "../image/layer.h"
#include "job.h"

/* The install's output, bytes of one of its streams (the helper sends
 * them as "installing" events). */
typedef void (*al_install_output_fn)(void *ud, al_stream s, const char *buf, size_t len);

/* The most of an install's output passed on, both streams and both steps */
#define AL_INSTALL_OUTPUT_MAX (1u << 20)

typedef struct al_install {
    /* in: the job, the run's image digest (NULL: the host's runtime), a
     * fd readable when the run is canceled (-1: none), the output's callback */
    const al_job *job;
    const char *image_digest;
    int cancel_fd;
    al_install_output_fn on_output;
    void *ud;
    /* out */
    char key[65];
    bool reused;
    uint64_t ms;
    json_t *meta;                 /* the layer's layer.json */
    /* the run box's binds and environment (valid until al_install_free) */
    al_box_bind binds[2];
    size_t n_binds;
    char bind_paths[2][4096];
    char *env[1];
    size_t n_env;
    /* a failed install: which step ("python", "node", or "prepare" before
     * either ran), and its exit code (-1: none) */
    const char *failed_step;
    int exit_code;
    /* private */
    int layer_fd;
    int use_fd;                   /* the layer's lock, shared, while the run's box has it (al_layer_use) */
    uint64_t output_sent;
    bool output_cut;
    char tail[4096];              /* the last bytes of the install's stderr: why it failed */
    size_t tail_len;
    /* pip's report, from its stdout (--report -): where no package's code
     * can write, unlike a file of the box's /out */
    bool capture;
    char *report;
    size_t report_len;
    bool report_over;
} al_install;

/* IN's job's packages installed (or their layer found): 0 with the out
 * fields set, or -errno with why in ERR (step "install", the message
 * naming the step that failed) and IN->failed_step, IN->exit_code set. */
int al_install_run(al_install *in, al_error *err);
void al_install_free(al_install *in);

/* The install step's defaults (docs/operations.md): the service's config
 * (package_*) and `airlock run --package` both start from these */
#define AL_INSTALL_INDEX_PYTHON_DEFAULT "https://pypi.org/simple"
#define AL_INSTALL_REGISTRY_NODE_DEFAULT "https://registry.npmjs.org/"
#define AL_INSTALL_TIMEOUT_S_DEFAULT 300
#define AL_INSTALL_MEMORY_MB_DEFAULT 1024
#define AL_INSTALL_LAYER_MAX_MB_DEFAULT 512
#define AL_INSTALL_LAYER_MAX_FILES_DEFAULT 50000

/* The image installs run on, by its name in the image store */
#define AL_INSTALLER_IMAGE "installer"
/* The installer image's directory under IMAGES_DIR (the image store) into
 * RET_DIR (LEN bytes), resolved as a run's image is: what a job's
 * pkg_installer_dir holds. 0, or -errno with why in ERR. */
int al_install_image(const char *images_dir, char *ret_dir, size_t len, al_error *err);

/* The install box's network policy for REGISTRIES (package_registries'
 * form: HOST or HOST=CIDR+CIDR, comma-separated; NULL: the default
 * registries) in RET ("packages:REGISTRIES", as `airlock run --net` and
 * pkg_network take it), once INDEX_PYTHON and REGISTRY_NODE (either may be
 * NULL) are found to be http(s) URLs of hosts among them, on a port the
 * proxy allows, plain http only for a host given ranges. 0, or -EINVAL and
 * why in ERR (step "packages"). */
int al_install_network(const char *registries, const char *index_python, const char *registry_node, char *ret,
                       size_t len, al_error *err);

/* {"type":"installed","layer","reused","ms","python","node"} */
json_t *al_install_event(const al_install *in);
/* the result's "packages": {"layer","reused","install_ms","python","node"}
 * (and "failed": the step, when it failed) */
json_t *al_install_result(const al_install *in);

/* Layer garbage collection (al_layer_collect) over LAYERS_DIR (missing:
 * nothing to collect, 0): how many layers were removed, or -errno. */
int al_install_layers_collect(const char *layers_dir, int64_t now, int64_t max_age_s, uint64_t max_bytes,
                              al_layer_removed_fn fn, void *ud, al_error *err);

/* The layers under LAYERS_DIR, least recently used first (free()). */
int al_install_layers_list(const char *layers_dir, al_layer_info **ret, size_t *ret_n, al_error *err);
