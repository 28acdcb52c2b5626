/* The box's syscall filter: compiled by libseccomp outside the box, loaded
 * inside with one raw syscall as the very last step before exec. */
#pragma once

#include <linux/filter.h>
#include <stdint.h>

#include "../util/util.h"

/* Two filters, stacked: the kernel applies the stricter answer of the two.
 * The second exists because libseccomp cannot express "allow ioctl unless
 * its low 32 bits are one of these" in one default-deny rule. */
typedef struct al_seccomp_prog {
    struct {
        struct sock_filter *insns;
        unsigned short len;
    } f[2];
} al_seccomp_prog;

/* The policy as rules, for whatever renders it: each rule of filter 0
 * (default EPERM) or 1 (default allow) is given to EMIT with libseccomp's
 * action and argument comparisons (header types only). */
struct scmp_arg_cmp;
typedef int (*al_seccomp_emit)(void *ud, uint32_t action, const char *name, unsigned n,
                               const struct scmp_arg_cmp *cmp, al_error *err);
int al_seccomp_rules(int filter, al_seccomp_emit emit, void *ud, al_error *err);

/* Compile the policy with libseccomp (build time and tests). */
int al_seccomp_compile(al_seccomp_prog *ret, al_error *err);
/* The policy as compiled when airlock was built: no work at run time. */
int al_seccomp_builtin(al_seccomp_prog *ret, al_error *err);
/* Load P, then the built-in policy: async-signal-safe, no allocation. */
int al_seccomp_load(const al_seccomp_prog *p);
int al_seccomp_load_builtin(void);
static inline void al_seccomp_prog_free(al_seccomp_prog *p) {
    for (int i = 0; i < 2; i++) {
        free(p->f[i].insns);
        p->f[i].insns = NULL;
        p->f[i].len = 0;
    }
}
