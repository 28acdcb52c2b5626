/*
 * A zygote's box config (box.h's al_box_zygote, src/lang/warm/zygote.py):
 * the one `airlock helper` runs for the service's warm pool, and `airlock
 * run --fork` for one run.
 */
#include <string.h>

#include "../image/image.h"
#include "zygote_config.h"

int al_zygote_config_init(const al_lang *l, const al_box_config *base, const char *image_dir, int req_fd, al_zygote_config *z,
                      al_box_config *ret, const char **ret_why) {
    const char *launcher = al_lang_warm_start(l), *mod = al_lang_zygote(l);
    *ret_why = "a zygote is for a language with a fork server (python)";
    if (!launcher || !mod)
        return -EINVAL;
    /* its boxes' isolation is its interpreter's doing (zygote.py), which
     * an imported image's files could undo */
    *ret_why = "a zygote runs only on the host's runtime or an image airlock built, not an imported one";
    if (image_dir && al_image_imported(image_dir))
        return -EPERM;
    memset(z, 0, sizeof *z);
    /* every box's fixed environment (no run's: nothing of one reaches the
     * interpreter its boxes are forked from), with what its warm start
     * reads */
    size_t k = 0;
    for (; al_box_env[k] && k < AL_BOX_NET_ENV_MAX; k++)
        z->env[k] = al_box_env[k];
    snprintf(z->preload, sizeof z->preload, "AIRLOCK_PRELOAD=");
    snprintf(z->warm_fd, sizeof z->warm_fd, "AIRLOCK_WARM_FD=%d", AL_BOX_WARM_FD);
    snprintf(z->slots, sizeof z->slots, "AIRLOCK_ZYGOTE_SLOTS=%d", AL_ZYGOTE_SLOTS);
    z->env[k++] = z->preload;
    z->env[k++] = z->warm_fd;
    z->env[k++] = z->slots;
    z->env[k] = NULL;
    z->argv[0] = (char *)l->interpreter;
    z->argv[1] = (char *)l->default_file;
    z->argv[2] = NULL;
    z->files[0] = (al_box_file){ l->default_file, launcher, strlen(launcher), 0644 };
    z->files[1] = (al_box_file){ AL_LANG_ZYGOTE_MODULE ".py", mod, strlen(mod), 0644 };
    z->box.req_fd = req_fd;
    /* Its boxes' runs are theirs, not its: it lasts until its request
     * socket's end, and has room for each of its boxes until each joins
     * its own cgroup. */
    al_box_limits lim = base->limits;
    lim.wall_ms = 7ULL * 24 * 3600 * 1000;
    if (lim.pids < 2 * AL_ZYGOTE_SLOTS + 16)
        lim.pids = 2 * AL_ZYGOTE_SLOTS + 16;
    *ret = (al_box_config){
        .runtime = base->runtime,
        .argv = z->argv,
        .envp = z->env,
        .files = z->files,
        .n_files = 2,
        .stdin_fd = -1,
        .out_dirfd = -1,
        .limits = lim,
        .cancel_fd = -1,
        .zygote = &z->box,
    };
    return 0;
}

