/*
 * A zygote's loop (issue 14's fork server), in C, in airlock-fork.so.
 * zygote.py calls al_zygote_serve once its imports are done and its
 * objects frozen; it returns only in a forked box's run process, which
 * goes on into the warm start (src/lang/warm/python.py).
 *
 * Why C: every fork marks all of the zygote's writable pages shared, and
 * the zygote's next write to each is a copy while a box lives. Written in
 * Python, the loop wrote some 165 pages of its interpreter after each fork
 * (its objects' reference counts, the request's JSON, the socket objects),
 * about 10 ms of CPU a box on a host whose page faults are dear. Here it
 * writes its stack and the few statics below, and runs no byte code.
 *
 * Each request (box.c's fork_request): an al_fork_request with five fds,
 * the box's sync socket to its parent, its stdout and stderr pipes, its
 * warm start's socket and its /dev nodes (al_mount_dev). Each box is a
 * clone into new namespaces (fork_init.c) whose user namespace maps only
 * uid and gid 65534, to one of the zygote's slots (a host uid of its own
 * each), reused only once the box that had it is gone. A request it cannot serve is answered on its sync
 * socket, as a box's failed step is. The end of the request socket ends
 * the zygote; its boxes live on (the zygote box's PID 1 reaps them).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_init.h"
#include "proto.h"
#include "setup.h"

__attribute__((visibility("default"))) int al_zygote_serve(int req, int slots);

/* the box each live clone is, by pid, and the slots free (the next taken
 * from the end: slot 1 first, as the pool's maps are written) */
static struct {
    pid_t pid;
    int slot;
} kids[AL_ZYGOTE_SLOTS];
static int n_kids, free_slots[AL_ZYGOTE_SLOTS], n_free;

/* the interpreter's own sequence around a fork (os.fork's), found in the
 * process that loaded this */
static void (*before_fork)(void), (*after_parent)(void), (*after_child)(void);

static void reap(void) {
    while (n_kids > 0) {
        pid_t p = waitpid(-1, NULL, WNOHANG);
        if (p <= 0)
            return;
        for (int i = 0; i < n_kids; i++)
            if (kids[i].pid == p) {
                free_slots[n_free++] = kids[i].slot;
                kids[i] = kids[--n_kids];
                break;
            }
    }
}

/* One request: 1 in the box's run process; 0 here, FDS still to close. */
static int clone_box(const al_fork_request *rq, const int fds[AL_FORK_FDS]) {
    al_error err = { 0 };
    int go[2];
    if (n_free == 0 || pipe2(go, O_CLOEXEC) < 0) {
        if (n_free == 0)
            al_err(&err, "zygote", EAGAIN, "every uid of the zygote is in use");
        else
            al_err(&err, "zygote", errno, "pipe for the box's go: %m");
        al_setup_say_error(fds[0], &err);
        return 0;
    }
    int slot = free_slots[--n_free];
    al_fork_args a = { .sync = fds[0], .out = fds[1], .err = fds[2], .chan = fds[3], .go = go[0], .dev = fds[4],
                       .tmpfs_bytes = rq->tmpfs_bytes, .tmpfs_inodes = rq->tmpfs_inodes, .pids = rq->pids,
                       .nofile = rq->nofile, .lifetime_ms = rq->lifetime_ms };
    before_fork();
    long pid = al_fork_box(&a);
    if (pid == 0) {
        after_child();
        /* nothing of the other boxes' stays in this one's memory */
        memset(kids, 0, sizeof kids);
        memset(free_slots, 0, sizeof free_slots);
        n_kids = n_free = 0;
        return 1;
    }
    after_parent();
    close(go[0]);
    if (pid < 0) {
        free_slots[n_free++] = slot;
        close(go[1]);
        al_err(&err, "clone", (int)-pid, "clone new namespaces: %s", strerror((int)-pid));
        al_setup_say_error(fds[0], &err);
        return 0;
    }
    kids[n_kids].pid = (pid_t)pid;
    kids[n_kids++].slot = slot;
    /* its only mapping: 65534 to the slot's id, which the zygote's own
     * map sends to a host uid of that slot alone */
    char map[64];
    snprintf(map, sizeof map, "%d %d 1\n", AL_SANDBOX_ID, slot);
    if (al_setup_write_maps((pid_t)pid, map, map, &err) < 0 ||
        (write(go[1], "g", 1) != 1 && al_err(&err, "userns", errno, "let the box go on: %m") < 0)) {
        kill((pid_t)pid, SIGKILL);
        al_setup_say_error(fds[0], &err);
    }
    close(go[1]);
    return 0;
}

int al_zygote_serve(int req, int slots) {
    before_fork = (void (*)(void))dlsym(RTLD_DEFAULT, "PyOS_BeforeFork");
    after_parent = (void (*)(void))dlsym(RTLD_DEFAULT, "PyOS_AfterFork_Parent");
    after_child = (void (*)(void))dlsym(RTLD_DEFAULT, "PyOS_AfterFork_Child");
    if (!before_fork || !after_parent || !after_child)
        return -ENOSYS;
    if (slots < 1 || slots > AL_ZYGOTE_SLOTS)
        return -EINVAL;
    for (n_free = 0; n_free < slots; n_free++)
        free_slots[n_free] = slots - n_free;
    for (;;) {
        struct pollfd pf = { .fd = req, .events = POLLIN };
        poll(&pf, 1, 1000);
        reap();
        /* room for more than a request, so that a longer one is seen */
        union {
            al_fork_request rq;
            char buf[512];
        } body;
        union {
            char buf[CMSG_SPACE(AL_FORK_FDS * sizeof(int))];
            struct cmsghdr align;
        } u;
        struct iovec iov = { .iov_base = body.buf, .iov_len = sizeof body.buf };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
        ssize_t n = recvmsg(req, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            _exit(1);
        }
        /* (the buffer holds AL_FORK_FDS, rounded up to its alignment: the
         * kernel closes any more and says MSG_CTRUNC; one past them that
         * fits the rounding is closed here, and the request refused) */
        int fds[AL_FORK_FDS], nfds = 0;
        bool extra = false;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                    int fd;
                    memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                    if (nfds < AL_FORK_FDS)
                        fds[nfds++] = fd;
                    else {
                        close(fd);
                        extra = true;
                    }
                }
        if (n == 0 && nfds == 0)
            /* the pool is done with it */
            _exit(0);
        bool ok = !extra && nfds == AL_FORK_FDS && (size_t)n == sizeof body.rq && !(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
        if (!ok && nfds > 0) {
            /* said, not left to the box's setup timeout */
            al_error err = { 0 };
            al_err(&err, "zygote", EINVAL, "a request the zygote cannot read");
            al_setup_say_error(fds[0], &err);
        }
        if (ok && clone_box(&body.rq, fds))
            return 0;
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
    }
}
