/*
 * cgroup v2 backend, written to Documentation/admin-guide/cgroup-v2.rst:
 * memory.max + memory.swap.max=0, pids.max, cpu.max; accounting from
 * cpu.stat, memory.peak (5.19+), memory.events and pids.events; cgroup.kill
 * (5.14+) kills every process of the box at once, orphans included.
 */
#include "cgroup.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/vfs.h>
#include <time.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

struct al_cgroup {
    char dir[PATH_MAX];
    bool kill;
};

static int find_root(char *buf, size_t len) {
    const char *env = getenv("AIRLOCK_CGROUP_ROOT");
    const char *cands[] = { env, "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
    for (size_t i = 0; i < ELEMENTSOF(cands); i++) {
        struct statfs sf;
        if (!cands[i])
            continue;
        if (statfs(cands[i], &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC) {
            snprintf(buf, len, "%s", cands[i]);
            return 0;
        }
        if (env)
            break; /* an explicit root that is not cgroup2 is an error */
    }
    return -ENOENT;
}

static bool has_controller(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

/* The cgroup the boxes' cgroups go under (al_cgroup_parent), in TOP;
 * their directory, TOP/airlock, in BUF. */
static int base_dir(char *buf, size_t len, char *top, size_t top_len) {
    char root[PATH_MAX], parent[PATH_MAX];
    int r = find_root(root, sizeof root);
    if (r < 0)
        return r;
    if ((r = al_cgroup_parent(NULL, parent, sizeof parent)) < 0)
        return r;
    if (snprintf(top, top_len, "%s%s", root, parent) >= (int)top_len ||
        snprintf(buf, len, "%s/airlock", top) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

static int v2_detect(al_cgroup_caps *caps) {
    char root[PATH_MAX];
    if (find_root(root, sizeof root) < 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "no cgroup2 hierarchy mounted");
        return -ENOENT;
    }
    _cleanup_free_ char *ctl = NULL;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/cgroup.controllers", root);
    if (al_read_small(AT_FDCWD, path, 4096, &ctl, NULL) < 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "cannot read %s", path);
        return -ENOENT;
    }
    caps->memory = has_controller(ctl, "memory");
    caps->swap = caps->memory;
    caps->pids = has_controller(ctl, "pids");
    caps->cpu = has_controller(ctl, "cpu");
    snprintf(path, sizeof path, "%s/cgroup.kill", root);
    /* the root has no cgroup.kill; a child does when the kernel has it */
    caps->kill = access(root, W_OK) == 0;
    if (access(root, W_OK) != 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "%s is not writable (not root, or not delegated)", root);
        return -EACCES;
    }
    /* Only chosen by default when it can enforce the limits; a host whose
     * controllers are bound to v1 (hybrid) uses v1 unless told otherwise. */
    const char *want = getenv("AIRLOCK_CGROUP");
    if (!(caps->memory && caps->pids) && !(want && strcmp(want, "v2") == 0)) {
        snprintf(caps->why_not, sizeof caps->why_not,
                 "cgroup2 at %s lacks the memory and pids controllers (bound to v1?)", root);
        return -ENOTSUP;
    }
    if (!caps->memory || !caps->pids || !caps->cpu)
        snprintf(caps->why_not, sizeof caps->why_not, "cgroup2 at %s offers only: %.*s", root,
                 (int)strcspn(ctl, "\n"), ctl);
    return 0;
}

static void enable_controllers(const char *dir) {
    /* one at a time: a missing controller must not stop the others */
    al_cgroup_write(dir, "cgroup.subtree_control", "+memory");
    al_cgroup_write(dir, "cgroup.subtree_control", "+pids");
    al_cgroup_write(dir, "cgroup.subtree_control", "+cpu");
}

static int v2_create(const char *name, const al_cgroup_limits *lim, al_cgroup **ret, al_error *err) {
    char base[PATH_MAX], top[PATH_MAX];
    int r = base_dir(base, sizeof base, top, sizeof top);
    if (r < 0)
        return al_err(err, "cgroup", -r, "no cgroup2 hierarchy, or AIRLOCK_CGROUP_PARENT names no cgroup");
    /* the root's, or the delegated cgroup's (which holds no process: al_cgroup_adopt_own) */
    enable_controllers(top);
    if (mkdir(base, 0755) < 0 && errno != EEXIST)
        return al_err(err, "cgroup", errno, "mkdir %s: %m", base);
    enable_controllers(base);

    _cleanup_free_ al_cgroup *cg = calloc(1, sizeof *cg);
    if (!cg)
        return -ENOMEM;
    if (snprintf(cg->dir, sizeof cg->dir, "%s/%s", base, name) >= (int)sizeof cg->dir)
        return al_err(err, "cgroup", ENAMETOOLONG, "cgroup name too long");
    if ((r = al_cgroup_mkdir_fresh(cg->dir)) < 0)
        return al_err(err, "cgroup", -r, "mkdir %s: %s", cg->dir, strerror(-r));

    char v[64];
    if (lim->memory_bytes) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)lim->memory_bytes);
        if (al_cgroup_write(cg->dir, "memory.max", v) == 0) {
            al_cgroup_write(cg->dir, "memory.swap.max", "0");
        }
    }
    if (lim->pids) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)lim->pids);
        al_cgroup_write(cg->dir, "pids.max", v);
    }
    if (lim->cpu_millis) {
        snprintf(v, sizeof v, "%llu 100000", (unsigned long long)(lim->cpu_millis * 100));
        al_cgroup_write(cg->dir, "cpu.max", v);
    }
    char kp[PATH_MAX + 16];
    snprintf(kp, sizeof kp, "%s/cgroup.kill", cg->dir);
    cg->kill = access(kp, W_OK) == 0;
    *ret = TAKE_PTR(cg);
    return 0;
}

static int v2_join(al_cgroup *cg, al_cgroup_join *j, al_error *err) {
    j->n_self = 0;
    j->clone_fd = open(cg->dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (j->clone_fd < 0)
        return al_err(err, "cgroup", errno, "open %s: %m", cg->dir);
    return 0;
}

static int v2_kill_all(al_cgroup *cg) {
    if (cg->kill)
        return al_cgroup_write(cg->dir, "cgroup.kill", "1");
    /* Before 5.14: freeze so nothing forks while we read the list, then kill. */
    al_cgroup_write(cg->dir, "cgroup.freeze", "1");
    int r = al_cgroup_kill_listed(cg->dir);
    al_cgroup_write(cg->dir, "cgroup.freeze", "0");
    return r;
}

static int v2_nprocs(al_cgroup *cg) { return al_cgroup_count_procs(cg->dir); }

static int v2_stats(al_cgroup *cg, al_cgroup_stats *st) {
    uint64_t v;
    if (al_cgroup_read_key(cg->dir, "cpu.stat", "usage_usec", &v) == 0)
        st->cpu_usec = v;
    if (al_cgroup_read_key(cg->dir, "cpu.stat", "nr_throttled", &v) == 0)
        st->nr_throttled = v;
    if (al_cgroup_read_u64(cg->dir, "memory.peak", &v) == 0)
        st->peak_memory_bytes = v;
    if (al_cgroup_read_u64(cg->dir, "memory.current", &v) == 0)
        st->memory_bytes = v;
    if (al_cgroup_read_key(cg->dir, "memory.events", "oom_kill", &v) == 0)
        st->oom_kills = v;
    if (al_cgroup_read_key(cg->dir, "pids.events", "max", &v) == 0)
        st->pids_max_hits = v;
    if (al_cgroup_read_u64(cg->dir, "pids.current", &v) == 0)
        st->pids_current = v;
    return 0;
}

static int v2_set_memory(al_cgroup *cg, uint64_t bytes) {
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)bytes);
    /* memory.swap.max stays 0; memory.peak is reset only per open fd (6.12+),
     * so the peak stays the box's whole life */
    return al_cgroup_write(cg->dir, "memory.max", v);
}

static int v2_destroy(al_cgroup *cg) {
    int r = rmdir(cg->dir) < 0 ? -errno : 0;
    free(cg);
    return r;
}

static const char *v2_path(al_cgroup *cg) { return cg->dir; }

static void v2_sweep(bool (*stale)(const char *name, int *hold)) {
    char base[PATH_MAX], top[PATH_MAX];
    if (base_dir(base, sizeof base, top, sizeof top) == 0)
        al_cgroup_sweep_dir(base, stale);
}

int al_cgroup_adopt_own(al_error *err) {
    const char *want = getenv("AIRLOCK_CGROUP_PARENT");
    al_cgroup_caps caps;
    if (!want || strcmp(want, "self") != 0 || al_cgroup_pick(&caps) != &al_cgroup_v2_ops)
        return 0;
    char own[PATH_MAX], root[PATH_MAX], leaf[PATH_MAX + 16];
    int r = al_cgroup_parent(NULL, own, sizeof own);
    if (r < 0)
        return al_err(err, "cgroup", -r, "AIRLOCK_CGROUP_PARENT=self: no cgroup v2 line in /proc/self/cgroup");
    if (own[0]) {
        /* the root cgroup alone may hold processes and give controllers */
        find_root(root, sizeof root);
        snprintf(leaf, sizeof leaf, "%s%s/daemon", root, own);
        if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
            return al_err(err, "cgroup", errno, "mkdir %s: %m", leaf);
        if ((r = al_cgroup_write(leaf, "cgroup.procs", "0")) < 0)
            return al_err(err, "cgroup", -r, "move into %s: %s", leaf, strerror(-r));
    }
    /* the helpers start in the leaf: they are told the parent by name */
    if (setenv("AIRLOCK_CGROUP_PARENT", own[0] ? own : "/", 1) < 0)
        return al_err(err, "cgroup", errno, "setenv: %m");
    return 0;
}

const al_cgroup_ops al_cgroup_v2_ops = {
    .version = "v2",
    .join_by_clone = true,
    .detect = v2_detect,
    .create = v2_create,
    .join = v2_join,
    .kill_all = v2_kill_all,
    .nprocs = v2_nprocs,
    .stats = v2_stats,
    .destroy = v2_destroy,
    .set_memory = v2_set_memory,
    .path = v2_path,
    .sweep = v2_sweep,
};
