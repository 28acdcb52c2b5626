/* The keeper of a run's container (container_int.h, box/keeper.c): the
 * locks of the container's two uids held by a process of its own until the
 * container's init has ended, and the container killed and removed once
 * the process that runs it has ended, however it ended.
 *
 * Why: the container's processes are the daemon's children, not the
 * run's, so the run's death (a SIGKILL from `subprocess.run(timeout=)`, the
 * OOM killer) ends none of them, and the kernel drops the run's locks at
 * once. Without a keeper the script ran on past its deadline (the holder
 * sleeps its wall clock and a margin), nothing removed the container, and
 * its uids could be given to another box while it ran. Its init's end is
 * the end of everything in it: the script's processes are execs that
 * joined its pid namespace (under gVisor, its sandbox's).
 */
#include "container_int.h"

#include <string.h>
#include <time.h>

#include "../box/uidpool.h"

/* how long the keeper tries to remove the container once its run is gone,
 * while the daemon does not answer (seconds) */
#define REMOVE_TRIES 60

typedef struct reaper {
    char sock[108];
    char id[80];
} reaper;

/* In the keeper, once the run has ended: the container removed (its
 * processes killed, under runc already by the init's SIGKILL), which is a
 * 404 when the run removed it itself. */
static void remove_container(void *ud) {
    const reaper *r = ud;
    char path[200];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", r->id);
    for (int i = 0; i < REMOVE_TRIES; i++) {
        al_error err = { 0 };
        al_engine e;
        int st = -1;
        if (al_engine_open(&e, r->sock, &err) == 0) {
            st = al_engine_call(&e, "DELETE", path, NULL, NULL, &err);
            al_engine_close(&e);
        }
        if (st == 204 || st == 404)
            return;
        struct timespec ts = { 1, 0 };
        nanosleep(&ts, NULL);
    }
}

int al_docker_keeper_start(dbox *b, al_error *err) {
    reaper rp;
    int r = al_engine_socket_path(b->o->socket, rp.sock, sizeof rp.sock, err);
    if (r < 0)
        return r;
    snprintf(rp.id, sizeof rp.id, "%s", b->id);
    int locks[2] = { b->holder_lock, b->uid_lock };
    if (locks[0] < 0 || locks[1] < 0) {
        locks[0] = b->o->lock_fds[0] > 2 ? b->o->lock_fds[0] : -1;
        locks[1] = b->o->lock_fds[1] > 2 ? b->o->lock_fds[1] : -1;
    }
    if (locks[0] < 0 || locks[1] < 0 || b->init_fd < 0)
        return al_err(err, "keeper", EINVAL, "the container's keeper needs its uids' locks and its init");
    /* under runc the init is this host's process: its SIGKILL takes the
     * whole pid namespace at once, whatever the daemon does */
    al_uid_keeper k = { .locks = locks, .n_locks = 2, .pidfd = b->init_fd,
                        .kill_init = b->o->runtime == AL_DOCKER_RUNC, .on_end = remove_container, .ud = &rp };
    return al_uid_keeper_start(&k, &b->keeper_fd, err);
}

void al_docker_keeper_done(dbox *b) {
    if (b->keeper_fd >= 0)
        close(b->keeper_fd);
    b->keeper_fd = -1;
}

int al_docker_keep_held(const char *socket, al_docker_runtime runtime, const char *id, const int lock_fds[2], int run_fd,
                        al_error *err) {
    if (!id || !*id || strlen(id) >= 80 || strspn(id, "0123456789abcdef") != strlen(id))
        return al_err(err, "keeper", EINVAL, "no container named to keep");
    al_docker_opts o = { .socket = socket, .runtime = runtime, .owner_fd = -1 };
    al_box_config cfg = { .stdin_fd = -1, .cancel_fd = -1, .out_dirfd = -1 };
    al_box_result res = { 0 };
    dbox b = { .o = &o, .cfg = &cfg, .res = &res, .holder_lock = -1, .uid_lock = -1, .rootfd = -1, .init_fd = -1,
               .main_fd = -1, .keeper_fd = -1 };
    reaper rp;
    int r = al_engine_socket_path(socket, rp.sock, sizeof rp.sock, err);
    if (r < 0 || (r = al_engine_open(&b.e, rp.sock, err)) < 0)
        return r;
    snprintf(b.id, sizeof b.id, "%s", id);
    snprintf(rp.id, sizeof rp.id, "%s", id);
    /* its init, by pidfd, checked to be in the container's cgroup */
    r = al_docker_inspect_init(&b, NULL, err);
    al_engine_close(&b.e);
    if (r < 0) {
        if (b.init_fd >= 0)
            close(b.init_fd);
        return r;
    }
    al_uid_keeper k = { .locks = lock_fds, .n_locks = 2, .pidfd = b.init_fd, .kill_init = runtime == AL_DOCKER_RUNC,
                        .on_end = remove_container, .ud = &rp };
    al_uid_keep(&k, run_fd);
}
