/*
 * cgroup v1 backend: one directory per controller (memory, pids, cpu,
 * cpuacct), found through /proc/self/mountinfo so co-mounted controllers
 * (cpu,cpuacct) share a directory. Each hierarchy costs every run a mkdir,
 * a join and an rmdir, so only those that limit or account are touched.
 *
 * v1 has no cgroup.kill, and no freezer is needed for one: every process
 * of the box is in its pid namespace, and SIGKILL to the namespace's init
 * (the caller's kill_box) has the kernel kill the rest and refuse any new
 * process there, a fork racing the kill included. kill_all here is the
 * second layer: SIGKILL to each process the pids cgroup lists, repeated by
 * al_cgroup_wait_empty until none is left.
 */
#include "cgroup.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>

enum { C_MEMORY, C_PIDS, C_CPU, C_CPUACCT, _C_MAX };
static const char *const ctl_names[_C_MAX] = { "memory", "pids", "cpu", "cpuacct" };

/* The mount points the last detect found: the create of the same run uses
 * them rather than parse mountinfo a second time. */
static struct {
    bool valid;
    char mnt[_C_MAX][PATH_MAX];
} detected;

struct al_cgroup {
    char mnt[_C_MAX][PATH_MAX];   /* mount point of each controller, "" if absent */
    char dir[_C_MAX][PATH_MAX];   /* this box's directory in it */
    bool made[_C_MAX];
};

static bool opt_has(const char *opts, const char *name) {
    size_t n = strlen(name);
    for (const char *p = opts; (p = strstr(p, name)); p += n)
        if ((p == opts || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* mountinfo: ... mount-point ... - fstype source super-options */
static int find_mounts_of(const char *const *names, int n, char mnt[][PATH_MAX]) {
    _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char line[4096];
    for (int i = 0; i < n; i++)
        mnt[i][0] = '\0';
    while (fgets(line, sizeof line, f)) {
        char *sep = strstr(line, " - ");
        if (!sep)
            continue;
        char fstype[32], source[256], opts[1024];
        if (sscanf(sep + 3, "%31s %255s %1023s", fstype, source, opts) != 3)
            continue;
        if (strcmp(fstype, "cgroup") != 0)
            continue;
        char mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
            continue;
        for (int i = 0; i < n; i++)
            if (!mnt[i][0] && opt_has(opts, names[i]))
                snprintf(mnt[i], PATH_MAX, "%s", mp);
    }
    return 0;
}

/*
 * The usual layout first: each controller's hierarchy at /sys/fs/cgroup/NAME,
 * a cgroup mount whose airlock/ directory (made by an earlier run) holds the
 * controller's own file, which proves the controller is bound there (a
 * root cgroup has no pids.max). Reading mountinfo took 0.1-0.2 ms of every
 * run here (the kernel renders every mount of the host for it); these
 * stats take a few microseconds. Co-mounted controllers are one
 * superblock: they get one mount point, as mountinfo gives them. Anything
 * else (a first run, a controller elsewhere or missing) is mountinfo's to
 * say.
 */
static bool standard_mounts(char mnt[_C_MAX][PATH_MAX]) {
    static const char *const own_file[_C_MAX] = { "memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us",
                                                  "cpuacct.usage" };
    dev_t dev[_C_MAX];
    for (int i = 0; i < _C_MAX; i++) {
        char p[PATH_MAX];
        struct statfs sf;
        struct stat st;
        char parent[PATH_MAX / 2];
        snprintf(mnt[i], PATH_MAX, "/sys/fs/cgroup/%s", ctl_names[i]);
        if (al_cgroup_parent(ctl_names[i], parent, sizeof parent) < 0)
            return false;
        snprintf(p, sizeof p, "%s%s/airlock/%s", mnt[i], parent, own_file[i]);
        if (statfs(mnt[i], &sf) < 0 || sf.f_type != CGROUP_SUPER_MAGIC || stat(mnt[i], &st) < 0 ||
            access(p, F_OK) < 0)
            return false;
        dev[i] = st.st_dev;
        for (int j = 0; j < i; j++)
            if (dev[j] == dev[i]) {
                memcpy(mnt[i], mnt[j], PATH_MAX);
                break;
            }
    }
    return true;
}

static int find_mounts(char mnt[_C_MAX][PATH_MAX]) {
    if (standard_mounts(mnt))
        return 0;
    return find_mounts_of(ctl_names, _C_MAX, mnt);
}

static int v1_detect(al_cgroup_caps *caps) {
    char mnt[_C_MAX][PATH_MAX];
    int r = find_mounts(mnt);
    detected.valid = false;
    if (r < 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "cannot read /proc/self/mountinfo");
        return r;
    }
    if (!mnt[C_MEMORY][0] || !mnt[C_PIDS][0]) {
        snprintf(caps->why_not, sizeof caps->why_not, "cgroup v1 memory and pids controllers are not mounted");
        return -ENOENT;
    }
    if (access(mnt[C_MEMORY], W_OK) != 0 || access(mnt[C_PIDS], W_OK) != 0) {
        snprintf(caps->why_not, sizeof caps->why_not, "%s is not writable (not root?)", mnt[C_MEMORY]);
        return -EACCES;
    }
    char p[PATH_MAX + 32];
    caps->memory = true;
    snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", mnt[C_MEMORY]);
    caps->swap = access(p, F_OK) == 0;
    caps->pids = true;
    caps->cpu = mnt[C_CPU][0] != '\0';
    caps->kill = true; /* the pid namespace, then what the pids cgroup lists */
    if (!caps->swap)
        snprintf(caps->why_not, sizeof caps->why_not, "no swap accounting (memory.memsw.*): swap cannot be capped");
    memcpy(detected.mnt, mnt, sizeof detected.mnt);
    detected.valid = true;
    return 0;
}

static int v1_create(const char *name, const al_cgroup_limits *lim, al_cgroup **ret, al_error *err) {
    _cleanup_free_ al_cgroup *cg = calloc(1, sizeof *cg);
    if (!cg)
        return -ENOMEM;
    int r = 0;
    if (detected.valid)
        memcpy(cg->mnt, detected.mnt, sizeof cg->mnt);
    else if ((r = find_mounts(cg->mnt)) < 0)
        return al_err(err, "cgroup", r, "read /proc/self/mountinfo");
    for (int i = 0; i < _C_MAX; i++) {
        if (!cg->mnt[i][0])
            continue;
        /* co-mounted controllers share one directory: make it once */
        bool dup = false;
        for (int j = 0; j < i; j++)
            if (strcmp(cg->mnt[i], cg->mnt[j]) == 0) {
                memcpy(cg->dir[i], cg->dir[j], PATH_MAX);
                dup = true;
            }
        if (dup)
            continue;
        char base[PATH_MAX], parent[PATH_MAX];
        if ((r = al_cgroup_parent(ctl_names[i], parent, sizeof parent)) < 0)
            return al_err(err, "cgroup", -r, "AIRLOCK_CGROUP_PARENT names no %s cgroup", ctl_names[i]);
        if (snprintf(base, sizeof base, "%s%s/airlock", cg->mnt[i], parent) >= (int)sizeof base ||
            snprintf(cg->dir[i], PATH_MAX, "%s/%s", base, name) >= PATH_MAX)
            return al_err(err, "cgroup", ENAMETOOLONG, "cgroup path too long");
        /* airlock/ exists but at a host's first run: try the box's own first */
        r = al_cgroup_mkdir_fresh(cg->dir[i]);
        if (r == -ENOENT) {
            if (mkdir(base, 0755) < 0 && errno != EEXIST)
                return al_err(err, "cgroup", errno, "mkdir %s: %m", base);
            r = al_cgroup_mkdir_fresh(cg->dir[i]);
        }
        if (r < 0) {
            int e = -r;
            for (int j = 0; j < i; j++)
                if (cg->made[j])
                    rmdir(cg->dir[j]);
            return al_err(err, "cgroup", e, "mkdir %s: %s", cg->dir[i], strerror(e));
        }
        cg->made[i] = true;
    }

    char v[64];
    const char *mem = cg->dir[C_MEMORY];
    snprintf(v, sizeof v, "%llu", (unsigned long long)lim->memory_bytes);
    if (lim->memory_bytes) {
        r = al_cgroup_write(mem, "memory.limit_in_bytes", v);
        if (r < 0)
            goto fail;
        /* memsw is memory+swap: equal to the memory limit means no swap
         * (and swappiness 0 keeps an idle warm box's pages in memory, so
         * its hand-off's lower memsw limit is never below its usage) */
        al_cgroup_write(mem, "memory.memsw.limit_in_bytes", v);
        al_cgroup_write(mem, "memory.swappiness", "0");
    }
    if (lim->pids) {
        snprintf(v, sizeof v, "%llu", (unsigned long long)lim->pids);
        r = al_cgroup_write(cg->dir[C_PIDS], "pids.max", v);
        if (r < 0)
            goto fail;
    }
    if (lim->cpu_millis && cg->dir[C_CPU][0]) {
        /* a new cgroup's period is the kernel's default, 100 ms (it is
         * not inherited): the quota is in its units */
        snprintf(v, sizeof v, "%llu", (unsigned long long)(lim->cpu_millis * 100));
        r = al_cgroup_write(cg->dir[C_CPU], "cpu.cfs_quota_us", v);
        if (r < 0)
            goto fail;
    }
    *ret = TAKE_PTR(cg);
    return 0;
fail:
    for (int j = 0; j < _C_MAX; j++)
        if (cg->made[j])
            rmdir(cg->dir[j]);
    return al_err(err, "cgroup", r, "set limits in %s: %s", mem, strerror(-r));
}

static int v1_join(al_cgroup *cg, al_cgroup_join *j, al_error *err) {
    j->n_self = 0;
    j->clone_fd = -1;
    for (int i = 0; i < _C_MAX; i++) {
        if (!cg->made[i])
            continue;
        char p[PATH_MAX + 16];
        snprintf(p, sizeof p, "%s/tasks", cg->dir[i]);
        int fd = open(p, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            int e = errno;
            al_cgroup_join_close(j);
            return al_err(err, "cgroup", e, "open %s: %s", p, strerror(e));
        }
        j->self_fds[j->n_self++] = fd;
    }
    return 0;
}

static int v1_kill_all(al_cgroup *cg) { return al_cgroup_kill_listed(cg->dir[C_PIDS]); }

static int v1_nprocs(al_cgroup *cg) { return al_cgroup_count_procs(cg->dir[C_PIDS]); }

static int v1_stats(al_cgroup *cg, al_cgroup_stats *st) {
    uint64_t v;
    if (cg->dir[C_CPUACCT][0] && al_cgroup_read_u64(cg->dir[C_CPUACCT], "cpuacct.usage", &v) == 0)
        st->cpu_usec = v / 1000;
    if (cg->dir[C_CPU][0] && al_cgroup_read_key(cg->dir[C_CPU], "cpu.stat", "nr_throttled", &v) == 0)
        st->nr_throttled = v;
    if (al_cgroup_read_u64(cg->dir[C_MEMORY], "memory.max_usage_in_bytes", &v) == 0)
        st->peak_memory_bytes = v;
    if (al_cgroup_read_u64(cg->dir[C_MEMORY], "memory.usage_in_bytes", &v) == 0)
        st->memory_bytes = v;
    if (al_cgroup_read_key(cg->dir[C_MEMORY], "memory.oom_control", "oom_kill", &v) == 0)
        st->oom_kills = v;
    if (al_cgroup_read_key(cg->dir[C_PIDS], "pids.events", "max", &v) == 0)
        st->pids_max_hits = v;
    if (al_cgroup_read_u64(cg->dir[C_PIDS], "pids.current", &v) == 0)
        st->pids_current = v;
    return 0;
}

static int v1_set_memory(al_cgroup *cg, uint64_t bytes) {
    const char *mem = cg->dir[C_MEMORY];
    char v[32];
    snprintf(v, sizeof v, "%llu", (unsigned long long)bytes);
    /* memsw (memory+swap) may never be below the memory limit: raised
     * before it, lowered after it (the first write fails then; on a host
     * without swap accounting both do, harmlessly) */
    bool swap = al_cgroup_write(mem, "memory.memsw.limit_in_bytes", v) == 0;
    int r = al_cgroup_write(mem, "memory.limit_in_bytes", v);
    if (r == 0 && !swap)
        al_cgroup_write(mem, "memory.memsw.limit_in_bytes", v);
    if (r == 0)
        al_cgroup_write(mem, "memory.max_usage_in_bytes", "0");
    return r;
}

static int v1_destroy(al_cgroup *cg) {
    int ret = 0;
    for (int i = 0; i < _C_MAX; i++)
        if (cg->made[i] && rmdir(cg->dir[i]) < 0 && errno != ENOENT)
            ret = -errno;
    free(cg);
    return ret;
}

static const char *v1_path(al_cgroup *cg) { return cg->dir[C_MEMORY]; }

static void v1_sweep(bool (*stale)(const char *name, int *hold)) {
    /* freezer: boxes of airlock versions that still made a directory there */
    static const char *const names[] = { "memory", "pids", "cpu", "cpuacct", "freezer" };
    char mnt[ELEMENTSOF(names)][PATH_MAX];
    if (find_mounts_of(names, (int)ELEMENTSOF(names), mnt) < 0)
        return;
    for (size_t i = 0; i < ELEMENTSOF(names); i++) {
        if (!mnt[i][0])
            continue;
        char base[2 * PATH_MAX + 16], parent[PATH_MAX];
        if (al_cgroup_parent(names[i], parent, sizeof parent) < 0)
            continue;
        snprintf(base, sizeof base, "%s%s/airlock", mnt[i], parent);
        al_cgroup_sweep_dir(base, stale);
    }
}

const al_cgroup_ops al_cgroup_v1_ops = {
    .version = "v1",
    .join_by_clone = false,
    .detect = v1_detect,
    .create = v1_create,
    .join = v1_join,
    .kill_all = v1_kill_all,
    .nprocs = v1_nprocs,
    .stats = v1_stats,
    .destroy = v1_destroy,
    .set_memory = v1_set_memory,
    .path = v1_path,
    .sweep = v1_sweep,
};
