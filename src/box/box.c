/*
 * The parent side of a box: prepare (uid, filter, cgroup), clone, write the
 * maps, stage inputs, supervise (output pumps with caps, wall clock), kill
 * every process of the box, and only then collect /out.
 */
#include "box.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "child.h"
#include "collect.h"
#include "fork_so.h"
#include "mount.h"
#include "proto.h"
#include "setup.h"
#include "stage.h"
#include "uidpool.h"

/* how long the setup steps may take before we call the box stuck */
#define SETUP_TIMEOUT_MS 10000
/* after a kill, how long until the box must be gone */
#define KILL_GRACE_MS 5000
/* A box that has hit pids.max and stays full is a fork bomb: bash, for
 * one, retries a failed fork forever. Checked every tick; this many ticks
 * in a row at the limit, after a refused fork, and the box is killed with
 * reason "pids". */
#define PIDS_TICK_MS 250
#define PIDS_STREAK 4

static const char *const reason_names[_AL_REASON_MAX] = {
    "exited", "timeout", "memory", "pids", "output_limit", "error", "canceled", "install_failed",
};
const char *al_reason_name(al_reason r) { return r < _AL_REASON_MAX ? reason_names[r] : "error"; }

bool al_box_bind_path_ok(const char *path) {
    /* what the box makes itself, and the runtimes' top-level trees */
    static const char *const taken[] = { "usr", "etc", "bin", "lib", "lib32", "lib64", "libx32", "sbin", "dev",
                                         "proc", "work", "out", "tmp", "skill" };
    size_t n = path ? strlen(path) : 0;
    if (n < 2 || n > 128 || path[0] != '/' || path[n - 1] == '/' || strstr(path, "//"))
        return false;
    if (strspn(path, "/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
        return false;
    if (strstr(path, "/./") || strstr(path, "/../") || strcmp(path + n - 2, "/.") == 0 ||
        (n >= 3 && strcmp(path + n - 3, "/..") == 0))
        return false;
    size_t first = strcspn(path + 1, "/");
    for (size_t i = 0; i < ELEMENTSOF(taken); i++)
        if (strlen(taken[i]) == first && strncmp(path + 1, taken[i], first) == 0)
            return false;
    return true;
}

/* CFG's binds and extra environment: a cold box's alone, within their caps */
static int check_extras(const al_box_config *cfg, al_error *err) {
    if (!cfg->n_binds && !cfg->n_env_extra)
        return 0;
    if (cfg->warm || cfg->zygote || cfg->fork)
        return al_err(err, "setup", EINVAL, "extra binds and environment are for a cold box (not warm, a zygote or forked)");
    if (cfg->n_binds > AL_BOX_BINDS_MAX || cfg->n_env_extra > AL_BOX_ENV_EXTRA_MAX)
        return al_err(err, "setup", E2BIG, "at most %d binds and %d extra environment entries", AL_BOX_BINDS_MAX,
                      AL_BOX_ENV_EXTRA_MAX);
    for (size_t i = 0; i < cfg->n_binds; i++)
        if (cfg->binds[i].host_fd < 0 || !cfg->binds[i].host_path || cfg->binds[i].host_path[0] != '/' ||
            !al_box_bind_path_ok(cfg->binds[i].box_path))
            return al_err(err, "setup", EINVAL, "bind %zu: want an open directory and an absolute path of plain names "
                          "not among the box's own (%s)", i, cfg->binds[i].box_path ? cfg->binds[i].box_path : "none");
    for (size_t i = 0; i < cfg->n_env_extra; i++)
        if (!cfg->env_extra[i] || !strchr(cfg->env_extra[i], '=') || cfg->env_extra[i][0] == '=')
            return al_err(err, "setup", EINVAL, "extra environment entry %zu: want NAME=value", i);
    return 0;
}

static const char *const level_names[_AL_LEVEL_MAX] = { "boundary", "boundary-conditional", "applied",
                                                        "unconfirmed", "not-enforced" };
const char *al_level_name(al_level l) { return l < _AL_LEVEL_MAX ? level_names[l] : "not-enforced"; }

void al_box_limits_default(al_box_limits *l) {
    *l = (al_box_limits){
        .wall_ms = 60 * 1000,
        .memory_bytes = 512ULL << 20,
        .cpu_millis = 500,
        .pids = 256,
        .tmpfs_bytes = 64ULL << 20,
        .tmpfs_inodes = 16384,
        .output_bytes = 1ULL << 20,
        .max_artifacts = 100,
        .max_artifact_bytes = 32ULL << 20,
        .max_artifacts_total = 64ULL << 20,
        .max_depth = 16,
        .nofile = 1024,
        .stage_bytes = 64ULL << 20,
        .stage_files = 1000,
    };
}

void al_box_result_free(al_box_result *r) {
    for (int i = 0; i < _AL_STREAM_MAX; i++)
        free(r->out[i]);
    for (size_t i = 0; i < r->n_artifacts; i++)
        free(r->artifacts[i].path);
    free(r->artifacts);
    for (size_t i = 0; i < r->n_skipped; i++) {
        free(r->skipped[i].path);
        free(r->skipped[i].why);
    }
    free(r->skipped);
    memset(r, 0, sizeof *r);
}

bool al_box_result_output(const al_box_config *cfg, al_box_result *res, al_stream s, const char *buf, size_t len) {
    if (cfg->on_output && len)
        cfg->on_output(s, buf, len, cfg->userdata);
    uint64_t cap = cfg->limits.output_bytes;
    res->out_total[s] += len;
    size_t room = res->out_len[s] < cap ? (size_t)(cap - res->out_len[s]) : 0;
    size_t take = len < room ? len : room;
    if (take) {
        char *n = realloc(res->out[s], res->out_len[s] + take + 1);
        if (n) {
            memcpy(n + res->out_len[s], buf, take);
            res->out_len[s] += take;
            n[res->out_len[s]] = '\0';
            res->out[s] = n;
        }
    }
    if (take < len)
        res->out_truncated[s] = true;
    return res->out_total[s] > cap;
}

static void control(al_control *c, al_level l, const char *fmt, ...) _printf_(3, 4);
static void control(al_control *c, al_level l, const char *fmt, ...) {
    c->level = l;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
}

/* A zygote's host uids (box.h): its own first, then one per slot, each
 * with its lock, held for the zygote's life. */
typedef struct zygote_ids {
    uid_t uid[1 + AL_ZYGOTE_SLOTS];
    int lock[1 + AL_ZYGOTE_SLOTS];
    size_t n;
} zygote_ids;

static int zygote_acquire(zygote_ids *z, al_error *err) {
    for (z->n = 0; z->n < ELEMENTSOF(z->uid); z->n++)
        if (al_uid_acquire(&z->uid[z->n], &z->lock[z->n], err) < 0)
            return -(err->err ? err->err : EAGAIN);
    return 0;
}

static void zygote_release(zygote_ids *z) {
    for (size_t i = 0; i < z->n; i++)
        close(z->lock[i]);
    z->n = 0;
}

/* "0 OWN 1", then "I SLOT_I 1" for each slot: the zygote's root and the
 * uids it maps its boxes' 65534 to, none of them the host's root */
static int write_zygote_maps(pid_t pid, const zygote_ids *z, al_error *err) {
    char map[(1 + AL_ZYGOTE_SLOTS) * 32];
    size_t at = 0;
    for (size_t i = 0; i < z->n; i++)
        at += (size_t)snprintf(map + at, sizeof map - at, "%zu %u 1\n", i, (unsigned)z->uid[i]);
    return al_setup_write_maps(pid, map, map, err);
}

/* one line each: the sandbox id and nothing else, no root mapping */
static int write_maps(pid_t pid, uid_t uid, gid_t gid, al_error *err) {
    char u[64], g[64];
    snprintf(u, sizeof u, "%d %u 1\n", AL_SANDBOX_ID, (unsigned)uid);
    snprintf(g, sizeof g, "%d %u 1\n", AL_SANDBOX_ID, (unsigned)gid);
    return al_setup_write_maps(pid, u, g, err);
}

/* A forked box's request to its zygote: the limits its PID 1 sets, with
 * its sync socket, output pipes, warm start's socket and /dev (zygote.c). */
static int fork_request(const al_box_config *cfg, int sync, const int out_w[2], int chan, int dev, al_error *err) {
    /* a made box's keeper ends it past its deadline if this process, alive
     * but stopped or stuck, does not; a forked box has none (its uids are
     * its zygote's helper's): its own PID 1 does the same, when the box is
     * forked for a run that is here already (one forked ahead waits for its
     * run as long as the pool keeps it: no lifetime is known then) */
    bool run_here = cfg->warm && cfg->warm->run_fd < 0;
    /* a fork of a ready interpreter: its hand-off takes milliseconds, and
     * warm_start allows WARM_ACK_MS for the answer */
    const uint64_t handoff_ms = 5000;
    al_fork_request req = { .tmpfs_bytes = cfg->limits.tmpfs_bytes, .tmpfs_inodes = cfg->limits.tmpfs_inodes,
                            .pids = cfg->limits.pids, .nofile = cfg->limits.nofile,
                            .lifetime_ms = run_here ? handoff_ms + cfg->limits.wall_ms + AL_KEEPER_GRACE_MS : 0 };
    size_t n = sizeof req;
    int fds[AL_FORK_FDS] = { sync, out_w[0], out_w[1], chan, dev };
    union {
        char buf[CMSG_SPACE(sizeof fds)];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct iovec iov = { .iov_base = &req, .iov_len = n };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    ssize_t w;
    do
        w = sendmsg(cfg->fork->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w != (ssize_t)n)
        return al_err(err, "fork", w < 0 ? errno : EIO, "ask the zygote for a box: %s", w < 0 ? strerror(errno) : "short write");
    return 0;
}

/* Whether PIDFD is a pidfd of host pid PID (its fdinfo says so). */
static bool pidfd_is(int pidfd, pid_t pid) {
    char path[64];
    _cleanup_free_ char *info = NULL;
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    if (al_read_small(AT_FDCWD, path, 4096, &info, NULL) < 0)
        return false;
    const char *p = strstr(info, "\nPid:\t");
    return p && strtol(p + 6, NULL, 10) == (long)pid;
}

/* Wait for one message from the box during setup, bounded in time. */
static int recv_setup(int sock, al_msg *m, int *fds, unsigned *nfds, struct ucred *cred, al_error *err) {
    struct pollfd p = { .fd = sock, .events = POLLIN };
    int n = poll(&p, 1, SETUP_TIMEOUT_MS);
    if (n == 0)
        return al_err(err, "setup", ETIMEDOUT, "the box did not finish setting up in %d ms", SETUP_TIMEOUT_MS);
    if (n < 0)
        return al_err(err, "setup", errno, "poll: %m");
    int r = cred ? al_msg_recv_creds(sock, m, fds, nfds, cred) : al_msg_recv(sock, m, fds, nfds);
    if (r < 0)
        return al_err(err, "setup", r, "read from the box: %s", strerror(-r));
    if (r == 0)
        return al_err(err, "setup", EPIPE, "the box exited during setup");
    if (m->type == AL_MSG_ERROR) {
        *err = m->err;
        return -(m->err.err ? m->err.err : EIO);
    }
    return 0;
}

typedef struct pump {
    int fd;
    char *buf;
    size_t len, cap;
    uint64_t total;
    bool truncated;
} pump;

/* Read what is there; returns 0 on EOF, 1 on data or EAGAIN. */
static int pump_read(pump *p, al_stream s, const al_box_config *cfg, bool *over) {
    char chunk[65536];
    ssize_t n = read(p->fd, chunk, sizeof chunk);
    if (n < 0)
        return (errno == EAGAIN || errno == EINTR) ? 1 : 0;
    if (n == 0)
        return 0;
    p->total += (uint64_t)n;
    size_t room = p->cap - p->len;
    size_t keep = (size_t)n < room ? (size_t)n : room;
    if (keep) {
        memcpy(p->buf + p->len, chunk, keep);
        p->len += keep;
        if (cfg->on_output)
            cfg->on_output(s, chunk, keep, cfg->userdata);
    }
    if (keep < (size_t)n) {
        p->truncated = true;
        *over = true;
    }
    return 1;
}

typedef struct box_ctx {
    const al_box_config *cfg;
    al_box_result *res;
    const al_cgroup_ops *cg_ops;
    al_cgroup *cg;
    pid_t pid;
    int pidfd;
    uint64_t cpu_base_usec;       /* a warm box's CPU time before its run */
    bool forked;                  /* forked by a zygote: its PID 1 is not our child */
} box_ctx;

static void kill_box(box_ctx *b) {
    /* PID 1's death takes the pid namespace with it; the cgroup kill also
     * gets anything caught mid-fork. */
    if (b->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
    if (b->cg)
        b->cg_ops->kill_all(b->cg);
}

static int supervise(box_ctx *b, int sock, int out_r[2], uint64_t start, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    pump pumps[_AL_STREAM_MAX];
    for (int i = 0; i < _AL_STREAM_MAX; i++) {
        pumps[i] = (pump){ .fd = out_r[i], .cap = cfg->limits.output_bytes };
        pumps[i].buf = malloc(pumps[i].cap + 1);
        if (!pumps[i].buf) {
            free(pumps[0].buf);
            return -ENOMEM;
        }
        fcntl(out_r[i], F_SETFL, O_NONBLOCK);
    }
    uint64_t deadline = start + cfg->limits.wall_ms, kill_deadline = 0;
    bool open_[_AL_STREAM_MAX] = { true, true }, sock_open = true, init_done = false, have_status = false;
    bool killed = false;
    int status = 0, r = 0;
    al_reason kill_reason = AL_REASON_EXITED;
    uint64_t next_tick = start + PIDS_TICK_MS, pids_hits = 0;
    int pids_streak = 0;

    while (open_[0] || open_[1] || !init_done || sock_open) {
        uint64_t now = al_now_ms();
        if (!killed && now >= deadline) {
            kill_reason = AL_REASON_TIMEOUT;
            killed = true;
            kill_deadline = now + KILL_GRACE_MS;
            kill_box(b);
        }
        if (!killed && b->cg && now >= next_tick) {
            al_cgroup_stats st = { 0 };
            b->cg_ops->stats(b->cg, &st);
            bool full = st.pids_max_hits > 0 && st.pids_current + 2 >= cfg->limits.pids;
            pids_streak = full || st.pids_max_hits > pids_hits ? pids_streak + 1 : 0;
            pids_hits = st.pids_max_hits;
            next_tick = now + PIDS_TICK_MS;
            if (pids_streak >= PIDS_STREAK) {
                kill_reason = AL_REASON_PIDS;
                killed = true;
                kill_deadline = now + KILL_GRACE_MS;
                kill_box(b);
            }
        }
        if (killed && now >= kill_deadline) {
            r = al_err(err, "kill", ETIMEDOUT, "the box did not die within %d ms of SIGKILL", KILL_GRACE_MS);
            break;
        }
        struct pollfd p[5];
        int idx[5], n = 0;
        for (int i = 0; i < _AL_STREAM_MAX; i++)
            if (open_[i]) {
                p[n] = (struct pollfd){ .fd = out_r[i], .events = POLLIN };
                idx[n++] = i;
            }
        if (sock_open) {
            p[n] = (struct pollfd){ .fd = sock, .events = POLLIN };
            idx[n++] = 2;
        }
        if (!init_done) {
            p[n] = (struct pollfd){ .fd = b->pidfd, .events = POLLIN };
            idx[n++] = 3;
        }
        if (!killed && cfg->cancel_fd >= 0) {
            p[n] = (struct pollfd){ .fd = cfg->cancel_fd, .events = POLLIN };
            idx[n++] = 4;
        }
        uint64_t until = killed ? kill_deadline : (b->cg && next_tick < deadline ? next_tick : deadline);
        int timeout = until > now ? (int)(until - now) : 0;
        int k = poll(p, (nfds_t)n, timeout);
        if (k < 0 && errno != EINTR) {
            r = al_err(err, "supervise", errno, "poll: %m");
            break;
        }
        for (int j = 0; k > 0 && j < n; j++) {
            if (!p[j].revents)
                continue;
            if (idx[j] < 2) {
                bool over = false;
                if (pump_read(&pumps[idx[j]], (al_stream)idx[j], cfg, &over) == 0)
                    open_[idx[j]] = false;
                if (over && !killed) {
                    kill_reason = AL_REASON_OUTPUT_LIMIT;
                    killed = true;
                    kill_deadline = al_now_ms() + KILL_GRACE_MS;
                    kill_box(b);
                }
            } else if (idx[j] == 2) {
                al_msg m;
                int q = al_msg_recv(sock, &m, NULL, NULL);
                if (q <= 0) {
                    sock_open = false;
                } else if (m.type == AL_MSG_STATUS) {
                    status = m.status;
                    have_status = true;
                } else if (m.type == AL_MSG_ERROR && !res->error.step[0]) {
                    res->error = m.err;
                }
            } else if (idx[j] == 4) {
                kill_reason = AL_REASON_CANCELED;
                killed = true;
                kill_deadline = al_now_ms() + KILL_GRACE_MS;
                kill_box(b);
            } else {
                siginfo_t si = { 0 };
                /* a forked box's PID 1 is its zygote's child: readable is its end */
                if (b->forked || (waitid((idtype_t)P_PIDFD, (id_t)b->pidfd, &si, WEXITED | WNOHANG) == 0 && si.si_pid != 0))
                    init_done = true;
            }
        }
    }
    res->wall_ms = al_now_ms() - start;
    for (int i = 0; i < _AL_STREAM_MAX; i++) {
        pumps[i].buf[pumps[i].len] = '\0';
        res->out[i] = pumps[i].buf;
        res->out_len[i] = pumps[i].len;
        res->out_total[i] = pumps[i].total;
        res->out_truncated[i] = pumps[i].truncated;
    }
    if (r < 0)
        return r;
    if (have_status && WIFEXITED(status)) {
        res->exit_code = WEXITSTATUS(status);
        res->signal = 0;
    } else if (have_status && WIFSIGNALED(status)) {
        res->exit_code = -1;
        res->signal = WTERMSIG(status);
    } else {
        /* PID 1 was killed before it could report: so was the script */
        res->exit_code = -1;
        res->signal = SIGKILL;
    }
    res->reason = kill_reason;
    return 0;
}

static void fill_static_controls(al_controls *c, bool root, uid_t uid, const al_cgroup_caps *caps,
                                 const al_box_limits *l) {
    c->host_uid = uid;
    c->host_uid_unique = root;
    if (root)
        control(&c->userns, AL_LEVEL_BOUNDARY, "uid 65534 in the box is host uid %u, unique to this box; no root mapping", (unsigned)uid);
    else
        control(&c->userns, AL_LEVEL_APPLIED, "uid 65534 in the box is host uid %u, the invoking user's own (shared with its other processes)", (unsigned)uid);
    control(&c->seccomp, AL_LEVEL_BOUNDARY, "default-deny allow-list (EPERM); i386 and x32 calls kill the process");
    control(&c->no_new_privs, AL_LEVEL_BOUNDARY, "set before exec; setuid and file capabilities cannot raise privileges");
    control(&c->caps, AL_LEVEL_BOUNDARY, "every capability set empty (bounding and ambient included)");
    control(&c->network, AL_LEVEL_BOUNDARY, "offline: a new network namespace holding only lo");
    control(&c->tmpfs, AL_LEVEL_BOUNDARY, "/work, /out, /tmp: %llu MiB and %llu inodes each",
            (unsigned long long)(l->tmpfs_bytes >> 20), (unsigned long long)l->tmpfs_inodes);
    snprintf(c->cgroup_version, sizeof c->cgroup_version, "%s", caps->version);
    bool have = strcmp(caps->version, "none") != 0;
    if (have && caps->memory)
        control(&c->memory, caps->swap ? AL_LEVEL_BOUNDARY : AL_LEVEL_APPLIED, "%llu MiB (cgroup %s)%s",
                (unsigned long long)(l->memory_bytes >> 20), caps->version, caps->swap ? ", swap 0" : "; swap not capped: no swap accounting");
    else
        control(&c->memory, AL_LEVEL_NOT_ENFORCED, "no memory cgroup: %s", caps->why_not);
    if (have && caps->pids)
        control(&c->pids, AL_LEVEL_BOUNDARY, "%llu processes and threads (cgroup %s)", (unsigned long long)l->pids, caps->version);
    else if (root)
        control(&c->pids, AL_LEVEL_APPLIED, "RLIMIT_NPROC %llu on the box's own uid only: %s", (unsigned long long)l->pids, caps->why_not);
    else
        control(&c->pids, AL_LEVEL_NOT_ENFORCED, "no pids cgroup, and the uid is shared: %s", caps->why_not);
    if (have && caps->cpu)
        control(&c->cpu, AL_LEVEL_BOUNDARY, "%llu.%03llu CPUs (cgroup %s)", (unsigned long long)(l->cpu_millis / 1000),
                (unsigned long long)(l->cpu_millis % 1000), caps->version);
    else
        control(&c->cpu, AL_LEVEL_NOT_ENFORCED, "no cpu controller: %s", caps->why_not);
}

/* CFG's files and inputs into /work, and (TMPFD >= 0) the runtime's seed of
 * /tmp. */
static int stage_all(const al_box_config *cfg, int workfd, int tmpfd, uid_t uid, gid_t gid, al_error *err) {
    al_stage st = { .workfd = workfd, .uid = uid, .gid = gid, .max_files = cfg->limits.stage_files,
                    .max_bytes = cfg->limits.stage_bytes, .max_depth = cfg->limits.max_depth };
    int r = 0;
    const al_runtime *rt = cfg->runtime;
    if (tmpfd >= 0 && rt->tmp_seed_root && rt->tmp_seed && rt->tmp_seed_name) {
        al_stage seed = st;
        seed.workfd = tmpfd;
        if ((r = al_stage_beneath_as(&seed, rt->tmp_seed_root, rt->tmp_seed, rt->tmp_seed_name, err)) < 0)
            return r;
    }
    for (size_t i = 0; r == 0 && i < cfg->n_files; i++)
        r = al_stage_data(&st, cfg->files[i].name, cfg->files[i].data, cfg->files[i].len, cfg->files[i].mode, err);
    for (size_t i = 0; r == 0 && i < cfg->n_inputs; i++)
        r = al_stage_path(&st, cfg->inputs[i], err);
    if (r == 0 && cfg->work_in) {
        /* the script's name is the box's: a file of that name in the tree
         * is left where it is (it comes back untouched: the tree is
         * replaced only by what the box leaves, see collect_work) */
        const char *skip[8];
        size_t n = 0;
        for (size_t i = 0; i < cfg->n_files && n < ELEMENTSOF(skip); i++)
            skip[n++] = cfg->files[i].name;
        r = al_stage_dir_entries(&st, cfg->work_in, skip, n, err);
    }
    return r;
}

/* Read and drop what FD holds now (a warm box's output before its run). */
static void discard(int fd) {
    char chunk[65536];
    fcntl(fd, F_SETFL, O_NONBLOCK);
    while (read(fd, chunk, sizeof chunk) > 0)
        ;
}

/* The warm start's message (src/lang/warm/): its length in decimal and a
 * newline, then NUL-terminated strings: the number of the run's arguments,
 * its arguments (after the interpreter and its script), its environment,
 * in order. Neither can hold a NUL (each is a C string), and the
 * interpreter decodes the bytes as a cold start decodes its argv and
 * environ, with nothing between (no JSON, whose parse a forked box's
 * interpreter paid for in copied pages). */
static int warm_message(const al_box_config *run, char **out, size_t *out_len) {
    size_t nargs = 0;
    while (run->argv[0] && run->argv[1] && run->argv[2 + nargs])
        nargs++;
    char count[24];
    size_t body = (size_t)snprintf(count, sizeof count, "%zu", nargs) + 1;
    for (size_t i = 0; i < nargs; i++)
        body += strlen(run->argv[2 + i]) + 1;
    for (size_t i = 0; run->envp && run->envp[i]; i++)
        body += strlen(run->envp[i]) + 1;
    char head[24];
    size_t h = (size_t)snprintf(head, sizeof head, "%zu\n", body);
    char *m = malloc(h + body), *p = m;
    if (!m)
        return -ENOMEM;
    p = stpcpy(p, head);
    p = stpcpy(p, count) + 1;
    for (size_t i = 0; i < nargs; i++)
        p = stpcpy(p, run->argv[2 + i]) + 1;
    for (size_t i = 0; run->envp && run->envp[i]; i++)
        p = stpcpy(p, run->envp[i]) + 1;
    *out = m;
    *out_len = (size_t)(p - m);
    return 0;
}

/* how long a warm interpreter may take to say it has its run */
#define WARM_ACK_MS 5000

/* A warm box (box.h): its interpreter's ready byte on CHAN (its output
 * dropped meanwhile), then the run from the handoff into *RUN, staged, and
 * sent to the interpreter, which says it has it. */
static int warm_start(box_ctx *b, int chan, int out_r[2], int workfd, uid_t uid, gid_t gid, al_box_config *run,
                      uint64_t *handed_ms, al_error *err) {
    const al_box_config *cfg = b->cfg;
    uint64_t until = al_now_ms() + (cfg->warm->ready_timeout_ms ? cfg->warm->ready_timeout_ms : 60000);
    for (;;) {
        struct pollfd p[5] = { { .fd = chan, .events = POLLIN }, { .fd = out_r[0], .events = POLLIN },
                               { .fd = out_r[1], .events = POLLIN }, { .fd = b->pidfd, .events = POLLIN },
                               { .fd = cfg->cancel_fd, .events = POLLIN } };
        uint64_t now = al_now_ms();
        if (now >= until)
            return al_err(err, "warm", ETIMEDOUT, "the interpreter was not ready in time");
        if (poll(p, 5, (int)(until - now)) < 0 && errno != EINTR)
            return al_err(err, "warm", errno, "poll: %m");
        for (int i = 1; i < 3; i++)
            if (p[i].revents)
                discard(p[i].fd);
        if (p[3].revents)
            return al_err(err, "warm", ECHILD, "the box ended before its run came");
        if (p[4].revents)
            return al_err(err, "warm", ECANCELED, "canceled before its run came");
        if (p[0].revents) {
            char c = 0;
            ssize_t n = read(chan, &c, 1);
            if (n == 1 && c == 'r')
                break;
            return al_err(err, "warm", EPROTO, "the interpreter ended before it was ready");
        }
    }
    /* ready: now its run, or its death, whichever comes first */
    if (cfg->warm->on_ready) {
        al_cgroup_stats st = { 0 };
        if (b->cg)
            b->cg_ops->stats(b->cg, &st);
        cfg->warm->on_ready(cfg->warm->ud, st.memory_bytes);
    }
    /* (no run_fd: the run is here already, a box forked for it) */
    for (; cfg->warm->run_fd >= 0;) {
        struct pollfd p[5] = { { .fd = cfg->warm->run_fd, .events = POLLIN }, { .fd = chan, .events = POLLIN },
                               { .fd = b->pidfd, .events = POLLIN }, { .fd = out_r[0], .events = POLLIN },
                               { .fd = out_r[1], .events = POLLIN } };
        if (poll(p, 5, -1) < 0 && errno != EINTR)
            return al_err(err, "warm", errno, "poll: %m");
        for (int i = 3; i < 5; i++)
            if (p[i].revents)
                discard(p[i].fd);
        /* a run that came is taken even if the box died meanwhile: the
         * hand-off then fails, and the run goes cold in its helper */
        if (p[0].revents)
            break;
        if (p[1].revents || p[2].revents)
            return al_err(err, "warm", ECHILD, "the warm box ended before its run came");
    }
    *run = *cfg;
    run->warm = NULL;
    int r = cfg->warm->handoff(cfg->warm->ud, run, err);
    if (r < 0)
        return r;
    cfg->warm->handed = true;
    /* what only the box decides stays the box's */
    run->runtime = cfg->runtime;
    run->limits = cfg->limits;
    run->listen_port = 0;
    run->on_listener = NULL;
    for (int i = 0; i < 2; i++)
        discard(out_r[i]);
    for (size_t i = 0; i < cfg->n_files; i++)
        if (unlinkat(workfd, cfg->files[i].name, 0) < 0 && errno != ENOENT)
            return al_err(err, "warm", errno, "remove the warm start's %s: %m", cfg->files[i].name);
    if ((r = stage_all(run, workfd, -1, uid, gid, err)) < 0)
        return r;
    /* the run's arguments (after the interpreter and its script) and its
     * environment, in order, with its stdin */
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if ((r = warm_message(run, &text, &len)) < 0)
        return al_err(err, "warm", -r, "the run's arguments and environment: %s", strerror(-r));
    char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
    struct iovec iov = { .iov_base = text, .iov_len = len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (run->stdin_fd >= 0) {
        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof cbuf;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &run->stdin_fd, sizeof(int));
    }
    /* Its memory limit is the run's own, before its first instruction: a
     * cold run that imports what the warm start preloaded holds the same
     * pages under the same limit. A box that holds more than that limit
     * already is not used (the run goes cold, where the limit stops what
     * it imports as it would). */
    if (b->cg && cfg->limits.memory_bytes) {
        al_cgroup_stats st = { 0 };
        if ((r = b->cg_ops->stats(b->cg, &st)) < 0)
            return al_err(err, "warm", -r, "read the warm box's memory: %s", strerror(-r));
        if (st.memory_bytes >= cfg->limits.memory_bytes)
            return al_err(err, "warm", ENOMEM, "the warm box holds %llu bytes, the run's limit is %llu",
                          (unsigned long long)st.memory_bytes, (unsigned long long)cfg->limits.memory_bytes);
        r = b->cg_ops->set_memory(b->cg, cfg->limits.memory_bytes);
        if (r < 0)
            return al_err(err, "warm", -r, "set the run's memory limit: %s", strerror(-r));
    }
    /* the run's clock starts as it is handed: its code may begin the
     * instant the message is in, before this process hears 'g' (a clock
     * started after that measured a 1.5 s sleep as 1,499 ms) */
    *handed_ms = al_now_ms();
    /* a stream socket: the message may take more than one send (the
     * interpreter reads until it has the length its first line says),
     * the fd going with the first */
    for (size_t off = 0; off < len;) {
        iov = (struct iovec){ .iov_base = text + off, .iov_len = len - off };
        ssize_t n = sendmsg(chan, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return al_err(err, "warm", n < 0 ? errno : EIO, "hand the run to the interpreter: %m");
        off += (size_t)n;
        mh.msg_control = NULL;
        mh.msg_controllen = 0;
    }
    /* Its interpreter says it has the run ('g', or 'c': run it cold),
     * before any of the run's code: one killed an instant before, still
     * exiting when the message went into its socket, fails the hand-off
     * here, and the run goes cold, instead of ending with that death as
     * its own. */
    struct pollfd pg = { .fd = chan, .events = POLLIN };
    char g = 0;
    int pr;
    while ((pr = poll(&pg, 1, WARM_ACK_MS)) < 0 && errno == EINTR)
        ;
    if (pr > 0 && read(chan, &g, 1) == 1 && g == 'c')
        /* the run's files shadow a module the warm start had imported
         * (src/lang/warm/python.py): a cold start imports them instead */
        return al_err(err, "warm", EEXIST, "the run's files shadow a module its warm start imported");
    if (g != 'g')
        return al_err(err, "warm", EPIPE, "the interpreter did not take the run");
    /* its CPU time is the run's from here */
    if (b->cg) {
        al_cgroup_stats st = { 0 };
        b->cg_ops->stats(b->cg, &st);
        b->cpu_base_usec = st.cpu_usec;
    }
    return 0;
}

static int make_cgroup(box_ctx *b, uid_t uid, bool by_creator, al_cgroup_join *join) {
    const al_box_config *cfg = b->cfg;
    char name[64];
    /* named after the box's host uid: holding the uid's lock makes the name
     * ours, and a leftover of a killed airlock is reclaimed by the next.
     * Rootless boxes share the user's uid, so theirs add pid and count, as
     * do forked ones, whose uid's lock is their zygote's (and a box that
     * had it may still be being removed). */
    static unsigned counter;
    if (b->res->controls.host_uid_unique && !by_creator)
        snprintf(name, sizeof name, "box-%u", (unsigned)uid);
    else
        snprintf(name, sizeof name, "box-%u-%d-%u", (unsigned)uid, (int)getpid(), counter++);
    al_cgroup_limits cl = { cfg->limits.memory_bytes, cfg->limits.pids, cfg->limits.cpu_millis };
    /* a warm box imports its preloads before its run: room for them on top
     * of the run's, until the hand-off sets the run's (warm_start) */
    if (cfg->warm && cl.memory_bytes)
        cl.memory_bytes += AL_WARM_MEMORY_HEADROOM;
    int r = b->cg_ops->create(name, &cl, &b->cg, &b->res->error);
    if (r < 0)
        return r;
    snprintf(b->res->cgroup_path, sizeof b->res->cgroup_path, "%s", b->cg_ops->path(b->cg));
    return b->cg_ops->join(b->cg, join, &b->res->error);
}

bool al_box_can_fork(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    al_cgroup_caps caps;
    const al_cgroup_ops *ops = al_cgroup_pick(&caps);
    return geteuid() == 0 && ops && !ops->join_by_clone;
#else
    return false;
#endif
}

/* One box's run: what al_box_run's steps share, and what its end cleans
 * up (every fd here -1 or open, every step's failure leaving it so). */
typedef struct box_run {
    const al_box_config *cfg;     /* the caller's, or ZCFG for a zygote */
    al_box_result *res;
    al_error *err;
    uint64_t start;
    bool root, forked;
    int uid_lock, workfd, outfd, tmpfd, devfd, keeper_fd;
    zygote_ids zids;
    uid_t uid;
    gid_t gid;
    al_cgroup_caps caps;
    const al_cgroup_ops *ops;
    box_ctx b;
    int sv[2], outp[2][2], wsv[2];
    /* the run's config: the box's own, or for a warm box what its handoff gave */
    al_box_config run;
    const al_box_config *rc;
    al_cgroup_join join;
    /* a zygote's files: its caller's, and its boxes' PID 1 (fork_init.c) */
    al_box_file zfiles[8];
    al_box_config zcfg;
} box_run;

/* Which box this is, and its uids: a cold or warm box takes a uid of its
 * own, a zygote a uid for each box it forks, a forked box is told its
 * uid by its zygote (sync 2). */
static int run_identity(box_run *st) {
    const al_box_config *cfg = st->cfg;
    int r;
    if (st->forked && (!cfg->warm || cfg->listen_port || !st->root || (st->ops && st->ops->join_by_clone)))
        return al_err(st->err, "fork", EINVAL, "a forked box is a warm box with no listener, made by root on cgroup v1");
    if (cfg->zygote && (!st->root || cfg->warm))
        return al_err(st->err, "zygote", EPERM, "a zygote is made by root (it maps a uid for each box it forks), and is not warm");
    if (st->root && cfg->zygote) {
        if ((r = zygote_acquire(&st->zids, st->err)) < 0)
            return r;
        st->uid = st->zids.uid[0];
        st->gid = (gid_t)st->uid;
    } else if (st->root && !st->forked) {
        if ((r = al_uid_acquire(&st->uid, &st->uid_lock, st->err)) < 0)
            return r;
        st->gid = (gid_t)st->uid;
    }
    fill_static_controls(&st->res->controls, st->root, st->uid, &st->caps, &cfg->limits);
    return 0;
}

/* A zygote's config: its caller's files, and its boxes' PID 1. */
static int zygote_files(box_run *st) {
    const al_box_config *cfg = st->cfg;
    if (cfg->n_files >= ELEMENTSOF(st->zfiles))
        return al_err(st->err, "zygote", E2BIG, "too many files for a zygote");
    memcpy(st->zfiles, cfg->files, cfg->n_files * sizeof *st->zfiles);
    st->zfiles[cfg->n_files] = (al_box_file){ AL_BOX_FORK_SO, al_fork_so, sizeof al_fork_so, 0444 };
    st->zcfg = *cfg;
    st->zcfg.files = st->zfiles;
    st->zcfg.n_files = cfg->n_files + 1;
    st->cfg = st->b.cfg = st->rc = &st->zcfg;
    return 0;
}

/* What the box is made with: its cgroup (v2), its sync socket, output
 * pipes, a warm box's socket, and its /dev. */
static int run_channels(box_run *st) {
    const al_box_config *cfg = st->cfg;
    al_error *err = st->err;
    int r;
    /* v2 creates the box inside its cgroup, so the cgroup comes first; v1
     * makes it while the box builds its root, and the box joins it at
     * sync 3, before anything of the script's runs */
    if (st->ops && st->ops->join_by_clone && (r = make_cgroup(&st->b, st->uid, false, &st->join)) < 0)
        return r;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, st->sv) < 0)
        return al_err(err, "setup", errno, "socketpair: %m");
    if (pipe2(st->outp[0], O_CLOEXEC) < 0 || pipe2(st->outp[1], O_CLOEXEC) < 0)
        return al_err(err, "setup", errno, "pipe: %m");
    if (cfg->warm && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, st->wsv) < 0)
        return al_err(err, "setup", errno, "socketpair: %m");
    /* Supplementary groups survive into a user namespace and cannot be
     * dropped there (setgroups is denied): drop them before cloning. */
    if (st->root && !st->forked && setgroups(0, NULL) < 0)
        return al_err(err, "setup", errno, "setgroups(0): %m");
    /* The box's /dev, its nodes its own (al_mount_dev): made here, where a
     * node can be made, by root; a box made without root binds the host's. */
    if (st->root && (st->devfd = al_mount_dev(err)) < 0)
        return st->devfd;
    return 0;
}

/* A forked box: asked of its zygote, which forks it; its pid and uids
 * come with its first message (the kernel's word, whatever the zygote
 * says). */
static int spawn_forked(box_run *st) {
    int one = 1;
    if (setsockopt(st->sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0)
        return al_err(st->err, "setup", errno, "SO_PASSCRED: %m");
    int out_w[2] = { st->outp[0][1], st->outp[1][1] };
    return fork_request(st->cfg, st->sv[1], out_w, st->wsv[1], st->devfd, st->err);
}

/* A cold box, a warm one or a zygote: cloned into new namespaces. */
static int spawn_cloned(box_run *st) {
    const al_box_config *cfg = st->cfg;
    al_child_args ca = {
        .sock = st->sv[1], .out_w = { st->outp[0][1], st->outp[1][1] }, .stdin_fd = cfg->stdin_fd, .runtime_fd = -1,
        .dev_fd = st->devfd,
        .runtime = cfg->runtime, .limits = &cfg->limits,
        .argv = cfg->argv, .envp = cfg->envp, .unique_uid = st->root, .listen_port = cfg->listen_port,
        .warm_fd = cfg->zygote ? cfg->zygote->req_fd : st->wsv[1], .zygote = cfg->zygote != NULL,
        .binds = cfg->binds, .n_binds = cfg->n_binds, .env_extra = cfg->env_extra, .n_env_extra = cfg->n_env_extra,
    };
    for (size_t i = 0; i < AL_BOX_BINDS_MAX; i++)
        ca.bind_fds[i] = i < cfg->n_binds ? cfg->binds[i].host_fd : -1;
    /* The cgroup namespace is entered later, from inside the box cgroup,
     * so the box sees its own cgroup as "/". */
    const uint64_t ns = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS;
    pid_t pid;
    if (st->join.clone_fd >= 0) {
        struct clone_args ca3 = { .flags = ns | CLONE_INTO_CGROUP, .exit_signal = SIGCHLD,
                                  .cgroup = (uint64_t)st->join.clone_fd };
        pid = (pid_t)syscall(SYS_clone3, &ca3, sizeof ca3);
    } else {
        pid = (pid_t)syscall(SYS_clone, ns | SIGCHLD, NULL, NULL, NULL, 0);
    }
    if (pid < 0)
        return al_err(st->err, "clone", errno, "clone new namespaces: %m");
    if (pid == 0)
        al_child_main(&ca);
    /* a zygote's request socket is its own: with this copy closed, its
     * end is its pool's news that it is gone */
    if (cfg->zygote)
        close(cfg->zygote->req_fd);
    st->b.pid = pid;
    st->res->init_pid = pid;
    st->b.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    return 0;
}

/* The box's ends of what it was made with closed here (they are its own
 * now, or the zygote's to hand on); a cloned box's uids kept locked until
 * its PID 1 (and so every process of it) has ended, though this process
 * die first (box/keeper.c). A failure kills and reaps the box. */
static int spawned(box_run *st) {
    int r = 0;
    close(st->sv[1]);
    st->sv[1] = -1;
    if (st->devfd >= 0)
        close(TAKE_FD(st->devfd));
    if (st->wsv[1] >= 0)
        close(st->wsv[1]);
    st->wsv[1] = -1;
    close(st->outp[0][1]);
    close(st->outp[1][1]);
    st->outp[0][1] = st->outp[1][1] = -1;
    if (!st->forked && st->b.pidfd < 0)
        r = al_err(st->err, "setup", errno, "pidfd_open: %m");
    if (r == 0 && !st->forked && (st->uid_lock >= 0 || st->zids.n > 0)) {
        al_uid_keeper k = { .locks = st->uid_lock >= 0 ? &st->uid_lock : st->zids.lock,
                            .n_locks = st->uid_lock >= 0 ? 1 : st->zids.n, .pidfd = st->b.pidfd, .kill_init = true,
                            .after = al_box_sweep_stale };
        r = al_uid_keeper_start(&k, &st->keeper_fd, st->err);
    }
    if (r < 0) {
        kill(st->b.pid, SIGKILL);
        waitpid(st->b.pid, NULL, 0);
        st->b.pid = -1;
        if (st->b.pidfd >= 0)
            close(TAKE_FD(st->b.pidfd));
    }
    return r;
}

/* A forked box's PID 1's own pidfd (FD), of the pid the kernel gave; its
 * uid one of the boxes' (the zygote's map allows only its own), and one a
 * live airlock holds the lock of: its zygote's helper holds each of its
 * slots' for as long as a box of it lives, so a uid nobody holds is no
 * slot of a live zygote's, and could be any box's next. */
static int adopt_forked(box_run *st, int fd, const struct ucred *cred) {
    st->b.pidfd = fd;
    st->b.pid = cred->pid;
    st->res->init_pid = cred->pid;
    if (!pidfd_is(st->b.pidfd, cred->pid) || cred->uid < AL_UID_BASE || cred->uid >= AL_UID_BASE + AL_UID_COUNT ||
        cred->gid != (gid_t)cred->uid || al_uid_is_free(cred->uid)) {
        /* nothing is killed through a pidfd that is not the box's: the
         * box ends with its sync socket */
        close(st->b.pidfd);
        st->b.pidfd = -1;
        return al_err(st->err, "fork", EPROTO, "the forked box is not who it says (pid %d, uid %u, gid %u)",
                      (int)cred->pid, (unsigned)cred->uid, (unsigned)cred->gid);
    }
    st->uid = cred->uid;
    st->gid = cred->gid;
    fill_static_controls(&st->res->controls, st->root, st->uid, &st->caps, &st->cfg->limits);
    st->res->forked = true;
    return st->ops ? make_cgroup(&st->b, st->uid, true, &st->join) : 0;
}

/* Sync 1 and 2: the box's maps written, its scratch directories (and a
 * forked box's pidfd, a listener's socket) received. */
static int run_sync(box_run *st, int *ret_listener) {
    const al_box_config *cfg = st->cfg;
    al_error *err = st->err;
    int fds[5] = { -1, -1, -1, -1, -1 }, r;
    unsigned nfds = 5;
    al_msg m = { .type = AL_MSG_GO };
    if (!st->forked) {
        r = cfg->zygote ? write_zygote_maps(st->b.pid, &st->zids, err) : write_maps(st->b.pid, st->uid, st->gid, err);
        if (r < 0 || (r = al_msg_send(st->sv[0], &m, NULL, 0)) < 0) {      /* sync 1: maps written */
            if (!err->step[0])
                al_err(err, "setup", r, "talk to the box: %s", strerror(-r));
            return r;
        }
    }
    /* v1: while the box mounts its root (on another CPU, where there is one) */
    if (st->ops && !st->ops->join_by_clone && !st->forked && (r = make_cgroup(&st->b, st->uid, false, &st->join)) < 0)
        return r;
    struct ucred cred = { 0 };
    if ((r = recv_setup(st->sv[0], &m, fds, &nfds, st->forked ? &cred : NULL, err)) < 0) { /* sync 2: scratch fds received */
        for (unsigned i = 0; i < nfds && i < ELEMENTSOF(fds); i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return r;
    }
    st->workfd = fds[0];
    st->outfd = fds[1];
    st->tmpfd = fds[2];
    unsigned want = st->forked || cfg->listen_port ? 4u : 3u;
    if (m.type != AL_MSG_FDS || nfds != want) {
        for (unsigned i = 3; i < ELEMENTSOF(fds); i++)
            if (fds[i] >= 0)
                close(fds[i]);
        return al_err(err, "setup", EPROTO, "the box did not send its scratch directories");
    }
    if (st->forked)
        return adopt_forked(st, fds[3], &cred);
    *ret_listener = cfg->listen_port ? fds[3] : -1;
    return 0;
}

/* Sync 3: the listener served, the inputs staged, the cgroup joined. */
static int run_stage(box_run *st, int listener) {
    const al_box_config *cfg = st->cfg;
    al_error *err = st->err;
    int r;
    if (cfg->listen_port) {
        /* served from outside before the script can connect to it */
        r = cfg->on_listener ? cfg->on_listener(listener, st->uid, st->gid, cfg->userdata, err)
                             : al_err(err, "listener", EINVAL, "a listener without a server");
        close(listener);
        if (r < 0)
            return r;
    }
    /* a forked box's interpreter runs its warm start already: only the
     * runtime's seed of /tmp is staged now */
    al_box_config seed_only;
    const al_box_config *staged = cfg;
    if (st->forked) {
        seed_only = *cfg;
        seed_only.n_files = 0;
        staged = &seed_only;
    }
    if ((r = stage_all(staged, st->workfd, st->tmpfd, st->uid, st->gid, err)) < 0)
        return r;
    al_msg m = { .type = AL_MSG_GO };
    if ((r = al_msg_send(st->sv[0], &m, st->join.self_fds, st->join.n_self)) < 0) /* sync 3: inputs staged, cgroup made */
        return al_err(err, "setup", r, "the box went away while starting");
    al_cgroup_join_close(&st->join);
    return 0;
}

/* The box running: a warm one handed its run first; supervised until it
 * ends, then until every process of it is dead, its CPU time and memory
 * read. */
static int run_supervise(box_run *st) {
    al_box_result *res = st->res;
    al_error *err = st->err;
    int r;
    int out_r[2] = { st->outp[0][0], st->outp[1][0] };
    if (st->cfg->warm) {
        /* ready, then handed its run: from here the box is that run's */
        uint64_t handed = 0;
        if ((r = warm_start(&st->b, st->wsv[0], out_r, st->workfd, st->uid, st->gid, &st->run, &handed, err)) < 0)
            return r;
        close(st->wsv[0]);
        st->wsv[0] = -1;
        st->rc = st->b.cfg = &st->run;
        st->start = handed;
    }
    const al_box_config *rc = st->rc;
    if (rc->on_started)
        rc->on_started(rc->userdata);
    /* this process, stopped or stuck, does not hold the box past it */
    al_uid_keeper_arm(st->keeper_fd, st->start + rc->limits.wall_ms);
    if ((r = supervise(&st->b, st->sv[0], out_r, st->start, err)) < 0)
        return r;
    if (res->error.step[0]) {
        /* the box reported a failed step (an exec that did not happen) */
        res->reason = AL_REASON_ERROR;
        return -(res->error.err ? res->error.err : EIO);
    }
    /* Nothing is collected while anything of the box could still run. */
    if (st->b.cg) {
        int e = al_cgroup_wait_empty(st->ops, st->b.cg, KILL_GRACE_MS);
        if (e < 0)
            return al_err(err, "kill", e, "processes of the box are still alive in %s", res->cgroup_path);
        al_cgroup_stats cs = { 0 };
        st->ops->stats(st->b.cg, &cs);
        res->cpu_ms = (cs.cpu_usec - (cs.cpu_usec >= st->b.cpu_base_usec ? st->b.cpu_base_usec : 0)) / 1000;
        res->peak_memory_bytes = cs.peak_memory_bytes;
        if (res->reason == AL_REASON_EXITED && cs.oom_kills > 0)
            res->reason = AL_REASON_MEMORY;
        else if (res->reason == AL_REASON_EXITED && cs.pids_max_hits > 0)
            res->reason = AL_REASON_PIDS;
    }
    return 0;
}

/* Its /work, collected to the run's working directory as /out is (the
 * same caps, a budget of their own), but for the box's own files (the
 * script): what it skipped joins the run's skips as "work/PATH". */
static int collect_work(box_run *st, const al_collect_limits *cl) {
    const al_box_config *rc = st->rc;
    for (size_t i = 0; i < rc->n_files; i++) {
        al_fsid saved = al_fsid_enter(st->uid, st->gid);
        unlinkat(st->workfd, rc->files[i].name, 0);
        al_fsid_leave(saved);
    }
    al_box_result w = { 0 };
    /* a working directory's caps are what the next box can stage of it
     * (its files and bytes), not /out's artifact counts: a tree cut at
     * 100 files would lose the rest at the next command */
    al_collect_limits wl = *cl;
    wl.keep_exec = true;
    wl.max_files = rc->limits.stage_files;
    wl.max_file_bytes = rc->limits.stage_bytes;
    wl.max_total_bytes = rc->limits.stage_bytes;
    wl.max_entries = rc->limits.stage_files * 2 + 1000;
    int r = al_collect(st->workfd, rc->work_dirfd, &wl, &w, st->err);
    for (size_t i = 0; r == 0 && i < w.n_skipped; i++) {
        char *rel = NULL;
        if (asprintf(&rel, "work/%s", w.skipped[i].path) < 0)
            r = -ENOMEM;
        else
            r = al_collect_add_skip(st->res, rel, w.skipped[i].why);
        if (r == 0)
            st->res->skipped[st->res->n_skipped - 1].kind = w.skipped[i].kind;
        free(rel);
    }
    st->res->work_collected = r == 0;
    al_box_result_free(&w);
    return r;
}

/* Its /out, collected to the run's out directory. */
static int run_collect(box_run *st) {
    const al_box_config *cfg = st->cfg;
    al_collect_limits cl = {
        .max_files = cfg->limits.max_artifacts, .max_file_bytes = cfg->limits.max_artifact_bytes,
        .max_total_bytes = cfg->limits.max_artifacts_total, .max_depth = cfg->limits.max_depth,
        .max_entries = cfg->limits.max_artifacts * 10 + 1000,
    };
    cl.uid = st->uid;
    cl.gid = st->gid;
    int r = al_collect(st->outfd, st->rc->out_dirfd, &cl, st->res, st->err);
    if (r < 0 || !st->rc->collect_work)
        return r;
    return collect_work(st, &cl);
}

/* What the run holds, let go: its fds, its cgroup (R: the run's result so
 * far, the cgroup's failure if it had none), its zygote's uids. */
static int run_cleanup(box_run *st, int r) {
    al_cgroup_join_close(&st->join);
    for (int i = 0; i < 2; i++) {
        if (st->sv[i] >= 0)
            close(st->sv[i]);
        if (st->wsv[i] >= 0)
            close(st->wsv[i]);
        for (int j = 0; j < 2; j++)
            if (st->outp[i][j] >= 0)
                close(st->outp[i][j]);
    }
    if (st->b.cg) {
        int e = st->ops->destroy(st->b.cg);
        if (e < 0 && r == 0)
            r = al_err(st->err, "cgroup", e, "remove %s: %s", st->res->cgroup_path, strerror(-e));
    }
    zygote_release(&st->zids);
    int fds[] = { st->uid_lock, st->workfd, st->outfd, st->tmpfd, st->devfd, st->keeper_fd };
    for (size_t i = 0; i < ELEMENTSOF(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (r < 0)
        st->res->reason = AL_REASON_ERROR;
    return r;
}

/* The box's life, one step a line: who it is, what it is made with, made
 * (cloned, or forked by its zygote), the sync points with its child side
 * (child.c), its run supervised, its /out collected only once every
 * process of it is dead; then all of it let go. */
int al_box_run(const al_box_config *cfg, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    res->reason = AL_REASON_ERROR;
    box_run st = {
        .cfg = cfg, .res = res, .err = &res->error, .start = al_now_ms(), .root = geteuid() == 0,
        .forked = cfg->fork != NULL, .uid_lock = -1, .workfd = -1, .outfd = -1, .tmpfd = -1, .devfd = -1,
        .keeper_fd = -1, .uid = geteuid(), .gid = getegid(), .sv = { -1, -1 },
        .outp = { { -1, -1 }, { -1, -1 } }, .wsv = { -1, -1 }, .rc = cfg, .join = { .n_self = 0, .clone_fd = -1 },
    };
    st.ops = al_cgroup_pick(&st.caps);
    st.b = (box_ctx){ .cfg = cfg, .res = res, .cg_ops = st.ops, .pid = -1, .pidfd = -1, .forked = st.forked };
    int r = check_extras(cfg, st.err);
    if (r == 0)
        r = run_identity(&st);
    if (r == 0 && cfg->zygote)
        r = zygote_files(&st);
    if (r == 0)
        r = run_channels(&st);
    if (r == 0)
        r = st.forked ? spawn_forked(&st) : spawn_cloned(&st);
    if (r == 0 && (r = spawned(&st)) == 0) {
        int listener = -1;
        if ((r = run_sync(&st, &listener)) < 0 || (r = run_stage(&st, listener)) < 0 ||
            (r = run_supervise(&st)) < 0) {
            res->reason = AL_REASON_ERROR;
            kill_box(&st.b);
            if (st.b.cg)
                al_cgroup_wait_empty(st.ops, st.b.cg, KILL_GRACE_MS);
        } else {
            r = run_collect(&st);
        }
        if (st.b.pid > 0 && !st.forked)
            waitpid(st.b.pid, NULL, 0);
        if (st.b.pidfd >= 0)
            close(st.b.pidfd);
    }
    return run_cleanup(&st, r);
}

/* Whether NAME is a box cgroup nobody owns; *HOLD then keeps it so (its
 * uid's lock) while it is removed. */
static bool stale_box(const char *name, int *hold) {
    unsigned uid;
    int pid, consumed = 0;
    unsigned n;
    if (sscanf(name, "box-%u-%d-%u%n", &uid, &pid, &n, &consumed) == 3 && name[consumed] == '\0')
        return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH; /* rootless: by creator, never reused */
    if (sscanf(name, "box-%u%n", &uid, &consumed) == 1 && name[consumed] == '\0') {
        int fd = al_uid_lock_if_free((uid_t)uid);
        if (fd == -ENOENT)
            return true; /* no lock directory: nobody holds any uid */
        *hold = fd >= 0 ? fd : -1;
        return fd >= 0;
    }
    return false;
}

void al_box_sweep_stale(void) {
    al_cgroup_caps caps;
    const al_cgroup_ops *ops = al_cgroup_pick(&caps);
    if (ops)
        ops->sweep(stale_box);
}
