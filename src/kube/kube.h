/*
 * The Kubernetes box: one run in one pod of its own, made through the API
 * server's REST API (libcurl, jansson; no client-go, no kubectl, no
 * WebSocket: Debian 12's libcurl has none), with the same configuration and
 * result as the native box (box/box.h), so nothing above the driver knows
 * which ran.
 *
 * A run is a Secret (its code, inputs and stdin, mounted read-only) and a
 * Pod (container "main" stages the inputs into /work and execs the script;
 * the native sidecar "collect" writes /out as a base64 tar stream to its own
 * log once "main" has ended), created with fieldValidation=Strict, followed
 * by a watch on the one pod and pods/log streams, and deleted with its
 * Secret on every path. Every byte read from the API server is hostile
 * data with a bound. Mechanism only: never logs, never exits.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../box/box.h"

#define AL_KUBE_NAME_MAX 64           /* a DNS-1123 label and its NUL */
#define AL_KUBE_URL_MAX 512
#define AL_KUBE_REF_MAX 512           /* an image reference, REPO@sha256:HEX */
/* What a Secret may hold (etcd's request limit is about 1.5 MiB; the API
 * server refuses more): the code, inputs and stdin of a run, base64'd. */
#define AL_KUBE_SECRET_MAX (1u << 20)

/* Where the API server is and who we are to it: a kubeconfig's current
 * context, or the pod's own service account (in-cluster). */
typedef struct al_kube_cluster {
    char server[AL_KUBE_URL_MAX];     /* https://HOST:PORT */
    char namespace_[AL_KUBE_NAME_MAX];
    /* one of: a bearer token (re-read from TOKEN_FILE when set: it
     * rotates), or a client certificate and key (PEM, files or data) */
    char token_file[4096];
    char *token;                      /* malloc'd; NULL: none */
    char *ca_pem;                     /* the CA's PEM (malloc'd); NULL: the system's */
    char *cert_pem, *key_pem;         /* client certificate and key (malloc'd), or NULL */
    bool insecure;                    /* insecure-skip-tls-verify (refused unless the server is loopback) */
} al_kube_cluster;

/* KUBECONFIG (a path; NULL or "": in-cluster, from
 * /var/run/secrets/kubernetes.io/serviceaccount and KUBERNETES_SERVICE_HOST/
 * _PORT) into RET; NAMESPACE overrides the context's (NULL: the context's,
 * else the service account's, else "default"). 0, or -errno with why in ERR. */
int al_kube_cluster_load(const char *kubeconfig, const char *namespace_, al_kube_cluster *ret, al_error *err);
void al_kube_cluster_free(al_kube_cluster *c);

typedef enum al_kube_seccomp {
    AL_KUBE_SECCOMP_RUNTIME_DEFAULT,  /* the node's runtime's profile */
    AL_KUBE_SECCOMP_LOCALHOST,        /* airlock's own, installed on the node (seccomp_localhost) */
} al_kube_seccomp;

/* The driver's configuration of a run, beside the box config. */
typedef struct al_kube_opts {
    const al_kube_cluster *cluster;   /* NULL only for a dry run */
    const char *image_ref;            /* REPO@sha256:HEX: the run's image, pinned by digest */
    const char *runtime_class;        /* NULL or "": none (the node's default runtime) */
    al_kube_seccomp seccomp;
    const char *seccomp_localhost;    /* the profile's path under the kubelet's seccomp dir */
    const char *run_id;               /* "airlock-<hex>": the Pod's and the Secret's name */
    const char *node, *instance;      /* labels: this service (a sweep keeps its live instance's) */
    const char *pod;                  /* NULL, or a warm pod's name (the pool's) to run in if fit */
    /* how long a pod may stay unschedulable before the run is an error
     * (kubernetes_schedule_timeout_s; 0: 60), and the bound of a pod that
     * waits otherwise (pulling, creating) is this plus the run's wall
     * clock plus the backstop's 30 s */
    unsigned schedule_timeout_s;
} al_kube_opts;

/* The objects of a run, built from O and CFG alone (pure: no cluster):
 * the Secret, the Pod and the NetworkPolicy that deny-all would be. Each
 * is a new reference; -E2BIG (why in ERR) when the Secret would exceed
 * AL_KUBE_SECRET_MAX, -EINVAL for an input whose path a Secret cannot
 * carry. `airlock run --driver kubernetes --dry-run` prints these. */
int al_kube_objects(const al_kube_opts *o, const al_box_config *cfg, json_t **ret_secret, json_t **ret_pod,
                    json_t **ret_netpol, al_error *err);

/* Run CFG in a pod, as al_box_run does: 0 when the pod ran (whatever the
 * script did: RES->reason), else -errno with the step in RES->error. An
 * unschedulable pod or an image that cannot be pulled is an error (never
 * charged), named. */
int al_kube_run(const al_kube_opts *o, const al_box_config *cfg, al_box_result *res);

/* Delete the pods and Secrets labelled as NODE's runs whose instance is
 * not INSTANCE (a dead service's): how many, or -errno with why in ERR. */
int al_kube_sweep(const al_kube_cluster *c, const char *node, const char *instance, al_error *err);

/* What the driver can say of its controls (the pod's spec is sent; the
 * cluster's enforcement is confirmed only by the smoke test: NETWORK_CONFIRMED
 * is its pass, which under a Localhost profile confirms the seccomp badge too,
 * its sandbox probe having run under the same profile). */
void al_kube_controls(const al_kube_opts *o, bool network_confirmed, al_controls *c);
