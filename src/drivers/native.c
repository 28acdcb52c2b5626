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
#include "helper_start.h"
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

static int native_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
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
    .installs_packages = true,
};
