/* `airlock run --driver kubernetes`: the CLI's side (airlock-server only). */
#pragma once

#include "../kube/kube.h"

/* What `airlock run` was told for the kubernetes driver. */
typedef struct cli_kube_args {
    const char *kubeconfig, *namespace_, *registry, *runtime_class, *image_ref;
    const char *image;            /* the runtime image's name, as given */
    const char *image_dir;        /* its directory (oci.json: `airlock image export`'s record) */
    bool dry_run;
} cli_kube_args;

/* --dry-run: CFG's Secret, Pod and NetworkPolicy printed as JSON
 * ({"secret", "pod", "network_policy"}); no cluster is asked anything.
 * The exit status. */
int cli_run_kube_dry_run(const cli_kube_args *k, const al_box_config *cfg);
