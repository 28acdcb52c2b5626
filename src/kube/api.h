/* The API server's HTTP calls (src/kube/api.c, K-client's): one JSON call,
 * and one streamed GET (a watch, a pod's log), over libcurl with the
 * cluster's TLS and auth. Every answer is hostile data with a bound. This
 * header is the contract between api.c and its users (run.c, sweep). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "kube.h"

/* the most a JSON answer may hold (a Pod, a list of a node's pods) */
#define AL_KUBE_BODY_MAX (8u << 20)

/* METHOD PATH (beneath the server, with its query) with BODY (NULL: none)
 * as JSON. 0 when the server answered, whatever its status: the status in
 * *RET_CODE, its JSON (a Status on failure) in *RET_DOC (NULL when it had
 * none or it was not JSON); -errno when it did not (unreachable, TLS, a
 * timeout of TIMEOUT_MS, an answer over AL_KUBE_BODY_MAX), why in ERR. A
 * 401 re-reads the token file and tries once more. */
int al_kube_call(const al_kube_cluster *c, const char *method, const char *path, json_t *body, long timeout_ms,
                 long *ret_code, json_t **ret_doc, al_error *err);

typedef struct al_kube_stream_ops {
    /* a 2xx answer's bytes as they come: 0 to go on, else stop the stream
     * (al_kube_stream then returns 0) */
    int (*data)(const char *buf, size_t len, void *ud);
    /* asked at least every 200 ms while the stream is open (also when no
     * byte comes): true stops it (al_kube_stream returns 0) */
    bool (*stop)(void *ud);
    void *ud;
} al_kube_stream_ops;

/* GET PATH, its body streamed to OPS. 0 when the server answered and the
 * stream ended (or OPS stopped it): the status in *RET_CODE; a non-2xx
 * answer's body (at most 64 KiB) is not streamed but parsed into
 * *RET_STATUS (NULL when it was not JSON). -errno when it could not be
 * made or broke off other than at its end (a connection cut), why in ERR.
 * A 401 re-reads the token file and tries once more. */
int al_kube_stream(const al_kube_cluster *c, const char *path, const al_kube_stream_ops *ops, long *ret_code,
                   json_t **ret_status, al_error *err);
