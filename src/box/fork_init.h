/* A box a zygote forks (fork_init.c), as its loop (zygote.c) asks for
 * one; both are only in airlock-fork.so. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* A request's fds and limits. */
typedef struct al_fork_args {
    int32_t sync;                 /* the box's sync socket to its parent */
    int32_t out, err;             /* the write ends of its stdout and stderr */
    int32_t chan;                 /* its warm start's socket */
    int32_t go;                   /* read end: a byte once its maps are written */
    int32_t dev;                  /* its /dev (al_mount_dev), made by its parent */
    uint64_t tmpfs_bytes, tmpfs_inodes, pids, nofile;
    uint64_t lifetime_ms;         /* its PID 1 ends the box this long after its start */
} al_fork_args;

/* The box for a request: its pid here (or -errno), 0 in the run's
 * process; the clone's PID 1 never returns. The caller (zygote.c) wraps
 * it as a fork (PyOS_BeforeFork, PyOS_AfterFork_Parent or _Child). */
long al_fork_box(const al_fork_args *args);
