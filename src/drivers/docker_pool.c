/*
 * The docker driver's containers made ahead of need. Creating and starting
 * a container is most of what a run costs on Docker (its runtime's mounts,
 * namespaces and cgroups: a hundred milliseconds and more), and none of it
 * depends on the run's code or inputs; so for each shape of run it has
 * seen (image, limits) the service keeps a few started containers that no
 * script has run in, holding their uids' locks. A run of that shape is
 * handed one (its helper checks with the daemon that it was made as the
 * run's own would be, else makes its own); after the run the container is
 * removed, never used again. Removal is done here, off the run's path; a
 * container the daemon will not remove keeps its uids until it does.
 *
 * One thread of the service does it, started on the first run that asks;
 * it only talks to the daemon: it never forks (it makes containers only of
 * images the daemon holds already; a run's helper loads a new one) and
 * never enters a namespace. Each container has a keeper (keep()), a helper
 * spawned with copies of its uids' locks, which holds them until the
 * container's init has ended and removes it once this service is done with
 * it or killed: a service killed with -9 leaves no idle container running
 * as a free uid (before, they waited for the next start's sweep or their
 * holders' end). One handed to a run is removed by that run's helper too,
 * which sees the service's end on its job pipe (al_docker_opts.owner_fd)
 * and holds its uids' locks, passed to it, until it has.
 */
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <libgen.h>

#include "docker_pool.h"
#include "driver.h"
#include "helper_start.h"
#include "shape_admit.h"

#define POOL_SHAPES 8
#define POOL_MAX 16
/* a container waits this long for its run, then is replaced */
#define POOL_IDLE_S 300
/* a shape no run asked for in this long keeps no container */
#define POOL_FORGET_S 600
/* how often idle containers are checked to be still running */
#define POOL_CHECK_S 2

typedef struct shape {
    bool used;
    unsigned gen;                 /* a new shape in this slot: what was made for the old is not its */
    char image_dir[PATH_MAX], digest[80];
    al_box_limits l;
    int64_t last_asked_s;
    al_docker_held ready[POOL_MAX];
    int64_t made_s[POOL_MAX];
    int n_ready;
    int64_t checked_s;
    uint64_t hits, misses;
    int failures;
    int64_t retry_at_s;           /* after a failure to make one: backs off */
    char last_error[200];
} shape;

typedef struct lent {
    struct lent *next;
    pid_t pid;                    /* the run's helper; 0: to remove */
    al_docker_held h;
    int64_t retry_at_s;           /* a removal the daemon refused: tried again then */
    int tries;
    bool own;                     /* a cold run's uids (its container its own), not the pool's */
} lent;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_t thread;
    bool running, stopping;
    int size;                     /* containers per shape; 0: none made */
    char socket[108];
    al_docker_runtime runtime;
    shape shapes[POOL_SHAPES];
    al_shape_learning learning;   /* the shapes learnt lately (shape_admit.h) */
    lent *out;                    /* handed to runs (pid) or to remove (pid 0) */
    uint64_t hits, misses;        /* since the start, every shape's */
} P = { .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int64_t now_s(void) { return (int64_t)time(NULL); }

static bool same_shape(const shape *sh, const char *dir, const char *digest, const al_box_limits *l) {
    return sh->used && strcmp(sh->image_dir, dir) == 0 && strcmp(sh->digest, digest) == 0 &&
           memcmp(&sh->l, l, sizeof *l) == 0;
}

static void *pool_main(void *arg);

/* H's keeper: `airlock-server helper` holding copies of H's locks until
 * H's init has ended, and removing H once its stdin ends (this service
 * done with H, or killed: an idle container's uids are then never free
 * while its holder runs, and it is removed at once instead of at the next
 * start). A spawn, never a fork, of this threaded process. Without one
 * (it could not start), H is as before: the next start's sweep's. */
static void keep(al_docker_held *h) {
    char self[PATH_MAX], exe[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return;
    self[n] = '\0';
    snprintf(exe, sizeof exe, "%s/airlock-server", dirname(self));
    al_job j;
    al_job_init(&j);
    j.driver = AL_JOB_DOCKER;
    j.docker_runtime = (char *)al_docker_runtime_name(P.runtime);
    j.docker_socket = P.socket[0] ? P.socket : NULL;
    j.docker_keep = (al_job_held){ .set = true, .uids = { true, h->holder, h->uid, { 3, 4 } } };
    snprintf(j.docker_keep.id, sizeof j.docker_keep.id, "%s", h->id);
    int locks[2] = { h->holder_lock, h->uid_lock };
    al_driver_run run;
    al_error err = { 0 };
    if (al_driver_helper_start(exe, &j, locks, 2, &run, &err) == 0) {
        close(run.events_fd);
        h->keeper_pid = run.pid;
        h->keeper_fd = run.job_fd;
    }
}

/* Called with P.mu held: H's container waits for the end of the run of
 * helper PID, or (PID 0) is queued for removal; OWN: a cold run's. The
 * thread that removes it runs from then on, with a pool or without. */
static void hand_out_as(pid_t pid, al_docker_held *h, bool own) {
    if (!P.running && !P.stopping && pthread_create(&P.thread, NULL, pool_main, NULL) == 0)
        P.running = true;
    lent *x = calloc(1, sizeof *x);
    if (!x && pid) {
        /* cannot wait for its run: its uids stay locked until this
         * process ends (never let go while a container may use them), and
         * its container is its helper's to remove, or the next start's */
        return;
    }
    if (!x) {
        /* cannot queue it: removed by the caller's thread instead */
        pthread_mutex_unlock(&P.mu);
        al_docker_release(P.socket[0] ? P.socket : NULL, h);
        pthread_mutex_lock(&P.mu);
        return;
    }
    x->h = *h;
    x->pid = pid;
    x->own = own;
    x->next = P.out;
    P.out = x;
    pthread_cond_broadcast(&P.cond);
}

static void hand_out(pid_t pid, al_docker_held *h) { hand_out_as(pid, h, false); }
static void to_remove(al_docker_held *h) { hand_out(0, h); }

static lent *take_removal(void) {
    int64_t now = now_s();
    for (lent **pp = &P.out; *pp; pp = &(*pp)->next)
        if ((*pp)->pid == 0 && (*pp)->retry_at_s <= now) {
            lent *x = *pp;
            *pp = x->next;
            return x;
        }
    return NULL;
}

/* With P.mu held: what is stale goes to removal, and the shape that most
 * needs a container, if any (its slot in *SLOT, its generation in *GEN). */
static shape *tidy_and_pick(int64_t now, int *slot, unsigned *gen) {
    shape *pick = NULL;
    for (int i = 0; i < POOL_SHAPES; i++) {
        shape *sh = &P.shapes[i];
        if (!sh->used)
            continue;
        bool forgotten = now - sh->last_asked_s > POOL_FORGET_S;
        for (int k = 0; k < sh->n_ready;) {
            if (forgotten || P.stopping || now - sh->made_s[k] > POOL_IDLE_S) {
                al_docker_held h = sh->ready[k];
                sh->ready[k] = sh->ready[sh->n_ready - 1];
                sh->made_s[k] = sh->made_s[sh->n_ready - 1];
                sh->n_ready--;
                to_remove(&h);
            } else {
                k++;
            }
        }
        if (forgotten && sh->n_ready == 0) {
            sh->used = false;
            continue;
        }
        if (!P.stopping && sh->n_ready < P.size && now >= sh->retry_at_s && (!pick || sh->n_ready < pick->n_ready)) {
            pick = sh;
            *slot = i;
            *gen = sh->gen;
        }
    }
    return pick;
}

/* With P.mu held: check one shape's idle containers, if it is time; a
 * dead one (its holder killed, say) goes to removal, so the refill
 * replaces it. True if it checked (P.mu was dropped meanwhile). */
static bool check_idle(void) {
    int64_t now = now_s();
    for (int i = 0; i < POOL_SHAPES; i++) {
        shape *sh = &P.shapes[i];
        if (!sh->used || sh->n_ready == 0 || now - sh->checked_s < POOL_CHECK_S)
            continue;
        sh->checked_s = now;
        unsigned gen = sh->gen;
        int n = sh->n_ready;
        al_docker_held h[POOL_MAX];
        memcpy(h, sh->ready, sizeof h[0] * (size_t)n);
        bool alive[POOL_MAX];
        pthread_mutex_unlock(&P.mu);
        for (int k = 0; k < n; k++)
            alive[k] = al_docker_held_alive(P.socket[0] ? P.socket : NULL, &h[k]);
        pthread_mutex_lock(&P.mu);
        if (!sh->used || sh->gen != gen)
            return true;
        /* what was taken meanwhile is no longer in ready: match by id */
        for (int k = 0; k < n; k++) {
            if (alive[k])
                continue;
            for (int j = 0; j < sh->n_ready; j++)
                if (strcmp(sh->ready[j].id, h[k].id) == 0) {
                    al_docker_held dead = sh->ready[j];
                    sh->ready[j] = sh->ready[sh->n_ready - 1];
                    sh->made_s[j] = sh->made_s[sh->n_ready - 1];
                    sh->n_ready--;
                    to_remove(&dead);
                    break;
                }
        }
        return true;
    }
    return false;
}

static void *pool_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&P.mu);
    for (;;) {
        /* removals first: they hold uids and memory */
        lent *x = take_removal();
        if (x) {
            pthread_mutex_unlock(&P.mu);
            bool gone = al_docker_release(P.socket[0] ? P.socket : NULL, &x->h);
            pthread_mutex_lock(&P.mu);
            if (gone) {
                free(x);
            } else {
                /* not gone: it keeps its uids, and is tried again later */
                x->tries++;
                x->retry_at_s = now_s() + (x->tries < 6 ? 1 << x->tries : 60);
                x->next = P.out;
                P.out = x;
            }
            continue;
        }
        int slot = -1;
        unsigned gen = 0;
        shape *sh = tidy_and_pick(now_s(), &slot, &gen);
        if (!sh && !P.stopping && check_idle())
            continue;
        if (!sh) {
            if (P.stopping)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += POOL_CHECK_S;
            pthread_cond_timedwait(&P.cond, &P.mu, &ts);
            continue;
        }
        /* made unlocked: a run that asks meanwhile goes cold, never waits */
        char dir[PATH_MAX], digest[80];
        snprintf(dir, sizeof dir, "%s", sh->image_dir);
        snprintf(digest, sizeof digest, "%s", sh->digest);
        al_box_limits l = sh->l;
        al_docker_opts o = { .socket = P.socket[0] ? P.socket : NULL, .runtime = P.runtime, .image_dir = dir,
                             .image_digest = digest, .owner_fd = -1 };
        pthread_mutex_unlock(&P.mu);
        al_docker_held h;
        al_error err = { 0 };
        int r = al_docker_hold(&o, &l, POOL_IDLE_S, &h, &err);
        if (r == 0)
            keep(&h);
        pthread_mutex_lock(&P.mu);
        sh = &P.shapes[slot];
        if (r < 0) {
            if (sh->used && sh->gen == gen) {
                sh->failures++;
                sh->retry_at_s = now_s() + (sh->failures < 6 ? 1 << sh->failures : 60);
                snprintf(sh->last_error, sizeof sh->last_error, "%s", err.msg);
            }
            continue;
        }
        if (sh->used && sh->gen == gen && sh->n_ready < P.size && !P.stopping) {
            sh->failures = 0;
            sh->last_error[0] = '\0';
            sh->ready[sh->n_ready] = h;
            sh->made_s[sh->n_ready++] = now_s();
        } else {
            to_remove(&h);
        }
    }
    pthread_mutex_unlock(&P.mu);
    return NULL;
}

void al_docker_pool_configure(const char *socket, al_docker_runtime runtime, int size) {
    pthread_mutex_lock(&P.mu);
    snprintf(P.socket, sizeof P.socket, "%s", socket ? socket : "");
    P.runtime = runtime;
    P.size = size < 0 ? 0 : size > POOL_MAX ? POOL_MAX : size;
    pthread_mutex_unlock(&P.mu);
}

bool al_docker_pool_take(const char *image_dir, const char *digest, const al_box_limits *l, al_docker_held *ret) {
    if (!image_dir || !digest || strlen(image_dir) >= PATH_MAX || strlen(digest) >= 80)
        return false;
    pthread_mutex_lock(&P.mu);
    if (P.size == 0 || P.stopping) {
        pthread_mutex_unlock(&P.mu);
        return false;
    }
    if (!P.running && pthread_create(&P.thread, NULL, pool_main, NULL) == 0)
        P.running = true;
    shape *sh = NULL;
    int64_t asked[POOL_SHAPES];
    for (int i = 0; i < POOL_SHAPES && !sh; i++) {
        shape *c = &P.shapes[i];
        if (same_shape(c, image_dir, digest, l))
            sh = c;
        asked[i] = c->used ? c->last_asked_s : -1;
    }
    int slot = sh ? -1 : al_shape_slot_for_new(&P.learning, now_s(), asked, POOL_SHAPES);
    if (!sh && slot < 0) {
        /* not learnt (shape_admit.h): this run makes its own */
        P.misses++;
        pthread_mutex_unlock(&P.mu);
        return false;
    }
    if (!sh) {
        /* a new shape: a free slot, else the one asked for longest ago */
        sh = &P.shapes[slot];
        for (int k = 0; k < sh->n_ready; k++)
            to_remove(&sh->ready[k]);
        unsigned gen = sh->gen + 1;
        memset(sh, 0, sizeof *sh);
        sh->used = true;
        sh->gen = gen;
        snprintf(sh->image_dir, sizeof sh->image_dir, "%s", image_dir);
        snprintf(sh->digest, sizeof sh->digest, "%s", digest);
        sh->l = *l;
    }
    sh->last_asked_s = now_s();
    bool got = false;
    /* one that waited past its time is not handed out: its holder must
     * outlive the run by a cold container's margin */
    int64_t now = now_s();
    for (int k = 0; k < sh->n_ready;) {
        if (now - sh->made_s[k] > POOL_IDLE_S - 30) {
            al_docker_held old = sh->ready[k];
            sh->ready[k] = sh->ready[sh->n_ready - 1];
            sh->made_s[k] = sh->made_s[sh->n_ready - 1];
            sh->n_ready--;
            to_remove(&old);
        } else {
            k++;
        }
    }
    if (sh->n_ready > 0) {
        *ret = sh->ready[--sh->n_ready];
        sh->hits++;
        P.hits++;
        got = true;
    } else {
        sh->misses++;
        P.misses++;
    }
    pthread_cond_broadcast(&P.cond);
    pthread_mutex_unlock(&P.mu);
    return got;
}

void al_docker_pool_lend(pid_t pid, al_docker_held *h) {
    pthread_mutex_lock(&P.mu);
    hand_out(pid, h);
    pthread_mutex_unlock(&P.mu);
}

void al_docker_pool_keep_uids(pid_t pid, al_docker_held *h) {
    pthread_mutex_lock(&P.mu);
    hand_out_as(pid, h, true);
    pthread_mutex_unlock(&P.mu);
}

void al_docker_pool_give_back(al_docker_held *h) {
    pthread_mutex_lock(&P.mu);
    to_remove(h);
    pthread_mutex_unlock(&P.mu);
}

void al_docker_pool_run_ended(pid_t pid) {
    if (pid <= 0)
        return;
    pthread_mutex_lock(&P.mu);
    for (lent *x = P.out; x; x = x->next)
        if (x->pid == pid) {
            x->pid = 0;
            pthread_cond_broadcast(&P.cond);
            break;
        }
    pthread_mutex_unlock(&P.mu);
}

json_t *al_docker_pool_json(void) {
    pthread_mutex_lock(&P.mu);
    json_t *shapes = json_array();
    int idle = 0, lent_n = 0, removing = 0, cold_removing = 0;
    for (int i = 0; i < POOL_SHAPES; i++) {
        const shape *sh = &P.shapes[i];
        if (!sh->used)
            continue;
        idle += sh->n_ready;
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I, s:i, s:I, s:I}", "image", sh->digest, "memory_bytes",
                              (json_int_t)sh->l.memory_bytes, "cpu_millis", (json_int_t)sh->l.cpu_millis, "pids",
                              (json_int_t)sh->l.pids, "timeout_s", (json_int_t)((sh->l.wall_ms + 999) / 1000), "idle",
                              sh->n_ready, "hits", (json_int_t)sh->hits, "misses", (json_int_t)sh->misses);
        if (j && sh->last_error[0])
            json_object_set_new(j, "last_error", json_string(sh->last_error));
        json_array_append_new(shapes, j);
    }
    for (const lent *x = P.out; x; x = x->next)
        if (!x->own)
            x->pid ? lent_n++ : removing++;
        else if (!x->pid)
            cold_removing++; /* a cold run's container the daemon has not removed yet: it keeps its uids */
    json_t *doc = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:o}", "per_shape", P.size, "idle_s",
                            POOL_IDLE_S, "idle", idle, "in_use", lent_n, "removing", removing, "cold_removing",
                            cold_removing, "hits", (json_int_t)P.hits, "misses", (json_int_t)P.misses, "shapes", shapes);
    pthread_mutex_unlock(&P.mu);
    return doc;
}

void al_docker_pool_stop(void) {
    pthread_mutex_lock(&P.mu);
    P.stopping = true;
    /* whatever runs still hold is over: the service stopped its runs */
    for (lent *x = P.out; x; x = x->next)
        x->pid = 0;
    pthread_cond_broadcast(&P.cond);
    bool running = P.running;
    pthread_mutex_unlock(&P.mu);
    if (running)
        pthread_join(P.thread, NULL);
    pthread_mutex_lock(&P.mu);
    P.running = false;
    /* what the thread (never started, or gone) left */
    for (int i = 0; i < POOL_SHAPES; i++) {
        shape *sh = &P.shapes[i];
        for (int k = 0; k < sh->n_ready; k++)
            to_remove(&sh->ready[k]);
        memset(sh, 0, sizeof *sh);
    }
    /* one try each: what the daemon would not remove now is the next
     * start's sweep's (its uids are free once this process is gone), and
     * its holder ends on its own */
    for (lent *x = P.out; x; x = x->next)
        x->retry_at_s = 0;
    lent *x;
    while ((x = take_removal())) {
        pthread_mutex_unlock(&P.mu);
        if (!al_docker_release(P.socket[0] ? P.socket : NULL, &x->h)) {
            if (x->h.uid_lock >= 0)
                close(x->h.uid_lock);
            if (x->h.holder_lock >= 0)
                close(x->h.holder_lock);
            /* its keeper keeps them, and removes it when the daemon will */
            if (x->h.keeper_pid > 0)
                close(x->h.keeper_fd);
        }
        free(x);
        pthread_mutex_lock(&P.mu);
    }
    P.stopping = false;
    pthread_mutex_unlock(&P.mu);
}
