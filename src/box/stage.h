/* Stage-in: put the script and the caller's input files into the box's
 * /work before the box starts. Runs in the parent, fd-relative to /work. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "../util/util.h"

typedef struct al_stage {
    int workfd;
    uid_t uid;                    /* files in /work are created as the box's uid */
    gid_t gid;
    uint64_t max_files, max_bytes, max_depth;
    uint64_t files, bytes;        /* used so far */
} al_stage;

int al_stage_data(al_stage *st, const char *name, const void *data, size_t len, mode_t mode, al_error *err);
/* Copy a host file or directory tree into /work under its base name. */
int al_stage_path(al_stage *st, const char *host_path, al_error *err);
/* The same, under NAME. */
int al_stage_path_as(al_stage *st, const char *host_path, const char *name, al_error *err);
/* Copy the directory REL beneath the host directory ROOT (an untrusted tree:
 * opened with openat2 beneath ROOT, no link, magic link or mount crossed)
 * into the stage directory as NAME, reading with the box's own file rights.
 * A missing REL stages nothing; anything else but a directory is refused. */
/* Copy the entries of the host directory DIR (a tree earlier boxes wrote:
 * no link followed on the way in, each entry opened beneath it) into the
 * stage directory itself, each as its own name, but for those named in
 * SKIP (N_SKIP names). A missing DIR stages nothing. */
int al_stage_dir_entries(al_stage *st, const char *dir, const char *const *skip, size_t n_skip, al_error *err);
int al_stage_beneath_as(al_stage *st, const char *root, const char *rel, const char *name, al_error *err);
