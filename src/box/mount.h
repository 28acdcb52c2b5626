/* Mount helpers built on the new mount API (fsopen/fsmount/open_tree/
 * move_mount/mount_setattr): every mount is made detached and attached
 * fd-relative, so no path the box could influence is ever resolved. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <linux/mount.h>

#include "../util/util.h"

typedef struct al_tmpfs_opts {
    uint64_t size_bytes;
    uint64_t inodes;
    unsigned mode;                /* e.g. 0755, 01777 */
    int uid, gid;                 /* -1: leave default */
} al_tmpfs_opts;

/* A new detached tmpfs with ATTRS (MOUNT_ATTR_*); returns the mount fd. */
int al_mount_tmpfs(const al_tmpfs_opts *o, unsigned attrs, al_error *err);
/* A new detached proc instance showing only this pid namespace's
 * processes, or with PIDS_ONLY false all of proc (a zygote's, which its
 * boxes' own proc needs beneath them: the kernel mounts a proc in a user
 * namespace only where one is fully visible). */
int al_mount_proc(bool pids_only, al_error *err);
/* A detached, recursive copy of the host path SRC with ATTRS set on all of it. */
int al_mount_bind(const char *src, unsigned attrs, al_error *err);
/* Attach mount fd MFD on NAME under DIRFD. */
int al_mount_attach(int mfd, int dirfd, const char *name, al_error *err);
/* Set ATTRS on the mount DIRFD/NAME (not recursive). */
int al_mount_setattr(int dirfd, const char *name, unsigned attrs, al_error *err);
