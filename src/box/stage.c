#include "stage.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>

#include "collect.h"

/* Box-side operations run as the box's uid: the tmpfs belongs to the box's
 * user namespace, where host root is unmapped, and root must not create
 * anything there the box user could not. Host-side reads keep our rights. */
#define AS_BOX(st, expr) ({ al_fsid _s = al_fsid_enter((st)->uid, (st)->gid); __typeof__(expr) _v = (expr); int _e = errno; al_fsid_leave(_s); errno = _e; _v; })

static int check_name(const char *name, al_error *err) {
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strlen(name) > 255)
        return al_err(err, "stage", EINVAL, "bad file name for /work: \"%s\"", name);
    return 0;
}

static int space_error(al_error *err, const char *name, int e) {
    if (e == ENOSPC || e == EFBIG || e == EDQUOT)
        return al_err(err, "stage", e, "%s does not fit in /work (its size cap): %s", name, strerror(e));
    return al_err(err, "stage", e, "write /work/%s: %s", name, strerror(e));
}

int al_stage_data(al_stage *st, const char *name, const void *data, size_t len, mode_t mode, al_error *err) {
    int r = check_name(name, err);
    if (r < 0)
        return r;
    if (++st->files > st->max_files)
        return al_err(err, "stage", E2BIG, "more than %llu input files", (unsigned long long)st->max_files);
    st->bytes += len;
    if (st->bytes > st->max_bytes)
        return al_err(err, "stage", EFBIG, "inputs exceed %llu bytes", (unsigned long long)st->max_bytes);
    _cleanup_close_ int fd = AS_BOX(st, openat(st->workfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (fd < 0) {
        if (errno == EEXIST)
            return al_err(err, "stage", EEXIST, "two inputs are named \"%s\"", name);
        return space_error(err, name, errno);
    }
    r = al_write_all(fd, data, len);
    if (r < 0)
        return space_error(err, name, -r);
    return 0;
}

static int copy_fd(al_stage *st, int src, int dirfd, const char *name, mode_t mode, al_error *err) {
    _cleanup_close_ int dst = AS_BOX(st, openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (dst < 0) {
        if (errno == EEXIST)
            return al_err(err, "stage", EEXIST, "two inputs are named \"%s\"", name);
        return space_error(err, name, errno);
    }
    char buf[65536];
    for (;;) {
        ssize_t n = read(src, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return al_err(err, "stage", errno, "read input %s: %m", name);
        }
        if (n == 0)
            return 0;
        st->bytes += (uint64_t)n;
        if (st->bytes > st->max_bytes)
            return al_err(err, "stage", EFBIG, "inputs exceed %llu bytes", (unsigned long long)st->max_bytes);
        int r = al_write_all(dst, buf, (size_t)n);
        if (r < 0)
            return space_error(err, name, -r);
    }
}

static int copy_tree(al_stage *st, int src, int dirfd, const char *name, unsigned depth, al_error *err);

static bool skipped(const char *name, const char *const *skip, size_t n_skip) {
    for (size_t i = 0; i < n_skip; i++)
        if (strcmp(name, skip[i]) == 0)
            return true;
    return false;
}

/* The entries of directory SRC (an open fd; NAME, for messages) into the
 * directory DST, but for those named in SKIP. */
static int copy_entries(al_stage *st, int src, int dst, const char *name, unsigned depth, const char *const *skip,
                        size_t n_skip, al_error *err) {
    int dup_fd = fcntl(src, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0)
        return al_err(err, "stage", errno, "dup: %m");
    DIR *d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        return al_err(err, "stage", errno, "read input dir %s: %m", name);
    }
    int r = 0;
    struct dirent *de;
    while (r == 0 && (errno = 0, de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 || skipped(de->d_name, skip, n_skip))
            continue;
        if (++st->files > st->max_files) {
            r = al_err(err, "stage", E2BIG, "more than %llu input files", (unsigned long long)st->max_files);
            break;
        }
        struct stat s;
        if (fstatat(src, de->d_name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
            r = al_err(err, "stage", errno, "stat input %s/%s: %m", name, de->d_name);
            break;
        }
        if (S_ISDIR(s.st_mode)) {
            _cleanup_close_ int sub = openat(src, de->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            r = sub < 0 ? al_err(err, "stage", errno, "open input %s/%s: %m", name, de->d_name)
                        : copy_tree(st, sub, dst, de->d_name, depth + 1, err);
        } else if (S_ISREG(s.st_mode)) {
            /* O_NONBLOCK and a second look at what was opened: a FIFO swapped
             * in after the fstatat must not block the copy */
            _cleanup_close_ int f = openat(src, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
            struct stat fs;
            if (f < 0)
                r = al_err(err, "stage", errno, "open input %s/%s: %m", name, de->d_name);
            else if (fstat(f, &fs) < 0 || !S_ISREG(fs.st_mode))
                r = al_err(err, "stage", EINVAL, "input %s/%s is no longer a regular file", name, de->d_name);
            else
                r = copy_fd(st, f, dst, de->d_name, (s.st_mode & 0111) ? 0755 : 0644, err);
        } else if (S_ISLNK(s.st_mode)) {
            /* a link is kept as a link: it resolves inside the box, never on the host */
            char target[4096];
            ssize_t n = readlinkat(src, de->d_name, target, sizeof target - 1);
            if (n >= 0) {
                target[n] = '\0';
                if (AS_BOX(st, symlinkat(target, dst, de->d_name)) < 0)
                    r = space_error(err, de->d_name, errno);
            }
        }
        /* sockets, fifos and devices are not data: left out */
    }
    if (r == 0 && errno)
        r = al_err(err, "stage", errno, "read input dir %s: %m", name);
    closedir(d);
    return r;
}

/* Copy directory SRC (an open fd) into a new directory NAME under DIRFD.
 * Recursion depth is capped by max_depth, which bounds the stack. */
static int copy_tree(al_stage *st, int src, int dirfd, const char *name, unsigned depth, al_error *err) {
    if (depth > st->max_depth)
        return al_err(err, "stage", ELOOP, "input directory deeper than %llu levels", (unsigned long long)st->max_depth);
    if (AS_BOX(st, mkdirat(dirfd, name, 0755)) < 0) {
        if (errno == EEXIST)
            return al_err(err, "stage", EEXIST, "two inputs are named \"%s\"", name);
        return space_error(err, name, errno);
    }
    _cleanup_close_ int dst = AS_BOX(st, openat(dirfd, name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dst < 0)
        return al_err(err, "stage", errno, "open staged dir %s: %m", name);
    return copy_entries(st, src, dst, name, depth, NULL, 0, err);
}

int al_stage_dir_entries(al_stage *st, const char *dir, const char *const *skip, size_t n_skip, al_error *err) {
    /* the directory itself is the service's; nothing on its path is a link */
    _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0)
        return al_err(err, "stage", errno, "open the working directory %s: %m", dir);
    /* its entries were written by boxes: copy_entries opens each with
     * O_NOFOLLOW relative to its parent, keeps a link as a link (resolved
     * inside the box, never here), and counts files, bytes and depth */
    return copy_entries(st, fd, st->workfd, "/work", 1, skip, n_skip, err);
}

int al_stage_path(al_stage *st, const char *host_path, al_error *err) {
    _cleanup_free_ char *copy = strdup(host_path);
    if (!copy)
        return -ENOMEM;
    return al_stage_path_as(st, host_path, basename(copy), err);
}

int al_stage_path_as(al_stage *st, const char *host_path, const char *name, al_error *err) {
    int r = check_name(name, err);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = open(host_path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return al_err(err, "stage", errno, "open input %s: %m", host_path);
    struct stat s;
    if (fstat(fd, &s) < 0)
        return al_err(err, "stage", errno, "stat input %s: %m", host_path);
    if (S_ISDIR(s.st_mode))
        return copy_tree(st, fd, st->workfd, name, 1, err);
    if (!S_ISREG(s.st_mode))
        return al_err(err, "stage", EINVAL, "input %s is not a regular file or directory", host_path);
    if (++st->files > st->max_files)
        return al_err(err, "stage", E2BIG, "more than %llu input files", (unsigned long long)st->max_files);
    /* the O_NONBLOCK was only for opening safely; reads of a file ignore it */
    return copy_fd(st, fd, st->workfd, name, (s.st_mode & 0111) ? 0755 : 0644, err);
}

int al_stage_beneath_as(al_stage *st, const char *root, const char *rel, const char *name, al_error *err) {
    int r = check_name(name, err);
    if (r < 0)
        return r;
    /* the root itself is ours (the store), opened with our rights */
    _cleanup_close_ int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd < 0)
        return al_err(err, "stage", errno, "open %s: %m", root);
    /* everything beneath it is the tree's: read with the box's rights, so
     * the copy holds nothing the box could not read in the tree itself */
    al_fsid saved = al_fsid_enter(st->uid, st->gid);
    int fd = al_openat_beneath(rootfd, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK, 0);
    if (fd == -ENOENT)
        r = 0; /* no seed in this tree */
    else if (fd < 0)
        r = al_err(err, "stage", -fd, "/%s in the image: %s; refused (a link, a mount or a non-directory on its path)", rel,
                   strerror(-fd));
    else
        r = copy_tree(st, fd, st->workfd, name, 1, err);
    al_fsid_leave(saved);
    if (fd >= 0)
        close(fd);
    return r;
}
