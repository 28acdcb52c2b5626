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
/* A detached copy of DIRFD/NAME (not recursive) with ATTRS set. */
int al_mount_bind_at(int dirfd, const char *name, unsigned attrs, al_error *err);
/* Attach mount fd MFD on NAME under DIRFD. */
int al_mount_attach(int mfd, int dirfd, const char *name, al_error *err);
/* Set ATTRS on the mount DIRFD/NAME (not recursive). */
int al_mount_setattr(int dirfd, const char *name, unsigned attrs, al_error *err);
/*
 * A read-only overlay of the directory SRCDIR/PATH (PATH "" for SRCDIR
 * itself) with ATTRS, attached on DIRFD/NAME (which must exist): the same
 * files, through inodes of this mount alone. inotify needs only read
 * access and reports an access through every mount of an inode, so a tree
 * bound into many boxes let each watch the others' reads by name; an
 * overlay's inodes are its own (a read through another mount of the file
 * never reaches them). Needs overlayfs in a user namespace (Linux 5.11);
 * its layers are given by fd where the kernel takes them (6.13), else by
 * path, attached beneath it (mount.c's overlay_by_path).
 */
int al_mount_own_tree(int srcdir, const char *path, unsigned attrs, int dirfd, const char *name, al_error *err);
/*
 * A box's /dev nodes, detached: a small tmpfs holding null, zero, full,
 * random and urandom made for this box alone (a watch on a node bound from
 * the host saw every write of every box and of the host); read-only,
 * nosuid, noexec. Made by the box's parent in the host's user namespace,
 * where a device node can be made and opened (a box's own file systems
 * are nodev). Returns the mount fd.
 */
int al_mount_dev(al_error *err);
/* Each node of DEVFD (al_mount_dev) bound on its own onto its name in
 * DEVDIR, the box's /dev on its nodev root: the nodes are the only mounts
 * there without nodev. A name missing in DEVDIR is made as the mount point. */
int al_mount_dev_nodes(int devfd, int devdir, al_error *err);
/* The host directory HOSTFD (an O_PATH fd) read-only, nosuid, nodev at
 * BOX_PATH beneath ROOTFD, the box's root (al_box_bind_path_ok's form):
 * each missing directory of BOX_PATH made in the root's own file system
 * (one that is there must be a directory of it, not a mount of the
 * runtime's), then the tree attached as an overlay of its own
 * (al_mount_own_tree), or a bind when OWN_INODES is false. */
int al_mount_bind_into(int rootfd, int hostfd, const char *box_path, bool own_inodes, al_error *err);
