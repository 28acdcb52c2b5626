/*
 * The helper process (`airlock helper`) both drivers' boxes run in: started
 * by the native driver, its warm pool and the docker driver and its pool,
 * handed its job (job.h) in the job's wire form on its stdin.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helper_start.h"

int al_driver_helper_send(int fd, const char *text, size_t len) {
    int r = al_write_all(fd, text, len);
    return r < 0 ? r : al_write_all(fd, "\n", 1);
}

/* What the helper's child does between its clone and its exec, on its own
 * stack but in the service's memory (CLONE_VM): system calls only, nothing
 * that writes memory the service's threads use. */
typedef struct spawn_arg {
    const char *exe;
    pid_t parent;
    int in, out;
    const int *pass;              /* to be the helper's fds 3.. */
    size_t n_pass;
} spawn_arg;

/* Not instrumented by AddressSanitizer: an instrumented frame marks its
 * redzones in the shadow on entry and clears them on return, and this one
 * never returns (it execs). It runs with every signal blocked (the parent
 * blocked them for the clone), so no handler of the service's runs here
 * in the service's memory before the handlers are reset. */
__attribute__((no_sanitize_address)) static int spawn_child(void *p) {
    const spawn_arg *a = p;
    /* what the service handles, the helper does not (as posix_spawn):
     * the table is the child's own copy (no CLONE_SIGHAND) */
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL &&
            sa.sa_handler != SIG_IGN) {
            sa.sa_handler = SIG_DFL;
            sa.sa_flags = 0;
            sigaction(sig, &sa, NULL);
        }
    }
    /* The service's death is a cancel (SIGTERM, blocked below until the
     * helper watches it), not a SIGKILL: a helper killed outright leaves
     * its box's cgroup, which only a later start would sweep */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != a->parent)
        _exit(125);
    /* the fds passed on, first above any number they go to (so that one
     * cannot overwrite another), close-on-exec until dup2 puts each at
     * its number, where it is not */
    int high[AL_HELPER_PASS_MAX];
    for (size_t i = 0; i < a->n_pass; i++)
        if ((high[i] = fcntl(a->pass[i], F_DUPFD_CLOEXEC, 3 + AL_HELPER_PASS_MAX)) < 0)
            _exit(125);
    dup2(a->in, 0);
    dup2(a->out, 1);
    for (size_t i = 0; i < a->n_pass; i++)
        if (dup2(high[i], 3 + (int)i) < 0)
            _exit(125);
    /* the signals that cancel a run stay blocked across the exec: one
     * sent before the helper watches them (a run canceled as it starts)
     * waits for its signalfd, where it cancels cleanly, instead of killing
     * the helper before it can say so */
    sigset_t cancel;
    sigemptyset(&cancel);
    sigaddset(&cancel, SIGINT);
    sigaddset(&cancel, SIGTERM);
    sigaddset(&cancel, SIGHUP);
    sigprocmask(SIG_SETMASK, &cancel, NULL);
    char *argv[] = { (char *)a->exe, "helper", NULL };
    execv(a->exe, argv);
    _exit(125);
}

/* the child's stack: what it uses is under 4 KiB (ASan's interceptors
 * included); beneath it a page that faults, so an overflow is a crash of
 * the child, not a write into the service */
#define SPAWN_STACK (64 * 1024)
#define SPAWN_GUARD 4096

int al_driver_helper_start(const char *self_exe, const al_job *job, const int *pass, size_t n_pass,
                           al_driver_run *ret, al_error *err) {
    if (n_pass > AL_HELPER_PASS_MAX)
        return al_err(err, "driver", EINVAL, "at most %d fds are passed to a helper", AL_HELPER_PASS_MAX);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = al_job_encode(job, &text, &len, err);
    if (r < 0)
        return r;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return al_err(err, "driver", errno, "pipe: %m");
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return al_err(err, "driver", errno, "pipe: %m");
    }
    /* A spawn, not a fork: the child shares the service's memory until its
     * exec (CLONE_VM | CLONE_VFORK, as posix_spawn does), so nothing of the
     * service's address space is copied and no page of it turns
     * copy-on-write for the service's other threads. A fork of the
     * threaded service cost a fifth of its CPU under 16 clients. The
     * caller's thread waits the few microseconds until the exec. */
    char *stack = mmap(NULL, SPAWN_STACK + SPAWN_GUARD, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED || mprotect(stack, SPAWN_GUARD, PROT_NONE) < 0) {
        int e = errno;
        if (stack != MAP_FAILED)
            munmap(stack, SPAWN_STACK + SPAWN_GUARD);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        return al_err(err, "driver", e, "a stack for the helper's spawn: %s", strerror(e));
    }
    spawn_arg a = { .exe = self_exe, .parent = getpid(), .in = in[0], .out = out[1], .pass = pass, .n_pass = n_pass };
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(spawn_child, stack + SPAWN_GUARD + SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    int clone_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    munmap(stack, SPAWN_STACK + SPAWN_GUARD);
    errno = clone_errno;
    if (pid < 0) {
        int e = errno;
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        return al_err(err, "driver", e, "spawn the helper: %s", strerror(e));
    }
    close(in[0]);
    close(out[1]);
    /* The job is one line (code and paths, never file contents). The pipe
     * then stays open: if this process dies, even by SIGKILL, the helper
     * sees its end and kills its box, cleanly. (PDEATHSIG alone is not
     * enough: the helper's setfsuid() while staging files clears it.) */
    r = al_driver_helper_send(in[1], text, len);
    if (r < 0) {
        close(in[1]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(out[0]);
        return al_err(err, "driver", r, "send the job to the helper: %s", strerror(-r));
    }
    ret->pid = pid;
    ret->events_fd = out[0];
    ret->job_fd = in[1];
    return 0;
}

int al_driver_helper_cancel(al_driver_run *r) {
    /* the helper turns SIGTERM into a clean kill of the box */
    return r->pid > 0 && kill(r->pid, SIGTERM) < 0 ? -errno : 0;
}

int al_driver_helper_wait(al_driver_run *r) {
    int st = 0;
    if (r->pid > 0) {
        while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
            ;
        r->pid = -1;
    }
    if (r->events_fd >= 0) {
        close(r->events_fd);
        r->events_fd = -1;
    }
    if (r->job_fd >= 0) {
        close(r->job_fd);
        r->job_fd = -1;
    }
    return st;
}

