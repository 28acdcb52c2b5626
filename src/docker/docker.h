/*
 * The Docker box: one run in one container of its own, made over the
 * Engine API (engine.h), with the same configuration and result as the
 * native box (box/box.h), so nothing above the driver knows which ran.
 *
 * The container holds the run and nothing else: a holder process (tini and
 * `sleep`, as a uid of the run's own) keeps it alive while the script, its
 * inputs' staging and the collection of /out are execs in it, each as the
 * script's uid (another uid of the run's own): so every process the script
 * left can be killed before /out is read, without killing the container
 * whose tmpfs holds /out. Inputs go in and /out comes out as tar streams
 * through execs (Docker's archive API cannot see a tmpfs); both pass
 * through a tmpfs of the caller's own, where the native box's staging and
 * collection rules apply unchanged. Mechanism only: never logs, never exits.
 */
#pragma once

#include <jansson.h>

#include "../box/box.h"
#include "engine.h"

typedef enum al_docker_runtime {
    AL_DOCKER_RUNC,               /* the daemon's runc: a shared kernel */
    AL_DOCKER_RUNSC,              /* gVisor, registered with the daemon as "runsc" */
    _AL_DOCKER_RUNTIME_MAX,
} al_docker_runtime;

const char *al_docker_runtime_name(al_docker_runtime r);
/* "runc" or "runsc"; -EINVAL for anything else */
int al_docker_runtime_from_name(const char *name, al_docker_runtime *ret);

/* A container made ahead of need (al_docker_hold) and started, that no
 * script has run in: its owner holds its two uids' locks and removes it
 * (al_docker_release) once the one run it is handed to has ended. */
typedef struct al_docker_held {
    char id[80];
    char image_id[80];            /* Docker's id of the image it runs */
    uid_t holder, uid;            /* its holder's uid, the script's */
    /* the owner's locks of them (-1 in the run's helper, which holds
     * copies passed to it: they outlive an owner killed before the run
     * ends) */
    int holder_lock, uid_lock;
    int64_t hold_until_s;         /* its holder ends by then (seconds since the epoch) */
    /* the owner's keeper of it (al_docker_keep_held), if it has one (pid
     * > 0): the write end of its stdin, closed once the container is gone */
    pid_t keeper_pid;
    int keeper_fd;
} al_docker_held;

typedef struct al_docker_opts {
    const char *socket;           /* NULL: DOCKER_HOST, else /var/run/docker.sock */
    al_docker_runtime runtime;
    const char *image_dir;        /* the airlock image's directory (DIR/sha256-<hex>, its tree in rootfs/) */
    const char *image_digest;     /* its digest, 64 hex */
    const al_docker_held *held;   /* NULL, or the container to run in: used if still fit, else one is made */
    /* -1, or (with HELD) a pipe from HELD's owner: if it has hung up when
     * the run ends, the owner is gone (killed) and will not remove the
     * container, so the run removes it (holding HELD's locks, if passed,
     * until it has) */
    int owner_fd;
    /* without HELD: the uids of the container to make, which the owner
     * holds the locks of and removes its container by (airlock-box-UID)
     * if this run cannot; 0: the run takes its own. (With HELD unfit, the
     * container made instead takes HELD's uids, the owner's too.) */
    uid_t holder, uid;
    /* NULL, or a skill's bundle (a host directory, readable by all):
     * bound read-only at the container's /skill, as the native box binds
     * it (a container made ahead of need has none, so is not used) */
    const char *skill_dir;
    /* the locks of HELD's or of HOLDER's and UID's, as passed to this
     * process (fds > 2), or 0: this run took its own */
    int lock_fds[2];
} al_docker_opts;

/* Run CFG as al_box_run does (CFG->runtime must be an image's: its digest
 * is the image's). 0 when the box ran, else -errno with the step named. */
int al_docker_run(const al_docker_opts *o, const al_box_config *cfg, al_box_result *res);

/* Make and start a container for runs with limits L of O's image and
 * runtime, whose holder waits IDLE_S seconds for its run before a run's
 * own wall clock and margin: what al_docker_run would make, before the
 * run. Only of an image the daemon holds already (-ENOENT: the first run
 * of an image loads it). The caller owns it (*RET's locks) and removes it. */
int al_docker_hold(const al_docker_opts *o, const al_box_limits *l, uint64_t idle_s, al_docker_held *ret,
                   al_error *err);
/* Be the keeper (box/uidpool.h) of the held container ID, in this
 * process: hold LOCK_FDS (its holder's and its uid's, passed) until its
 * init has ended, and kill and remove it once RUN_FD (its owner's pipe)
 * has ended. Returns only when it cannot (-errno: not running, not
 * airlock's, its init not found). */
int al_docker_keep_held(const char *socket, al_docker_runtime runtime, const char *id, const int lock_fds[2], int run_fd,
                        al_error *err);
/* Whether H's container still runs (its holder may have died idle). */
bool al_docker_held_alive(const char *socket, const al_docker_held *h);
/* Remove H's container and give back its uids (its keeper, if it has one,
 * told and reaped): true. False when the daemon did not say it is gone: H
 * keeps its uids, to be tried again (a container still running as a uid
 * must not lose the uid's lock). */
bool al_docker_release(const char *socket, al_docker_held *h);

/* The Docker image of airlock image DIGEST if the daemon holds it already
 * (its label checked), else -ENOENT: never loads (a load forks a writer of
 * the tree, which a threaded caller must not). */
int al_docker_image_loaded(al_engine *e, const char *digest, char ret_id[80], al_error *err);

/* The Docker image of airlock image DIGEST (64 hex) in directory DIR:
 * loaded into the daemon on first use, labelled and tagged by digest, and
 * its label checked on every use. RET_ID gets Docker's image id. */
int al_docker_image(al_engine *e, const char *dir, const char *digest, char ret_id[80], al_error *err);

/* What the driver enforces here, control by control, for RUNTIME. */
void al_docker_controls(al_docker_runtime runtime, al_controls *c);
/* The same as a document for doctor, /healthz and /v1/settings: {control:
 * {level, detail}}, and the daemon's facts ("daemon": {...}) when SOCKET
 * answers (else why not, as "daemon": {level not-enforced, detail}). */
json_t *al_docker_capabilities(const char *socket, al_docker_runtime runtime);
/* 0 when runs can start on this daemon with RUNTIME, else why not. */
int al_docker_probe(const char *socket, al_docker_runtime runtime, al_error *err);

/* Remove the containers of airlock boxes that no live airlock holds (their
 * uid's lock is free), as the native box's stale cgroups are. */
void al_docker_sweep(const char *socket);

/* airlock's seccomp policy (box/seccomp_policy.c) as Docker's JSON profile
 * (malloc'd compact text). */
char *al_docker_seccomp_profile(al_error *err);
