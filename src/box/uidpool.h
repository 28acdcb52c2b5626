/* Host uids for boxes: each concurrent box gets its own, never root and
 * never the host's shared nobody, so RLIMIT_NPROC, file ownership and
 * signals are never shared between boxes (SECURITY.md J2). */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "../util/util.h"

#define AL_UID_BASE 1900000000u
#define AL_UID_COUNT 65536u

/* Reserve a uid; the lock lives as long as *ret_lockfd is open. */
int al_uid_acquire(uid_t *ret_uid, int *ret_lockfd, al_error *err);

/* True when no live airlock holds UID's lock (a box of it would be stale);
 * the answer may be old by the time it is read: what removes a stale box
 * holds the lock while it does (al_uid_lock_if_free). */
bool al_uid_is_free(uid_t uid);
/* UID's lock, held (the fd), if nobody holds it; -errno otherwise. */
int al_uid_lock_if_free(uid_t uid);
/* A box's keeper: a process of its own, out of the caller's session, that
 * holds LOCKS (the box's uids') until the process PIDFD refers to (the
 * box's PID 1, or a container's init) has ended, so that they are never
 * free while anything of the box runs, whenever the caller dies. Once the
 * caller has ended (the pipe *RET_FD is closed, by it or by its death): if
 * KILL_INIT, PIDFD's process is sent SIGKILL (a PID 1: its whole pid
 * namespace with it), then ON_END(UD) runs in the keeper (UD is its copy
 * of the caller's memory as of this call). The caller closes *RET_FD when
 * it is done with the box. Only from a single-threaded process (it forks). */
typedef struct al_uid_keeper {
    const int *locks;
    size_t n_locks;
    int pidfd;
    bool kill_init;
    void (*on_end)(void *ud);
    void *ud;
    /* once the box is gone and its locks let go, when its caller went
     * first: what the caller would have cleaned up (a native box's
     * cgroup: al_box_sweep_stale, which takes each free uid's lock first) */
    void (*after)(void);
} al_uid_keeper;
int al_uid_keeper_start(const al_uid_keeper *k, int *ret_fd, al_error *err);
/* How long past a box's own deadline its keeper ends it, if the caller,
 * alive but not running (stopped, or stuck), has not: the caller's own
 * kill and its grace come well before. */
#define AL_KEEPER_GRACE_MS 30000
/* Tell the keeper of *FD that the box's script must be over by UNTIL_MS
 * (al_now_ms's clock) and AL_KEEPER_GRACE_MS: past that, the keeper ends the
 * box as at the caller's end. */
void al_uid_keeper_arm(int fd, uint64_t until_ms);
/* ... and that it is (every process of the script is dead): what remains
 * of the box (a container's holder, while /out is read) is the caller's. */
void al_uid_keeper_disarm(int fd);
/* The keeper's own loop, in the calling process, RUN_FD's end standing for
 * the caller's: for a process that is already one of its own (the
 * service's keeper of a container made ahead of need). Never returns. */
_Noreturn void al_uid_keep(const al_uid_keeper *k, int run_fd);

/* Whether FD is an open file of UID's lock (the same file as its path):
 * a lock passed by another process is checked so before it is relied on. */
bool al_uid_lock_is(int fd, uid_t uid);
