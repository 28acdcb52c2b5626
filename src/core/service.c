/*
 * The service's life: its start (the state directory, the store, the
 * cluster, recovery after a crash, the scheduler) and its stop. The parts
 * it starts are files of their own, each below this one: events.c and
 * log.c (what every part tells), holds.c, health.c, active.c (the runs
 * held here), queue.c, run_end.c (every end of a run), cluster.c,
 * scheduler.c and runner.c.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../drivers/install.h"
#include "activity.h"
#include "run_end.h"
#include "runner.h"
#include "service.h"
#include "service_int.h"
#include "session_box.h"
#include "skills.h"
#include "../image/image.h"
#include "../store/audit.h"
#include "checkpoint.h"
#include "../store/nodes.h"

/* -------------------------------------------------------------- recovery */

static void recover(al_service *s) {
    al_error err = { 0 };
    char now[40];
    al_store_now(now, sizeof now);
    al_store_run_ref *refs = NULL;
    size_t n = 0;
    /* Runs that were being provisioned or running on a node that is gone:
     * their helpers died with it (PDEATHSIG), and their boxes with those.
     * On SQLite there is one node, so every node before this one is gone;
     * on a shared store, those whose lease ran out (al_cluster_reap; the
     * lease thread reaps the rest when theirs does). */
    al_cluster_reap(s, !s->multi_node);
    char ids[256][40];
    int k;
    /* and active runs no node holds (recorded before nodes were); on
     * SQLite's one node, every run still active is one the last stopped
     * without ending (whatever node it names) */
    if (!s->multi_node) {
        unsigned act = AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING);
        if (al_store_run_refs(s->store, act, &refs, &n, &err) < 0)
            n = 0;
        for (size_t i = 0; i < n; i++)
            al_service_lose_run(s, refs[i].id, "the service stopped while this run was active");
        free(refs);
        refs = NULL;
    }
    for (int pass = 0; pass < 64 && (k = al_store_node_runs(s->store, NULL, ids, 256, &err)) > 0; pass++)
        for (int i = 0; i < k; i++)
            al_service_lose_run(s, ids[i], "the service stopped while this run was active");
    /* A run that ended in error is refunded after its end is written: one
     * a node died in between (or whose refund failed) is refunded now,
     * whatever other nodes do: the store refunds a charge once. */
    if (al_store_run_refs_unrefunded(s->store, &refs, &n, &err) < 0)
        n = 0;
    for (size_t i = 0; i < n; i++)
        if (al_store_run_refund(s->store, refs[i].id, now, &err) < 0)
            al_service_log(s, AL_LOG_ERROR, "credits.refund_failed", json_pack("{s:s, s:s}", "run_id", refs[i].id, "error", err.msg));
    free(refs);
    refs = NULL;
    /* What follows assumes no other node is at work on the store: a run
     * another node is creating has its files before its row, and waits
     * for an approval before its request is recorded. */
    if (s->multi_node && al_store_nodes_alive(s->store, now, &err) != 1) {
        s->driver->sweep();
        return;
    }
    /* A run waits for an approval only with its request recorded: one the
     * service died between the two (or failed to record) would wait for a
     * decision no one can make. It never ran, so nothing was charged. */
    if (al_store_run_refs_unrequested(s->store, &refs, &n, &err) < 0)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = refs[i].id;
        if (al_run_end_from(s, id, AL_RUN_BIT(AL_RUN_PENDING_APPROVAL), AL_RUN_ERROR, "lost",
                            "the service stopped before this run's approval was requested",
                            &(al_run_end){ .audit_lost = true }) > 0)
            al_service_log(s, AL_LOG_WARN, "run.lost",
                           json_pack("{s:s, s:s}", "run_id", id, "why", "no approval request"));
    }
    free(refs);
    /* Boxes' cgroups whose uid nobody holds any more are leftovers. */
    s->driver->sweep();
    /* Queued runs never started wait in the store for any node; those the
     * nodes that are gone had claimed were given back above. */
    /* A run's inline files are stored before its row is written: a crash
     * in between left files that belong to no run (and no quota). Nothing
     * runs yet, so whatever has no row is such a leftover. */
    DIR *d = opendir(s->runs_dir);
    struct dirent *de;
    json_int_t orphaned = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        al_run_state st;
        if (al_store_run_state(s->store, de->d_name, &st, &err) == -ENOENT) {
            char dir[PATH_MAX + 300];
            snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, de->d_name);
            al_rm_rf(dir);
            orphaned++;
        }
    }
    if (d)
        closedir(d);
    if (orphaned)
        al_service_log(s, AL_LOG_INFO, "run.inputs_orphaned", json_pack("{s:I}", "removed", orphaned));
    /* Inputs of runs that will not reach a box any more (ended while the
     * service was down, or left by a crash between a run's end and their
     * removal) are leftovers; only runs that wait keep theirs. */
    DIR *ld = opendir(s->runs_dir);
    struct dirent *le;
    while (ld && (le = readdir(ld))) {
        if (le->d_name[0] == '.')
            continue;
        al_run_state st;
        int r = al_store_run_state(s->store, le->d_name, &st, &err);
        if (r == -ENOENT || (r == 0 && st != AL_RUN_QUEUED && st != AL_RUN_PENDING_APPROVAL))
            al_service_drop_inputs(s, le->d_name);
    }
    if (ld)
        closedir(ld);
}

/* ------------------------------------------------------------------ main */

static int make_dir(const char *p, al_error *err) {
    if (mkdir(p, 0700) < 0 && errno != EEXIST)
        return al_err(err, "state", errno, "mkdir %s: %m", p);
    return 0;
}

/* On the embedded store a state directory has one live service: two
 * would each take the other for a node whose lease ran out and fence it.
 * The lock is the kernel's (flock), so a killed service leaves none; the
 * file names its holder for the refusal. */
static int hold_state_dir(al_service *s, al_error *err) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/serve.lock", s->cfg.state_dir);
    _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return al_err(err, "state", errno, "open %s: %m", path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno != EWOULDBLOCK)
            return al_err(err, "state", errno, "lock %s: %m", path);
        char pid[24] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? strcspn(pid, "\n") : 0] = '\0';
        return al_err(err, "state", EBUSY,
                      "the state directory %s is already served by pid %s: one state directory has one live "
                      "service (stop that one, or give this one its own --state)",
                      s->cfg.state_dir, pid[0] ? pid : "(unknown)");
    }
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        return al_err(err, "state", errno, "write %s: %m", path);
    s->state_lock_fd = TAKE_FD(fd);
    return 0;
}

int al_service_open(const al_service_config *cfg, al_service **ret, al_error *err) {
    *ret = NULL;
    al_service *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    s->state_lock_fd = -1;
    int r = 0;
    s->driver = al_driver_by_name(cfg->driver);
    if (!s->driver) {
        free(s);
        return al_err(err, "config", EINVAL, "unknown driver %s", cfg->driver);
    }
    /* the install box's network: the index and the registry among the
     * registries, or no service (a misconfiguration said now, not at the
     * first install) */
    if (al_install_network(cfg->package_registries, cfg->package_index_python, cfg->package_registry_node,
                           s->pkg_network, sizeof s->pkg_network, err) < 0) {
        free(s);
        return -EINVAL;
    }
    bool e2b = s->driver == &al_driver_e2b;
    if ((s->driver == &al_driver_e2b || s->driver == &al_driver_daytona) &&
        al_driver_remote_configure(s->driver->name,
                                   e2b ? (cfg->e2b_api_url[0] ? cfg->e2b_api_url : "https://api.e2b.app")
                                       : (cfg->daytona_api_url[0] ? cfg->daytona_api_url : "https://app.daytona.io/api"),
                                   e2b ? cfg->e2b_sandbox_url : NULL, e2b ? cfg->e2b_api_key_file : cfg->daytona_api_key_file,
                                   e2b ? cfg->e2b_template : cfg->daytona_target, cfg->state_dir, err) < 0) {
        free(s);
        return -EINVAL;
    }
    if (s->driver == &al_driver_kubernetes) {
        al_driver_kube_config kc = { .kubeconfig = cfg->kubeconfig, .namespace_ = cfg->kubernetes_namespace,
                                     .registry = cfg->kubernetes_registry,
                                     .runtime_class = cfg->kubernetes_runtime_class,
                                     .seccomp = cfg->kubernetes_seccomp, .pool = cfg->kubernetes_pool,
                                     .schedule_timeout_s = cfg->kubernetes_schedule_timeout_s,
                                     .smoke = cfg->kubernetes_smoke };
        char images[PATH_MAX];
        al_service_images_dir(cfg, images, sizeof images);
        kc.images_dir = images;
        if (al_driver_kube_configure(&kc, cfg->state_dir, err) < 0) {
            free(s);
            return -EINVAL;
        }
    }
    if ((s->driver == &al_driver_docker &&
         al_driver_docker_configure(cfg->docker_socket, cfg->engine_runtime, cfg->docker_pool, err) < 0) ||
        (s->driver == &al_driver_native && al_driver_native_configure(cfg->max_concurrent, cfg->warm_pool, (uint64_t)cfg->warm_pool_memory_mb << 20,
                                                                  cfg->warm_preload, cfg->warm_fork, err) < 0)) {
        free(s);
        return -EINVAL;
    }
    /* each run's helper is the lean `airlock` beside us: it loads no HTTP,
     * TLS or SQLite library, so a box starts sooner */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        free(s);
        return al_err(err, "service", errno, "readlink /proc/self/exe: %m");
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    snprintf(s->self_exe, sizeof s->self_exe, "%.*s/airlock", slash ? (int)(slash - self) : 1, slash ? self : ".");
    if (access(s->self_exe, X_OK) != 0)
        snprintf(s->self_exe, sizeof s->self_exe, "%s", self); /* airlock-server has helper too */
    snprintf(s->blobs_dir, sizeof s->blobs_dir, "%s/blobs", cfg->state_dir);
    snprintf(s->runs_dir, sizeof s->runs_dir, "%s/runs", cfg->state_dir);
    char db[PATH_MAX + 1024];
    if ((r = make_dir(cfg->state_dir, err)) < 0 || (r = al_store_locate(cfg->store, cfg->state_dir, db, sizeof db, err)) < 0 ||
        (al_store_is_embedded(db) && (r = hold_state_dir(s, err)) < 0) || (r = make_dir(s->blobs_dir, err)) < 0 ||
        (r = make_dir(s->runs_dir, err)) < 0 || (r = al_store_open(db, &s->store, err)) < 0) {
        if (s->state_lock_fd >= 0)
            close(s->state_lock_fd);
        free(s);
        return r;
    }
    snprintf(s->store_target, sizeof s->store_target, "%s", db);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->sched_cond, NULL);
    pthread_cond_init(&s->events_cond, NULL);
    pthread_mutex_init(&s->health_mu, NULL);
    pthread_mutex_init(&s->session_mu, NULL);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_init(&s->ev_buckets[i].cond, NULL);

    /* From here threads start (the cluster's, the scheduler): a failure
     * leaves them to the process's exit, which follows (serve.c). */
    char skills[PATH_MAX + 32];
    if (cfg->skills_dir[0]) {
        snprintf(skills, sizeof skills, "%s", cfg->skills_dir);
    } else {
        /* the repository's skills/ beside a build tree (build/airlock), else
         * the installed copy */
        snprintf(skills, sizeof skills, "%.*s/../skills", slash ? (int)(slash - self) : 1, slash ? self : ".");
        if (access(skills, F_OK) != 0)
            snprintf(skills, sizeof skills, "%s", AIRLOCK_SKILLS_DIR);
    }
    if ((r = al_skills_init(s, skills, err)) < 0)
        return r;
    /* an install that copied the binaries alone has no skills: said now,
     * with where it looked, rather than found out by an agent's 404 */
    if (json_array_size(s->skills_bundled) == 0)
        al_service_log(s, AL_LOG_WARN, "skills.none", json_pack("{s:s, s:s}", "looked", skills, "why",
                                                   access(skills, F_OK) == 0 ? "no skill.json in any of its directories"
                                                                             : "the directory does not exist (skills_dir)"));
    char images[PATH_MAX];
    al_service_images_dir(&s->cfg, images, sizeof images);
    json_t *il = al_image_list(images);
    if (json_array_size(il) == 0)
        al_service_log(s, AL_LOG_WARN, "images.none", json_pack("{s:s, s:s}", "looked", images, "why",
                                                   "runs may name no image but host (images setting; airlock image "
                                                   "build)"));
    json_decref(il);
    /* a node among those on the store, then what the gone ones left */
    if ((r = al_cluster_start(s, err)) < 0)
        return r;
    recover(s);
    al_error verr = { 0 };
    int bad = al_blobs_verify_once(s, &verr);
    if (bad < 0)
        al_service_log(s, AL_LOG_ERROR, "blobs.verify_failed", json_pack("{s:s}", "error", verr.msg));
    else if (bad > 0)
        al_service_log(s, AL_LOG_WARN, "blobs.removed", json_pack("{s:i, s:s}", "count", bad, "why",
                                                     "content other than its sha256 (stored before verification)"));
    /* bundles left by a crash between a delete and its collection, and
     * those of the runs recover() just ended */
    al_skills_gc(s, NULL, err);
    if ((r = al_checkpointer_start(s, err)) < 0)
        return r;
    if (pthread_create(&s->scheduler, NULL, al_service_scheduler_main, s) != 0)
        return al_err(err, "service", EAGAIN, "start the scheduler");
    /* the first /healthz is answered from a probe made before we listen */
    free(al_service_health(s));
    *ret = s;
    return 0;
}

void al_service_drain(al_service *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    pthread_mutex_unlock(&s->mu);
}


void al_service_stop(al_service *s) {
    /* Stop taking runs, end the active ones (their boxes are killed and
     * cleaned up; the runner ends each as airlock's own failure), wait for
     * their runners, keep queued runs queued for the next start. */
    pthread_mutex_lock(&s->mu);
    s->draining = s->stopping = true;
    for (active_run *a = s->active; a; a = a->next) {
        a->stop_requested = true;
        if (a->dr.pid > 0)
            s->driver->cancel(&a->dr);
    }
    pthread_cond_broadcast(&s->sched_cond);
    pthread_cond_broadcast(&s->events_cond);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_broadcast(&s->ev_buckets[i].cond);
    while (s->active_count > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->sched_cond, &s->mu, &ts);
        pthread_cond_broadcast(&s->events_cond);
        for (int i = 0; i < AL_EVENT_BUCKETS; i++)
            pthread_cond_broadcast(&s->ev_buckets[i].cond);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->scheduler, NULL);
    /* no call is left: the session boxes end, their files flowed back */
    al_session_box_stop_all(s);
    /* no run is left: what the driver keeps for the next ones goes */
    if (s->driver->stop)
        s->driver->stop();
}

int al_service_close(al_service *s, al_error *err) {
    if (!s)
        return 0;
    /* the heads as the last runs left them, signed while the store is open */
    al_checkpointer_stop(s);
    /* leaves the store: what it claimed and did not start waits for others */
    al_cluster_stop(s);
    bool fenced = s->declared_dead;
    al_store_close(s->store);
    /* every thread is gone: what is left is ours alone to free (so that a
     * LeakSanitizer build reports only real leaks) */
    al_skills_free(s);
    free(s->health_text);
    al_service_holds_free(s);
    al_activity_hub_free(s->activity);
    pthread_mutex_destroy(&s->health_mu);
    pthread_cond_destroy(&s->sched_cond);
    pthread_cond_destroy(&s->events_cond);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_destroy(&s->ev_buckets[i].cond);
    pthread_mutex_destroy(&s->mu);
    if (s->state_lock_fd >= 0)
        close(s->state_lock_fd);
    free(s);
    if (fenced)
        return al_err(err, "service", ESTALE, "this service stopped: another service on the same store declared it "
                                              "dead, or it could not renew its lease (the log's node.fenced says "
                                              "which); its runs were ended as lost. Start it again: it joins as a new "
                                              "node");
    return 0;
}
