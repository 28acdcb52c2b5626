/* Loading the box's filter. The BPF comes from seccomp_bpf.h, generated at
 * build time from seccomp_policy.c, so a run spends nothing compiling it. */
#include "seccomp.h"

#include <linux/seccomp.h>
#include <string.h>
#include <sys/syscall.h>

#include "seccomp_bpf.h"

static int copy(const struct sock_filter *src, size_t n, struct sock_filter **ret, unsigned short *ret_len) {
    *ret = malloc(n * sizeof *src);
    if (!*ret)
        return -ENOMEM;
    memcpy(*ret, src, n * sizeof *src);
    *ret_len = (unsigned short)n;
    return 0;
}

int al_seccomp_builtin(al_seccomp_prog *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (copy(al_seccomp_bpf_allow, ELEMENTSOF(al_seccomp_bpf_allow), &ret->f[0].insns, &ret->f[0].len) < 0 ||
        copy(al_seccomp_bpf_ioctl, ELEMENTSOF(al_seccomp_bpf_ioctl), &ret->f[1].insns, &ret->f[1].len) < 0) {
        al_seccomp_prog_free(ret);
        return al_err(err, "seccomp", ENOMEM, "no memory for the filter");
    }
    return 0;
}

int al_seccomp_load_builtin(void) {
    al_seccomp_prog p = { .f = {
        { (struct sock_filter *)al_seccomp_bpf_allow, (unsigned short)ELEMENTSOF(al_seccomp_bpf_allow) },
        { (struct sock_filter *)al_seccomp_bpf_ioctl, (unsigned short)ELEMENTSOF(al_seccomp_bpf_ioctl) },
    } };
    return al_seccomp_load(&p);
}

int al_seccomp_load(const al_seccomp_prog *p) {
    /* the ioctl filter first: the allow-list, once loaded, would refuse
     * seccomp() itself */
    for (int i = 1; i >= 0; i--) {
        struct sock_fprog prog = { .len = p->f[i].len, .filter = p->f[i].insns };
        /* TSYNC: every thread gets it (there is one, but say so anyway). */
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) != 0)
            return -errno;
    }
    return 0;
}
