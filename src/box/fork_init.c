/*
 * A box a zygote forks (src/box/zygote.c), its PID 1's side, in C.
 *
 * Built as a shared object of its own (airlock-fork.so: this file with
 * zygote.c, setup.c, mount.c, proto.c, cgroup_join.c, seccomp.c and
 * util.c, none of the rest of airlock), which box.c stages into a
 * zygote's /work and the zygote's interpreter loads with ctypes; its loop
 * (zygote.c) calls al_fork_box for each request, which clones the box
 * from the zygote; the clone, the box's PID 1, builds what a made box's
 * PID 1 builds (child.c), with the same steps (setup.c), in the same
 * order and speaking the same messages to its parent (box.c), and never
 * goes back into Python: it touches only its stack and these pages, not
 * the interpreter's, each page of which is a copy once a fork writes it
 * (done in Python, PID 1's steps took ~650 such copies for every box,
 * and the run's process as many again after PID 1 had touched them). It
 * forks the run's process, which returns from al_fork_box into the warm
 * start, the interpreter going on as any warm box's.
 */
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mount.h"
#include "fork_init.h"
#include "proto.h"
#include "seccomp.h"
#include "setup.h"

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if ((expr) < 0)                                                                            \
            al_setup_fail(a.sync, &err);                                                           \
    } while (0)

static int scratch(const al_box_limits *lim, const char *path, unsigned mode, unsigned attrs, al_error *err) {
    al_tmpfs_opts o = { lim->tmpfs_bytes, lim->tmpfs_inodes, mode, AL_SANDBOX_ID, AL_SANDBOX_ID };
    _cleanup_close_ int m = al_mount_tmpfs(&o, attrs, err);
    if (m < 0)
        return m;
    return al_mount_attach(m, AT_FDCWD, path, err);
}

/* The zygote's read-only trees (its /usr, /etc pieces, an image's trees,
 * a skill's: binds of one inode each for every box it forks, and for the
 * host) each covered by an overlay of this box's own (al_mount_own_tree),
 * read from the zygote's mountinfo before this box's own /proc covers it.
 * Its root is not among them: the root's few files are the zygote's
 * (docs/security.md, O5); nor are /dev's nodes (al_mount_dev_nodes). */
static int own_trees(al_error *err) {
    _cleanup_free_ char *info = NULL;
    int r = al_read_small(AT_FDCWD, "/proc/self/mountinfo", 1 << 20, &info, NULL);
    if (r < 0)
        return al_err(err, "mount", -r, "read the zygote's mountinfo: %s", strerror(-r));
    for (char *line = info, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... */
        char point[512], opts[256];
        if (sscanf(line, "%*s %*s %*s %*s %511s %255s", point, opts) != 2)
            return al_err(err, "mount", EPROTO, "a mountinfo line unread: %.80s", line);
        bool ro = strncmp(opts, "ro", 2) == 0 && (opts[2] == ',' || opts[2] == '\0');
        if (!ro || strcmp(point, "/") == 0 || strncmp(point, "/dev/", 5) == 0)
            continue;
        /* (an escaped name is no tree the zygote made) */
        if (strchr(point, '\\'))
            return al_err(err, "mount", EPROTO, "a mount point escaped: %s", point);
        if ((r = al_mount_own_tree(AT_FDCWD, point, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                                   AT_FDCWD, point, err)) < 0)
            return r;
    }
    return 0;
}

/* sync 2: /work, /out and /tmp, with a pidfd of this process (its parent
 * reads its pid and uids from the message, the kernel's word) */
static int send_fds(int sock, al_error *err) {
    int fds[4] = { -1, -1, -1, -1 };
    static const char *const dirs[] = { "/work", "/out", "/tmp" };
    int r = 0;
    for (int i = 0; i < 3 && r == 0; i++)
        if ((fds[i] = open(dirs[i], O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            r = al_err(err, "scratch", errno, "open %s: %m", dirs[i]);
    if (r == 0 && (fds[3] = (int)syscall(SYS_pidfd_open, getpid(), 0)) < 0)
        r = al_err(err, "scratch", errno, "pidfd_open: %m");
    al_msg m = { .type = AL_MSG_FDS };
    if (r == 0 && (r = al_msg_send(sock, &m, fds, 4)) < 0)
        al_err(err, "sync", r, "send scratch fds: %s", strerror(-r));
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return r;
}

static void on_sigchld(int sig) { (void)sig; }

/* PID 1 (child.c's be_init): reaps every process that ends, reports the
 * script's status, and its end takes the namespace down; the end of the
 * sync socket (the box's parent gone: its parent is the zygote, so no
 * PDEATHSIG says so) ends it too, and so does LIFETIME_MS from its start:
 * a parent that is alive but stopped or stuck does not hold the box past
 * its deadline (a made box's keeper does this for it). SIGCHLD is blocked
 * but in the wait. */
static _Noreturn void be_init(int sock, pid_t script, const sigset_t *wait_mask, uint64_t lifetime_ms) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            if (p == script) {
                al_msg m = { .type = AL_MSG_STATUS, .status = st };
                al_msg_send(sock, &m, NULL, 0);
                _exit(0);
            }
        if (p < 0 && errno == ECHILD)
            _exit(125);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t left_ms = (int64_t)lifetime_ms - ((int64_t)(now.tv_sec - t0.tv_sec) * 1000 +
                                                  (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (lifetime_ms > 0 && left_ms <= 0)
            _exit(125); /* PID 1's end takes every process of the box with it */
        struct timespec step = { .tv_sec = left_ms / 1000, .tv_nsec = (left_ms % 1000) * 1000000 };
        struct pollfd pf = { .fd = sock, .events = POLLIN };
        if (ppoll(&pf, 1, lifetime_ms > 0 ? &step : NULL, wait_mask) > 0) {
            char b;
            if (recv(sock, &b, 1, MSG_DONTWAIT) == 0)
                _exit(0);
        }
    }
}

/* In the clone: returns only in the run's process, its stdio and warm
 * start's socket in place. */
static void box_main(const al_fork_args *args) {
    al_fork_args a = *args;
    al_error err = { 0 };
    int *keep[] = { &a.sync, &a.out, &a.err, &a.chan, &a.go, &a.dev };
    /* nothing of the zygote's: only this box's fds stay */
    if (al_setup_keep_fds(keep, ELEMENTSOF(keep)) < 0)
        _exit(125); /* the socket may be gone: the parent sees EOF and says so */
    char c;
    if (read(a.go, &c, 1) != 1)                          /* sync 1: maps written */
        _exit(125);
    close(a.go);
    al_box_limits lim = { .tmpfs_bytes = a.tmpfs_bytes, .tmpfs_inodes = a.tmpfs_inodes, .pids = a.pids,
                          .nofile = a.nofile };
    CHECK(al_setup_identity(false, &err));
    CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? al_err(&err, "mount", errno, "make / private: %m") : 0);
    CHECK(sethostname("airlock", 7) < 0 ? al_err(&err, "hostname", errno, "sethostname: %m") : 0);
    CHECK(al_setup_loopback(&err));
    /* through the zygote's /proc, before the box's own covers it */
    CHECK(al_setup_no_nested_userns(&err));
    CHECK(own_trees(&err));
    {
        /* its own nodes, each over the zygote's */
        _cleanup_close_ int dev = open("/dev", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        CHECK(dev < 0 ? al_err(&err, "dev", errno, "open /dev: %m") : 0);
        CHECK(al_mount_dev_nodes(a.dev, dev, &err));
        close(a.dev);
    }
    CHECK(scratch(&lim, "/work", 0755, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &err));
    CHECK(scratch(&lim, "/out", 0755, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &err));
    CHECK(scratch(&lim, "/tmp", 01777, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &err));
    CHECK(scratch(&lim, "/dev/shm", 01777, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, &err));
    {
        _cleanup_close_ int proc = al_mount_proc(true, &err);
        CHECK(proc);
        CHECK(al_mount_attach(proc, AT_FDCWD, "/proc", &err));
    }
    CHECK(send_fds(a.sync, &err));                       /* sync 2: scratch fds sent */
    CHECK(al_setup_wait_go_and_join(a.sync, &err));      /* sync 3: inputs staged, cgroup made */
    CHECK(unshare(CLONE_NEWCGROUP) < 0 ? al_err(&err, "cgroupns", errno, "unshare(CLONE_NEWCGROUP): %m") : 0);
    CHECK(chdir("/work") < 0 ? al_err(&err, "chdir", errno, "chdir /work: %m") : 0);
    /* NPROC too: each forked box's uid is its own */
    CHECK(al_setup_rlimits(&lim, true, false, &err));
    CHECK(setsid() < 0 ? al_err(&err, "setsid", errno, "setsid: %m") : 0);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(null < 0 ? al_err(&err, "stdin", errno, "open /dev/null: %m") : 0);
    prctl(PR_SET_NAME, "airlock");
    /* privileges go and the filter comes before the script's process is
     * forked, which inherits both (as a made box's PID 1 loads it before
     * it spawns the script) */
    CHECK(al_setup_drop_privileges(false, &err));
    CHECK(al_seccomp_load_builtin() < 0 ? al_err(&err, "seccomp", errno, "load filter: %m") : 0);

    /* a SIGCHLD from the fork on is kept for the wait; the run's process
     * gets the interpreter's mask and disposition back */
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct sigaction sa = { .sa_handler = on_sigchld }, old_sa;
    sigprocmask(SIG_BLOCK, &chld, &old);
    sigaction(SIGCHLD, &sa, &old_sa);
    /* _Fork, not a raw clone: glibc's own idea of this thread (its tid)
     * is the child's, as the interpreter's signal.raise_signal needs */
    pid_t script = _Fork();
    if (script == 0) {
        sigaction(SIGCHLD, &old_sa, NULL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        int std[3] = { null, a.out, a.err };
        for (int i = 0; i < 3; i++)
            /* dup2 onto itself keeps close-on-exec (/dev/null's open took
             * fd 0, all else being closed): cleared by hand then, or a
             * program the script starts has no stdin (child.c does so) */
            if ((std[i] == i ? fcntl(i, F_SETFD, 0) : dup2(std[i], i)) < 0)
                _exit(125);
        if (dup2(a.chan, AL_BOX_WARM_FD) < 0)
            _exit(125);
        /* PID 1's sync socket among them: a script holding it could speak
         * for PID 1 to the box's parent */
        if (syscall(SYS_close_range, 3, AL_BOX_WARM_FD - 1, 0) < 0 ||
            syscall(SYS_close_range, AL_BOX_WARM_FD + 1, ~0U, 0) < 0)
            _exit(125);
        /* as a made box's script, which its exec made dumpable again,
         * named as its interpreter */
        prctl(PR_SET_DUMPABLE, 1);
        prctl(PR_SET_NAME, "python3");
        return;
    }
    if (script < 0) {
        al_err(&err, "fork", errno, "start the script: %m");
        al_setup_fail(a.sync, &err);
    }
    /* PID 1 handles no signal but SIGCHLD and ignores SIGPIPE alone, as a
     * made box's: the interpreter's SIGINT handler, inherited from the
     * zygote, goes (the kernel then drops what the box sends its init) */
    al_setup_init_signals(true);
    /* PID 1 lets go of the script's stdio so the parent sees EOF when the
     * script and its descendants are done */
    close(null);
    close(a.out);
    close(a.err);
    close(a.chan);
    /* the zygote's argv and environment, readable in /proc/1, blanked
     * (the script's process keeps its own: a cold start's) */
    al_setup_scrub_cmdline();
    sigset_t wait_mask = old;
    sigdelset(&wait_mask, SIGCHLD);
    be_init(a.sync, script, &wait_mask, a.lifetime_ms);
}

long al_fork_box(const al_fork_args *args) {
    const unsigned long flags =
        CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
    long pid = syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0)
        return -errno;
    if (pid > 0)
        return pid;
    box_main(args);
    return 0;
}
