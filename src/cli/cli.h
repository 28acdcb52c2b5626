#pragma once

#include <jansson.h>

#include "../box/box.h"
#include "../lang/lang.h"
#include "../drivers/box_net.h"
#include "../drivers/box_result.h"
#include "../drivers/cancel_signals.h"
#include "../drivers/helper_main.h"
#include "../drivers/zygote_config.h"

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
