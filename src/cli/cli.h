#pragma once

#include <jansson.h>

#include "../box/box.h"
#include "../lang/lang.h"
#include "../drivers/box_net.h"
#include "../drivers/box_result.h"
#include "../drivers/cancel_signals.h"
#include "../drivers/helper_main.h"
#include "../drivers/install.h"
#include "../drivers/zygote_config.h"

int cli_run(int argc, char **argv);
int cli_helper(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_admin(int argc, char **argv);
/* `airlock admin layers ls|prune [--older-than DAYS]` (admin_layers.c) */
typedef struct al_layer_limits {
    int retention_days;
    unsigned long long max_bytes;
} al_layer_limits;
int cli_admin_layers(const char *state, const al_layer_limits *lim, int argc, char **argv);
/* airlock-server only: MCP over stdio, forwarded to a service */
int cli_mcp(int argc, char **argv);
/* airlock mcp --local: start a private service on STATE; its URL, a key,
 * its pid and the state's lock. 0, or an exit status after saying why. */
int cli_mcp_local(const char *state, char *ret_url, size_t url_len, char *ret_key, size_t key_len, pid_t *ret_pid,
                  int *ret_lock_fd);
int cli_image(int argc, char **argv);
/* AIRLOCK_STATE or /var/lib/airlock */
const char *cli_state_dir(void);
/* Where runtime images are: AIRLOCK_IMAGES, else cli_state_dir()/images
 * (the rule of `airlock serve`'s images setting). */
void cli_images_dir(char *buf, size_t len);

int cli_doctor(int argc, char **argv);
/* airlock-server only: `airlock doctor --url`, a running service's badges and pool */
int cli_doctor_service(const char *url, const char *key, const char *op_token_file, bool json);
/* --help or -h among ARGV[1..] before a "--": a subcommand's usage, not its work */
bool cli_help_asked(int argc, char **argv);

/* Render bytes for a terminal: control characters and escapes made visible. */
void cli_write_safe(FILE *f, const char *buf, size_t len);

/* `airlock run --fork`: CFG (an offline Python run) in a box forked by a
 * zygote made for it, as the service's warm pool forks its boxes (the
 * battery's way to hold a forked box to a made one). */
int cli_run_forked(const al_lang *l, const al_box_config *cfg, const char *image_dir, al_box_result *res);

/* `airlock run --package LANG:SPEC` and its settings (run_packages.c) */
typedef struct cli_pkg_opts {
    const char *python[AL_JOB_PKG_MAX];
    size_t n_python;
    const char *node[AL_JOB_PKG_MAX];
    size_t n_node;
    const char *registries, *index, *npm_registry;
    bool refuse_scripts;
    uint64_t timeout_s, memory_bytes;
} cli_pkg_opts;
/* An install under way, and what the run's box gets of it. */
typedef struct cli_pkg_run {
    al_job job;
    al_install in;
    bool started, failed;
    al_error error;
} cli_pkg_run;
/* Option A (value V) into P: -1 when it is one of P's, 0 when not, else
 * the exit status after saying why. */
int cli_pkg_option(cli_pkg_opts *p, const char *a, const char *v);
bool cli_pkg_wanted(const cli_pkg_opts *p);
/* P's packages installed on the installer image (the image store's
 * "installer") for a run on IMAGE_DIGEST (NULL: the host's runtime): -1
 * to go on (RET->failed: the install failed, RET->error says why), else
 * the exit status after saying why nothing could start. */
int cli_pkg_install(const cli_pkg_opts *p, const char *image_digest, int cancel_fd, cli_pkg_run *ret);
/* The layer R made, in the run's box CFG: its trees read-only, PYTHONPATH
 * to its python/ (nothing when no install started). */
void cli_pkg_box(const cli_pkg_run *r, al_box_config *cfg);
void cli_pkg_free(cli_pkg_run *r);
