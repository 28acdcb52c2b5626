/*
 * Default-deny allow-list (EPERM), in the spirit of moby's profile for a
 * container with no capabilities, minus SECURITY.md section 2's deny set.
 *
 * ABIs: the filter is native x86_64 only, and libseccomp makes any other
 * architecture (i386 via int 0x80) and any x32 syscall number (nr with bit
 * 30 set) take the bad-arch action, which kills the process. A policy that
 * holds on one ABI cannot then be sidestepped through another.
 *
 * This file is the policy. It is compiled to BPF at build time by
 * seccomp_gen.c (airlock itself does not load libseccomp), and by the unit
 * tests, which check the built-in copy is this policy.
 */
#include "seccomp.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

static const char *const allowed[] = {
    "accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk",
    "cachestat", "capget", "capset", "chdir", "chmod", "chown",
    "clock_getres", "clock_gettime", "clock_nanosleep", "close", "close_range",
    "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait", "epoll_pwait2",
    "epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit",
    "exit_group", "faccessat", "faccessat2", "fadvise64", "fallocate",
    "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchownat", "fcntl",
    "fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
    "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex",
    "futex_waitv", "futimesat", "get_robust_list", "get_thread_area",
    "getcpu", "getcwd", "getdents", "getdents64", "getegid", "geteuid",
    "getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp",
    "getpid", "getppid", "getpriority", "getrandom", "getresgid", "getresuid",
    "getrlimit", "getrusage", "getsid", "getsockname", "getsockopt", "gettid",
    "gettimeofday", "getuid", "getxattr", "inotify_add_watch", "inotify_init",
    "inotify_init1", "inotify_rm_watch", "kill", "landlock_add_rule",
    "landlock_create_ruleset", "landlock_restrict_self", "lchown", "lgetxattr",
    "link", "linkat", "listen", "listxattr", "llistxattr", "lremovexattr",
    "lseek", "lsetxattr", "lstat", "madvise", "map_shadow_stack", "membarrier",
    "memfd_create", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock",
    "mlock2", "mlockall", "mmap", "mprotect", "mq_getsetattr", "mq_notify",
    "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap",
    "mseal", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
    "munlockall", "munmap", "nanosleep", "newfstatat", "open", "openat",
    "openat2", "pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2",
    "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2", "pselect6",
    "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
    "readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg",
    "remap_file_pages", "removexattr", "rename", "renameat", "renameat2",
    "restart_syscall", "rmdir", "rseq", "rt_sigaction", "rt_sigpending",
    "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_get_priority_max",
    "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
    "sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
    "sched_setaffinity", "sched_setattr", "sched_setparam",
    "sched_setscheduler", "sched_yield", "select", "semctl", "semget", "semop",
    "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto",
    "set_robust_list", "set_thread_area", "set_tid_address", "setfsgid",
    "setfsuid", "setgid", "setgroups", "setitimer", "setpgid", "setpriority",
    "setregid", "setresgid", "setresuid", "setreuid", "setrlimit", "setsid",
    "setsockopt", "setuid", "setxattr", "shmat", "shmctl", "shmdt", "shmget",
    "shutdown", "sigaltstack", "signalfd", "signalfd4", "socketpair", "splice",
    "stat", "statfs", "statx", "symlink", "symlinkat", "sync",
    "sync_file_range", "syncfs", "sysinfo", "tee", "tgkill", "time",
    "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
    "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
    "times", "tkill", "truncate", "umask", "uname", "unlink", "unlinkat",
    "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4", "waitid",
    "write", "writev",
};

/* Newer interfaces that runtimes probe and fall back from: answer ENOSYS so
 * they take the fallback path instead of failing on EPERM. */
static const char *const enosys[] = {
    "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register",
};

#define NS_FLAGS (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | \
                  CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET)

/* The libseccomp sink: a name this libseccomp or architecture does not
 * know is skipped (too new, or not on this ABI). */
static int add_ctx(void *ud, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp,
                   al_error *err) {
    scmp_filter_ctx ctx = ud;
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return 0; /* not on this architecture or too new for libseccomp */
    int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (r < 0)
        return al_err(err, "seccomp", r, "rule for %s: %s", name, strerror(-r));
    return 0;
}

/* The first filter's rules, each given to ADD (default action: EPERM). */
static int rules_allow(al_seccomp_emit add, void *ctx, al_error *err) {
    int r;
    for (size_t i = 0; i < ELEMENTSOF(allowed); i++)
        if ((r = add(ctx, SCMP_ACT_ALLOW, allowed[i], 0, NULL, err)) < 0)
            return r;
    for (size_t i = 0; i < ELEMENTSOF(enosys); i++)
        if ((r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), enosys[i], 0, NULL, err)) < 0)
            return r;

    /* clone: threads and fork, never a new namespace */
    struct scmp_arg_cmp c_clone[] = { SCMP_A0_64(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0) };
    if ((r = add(ctx, SCMP_ACT_ALLOW, "clone", 1, c_clone, err)) < 0)
        return r;

    /* ioctl: allowed here, minus terminal injection in the second filter */
    if ((r = add(ctx, SCMP_ACT_ALLOW, "ioctl", 0, NULL, err)) < 0)
        return r;

    /* socket: unix, IPv4, IPv6, and netlink route queries only; rare
     * families can auto-load modules and are historically buggy. */
    static const int fams[] = { AF_UNIX, AF_INET, AF_INET6 };
    for (size_t i = 0; i < ELEMENTSOF(fams); i++) {
        struct scmp_arg_cmp c[] = { SCMP_A0_32(SCMP_CMP_EQ, (uint32_t)fams[i]) };
        if ((r = add(ctx, SCMP_ACT_ALLOW, "socket", 1, c, err)) < 0)
            return r;
    }
    struct scmp_arg_cmp c_nl[] = { SCMP_A0_32(SCMP_CMP_EQ, AF_NETLINK), SCMP_A2_32(SCMP_CMP_EQ, 0) };
    if ((r = add(ctx, SCMP_ACT_ALLOW, "socket", 2, c_nl, err)) < 0)
        return r;

    /* personality: moby's five values (query, linux, 32bit-layout). */
    static const uint32_t pers[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };
    for (size_t i = 0; i < ELEMENTSOF(pers); i++) {
        struct scmp_arg_cmp c[] = { SCMP_A0_32(SCMP_CMP_EQ, pers[i]) };
        if ((r = add(ctx, SCMP_ACT_ALLOW, "personality", 1, c, err)) < 0)
            return r;
    }

    /* prlimit64 on itself only: never on a sibling. */
    struct scmp_arg_cmp c_prl[] = { SCMP_A0_64(SCMP_CMP_EQ, 0) };
    if ((r = add(ctx, SCMP_ACT_ALLOW, "prlimit64", 1, c_prl, err)) < 0)
        return r;
    return 0;
}

/* ioctl TIOCSTI / TIOCLINUX: comparing only the low 32 bits of the command,
 * because the kernel ignores the high ones and a 64-bit compare is bypassed
 * by setting them (CVE-2019-7303, CVE-2019-10063). */
static int rules_ioctl(al_seccomp_emit add, void *ctx, al_error *err) {
    static const uint32_t cmds[] = { TIOCSTI, TIOCLINUX };
    for (size_t i = 0; i < ELEMENTSOF(cmds); i++) {
        struct scmp_arg_cmp c[] = { SCMP_A1_64(SCMP_CMP_MASKED_EQ, 0xffffffffULL, cmds[i]) };
        int r = add(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, c, err);
        if (r < 0)
            return r;
    }
    return 0;
}

static int export(scmp_filter_ctx ctx, struct sock_filter **ret, unsigned short *ret_len, al_error *err) {
    /* Export the BPF through a memfd: libseccomp 2.5 has no memory export. */
    _cleanup_close_ int mfd = memfd_create("airlock-seccomp", MFD_CLOEXEC);
    if (mfd < 0)
        return al_err(err, "seccomp", errno, "memfd_create: %m");
    int r = seccomp_export_bpf(ctx, mfd);
    if (r < 0)
        return al_err(err, "seccomp", r, "export filter: %s", strerror(-r));
    struct stat st;
    if (fstat(mfd, &st) < 0)
        return al_err(err, "seccomp", errno, "fstat: %m");
    size_t len = (size_t)st.st_size;
    if (len == 0 || len % sizeof(struct sock_filter) || len / sizeof(struct sock_filter) > BPF_MAXINSNS)
        return al_err(err, "seccomp", EINVAL, "filter has a bad size (%zu bytes)", len);
    _cleanup_free_ struct sock_filter *insns = malloc(len);
    if (!insns)
        return -ENOMEM;
    if (pread(mfd, insns, len, 0) != (ssize_t)len)
        return al_err(err, "seccomp", EIO, "read back filter");
    *ret = TAKE_PTR(insns);
    *ret_len = (unsigned short)(len / sizeof(struct sock_filter));
    return 0;
}

int al_seccomp_rules(int filter, al_seccomp_emit emit, void *ud, al_error *err) {
    return filter == 0 ? rules_allow(emit, ud, err) : rules_ioctl(emit, ud, err);
}

static int compile_one(uint32_t def, int filter, struct sock_filter **ret,
                       unsigned short *ret_len, al_error *err) {
    scmp_filter_ctx ctx = seccomp_init(def);
    if (!ctx)
        return al_err(err, "seccomp", ENOMEM, "seccomp_init failed");
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r == 0)
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* we set it ourselves, first */
    /* A binary tree of syscall numbers rather than a list: the same rules,
     * but about 16 instructions on a call's path instead of about 200. The
     * kernel runs the filter over every syscall number of every arch when
     * it is loaded (to cache the calls it allows outright), so the list
     * cost 0.3-0.5 ms of each box's start; the tree costs 0.1 ms. */
    if (r == 0)
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    if (r < 0)
        r = al_err(err, "seccomp", r, "filter attributes: %s", strerror(-r));
    if (r == 0)
        r = al_seccomp_rules(filter, add_ctx, ctx, err);
    if (r == 0)
        r = export(ctx, ret, ret_len, err);
    seccomp_release(ctx);
    return r;
}

int al_seccomp_compile(al_seccomp_prog *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    int r = compile_one(SCMP_ACT_ERRNO(EPERM), 0, &ret->f[0].insns, &ret->f[0].len, err);
    if (r == 0)
        r = compile_one(SCMP_ACT_ALLOW, 1, &ret->f[1].insns, &ret->f[1].len, err);
    if (r < 0)
        al_seccomp_prog_free(ret);
    return r;
}
