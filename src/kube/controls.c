/* What the kubernetes driver can say of its controls (kube.h's
 * al_kube_controls): the pod's spec is sent as the contract writes it and
 * the API server's Strict validation refuses a field it does not know, but
 * enforcement is the node's (its kubelet, runtime and CNI), never seen from
 * here: only the network is confirmed, and only by the smoke test's probe
 * from a sandbox pod. Each detail says what holds the control and why. */
#include <string.h>

#include "kube.h"

/* a detail with one %s, ARG ("" for none) */
#define set(c, l, fmt, arg)                                                                   \
    do {                                                                                      \
        const char *a_ = (arg);                                                               \
        (c)->level = (l);                                                                     \
        snprintf((c)->detail, sizeof (c)->detail, fmt, a_ ? a_ : "");                         \
    } while (0)

void al_kube_controls(const al_kube_opts *o, bool network_confirmed, al_controls *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->cgroup_version, sizeof c->cgroup_version, "none");
    const char *rc = o && o->runtime_class && *o->runtime_class ? o->runtime_class : NULL;
    if (rc)
        set(&c->userns, AL_LEVEL_UNCONFIRMED,
            "a pod of its own per run, made for it and deleted after it, under RuntimeClass %.60s (its handler, "
            "e.g. gVisor or Kata, is the node's: not seen from here); uid 65534, non-root, the child of its "
            "container's stage shell; /proc and /sys as the runtime masks them (a pod cannot mask more): the "
            "node's /proc/sys and /proc/key-users are readable, read-only; at the end the pod is deleted: the kubelet "
            "kills what is left within seconds of the result",
            rc);
    else
        set(&c->userns, AL_LEVEL_UNCONFIRMED,
            "a pod of its own per run, made for it and deleted after it, sharing the node's kernel (no "
            "RuntimeClass configured: set kubernetes_runtime_class for gVisor or Kata); uid 65534, non-root, in "
            "no user namespace of airlock's, the child of its container's stage shell; /proc and /sys as the "
            "runtime masks them (a pod cannot mask more): the node's /proc/sys and /proc/key-users are readable, "
            "read-only; at the end the pod is deleted: the kubelet kills what is left within seconds of the result%s",
            "");
    bool local = o && o->seccomp == AL_KUBE_SECCOMP_LOCALHOST;
    /* the smoke test's sandbox probe runs under the same Localhost profile
     * and passes only when it saw ptrace, keyctl and io_uring_setup refused
     * (kube/smoke.h): then the node's file is seen to be airlock's policy */
    if (local && network_confirmed)
        set(&c->seccomp, AL_LEVEL_BOUNDARY_CONDITIONAL,
            "seccompProfile Localhost %s: airlock's profile (`airlock seccomp-profile`), confirmed by the smoke "
            "test at start: its sandbox pod under this profile saw ptrace, keyctl and io_uring_setup refused; "
            "holds while every sandbox node holds the same file",
            o->seccomp_localhost);
    else if (local)
        set(&c->seccomp, AL_LEVEL_UNCONFIRMED,
            "seccompProfile Localhost %s: airlock's profile (`airlock seccomp-profile`), applied as the pod spec "
            "asks; the file is the node's, installed by its operator (the kubelet refuses to start a pod without "
            "it), not confirmed until the smoke test has seen it refuse what airlock's profile refuses",
            o->seccomp_localhost);
    else
        set(&c->seccomp, AL_LEVEL_UNCONFIRMED,
            "seccompProfile RuntimeDefault: the node's container runtime's default filter, not airlock's own "
            "policy%s",
            "");
    set(&c->no_new_privs, AL_LEVEL_UNCONFIRMED,
        "allowPrivilegeEscalation false (the runtime sets no_new_privs), readOnlyRootFilesystem, runAsNonRoot; "
        "applied by the node's runtime%s",
        "");
    set(&c->caps, AL_LEVEL_UNCONFIRMED,
        "capabilities drop ALL, privileged false, no host namespaces, no service account token; applied by the "
        "node's runtime (the namespace's Pod Security `restricted` profile refuses a pod without them); /dev is the "
        "runtime's tmpfs of the standard nodes, the devices cgroup allowing no other%s",
        "");
    set(&c->memory, AL_LEVEL_UNCONFIRMED,
        "resources.limits.memory = requests: the node's cgroup, OOMKilled reported as reason memory; the "
        "/work, /out and /tmp tmpfs (emptyDir Memory) count against it%s",
        "");
    set(&c->pids, AL_LEVEL_NOT_ENFORCED,
        "a pod spec has no pids limit: the node's kubelet podPidsLimit holds it (the chart's node-pool "
        "checklist asks for one), not the run's pids%s",
        "");
    set(&c->cpu, AL_LEVEL_UNCONFIRMED,
        "resources.limits.cpu = requests (millicores): the node's CFS quota; CPU time is not reported back%s",
        "");
    set(&c->tmpfs, AL_LEVEL_UNCONFIRMED,
        "/work, /out and /tmp are emptyDir Memory volumes with sizeLimit (the kubelet evicts a pod past it, "
        "which ends the run as an error, not ENOSPC); /out collected under airlock's caps; mountinfo names the "
        "node's paths (the kubelet's Secret volume, /etc/hosts, the pod's cgroup: a pod cannot hide them)%s",
        "");
    if (network_confirmed)
        set(&c->network, AL_LEVEL_BOUNDARY_CONDITIONAL,
            "offline: the namespace's deny-all NetworkPolicy (airlock-sandbox-deny-all, the chart's), confirmed "
            "by `airlock smoke --driver kubernetes` at start: a sandbox pod could not reach what a control pod "
            "reached; holds while the CNI enforces NetworkPolicy%s",
            "");
    else
        set(&c->network, AL_LEVEL_UNCONFIRMED,
            "offline: the namespace's deny-all NetworkPolicy (airlock-sandbox-deny-all, the chart's) selects "
            "every sandbox pod; enforced by the CNI, not confirmed: the smoke test has not passed%s",
            "");
}
