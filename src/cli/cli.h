#pragma once

#include <jansson.h>

#include "../box/box.h"
#include "../lang/lang.h"
#include "net.h"

int cli_run(int argc, char **argv);
int cli_helper(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_admin(int argc, char **argv);
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

/* Block SIGINT, SIGTERM and SIGHUP and return a signalfd for them: the box
 * is canceled cleanly instead of dying with us. */
int cli_cancel_signals(void);

/* The environment every box gets, and nothing else. */
extern char *const cli_box_env[];
int cli_doctor(int argc, char **argv);
/* airlock-server only: `airlock doctor --url`, a running service's badges and pool */
int cli_doctor_service(const char *url, const char *key, const char *op_token_file, bool json);
/* --help or -h among ARGV[1..] before a "--": a subcommand's usage, not its work */
bool cli_help_asked(int argc, char **argv);

/* JSON of a run result, with text made valid UTF-8 (invalid bytes become U+FFFD). */
json_t *cli_result_json(const al_box_result *r, const al_runtime *rt);
json_t *cli_string(const char *s, size_t len);
/* S[0..LEN) in base64, exactly. */
json_t *cli_base64(const char *s, size_t len);
/* Render bytes for a terminal: control characters and escapes made visible. */
void cli_write_safe(FILE *f, const char *buf, size_t len);

/* A zygote's box config (src/cli/fork.c): L's warm start and fork server
 * on BASE's runtime (IMAGE_DIR's, or the host's when NULL) and limits (its
 * wall clock and pids its own), offline with the fixed box environment,
 * its request socket REQ_FD; Z holds what the config points into. 0, or
 * -EINVAL for a language with no fork server, -EPERM on an imported image,
 * with why in *RET_WHY. */
typedef struct cli_zygote {
    char *env[CLI_NET_ENV_MAX + 4];
    char preload[32], warm_fd[32], slots[48];
    char *argv[3];
    al_box_file files[2];
    al_box_zygote box;
} cli_zygote;
int cli_zygote_config(const al_lang *l, const al_box_config *base, const char *image_dir, int req_fd, cli_zygote *z,
                      al_box_config *ret, const char **ret_why);
/* `airlock run --fork`: CFG (an offline Python run) in a box forked by a
 * zygote made for it, as the service's warm pool forks its boxes (the
 * battery's way to hold a forked box to a made one). */
int cli_run_forked(const al_lang *l, const al_box_config *cfg, const char *image_dir, al_box_result *res);
