/*
 * unit-seccomp: exec a command under the seccomp filters systemd installs
 * for the options of deploy/airlock.service (test_ops_unit.py), where no
 * systemd is PID 1 to install them: SystemCallArchitectures=native,
 * LockPersonality=yes, RestrictRealtime=yes, RestrictSUIDSGID=yes,
 * RestrictAddressFamilies= (--families), and SystemCallFilter=~ and
 * ProtectClock=yes's @clock (--deny, the names systemd-analyze
 * syscall-filter gives); and, to show why the unit leaves it off,
 * MemoryDenyWriteExecute=yes (--mdwe). Like systemd: no_new_privs first,
 * EPERM for a denied call, EAFNOSUPPORT for a family, SIGSYS for another ABI.
 *
 * usage: unit-seccomp [--families N,N,...] [--deny NAME]... [--mdwe] -- COMMAND [ARG]...
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif
#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

static scmp_filter_ctx ctx;

static void rule(uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return; /* not on this architecture: systemd skips it too */
    int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
    if (r < 0) {
        fprintf(stderr, "unit-seccomp: %s: %s\n", name, strerror(-r));
        exit(125);
    }
}

/* RestrictSUIDSGID=yes: no file made or changed to setuid or setgid. */
static void no_suid(void) {
    static const struct { const char *name; unsigned mode_arg; int flags_arg; } calls[] = {
        { "chmod", 1, -1 }, { "fchmod", 1, -1 }, { "fchmodat", 2, -1 }, { "fchmodat2", 2, -1 },
        { "mkdir", 1, -1 }, { "mkdirat", 2, -1 }, { "mknod", 1, -1 }, { "mknodat", 2, -1 },
        { "creat", 1, -1 }, { "open", 2, 1 }, { "openat", 3, 2 },
    };
    static const unsigned bits[] = { S_ISUID, S_ISGID };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
        for (size_t b = 0; b < 2; b++) {
            struct scmp_arg_cmp c[2] = { SCMP_CMP(calls[i].mode_arg, SCMP_CMP_MASKED_EQ, bits[b], bits[b]) };
            unsigned n = 1;
            if (calls[i].flags_arg >= 0)
                c[n++] = (struct scmp_arg_cmp)SCMP_CMP((unsigned)calls[i].flags_arg, SCMP_CMP_MASKED_EQ, O_CREAT,
                                                       O_CREAT);
            rule(SCMP_ACT_ERRNO(EPERM), calls[i].name, n, c);
        }
}

int main(int argc, char **argv) {
    bool family_ok[AF_MAX] = { false };
    bool families = false;
    int i = 1;
    ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return 125;
    /* SystemCallArchitectures=native: the native ABI alone (x32 and i386 are not) */
    seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--deny") == 0 && i + 1 < argc) {
            rule(SCMP_ACT_ERRNO(EPERM), argv[++i], 0, NULL);
        } else if (strcmp(argv[i], "--mdwe") == 0) {
            /* no mapping both writable and executable, none made executable later */
            struct scmp_arg_cmp wx = SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_WRITE | PROT_EXEC, PROT_WRITE | PROT_EXEC);
            struct scmp_arg_cmp x = SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC);
            rule(SCMP_ACT_ERRNO(EPERM), "mmap", 1, &wx);
            rule(SCMP_ACT_ERRNO(EPERM), "mprotect", 1, &x);
            rule(SCMP_ACT_ERRNO(EPERM), "pkey_mprotect", 1, &x);
        } else if (strcmp(argv[i], "--families") == 0 && i + 1 < argc) {
            families = true;
            for (char *p = argv[++i]; *p;) {
                long f = strtol(p, &p, 10);
                if (f >= 0 && f < AF_MAX)
                    family_ok[f] = true;
                p += *p == ',';
            }
        } else {
            fprintf(stderr, "usage: unit-seccomp [--families N,N] [--deny NAME]... [--mdwe] -- COMMAND [ARG]...\n");
            return 125;
        }
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "unit-seccomp: no command\n");
        return 125;
    }
    /* LockPersonality=yes: the personality it has, and no other */
    struct scmp_arg_cmp pers = SCMP_A0(SCMP_CMP_NE, (scmp_datum_t)personality(0xffffffff));
    rule(SCMP_ACT_ERRNO(EPERM), "personality", 1, &pers);
    /* RestrictRealtime=yes */
    static const int rt[] = { SCHED_FIFO, SCHED_RR, SCHED_DEADLINE };
    for (size_t k = 0; k < sizeof rt / sizeof *rt; k++)
        for (int reset = 0; reset < 2; reset++) {
            struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)(rt[k] | (reset ? SCHED_RESET_ON_FORK : 0)));
            rule(SCMP_ACT_ERRNO(EPERM), "sched_setscheduler", 1, &c);
        }
    no_suid();
    /* RestrictAddressFamilies=: any other family is not supported */
    if (families) {
        for (int f = 0; f < AF_MAX; f++)
            if (!family_ok[f]) {
                struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f);
                rule(SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
            }
        struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_GE, AF_MAX);
        rule(SCMP_ACT_ERRNO(EAFNOSUPPORT), "socket", 1, &c);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_load(ctx) < 0) {
        perror("unit-seccomp: load");
        return 125;
    }
    seccomp_release(ctx);
    execvp(argv[i + 1], argv + i + 1);
    perror(argv[i + 1]);
    return 127;
}
