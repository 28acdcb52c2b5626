/* The box's syscall filter: compiled by libseccomp outside the box, loaded
 * inside with one raw syscall as the very last step before exec. */
#pragma once

#include <linux/filter.h>

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

int al_seccomp_compile(al_seccomp_prog *ret, al_error *err);
/* Async-signal-safe: used in the child after clone. */
int al_seccomp_load(const al_seccomp_prog *p);
void al_seccomp_prog_free(al_seccomp_prog *p);
