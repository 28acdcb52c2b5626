/* The Kubernetes box's parts, between its own files: the watch stream and
 * a pod's state (watch.c), the logs (logs.c), /out's tar (collect.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "kube.h"

/* a watch event's line, at most (a Pod is a few KiB; hostile bytes past
 * this are an error, never a bigger buffer) */
#define AL_KUBE_LINE_MAX (1u << 20)

/* ---- watch.c: the watch stream, a pod's state ---- */

typedef enum al_kube_phase {
    AL_KPOD_PENDING,              /* not started: scheduling, pulling, creating */
    AL_KPOD_RUNNING,              /* main has started */
    AL_KPOD_DONE,                 /* main terminated: EXIT_CODE, OOM */
    AL_KPOD_DEADLINE,             /* activeDeadlineSeconds fired (the backstop) */
    AL_KPOD_BROKEN,               /* an image pull or container config error: WHY */
    AL_KPOD_UNSCHEDULABLE,        /* PodScheduled False, Unschedulable: WHY */
    AL_KPOD_GONE,                 /* deleted */
    AL_KPOD_FAILED,               /* phase Failed, main not terminated: WHY */
} al_kube_phase;

typedef struct al_kube_pod_state {
    al_kube_phase phase;
    int exit_code;
    bool oom;
    bool deleting;                /* metadata.deletionTimestamp: someone is deleting it */
    char why[384];
    char rv[64];                  /* metadata.resourceVersion */
} al_kube_pod_state;

/* POD (a Pod object, hostile) classified into ST (whose RV is kept when
 * the pod has none). */
void al_kube_pod_classify(const json_t *pod, al_kube_pod_state *st);

typedef enum al_kube_event {
    AL_KEV_POD,                   /* ADDED, MODIFIED: the pod's state in ST */
    AL_KEV_DELETED,               /* DELETED */
    AL_KEV_BOOKMARK,              /* its resourceVersion in ST->rv */
    AL_KEV_EXPIRED,               /* an ERROR with 410: re-GET and watch again */
    AL_KEV_ERROR,                 /* another ERROR: WHY */
} al_kube_event;

typedef struct al_kube_watch {
    char *line;                   /* the line so far (malloc'd), at most AL_KUBE_LINE_MAX */
    size_t len, cap;
    int (*on_event)(al_kube_event ev, const al_kube_pod_state *st, void *ud);
    void *ud;
    al_kube_pod_state st;         /* the last state seen */
    char why[256];                /* why feeding failed */
} al_kube_watch;

/* BUF's LEN bytes of a watch stream fed to W: each whole line an event to
 * W->on_event (whose non-zero return stops it and is returned). -EMSGSIZE
 * for a line over AL_KUBE_LINE_MAX, -EBADMSG for one that is not an
 * event, why in W->why. */
int al_kube_watch_feed(al_kube_watch *w, const char *buf, size_t len);
void al_kube_watch_free(al_kube_watch *w);

/* ---- logs.c: main's output, collect's /out ---- */


typedef enum al_kube_out_state {
    AL_KOUT_BEFORE,               /* before "airlock-out-begin" */
    AL_KOUT_IN,                   /* between the markers: base64 lines */
    AL_KOUT_DONE,                 /* "airlock-out-end N": N is the pipeline's status (TAR_STATUS) */
    AL_KOUT_FAILED,               /* bad bytes, or an end line without a status: WHY */
} al_kube_out_state;

typedef struct al_kube_out {
    al_kube_out_state state;
    int fd;                       /* the decoded tar goes here */
    uint64_t max;                 /* base64 bytes at most (tmpfs_bytes * 4/3 + 64 KiB) */
    uint64_t seen;                /* base64 bytes so far */
    bool over;                    /* past MAX: the rest is dropped, the tar cut */
    char line[4096];              /* the line so far */
    size_t len;
    bool long_line;               /* the line so far is past LINE: dropped (not base64) */
    unsigned char quad[4];        /* base64 characters not yet decoded */
    int nq;
    int pad;                      /* '=' seen: no more data in this stream */
    /* the end line's N: `$?` of `tar | base64`, so base64's status, not
     * tar's (dash has no pipefail); what tar left out is in TAR_MSGS */
    int tar_status;
    /* tar's own messages ("tar: ./P: Cannot open: Permission denied"):
     * its stderr is in the same log (the API merges the streams) */
    char tar_msgs[8][160];
    int n_tar_msgs;
    char why[160];
} al_kube_out;

/* O ready for a stream: its tar into FD, at most MAX base64 bytes. */
void al_kube_out_init(al_kube_out *o, int fd, uint64_t max);
/* LEN bytes of collect's log fed to O: 0, or -errno (writing FD failed). */
int al_kube_out_feed(al_kube_out *o, const char *buf, size_t len);

/* ---- collect.c ---- */

/* The tar at TARFD (from its start) unpacked and collected into
 * CFG->out_dirfd by the native box's rules; CUT_WHY: NULL, or why the
 * stream was cut short (at its bound, or the sidecar's tar ended before its
 * end line): a skip says so, and the file the cut fell in is skipped too.
 * 0, or -errno with why in ERR. */
int al_kube_collect(const al_box_config *cfg, int tarfd, const char *cut_why, al_box_result *res, al_error *err);
