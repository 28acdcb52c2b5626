/* A runtime plus one host directory bound read-only at /NAME (see
 * runtime_ro.c): how a skill's files are in its box at /skill. */
#pragma once

#include <limits.h>

#include "runtime.h"

typedef struct al_runtime_ro {
    al_runtime rt;                /* pass &rt to the box */
    const al_runtime *inner;
    char host_dir[PATH_MAX];
    char name[64];                /* one component */
    int inner_fd;                 /* set in the box's copy between open and populate */
} al_runtime_ro;

/* RO and INNER must outlive the box's run. */
void al_runtime_ro_init(al_runtime_ro *ro, const al_runtime *inner, const char *host_dir, const char *name);
