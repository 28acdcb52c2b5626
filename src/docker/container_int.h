/*
 * What the Docker box's own files share, and nothing outside src/docker
 * may use: one run's state and the steps one file takes for another.
 * container.c makes the container and runs the execs in it (the script's,
 * and tar's for tar_io.c), tar_io.c moves the run's files in and out,
 * held.c makes and checks the containers held ahead of need.
 */
#pragma once

#include "docker.h"
#include "../box/collect.h"

#define LABEL_BOX "dev.airlock.box"
#define LABEL_UID "dev.airlock.uid"
/* how long the holder outlives the wall clock, at most */
#define HOLD_MARGIN_S 300

/* after a kill, how long until the script's processes must be gone */
#define KILL_GRACE_MS 5000
#define PIDS_TICK_MS 250
#define PIDS_STREAK 4
/* host threads gVisor's sandbox (Sentry, gofer) takes beyond the script's */
#define RUNSC_PIDS_OVERHEAD 256
/* this close to that cap when it died: it died of the cap */
#define RUNSC_PIDS_NEAR 64
/* this close to its memory cap when it died: it died of the cap */
#define MEM_NEAR (8u << 20)
/* after the script's main process ended, how long its output may drain */
#define DRAIN_MS 1000
/* how long an exec without a deadline may take to start (the daemon's
 * containerd, or runsc's exec, starting its process) */
#define EXEC_START_MS 30000

/* One container's run (al_docker_run), or its making ahead of need
 * (al_docker_hold). */
typedef struct dbox {
    const al_docker_opts *o;
    const al_box_config *cfg;
    al_box_result *res;
    al_engine e;
    bool engine_open;
    char id[80];                  /* the container */
    uid_t holder, uid;
    int holder_lock, uid_lock;
    pid_t init_pid;
    char cg_pids[512], cg_mem[512], cg_cpu[512]; /* its cgroup dirs on this host ("" unknown) */
    char scratch[64];             /* our tmpfs: stage and collect */
    bool scratch_mounted, unshared;
    uint64_t pids_hits_seen, pids_current_seen; /* the host cgroup's, last read */
    uint64_t mem_peak_seen, oom_seen;
    int rootfd;                   /* runc: the container's root, through its init (O_PATH) */
    int init_fd;                  /* pidfd of the container's init */
    int main_fd;                  /* runc: pidfd of the script's exec, kept for how it ended */
    bool killed_whole;            /* airlock killed the container: /out is lost */
    bool own;                     /* made here, so removed here (a held one is its owner's) */
    bool inside_clean;            /* gVisor: a kill from inside found none of the script's left */
    uint64_t hold_s;              /* how long its holder lives */
    char tar_err[512];            /* the last tar's stderr, its first 511 bytes */
    int keeper_fd;                /* the keeper's pipe (keeper.c): its end is this run's */
} dbox;

/* An exec's output: the script's (capped, live) or a tar's. */
typedef struct sink {
    /* the script's: capped, live */
    const al_box_config *cfg;
    char *buf[2];
    size_t len[2], cap;
    uint64_t total[2];
    bool truncated[2], over;
    /* a tar's: stdout into FD up to MAX bytes */
    int fd;
    uint64_t max, written;
    bool too_big;
    char err_text[512];
    size_t err_len;
} sink;

/* ---- container.c ---- */

/* A call to the daemon that must answer 2xx: its answer in *RET. */
int al_docker_call_ok(dbox *b, const char *method, const char *path, json_t *body, json_t **ret, al_error *err);
/* An exec of ARGV (ENVP, in CWD; IN: with a stdin) in B's container, its
 * id in RET_ID; how it exited (its code, or -1). */
int al_docker_exec_create(dbox *b, char *const *argv, char *const *envp, const char *cwd, bool in, char ret_id[80],
                          al_error *err);
int al_docker_exec_exit(dbox *b, const char *id, al_error *err);
/* Run exec ID to its end with IN_FD's bytes as its stdin (-1: none), its
 * output to S through ON_DATA (al_docker_on_script_data for the script's).
 * For the script: DEADLINE (ms, 0 none), CANCEL_FD and the caps, with
 * *KILL_REASON set when it was stopped. */
int al_docker_exec_pump(dbox *b, const char *id, int in_fd, void (*on_data)(int, const char *, size_t, void *), sink *s,
                        uint64_t deadline, int cancel_fd, al_reason *kill_reason, al_error *err);
void al_docker_on_script_data(int stream, const char *buf, size_t len, void *ud);
/* runc: SIGKILL every process of the container's cgroup that runs as the
 * script's uid, by pidfd; how many were alive. */
int al_docker_kill_script_procs(dbox *b);
/* The whole container killed (its /out is lost). */
void al_docker_kill_container(dbox *b);
/* gVisor: the script's processes killed from inside, by an exec. */
int al_docker_kill_inside(dbox *b);
/* 1 when the daemon says the container runs, 0 when it says it does not,
 * -errno when it could not be asked. */
int al_docker_container_state(dbox *b);
bool al_docker_container_running(dbox *b);

/* The body of POST /containers/create for B's container of IMAGE_ID:
 * written once, for a run's container and to check a held one against. */
json_t *al_docker_create_body(dbox *b, const char *image_id, al_error *err);
/* Create B's container (B->id; B->own). */
int al_docker_create(dbox *b, const char *image_id, al_error *err);
/* Start it, then al_docker_inspect_init(B, false). */
int al_docker_start_and_inspect(dbox *b, al_error *err);
/* B's running container: its init (pid, pidfd, cgroups); CHECK (may be
 * NULL: held.c's al_docker_same_box) passes the daemon's record of it
 * first. */
int al_docker_inspect_init(dbox *b, int (*check)(dbox *b, json_t *ins, al_error *err), al_error *err);
/* Remove B's container if it is B's own to remove. */
void al_docker_remove_container(dbox *b);
/* Run tar's ARGV in the box as the script's uid to its end, stdin from
 * IN_FD, stdout to OUT_FD (at most MAX bytes, *TOO_BIG past it); its
 * stderr kept in B->tar_err. 0, or -errno (-EIO: tar failed). */
int al_docker_exec_tar(dbox *b, char *const *argv, int in_fd, int out_fd, uint64_t max, bool *too_big,
                       al_error *err);

/* ---- tar_io.c ---- */

/* Our scratch tmpfs of BYTES (B->scratch), in a mount namespace of our
 * own; and its end. */
int al_docker_scratch_mount(dbox *b, uint64_t bytes, al_error *err);
void al_docker_scratch_unmount(dbox *b);
/* runc: the container's root (B->rootfd), and its tmpfs NAME beneath it. */
int al_docker_open_root(dbox *b, al_error *err);
int al_docker_open_scratch(dbox *b, const char *name, al_error *err);
/* Stage the run's files into the directories OPEN_DIR opens. */
int al_docker_stage_into(dbox *b, int (*open_dir)(dbox *, const char *, al_error *), al_error *err);
/* gVisor: stage through our scratch and a tar exec. */
int al_docker_stage(dbox *b, al_error *err);
/* /out collected: straight from the container's tmpfs (runc), or through
 * a tar exec and our scratch (gVisor). */
int al_docker_collect_direct(dbox *b, al_error *err);
int al_docker_collect(dbox *b, al_error *err);
/* The native box's collection caps of /out for B's run, reading as UID. */
al_collect_limits al_docker_collect_limits(const dbox *b, uid_t uid);
/* gVisor: the box's directory /DIR ("out", "work") as a tar through an
 * exec, unpacked beneath a scratch tmpfs of our own (BEFORE, if any, then
 * given B and that directory's fd), collected from there into HOSTFD (-1:
 * hashed only) with LIM's caps, what it left out in INTO's skips (paths
 * relative to /DIR); the scratch let go after. 0 when collected, 1 when
 * the box's tar failed on what the script left there (a skip of "." says
 * so: nothing was collected), else -errno. */
int al_docker_tar_collect(dbox *b, const char *dir, const al_collect_limits *lim, int hostfd,
                          void (*before)(dbox *, int), al_box_result *into, al_error *err);

/* ---- work_io.c ---- */

/* A sandbox's run (CFG->collect_work): the box's /work, less the box's own
 * files (the script), collected into CFG->work_dirfd with the native box's
 * name rules and the caps of what the next box can stage, its skips joining
 * the run's as "work/PATH"; RES->work_collected set when it came back whole
 * (else the sandbox keeps the home it had). Straight from the container's
 * tmpfs (runc) or through a tar exec (gVisor). */
int al_docker_collect_work(dbox *b, al_error *err);

/* ---- keeper.c ---- */

/* B's started container given a keeper (box/uidpool.h; B->keeper_fd): a
 * process of its own holding the locks of B's uids (B's, else
 * B->o->lock_fds) until the container's init has ended, which kills and
 * removes the container once this run has ended, killed or not. */
int al_docker_keeper_start(dbox *b, al_error *err);
/* This run is done with its container (after removing it, if its own). */
void al_docker_keeper_done(dbox *b);

/* ---- held.c ---- */

/* 0 when the daemon's record INS of B's held container shows it made as
 * this run's own would be, else -ESTALE naming what differs. */
int al_docker_same_box(dbox *b, json_t *ins, al_error *err);
/* Take B->o->held as this run's container, if it is still fit for it. */
int al_docker_use_held(dbox *b, al_error *err);
