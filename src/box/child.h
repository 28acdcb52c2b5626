#pragma once

#include "box.h"
#include "seccomp.h"

typedef struct al_child_args {
    int sock;                     /* child end of the sync socket */
    int out_w[_AL_STREAM_MAX];    /* write ends of the stdout/stderr pipes */
    int stdin_fd;                 /* -1: /dev/null inside the box */
    int runtime_fd;               /* the runtime's open() result, or -1 */
    int dev_fd;                   /* the box's own /dev (al_mount_dev), or -1: the host's nodes bound */
    const al_runtime *runtime;
    const al_box_limits *limits;
    char *const *argv;
    char *const *envp;
    bool unique_uid;              /* RLIMIT_NPROC can be a second pids layer */
    uint16_t listen_port;         /* > 0: a listener on 127.0.0.1 for the parent */
    int warm_fd;                  /* >= 0: the warm start's socket, the script's AL_BOX_WARM_FD */
    bool zygote;                  /* a zygote's box (box.h's al_box_zygote) */
    /* read-only binds made in the root (their fds the box's copies, kept
     * as its other fds are), and environment entries after ENVP's */
    const al_box_bind *binds;
    size_t n_binds;
    int bind_fds[AL_BOX_BINDS_MAX];
    char *const *env_extra;
    size_t n_env_extra;
} al_child_args;

/* The box side of the sequence; never returns. */
_Noreturn void al_child_main(const al_child_args *a);
