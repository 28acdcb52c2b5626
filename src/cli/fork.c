/*
 * Zygotes (box.h's al_box_zygote, src/lang/warm/zygote.py): the config of
 * one, which `airlock helper` runs for the service's warm pool and
 * `airlock run --fork` for one run, and that run, in a box the zygote
 * forks for it.
 */
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../image/image.h"
#include "../lang/lang.h"
#include "cli.h"

/* The run's own config is its box's at the hand-off: it is here already. */
static int handoff_self(void *ud, al_box_config *run, al_error *err) {
    *run = *(const al_box_config *)ud;
    run->warm = NULL;
    run->fork = NULL;
    return 0;
}

int cli_run_forked(const al_lang *l, const al_box_config *cfg, const char *image_dir, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->reason = AL_REASON_ERROR;
    res->exit_code = -1;
    if (!al_box_can_fork() || !al_lang_zygote(l) || cfg->listen_port)
        return al_err(&res->error, "fork", EINVAL,
                      "--fork runs Python offline, as root, where cgroup v1 lets a zygote fork its box");
    if (image_dir && al_image_imported(image_dir))
        return al_err(&res->error, "fork", EPERM,
                      "--fork runs on the host's runtime or an image airlock built, not an imported one");
    int z[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, z) < 0)
        return al_err(&res->error, "fork", errno, "socketpair: %m");
    /* the zygote's box, run by a process of its own (this one is
     * single-threaded: it may fork); it ends at its request socket's end,
     * once its box has */
    pid_t zp = fork();
    if (zp < 0) {
        close(z[0]);
        close(z[1]);
        return al_err(&res->error, "fork", errno, "fork: %m");
    }
    if (zp == 0) {
        close(z[1]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        al_zygote_config zs;
        al_box_config zc;
        al_box_result zr;
        const char *why;
        if (al_zygote_config_init(l, cfg, image_dir, z[0], &zs, &zc, &why) == 0)
            al_box_run(&zc, &zr);
        _exit(0);
    }
    close(z[0]);
    al_box_fork bf = { .fd = z[1] };
    al_box_warm bw = { .handoff = handoff_self, .ud = (void *)cfg, .ready_timeout_ms = 60000, .run_fd = -1 };
    /* before its hand-off the box is its shape's: the run's runtime,
     * limits, cancel; nothing of the run's own yet */
    al_box_config box = {
        .runtime = cfg->runtime,
        .envp = cfg->envp,
        .stdin_fd = -1,
        .out_dirfd = -1,
        .limits = cfg->limits,
        .cancel_fd = cfg->cancel_fd,
        .warm = &bw,
        .fork = &bf,
    };
    int r = al_box_run(&box, res);
    close(z[1]);
    waitpid(zp, NULL, 0);
    return r;
}
