/*
 * libairlock-box: run one program in a sandbox that exists for that run alone.
 *
 * This is the mechanism only. It knows nothing of HTTP, JSON, tenants or
 * languages: callers decide the policy (argv, limits, inputs) and get a
 * result back. It never prints and never exits the caller. The caller must
 * be single-threaded when it calls al_box_run() (it clones).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"
#include "cgroup.h"
#include "runtime.h"

typedef enum al_reason {
    AL_REASON_EXITED,
    AL_REASON_TIMEOUT,
    AL_REASON_MEMORY,
    AL_REASON_PIDS,
    AL_REASON_OUTPUT_LIMIT,
    AL_REASON_ERROR,
    AL_REASON_CANCELED,           /* the caller asked, through cancel_fd */
    /* the run's packages could not be installed (issue 38): no box was
     * made for it; the box's own ends are the ones above */
    AL_REASON_INSTALL_FAILED,
    _AL_REASON_MAX,
} al_reason;

const char *al_reason_name(al_reason r);

typedef enum al_stream { AL_STREAM_STDOUT, AL_STREAM_STDERR, _AL_STREAM_MAX } al_stream;

typedef struct al_box_limits {
    uint64_t wall_ms;
    uint64_t memory_bytes;
    uint64_t cpu_millis;          /* 1000 = one CPU */
    uint64_t pids;
    uint64_t tmpfs_bytes;         /* each of /work, /out, /tmp, /dev/shm */
    uint64_t tmpfs_inodes;
    uint64_t output_bytes;        /* kept per stream */
    uint64_t max_artifacts;
    uint64_t max_artifact_bytes;
    uint64_t max_artifacts_total;
    uint64_t max_depth;
    uint64_t nofile;
    uint64_t stage_bytes;         /* total bytes staged into /work */
    uint64_t stage_files;
} al_box_limits;

/* The product's defaults; callers change fields within their maxima. */
void al_box_limits_default(al_box_limits *l);

typedef void (*al_output_fn)(al_stream s, const char *buf, size_t len, void *userdata);

typedef struct al_box_file {
    const char *name;             /* one path component, placed in /work */
    const void *data;
    size_t len;
    mode_t mode;
} al_box_file;

typedef struct al_box_config al_box_config;

/* A warm box (issue 14's pools): its interpreter is started before its run
 * is known. The box is made with CONFIG's runtime, limits and files (the
 * warm start, src/lang/warm/) and ARGV is exec'd at once with fd
 * AL_BOX_WARM_FD a Unix stream socket to the box's parent; the interpreter
 * writes one byte on it when it is ready. Then HANDOFF is called (it may block until the run
 * comes) to fill RUN, a copy of the box's config, with the run's own files,
 * inputs, stdin, argv (the same interpreter and script; its arguments are
 * the run's), environment, output callbacks, cancel fd and out directory;
 * its runtime, limits and network stay the box's. The box's files are
 * removed from /work, the run's staged as a cold box's would be, and the
 * interpreter is sent the run's arguments and environment (box.c's
 * warm_message: a length, then NUL-terminated strings) with its stdin (a
 * passed fd) on that socket, and answers one byte when it has them. The
 * run's wall clock and CPU time start there; what the box printed before
 * is discarded. */
/* The warm start's socket: above every fd a runtime opens as it starts
 * (Node's own are 3-16), so that once it is closed the run's first open
 * gets the number a cold start's would; below the box's own (moved above
 * 63). The interpreter is told it in AIRLOCK_WARM_FD. */
#define AL_BOX_WARM_FD 63

/* How much a warm start may hold (its preloads) beyond the run's memory
 * limit, until its hand-off, which sets the run's own limit (a box that
 * holds more than that by then is not used: its run goes cold). */
#define AL_WARM_MEMORY_HEADROOM (256ULL << 20)

typedef struct al_box_warm {
    /* the interpreter is ready, its box holding MEMORY_BYTES (may be NULL) */
    void (*on_ready)(void *ud, uint64_t memory_bytes);
    int (*handoff)(void *ud, al_box_config *run, al_error *err);
    void *ud;
    uint64_t ready_timeout_ms;    /* how long the interpreter may take to be ready */
    /* readable (or at its end) when the run may have come: only then is
     * HANDOFF called, and a box that dies while it waits ends at once;
     * -1: the run is here already (HANDOFF is called once the box is ready) */
    int run_fd;
    bool handed;                  /* set once HANDOFF filled the run: a failure after is the run's to retry cold */
} al_box_warm;

/* A zygote (issue 14's fork server, src/lang/warm/zygote.py and
 * src/box/zygote.c): a box whose
 * interpreter forks warm boxes instead of running a script. Its user
 * namespace maps uid and gid 0 to a host uid of its own, and 1 to
 * AL_ZYGOTE_SLOTS to one more host uid each, never reused while it lives:
 * one for each box it forks that is alive. It keeps CAP_SETUID and
 * CAP_SETGID in that namespace, to write its boxes' maps, and nothing
 * else; its /proc is whole (a box's own proc mounts only where one is);
 * it loads no seccomp filter (it never runs a run's code, and could not
 * fork its boxes under one: each loads the filter itself, before the
 * run's first instruction). Its PID 1 lives until its last box is gone.
 * REQ_FD, the box's end of the request socket (SOCK_SEQPACKET), is its
 * AL_BOX_WARM_FD, and is closed here once the zygote has it (so that the
 * other end sees the zygote's end); its warm start is python.py with
 * zygote.py beside it, and its boxes' PID 1 is fork_init.c's, which this
 * stages in its /work as AL_BOX_FORK_SO. Needs root. */
#define AL_ZYGOTE_SLOTS 32
#define AL_BOX_FORK_SO "_airlock_fork.so"
typedef struct al_box_zygote {
    int req_fd;
} al_box_zygote;

/* A warm box forked by a zygote instead of made here: its request (the
 * box's limits, its sync socket, output pipes and warm start's socket)
 * goes on FD, a zygote's request socket. The box is then this process's
 * as a made one is: its cgroup, staging, hand-off, supervision and
 * collection are the same, and its pid and uids are the kernel's word
 * (SCM_CREDENTIALS), not the zygote's. Only for a warm box with no
 * listener. */
typedef struct al_box_fork {
    int fd;
} al_box_fork;

/* Whether boxes can be forked here: root, cgroup v1 (v2's is joined by
 * clone, which a fork by another process cannot), and an architecture
 * fork_init.c knows the clone of (x86_64, aarch64). */
bool al_box_can_fork(void);

/* A host directory bound read-only into a cold box (a run's packages'
 * layer, issue 38): HOST_FD an O_PATH | O_DIRECTORY fd of it, opened by
 * the caller beforehand, and its path HOST_PATH. A mount can be cloned
 * only in the mount namespace it is in, so the box opens HOST_PATH again
 * in its own (as a runtime's tree is opened, before it takes the sandbox
 * identity) and refuses it unless it is the very directory of HOST_FD
 * (device and inode): a path swapped meanwhile is never mounted. It is
 * mounted at BOX_PATH (absolute, each component a plain name; not beneath
 * what the box already has there: its directories are made in the root's
 * own tmpfs) read-only, nosuid, nodev, through inodes of its own
 * (al_mount_own_tree). At most AL_BOX_BINDS_MAX. */
#define AL_BOX_BINDS_MAX 4
#define AL_BOX_ENV_EXTRA_MAX 8
typedef struct al_box_bind {
    int host_fd;
    const char *host_path;
    const char *box_path;
} al_box_bind;

/* Whether PATH may be a bind's BOX_PATH: absolute, at most 128 bytes, of
 * components of [A-Za-z0-9._-] that are not "." or "..", its first not one
 * the box makes itself (usr, etc, bin, lib*, sbin, dev, proc, work, out,
 * tmp, skill). */
bool al_box_bind_path_ok(const char *path);

struct al_box_config {
    const al_runtime *runtime;
    char *const *argv;            /* argv[0] is an absolute path inside the box */
    char *const *envp;
    const al_box_file *files;     /* written into /work (e.g. the script) */
    size_t n_files;
    const char *const *inputs;    /* host paths staged into /work by base name */
    size_t n_inputs;
    int stdin_fd;                 /* -1: /dev/null */
    int out_dirfd;                /* host directory to copy /out into, or -1 */
    /* A working directory that outlives the box (an E2B sandbox's home):
     * WORK_IN's entries (a host tree written by earlier boxes: read beneath
     * it, no link followed, within the staging caps) are staged as /work's
     * own, beside FILES (an entry named as one of FILES is left out: the
     * script's name is the box's), and when COLLECT_WORK, /work (less
     * FILES) is collected into WORK_DIRFD as /out is, with its caps and
     * name rules, after every process of the box is dead. */
    const char *work_in;          /* NULL: none */
    bool collect_work;
    int work_dirfd;
    al_box_limits limits;
    al_output_fn on_output;       /* live output, may be NULL */
    void (*on_started)(void *userdata); /* the script is about to run, may be NULL */
    void *userdata;
    int cancel_fd;                /* readable (or closed) = kill the box; -1 for none */
    /* > 0: a TCP listener on 127.0.0.1:LISTEN_PORT inside the box's network
     * namespace, made before the script runs and handed to ON_LISTENER
     * (which serves it from outside: the egress proxy). The box closes its
     * own copy after the call. */
    uint16_t listen_port;
    int (*on_listener)(int fd, uid_t host_uid, gid_t host_gid, void *userdata, al_error *err);
    al_box_warm *warm;            /* NULL: a cold box, the script exec'd when staged */
    const al_box_zygote *zygote;  /* non-NULL: this box is a zygote */
    const al_box_fork *fork;      /* non-NULL: the box is forked by a zygote */
    /* Read-only binds (above) and environment entries ("NAME=value")
     * beside ENVP, for a cold box only: a warm box, a zygote or a forked
     * box with either is refused (their root and environment are made
     * before their run is known). */
    const al_box_bind *binds;
    size_t n_binds;
    char *const *env_extra;
    size_t n_env_extra;
};

typedef struct al_artifact {
    char *path;                   /* relative to /out, raw bytes of the names */
    uint64_t size;
    char sha256[65];
} al_artifact;

/* Why the collect left an entry out, as a kind (WHY says it in words):
 * what an install reads to fail a layer over its caps or count its links */
typedef enum al_skip_kind {
    AL_SKIP_OTHER,                /* unreadable, vanished, a name that is not text... */
    AL_SKIP_CAP,                  /* a cap of the collect: files, bytes, depth, entries */
    AL_SKIP_LINK,                 /* a symbolic link, never followed */
    AL_SKIP_SPECIAL,              /* a FIFO, socket or device: not a regular file */
} al_skip_kind;

typedef struct al_skip {
    char *path;
    char *why;
    al_skip_kind kind;
} al_skip;

typedef enum al_level {
    AL_LEVEL_BOUNDARY,            /* a kernel-enforced boundary */
    AL_LEVEL_BOUNDARY_CONDITIONAL, /* a boundary, given a condition the detail states */
    AL_LEVEL_APPLIED,             /* applied, with known gaps */
    AL_LEVEL_UNCONFIRMED,         /* asked for, not verified on this host */
    AL_LEVEL_NOT_ENFORCED,
    _AL_LEVEL_MAX,
} al_level;

const char *al_level_name(al_level l);

typedef struct al_control {
    al_level level;
    char detail[512];
} al_control;

typedef struct al_controls {
    al_control userns, seccomp, no_new_privs, network, memory, pids, cpu, tmpfs, caps;
    char cgroup_version[8];       /* "v1", "v2" or "none" */
    uid_t host_uid;
    bool host_uid_unique;
} al_controls;

typedef struct al_box_result {
    int exit_code;                /* -1 when killed by a signal or not started */
    int signal;
    al_reason reason;
    char *out[_AL_STREAM_MAX];    /* captured output, NUL-terminated, capped */
    size_t out_len[_AL_STREAM_MAX];
    uint64_t out_total[_AL_STREAM_MAX];
    bool out_truncated[_AL_STREAM_MAX];
    uint64_t wall_ms, cpu_ms, peak_memory_bytes;
    al_artifact *artifacts;
    size_t n_artifacts;
    al_skip *skipped;
    size_t n_skipped;
    al_controls controls;
    pid_t init_pid;               /* host pid of the box's PID 1 */
    char driver[16];              /* "" (native) or "docker" */
    char engine_runtime[16];      /* docker: "runc" or "runsc" */
    char engine_image[80];        /* docker: the image id it ran on */
    bool pooled;                  /* docker: its container was made ahead of need (each is used once) */
    bool forked;                  /* native: forked by a zygote (box.h's al_box_fork) */
    bool work_collected;          /* /work was collected whole into work_dirfd (what it skipped is in SKIPPED, as "work/PATH") */
    char cgroup_path[256];
    al_error error;               /* set when reason == AL_REASON_ERROR */
} al_box_result;

/*
 * Run one box to completion. Returns 0 when the box ran (whatever the script
 * did: see result->reason), or a negative errno when airlock itself failed;
 * result->error then names the step. Always free the result.
 */
int al_box_run(const al_box_config *cfg, al_box_result *result);
void al_box_result_free(al_box_result *r);

/* A box run elsewhere (a container's, a pod's, a cloud sandbox's): STREAM's
 * LEN bytes of its output to CFG's callback, and kept in RES up to the
 * per-stream cap, as the native box keeps them. True when the stream has
 * now passed the cap (the run is over its output limit). */
bool al_box_result_output(const al_box_config *cfg, al_box_result *res, al_stream stream, const char *buf,
                          size_t len);

/* After a crash: kill and remove the cgroups of boxes whose airlock is gone
 * (their uid lock is free, or their creating process no longer exists). */
void al_box_sweep_stale(void);
