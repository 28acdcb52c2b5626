/* Messages between the parent and the box's PID 1 on one SOCK_SEQPACKET
 * pair; the numbered sync points match comments on both sides. */
#pragma once

#include <stdint.h>

#include "../util/util.h"

enum {
    AL_MSG_GO = 1,                /* parent -> child: go on to the next step */
    AL_MSG_FDS,                   /* child -> parent: /work and /out dir fds */
    AL_MSG_ERROR,                 /* child -> parent: a step failed */
    AL_MSG_STATUS,                /* init -> parent: the script's wait status */
};

#define AL_MSG_MAX_FDS 8

typedef struct al_msg {
    uint32_t type;
    int32_t status;
    al_error err;
} al_msg;

/* A forked box's request to its zygote (box.c's fork_request to
 * zygote.c), with AL_FORK_FDS fds: the box's sync socket to its parent,
 * its stdout and stderr pipes' write ends, its warm start's socket and its
 * /dev (a detached mount, al_mount_dev). The limits its PID 1 sets, the
 * rest being its cgroup's, set by the parent. */
#define AL_FORK_FDS 5
typedef struct al_fork_request {
    uint64_t tmpfs_bytes, tmpfs_inodes, pids, nofile;
    /* how long the box may live at most (its start, its run and the
     * keeper's grace): its PID 1 ends it then, whatever its helper does */
    uint64_t lifetime_ms;
} al_fork_request;

/* tests/integration/test_warm_fork.py writes requests and reads the
 * answers to them by hand ("=5Q", "=Ii48si512s") */
_Static_assert(sizeof(al_fork_request) == 40, "al_fork_request's layout is the tests'");
_Static_assert(sizeof(al_msg) == 572, "al_msg's layout is the tests'");

int al_msg_send(int sock, const al_msg *m, const int *fds, unsigned nfds);

/* Receive one message; passed fds land in FDS (up to *NFDS). 0 on EOF. */
int al_msg_recv(int sock, al_msg *m, int *fds, unsigned *nfds);
/* The same, with the sender's pid, uid and gid as the kernel vouches for
 * them (SO_PASSCRED must be set on SOCK before the message is sent);
 * -EPROTO when they did not come. */
struct ucred;
int al_msg_recv_creds(int sock, al_msg *m, int *fds, unsigned *nfds, struct ucred *ret_cred);
