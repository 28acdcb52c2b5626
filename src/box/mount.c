#include "mount.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

static int fsconfig_str(int fd, const char *k, const char *v, al_error *err) {
    if (fsconfig(fd, FSCONFIG_SET_STRING, k, v, 0) < 0)
        return al_err(err, "mount", errno, "fsconfig %s=%s: %m", k, v);
    return 0;
}

int al_mount_tmpfs(const al_tmpfs_opts *o, unsigned attrs, al_error *err) {
    _cleanup_close_ int fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_err(err, "mount", errno, "fsopen tmpfs: %m");
    char v[32];
    int r;
    snprintf(v, sizeof v, "%llu", (unsigned long long)o->size_bytes);
    if ((r = fsconfig_str(fs, "size", v, err)) < 0)
        return r;
    snprintf(v, sizeof v, "%llu", (unsigned long long)o->inodes);
    if ((r = fsconfig_str(fs, "nr_inodes", v, err)) < 0)
        return r;
    snprintf(v, sizeof v, "%o", o->mode);
    if ((r = fsconfig_str(fs, "mode", v, err)) < 0)
        return r;
    if (o->uid >= 0) {
        snprintf(v, sizeof v, "%d", o->uid);
        if ((r = fsconfig_str(fs, "uid", v, err)) < 0)
            return r;
    }
    if (o->gid >= 0) {
        snprintf(v, sizeof v, "%d", o->gid);
        if ((r = fsconfig_str(fs, "gid", v, err)) < 0)
            return r;
    }
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return al_err(err, "mount", errno, "create tmpfs: %m");
    int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
    if (m < 0)
        return al_err(err, "mount", errno, "fsmount tmpfs: %m");
    return m;
}

int al_mount_proc(bool pids_only, al_error *err) {
    _cleanup_close_ int fs = fsopen("proc", FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_err(err, "mount", errno, "fsopen proc: %m");
    /* subset=pid hides everything but the process directories: no
     * /proc/sys, kcore, keys, sysrq-trigger, kallsyms, timer_list. */
    int r = pids_only ? fsconfig_str(fs, "subset", "pid", err) : 0;
    if (r < 0)
        return r;
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return al_err(err, "mount", errno, "create proc: %m");
    int m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (m < 0)
        return al_err(err, "mount", errno, "fsmount proc: %m");
    return m;
}

int al_mount_bind(const char *src, unsigned attrs, al_error *err) {
    _cleanup_close_ int t = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (t < 0)
        return al_err(err, "mount", errno, "clone %s: %m", src);
    struct mount_attr a = { .attr_set = attrs, .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof a) < 0)
        return al_err(err, "mount", errno, "make %s read-only: %m", src);
    return TAKE_FD(t);
}

int al_mount_bind_at(int dirfd, const char *name, unsigned attrs, al_error *err) {
    _cleanup_close_ int t = open_tree(dirfd, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0)
        return al_err(err, "mount", errno, "clone %s: %m", name);
    struct mount_attr a = { .attr_set = attrs, .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
        return al_err(err, "mount", errno, "set attributes on %s: %m", name);
    return TAKE_FD(t);
}

int al_mount_attach(int mfd, int dirfd, const char *name, al_error *err) {
    if (move_mount(mfd, "", dirfd, name, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        return al_err(err, "mount", errno, "attach on /%s: %m", name);
    return 0;
}

int al_mount_setattr(int dirfd, const char *name, unsigned attrs, al_error *err) {
    struct mount_attr a = { .attr_set = attrs };
    if (mount_setattr(dirfd, name, name[0] ? 0 : AT_EMPTY_PATH, &a, sizeof a) < 0)
        return al_err(err, "mount", errno, "set attributes on /%s: %m", name);
    return 0;
}

/* The second layer every overlay of one process shares: overlayfs makes a
 * read-only overlay (no upper layer) of two lower layers at least, and an
 * empty one adds nothing to the tree. Made on the first use; overlayfs
 * keeps a private clone of it, so one detached mount serves every tree. */
static int empty_layer(al_error *err) {
    static int fd = -1;
    if (fd >= 0)
        return fd;
    al_tmpfs_opts o = { 4096, 4, 0555, -1, -1 };
    int m = al_mount_tmpfs(&o, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, err);
    if (m < 0)
        return m;
    return fd = m;
}

/* The overlay of the layers LOWER and EMPTY given by fd (Linux 6.13): no
 * path is resolved again. -EINVAL where the kernel takes no fd for a
 * layer, the caller then gives them by path. */
static int overlay_by_fd(int lower, int empty, unsigned attrs, const char *path, al_error *err) {
    _cleanup_close_ int fs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_err(err, "mount", errno, "fsopen overlay (overlayfs in a user namespace needs Linux 5.11): %m");
    if (fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, lower) < 0 ||
        fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, empty) < 0)
        return errno == EINVAL ? -EINVAL : al_err(err, "mount", errno, "overlay /%s: its layers: %m", path);
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return al_err(err, "mount", errno, "create the overlay of /%s: %m", path);
    int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
    if (m < 0)
        return al_err(err, "mount", errno, "fsmount the overlay of /%s: %m", path);
    return m;
}

/* Before Linux 6.13 a layer is a path, and a mount of the caller's own
 * namespace: LOWER (the read-only clone) and an empty tmpfs are attached
 * on DIRFD/NAME first, each named by its fd's magic link, and the overlay
 * on top of them covers both (their stack is the box's alone, beneath its
 * root or, in a forked box, beneath the zygote's tree there already). */
static int overlay_by_path(int lower, unsigned attrs, int dirfd, const char *name, al_error *err) {
    al_tmpfs_opts o = { 4096, 4, 0555, -1, -1 };
    _cleanup_close_ int empty = al_mount_tmpfs(&o, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
    if (empty < 0)
        return empty;
    int r = al_mount_attach(lower, dirfd, name, err);
    if (r < 0)
        return r;
    _cleanup_close_ int lfd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (lfd < 0 || (r = al_mount_attach(empty, dirfd, name, err)) < 0)
        return lfd < 0 ? al_err(err, "mount", errno, "open /%s: %m", name) : r;
    _cleanup_close_ int efd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (efd < 0)
        return al_err(err, "mount", errno, "open /%s: %m", name);
    char layers[64];
    snprintf(layers, sizeof layers, "/proc/self/fd/%d:/proc/self/fd/%d", lfd, efd);
    _cleanup_close_ int fs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0)
        return al_err(err, "mount", errno, "fsopen overlay (overlayfs in a user namespace needs Linux 5.11): %m");
    if ((r = fsconfig_str(fs, "lowerdir", layers, err)) < 0)
        return r;
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
        return al_err(err, "mount", errno, "create the overlay of /%s: %m", name);
    _cleanup_close_ int m = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
    if (m < 0)
        return al_err(err, "mount", errno, "fsmount the overlay of /%s: %m", name);
    return al_mount_attach(m, dirfd, name, err);
}

int al_mount_own_tree(int srcdir, const char *path, unsigned attrs, int dirfd, const char *name, al_error *err) {
    int empty = empty_layer(err);
    if (empty < 0)
        return empty;
    /* The lower layer a read-only clone of its own, not the source's mount
     * (the host's /usr is read-write): what the box reads through it must
     * not even touch an access time of the host's inode. Not recursive:
     * overlayfs reads one file system per layer. */
    _cleanup_close_ int t = open_tree(srcdir, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (path[0] ? 0 : AT_EMPTY_PATH));
    if (t < 0)
        return al_err(err, "mount", errno, "clone /%s: %m", path);
    struct mount_attr a = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                            .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
        return al_err(err, "mount", errno, "make /%s read-only: %m", path);
    _cleanup_close_ int m = overlay_by_fd(t, empty, attrs, path, err);
    if (m == -EINVAL)
        return overlay_by_path(t, attrs, dirfd, name, err);
    if (m < 0)
        return m;
    return al_mount_attach(m, dirfd, name, err);
}

/* The nodes a box's /dev holds, made in the host's user namespace: one
 * made in the box's could not be opened (its file systems are nodev). */
static const struct {
    const char *name;
    unsigned major, minor;
} dev_nodes[] = { { "null", 1, 3 }, { "zero", 1, 5 }, { "full", 1, 7 }, { "random", 1, 8 }, { "urandom", 1, 9 } };

int al_mount_dev(al_error *err) {
    al_tmpfs_opts o = { 64 << 10, 16, 0755, -1, -1 };
    _cleanup_close_ int m = al_mount_tmpfs(&o, 0, err);
    if (m < 0)
        return m;
    for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
        if (mknodat(m, dev_nodes[i].name, S_IFCHR | 0666, makedev(dev_nodes[i].major, dev_nodes[i].minor)) < 0 ||
            fchmodat(m, dev_nodes[i].name, 0666, 0) < 0) /* (past the umask) */
            return al_err(err, "dev", errno, "mknod /dev/%s: %m", dev_nodes[i].name);
    }
    /* read-only and never executable; not nodev, or no node would open */
    struct mount_attr a = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC };
    if (mount_setattr(m, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
        return al_err(err, "dev", errno, "make /dev read-only: %m");
    return TAKE_FD(m);
}

int al_mount_dev_nodes(int devfd, int devdir, al_error *err) {
    for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
        const char *name = dev_nodes[i].name;
        struct stat st;
        /* a mount point: a file of the box's own, or (a forked box) the
         * zygote's node, which this one covers; never opened here */
        if (fstatat(devdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            _cleanup_close_ int f = openat(devdir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
            if (f < 0)
                return al_err(err, "dev", errno, "create /dev/%s: %m", name);
        }
        _cleanup_close_ int m = al_mount_bind_at(devfd, name, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err);
        if (m < 0)
            return m;
        int r = al_mount_attach(m, devdir, name, err);
        if (r < 0)
            return r;
    }
    return 0;
}

int al_mount_bind_into(int rootfd, int hostfd, const char *box_path, bool own_inodes, al_error *err) {
    struct stat rst;
    if (fstat(rootfd, &rst) < 0)
        return al_err(err, "mount", errno, "stat the box's root: %m");
    /* walk BOX_PATH's components: each made (or found) in the root's own
     * tmpfs; the last is the mount point */
    char path[256];
    snprintf(path, sizeof path, "%s", box_path);
    _cleanup_close_ int dir = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    if (dir < 0)
        return al_err(err, "mount", errno, "dup the root's fd: %m");
    char *save = NULL, *name = strtok_r(path, "/", &save), *next;
    for (; name; name = next) {
        next = strtok_r(NULL, "/", &save);
        if (mkdirat(dir, name, 0755) < 0 && errno != EEXIST)
            return al_err(err, "mount", errno, "mkdir %s (for %s): %m", name, box_path);
        struct stat st;
        int d = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d < 0 || fstat(d, &st) < 0) {
            int e = errno;
            if (d >= 0)
                close(d);
            return al_err(err, "mount", e, "open %s (for %s): %m", name, box_path);
        }
        /* never beneath a mount the box has there already (its runtime's
         * /usr, a scratch tmpfs): only the root's own directories */
        if (st.st_dev != rst.st_dev) {
            close(d);
            return al_err(err, "mount", EBUSY, "%s: %s is a mount of the box's already", box_path, name);
        }
        if (!next) {
            close(d);
            break;
        }
        close(dir);
        dir = d;
    }
    if (!name)
        return al_err(err, "mount", EINVAL, "%s: no directory to mount on", box_path);
    const unsigned attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (own_inodes)
        return al_mount_own_tree(hostfd, "", attrs, dir, name, err);
    _cleanup_close_ int t = open_tree(hostfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (t < 0)
        return al_err(err, "mount", errno, "clone the tree for %s: %m", box_path);
    struct mount_attr a = { .attr_set = attrs, .propagation = MS_PRIVATE };
    if (mount_setattr(t, "", AT_EMPTY_PATH, &a, sizeof a) < 0)
        return al_err(err, "mount", errno, "make %s read-only: %m", box_path);
    return al_mount_attach(t, dir, name, err);
}
