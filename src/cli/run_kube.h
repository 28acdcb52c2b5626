/* `airlock run --driver kubernetes`: the CLI's side (airlock-server only). */
#pragma once

#include "../kube/kube.h"

/* What `airlock run` was told for the kubernetes driver. */
typedef struct cli_kube_args {
    const char *kubeconfig, *namespace_, *registry, *runtime_class, *image_ref;
    const char *seccomp;          /* --seccomp: runtime-default (NULL) or localhost:PATH */
    const char *image;            /* the runtime image's name, as given */
    const char *image_dir;        /* its directory (oci.json: `airlock image export`'s record) */
    bool dry_run;
    unsigned schedule_timeout_s;  /* 0: 60 */
} cli_kube_args;

/* --dry-run: CFG's Secret, Pod and NetworkPolicy printed as JSON
 * ({"secret", "pod", "network_policy"}); no cluster is asked anything.
 * The exit status. */
int cli_run_kube_dry_run(const cli_kube_args *k, const al_box_config *cfg);

/* The kubeconfig to read into FIRST (N bytes; "": in-cluster): --kubeconfig,
 * then AIRLOCK_KUBECONFIG, then KUBECONFIG's first file. -1, or the exit
 * status after saying why (a path too long is refused, never cut). */
int cli_kube_config_path(const char *cmd, const cli_kube_args *k, char *first, size_t n);

/* The pod's image: --image-ref, else REGISTRY/airlock-box@DIGEST from the
 * image's oci.json (`airlock image export`'s record), into REF: -1, or the
 * exit status after saying why (never exported: the command to run). */
int cli_kube_image_ref(const cli_kube_args *k, char *ref, size_t n);

/* --seccomp into *KIND and *PATH: -1, or the exit status after saying why. */
int cli_kube_seccomp(const char *cmd, const char *v, al_kube_seccomp *kind, const char **path);

/* `airlock seccomp-profile [--out FILE]`: airlock's seccomp policy as the
 * JSON profile the docker driver sends and a kubelet's Localhost profile
 * is (deterministic). */
int cli_seccomp_profile(int argc, char **argv);

/* `airlock smoke --driver kubernetes`: whether the cluster enforces the
 * sandbox pods' deny-all NetworkPolicy (kube/smoke.h). */
int cli_smoke(int argc, char **argv);

/* CFG run in a pod (al_kube_run) of the kubeconfig's cluster (then
 * AIRLOCK_KUBECONFIG, KUBECONFIG, else in-cluster), its result in RES and
 * al_kube_run's return in *RET_R: -1, or the exit status after saying why
 * it could not begin (RES untouched then). */
int cli_run_kube(const cli_kube_args *k, const al_box_config *cfg, al_box_result *res, int *ret_r);
