/* A box's /DIR as a tar stream, unpacked beneath a directory of ours (then
 * collected from there by al_collect, with the native box's caps and name
 * rules): the docker box's under gVisor (src/docker/tar_io.c) and the
 * Kubernetes box's (its collect sidecar's log, src/kube/collect.c). Its
 * own library (libarchive), so that the lean binary does not load it. */
#pragma once

#include "box.h"
#include "collect.h"

/* The tar of the box's /DIR at TARFD unpacked beneath OUTFD (ours), within
 * CL's entries, depth and (plus a byte, enough for al_collect to skip it)
 * per-file cap; what it leaves out in INTO's skips. A file keeps an exec
 * bit (0700), for a collection that keeps them (a sandbox's /work). A tar
 * cut short ends the walk; a file it ended inside is a skip. */
int al_untar(const char *dir, const al_collect_limits *cl, int tarfd, int outfd, al_box_result *into, al_error *err);

/* One line GNU tar wrote on its stderr as it packed the box's /DIR: when it
 * names a file it could not open ("tar: ./P: Cannot open: WHY", also as a
 * "Warning" under --ignore-failed-read), that file is a skip in INTO, as
 * the native box's collection names it, never a silent loss: true. */
bool al_untar_unreadable(const char *line, al_box_result *into);
