/* The Docker box's run (al_docker_run, see docker.h): a container of its
 * own, or one held ahead of need (held.c), its files staged and collected
 * (tar_io.c), the script as an exec supervised to its end (container.c),
 * the container's keeper (keeper.c), how it ended. What they share:
 * container_int.h.
 */
#include "container_int.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "../box/cgroup.h"
#include "../box/collect.h"
#include "../box/uidpool.h"

/* ---- the network listener, in the container's network namespace ---- */

static int listener(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    if (b->o->runtime == AL_DOCKER_RUNSC)
        return al_err(err, "network", ENOTSUP,
                      "network policies other than offline are not available under gVisor here (runsc "
                      "--network=none: its own network stack, which no listener outside can reach)");
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/net", (int)b->init_pid);
    _cleanup_close_ int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    _cleanup_close_ int ns = open(p, O_RDONLY | O_CLOEXEC);
    if (self < 0 || ns < 0)
        return al_err(err, "network", errno, "open the container's network namespace: %m");
    if (setns(ns, CLONE_NEWNET) < 0)
        return al_err(err, "network", errno, "enter the container's network namespace: %m");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int e = errno;
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(cfg->listen_port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    /* back to ours before anything else: the proxy connects from here */
    if (setns(self, CLONE_NEWNET) < 0) {
        if (fd >= 0)
            close(fd);
        return al_err(err, "network", errno, "return to our network namespace: %m");
    }
    if (fd < 0)
        return al_err(err, "network", e, "listen on 127.0.0.1:%u in the container: %s", cfg->listen_port,
                      strerror(e));
    int r = cfg->on_listener ? cfg->on_listener(fd, b->uid, b->uid, cfg->userdata, err)
                             : al_err(err, "listener", EINVAL, "a listener without a server");
    close(fd);
    return r;
}

static void read_stats(dbox *b) {
    uint64_t v = 0;
    if (b->cg_cpu[0] && al_cgroup_read_u64(b->cg_cpu, "cpuacct.usage", &v) == 0)
        b->res->cpu_ms = v / 1000000;
    if (b->cg_mem[0] && al_cgroup_read_u64(b->cg_mem, "memory.max_usage_in_bytes", &v) == 0)
        b->res->peak_memory_bytes = v;
}

/* Did the script's processes meet the container's pids cap? Under gVisor
 * the host cgroup holds the sandbox's own processes (one per address space
 * on the ptrace platform) and the cgroup may be gone with a sandbox that
 * died at the cap, so what the run last saw of it counts too. */
static bool pids_cap_hit(dbox *b) {
    uint64_t hits = b->pids_hits_seen;
    if (b->cg_pids[0])
        al_cgroup_read_key(b->cg_pids, "pids.events", "max", &hits);
    return hits > 0 || b->pids_hits_seen > 0;
}

static bool oom_killed(dbox *b) {
    uint64_t v = 0;
    if (b->cg_mem[0] && al_cgroup_read_key(b->cg_mem, "memory.oom_control", "oom_kill", &v) == 0 && v > 0)
        return true;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    json_t *ins = NULL;
    bool oom = false;
    if (al_docker_call_ok(b, "GET", path, NULL, &ins, &e) >= 0)
        oom = json_is_true(json_object_get(json_object_get(ins, "State"), "OOMKilled"));
    json_decref(ins);
    return oom;
}

/* An exec's exit CODE as the script's end: Docker says a process killed
 * by signal N exited 128+N (and so does runsc, whose exec waits for the
 * script inside gVisor) */
static void code_as_end(int code, al_box_result *res) {
    bool sig = code > 128 && code <= 128 + 64;
    res->exit_code = sig ? -1 : code;
    res->signal = sig ? code - 128 : 0;
}


/* How the script's exec process ended, as the kernel keeps it for any
 * holder of its pidfd once it is reaped (PIDFD_GET_INFO with
 * PIDFD_INFO_EXIT, Linux 6.15; not in Debian 12's headers, so spelled
 * here as the kernel's version-0 struct): runc's exec is that process, and
 * Docker reports its end only as an exit code, 128+N for signal N. True
 * with its wait status in *STATUS when the kernel says, and it agrees with
 * the daemon's CODE; false on an older kernel, which leaves Docker's. */
typedef struct pidfd_exit_info {
    uint64_t mask, cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code;
} pidfd_exit_info;
#define AL_PIDFD_GET_INFO _IOWR(0xFF, 11, pidfd_exit_info)
#define AL_PIDFD_INFO_EXIT (1ULL << 3)

static bool exit_status(int pidfd, int code, int *status) {
    pidfd_exit_info i = { .mask = AL_PIDFD_INFO_EXIT };
    if (pidfd < 0 || ioctl(pidfd, AL_PIDFD_GET_INFO, &i) < 0 || !(i.mask & AL_PIDFD_INFO_EXIT))
        return false;
    int st = i.exit_code;
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == code) && !(WIFSIGNALED(st) && 128 + WTERMSIG(st) == code))
        return false;
    *status = st;
    return true;
}

/* Under runc: the script's processes (this host's) killed until none is
 * left, within the kill's grace; an error when their cgroup cannot be
 * read (nothing then says none is left) or some would not die. */
static int kill_until_none(dbox *b, al_error *err) {
    uint64_t until = al_now_ms() + KILL_GRACE_MS;
    int alive;
    while ((alive = al_docker_kill_script_procs(b)) != 0) {
        if (alive < 0)
            return al_err(err, "kill", -alive, "cannot list the container's processes in %s", b->cg_pids);
        if (al_now_ms() > until)
            return al_err(err, "kill", ETIMEDOUT, "processes of the script are still alive in %s", b->cg_pids);
        struct timespec ts = { 0, 5 * 1000000L };
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The daemon did not answer in time (within the kill's grace, once the
 * script's main process had ended or was being stopped): the run ends
 * now, asking it nothing more but the container's removal (as bounded).
 * Under runc the script's processes are this host's, killed from here
 * until none is left: a script airlock stopped keeps its own reason, its
 * /out unread (the daemon says nothing of how it ended). Under gVisor only
 * the daemon reaches them: the run fails, saying so. */
static int unanswered(dbox *b, al_reason reason, al_error *err) {
    al_box_result *res = b->res;
    if (b->o->runtime == AL_DOCKER_RUNSC)
        return al_err(err, "docker", ETIMEDOUT, "the Docker daemon did not answer in time: the script's processes "
                                                "under gVisor could not be killed (the container ends at its hold time)");
    int r = kill_until_none(b, err);
    if (r < 0)
        return r;
    if (reason == AL_REASON_EXITED)
        return al_err(err, "docker", ETIMEDOUT, "the Docker daemon did not answer in time");
    res->exit_code = -1;
    res->signal = SIGKILL;
    res->reason = reason;
    return al_collect_add_skip(res, ".", "the Docker daemon did not answer within the kill's grace: /out could "
                                         "not be read");
}

/* B's container: the image loaded, a container held ahead of need taken
 * if it is still fit (else one of its own made, of its owner's uids or
 * its own), its keeper started, its listener, its /work staged. */
static int make_box(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    if (!cfg->runtime || !cfg->runtime->digest || !b->o->image_dir)
        return al_err(err, "docker", EINVAL, "the docker driver runs on an image (--image default), not the host's /usr");
    const char *digest = cfg->runtime->digest;
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    char sock[108];
    int r = al_engine_socket_path(b->o->socket, sock, sizeof sock, err);
    if (r < 0 || (r = al_engine_open(&b->e, sock, err)) < 0)
        return r;
    b->engine_open = true;
    /* a container made ahead of need, when it is still fit for this run;
     * else (it died idle, say) one of its own, as if there were no pool */
    uid_t own_holder = b->o->holder, own_uid = b->o->uid;
    if (b->o->held && (b->o->skill_dir || al_docker_use_held(b, err) < 0)) {
        memset(err, 0, sizeof *err);
        b->id[0] = '\0';
        b->holder = b->uid = 0;
        res->pooled = false;
        /* its uids, which the owner holds until the container named for
         * them is gone: the one made now takes that name (the unfit one
         * of it is removed, al_docker_create) */
        own_holder = b->o->held->holder;
        own_uid = b->o->held->uid;
    }
    if (!res->pooled) {
        if ((r = al_docker_image(&b->e, b->o->image_dir, digest, res->engine_image, err)) < 0)
            return r;
        if (own_holder && own_uid) {
            /* the owner's, locked for as long as its container may be */
            b->holder = own_holder;
            b->uid = own_uid;
        } else if ((r = al_uid_acquire(&b->holder, &b->holder_lock, err)) < 0 ||
                   (r = al_uid_acquire(&b->uid, &b->uid_lock, err)) < 0) {
            return r;
        }
    }
    res->controls.host_uid = b->uid;
    res->controls.host_uid_unique = true;
    /* gVisor's stage: /work's inputs and the image's /tmp seed, packed */
    if (b->o->runtime == AL_DOCKER_RUNSC &&
        (r = al_docker_scratch_mount(b, cfg->limits.stage_bytes + cfg->limits.tmpfs_bytes + (4u << 20), err)) < 0)
        return r;
    b->hold_s = cfg->limits.wall_ms / 1000 + HOLD_MARGIN_S;
    if (!res->pooled &&
        ((r = al_docker_create(b, res->engine_image, err)) < 0 || (r = al_docker_start_and_inspect(b, err)) < 0))
        return r;
    /* before anything of the script's runs in it: its end and its uids'
     * locks no longer depend on this process's life */
    if ((r = al_docker_keeper_start(b, err)) < 0)
        return r;
    if (cfg->listen_port && (r = listener(b, err)) < 0)
        return r;
    bool direct = b->o->runtime == AL_DOCKER_RUNC;
    if (direct && (r = al_docker_open_root(b, err)) < 0)
        return r;
    if ((r = direct ? al_docker_stage_into(b, al_docker_open_scratch, err) : al_docker_stage(b, err)) < 0)
        return r;
    return 0;
}

/* The script's run of exec ID (REASON: why it was stopped, if it was)
 * ended with its container whole: killed by airlock, or dead of its caps
 * (gVisor's sandbox): how it ended, with /out lost. */
static int end_whole(dbox *b, const char *id, al_reason reason, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    /* killed whole by airlock (the daemon may show it running a
     * moment longer), or it died whole (gVisor's sandbox over its
     * memory cap is killed by this host's kernel): /out went with it */
    read_stats(b);
    /* the script's own end, when the daemon still knows it */
    al_error xe = { 0 };
    int xc = al_docker_exec_exit(b, id, &xe);
    if (xc >= 0 && xc <= 128 + 64) {
        code_as_end(xc, res);
    } else {
        res->exit_code = -1;
        res->signal = SIGKILL;
    }
    if (res->peak_memory_bytes < b->mem_peak_seen)
        res->peak_memory_bytes = b->mem_peak_seen;
    /* its cgroup may be gone with it: what it last showed says why */
    if (oom_killed(b) || b->oom_seen > 0 || b->mem_peak_seen + MEM_NEAR >= cfg->limits.memory_bytes) {
        res->reason = AL_REASON_MEMORY;
        return al_collect_add_skip(res, ".", "the box was killed whole (out of memory): /out could not be read");
    }
    if (pids_cap_hit(b) || b->pids_current_seen + RUNSC_PIDS_NEAR >= cfg->limits.pids + RUNSC_PIDS_OVERHEAD) {
        /* gVisor's ptrace platform takes a host process per address
         * space: at the cap, its sandbox cannot go on */
        res->reason = AL_REASON_PIDS;
        return al_collect_add_skip(res, ".", "the box was killed whole (process limit): /out could not be read");
    }
    if (reason != AL_REASON_EXITED || b->killed_whole) {
        /* stopped by airlock, whole, when its processes would not die:
         * the run's own reason stands (never airlock's error) */
        res->reason = reason;
        return al_collect_add_skip(res, ".", "processes the script left would not die: the box was killed "
                                             "whole and /out could not be read");
    }
    return al_err(err, "docker", EIO, "the container died while the script ran");
}

static int run(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    int r = make_box(b, err);
    if (r < 0)
        return r;
    bool direct = b->o->runtime == AL_DOCKER_RUNC;
    char id[80];
    /* stdin only when the run has one: without, the exec's is /dev/null */
    if ((r = al_docker_exec_create(b, cfg->argv, cfg->envp, "/work", cfg->stdin_fd >= 0, id, err)) < 0)
        return r;
    sink s = { .cfg = cfg, .cap = cfg->limits.output_bytes };
    for (int i = 0; i < 2; i++)
        if (!(s.buf[i] = malloc(s.cap + 1))) {
            free(s.buf[0]);
            return -ENOMEM;
        }
    if (cfg->on_started)
        cfg->on_started(cfg->userdata);
    uint64_t start = al_now_ms();
    al_reason reason = AL_REASON_EXITED;
    /* this process, stopped or stuck, does not hold the box past it */
    al_uid_keeper_arm(b->keeper_fd, start + cfg->limits.wall_ms);
    r = al_docker_exec_pump(b, id, cfg->stdin_fd, al_docker_on_script_data, &s, start + cfg->limits.wall_ms,
                              cfg->cancel_fd, &reason, err);
    res->wall_ms = al_now_ms() - start;
    for (int i = 0; i < 2; i++) {
        s.buf[i][s.len[i]] = '\0';
        res->out[i] = s.buf[i];
        res->out_len[i] = s.len[i];
        res->out_total[i] = s.total[i];
        res->out_truncated[i] = s.truncated[i];
    }
    if (r < 0)
        return r;
    /* the daemon's answers on how the script ended are still bounded by
     * its last kill's grace (until_ms), or by a grace from now where the
     * stream ended before the main process was seen to */
    if (!b->e.until_ms)
        b->e.until_ms = al_now_ms() + KILL_GRACE_MS;
    bool whole = !b->e.stuck && (b->killed_whole || !al_docker_container_running(b));
    if (b->e.stuck)
        return unanswered(b, reason, err);
    if (whole)
        return end_whole(b, id, reason, err);
    int code = al_docker_exec_exit(b, id, err);
    if (b->e.stuck)
        return unanswered(b, reason, err);
    int status;
    if (b->o->runtime == AL_DOCKER_RUNC && exit_status(b->main_fd, code, &status)) {
        /* the kernel's word: exit(137) and a SIGKILL are told apart */
        res->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        res->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    } else {
        code_as_end(code, res);
    }
    res->reason = reason;
    /* nothing of the script may still run when /out is read */
    if (b->o->runtime == AL_DOCKER_RUNC) {
        if ((r = kill_until_none(b, err)) < 0)
            return r;
    } else if (!b->inside_clean) {
        /* (a kill from inside that found none of the script's left is
         * final: only the script's processes run as its uid) */
        b->e.until_ms = al_now_ms() + KILL_GRACE_MS;
        if (al_docker_kill_inside(b) != 0) {
            if (b->e.stuck)
                return unanswered(b, reason, err);
            /* something the script left would not die: /out is not read.
             * A sandbox that hit its process cap dies so, though the
             * daemon may still show it running for a moment: that is the
             * run's pids limit */
            al_docker_kill_container(b);
            read_stats(b);
            if (res->reason == AL_REASON_EXITED && pids_cap_hit(b))
                res->reason = AL_REASON_PIDS;
            return al_collect_add_skip(res, ".", "processes the script left would not die: the box was killed "
                                                 "whole and /out could not be read");
        }
    }
    /* the daemon answered: /out has its usual time, and the keeper no
     * longer ends the box for the script's deadline */
    al_uid_keeper_disarm(b->keeper_fd);
    b->e.until_ms = 0;
    read_stats(b);
    if (res->reason == AL_REASON_EXITED && oom_killed(b))
        res->reason = AL_REASON_MEMORY;
    else if (res->reason == AL_REASON_EXITED && pids_cap_hit(b))
        res->reason = AL_REASON_PIDS;
    /* hashed, and copied when the caller gave a directory for them */
    if ((r = direct ? al_docker_collect_direct(b, err) : al_docker_collect(b, err)) < 0)
        return r;
    /* a sandbox's run: its /work too, after /out (as the native box) */
    return al_docker_collect_work(b, err);
}

/* A held container's owner removes it after the run, unless it is gone:
 * killed, it left the container's uids' locks to this process (passed to
 * it), and nothing would remove it until the owner's next start sweeps
 * (its holder sleeps for minutes). */
static bool owner_gone(int fd) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

int al_docker_run(const al_docker_opts *o, const al_box_config *cfg, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    res->reason = AL_REASON_ERROR;
    snprintf(res->driver, sizeof res->driver, "docker");
    snprintf(res->engine_runtime, sizeof res->engine_runtime, "%s", al_docker_runtime_name(o->runtime));
    al_docker_controls(o->runtime, &res->controls);
    dbox b = { .o = o, .cfg = cfg, .res = res, .holder_lock = -1, .uid_lock = -1, .rootfd = -1, .init_fd = -1, .main_fd = -1,
               .keeper_fd = -1 };
    int r = run(&b, &res->error);
    if (b.rootfd >= 0)
        close(b.rootfd);
    if (b.init_fd >= 0)
        close(b.init_fd);
    if (b.main_fd >= 0)
        close(b.main_fd);
    if (res->pooled && owner_gone(o->owner_fd))
        b.own = true;
    /* a stuck daemon is handed the removal, not waited on; one that
     * answers is given the engine's time (a forced removal waits for the
     * container's stop as a kill does) */
    b.e.until_ms = b.e.stuck ? al_now_ms() : 0;
    al_docker_remove_container(&b);
    al_docker_keeper_done(&b);
    al_docker_scratch_unmount(&b);
    if (b.engine_open)
        al_engine_close(&b.e);
    if (b.uid_lock >= 0)
        close(b.uid_lock);
    if (b.holder_lock >= 0)
        close(b.holder_lock);
    if (r < 0)
        res->reason = AL_REASON_ERROR;
    return r;
}

