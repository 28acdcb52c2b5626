/* Build-time generator: compiles the policy in seccomp_policy.c with
 * libseccomp and writes the BPF as a C header, and renders the same rules
 * as Docker's JSON seccomp profile (for the docker driver) into a second
 * one. Runs on the build host, so both are for its own architecture. */
#include <seccomp.h>
#include <stdio.h>
#include <string.h>

#include "seccomp.h"

/* Docker's profile: the first filter's rules. Unconditional allows are one
 * rule of many names; the rest one rule each. The second filter (ioctl's
 * terminal-injection commands refused on the low 32 bits) cannot be
 * stacked in one profile, and Docker's format has no "masked not equal":
 * so the first filter's unconditional allow of ioctl becomes allows of
 * every command whose low 32 bits are not one of those, each a single
 * masked compare (runc ORs a rule's compares of one argument, so a rule
 * cannot say "neither"): for each refused command C and each bit B, the
 * commands that agree with C above B and differ at B, unless that prefix
 * leads to a refused command too. A command with high bits set is judged
 * on its low 32, as the kernel reads it. */
#define MAX_DENIED 8
typedef struct profile {
    FILE *f;
    bool first_rule, in_allow;
    uint32_t denied[MAX_DENIED];  /* the second filter's ioctl commands */
    size_t n_denied;
} profile;

/* The second filter's rules, gathered: only ioctl, refused on the low 32
 * bits of its command, can be rendered (as the complement above). */
static int collect_denied(void *ud, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp,
                          al_error *err) {
    profile *p = ud;
    if (strcmp(name, "ioctl") != 0 || action == SCMP_ACT_ALLOW || n != 1 || cmp[0].arg != 1 ||
        cmp[0].op != SCMP_CMP_MASKED_EQ || cmp[0].datum_a != 0xffffffffULL || p->n_denied == MAX_DENIED)
        return al_err(err, "seccomp", EINVAL, "%s: a second-filter rule Docker's profile cannot say", name);
    p->denied[p->n_denied++] = (uint32_t)cmp[0].datum_b;
    return 0;
}

static bool prefix_denied(const profile *p, uint32_t mask, uint32_t value) {
    for (size_t i = 0; i < p->n_denied; i++)
        if ((p->denied[i] & mask) == value)
            return true;
    return false;
}

/* ioctl allowed for every command whose low 32 bits are not denied. */
static void allow_ioctl_but_denied(profile *p) {
    uint32_t seen_mask[MAX_DENIED * 32], seen_value[MAX_DENIED * 32];
    size_t n_seen = 0;
    for (size_t d = 0; d < p->n_denied; d++)
        for (int bit = 31; bit >= 0; bit--) {
            uint32_t mask = (uint32_t)(0xffffffffULL << bit), value = (p->denied[d] & mask) ^ (1u << bit);
            bool dup = prefix_denied(p, mask, value);
            for (size_t s = 0; s < n_seen && !dup; s++)
                dup = seen_mask[s] == mask && seen_value[s] == value;
            if (dup)
                continue;
            seen_mask[n_seen] = mask;
            seen_value[n_seen++] = value;
            fprintf(p->f, "%s{\\\"names\\\":[\\\"ioctl\\\"],\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\",\\\"args\\\":"
                          "[{\\\"index\\\":1,\\\"value\\\":%u,\\\"valueTwo\\\":%u,\\\"op\\\":"
                          "\\\"SCMP_CMP_MASKED_EQ\\\"}]}",
                    p->first_rule ? "" : ",", mask, value);
            p->first_rule = false;
        }
}

static const char *op_name(enum scmp_compare op) {
    switch (op) {
    case SCMP_CMP_NE: return "SCMP_CMP_NE";
    case SCMP_CMP_LT: return "SCMP_CMP_LT";
    case SCMP_CMP_LE: return "SCMP_CMP_LE";
    case SCMP_CMP_EQ: return "SCMP_CMP_EQ";
    case SCMP_CMP_GE: return "SCMP_CMP_GE";
    case SCMP_CMP_GT: return "SCMP_CMP_GT";
    case SCMP_CMP_MASKED_EQ: return "SCMP_CMP_MASKED_EQ";
    default: return NULL;
    }
}

static int profile_rule(void *ud, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *cmp,
                        al_error *err) {
    profile *p = ud;
    bool allow = action == SCMP_ACT_ALLOW;
    if (allow && n == 0 && strcmp(name, "ioctl") == 0 && p->n_denied) {
        if (p->in_allow)
            fprintf(p->f, "],\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\"}");
        p->in_allow = false;
        allow_ioctl_but_denied(p);
        return 0;
    }
    if (allow && n == 0 && p->in_allow) {
        fprintf(p->f, ",\\\"%s\\\"", name);
        return 0;
    }
    if (p->in_allow)
        fprintf(p->f, "],\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\"}");
    p->in_allow = false;
    fprintf(p->f, "%s{\\\"names\\\":[\\\"%s\\\"", p->first_rule ? "" : ",", name);
    p->first_rule = false;
    if (allow && n == 0) {
        p->in_allow = true;
        return 0;
    }
    fprintf(p->f, "]");
    if (allow)
        fprintf(p->f, ",\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\"");
    else if ((action & 0xffff0000u) == SCMP_ACT_ERRNO(0))
        fprintf(p->f, ",\\\"action\\\":\\\"SCMP_ACT_ERRNO\\\",\\\"errnoRet\\\":%u", action & 0xffffu);
    else
        return al_err(err, "seccomp", EINVAL, "%s: an action Docker's profile cannot say", name);
    if (n) {
        fprintf(p->f, ",\\\"args\\\":[");
        for (unsigned i = 0; i < n; i++) {
            const char *op = op_name(cmp[i].op);
            if (!op)
                return al_err(err, "seccomp", EINVAL, "%s: an comparison Docker's profile cannot say", name);
            fprintf(p->f, "%s{\\\"index\\\":%u,\\\"value\\\":%llu,\\\"valueTwo\\\":%llu,\\\"op\\\":\\\"%s\\\"}",
                    i ? "," : "", cmp[i].arg, (unsigned long long)cmp[i].datum_a, (unsigned long long)cmp[i].datum_b,
                    op);
        }
        fprintf(p->f, "]");
    }
    fprintf(p->f, "}");
    return 0;
}

static int emit_profile(const char *path) {
    FILE *f = fopen(path, "we");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "/* Generated by seccomp-gen from seccomp_policy.c: do not edit. */\n#pragma once\n\n"
               "static const char al_seccomp_docker_json[] = \"{\\\"defaultAction\\\":\\\"SCMP_ACT_ERRNO\\\","
               "\\\"defaultErrnoRet\\\":%d,\\\"architectures\\\":[\\\"SCMP_ARCH_X86_64\\\"],\\\"syscalls\\\":[", EPERM);
    profile p = { .f = f, .first_rule = true };
    al_error err = { 0 };
    if (al_seccomp_rules(1, collect_denied, &p, &err) < 0 || al_seccomp_rules(0, profile_rule, &p, &err) < 0) {
        fprintf(stderr, "seccomp-gen: %s\n", err.msg);
        fclose(f);
        return 1;
    }
    if (p.in_allow)
        fprintf(f, "],\\\"action\\\":\\\"SCMP_ACT_ALLOW\\\"}");
    fprintf(f, "]}\";\n");
    if (fclose(f) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

static int emit(FILE *f, const char *name, const al_seccomp_prog *p, int i) {
    fprintf(f, "static const struct sock_filter %s[] = {\n", name);
    for (unsigned k = 0; k < p->f[i].len; k++) {
        const struct sock_filter *s = &p->f[i].insns[k];
        fprintf(f, "    { 0x%04x, %u, %u, 0x%08x },\n", s->code, s->jt, s->jf, s->k);
    }
    fprintf(f, "};\n\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: seccomp-gen BPF.h [DOCKER-PROFILE.h]\n");
        return 2;
    }
    if (argc == 3 && emit_profile(argv[2]) != 0)
        return 1;
    al_error err = { 0 };
    al_seccomp_prog p;
    if (al_seccomp_compile(&p, &err) < 0) {
        fprintf(stderr, "seccomp-gen: %s: %s\n", err.step, err.msg);
        return 1;
    }
    FILE *f = fopen(argv[1], "we");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fprintf(f, "/* Generated by seccomp-gen from seccomp_policy.c: do not edit. */\n#pragma once\n\n"
               "#include <linux/filter.h>\n\n");
    emit(f, "al_seccomp_bpf_allow", &p, 0);
    emit(f, "al_seccomp_bpf_ioctl", &p, 1);
    al_seccomp_prog_free(&p);
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
