/*
 * The NetworkPolicy smoke test (research E2): whether this cluster enforces
 * the deny-all policy on sandbox pods, shown by a positive control. A
 * target pod without the sandbox label serves HTTP; a control probe
 * without the label must reach the target's pod IP (the network works);
 * a sandbox probe labelled airlock.dev/sandbox=true must not (the policy
 * holds). The sandbox probe also reports from inside what a run's pod is:
 * its uid (not root), no service-account token mounted, a read-only root;
 * and the server is asked which runtime class it ran with; under a Localhost
 * seccomp profile, whether syscalls airlock's profile refuses are refused. Every pod made
 * is deleted on every path. Mechanism only: never logs, never exits.
 */
#pragma once

#include <jansson.h>

#include "kube.h"

typedef enum al_kube_smoke_outcome {
    AL_KUBE_SMOKE_ENFORCED,
    AL_KUBE_SMOKE_NOT_ENFORCED,   /* the sandbox probe connected, or a pod was not as sent */
    AL_KUBE_SMOKE_INCONCLUSIVE,   /* the control failed, or a pod could not run: nothing is shown */
} al_kube_smoke_outcome;

typedef struct al_kube_smoke_opts {
    const al_kube_cluster *cluster;
    const char *image_ref;        /* REPO@sha256:HEX: airlock's default image (python3) */
    const char *runtime_class;    /* NULL or "": none */
    /* the sandbox probe's seccompProfile, as a run's pod has it: with
     * Localhost, "enforced" also needs the probe to see ptrace, keyctl and
     * io_uring_setup refused (airlock's profile refuses them; a runtime's
     * default lets ptrace through), so the seccomp badge is confirmed too */
    al_kube_seccomp seccomp;
    const char *seccomp_localhost;
    unsigned timeout_s;           /* for the whole test (0: 180) */
    /* asked between steps: nonzero stops the test (inconclusive); may be NULL */
    int (*stop)(void *ud);
    void *ud;
} al_kube_smoke_opts;

typedef struct al_kube_smoke_result {
    al_kube_smoke_outcome outcome;
    char reason[512];             /* why, as a person reads it */
    json_t *detail;               /* what each pod reported: {"control": {...}, "sandbox": {...}, "target_ip"} */
} al_kube_smoke_result;

/* Run the smoke test into RES (its detail to be json_decref'd): 0 when it
 * ran to an outcome (any of the three), -errno with why in ERR when it
 * could not start (a bad image reference). */
int al_kube_smoke(const al_kube_smoke_opts *o, al_kube_smoke_result *res, al_error *err);
const char *al_kube_smoke_outcome_name(al_kube_smoke_outcome o);
