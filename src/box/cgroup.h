/*
 * cgroups for one box: memory, pids, cpu limits, accounting and a kill that
 * reaches every process of the box. Two backends (v1, v2) behind one table.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

typedef struct al_cgroup al_cgroup;

typedef struct al_cgroup_limits {
    uint64_t memory_bytes;
    uint64_t pids;
    uint64_t cpu_millis;
} al_cgroup_limits;

typedef struct al_cgroup_stats {
    uint64_t cpu_usec;
    uint64_t peak_memory_bytes;
    uint64_t memory_bytes;        /* in use now */
    uint64_t oom_kills;
    uint64_t pids_max_hits;
    uint64_t pids_current;
    uint64_t nr_throttled;
} al_cgroup_stats;

/* What a backend can enforce on this host (filled by al_cgroup_detect). */
typedef struct al_cgroup_caps {
    const char *version;          /* "v1", "v2", or "none" */
    bool memory, swap, pids, cpu, kill;
    char why_not[200];            /* why something is missing */
} al_cgroup_caps;

/*
 * How a new box enters its cgroup without anyone writing a pid into
 * cgroup.procs: that write takes a global lock whose first use waits for an
 * RCU grace period (4-20 ms measured here), on every run.
 *  - v1: the box's first process writes "0" (itself, one thread) into each
 *    hierarchy's "tasks" file, which the kernel migrates without the global
 *    lock. The fds are opened by the parent (open-time credentials decide)
 *    and closed by the child right after, long before any script runs.
 *  - v2: clone3(CLONE_INTO_CGROUP) creates the box inside its cgroup.
 */
#define AL_CGROUP_JOIN_MAX 8
typedef struct al_cgroup_join {
    int self_fds[AL_CGROUP_JOIN_MAX];
    unsigned n_self;
    int clone_fd;                 /* cgroup dir fd for CLONE_INTO_CGROUP, or -1 */
} al_cgroup_join;

/* In the child: join through the self fds, then close them. */
int al_cgroup_join_self(al_cgroup_join *j);
void al_cgroup_join_close(al_cgroup_join *j);

typedef struct al_cgroup_ops {
    const char *version;
    /* true: the cgroup must exist before the box is cloned (v2); false: it
     * can be made while the box's namespaces are being created (v1) */
    bool join_by_clone;
    int (*detect)(al_cgroup_caps *caps);
    int (*create)(const char *name, const al_cgroup_limits *lim, al_cgroup **ret, al_error *err);
    int (*join)(al_cgroup *cg, al_cgroup_join *ret, al_error *err);
    int (*kill_all)(al_cgroup *cg);         /* SIGKILL every process, orphans included */
    int (*nprocs)(al_cgroup *cg);           /* processes left, or -errno */
    int (*stats)(al_cgroup *cg, al_cgroup_stats *st);
    int (*destroy)(al_cgroup *cg);          /* remove the directories (must be empty) */
    /* a new memory limit (swap still none), and the peak counted afresh
     * where the kernel can: a warm box's hand-off to its run */
    int (*set_memory)(al_cgroup *cg, uint64_t bytes);
    const char *(*path)(al_cgroup *cg);
    /* Kill and remove every box cgroup that STALE says nobody owns. */
    void (*sweep)(bool (*stale)(const char *name, int *hold));
} al_cgroup_ops;

extern const al_cgroup_ops al_cgroup_v1_ops;
extern const al_cgroup_ops al_cgroup_v2_ops;

/*
 * Pick the backend for this host: AIRLOCK_CGROUP=v1|v2|none overrides.
 * Returns NULL (and caps->version "none") when no usable hierarchy exists.
 */
const al_cgroup_ops *al_cgroup_pick(al_cgroup_caps *caps);

/*
 * Where the boxes' cgroups go: under "airlock/" at the root of each
 * hierarchy, or, with AIRLOCK_CGROUP_PARENT set, under "airlock/" in the
 * cgroup it names ("/system.slice/airlock.service"), or "self": this
 * process's own (systemd's Delegate=yes gives a unit its own subtree, and
 * nothing outside it is the unit's to change). The path of that cgroup in
 * the hierarchy whose /proc/self/cgroup line names controller CTL (NULL: the
 * v2 line) goes to BUF: "" for the root. -EINVAL when the setting or
 * /proc/self/cgroup does not name one.
 */
int al_cgroup_parent(const char *ctl, char *buf, size_t len);
/*
 * A daemon started with AIRLOCK_CGROUP_PARENT=self on cgroup v2 leaves its
 * own cgroup for a leaf beneath it ("daemon"): v2 lets a cgroup that holds
 * processes give no controller to its children. Its path is then written
 * into AIRLOCK_CGROUP_PARENT for the helpers it starts (which are in the
 * leaf). Nothing to do otherwise (v1 has no such rule).
 */
int al_cgroup_adopt_own(al_error *err);

/* Helpers shared by the backends. */
int al_cgroup_write(const char *dir, const char *file, const char *value);
int al_cgroup_read_u64(const char *dir, const char *file, uint64_t *ret);
/* Find "KEY N" in a flat-keyed file such as memory.events. */
int al_cgroup_read_key(const char *dir, const char *file, const char *key, uint64_t *ret);
int al_cgroup_parse_key(const char *text, const char *key, uint64_t *ret);
int al_cgroup_count_procs(const char *dir);
/* mkdir DIR; if it exists (left by an airlock that was killed while holding
 * the same uid), kill what is in it, remove it and make it afresh. */
int al_cgroup_mkdir_fresh(const char *dir);
/* Sweep the box-* directories under BASE (one hierarchy). */
void al_cgroup_sweep_dir(const char *base, bool (*stale)(const char *name, int *hold));
int al_cgroup_kill_listed(const char *dir);
int al_cgroup_wait_empty(const al_cgroup_ops *ops, al_cgroup *cg, uint64_t timeout_ms);
