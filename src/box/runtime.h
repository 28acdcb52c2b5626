/*
 * A runtime is the read-only tree a box runs on: its /usr, the links to it,
 * and its /etc. The host runtime binds the host's own /usr (zero setup);
 * runtime images plug in here later with the same interface.
 */
#pragma once

#include "../util/util.h"

typedef struct al_runtime al_runtime;

struct al_runtime {
    const char *name;
    const char *digest;           /* content digest, or NULL for the host */
    /*
     * Optional: open the runtime's source tree (an fd, or -errno). Runs in
     * the box's own mount namespace (a mount can only be cloned from the
     * namespace it is in) before the box takes its sandbox identity and
     * before anything is mounted there, so it has the caller's file rights
     * and no mount of the box can hide the source.
     */
    int (*open)(const al_runtime *rt, al_error *err);
    /*
     * Fill ROOTFD, the box's empty root directory (already attached and
     * writable), with the runtime's tree; SRCFD is what open() gave, or -1.
     * Runs inside the box's mount namespace before pivot_root. With
     * OWN_INODES each read-only tree is an overlay of its own
     * (al_mount_own_tree: no other box can watch what this one reads);
     * without, a bind (a zygote's: it runs no run's code, and each box
     * it forks lays its own overlay over these, one layer deep).
     */
    int (*populate)(const al_runtime *rt, int srcfd, int rootfd, bool own_inodes, al_error *err);
    const void *data;
    /* A directory of the runtime's tree copied into the box's /tmp as
     * TMP_SEED_NAME before the script starts (a cache built with the image,
     * that must be writable). TMP_SEED is relative to TMP_SEED_ROOT, the
     * tree's host directory: the tree is untrusted content, so the seed is
     * opened beneath it with no link followed and copied with the box's own
     * file rights, never by a host path. */
    const char *tmp_seed_root;
    const char *tmp_seed;
    const char *tmp_seed_name;
};

extern const al_runtime al_runtime_host;
