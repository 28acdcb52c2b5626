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
/* Whether FD is an open file of UID's lock (the same file as its path):
 * a lock passed by another process is checked so before it is relied on. */
bool al_uid_lock_is(int fd, uid_t uid);
