/*
 * The box side: runs as the first process of the new user, mount, pid,
 * net, ipc and uts namespaces, sets the box up, drops everything, and
 * becomes a tiny PID 1 that reaps and reports the script's exit.
 *
 * A failing step sends {step, errno, message} to the parent and _exits.
 */
#include "child.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "mount.h"
#include "proto.h"
#include "setup.h"

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        if ((expr) < 0)                                                                            \
            al_setup_fail(a->sock, &err);                                                          \
    } while (0)

/* The owner of what the box mounts: the sandbox id, or a zygote's root
 * (its namespace maps no 65534: the boxes it forks map theirs). */
static int owner_id(const al_child_args *a) { return a->zygote ? 0 : AL_SANDBOX_ID; }

/* The box's /dev: a directory of its nodev root holding its nodes, each
 * bound on its own (the only mounts in /dev without nodev), the std*
 * links, and its own /dev/shm. The nodes are DEVFD's (al_mount_dev: made
 * by the box's parent for this box alone); without one (a box made
 * without root, where none can be made) the host's, which any box or
 * host process can watch (docs/security.md, O5). */
static int make_dev(int rootfd, int devfd, const al_box_limits *lim, int id, al_error *err) {
    _cleanup_close_ int nodes_fd = devfd;
    if (mkdirat(rootfd, "dev", 0755) < 0)
        return al_err(err, "dev", errno, "mkdir /dev: %m");
    _cleanup_close_ int dev = openat(rootfd, "dev", O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dev < 0)
        return al_err(err, "dev", errno, "open /dev: %m");
    int r = nodes_fd >= 0 ? al_mount_dev_nodes(nodes_fd, dev, err) : 0;
    if (r < 0)
        return r;
    static const char *const nodes[] = { "null", "zero", "full", "random", "urandom" };
    for (size_t i = 0; nodes_fd < 0 && i < ELEMENTSOF(nodes); i++) {
        char host[32];
        snprintf(host, sizeof host, "/dev/%s", nodes[i]);
        _cleanup_close_ int f = openat(dev, nodes[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (f < 0)
            return al_err(err, "dev", errno, "create /dev/%s: %m", nodes[i]);
        _cleanup_close_ int m = al_mount_bind(host, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err);
        if (m < 0)
            return m;
        if ((r = al_mount_attach(m, dev, nodes[i], err)) < 0)
            return r;
    }
    static const struct { const char *name, *target; } links[] = {
        { "fd", "/proc/self/fd" }, { "stdin", "/proc/self/fd/0" },
        { "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
    };
    for (size_t i = 0; i < ELEMENTSOF(links); i++)
        if (symlinkat(links[i].target, dev, links[i].name) < 0)
            return al_err(err, "dev", errno, "link /dev/%s: %m", links[i].name);
    if (mkdirat(dev, "shm", 01777) < 0)
        return al_err(err, "dev", errno, "mkdir /dev/shm: %m");
    al_tmpfs_opts o = { lim->tmpfs_bytes, lim->tmpfs_inodes, 01777, id, id };
    _cleanup_close_ int shm = al_mount_tmpfs(&o, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err);
    if (shm < 0)
        return shm;
    return al_mount_attach(shm, dev, "shm", err);
}

static int make_scratch(int rootfd, const char *name, unsigned mode, const al_box_limits *lim, int id, al_error *err) {
    if (mkdirat(rootfd, name, 0755) < 0)
        return al_err(err, "scratch", errno, "mkdir /%s: %m", name);
    al_tmpfs_opts o = { lim->tmpfs_bytes, lim->tmpfs_inodes, mode, id, id };
    _cleanup_close_ int m = al_mount_tmpfs(&o, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
    if (m < 0)
        return m;
    return al_mount_attach(m, rootfd, name, err);
}

/* Each bind's directory opened again by its path in this (the box's)
 * mount namespace, where its mount can be cloned, and kept only if it is
 * the directory the caller opened (box.h's al_box_bind). Before the box
 * takes its identity: the state's 0700 parents are in the way after. */
static int reopen_binds(al_child_args *a, al_error *err) {
    for (size_t i = 0; i < a->n_binds; i++) {
        struct stat was, now;
        int fd = open(a->binds[i].host_path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return al_err(err, "mount", errno, "open %s: %m", a->binds[i].host_path);
        if (fstat(a->bind_fds[i], &was) < 0 || fstat(fd, &now) < 0 || was.st_dev != now.st_dev ||
            was.st_ino != now.st_ino) {
            close(fd);
            return al_err(err, "mount", EXDEV, "%s is no longer the directory to bind", a->binds[i].host_path);
        }
        close(a->bind_fds[i]);
        a->bind_fds[i] = fd;
    }
    return 0;
}

/* The box's root: a small fresh tmpfs holding only what we put there. */
static int build_root(const al_child_args *a, int *ret_rootfd, al_error *err) {
    _cleanup_close_ int src = a->runtime_fd; /* done with once the tree is built */
    int devfd = a->dev_fd;
    int id = owner_id(a);
    al_tmpfs_opts o = { 16 << 20, 4096, 0755, id, id };
    _cleanup_close_ int root = al_mount_tmpfs(&o, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
    if (root < 0)
        return root;
    /* Attach it somewhere so later mounts can go beneath it; /tmp exists on
     * every host and the overmount is private to this namespace. */
    int r = al_mount_attach(root, AT_FDCWD, "/tmp", err);
    if (r < 0)
        return r;
    /* a zygote's trees are binds: each box it forks lays its own overlays
     * over them (fork_init.c), one layer deep */
    if ((r = a->runtime->populate(a->runtime, src, root, !a->zygote, err)) < 0)
        return r;
    if ((r = make_dev(root, devfd, a->limits, id, err)) < 0)
        return r;
    if ((r = make_scratch(root, "work", 0755, a->limits, id, err)) < 0 ||
        (r = make_scratch(root, "out", 0755, a->limits, id, err)) < 0 ||
        (r = make_scratch(root, "tmp", 01777, a->limits, id, err)) < 0)
        return r;
    if (mkdirat(root, "proc", 0555) < 0)
        return al_err(err, "proc", errno, "mkdir /proc: %m");
    _cleanup_close_ int proc = al_mount_proc(!a->zygote, err);
    if (proc < 0)
        return proc;
    if ((r = al_mount_attach(proc, root, "proc", err)) < 0)
        return r;
    /* the caller's read-only trees (a run's packages), last: their
     * directories go where nothing of the box's is */
    for (size_t i = 0; i < a->n_binds; i++) {
        _cleanup_close_ int fd = a->bind_fds[i];
        if ((r = al_mount_bind_into(root, fd, a->binds[i].box_path, !a->zygote, err)) < 0)
            return r;
    }
    *ret_rootfd = TAKE_FD(root);
    return 0;
}

/* The one way out of a proxied box: a listener on its own loopback, which
 * the parent serves from outside the namespace. Made now, while the box
 * still has its capabilities in this namespace and before the script
 * could take the port. */
static int make_listener(uint16_t port, int *ret, al_error *err) {
    *ret = -1;
    if (port == 0)
        return 0;
    _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return al_err(err, "listener", errno, "socket: %m");
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (bind(s, (struct sockaddr *)&sin, sizeof sin) < 0 || listen(s, 64) < 0)
        return al_err(err, "listener", errno, "listen on 127.0.0.1:%u: %m", port);
    *ret = TAKE_FD(s);
    return 0;
}

static int send_scratch_fds(int sock, int rootfd, int listen_fd, al_error *err) {
    /* Fresh tmpfs, nothing of the script's has run yet: no links to fear. */
    _cleanup_close_ int work = openat(rootfd, "work", O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    _cleanup_close_ int out = openat(rootfd, "out", O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    _cleanup_close_ int tmp = openat(rootfd, "tmp", O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (work < 0 || out < 0 || tmp < 0)
        return al_err(err, "scratch", errno, "open /work, /out or /tmp: %m");
    al_msg m = { .type = AL_MSG_FDS };
    int fds[4] = { work, out, tmp, listen_fd };
    int r = al_msg_send(sock, &m, fds, listen_fd >= 0 ? 4 : 3);
    if (r < 0)
        return al_err(err, "sync", r, "send scratch fds: %s", strerror(-r));
    return 0;
}

static int enter_root(int rootfd, al_error *err) {
    /* pivot_root(".", ".") stacks the old root on top of the new one; the
     * detach then drops the host's tree from this namespace entirely. */
    if (fchdir(rootfd) < 0)
        return al_err(err, "pivot_root", errno, "chdir to new root: %m");
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return al_err(err, "pivot_root", errno, "pivot_root: %m");
    if (umount2(".", MNT_DETACH) < 0)
        return al_err(err, "pivot_root", errno, "detach old root: %m");
    if (chdir("/") < 0)
        return al_err(err, "pivot_root", errno, "chdir /: %m");
    /* the root itself becomes read-only; /work, /out, /tmp stay writable */
    int r = al_mount_setattr(AT_FDCWD, "/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
    if (r < 0)
        return r;
    if (chdir("/work") < 0)
        return al_err(err, "pivot_root", errno, "chdir /work: %m");
    return 0;
}

static _Noreturn void exec_script(const al_child_args *a, int in_fd) {
    al_error err = { 0 };
    /* back to defaults for the script; PID 1 keeps its own */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int std[3] = { in_fd, a->out_w[AL_STREAM_STDOUT], a->out_w[AL_STREAM_STDERR] };
    for (int i = 0; i < 3; i++) {
        /* dup2 onto itself keeps close-on-exec: clear it by hand then */
        int r = std[i] == i ? fcntl(i, F_SETFD, 0) : dup2(std[i], i);
        if (r < 0) {
            al_err(&err, "exec", errno, "set up stdio: %m");
            al_setup_fail(a->sock, &err);
        }
    }
    /* a warm start's socket is its fd AL_BOX_WARM_FD (it was moved above
     * 63, so nothing of 0-2 is in the way; dup2 leaves the copy without
     * close-on-exec) */
    if (a->warm_fd >= 0 && dup2(a->warm_fd, AL_BOX_WARM_FD) < 0) {
        al_err(&err, "exec", errno, "set up the warm start's socket: %m");
        al_setup_fail(a->sock, &err);
    }
    /* every other fd goes at exec; the sync socket stays open until then
     * so an exec failure can still be reported */
    if (a->warm_fd >= 0) {
        syscall(SYS_close_range, 3, AL_BOX_WARM_FD - 1, CLOSE_RANGE_CLOEXEC);
        syscall(SYS_close_range, AL_BOX_WARM_FD + 1, ~0U, CLOSE_RANGE_CLOEXEC);
    } else {
        syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
    }
    execve(a->argv[0], a->argv, a->envp);
    al_err(&err, "exec", errno, "execve %s: %m", a->argv[0]);
    al_setup_fail(a->sock, &err);
}

typedef struct script_args {
    const al_child_args *a;
    int in_fd;
} script_args;

static int script_main(void *arg) {
    const script_args *s = arg;
    exec_script(s->a, s->in_fd);
}

/* The script's process shares PID 1's memory until its execve, vfork-style
 * on a stack of its own (as posix_spawn does), while PID 1 waits: a fork
 * would copy the page tables of PID 1, a copy of all of airlock, only for
 * the execve to throw them away (0.3 ms of every start, measured). Until
 * the execve it runs only exec_script, airlock's code, which touches
 * nothing of PID 1's but errno; its fds and signal handlers are its own. */
static pid_t spawn_script(const al_child_args *a, int in_fd) {
    static _Alignas(16) char stack[64 * 1024];
    script_args s = { a, in_fd };
    return clone(script_main, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &s);
}

/* A private copy of a NULL-terminated string vector and N_MORE strings of
 * MORE after it (the script's argv may point into our own argv, which
 * scrub_cmdline blanks). */
static char **copy_strv(char *const *v, char *const *more, size_t n_more) {
    size_t n = 0;
    while (v && v[n])
        n++;
    char **c = calloc(n + n_more + 1, sizeof *c);
    for (size_t i = 0; c && i < n + n_more; i++)
        if (!(c[i] = strdup(i < n ? v[i] : more[i - n])))
            return NULL;
    return c;
}

static _Noreturn void be_init(const al_child_args *a, pid_t script) {
    /* PID 1: holds no secrets and no host fds, only the sync socket. Signals
     * from inside the namespace cannot reach it (no handlers installed).
     * A zygote's lives on after its interpreter, until the last of the
     * boxes it forked is gone: its end would take theirs down with it. */
    int status = 0, st;
    bool ended = false;
    for (;;) {
        pid_t p = waitpid(-1, &st, 0);
        if (p == script) {
            status = st;
            ended = true;
            if (!a->zygote)
                break;
        }
        if (p < 0 && errno == ECHILD) {
            if (!ended)
                _exit(125);
            break;
        }
    }
    al_msg m = { .type = AL_MSG_STATUS, .status = status };
    al_msg_send(a->sock, &m, NULL, 0);
    /* our exit takes the namespace down: every orphan left is killed */
    _exit(0);
}

_Noreturn void al_child_main(const al_child_args *args) {
    al_error err = { 0 };
    al_child_args own = *args, *a = &own;
    int *keep[] = { &a->sock,        &a->out_w[0],     &a->out_w[1],     &a->stdin_fd,     &a->runtime_fd,
                    &a->warm_fd,     &a->dev_fd,       &a->bind_fds[0],  &a->bind_fds[1],  &a->bind_fds[2],
                    &a->bind_fds[3] };
    _Static_assert(AL_BOX_BINDS_MAX == 4, "keep each bind's fd");
    if (al_setup_keep_fds(keep, ELEMENTSOF(keep)) < 0)
        _exit(125); /* the socket may be gone: the parent sees EOF and says so */
    int rootfd = -1, in_fd = a->stdin_fd, listen_fd = -1;

    /* Order matters: identity first (files we make must be owned by a
     * mapped uid), then the tree while the host is still visible, then the
     * parent stages inputs, then pivot, then limits, then privileges go,
     * and seccomp comes last so the steps before it need no allow-listing. */
    char **argv = copy_strv(a->argv, NULL, 0), **envp = copy_strv(a->envp, a->env_extra, a->n_env_extra);
    if (!argv || !envp)
        CHECK(al_err(&err, "exec", ENOMEM, "copy the script's argv"));
    a->argv = argv;
    a->envp = envp;
    al_setup_scrub_cmdline();
    /* before the script's process, which takes them at its spawn */
    al_setup_init_signals(false);
    CHECK(al_setup_wait_go(a->sock, &err));                       /* sync 1: maps written */
    if (a->runtime->open)
        CHECK(a->runtime_fd = a->runtime->open(a->runtime, &err));
    CHECK(reopen_binds(a, &err));
    CHECK(al_setup_identity(a->zygote, &err));
    /* If airlock dies, the box dies with it. Set after the last change of
     * our credentials, which would clear it; a parent that died before
     * this shows as EOF at the next sync, where we exit. */
    CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ? al_err(&err, "pdeathsig", errno, "PR_SET_PDEATHSIG: %m") : 0);
    CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? al_err(&err, "mount", errno, "make / private: %m") : 0);
    CHECK(sethostname("airlock", 7) < 0 ? al_err(&err, "hostname", errno, "sethostname: %m") : 0);
    CHECK(al_setup_loopback(&err));
    CHECK(make_listener(a->listen_port, &listen_fd, &err));
    if (!a->zygote)
        CHECK(al_setup_no_nested_userns(&err));
    CHECK(build_root(a, &rootfd, &err));
    CHECK(send_scratch_fds(a->sock, rootfd, listen_fd, &err)); /* sync 2: scratch fds sent */
    if (listen_fd >= 0)
        close(listen_fd);                                /* the parent's to serve now */
    CHECK(al_setup_wait_go_and_join(a->sock, &err));              /* sync 3: inputs staged, cgroup made */
    /* the cgroup namespace is made from inside the box's cgroup, so the box
     * sees its own cgroup as "/" */
    CHECK(unshare(CLONE_NEWCGROUP) < 0 ? al_err(&err, "cgroupns", errno, "unshare(CLONE_NEWCGROUP): %m") : 0);
    CHECK(enter_root(rootfd, &err));
    if (in_fd < 0 && (in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        CHECK(al_err(&err, "stdin", errno, "open /dev/null: %m"));
    /* NPROC a second layer under pids.max, for a box whose uid is its own;
     * not a zygote's (setup.c) */
    CHECK(al_setup_rlimits(a->limits, a->unique_uid && !a->zygote, a->zygote, &err));
    CHECK(setsid() < 0 ? al_err(&err, "setsid", errno, "setsid: %m") : 0);
    CHECK(al_setup_drop_privileges(a->zygote, &err));
    /* A zygote runs no run's code: each box it forks loads the filter
     * before the run's first instruction, and a zygote with it could not
     * fork them (unshare, clone into namespaces, mount). */
    if (!a->zygote)
        CHECK(al_seccomp_load_builtin() < 0 ? al_err(&err, "seccomp", errno, "load filter: %m") : 0);

    pid_t script = spawn_script(a, in_fd);
    if (script < 0) {
        al_err(&err, "fork", errno, "start the script: %m");
        al_setup_fail(a->sock, &err);
    }
    /* PID 1 lets go of the script's stdio so the parent sees EOF when the
     * script and its descendants are done. */
    close(a->out_w[0]);
    close(a->out_w[1]);
    close(in_fd);
    close(rootfd);
    if (a->warm_fd >= 0)
        close(a->warm_fd);                               /* the script's alone: its end is EOF */
    be_init(a, script);
}
