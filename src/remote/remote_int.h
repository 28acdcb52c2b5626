/* What e2b.c, daytona.c and collect.c share (remote.h's implementation). */
#pragma once

#include "http.h"
#include "remote.h"

/* One entry of the remote /out, PATH relative to it ("a/b.txt"). */
typedef struct al_remote_entry {
    char *path;
    bool dir, file;               /* neither: a link or another kind, skipped */
    uint64_t size;
} al_remote_entry;

typedef struct al_remote_listing {
    al_remote_entry *e;
    size_t n;
} al_remote_listing;

/* An entry appended (PATH copied). */
int al_remote_listing_add(al_remote_listing *l, const char *path, bool dir, bool file, uint64_t size);
void al_remote_listing_free(al_remote_listing *l);

/* How a driver downloads the remote /out/REL: its bytes to W(WUD), 0 or
 * -errno with why in ERR. */
typedef int (*al_remote_download_fn)(void *ud, const char *rel, al_http_write_fn w, void *wud, al_error *err);

/* L's regular files (L sorted by path first) downloaded beneath OUT_DIRFD (each opened with openat2
 * beneath it, never following a link, directories made one component at a
 * time) under LIM's caps (count, size, total, depth) and /out's name rules;
 * what is not collected is in RES's skips, with why; what is, in its
 * artifacts with its sha256. 0, or -errno (out of memory). */
int al_remote_collect(al_remote_listing *l, int out_dirfd, const al_box_limits *lim, al_remote_download_fn dl,
                      void *ud, al_box_result *res, al_error *err);


/* The shell command that runs CFG's argv in /work, its stdin STDIN_NAME
 * (in /work; NULL: /dev/null): malloc'd. */
char *al_remote_command(const al_box_config *cfg, const char *stdin_name);

/* Whether the run is to stop now: CFG's cancel fd readable (sets
 * *CANCELED) or DEADLINE_MS passed. */
bool al_remote_should_stop(const al_box_config *cfg, uint64_t deadline_ms, bool *canceled);

/* One remote service's steps of a run, for al_remote_steps: B is the
 * service's own state of the run. */
typedef struct al_remote_ops {
    al_remote_kind kind;
    /* its API opened with the key (nothing made yet) */
    int (*open)(void *b, al_error *err);
    /* the sandbox made, the inputs staged, the command run to its end */
    int (*prepare)(void *b, al_error *err);
    /* the remote /out's entries into L (none there: 0, L empty) */
    int (*list_out)(void *b, al_remote_listing *l, al_error *err);
    al_remote_download_fn download;
    /* the sandbox deleted if it was made (on every path), the API closed */
    void (*finish)(void *b);
    /* whether the run was canceled (its steps stopped for it) */
    bool (*canceled)(void *b);
} al_remote_ops;

/* A run of CFG through OPS, as al_remote_run promises: RES made ready,
 * the steps, /out collected beneath CFG->out_dirfd unless the run was
 * canceled, the sandbox deleted; a cancel is a result, not an error. */
int al_remote_steps(const al_remote_ops *ops, void *b, const al_box_config *cfg, al_box_result *res);

/* Whether a sandbox tagged TAG is a dead service's leftover: PREFIX's,
 * not KEEP's (this service's own). */
bool al_remote_tag_stale(const char *tag, const char *prefix, const char *keep);

int al_remote_e2b_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res);
int al_remote_daytona_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res);
int al_remote_e2b_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err);
int al_remote_daytona_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err);
