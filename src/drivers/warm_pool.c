/*
 * The native driver's warm boxes (issue 14): for each shape of Python or
 * Node run it has seen (language, image, limits, and for Python whether
 * its code names a preload module), a few helpers whose box is made and
 * whose interpreter has started (Python's having imported the preload
 * modules, if that shape's code names them), each waiting for its run on
 * stdin (src/drivers/helper_main.c, src/lang/warm/). A run of that shape is handed
 * one: its job line goes to that helper's stdin, and from there it is that
 * run's helper, as a cold one is. A warm box is never reused and never
 * shared: it ends with its run.
 *
 * Sized by demand: a shape is learnt from its first run (which goes cold),
 * and keeps one box; each run that finds none ready raises that by one, up
 * to warm_pool, and each SHRINK_S without such a miss lowers it by one. All
 * of them together hold at most warm_pool_memory (each box's usage, as it
 * said when ready): past it, runs go cold. A host that runs no Python or
 * Node keeps none. A box with preloads is made only with CPU to spare (half
 * a core idle over the last moments): under a load that keeps every core
 * busy a refill, whose imports cost a second of CPU, would slow the cold
 * runs more than the rare warm one gains. One without (Python whose code
 * names none, Node) costs what the cold start it spares would: it is made
 * whatever the load.
 *
 * One thread of the service keeps them: it starts the helpers (spawned as
 * the runners spawn theirs), reads each one's "ready", notices one that
 * died, and ends those no longer wanted (a box leaves its shape at once,
 * under the lock, onto the doomed list; the thread ends it without the
 * lock). It is the helpers' parent thread for PR_SET_PDEATHSIG, so it
 * lives until the service stops, after its runs. A killed service closes
 * their stdin: each kills its box.
 */
#include <ctype.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lang/lang.h"
#include "helper_start.h"
#include "shape_admit.h"
#include "warm_pool.h"

/* shapes kept at once: a new one takes the slot of the one asked for
 * longest ago, whose boxes go */
#define SHAPES 8
#define PER_SHAPE_MAX 8
/* a warm box waits this long for its run, then is replaced */
#define IDLE_S 300
/* a shape no run asked for in this long keeps none */
#define FORGET_S 600
/* how long a helper may take to be ready (imports at the box's CPU cap) */
#define READY_S 120
/* a shape's size comes down by one after this long with no miss */
#define SHRINK_S 120
/* a box's memory before any of the shape said (the default preloads hold
 * some 60 MiB at the default limits) */
#define GUESS_BYTES (100ULL << 20)

typedef struct warm {
    al_driver_run dr;
    bool ready;
    bool forked;                  /* by its shape's zygote */
    int64_t since_s;              /* started, or ready */
    uint64_t bytes;               /* its memory, as it said when ready */
} warm;

typedef struct shape {
    bool used;
    al_job *job;                  /* its warm boxes' job */
    /* Python without preloads: its boxes are forked by a zygote of its
     * own (box.h, src/lang/warm/zygote.py), which paid the interpreter's
     * start once, rather than each made and started; the pool passes
     * ZFD, its end of the zygote's request socket, to each box's helper */
    bool fork;
    al_driver_run zygote;         /* the zygote's helper (pid -1: none) */
    int zfd;
    al_job *fork_job, *zygote_job;
    int zygote_failures;
    int64_t zygote_since_s;
    const char *lang;             /* "python" or "node" */
    bool preloads;                /* Python's boxes import the preload modules */
    char image_dir[PATH_MAX], digest[80];
    al_box_limits l;
    int64_t last_asked_s;
    int want;                     /* boxes to keep, by demand: 1..size */
    int64_t last_miss_s;          /* a run found none ready, or want last came down */
    uint64_t box_bytes;           /* what its last ready box held */
    const char *held_back;        /* why the box it wants was not made, or NULL */
    warm w[PER_SHAPE_MAX];
    int n;
    uint64_t hits, misses;
    uint64_t forked_now;          /* misses that got a box forked for them */
    int failures;
    int64_t retry_at_s;
    char last_error[200];
} shape;

static struct {
    pthread_mutex_t mu;
    pthread_t thread;
    bool running, stopping;
    int size;
    uint64_t budget;              /* bytes all warm boxes may hold */
    int64_t shrink_s, forget_s;   /* SHRINK_S and FORGET_S, but in a test build */
    int wake;                     /* eventfd: a take or a stop */
    char exe[PATH_MAX], preload[512];
    shape shapes[SHAPES];
    al_shape_learning learning;   /* the shapes learnt lately (shape_admit.h) */
    /* helpers no longer wanted, for the pool thread to end: every helper is
     * in a shape or here, and the shapes hold at most SHAPES * PER_SHAPE_MAX */
    al_driver_run doomed[SHAPES * PER_SHAPE_MAX];
    int n_doomed;
    /* zygotes no longer wanted, their request sockets closed: each ends
     * once the last box it forked has (reaped by the pool thread), or at
     * the stop. Never ended sooner: its boxes live in its pid namespace,
     * runs of any tenant. As many as there are (each holds a running box,
     * or is about to end): a list that grows. */
    al_driver_run *draining;
    int n_draining, cap_draining;
    bool fork;                    /* zygotes allowed (warm_fork) */
    uint64_t hits, misses;
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .wake = -1 };

/* what a zygote holds, counted in the budget: its interpreter, measured
 * at some 9 MiB (the host's Python 3.11) */
#define ZYGOTE_BYTES (16ULL << 20)
/* a shape whose zygote failed this often makes its boxes as others do */
#define ZYGOTE_TRIES 3
/* a zygote forks boxes for this long, then a fresh one does */
#define ZYGOTE_AGE_S 3600

static int64_t now_s(void) { return (int64_t)time(NULL); }

/* Whether this host had half a core idle since the last call that
 * measured (at least 250 ms before): /proc/stat's idle and iowait time. */
static bool cpu_to_spare(void) {
    static uint64_t last_idle, last_ms;
    static bool spare = true;
    uint64_t now = al_now_ms();
    if (last_ms && now - last_ms < 250)
        return spare;
    char buf[256];
    _cleanup_close_ int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (n <= 0)
        return true; /* unknown: as if idle */
    buf[n] = '\0';
    unsigned long long v[5] = { 0 };
    if (sscanf(buf, "cpu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]) != 5)
        return true;
    long hz = sysconf(_SC_CLK_TCK);
    uint64_t idle_ms = (uint64_t)(v[3] + v[4]) * 1000 / (uint64_t)(hz > 0 ? hz : 100);
    if (last_ms)
        spare = (idle_ms - last_idle) * 2 >= now - last_ms;
    last_idle = idle_ms;
    last_ms = now;
    return spare;
}

static void poke(void) {
    uint64_t one = 1;
    if (P.wake >= 0 && write(P.wake, &one, sizeof one) < 0) {
        /* full: the thread is due to wake anyway */
    }
}

/* The helper's end: its stdin closed (it kills its box), reaped. */
static void end_helper(al_driver_run *dr) {
    if (dr->job_fd >= 0)
        close(dr->job_fd);
    dr->job_fd = -1;
    if (dr->pid > 0) {
        /* it exits at its stdin's end; a helper that hangs is killed */
        for (int i = 0; i < 200; i++) {
            if (waitpid(dr->pid, NULL, WNOHANG) == dr->pid) {
                dr->pid = -1;
                break;
            }
            struct timespec ts = { 0, 10 * 1000000L };
            nanosleep(&ts, NULL);
        }
        if (dr->pid > 0) {
            kill(dr->pid, SIGKILL);
            waitpid(dr->pid, NULL, 0);
        }
    }
    dr->pid = -1;
    if (dr->events_fd >= 0)
        close(dr->events_fd);
    dr->events_fd = -1;
}

/* With P.mu held: SH's box K leaves it, for the pool thread to end. */
static void doom(shape *sh, int k) {
    al_driver_run dr = sh->w[k].dr;
    sh->w[k] = sh->w[--sh->n];
    if (P.n_doomed < (int)ELEMENTSOF(P.doomed)) {
        P.doomed[P.n_doomed++] = dr;
        poke();
        return;
    }
    /* (cannot happen: see doomed) */
    pthread_mutex_unlock(&P.mu);
    end_helper(&dr);
    pthread_mutex_lock(&P.mu);
}

/* With P.mu held, letting go of it for each: the doomed helpers end. */
static void end_doomed(void) {
    while (P.n_doomed > 0) {
        al_driver_run dr = P.doomed[--P.n_doomed];
        pthread_mutex_unlock(&P.mu);
        end_helper(&dr);
        pthread_mutex_lock(&P.mu);
    }
}

/* A helper's first line: {"type": "ready", "memory_bytes": N}, or why not. */
static bool read_ready(int fd, uint64_t *bytes, char *why, size_t why_len) {
    char buf[512];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    if (n <= 0) {
        snprintf(why, why_len, "the warm helper ended before it was ready");
        return false;
    }
    buf[n] = '\0';
    json_t *doc = buf[n - 1] == '\n' ? json_loads(buf, JSON_DECODE_ANY, NULL) : NULL;
    bool ready = json_is_string(json_object_get(doc, "type")) &&
                 strcmp(json_string_value(json_object_get(doc, "type")), "ready") == 0;
    json_int_t b = json_integer_value(json_object_get(doc, "memory_bytes"));
    json_decref(doc);
    if (ready) {
        *bytes = b > 0 ? (uint64_t)b : 0;
        return true;
    }
    buf[strcspn(buf, "\n")] = '\0';
    snprintf(why, why_len, "the warm helper said: %.180s", buf);
    return false;
}

/* What the warm boxes hold, those starting counted at their shape's last. */
static uint64_t held_bytes(void) {
    uint64_t sum = 0;
    for (int i = 0; i < SHAPES; i++) {
        const shape *sh = &P.shapes[i];
        for (int k = 0; sh->used && k < sh->n; k++)
            /* (a box that could not say, with no cgroup, counts as a guess) */
            sum += sh->w[k].ready && sh->w[k].bytes ? sh->w[k].bytes : sh->box_bytes ? sh->box_bytes : GUESS_BYTES;
        if (sh->used && sh->zygote_job && sh->zygote.pid > 0)
            sum += ZYGOTE_BYTES;
    }
    /* (a draining zygote's interpreter has ended: its PID 1 is left) */
    return sum;
}

/* Whether SH's boxes, as its last said when ready, hold its runs' memory
 * limit or more before any run: the hand-off would refuse each (box.c),
 * its run going cold, so none is kept (preloads too big for the limit). */
static bool over_limit(const shape *sh) { return sh->l.memory_bytes && sh->box_bytes >= sh->l.memory_bytes; }

/* A box of SH to drop now (forgotten shape, idle or starting too long), or -1. */
static int stale_one(const shape *sh, int64_t now, bool forgotten) {
    for (int k = 0; k < sh->n; k++) {
        const warm *w = &sh->w[k];
        if (forgotten || (w->ready && (now - w->since_s > IDLE_S || over_limit(sh))) ||
            (!w->ready && now - w->since_s > READY_S))
            return k;
    }
    return -1;
}

/* The box of SH to drop when it keeps more than it wants: one starting
 * (it has served nobody yet), else the last. */
static void drop_job(al_job **j) {
    if (*j)
        al_job_free(*j);
    free(*j);
    *j = NULL;
}

/* SH's jobs freed (a shape forgotten, or the pool stopping). */
static void drop_jobs(shape *sh) {
    drop_job(&sh->job);
    drop_job(&sh->fork_job);
    drop_job(&sh->zygote_job);
}

static int extra_one(const shape *sh) {
    for (int k = 0; k < sh->n; k++)
        if (!sh->w[k].ready)
            return k;
    return sh->n - 1;
}

/* With P.mu held: SH's zygote takes no more requests; it and its helper
 * end once its last box has. */
static void end_zygote(shape *sh) {
    /* (its fds are set, to -1 or one, only in a shape that forks) */
    if (!sh->zygote_job)
        return;
    if (sh->zfd >= 0)
        close(sh->zfd);
    sh->zfd = -1;
    al_driver_run z = sh->zygote;
    sh->zygote = (al_driver_run){ .pid = -1, .events_fd = -1, .job_fd = -1 };
    if (z.pid <= 0)
        return;
    if (P.n_draining == P.cap_draining) {
        int cap = P.cap_draining ? 2 * P.cap_draining : 16;
        al_driver_run *d = realloc(P.draining, (size_t)cap * sizeof *d);
        if (!d) {
            /* (no memory for the list: it is reaped when the service
             * stops, its stdin closed then; until then it drains) */
            return;
        }
        P.draining = d;
        P.cap_draining = cap;
    }
    P.draining[P.n_draining++] = z;
}

/* With P.mu held: the draining zygotes that have ended, reaped; at the
 * stop (ALL), every one (its stdin's end kills it and its boxes). */
static void reap_draining(bool all) {
    for (int i = P.n_draining - 1; i >= 0; i--) {
        al_driver_run *dr = &P.draining[i];
        if (!all && waitpid(dr->pid, NULL, WNOHANG) != dr->pid)
            continue;
        if (!all)
            dr->pid = -1;
        al_driver_run d = *dr;
        *dr = P.draining[--P.n_draining];
        pthread_mutex_unlock(&P.mu);
        end_helper(&d);
        pthread_mutex_lock(&P.mu);
    }
}

/* With P.mu held: SH's zygote, started if it has none or the one it had
 * ended; false when there is none to fork from (SH then makes its boxes
 * as others do, and after ZYGOTE_TRIES failures in a row, for good). */
static bool have_zygote(shape *sh) {
    /* one that has forked boxes long enough makes way for a fresh one
     * (its boxes run on): its address layout and hash seed, which its
     * boxes share, are not shared longer */
    if (sh->zygote.pid > 0 && now_s() - sh->zygote_since_s > ZYGOTE_AGE_S)
        end_zygote(sh);
    if (sh->zygote.pid > 0) {
        /* its interpreter gone (its request socket's end), or its helper */
        struct pollfd pf = { .fd = sh->zfd, .events = 0 };
        bool hung = poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR));
        if (!hung && waitpid(sh->zygote.pid, NULL, WNOHANG) != sh->zygote.pid)
            return true;
        snprintf(sh->last_error, sizeof sh->last_error, "its zygote ended");
        if (!hung) {
            /* reaped: its fds go; a hung one drains (its boxes may live) */
            sh->zygote.pid = -1;
            end_helper(&sh->zygote);
        }
        end_zygote(sh);
        if (++sh->zygote_failures >= ZYGOTE_TRIES) {
            sh->fork = false;
            return false;
        }
    }
    int z[2];
    al_error err = { 0 };
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, z) < 0) {
        snprintf(sh->last_error, sizeof sh->last_error, "socketpair: %s", strerror(errno));
        return false;
    }
    al_driver_run dr = { .pid = -1, .events_fd = -1, .job_fd = -1 };
    int r = al_driver_helper_start(P.exe, sh->zygote_job, &z[0], 1, &dr, &err);
    close(z[0]);
    if (r < 0) {
        close(z[1]);
        snprintf(sh->last_error, sizeof sh->last_error, "start its zygote: %s", err.msg);
        if (++sh->zygote_failures >= ZYGOTE_TRIES)
            sh->fork = false;
        return false;
    }
    sh->zygote = dr;
    sh->zfd = z[1];
    sh->zygote_since_s = now_s();
    return true;
}

static void *pool_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&P.mu);
    while (!P.stopping) {
        int64_t now = now_s();
        /* sampled every round, so the window it judges is the last one */
        bool spare = cpu_to_spare();
        end_doomed();
        reap_draining(false);
        /* stale ones go, missing ones start (one at a time: each imports
         * at its box's CPU cap) */
        shape *start_for = NULL;
        for (int i = 0; i < SHAPES; i++) {
            shape *sh = &P.shapes[i];
            if (!sh->used)
                continue;
            bool forgotten = now - sh->last_asked_s > P.forget_s;
            if (sh->want > 1 && now - sh->last_miss_s > P.shrink_s) {
                sh->want--;
                sh->last_miss_s = now;
            }
            if (sh->want > P.size)
                sh->want = P.size;
            int k;
            while ((k = stale_one(sh, now, forgotten)) >= 0)
                doom(sh, k);
            /* beyond what demand asks: those still starting go first */
            while (sh->n > sh->want)
                doom(sh, extra_one(sh));
            if (forgotten) {
                end_zygote(sh);
                drop_jobs(sh);
                memset(sh, 0, sizeof *sh);
                continue;
            }
            bool starting = false;
            for (k = 0; k < sh->n; k++)
                starting |= !sh->w[k].ready;
            uint64_t est = sh->box_bytes ? sh->box_bytes : GUESS_BYTES;
            sh->held_back = NULL;
            if (starting || sh->n >= sh->want || now < sh->retry_at_s)
                continue;
            if (over_limit(sh))
                sh->held_back = "its boxes hold more than its runs' memory limit";
            else if (held_bytes() + est > P.budget)
                sh->held_back = "the memory budget (warm_pool_memory_mb)";
            else if (!spare && sh->preloads)
                sh->held_back = "no CPU to spare"; /* tried again at the next tick */
            else if (!start_for)
                start_for = sh;
        }
        if (start_for) {
            shape *sh = start_for;
            al_driver_run dr = { .pid = -1, .events_fd = -1, .job_fd = -1 };
            al_error err = { 0 };
            bool forked = sh->fork && have_zygote(sh);
            int r = forked ? al_driver_helper_start(P.exe, sh->fork_job, &sh->zfd, 1, &dr, &err)
                           : al_driver_helper_start(P.exe, sh->job, NULL, 0, &dr, &err);
            if (r == 0) {
                sh->w[sh->n++] = (warm){ .dr = dr, .since_s = now, .forked = forked };
            } else {
                sh->failures++;
                sh->retry_at_s = now + (sh->failures < 6 ? 1 << sh->failures : 60);
                snprintf(sh->last_error, sizeof sh->last_error, "%s", err.msg);
            }
        }
        /* wait: for a helper's ready (or end), a take, a stop, a tick */
        struct pollfd p[1 + SHAPES * PER_SHAPE_MAX];
        struct { int s, k; } who[SHAPES * PER_SHAPE_MAX];
        int np = 0;
        p[np++] = (struct pollfd){ .fd = P.wake, .events = POLLIN };
        for (int i = 0; i < SHAPES; i++)
            for (int k = 0; k < P.shapes[i].n; k++) {
                who[np - 1].s = i;
                who[np - 1].k = k;
                p[np++] = (struct pollfd){ .fd = P.shapes[i].w[k].dr.events_fd, .events = POLLIN };
            }
        pthread_mutex_unlock(&P.mu);
        int r = poll(p, (nfds_t)np, 1000);
        pthread_mutex_lock(&P.mu);
        if (r <= 0)
            continue;
        if (p[0].revents) {
            uint64_t v;
            if (read(P.wake, &v, sizeof v) < 0) {
                /* nothing to read: woken by another */
            }
        }
        /* a helper seen may have been taken meanwhile: matched by pid */
        for (int q = np - 1; q >= 1; q--) {
            if (!p[q].revents)
                continue;
            shape *sh = &P.shapes[who[q - 1].s];
            int k = who[q - 1].k;
            if (k >= sh->n || sh->w[k].dr.events_fd != p[q].fd)
                continue;
            warm *w = &sh->w[k];
            char why[200] = "";
            if (!w->ready && (p[q].revents & POLLIN) && read_ready(w->dr.events_fd, &w->bytes, why, sizeof why)) {
                w->ready = true;
                w->since_s = now_s();
                sh->box_bytes = w->bytes;
                sh->failures = 0;
                if (w->forked)
                    sh->zygote_failures = 0;
                sh->last_error[0] = '\0';
            } else {
                /* ended, or said something else than ready: gone */
                if (why[0]) {
                    sh->failures++;
                    sh->retry_at_s = now_s() + (sh->failures < 6 ? 1 << sh->failures : 60);
                    snprintf(sh->last_error, sizeof sh->last_error, "%s", why);
                }
                doom(sh, k);
            }
        }
    }
    /* stopping: every warm helper goes, and every zygote (the service's
     * runs have ended) */
    for (int i = 0; i < SHAPES; i++) {
        shape *sh = &P.shapes[i];
        while (sh->n > 0)
            doom(sh, sh->n - 1);
        end_zygote(sh);
        drop_jobs(sh);
        memset(sh, 0, sizeof *sh);
    }
    end_doomed();
    reap_draining(true);
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

void al_warm_pool_configure(int size, uint64_t budget_bytes, const char *preload, bool fork) {
    pthread_mutex_lock(&P.mu);
    P.fork = fork;
    P.size = size < 0 ? 0 : size > PER_SHAPE_MAX ? PER_SHAPE_MAX : size;
    P.budget = budget_bytes;
    snprintf(P.preload, sizeof P.preload, "%s", preload ? preload : "");
    P.shrink_s = SHRINK_S;
    P.forget_s = FORGET_S;
#ifdef AIRLOCK_TEST_HOOKS
    /* test builds: a test of the shrinking and the forgetting that takes
     * seconds, not minutes */
    const char *v;
    if ((v = getenv("AIRLOCK_TEST_WARM_SHRINK_S")))
        P.shrink_s = strtoll(v, NULL, 10);
    if ((v = getenv("AIRLOCK_TEST_WARM_FORGET_S")))
        P.forget_s = strtoll(v, NULL, 10);
#endif
    pthread_mutex_unlock(&P.mu);
}

/* Whether CODE names one of the preload modules' packages ("numpy" for
 * "numpy" or "matplotlib.pyplot"'s "matplotlib") as a word. A run that
 * does not gets a box without them: a preloaded interpreter's end (its
 * 60 MiB unmapped) costs some 8 ms, more than all of `python3 -c pass`
 * saves, and its refill a second of CPU. A word in a comment or a string
 * only costs that; a module imported in another way is imported in the
 * run's own time, as on a cold start. */
static bool names_a_preload(const char *code, const char *preload) {
    for (const char *m = preload; *m;) {
        size_t len = strcspn(m, ","), top = strcspn(m, ".,");
        char name[64];
        if (top > 0 && top < sizeof name) {
            memcpy(name, m, top);
            name[top] = '\0';
            for (const char *at = code; (at = strstr(at, name)); at += top) {
                char before = at == code ? ' ' : at[-1], after = at[top];
                if (!isalnum((unsigned char)before) && before != '_' && !isalnum((unsigned char)after) && after != '_')
                    return true;
            }
        }
        m += len + (m[len] == ',');
    }
    return false;
}

/* The shape of JOB's run (false: no warm box can run it): Python, or Node
 * without stdin (its warm start cannot put a passed fd at fd 0), offline,
 * no skill, no packages (their layer is mounted in the root, which a warm
 * box made before its run already has), the native driver. */
static bool shape_of(const al_job *job, const char *preload, const char **lang, bool *preloads, const char **dir,
                     const char **digest, al_box_limits *l) {
    const al_lang *al = job->lang;
    /* a sandbox's run (its working directory staged and collected) is
     * always cold: a warm box's /work is made before its run is known */
    if (!al || !al_lang_warm_start(al) || (job->network && strcmp(job->network, "offline") != 0) || job->skill_dir ||
        job->work_in || al_job_has_packages(job) ||
        job->driver != AL_JOB_NATIVE || (strcmp(al->name, "python") != 0 && job->stdin_path))
        return false;
    *lang = al->name;
    *preloads = strcmp(al->name, "python") == 0 && job->code && names_a_preload(job->code, preload);
    *dir = job->image_dir;
    *digest = job->image_digest;
    if (!*dir != !*digest || (*dir && (strlen(*dir) >= PATH_MAX || strlen(*digest) >= 80)))
        return false;
    *l = job->limits;
    return true;
}

static bool same(const shape *sh, const char *lang, bool preloads, const char *dir, const char *digest,
                 const al_box_limits *l) {
    return sh->used && strcmp(sh->lang, lang) == 0 && sh->preloads == preloads && strcmp(sh->image_dir, dir ? dir : "") == 0 &&
           strcmp(sh->digest, digest ? digest : "") == 0 && memcmp(&sh->l, l, sizeof *l) == 0;
}

/* The job of a warm box of JOB's shape; with FD_FIELD, of a forked one
 * ("fork_fd") or its zygote ("zygote_fd"), the fd the pool passes (3).
 * With P.mu held. */
static al_job *warm_job(const al_job *job, bool preloads, const char *fd_field) {
    bool zygote = fd_field && strcmp(fd_field, "zygote_fd") == 0;
    al_job *w = malloc(sizeof *w);
    if (!w)
        return NULL;
    al_job_init(w);
    w->warm = !zygote;
    w->zygote = zygote;
    w->lang = job->lang;
    w->limits = job->limits;
    if (fd_field && zygote)
        w->zygote_fd = 3;
    else if (fd_field)
        w->fork_fd = 3;
    int r = al_job_set(&w->preload, preloads ? P.preload : "");
    if (r == 0 && job->image_dir && job->image_digest &&
        (al_job_set(&w->image_dir, job->image_dir) < 0 || al_job_set(&w->image_digest, job->image_digest) < 0))
        r = -ENOMEM;
    if (r < 0)
        drop_job(&w);
    return w;
}

bool al_warm_pool_take(const char *self_exe, const al_job *job, al_driver_run *ret) {
    const char *lang = NULL, *dir = NULL, *digest = NULL;
    bool preloads = false;
    al_box_limits l;
    /* the shape, and the scan of the code (up to its size cap), without
     * the lock every take and the pool thread wait on */
    char preload[sizeof P.preload];
    pthread_mutex_lock(&P.mu);
    memcpy(preload, P.preload, sizeof preload);
    pthread_mutex_unlock(&P.mu);
    bool fits = shape_of(job, preload, &lang, &preloads, &dir, &digest, &l);
    /* its wire form, for a ready helper (one too large goes cold, and is
     * refused there) */
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    al_error eerr = { 0 };
    if (fits && al_job_encode(job, &text, &len, &eerr) < 0)
        return false;
    pthread_mutex_lock(&P.mu);
    if (!fits || P.size == 0 || P.stopping) {
        pthread_mutex_unlock(&P.mu);
        return false;
    }
    if (!P.running) {
        snprintf(P.exe, sizeof P.exe, "%s", self_exe);
        if (P.wake < 0)
            P.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (P.wake >= 0 && pthread_create(&P.thread, NULL, pool_main, NULL) == 0)
            P.running = true;
    }
    shape *sh = NULL;
    int64_t asked[SHAPES];
    for (int i = 0; i < SHAPES && !sh; i++) {
        shape *c = &P.shapes[i];
        if (same(c, lang, preloads, dir, digest, &l))
            sh = c;
        asked[i] = c->used ? c->last_asked_s : -1;
    }
    int slot = sh ? -1 : al_shape_slot_for_new(&P.learning, now_s(), asked, SHAPES);
    if (slot >= 0) {
        /* a new shape: in a free slot, or the one asked for longest ago,
         * whose helpers the pool thread ends */
        sh = &P.shapes[slot];
        while (sh->n > 0)
            doom(sh, sh->n - 1);
        end_zygote(sh);
        drop_jobs(sh);
        memset(sh, 0, sizeof *sh);
        sh->zygote = (al_driver_run){ .pid = -1, .events_fd = -1, .job_fd = -1 };
        sh->zfd = -1;
        sh->job = warm_job(job, preloads, NULL);
        sh->fork = P.fork && strcmp(lang, "python") == 0 && !preloads;
        if (sh->fork) {
            sh->fork_job = warm_job(job, preloads, "fork_fd");
            sh->zygote_job = warm_job(job, preloads, "zygote_fd");
            sh->fork = sh->fork_job && sh->zygote_job;
        }
        sh->used = sh->job != NULL;
        sh->lang = lang;
        sh->preloads = preloads;
        snprintf(sh->image_dir, sizeof sh->image_dir, "%s", dir ? dir : "");
        snprintf(sh->digest, sizeof sh->digest, "%s", digest ? digest : "");
        sh->l = l;
        sh->want = 1;
    }
    bool got = false;
    int fork_fd = -1;
    if (sh && sh->used) {
        sh->last_asked_s = now_s();
        for (int k = 0; k < sh->n && !got;) {
            if (!sh->w[k].ready) {
                k++;
                continue;
            }
            /* a ready helper says nothing until its run comes: one that
             * has (its box died, it is ending) is not handed a run */
            struct pollfd pf = { .fd = sh->w[k].dr.events_fd, .events = POLLIN };
            if (poll(&pf, 1, 0) != 0) {
                doom(sh, k);
                continue;
            }
            *ret = sh->w[k].dr;
            sh->w[k] = sh->w[--sh->n];
            got = true;
        }
        if (got) {
            sh->hits++;
            P.hits++;
        } else {
            /* demand beyond what it keeps (or its first run): one more */
            sh->misses++;
            P.misses++;
            if (sh->hits + sh->misses > 1 && sh->want < P.size)
                sh->want++;
            sh->last_miss_s = now_s();
            /* none ready, but a zygote: a box forked for this run now
             * (its interpreter's start paid already), rather than one
             * made and started */
            if (sh->fork && sh->zygote_job && sh->zygote.pid > 0 && sh->zfd >= 0 &&
                (fork_fd = fcntl(sh->zfd, F_DUPFD_CLOEXEC, 3)) >= 0)
                sh->forked_now++;
        }
    } else {
        P.misses++;
    }
    pthread_mutex_unlock(&P.mu);
    poke();
    if (!got) {
        bool forked = false;
        if (fork_fd >= 0) {
            /* the run's own job, told to fork its box (helper.c) */
            al_job forked_job = *job;
            forked_job.fork_fd = 3;
            al_error err = { 0 };
            forked = al_driver_helper_start(self_exe, &forked_job, &fork_fd, 1, ret, &err) == 0;
            close(fork_fd);
        }
        return forked;
    }
    /* its run, on the stdin it waits on: from here it is that run's helper */
    if (al_driver_helper_send(ret->job_fd, text, len) < 0) {
        /* it died idle: this run goes cold, the pool replaces it */
        end_helper(ret);
        return false;
    }
    return true;
}

json_t *al_warm_pool_json(void) {
    pthread_mutex_lock(&P.mu);
    json_t *shapes = json_array();
    int idle = 0, starting = 0;
    uint64_t held = held_bytes();
    for (int i = 0; i < SHAPES; i++) {
        const shape *sh = &P.shapes[i];
        if (!sh->used)
            continue;
        int ready = 0;
        for (int k = 0; k < sh->n; k++)
            ready += sh->w[k].ready;
        idle += ready;
        starting += sh->n - ready;
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:i, s:i, s:I, s:I, s:I}", "language", sh->lang,
                              "image", sh->digest[0] ? sh->digest : "host", "memory_bytes",
                              (json_int_t)sh->l.memory_bytes, "cpu_millis", (json_int_t)sh->l.cpu_millis, "pids",
                              (json_int_t)sh->l.pids, "timeout_s", (json_int_t)((sh->l.wall_ms + 999) / 1000), "want", sh->want,
                              "idle", ready, "starting", sh->n - ready, "box_bytes", (json_int_t)sh->box_bytes, "hits",
                              (json_int_t)sh->hits, "misses", (json_int_t)sh->misses);
        if (j)
            json_object_set_new(j, "preload", json_string(sh->preloads ? P.preload : ""));
        /* a zygote: whether it forks this shape's boxes, and how many
         * runs that found none ready had one forked for them */
        if (j)
            json_object_set_new(j, "zygote", json_pack("{s:b, s:b, s:I}", "forks", sh->fork, "running",
                                                       sh->zygote_job && sh->zygote.pid > 0,
                                                       "forked_for_misses", (json_int_t)sh->forked_now));
        if (j && sh->last_error[0])
            json_object_set_new(j, "last_error", json_string(sh->last_error));
        if (j && sh->held_back)
            json_object_set_new(j, "held_back", json_string(sh->held_back));
        json_array_append_new(shapes, j);
    }
    json_t *doc = json_pack("{s:i, s:b, s:i, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:o}", "per_shape", P.size,
                            "fork", P.fork,
                            "idle_s", IDLE_S, "preload", P.preload, "idle", idle, "in_use", 0, "removing", 0,
                            "starting", starting, "memory_bytes", (json_int_t)held, "memory_budget_bytes",
                            (json_int_t)P.budget, "hits", (json_int_t)P.hits, "misses", (json_int_t)P.misses,
                            "shapes", shapes);
    pthread_mutex_unlock(&P.mu);
    return doc;
}

void al_warm_pool_stop(void) {
    pthread_mutex_lock(&P.mu);
    bool running = P.running;
    P.stopping = true;
    pthread_mutex_unlock(&P.mu);
    poke();
    if (running)
        pthread_join(P.thread, NULL);
    pthread_mutex_lock(&P.mu);
    P.running = false;
    P.stopping = false;
    pthread_mutex_unlock(&P.mu);
}
