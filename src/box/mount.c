#include "mount.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>

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
