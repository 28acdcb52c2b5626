/* The objects of a run beyond kube.h: the checks of names and references,
 * the deny-all NetworkPolicy, and a run's files as a Secret carries them. */
#pragma once

#include "kube.h"

typedef struct al_kube_item {
    char *path;                   /* relative to /work: "main.py", "data/a.csv" */
    char *data;                   /* NULL when counted only (the sum is over the cap) */
    size_t len;
} al_kube_item;

typedef struct al_kube_files {
    al_kube_item *items;
    size_t n, cap;
    bool has_stdin;               /* the run has stdin (else the script's is /dev/null) */
    char *stdin_data;
    size_t stdin_len;
    uint64_t total;               /* decoded bytes of every item and stdin */
    unsigned max_depth;
    size_t max_files;
} al_kube_files;

/* CFG's files, inputs and stdin into F: 0, or -errno with why in ERR
 * (-E2BIG over AL_KUBE_SECRET_MAX, -EINVAL a path a Secret cannot carry). */
int al_kube_files_read(const al_box_config *cfg, al_kube_files *f, al_error *err);
void al_kube_files_free(al_kube_files *f);
int al_kube_check_component(const char *c, size_t len, al_error *err);
int al_kube_check_path(const char *p, al_error *err);

/* "airlock-" and 16 lowercase hex */
bool al_kube_valid_run_name(const char *s);
/* REPO@sha256:<64 hex> (a tag is never one) */
bool al_kube_valid_image_ref(const char *s);

/* "runtime-default" or "localhost:PATH" (kubernetes_seccomp, the CLI's
 * --seccomp) into *KIND and *PATH (within S, NULL for runtime-default): 0,
 * or -EINVAL with why in ERR (PATH must be relative to the kubelet's
 * seccomp root, without empty, . or .. components). */
int al_kube_parse_seccomp(const char *s, al_kube_seccomp *kind, const char **path, al_error *err);
/* The NetworkPolicy airlock-sandbox-deny-all (NAMESPACE: NULL for none). */
json_t *al_kube_netpol(const char *namespace_);
/* the exact scripts of the pod's two containers */
extern const char al_kube_stage_script[];
extern const char al_kube_collect_script[];
