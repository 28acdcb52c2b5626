/* A box's keeper (uidpool.h): the locks of its host uids held by a process
 * whose life is the box's, not its caller's.
 *
 * Why: a lock is dropped by the kernel when its holder dies, and the
 * caller (the CLI, a helper) can die first, by SIGKILL or the OOM killer.
 * A native box dies with it (PDEATHSIG on its PID 1), but the caller's
 * files are closed before its children are signalled, and the box's PID 1
 * closes its own before the kernel kills and reaps the rest of its pid
 * namespace: the uid was seen free while the box's processes still ran. A
 * container's processes are the Docker daemon's and do not die with the
 * caller at all.
 *
 * Why PID 1's pidfd: every process of a box is in its pid namespace, and
 * the kernel kills and reaps all of them (zap_pid_ns_processes) before
 * PID 1's end is seen through its pidfd: "PID 1 ended" is "nothing of the
 * box runs".
 *
 * And the deadline: the caller enforces it, but a caller that is alive and
 * does not run (stopped, stuck) would hold the box as long; so it tells
 * the keeper, which ends the box a grace past it unless told the script is
 * over.
 */
#include "uidpool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

/* a zygote's uids: its own and one per slot (box.h), and the two pipes */
#define KEEP_MAX 80

/* Only the fds in KEEP stay open; 0-2 are /dev/null, so the keeper holds
 * no pipe of its caller's (a reader waiting for the caller's output to end
 * must not wait for the keeper too). */
static void keep_only(int *keep, size_t n) {
    for (size_t i = 1; i < n; i++) /* ascending */
        for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null >= 0; fd++)
        dup2(null, fd);
    unsigned from = 3;
    for (size_t i = 0; i <= n; i++) {
        unsigned to = i < n ? (unsigned)keep[i] : ~0U;
        if (i == n)
            syscall(SYS_close_range, from, ~0U, 0);
        else if (to > from)
            syscall(SYS_close_range, from, to - 1, 0);
        if (i < n && to + 1 > from)
            from = to + 1;
    }
}

/* Until PID 1 has ended: the run's end (its pipe's, however the caller
 * ended: it has nothing more to do with the box) has K's cleanup done,
 * which is at most a second one when the caller did it itself. */
/* The box ended as at its caller's end. */
static void end_box(const al_uid_keeper *k) {
    if (k->kill_init)
        syscall(SYS_pidfd_send_signal, k->pidfd, SIGKILL, NULL, 0);
    if (k->on_end)
        k->on_end(k->ud);
}

/* The caller's word (al_uid_keeper_arm, _disarm) read into *UNTIL (0: none);
 * false at its end. */
static bool read_word(int run_fd, uint64_t *until) {
    unsigned char buf[64];
    ssize_t n = read(run_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
        return true;
    if (n <= 0)
        return false;
    /* each word is one write of at most 9 bytes: whole, in order */
    for (ssize_t i = 0; i < n;) {
        if (buf[i] == 'A' && i + 9 <= n) {
            memcpy(until, buf + i + 1, sizeof *until);
            i += 9;
        } else {
            if (buf[i] == 'E')
                *until = 0;
            i++;
        }
    }
    return true;
}

_Noreturn void al_uid_keep(const al_uid_keeper *k, int run_fd) {
    struct pollfd p[2] = { { .fd = run_fd, .events = POLLIN }, { .fd = k->pidfd, .events = POLLIN } };
    bool run_open = true;
    uint64_t until = 0;
    for (;;) {
        p[0].fd = run_open ? run_fd : -1;
        int wait_ms = -1;
        if (until) {
            uint64_t now = al_now_ms(), end = until + AL_KEEPER_GRACE_MS;
            if (now >= end) {
                /* the caller is alive and holds the box past its deadline
                 * and the grace: it is ended here, as at the caller's end */
                until = 0;
                end_box(k);
                continue;
            }
            wait_ms = (int)(end - now);
        }
        int n = poll(p, 2, wait_ms);
        if (n < 0 && errno != EINTR) {
            /* not expected of two open fds: not a busy loop, should it be */
            struct timespec ts = { 0, 100 * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (n <= 0)
            continue;
        if (run_open && p[0].revents && !read_word(run_fd, &until)) {
            run_open = false;
            until = 0;
            end_box(k);
        }
        if (p[1].revents) {
            /* nothing of the box runs: its uids may go; a caller that went
             * first left what it would have cleaned up, done now, after the
             * locks (a sweep takes a uid's lock before it touches its box) */
            if (!run_open && k->after) {
                syscall(SYS_close_range, 3, ~0U, 0);
                k->after();
            }
            _exit(0);
        }
    }
}

void al_uid_keeper_arm(int fd, uint64_t until_ms) {
    unsigned char w[9] = { 'A' };
    memcpy(w + 1, &until_ms, sizeof until_ms);
    /* unsaid (a keeper gone): the caller's own deadline stands */
    if (fd >= 0 && send(fd, w, sizeof w, MSG_NOSIGNAL) != (ssize_t)sizeof w) {
    }
}

void al_uid_keeper_disarm(int fd) {
    if (fd >= 0 && send(fd, "E", 1, MSG_NOSIGNAL) != 1) {
    }
}

int al_uid_keeper_start(const al_uid_keeper *k, int *ret_fd, al_error *err) {
    if (k->n_locks == 0 || k->n_locks > KEEP_MAX - 2 || k->pidfd < 0)
        return al_err(err, "keeper", EINVAL, "a keeper holds 1 to %d locks until a pidfd's end", KEEP_MAX - 2);
    /* a socket, not a pipe: a word to a keeper that is gone is no SIGPIPE */
    int pfd[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pfd) < 0)
        return al_err(err, "keeper", errno, "socketpair: %m");
    /* twice: the keeper is nobody's child here (never a zombie of a caller
     * that lives on, never met by a caller's wait) */
    pid_t mid = fork();
    if (mid < 0) {
        int e = errno;
        close(pfd[0]);
        close(pfd[1]);
        return al_err(err, "keeper", e, "fork: %s", strerror(e));
    }
    if (mid == 0) {
        /* out of the caller's session and process group: a signal to the
         * caller's group (a terminal's ^C, a supervisor's kill of the
         * group) ends the caller, which the keeper then cleans up after */
        setsid();
        if (fork() != 0)
            _exit(0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        signal(SIGPIPE, SIG_IGN);
        prctl(PR_SET_NAME, "airlock-keeper");
        int keep_fds[KEEP_MAX];
        size_t n = 0;
        keep_fds[n++] = pfd[0];
        keep_fds[n++] = k->pidfd;
        for (size_t i = 0; i < k->n_locks; i++)
            keep_fds[n++] = k->locks[i];
        /* (one of them at 0-2, where /dev/null goes, is moved first) */
        for (size_t i = 0; i < n; i++)
            if (keep_fds[i] <= 2 && (keep_fds[i] = fcntl(keep_fds[i], F_DUPFD, 3)) < 0)
                _exit(1);
        al_uid_keeper moved = *k;
        moved.pidfd = keep_fds[1];
        int run_fd = keep_fds[0];
        keep_only(keep_fds, n);
        al_uid_keep(&moved, run_fd);
    }
    close(pfd[0]);
    while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
        ;
    *ret_fd = pfd[1];
    return 0;
}
