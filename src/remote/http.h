/*
 * HTTP for the remote drivers (e2b, daytona): one call with libcurl, its
 * time and its answer's size bounded, the answer JSON when it is. Written
 * once for both; mechanism only: never logs, never exits.
 */
#pragma once

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"

/* What a JSON or plain call's answer may hold: a listing of /out at most
 * (max_artifacts entries of a few hundred bytes each), with room. */
#define AL_REMOTE_ANSWER_MAX (8u << 20)

typedef struct al_http {
    CURL *curl;
    struct curl_slist *headers;   /* sent on every call (auth) */
    uint64_t deadline_ms;         /* al_now_ms() past which no call runs (0: none) */
    char what[32];                /* "E2B", "Daytona": named in errors */
    /* asked about once a second in every call without a progress of its
     * own: nonzero stops it (a run's cancel); may be NULL */
    int (*stop)(void *ud);
    void *stop_ud;
} al_http;

/* A streamed answer's bytes go to WRITE(USERDATA) (return the bytes taken;
 * fewer stops the transfer); PROGRESS(USERDATA), when given, is asked
 * about once a second whether to go on (nonzero: stop). */
typedef size_t (*al_http_write_fn)(char *p, size_t size, size_t n, void *userdata);
typedef int (*al_http_progress_fn)(void *userdata);

typedef struct al_http_req {
    const char *method;           /* "GET", "POST", "DELETE" */
    const char *url;
    const char *content_type;     /* of BODY; NULL: application/json when BODY */
    const void *body;
    size_t body_len;
    curl_mime *mime;              /* instead of BODY: a multipart form */
    const char *const *headers;   /* more headers, NULL-terminated (may be NULL) */
    uint64_t timeout_ms;          /* the whole call (bounded by the deadline) */
    al_http_write_fn write;       /* NULL: the answer kept (AL_REMOTE_ANSWER_MAX) */
    al_http_progress_fn progress;
    void *userdata;
} al_http_req;

int al_http_open(al_http *h, const char *what, const char *const *headers, al_error *err);
void al_http_close(al_http *h);

/* REQ sent: 0 with the status in *STATUS and (REQ->write NULL) the answer
 * in *BODY (the caller frees it; may be NULL); -errno with why in ERR (step
 * STEP) when no answer came (network, time, size). */
int al_http_call(al_http *h, const al_http_req *req, long *status, al_buf *body, const char *step, al_error *err);

/* A JSON call: METHOD URL with the JSON body SEND (may be NULL): 0 with
 * the parsed answer in *RET (NULL when it was empty), else -errno; a
 * status outside 2xx is -EIO with the answer's message (E2B's and
 * Daytona's {"message"}) in ERR, its status in *STATUS (may be NULL). */
int al_http_json(al_http *h, const char *method, const char *url, json_t *send, const char *const *headers,
                 uint64_t timeout_ms, json_t **ret, long *status, const char *step, al_error *err);

/* GET URL (with HEADERS, may be NULL): a 200's body to W(WUD); 0, else
 * -errno with why in ERR (step STEP): another status is -EIO. */
int al_http_download(al_http *h, const char *url, const char *const *headers, al_http_write_fn w, void *wud,
                     const char *step, al_error *err);

/* DELETE URL, asked twice at most (a thing left behind costs until the
 * service's own timeout): 0 deleted or not there (404), else -errno. Runs
 * past the call's deadline and without its stop: it is the cleanup. */
int al_http_delete(al_http *h, const char *url, const char *step);

/* S percent-encoded for a query (malloc'd; NULL: out of memory). */
char *al_http_escape(al_http *h, const char *s);
