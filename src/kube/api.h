/*
 * The API server's REST calls (libcurl): a JSON call, and a streamed GET
 * (a watch, a pod's log), with the cluster's TLS (its CA, or the system's;
 * a client certificate and key, all as in-memory PEM blobs) and its bearer
 * token, read again from its file before every call and once more after a
 * 401 (a projected service-account token rotates). Every answer's size and
 * every call's time are bounded. Mechanism only: never logs, never exits.
 */
#pragma once

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>

#include "kube.h"

/* what a JSON answer may be (a list of a node's pods at most) */
#define AL_KUBE_ANSWER_MAX (8u << 20)

typedef struct al_kube_api {
    al_kube_cluster *cluster;     /* not owned; its token is replaced when it rotates */
    CURL *curl;
    uint64_t deadline_ms;         /* al_now_ms() past which no call runs (0: none) */
    /* asked about once a second in every call: nonzero stops it (a run's
     * cancel); may be NULL */
    int (*stop)(void *ud);
    void *stop_ud;
} al_kube_api;

/* A handle on C (kept by the caller for the handle's life; one handle per
 * thread, any number over one cluster). 0, or -errno with why in ERR. */
int al_kube_api_open(al_kube_api *a, al_kube_cluster *c, al_error *err);
void al_kube_api_close(al_kube_api *a);

/* METHOD PATH (e.g. "/api/v1/namespaces/NS/pods?fieldValidation=Strict")
 * with the JSON BODY (may be NULL), within TIMEOUT_MS (0: 30 s): 0 with the
 * parsed answer in *RET (NULL when empty) and the status in *STATUS (may
 * be NULL) for a 2xx; else -errno (by status: 400/422 EINVAL, 401 EACCES,
 * 403 EPERM, 404 ENOENT, 409 EEXIST, 410 ESTALE, 429 EAGAIN, others EIO;
 * no answer: the network's errno or ETIMEDOUT) with the answer's Status
 * message in ERR (step STEP) and the status in *STATUS. */
int al_kube_call(al_kube_api *a, const char *method, const char *path, json_t *body, uint64_t timeout_ms,
                 json_t **ret, long *status, const char *step, al_error *err);

/* A streamed GET: the bytes of a 2xx answer to WRITE(UD) as they come
 * (return nonzero to stop: the call then ends -ECANCELED, unless it was
 * WRITE's own end, which it says by returning 1: then 0), at most
 * MAX_BYTES of them (more: -E2BIG), PROGRESS(UD) asked about once a
 * second (nonzero: stop, -ECANCELED), within TIMEOUT_MS (0: no bound but
 * the deadline). Another status is -errno as al_kube_call's, with the
 * Status message in ERR and the status in *STATUS. */
typedef struct al_kube_stream {
    const char *path;
    uint64_t timeout_ms;
    uint64_t max_bytes;
    int (*write)(const char *p, size_t n, void *ud);
    int (*progress)(void *ud);
    void *ud;
} al_kube_stream;
int al_kube_stream_get(al_kube_api *a, const al_kube_stream *s, long *status, const char *step, al_error *err);

/* the errno of an API status (as al_kube_call maps it) */
int al_kube_status_errno(long status);
