#include "doctor.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "mount.h"
#include "seccomp.h"
#include "setup.h"

/* Run FN in a child made with clone FLAGS; its exit code is the errno it
 * failed with, 0 on success. */
static int try_in_child(unsigned long flags, int (*fn)(void)) {
    pid_t pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid < 0)
        return errno;
    if (pid == 0)
        _exit(fn());
    int st;
    if (waitpid(pid, &st, 0) < 0)
        return errno;
    if (WIFSIGNALED(st))
        return EINTR;
    return WEXITSTATUS(st);
}

static int ok(void) { return 0; }

static int t_tmpfs(void) {
    al_error e = { 0 };
    al_tmpfs_opts o = { 1 << 20, 64, 0755, -1, -1 };
    int fd = al_mount_tmpfs(&o, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, &e);
    return fd < 0 ? -fd : 0;
}

static int t_proc(void) {
    al_error e = { 0 };
    int fd = al_mount_proc(true, &e);
    return fd < 0 ? -fd : 0;
}

static int t_own_tree(void) {
    al_error e = { 0 };
    /* over /tmp of this throwaway namespace, made private first */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return errno;
    int r = al_mount_own_tree(AT_FDCWD, "/usr", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, AT_FDCWD,
                              "/tmp", &e);
    return r < 0 ? -r : 0;
}

static int t_dev(void) {
    al_error e = { 0 };
    int fd = al_mount_dev(&e);
    return fd < 0 ? -fd : 0;
}

static int t_seccomp(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return errno;
    if (al_seccomp_load_builtin() < 0)
        return errno;
    /* keyctl must now be refused before it reaches the kernel */
    long r = syscall(SYS_keyctl, 0, 0, 0, 0, 0);
    return (r < 0 && errno == EPERM) ? 0 : ENOTRECOVERABLE;
}

static int t_nnp(void) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return errno;
    return prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 ? 0 : EINVAL;
}

static void item(al_doctor_item *it, const char *name, al_level l, const char *fmt, ...) _printf_(4, 5);
static void item(al_doctor_item *it, const char *name, al_level l, const char *fmt, ...) {
    it->name = name;
    it->level = l;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->detail, sizeof it->detail, fmt, ap);
    va_end(ap);
}

long al_doctor_inotify_max(void) {
    char *buf = NULL;
    long have = -1;
    if (al_read_small(AT_FDCWD, "/proc/sys/fs/inotify/max_user_instances", 64, &buf, NULL) == 0)
        have = strtol(buf, NULL, 10);
    free(buf);
    return have;
}

al_level al_doctor_inotify(long have, unsigned boxes, const char *boxes_name, char *detail, size_t len) {
    const char *who = geteuid() == 0 ? "host root's" : "your user's";
    const unsigned share = AL_BOX_INOTIFY_INSTANCES_N;
    if (have <= 0) {
        snprintf(detail, len, "fs.inotify.max_user_instances unreadable: each box may open %u of %s inotify instances",
                 share, who);
        return AL_LEVEL_APPLIED;
    }
    if (boxes == 0) {
        snprintf(detail, len,
                 "fs.inotify.max_user_instances=%ld is %s, shared with every box (%u each): %ld boxes opening all of "
                 "theirs at once leave it none",
                 have, who, share, (have + share - 1) / share);
        return AL_LEVEL_APPLIED;
    }
    /* whoever else runs as that user (systemd, dockerd, an editor) keeps
     * at least half: the boxes' whole share can take no more */
    unsigned long take = (unsigned long)boxes * share, want = 2 * take;
    if ((unsigned long)have >= want) {
        snprintf(detail, len,
                 "fs.inotify.max_user_instances=%ld is %s, shared with every box: %u boxes at once (%s) may open %lu of "
                 "it, %u each",
                 have, who, boxes, boxes_name, take, share);
        return AL_LEVEL_BOUNDARY;
    }
    snprintf(detail, len,
             "fs.inotify.max_user_instances=%ld is %s, shared with every box: %u boxes at once (%s) may open %lu of "
             "it, %u each, and leave it %lu; raise it to at least %lu (sysctl fs.inotify.max_user_instances=%lu)",
             have, who, boxes, boxes_name, take, share, (unsigned long)have > take ? (unsigned long)have - take : 0,
             want, want);
    return AL_LEVEL_APPLIED;
}

size_t al_doctor(al_doctor_item *items) {
    size_t n = 0;
    bool root = geteuid() == 0;
    const unsigned long ns = CLONE_NEWUSER | CLONE_NEWNS;

    int e = try_in_child(CLONE_NEWUSER, ok);
    if (e == 0 && root)
        item(&items[n++], "user namespace", AL_LEVEL_BOUNDARY, "each box gets its own host uid (from %u), no root mapping", 1900000000u);
    else if (e == 0)
        item(&items[n++], "user namespace", AL_LEVEL_APPLIED, "rootless: the box's uid is your own uid, shared with your other processes");
    else
        item(&items[n++], "user namespace", AL_LEVEL_NOT_ENFORCED, "cannot create one: %s (boxes cannot run)", strerror(e));

    al_cgroup_caps caps;
    const al_cgroup_ops *ops = al_cgroup_pick(&caps);
    if (!ops) {
        item(&items[n++], "cgroup memory", AL_LEVEL_NOT_ENFORCED, "%s", caps.why_not);
        item(&items[n++], "cgroup pids", root ? AL_LEVEL_APPLIED : AL_LEVEL_NOT_ENFORCED,
             root ? "only RLIMIT_NPROC on the box's unique uid: %s" : "%s", caps.why_not);
        item(&items[n++], "cgroup cpu", AL_LEVEL_NOT_ENFORCED, "%s", caps.why_not);
        item(&items[n++], "kill every process", AL_LEVEL_APPLIED, "by the pid namespace's init dying (no cgroup to sweep)");
    } else {
        if (caps.memory && caps.swap)
            item(&items[n++], "cgroup memory", AL_LEVEL_BOUNDARY, "cgroup %s: memory limit with swap 0", caps.version);
        else if (caps.memory)
            item(&items[n++], "cgroup memory", AL_LEVEL_APPLIED, "cgroup %s: memory limited, swap not capped (%s)", caps.version, caps.why_not);
        else
            item(&items[n++], "cgroup memory", AL_LEVEL_NOT_ENFORCED, "cgroup %s lacks the memory controller", caps.version);
        item(&items[n++], "cgroup pids", caps.pids ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
             caps.pids ? "cgroup %s pids.max" : "cgroup %s lacks the pids controller", caps.version);
        item(&items[n++], "cgroup cpu", caps.cpu ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
             caps.cpu ? "cgroup %s CPU bandwidth" : "cgroup %s lacks the cpu controller", caps.version);
        item(&items[n++], "kill every process", AL_LEVEL_BOUNDARY,
             strcmp(caps.version, "v2") == 0 ? "cgroup.kill (or freeze and kill) plus the pid namespace"
                                             : "the pid namespace (its init's death kills the rest and stops any fork), then what the pids cgroup lists, until empty");
    }

    e = try_in_child(0, t_seccomp);
    if (e == 0)
        item(&items[n++], "seccomp", AL_LEVEL_BOUNDARY, "default-deny allow-list loads and refuses keyctl; i386 and x32 calls kill");
    else
        item(&items[n++], "seccomp", AL_LEVEL_NOT_ENFORCED, "filter did not load or did not hold: %s", strerror(e));

    e = try_in_child(0, t_nnp);
    item(&items[n++], "no_new_privs", e == 0 ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
         e == 0 ? "PR_SET_NO_NEW_PRIVS holds" : "PR_SET_NO_NEW_PRIVS failed: %s", strerror(e));

    e = try_in_child(CLONE_NEWUSER | CLONE_NEWNET, ok);
    item(&items[n++], "network namespace", e == 0 ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
         e == 0 ? "offline: a new namespace with only lo" : "cannot create one: %s", strerror(e));

    e = try_in_child(ns, t_tmpfs);
    item(&items[n++], "tmpfs caps", e == 0 ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
         e == 0 ? "size= and nr_inodes= on /work, /out, /tmp" : "tmpfs in a user namespace failed: %s", strerror(e));

    e = try_in_child(ns | CLONE_NEWPID, t_proc);
    item(&items[n++], "masked /proc", e == 0 ? AL_LEVEL_BOUNDARY : AL_LEVEL_NOT_ENFORCED,
         e == 0 ? "proc with subset=pid: only the box's processes, no sys, kcore, keys" : "proc subset=pid failed: %s", strerror(e));

    /* fail closed: a box whose trees cannot be its own does not start */
    e = try_in_child(ns, t_own_tree);
    int d = root ? try_in_child(0, t_dev) : EPERM;
    if (e != 0)
        item(&items[n++], "own inodes", AL_LEVEL_NOT_ENFORCED,
             "a read-only overlay in a user namespace failed: %s (needs overlayfs, Linux 5.11; boxes cannot run)",
             strerror(e));
    else if (d != 0)
        item(&items[n++], "own inodes", AL_LEVEL_APPLIED,
             "the runtime is an overlay of each box's own; /dev's nodes are the host's (%s): a box can watch every "
             "write to /dev/null", root ? strerror(d) : "no root to make a box's own");
    else
        item(&items[n++], "own inodes", AL_LEVEL_BOUNDARY,
             "each box's runtime is an overlay of its own and its /dev nodes are made for it: no box can watch "
             "another's reads and writes");

    struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
    long fd = syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
    if (fd >= 0) {
        close((int)fd);
        item(&items[n++], "openat2", AL_LEVEL_BOUNDARY, "artifacts are collected without following any link");
    } else {
        item(&items[n++], "openat2", AL_LEVEL_NOT_ENFORCED, "unavailable (%s): artifacts cannot be collected safely", strerror(errno));
    }

    int r = 0;
    char *buf = NULL;
    if (al_read_small(AT_FDCWD, "/proc/sys/kernel/unprivileged_bpf_disabled", 64, &buf, NULL) == 0)
        r = atoi(buf);
    free(buf);
    item(&items[n++], "host sysctls", r >= 1 ? AL_LEVEL_BOUNDARY : AL_LEVEL_APPLIED,
         "kernel.unprivileged_bpf_disabled=%d (bpf is also denied by seccomp)", r);

    items[n].name = "inotify budget";
    items[n].level = al_doctor_inotify(al_doctor_inotify_max(), 0, NULL, items[n].detail, sizeof items[n].detail);
    n++;
    return n;
}
