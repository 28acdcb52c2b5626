/*
 * Many nodes on one store. Each `airlock serve` joins the store as a node
 * with a lease it renews every quarter of node_lease_s. A node whose lease
 * ran out is declared dead by whichever node notices first (once: the
 * store serialises it); its active runs end in error (lost) and are
 * refunded once, its claimed, unstarted runs go back to the queue. A node
 * that finds itself declared dead, or that could not renew within its own
 * lease (it may have been), runs nothing more: it kills its boxes,
 * publishes no result and stops, so a node that comes back never
 * resurrects runs the others ended. On PostgreSQL a watcher connection
 * hears the others' notifications: a run's new events wake its followers
 * here, a cancel reaches the node with the box, a queued run or a freed
 * slot wakes the scheduler. SQLite is one node: nothing to tell or hear.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../store/nodes.h"
#include "service.h"
#include "service_int.h"



/* Where this node's pid means something: the host's name, this boot of
 * it and the pid namespace, so that two containers that share a host name
 * never read each other's pids. */
static void place(char *buf, size_t len) {
    char name[128] = "", boot[64] = "";
    gethostname(name, sizeof name - 1);
    _cleanup_free_ char *b = NULL;
    if (al_read_small(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 64, &b, NULL) == 0)
        snprintf(boot, sizeof boot, "%.*s", (int)strcspn(b, "\n"), b);
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    snprintf(buf, len, "%s boot:%s pidns:%llu", name, boot, ns);
}

/* A node in this place whose process is gone is dead now, whatever its
 * lease says (a restart after kill -9 need not wait for it). A pid taken
 * by another process since reads as alive: the lease decides then. */
static void expire_gone_here(al_service *s) {
    char host[256], ids[64][40];
    int64_t pids[64];
    al_error err = { 0 };
    place(host, sizeof host);
    int n = al_store_nodes_on_host(s->store, host, s->node_id, ids, pids, 64, &err);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0 && kill((pid_t)pids[i], 0) < 0 && errno == ESRCH)
            al_store_node_expire(s->store, ids[i], &err);
}

void al_cluster_reap(al_service *s, bool all_others) {
    char now[40], ids[64][40];
    al_error err = { 0 };
    if (!all_others)
        expire_gone_here(s);
    if (all_others)
        snprintf(now, sizeof now, "9999-12-31T23:59:59.999Z");
    else
        al_store_now(now, sizeof now);
    int n = al_store_nodes_reap(s->store, s->node_id, now, ids, 64, &err);
    if (n < 0) {
        al_service_log(s, AL_LOG_WARN, "node.reap_failed", json_pack("{s:s}", "error", err.msg));
        return;
    }
    /* a node's row outlives it by a week (who ended whose runs), no more */
    char week_ago[40];
    al_cluster_time_after(-7LL * 24 * 3600 * 1000, week_ago, sizeof week_ago);
    al_store_nodes_forget(s->store, week_ago, &err);
    for (int i = 0; i < n; i++) {
        if (!all_others)
            al_service_log(s, AL_LOG_WARN, "node.dead", json_pack("{s:s, s:s}", "node", ids[i], "declared_by", s->node_id));
        char runs[256][40], why[160];
        snprintf(why, sizeof why, "node %s stopped while this run was active on it", ids[i]);
        int k;
        for (int pass = 0; pass < 64 && (k = al_store_node_runs(s->store, ids[i], runs, 256, &err)) > 0; pass++)
            for (int j = 0; j < k; j++)
                al_service_lose_run(s, runs[j], why);
    }
    if (n > 0) {
        /* what the dead had on this host and its helpers could not remove
         * (a helper killed with it) is a leftover now, not at the next start */
        s->driver->sweep();
        /* their slots are free, and what they had claimed waits again */
        al_cluster_notify(s, AL_NOTIFY_QUEUE, "");
        pthread_mutex_lock(&s->mu);
        s->queue_gen++;
        s->slot_gen++;
        pthread_cond_broadcast(&s->sched_cond);
        pthread_mutex_unlock(&s->mu);
    }
}

/* This node must run nothing more: its boxes die, and the process stops
 * (al_service_run returns an error, so a supervisor starts a new node). */
static void fence(al_service *s, const char *why) {
    pthread_mutex_lock(&s->mu);
    bool first = !s->declared_dead;
    s->declared_dead = true;
    pthread_mutex_unlock(&s->mu);
    if (!first)
        return;
    al_service_log(s, AL_LOG_ERROR, "node.fenced", json_pack("{s:s, s:s}", "node", s->node_id, "why", why));
    al_service_cancel_all(s);
    kill(getpid(), SIGTERM);
}

static bool stopping(al_service *s) {
    pthread_mutex_lock(&s->mu);
    bool st = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Cancel this node's runs whose cancel was asked on another node: what a
 * lost notification (a watcher reconnecting) would otherwise leave running. */
static void asked_cancels(al_service *s) {
    char ids[64][40];
    al_error err = { 0 };
    int n = al_store_node_cancels(s->store, s->node_id, ids, 64, &err);
    for (int i = 0; i < n; i++)
        al_service_cancel_local(s, ids[i]);
}

/* This node's runs that the store still calls active but no runner of
 * it holds: their end could not be written (the store was away when they
 * ended). They end as error (lost) and are refunded, once; a run is active
 * in the store only after its runner holds it, and its runner lets go only
 * after writing its end. */
static void unheld_here(al_service *s) {
    char ids[256][40];
    al_error err = { 0 };
    int n = al_store_node_runs(s->store, s->node_id, ids, 256, &err);
    for (int i = 0; i < n; i++)
        if (!al_service_is_active(s, ids[i]))
            al_service_lose_run(s, ids[i], "its end could not be recorded: the store was unreachable when it ended");
}

void al_cluster_tick(al_service *s) {
    uint64_t now = al_now_ms();
    if (now < s->next_reap_ms)
        return;
    s->next_reap_ms = now + (uint64_t)s->cfg.node_lease_s * 250;
    if (s->multi_node)
        asked_cancels(s);
    unheld_here(s);
    al_cluster_reap(s, false);
}

static void *lease_main(void *p) {
    al_service *s = p;
    int64_t lease_ms = (int64_t)s->cfg.node_lease_s * 1000;
    /* the lease written last holds until here (al_now_ms); this node
     * stops before the others may see it run out */
    uint64_t holds_until = al_now_ms() + (uint64_t)lease_ms;
    while (!stopping(s)) {
        /* a quarter of the lease, in steps short enough to stop promptly */
        for (int64_t slept = 0; slept < lease_ms / 4 && !stopping(s); slept += 100)
            nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
        if (stopping(s))
            break;
        char until[40];
        uint64_t asked = al_now_ms();
        al_cluster_time_after(lease_ms, until, sizeof until);
        al_error err = { 0 };
        int r = al_store_node_renew(s->lease_store, s->node_id, until, &err);
        if (r > 0) {
            holds_until = asked + (uint64_t)lease_ms;
        } else if (r == 0) {
            fence(s, "another airlock service on this same store declared this one dead: this one had not "
                     "renewed its lease (node_lease_s) in time, or it was stopped or paused that long. It stops "
                     "now so that no run is served twice; the runs it was running end as lost");
            break;
        } else if (al_now_ms() + (uint64_t)lease_ms / 4 >= holds_until) {
            /* the others may declare it dead at any moment: it cannot know */
            fence(s, "this service could not write its lease to the store in time (node_lease_s): another "
                     "service on this store may declare it dead at any moment, so it stops now");
            break;
        }
    }
    return NULL;
}

static void *watch_main(void *p) {
    al_service *s = p;
    while (!stopping(s)) {
        char channel[64], payload[64];
        al_error err = { 0 };
        int r = al_store_watch_next(s->watch, 500, channel, sizeof channel, payload, sizeof payload, &err);
        if (r < 0) {
            nanosleep(&(struct timespec){ .tv_nsec = 500 * 1000 * 1000 }, NULL);
            continue;
        }
        if (r == 2) {
            /* reconnected: what was said meanwhile is lost; all may have changed */
            al_service_wake_all(s);
            asked_cancels(s);
        } else if (r == 1 && strcmp(channel, AL_NOTIFY_EVENTS) == 0) {
            al_service_wake_run(s, payload);
            continue;
        } else if (r == 1 && strcmp(channel, AL_NOTIFY_CANCEL) == 0) {
            al_service_cancel_local(s, payload);
            continue;
        } else if (r == 0) {
            continue;
        }
        /* a run queued or a slot freed on another node (or, after a
         * reconnect, maybe both) */
        pthread_mutex_lock(&s->mu);
        s->queue_gen++;
        s->slot_gen++;
        pthread_cond_broadcast(&s->sched_cond);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

int al_cluster_start(al_service *s, al_error *err) {
    al_store_new_id("node", s->node_id, sizeof s->node_id);
    s->multi_node = strcmp(al_store_backend_name(s->store), "postgresql") == 0;
    char host[256], now[40], until[40];
    place(host, sizeof host);
    al_store_now(now, sizeof now);
    al_cluster_time_after((int64_t)s->cfg.node_lease_s * 1000, until, sizeof until);
    int r = al_store_node_join(s->store, s->node_id, host, (int64_t)getpid(), now, until, err);
    if (r < 0)
        return r;
    if ((r = al_store_open(s->store_target, &s->lease_store, err)) < 0)
        return r;
    if (s->multi_node && (r = al_store_watch_open(s->store_target, &s->watch, err)) < 0)
        return r;
    /* what this node sends it has told itself already (wake_run, the
     * scheduler's kicks): its watcher hears the others only */
    if (s->watch)
        al_store_watch_skip_own(s->watch, s->store);
    if (pthread_create(&s->lease_thread, NULL, lease_main, s) != 0)
        return al_err(err, "service", EAGAIN, "start the lease thread");
    if (s->multi_node && pthread_create(&s->watch_thread, NULL, watch_main, s) != 0) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->lease_thread, NULL);
        return al_err(err, "service", EAGAIN, "start the watcher thread");
    }
    s->cluster_running = true;
    return 0;
}

void al_cluster_stop(al_service *s) {
    if (!s->cluster_running)
        return;
    pthread_join(s->lease_thread, NULL);
    if (s->multi_node)
        pthread_join(s->watch_thread, NULL);
    al_store_watch_close(s->watch);
    s->watch = NULL;
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    if (!s->declared_dead)
        al_store_node_leave(s->store, s->node_id, now, &err);
    al_store_close(s->lease_store);
    s->lease_store = NULL;
    s->cluster_running = false;
}
