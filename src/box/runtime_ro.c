/*
 * A runtime with one more read-only tree: the inner runtime's tree, plus a
 * host directory bound read-only (and nosuid, nodev) at /NAME in the box.
 * A skill's files reach its box this way, at /skill, without touching the
 * box's setup sequence: the runtime interface is the plug point for what
 * the root holds.
 *
 * The directory is opened in open(), which runs in the box's mount
 * namespace before the box takes its sandbox identity, so the state
 * directory's 0700 parents do not stand in the way; only the bound tree
 * itself must be readable by others (the store makes it 0755/0644).
 */
#include "runtime_ro.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "mount.h"

static int ro_open(const al_runtime *rt, al_error *err) {
    /* the box is a copy of our memory: its own fds are kept in its copy */
    al_runtime_ro *ro = (al_runtime_ro *)rt->data;
    ro->inner_fd = -1;
    if (ro->inner->open) {
        int fd = ro->inner->open(ro->inner, err);
        if (fd < 0)
            return fd;
        ro->inner_fd = fd;
    }
    int fd = open(ro->host_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "runtime", errno, "open %s: %m", ro->host_dir);
    return fd;
}

static int ro_populate(const al_runtime *rt, int srcfd, int rootfd, bool own_inodes, al_error *err) {
    al_runtime_ro *ro = (al_runtime_ro *)rt->data;
    _cleanup_close_ int inner_fd = ro->inner_fd;
    ro->inner_fd = -1;
    int r = ro->inner->populate(ro->inner, inner_fd, rootfd, own_inodes, err);
    if (r < 0)
        return r;
    const unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (mkdirat(rootfd, ro->name, 0755) < 0)
        return al_err(err, "runtime", errno, "mkdir /%s: %m", ro->name);
    /* a skill's files are one tree for every box that runs it */
    if (own_inodes)
        return al_mount_own_tree(srcfd, "", attrs, rootfd, ro->name, err);
    _cleanup_close_ int t = open_tree(srcfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
    if (t < 0)
        return al_err(err, "runtime", errno, "clone %s: %m", ro->host_dir);
    struct mount_attr a = { .attr_set = attrs, .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
        return al_err(err, "runtime", errno, "make %s read-only: %m", ro->host_dir);
    return al_mount_attach(t, rootfd, ro->name, err);
}

void al_runtime_ro_init(al_runtime_ro *ro, const al_runtime *inner, const char *host_dir, const char *name) {
    memset(ro, 0, sizeof *ro);
    ro->inner = inner;
    ro->inner_fd = -1;
    snprintf(ro->host_dir, sizeof ro->host_dir, "%s", host_dir);
    snprintf(ro->name, sizeof ro->name, "%s", name);
    ro->rt = *inner;              /* its name, digest and /tmp seed */
    ro->rt.open = ro_open;
    ro->rt.populate = ro_populate;
    ro->rt.data = ro;
}
