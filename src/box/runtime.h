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
     * Fill ROOTFD, the box's empty root directory (already attached and
     * writable), with the runtime's tree. Runs inside the box's mount
     * namespace before pivot_root, with the host still visible.
     */
    int (*populate)(const al_runtime *rt, int rootfd, al_error *err);
    const void *data;
};

extern const al_runtime al_runtime_host;
