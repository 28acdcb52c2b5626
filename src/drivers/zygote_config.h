#pragma once

#include "../box/box.h"
#include "../lang/lang.h"
#include "box_net.h"

/* A zygote's box config (zygote_config.c): L's warm start and fork server
 * on BASE's runtime (IMAGE_DIR's, or the host's when NULL) and limits (its
 * wall clock and pids its own), offline with the fixed box environment,
 * its request socket REQ_FD; Z holds what the config points into. 0, or
 * -EINVAL for a language with no fork server, -EPERM on an imported image,
 * with why in *RET_WHY. */
typedef struct al_zygote_config {
    char *env[AL_BOX_NET_ENV_MAX + 4];
    char preload[32], warm_fd[32], slots[48];
    char *argv[3];
    al_box_file files[2];
    al_box_zygote box;
} al_zygote_config;
int al_zygote_config_init(const al_lang *l, const al_box_config *base, const char *image_dir, int req_fd, al_zygote_config *z,
                      al_box_config *ret, const char **ret_why);
