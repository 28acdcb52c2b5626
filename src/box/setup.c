/*
 * The steps of a box's PID 1 in its new namespaces (setup.h), in one
 * place for both kinds of box: child.c's made box and fork_init.c's box
 * forked by a zygote.
 */
#include "setup.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "cgroup.h"
#include "proto.h"

int al_setup_write_maps(pid_t pid, const char *uid_map, const char *gid_map, al_error *err) {
    static const char *const files[] = { "setgroups", "uid_map", "gid_map" };
    const char *const text[] = { "deny", uid_map, gid_map };
    for (size_t i = 0; i < ELEMENTSOF(files); i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
        int r = al_write_str(AT_FDCWD, path, text[i]);
        if (r < 0)
            return al_err(err, "userns", r, "write %s: %s", path, strerror(-r));
    }
    return 0;
}

void al_setup_say_error(int sock, const al_error *e) {
    al_msg m = { .type = AL_MSG_ERROR, .err = *e };
    al_msg_send(sock, &m, NULL, 0);
}

_Noreturn void al_setup_fail(int sock, al_error *e) {
    al_setup_say_error(sock, e);
    _exit(125);
}

int al_setup_wait_go(int sock, al_error *err) {
    al_msg m;
    int r = al_msg_recv(sock, &m, NULL, NULL);
    if (r <= 0 || m.type != AL_MSG_GO)
        return al_err(err, "sync", r < 0 ? -r : EPIPE, "parent went away");
    return 0;
}

/* sync 3 may carry the cgroup's self-join fds (v1): join at once, before
 * the cgroup namespace is made and anything of the script's runs. */
int al_setup_wait_go_and_join(int sock, al_error *err) {
    al_msg m;
    al_cgroup_join j = { .clone_fd = -1 };
    unsigned n = AL_CGROUP_JOIN_MAX;
    int r = al_msg_recv(sock, &m, j.self_fds, &n);
    if (r <= 0 || m.type != AL_MSG_GO) {
        j.n_self = n;
        al_cgroup_join_close(&j);
        return al_err(err, "sync", r < 0 ? -r : EPIPE, "parent went away");
    }
    j.n_self = n;
    if (al_cgroup_join_self(&j) < 0)
        return al_err(err, "cgroup", errno, "join the box's cgroup: %m");
    return 0;
}

int al_setup_identity(bool zygote, al_error *err) {
    /* No root mapping exists in this namespace, so changing uid does not
     * clear the capabilities we still need for mounting; KEEPCAPS makes it
     * explicit. Files we create from here on are owned by the box user.
     * A zygote is its namespace's root (mapped to a host uid of its own,
     * never the host's root): the boxes it forks take the sandbox id. */
    id_t id = zygote ? 0 : AL_SANDBOX_ID;
    if (prctl(PR_SET_KEEPCAPS, 1) < 0)
        return al_err(err, "identity", errno, "PR_SET_KEEPCAPS: %m");
    if (setresgid(id, id, id) < 0)
        return al_err(err, "identity", errno, "setresgid(%u): %m", (unsigned)id);
    if (setresuid(id, id, id) < 0)
        return al_err(err, "identity", errno, "setresuid(%u): %m", (unsigned)id);
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0)
        return al_err(err, "identity", errno, "capget: %m");
    d[0].effective = d[0].permitted;
    d[1].effective = d[1].permitted;
    if (syscall(SYS_capset, &h, d) < 0)
        return al_err(err, "identity", errno, "capset: %m");
    return 0;
}

int al_setup_loopback(al_error *err) {
    _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return al_err(err, "network", errno, "socket: %m");
    struct ifreq ifr = { 0 };
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return al_err(err, "network", errno, "get lo flags: %m");
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return al_err(err, "network", errno, "bring lo up: %m");
    return 0;
}

int al_setup_no_nested_userns(al_error *err) {
    /* The per-user-namespace counts (/proc/sys/user), which resolve
     * against the writer's own namespace. max_user_namespaces: a second,
     * kernel-enforced layer behind seccomp's unshare/clone rules, none at
     * all. The inotify counts: what a box opens is charged up its user
     * namespaces to their creator, host root, whose budget
     * (fs.inotify.max_user_instances, 128 by default) every box and the
     * host's own root share; left at root's, one box took it all and no
     * other box, nor root on the host, could open one. */
    static const struct { const char *name, *value; } lim[] = {
        { "max_user_namespaces", "0" },
        { "max_inotify_instances", AL_BOX_INOTIFY_INSTANCES },
        { "max_inotify_watches", AL_BOX_INOTIFY_WATCHES },
    };
    for (size_t i = 0; i < ELEMENTSOF(lim); i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/sys/user/%s", lim[i].name);
        int r = al_write_str(AT_FDCWD, path, lim[i].value);
        if (r < 0)
            return al_err(err, "userns", r, "set %s=%s: %s", lim[i].name, lim[i].value, strerror(-r));
    }
    return 0;
}

int al_setup_rlimits(const al_box_limits *l, bool nproc_too, bool zygote, al_error *err) {
    struct { int res; rlim_t v; const char *name; } lim[] = {
        { RLIMIT_NOFILE, l->nofile, "NOFILE" },
        { RLIMIT_FSIZE, l->tmpfs_bytes, "FSIZE" },
        { RLIMIT_CORE, 0, "CORE" },
        { RLIMIT_MSGQUEUE, AL_BOX_MSGQUEUE_BYTES, "MSGQUEUE" },
        { RLIMIT_SIGPENDING, zygote ? RLIM_INFINITY : AL_BOX_SIGPENDING, "SIGPENDING" },
        /* a second layer under pids.max, set above it so the cgroup, which
         * reports what happened, is the one that stops a fork bomb. Not a
         * zygote's: the kernel would count every process of every box it
         * forks (their user namespaces are its children) against it, one
         * budget for boxes of many tenants; each box sets its own. */
        { RLIMIT_NPROC, nproc_too ? l->pids + 16 : RLIM_INFINITY, "NPROC" },
    };
    for (size_t i = 0; i < ELEMENTSOF(lim); i++) {
        if (lim[i].v == RLIM_INFINITY)
            continue;
        struct rlimit rl = { lim[i].v, lim[i].v };
        if (setrlimit(lim[i].res, &rl) < 0)
            return al_err(err, "rlimits", errno, "RLIMIT_%s: %m", lim[i].name);
    }
    return 0;
}

/* Every capability goes, but for a zygote CAP_SETUID and CAP_SETGID in its
 * own namespace, which writing its boxes' maps takes (with no_new_privs,
 * its exec keeps no more than these). */
int al_setup_drop_privileges(bool zygote, al_error *err) {
    const uint64_t keep = zygote ? (1ULL << CAP_SETUID | 1ULL << CAP_SETGID) : 0;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return al_err(err, "no_new_privs", errno, "PR_SET_NO_NEW_PRIVS: %m");
    /* EINVAL past the kernel's last capability ends the loop */
    for (int c = 0; c <= 63; c++)
        if (!(keep >> c & 1) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
            if (errno == EINVAL)
                break;
            return al_err(err, "capabilities", errno, "drop bounding cap %d: %m", c);
        }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return al_err(err, "capabilities", errno, "clear ambient: %m");
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    d[0].permitted = d[0].effective = (uint32_t)keep;
    if (syscall(SYS_capset, &h, d) < 0)
        return al_err(err, "capabilities", errno, "capset: %m");
    prctl(PR_SET_KEEPCAPS, 0);
    /* nobody in the box may open our fds through /proc/1/fd or ptrace us */
    if (prctl(PR_SET_DUMPABLE, 0) < 0)
        return al_err(err, "capabilities", errno, "PR_SET_DUMPABLE: %m");
    return 0;
}

void al_setup_init_signals(bool keep_chld) {
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP && (sig != SIGCHLD || !keep_chld))
            signal(sig, sig == SIGPIPE ? SIG_IGN : SIG_DFL); /* (glibc's own, 32 and 33, refused) */
}

/* PID 1 is a copy of its parent (airlock, or a zygote's interpreter),
 * argv and environment included: anyone in the box can read
 * /proc/1/cmdline. Blank both regions of our own copy (their bounds are in
 * /proc/self/stat), leaving only a name. */
void al_setup_scrub_cmdline(void) {
    _cleanup_free_ char *stat = NULL;
    if (al_read_small(AT_FDCWD, "/proc/self/stat", 4096, &stat, NULL) < 0)
        return;
    /* fields after the ")" of the command name; arg_start is field 48 */
    char *p = strrchr(stat, ')');
    if (!p)
        return;
    unsigned long v[52] = { 0 };
    int field = 2;
    for (char *tok = strtok(p + 1, " "); tok && field < 51; tok = strtok(NULL, " "))
        v[++field] = strtoul(tok, NULL, 10);
    unsigned long arg_start = v[48], arg_end = v[49], env_start = v[50], env_end = v[51];
    if (arg_start && arg_end > arg_start && arg_end - arg_start < (1UL << 24)) {
        memset((void *)arg_start, 0, arg_end - arg_start);
        static const char name[] = "airlock-init";
        if (arg_end - arg_start > sizeof name)
            memcpy((void *)arg_start, name, sizeof name);
    }
    if (env_start && env_end > env_start && env_end - env_start < (1UL << 24))
        memset((void *)env_start, 0, env_end - env_start);
}

/* Keep only the fds the box needs, moved above the stdio range so the
 * script's dup2()s cannot clobber them; everything else the caller had open
 * (its terminal, locks, sockets) is closed, so PID 1 holds no host fds. */
int al_setup_keep_fds(int *const *fds, size_t nf) {
    int keep[16];
    if (nf > ELEMENTSOF(keep))
        return -E2BIG;
    size_t n = 0;
    for (size_t i = 0; i < nf; i++) {
        if (*fds[i] < 0)
            continue;
        int nfd = fcntl(*fds[i], F_DUPFD_CLOEXEC, 64);
        if (nfd < 0)
            return -errno;
        *fds[i] = nfd;
        /* insertion sort: the list is tiny */
        size_t j = n++;
        for (; j > 0 && keep[j - 1] > nfd; j--)
            keep[j] = keep[j - 1];
        keep[j] = nfd;
    }
    /* (a range left open would leave the box a host fd: said, not ignored) */
    unsigned from = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)keep[i] > from && syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0) < 0)
            return -errno;
        from = (unsigned)keep[i] + 1;
    }
    return syscall(SYS_close_range, from, ~0U, 0) < 0 ? -errno : 0;
}
