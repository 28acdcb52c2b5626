/* Collect-out: copy the regular files a box left in /out, after every
 * process of the box is dead, without following any link. */
#pragma once

#include <stdint.h>

#include "box.h"

typedef struct al_collect_limits {
    uint64_t max_files, max_file_bytes, max_total_bytes, max_depth;
    uint64_t max_entries;         /* directory entries examined in all */
    uid_t uid;                    /* the box's host uid/gid: /out is read with */
    gid_t gid;                    /* its rights, so what it hid stays unread */
    bool keep_exec;               /* a file with an exec bit is 0755, not 0644 (a sandbox's /work) */
} al_collect_limits;

/*
 * Walk OUTFD (the box's /out) iteratively. Regular files within the caps
 * are hashed and, when HOSTFD >= 0, copied under it with normalised modes.
 * Everything else is listed in the skips with the reason. Names are taken
 * as they are, one component at a time, so none can traverse.
 */
int al_collect(int outfd, int hostfd, const al_collect_limits *lim, al_box_result *res, al_error *err);

/* Add REL to RES's skips with the reason WHY (both copied). */
int al_collect_add_skip(al_box_result *res, const char *rel, const char *why);

/* Why a directory entry named NAME is not collected (not valid UTF-8, or a
 * control or bidirectional-override character in it), or NULL. */
const char *al_collect_name_problem(const char *name);
/* NAME's display form (malloc'd): invalid bytes and controls as \xNN, a
 * backslash as two, so two names never display alike. */
char *al_collect_name_escape(const char *name);
