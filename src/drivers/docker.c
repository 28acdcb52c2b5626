/* The docker driver: each run is `airlock-server helper` (the helper of
 * the binary that links the Docker box), whose job names the daemon and the
 * runtime. The helper runs the script in a container the pool made ahead
 * of need (docker_pool.c), which the pool removes after the run, or else
 * makes, runs and removes one of its own. The service's own talk with
 * Docker is the pool's (make, remove): HTTP only, never a fork. */
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

#include "../docker/docker.h"
#include "../box/uidpool.h"
#include "docker_pool.h"
#include "driver.h"
#include "helper_start.h"

static struct {
    char socket[108];             /* "" for DOCKER_HOST / the default */
    al_docker_runtime runtime;
} conf;

char *al_driver_seccomp_profile(al_error *err) { return al_docker_seccomp_profile(err); }

int al_driver_docker_configure(const char *socket, const char *runtime, int pool, al_error *err) {
    al_docker_runtime rt = AL_DOCKER_RUNC;
    if (runtime && *runtime && al_docker_runtime_from_name(runtime, &rt) < 0)
        return al_err(err, "config", EINVAL, "runtime = %s: want runc or runsc", runtime);
    if (socket && strlen(socket) >= sizeof conf.socket)
        return al_err(err, "config", ENAMETOOLONG, "docker_socket is too long");
    snprintf(conf.socket, sizeof conf.socket, "%s", socket ? socket : "");
    conf.runtime = rt;
    al_docker_pool_configure(conf.socket[0] ? conf.socket : NULL, rt, pool);
    return 0;
}

static const char *sock(void) { return conf.socket[0] ? conf.socket : NULL; }

static json_t *docker_capabilities(void) {
    json_t *doc = al_docker_capabilities(sock(), conf.runtime);
    if (doc)
        json_object_set_new(doc, "pool", json_pack("{s:s, s:s, s:o}", "level", "applied", "detail",
                                                   "containers made ahead of need, each handed to one run and "
                                                   "removed after it; a run that finds none makes its own",
                                                   "state", al_docker_pool_json()));
    return doc;
}

/* A daemon found fit is not asked again for this long: GET /info walks
 * the daemon's containers and images, and every run's admission asks. A
 * daemon found unfit is asked again on the next run, so it is taken back
 * as soon as it is fixed. */
#define PROBE_TTL_MS 5000
static struct {
    pthread_mutex_t mu;
    uint64_t ok_at_ms;
} probe_cache = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int docker_probe(al_error *err) {
    pthread_mutex_lock(&probe_cache.mu);
    bool fresh = probe_cache.ok_at_ms && al_now_ms() - probe_cache.ok_at_ms < PROBE_TTL_MS;
    pthread_mutex_unlock(&probe_cache.mu);
    if (fresh) {
        memset(err, 0, sizeof *err);
        return 0;
    }
    int r = al_docker_probe(sock(), conf.runtime, err);
    pthread_mutex_lock(&probe_cache.mu);
    probe_cache.ok_at_ms = r < 0 ? 0 : al_now_ms();
    pthread_mutex_unlock(&probe_cache.mu);
    if (r < 0) {
        al_error e = *err;
        memset(err, 0, sizeof *err);
        return al_err(err, "driver", -r, "docker driver: %s", e.msg);
    }
    memset(err, 0, sizeof *err);
    return 0;
}

static int docker_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
    /* a sandbox's run (WORK_IN, WORK_OUT) runs as any other: its home is
     * staged into the container's /work when the run starts and /work
     * collected back after it (src/docker/tar_io.c, work_io.c), so a
     * container the pool made ahead of need serves it as well as one made
     * now (the pool's holds no file of anyone's until its run stages) */
    /* the run's job, to run in a container: a shallow copy, which owns
     * nothing of its own */
    al_job j = *job;
    j.driver = AL_JOB_DOCKER;
    j.docker_runtime = (char *)al_docker_runtime_name(conf.runtime);
    j.docker_socket = conf.socket[0] ? conf.socket : NULL;
    /* a container made for runs like this one, if the pool has one (a
     * skill's run gets none: its container binds the skill at /skill) */
    al_docker_held held;
    bool pooled = !j.skill_dir && al_docker_pool_take(j.image_dir, j.image_digest, &j.limits, &held);
    /* the uids' locks go with the job, as the helper's fds 3 and 4: a lock
     * is the open file's, so they stay held until the helper ends too,
     * though this process be killed first (a start after it must not take
     * those uids, nor sweep the container, while the helper still uses it) */
    if (pooled) {
        j.docker_box = (al_job_held){ .set = true, .hold_until_s = held.hold_until_s,
                                      .uids = { true, held.holder, held.uid, { 3, 4 } } };
        snprintf(j.docker_box.id, sizeof j.docker_box.id, "%s", held.id);
        snprintf(j.docker_box.image_id, sizeof j.docker_box.image_id, "%s", held.image_id);
    }
    /* a cold run's two uids are this process's too, passed the same way,
     * and let go only once its container is gone (al_docker_pool_keep_uids):
     * a helper killed outright leaves its container to its keeper (the
     * helper's, src/docker/keeper.c), whose uids must not go to another box
     * meanwhile */
    al_docker_held own = { .holder_lock = -1, .uid_lock = -1 };
    if (!pooled) {
        int r = al_uid_acquire(&own.holder, &own.holder_lock, err);
        if (r == 0 && (r = al_uid_acquire(&own.uid, &own.uid_lock, err)) < 0)
            close(own.holder_lock);
        if (r < 0)
            return r;
        snprintf(own.id, sizeof own.id, "airlock-box-%u", (unsigned)own.uid);
        j.docker_uids = (al_job_uids){ true, own.holder, own.uid, { 3, 4 } };
    }
    al_docker_held *kept = pooled ? &held : &own;
    int locks[2] = { kept->holder_lock, kept->uid_lock };
    /* the helper of airlock-server, beside SELF_EXE */
    char copy[PATH_MAX], exe[PATH_MAX + 32];
    snprintf(copy, sizeof copy, "%s", self_exe);
    snprintf(exe, sizeof exe, "%s/airlock-server", dirname(copy));
    int r = al_driver_helper_start(exe, &j, locks, 2, ret, err);
    if (r == 0 && pooled) {
        /* removed by name after the run: the container it was handed, or
         * the one made of its uids instead if that was unfit */
        snprintf(held.id, sizeof held.id, "airlock-box-%u", (unsigned)held.uid);
        al_docker_pool_lend(ret->pid, &held);
    } else if (r == 0)
        al_docker_pool_keep_uids(ret->pid, &own);
    else
        al_docker_pool_give_back(kept);
    return r;
}

static int docker_wait(al_driver_run *r) {
    /* the helper's end, seen before it is reaped: until then its pid is
     * its own, so the pool's lookup by pid cannot meet a new process */
    pid_t pid = r->pid;
    siginfo_t si;
    while (pid > 0 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
        ;
    /* its container, if the pool's, is removed now: nothing of the run is
     * left in it (the helper killed the script's processes before it
     * collected /out, and is gone) */
    al_docker_pool_run_ended(pid);
    return al_driver_helper_wait(r);
}

static void docker_sweep(void) {
    al_box_sweep_stale();
    al_docker_sweep(sock());
}

/* a runc container has the box's network namespace and the proxy's
 * listener in it; gVisor keeps offline only */
static bool docker_net_mode_held(al_net_mode mode, const char **ret_why) {
    if (conf.runtime != AL_DOCKER_RUNSC || mode == AL_NET_OFFLINE)
        return true;
    *ret_why = "refused under gVisor here (runsc --network=none)";
    return false;
}

const al_driver_ops al_driver_docker = {
    .name = "docker",
    .capabilities = docker_capabilities,
    .probe = docker_probe,
    .start = docker_start,
    .cancel = al_driver_helper_cancel,
    .wait = docker_wait,
    .sweep = docker_sweep,
    .stop = al_docker_pool_stop,
    .pool = al_docker_pool_json,
    .needs_image = true,
    .net_mode_held = docker_net_mode_held,
};
