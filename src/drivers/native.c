/* The native driver: each run is `airlock helper`, a fresh single-threaded
 * process that reads its job on stdin, runs the box, and writes events as
 * JSON lines on stdout. The service itself never clones a box. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../box/box.h"
#include "../box/doctor.h"
#include "driver.h"
#include "warm_pool.h"

/* What the native box enforces here is probed by boxes of a sort: clones
 * into new namespaces, a seccomp filter loaded, a tmpfs mounted. A threaded
 * process (the service) must not clone, so the probes run in a process of
 * their own, `doctor --json` of this binary, and what it found is kept for
 * DOCTOR_TTL_S: a run's admission then costs no probe (it cost six clones,
 * about 11 ms, on every POST /v1/runs). */
#define DOCTOR_TTL_S 30
/* a probe that could not run (fork refused, a timeout under load) is tried
 * again this soon, its last findings kept meanwhile */
#define DOCTOR_RETRY_S 2
#define DOCTOR_MAX_BYTES (256u << 10)
#define DOCTOR_TIMEOUT_MS 10000

static struct {
    pthread_mutex_t mu;
    json_t *items;                /* {control: {level, detail}} */
    uint64_t at_ms, ttl_ms;
    bool refreshing;
} doc_cache = { .mu = PTHREAD_MUTEX_INITIALIZER };

static json_t *doctor_in_child(char *why, size_t why_len) {
    /* this binary by its magic link: a binary replaced on disk meanwhile
     * (an upgrade in place) still runs as the one this process is */
    char exe[] = "/proc/self/exe";
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(why, why_len, "pipe: %s", strerror(errno));
        return NULL;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* async-signal-safe only: we were forked from a threaded process */
        dup2(p[1], 1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *argv[] = { exe, "doctor", "--json", NULL };
        execv(exe, argv);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        snprintf(why, why_len, "fork: %s", strerror(errno));
        return NULL;
    }
    char *buf = malloc(DOCTOR_MAX_BYTES);
    size_t len = 0;
    uint64_t until = al_now_ms() + DOCTOR_TIMEOUT_MS;
    while (buf && len < DOCTOR_MAX_BYTES) {
        struct pollfd pf = { .fd = p[0], .events = POLLIN };
        uint64_t now = al_now_ms();
        if (now >= until || poll(&pf, 1, (int)(until - now)) <= 0)
            break;
        ssize_t k = read(p[0], buf + len, DOCTOR_MAX_BYTES - len);
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(p[0]);
    kill(pid, SIGKILL); /* gone already, unless it hung */
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    json_t *doc = buf ? json_loadb(buf, len, 0, NULL) : NULL;
    free(buf);
    json_t *controls = json_object_get(doc, "controls");
    if (!json_is_array(controls)) {
        json_decref(doc);
        snprintf(why, why_len, "%s doctor --json answered no controls", exe);
        return NULL;
    }
    json_t *items = json_object();
    size_t i;
    json_t *c;
    json_array_foreach(controls, i, c) {
        const char *name = json_string_value(json_object_get(c, "control"));
        const char *level = json_string_value(json_object_get(c, "level"));
        const char *detail = json_string_value(json_object_get(c, "detail"));
        if (name && level && detail)
            json_object_set_new(items, name, json_pack("{s:s, s:s}", "level", level, "detail", detail));
    }
    json_decref(doc);
    return items;
}

/* A copy of the probes' findings, probed again when DOCTOR_TTL_S old (one
 * caller probes; the others answer the last findings meanwhile). */
static json_t *doctor_items(void) {
    pthread_mutex_lock(&doc_cache.mu);
    uint64_t now = al_now_ms();
    if ((!doc_cache.items || now - doc_cache.at_ms >= doc_cache.ttl_ms) && !doc_cache.refreshing) {
        doc_cache.refreshing = true;
        pthread_mutex_unlock(&doc_cache.mu);
        char why[300] = "";
        json_t *fresh = doctor_in_child(why, sizeof why);
        pthread_mutex_lock(&doc_cache.mu);
        if (fresh) {
            json_decref(doc_cache.items);
            doc_cache.items = fresh;
            doc_cache.ttl_ms = DOCTOR_TTL_S * 1000ull;
        } else {
            /* the last findings stand; with none yet, none can run */
            if (!doc_cache.items)
                doc_cache.items = json_pack("{s:{s:s, s:s}}", "user namespace", "level", "not-enforced", "detail", why);
            doc_cache.ttl_ms = DOCTOR_RETRY_S * 1000ull;
        }
        doc_cache.at_ms = al_now_ms();
        doc_cache.refreshing = false;
    }
    json_t *copy = doc_cache.items ? json_deep_copy(doc_cache.items) : json_object();
    pthread_mutex_unlock(&doc_cache.mu);
    return copy;
}

/* the service's max_concurrent (0: not known): set once before any run */
static unsigned boxes_at_once;

static json_t *native_capabilities(void) {
    json_t *doc = doctor_items();
    /* host root's inotify instances weighed against this service's boxes
     * at once (the probe's child knows no service): read here, it is one
     * small file */
    long have = al_doctor_inotify_max();
#ifdef AIRLOCK_TEST_HOOKS
    /* test builds: the host's value as another host's (a test's 128) */
    const char *fake = getenv("AIRLOCK_TEST_INOTIFY_MAX");
    if (fake)
        have = strtol(fake, NULL, 10);
#endif
    char detail[320];
    al_level l = al_doctor_inotify(have, boxes_at_once, "max_concurrent", detail, sizeof detail);
    json_object_set_new(doc, "inotify budget", json_pack("{s:s, s:s}", "level", al_level_name(l), "detail", detail));
    json_object_set_new(doc, "pool", json_pack("{s:s, s:s, s:o}", "level", "applied", "detail",
                                               "warm Python and Node boxes made ahead of need (sized by demand, up to warm_pool per shape of run "
                                               "and warm_pool_memory_mb in all), "
                                               "each handed to one run and gone with it; a run that finds none "
                                               "starts cold",
                                               "state", al_warm_pool_json()));
    return doc;
}

/* the box's network namespace and the egress proxy's listener in it */
static bool native_net_mode_held(al_net_mode mode, const char **ret_why) { return true; }

static int native_probe(al_error *err) {
    json_t *items = doctor_items();
    json_t *u = json_object_get(items, "user namespace");
    const char *level = json_string_value(json_object_get(u, "level"));
    int r = 0;
    if (!level || strcmp(level, al_level_name(AL_LEVEL_NOT_ENFORCED)) == 0)
        r = al_err(err, "driver", ENOTSUP, "native driver: %s",
                   json_string_value(json_object_get(u, "detail")) ?: "no user namespace could be made");
    json_decref(items);
    return r;
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

/* Start SELF_EXE helper with JOB: the native driver's and the docker
 * driver's (whose helper is airlock-server's) one way to run a job. */
int al_driver_helper_start(const char *self_exe, const char *job, const int *pass, size_t n_pass, al_driver_run *ret,
                           al_error *err) {
    if (n_pass > AL_HELPER_PASS_MAX)
        return al_err(err, "driver", EINVAL, "at most %d fds are passed to a helper", AL_HELPER_PASS_MAX);
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
    int r = al_write_all(in[1], job, strlen(job));
    if (r == 0)
        r = al_write_all(in[1], "\n", 1);
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

static int native_start(const char *self_exe, const char *job, al_driver_run *ret, al_error *err) {
    /* a warm box made for runs like this one, else a cold one */
    if (al_warm_pool_take(self_exe, job, ret))
        return 0;
    return al_driver_helper_start(self_exe, job, NULL, 0, ret, err);
}

int al_driver_native_configure(int boxes, int warm_pool, uint64_t memory_bytes, const char *preload, bool fork,
                               al_error *err) {
    if (warm_pool < 0)
        return al_err(err, "config", EINVAL, "warm_pool must be 0 or more");
    boxes_at_once = boxes > 0 ? (unsigned)boxes : 0;
    al_warm_pool_configure(warm_pool, memory_bytes, preload, fork && al_box_can_fork());
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

const al_driver_ops al_driver_native = {
    .name = "native",
    .capabilities = native_capabilities,
    .probe = native_probe,
    .start = native_start,
    .cancel = al_driver_helper_cancel,
    .wait = al_driver_helper_wait,
    .sweep = al_box_sweep_stale,
    .stop = al_warm_pool_stop,
    .pool = al_warm_pool_json,
    .net_mode_held = native_net_mode_held,
};
