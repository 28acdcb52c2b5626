#include "proto.h"

#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

int al_msg_send(int sock, const al_msg *m, const int *fds, unsigned nfds) {
    struct iovec iov = { .iov_base = (void *)m, .iov_len = sizeof *m };
    union {
        char buf[CMSG_SPACE(sizeof(int) * AL_MSG_MAX_FDS)];
        struct cmsghdr align;
    } u;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds > AL_MSG_MAX_FDS)
        return -EINVAL;
    if (nfds) {
        memset(&u, 0, sizeof u);
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    ssize_t n;
    do
        n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof *m ? 0 : (n < 0 ? -errno : -EIO);
}

static int recv_msg(int sock, al_msg *m, int *fds, unsigned *nfds, struct ucred *ret_cred) {
    struct iovec iov = { .iov_base = m, .iov_len = sizeof *m };
    union {
        char buf[CMSG_SPACE(sizeof(int) * AL_MSG_MAX_FDS) + CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } u;
    bool have_cred = false;
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    unsigned got = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (ret_cred && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS &&
            c->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
            memcpy(ret_cred, CMSG_DATA(c), sizeof *ret_cred);
            have_cred = true;
            continue;
        }
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        unsigned k = (unsigned)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int tmp[AL_MSG_MAX_FDS];
        if (k > AL_MSG_MAX_FDS)
            k = AL_MSG_MAX_FDS;
        memcpy(tmp, CMSG_DATA(c), sizeof(int) * k);
        for (unsigned i = 0; i < k; i++) {
            if (fds && nfds && got < *nfds)
                fds[got++] = tmp[i];
            else
                close(tmp[i]);
        }
    }
    if (nfds)
        *nfds = got;
    if (n == 0)
        return 0;
    if (n != (ssize_t)sizeof *m || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
        return -EBADMSG;
    if (ret_cred && !have_cred)
        return -EPROTO;
    return 1;
}

int al_msg_recv(int sock, al_msg *m, int *fds, unsigned *nfds) { return recv_msg(sock, m, fds, nfds, NULL); }

int al_msg_recv_creds(int sock, al_msg *m, int *fds, unsigned *nfds, struct ucred *ret_cred) {
    return recv_msg(sock, m, fds, nfds, ret_cred);
}

