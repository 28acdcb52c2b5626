/*
 * Skill bundles, unpacked. An uploaded bundle is hostile until checked: it
 * is unpacked by us, entry by entry, into a fresh directory (never with
 * archive_write_disk, which would do what the archive says), with caps on
 * entries, bytes and depth; links, devices and fifos are refused, not
 * skipped, so an author learns at once that the bundle is not what they
 * think. A bundled skill's directory is copied by the same rules. Nothing
 * here knows of the service: tests/fuzz/fuzz_skill.c drives it directly.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "skills.h"

#define ENTRIES_MAX (AL_SKILL_FILES_MAX * 2)

typedef struct unpack {
    int rootfd;
    uint64_t files, entries, bytes;
} unpack;

/* Open (making it when MAKE) the directory holding the last component of
 * PATH, one component at a time without following links; the tree is our
 * own fresh directory, so no link can be there, and none is followed if
 * one were. */
static int open_parent(int rootfd, const char *path, bool make, const char **ret_leaf, al_error *err) {
    int dir = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    if (dir < 0)
        return al_err(err, "skill", errno, "dup: %m");
    const char *c = path;
    for (;;) {
        size_t l = strcspn(c, "/");
        if (c[l] == '\0' || (c[l] == '/' && c[l + 1] == '\0')) {
            *ret_leaf = c;
            return dir;
        }
        char comp[AL_SKILL_PATH_MAX + 1];
        snprintf(comp, sizeof comp, "%.*s", (int)l, c);
        bool made = make && mkdirat(dir, comp, 0755) == 0;
        if (make && !made && errno != EEXIST) {
            int e = errno;
            close(dir);
            return al_err(err, "skill", e, "mkdir %s: %s", comp, strerror(e));
        }
        int next = openat(dir, comp, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(dir);
        if (next < 0)
            return al_err(err, "skill", e, "\"%.200s\": %s is not a directory", path, comp);
        if (made)
            fchmod(next, 0755); /* whatever the umask: the box's user reads it */
        dir = next;
        c += l + 1;
    }
}

static int count_entry(unpack *u, bool file, const char *path, al_error *err) {
    if (++u->entries > ENTRIES_MAX)
        return al_err(err, "skill", E2BIG, "more than %d entries in the bundle", ENTRIES_MAX);
    if (file && ++u->files > AL_SKILL_FILES_MAX)
        return al_err(err, "skill", E2BIG, "more than %d files in the bundle", AL_SKILL_FILES_MAX);
    return 0;
}

static int make_dir_entry(unpack *u, const char *path, al_error *err) {
    int r = count_entry(u, false, path, err);
    if (r < 0)
        return r;
    const char *leaf;
    _cleanup_close_ int dir = open_parent(u->rootfd, path, true, &leaf, err);
    if (dir < 0)
        return dir;
    char name[AL_SKILL_PATH_MAX + 1];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(leaf, "/"), leaf);
    if (mkdirat(dir, name, 0755) < 0 && errno != EEXIST)
        return al_err(err, "skill", errno, "mkdir %s: %m", path);
    _cleanup_close_ int d = openat(dir, name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d < 0)
        return al_err(err, "skill", errno, "\"%.200s\" is not a directory", path);
    fchmod(d, 0755); /* whatever the umask */
    return 0;
}

/* Create the regular file PATH (exclusively: a bundle names each file
 * once) and return its fd. */
static int create_file(unpack *u, const char *path, bool exec, al_error *err) {
    int r = count_entry(u, true, path, err);
    if (r < 0)
        return r;
    const char *leaf;
    _cleanup_close_ int dir = open_parent(u->rootfd, path, true, &leaf, err);
    if (dir < 0)
        return dir;
    int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, exec ? 0755 : 0644);
    if (fd < 0)
        return al_err(err, "skill", errno, errno == EEXIST ? "\"%.200s\" appears twice in the bundle" : "create %.200s: %m",
                      path);
    fchmod(fd, exec ? 0755 : 0644); /* whatever the umask */
    return fd;
}

static int add_bytes(unpack *u, size_t n, al_error *err) {
    u->bytes += n;
    if (u->bytes > AL_SKILL_BYTES_MAX)
        return al_err(err, "skill", EFBIG, "the bundle's files exceed %d bytes unpacked", AL_SKILL_BYTES_MAX);
    return 0;
}

/* "./a/b" -> "a/b"; "." and "./" -> "" (the top directory itself). */
static const char *strip_dot(const char *p) {
    while (p[0] == '.' && p[1] == '/')
        p += 2;
    if (strcmp(p, ".") == 0)
        return "";
    return p;
}

static int unpack_archive(unpack *u, const void *body, size_t len, al_error *err) {
    struct archive *a = archive_read_new();
    if (!a)
        return -ENOMEM;
    archive_read_support_filter_gzip(a);
    archive_read_support_format_tar(a);
    int r = 0;
    if (archive_read_open_memory(a, body, len) != ARCHIVE_OK) {
        r = al_err(err, "skill", EINVAL, "not a tar or tar.gz archive: %s", archive_error_string(a));
        goto out;
    }
    struct archive_entry *e;
    for (;;) {
        int h = archive_read_next_header(a, &e);
        if (h == ARCHIVE_EOF)
            break;
        if (h != ARCHIVE_OK && h != ARCHIVE_WARN) {
            r = al_err(err, "skill", EINVAL, "not a tar or tar.gz archive: %s", archive_error_string(a));
            goto out;
        }
        const char *raw = archive_entry_pathname(e);
        if (!raw) {
            r = al_err(err, "skill", EINVAL, "an entry without a name");
            goto out;
        }
        const char *path = strip_dot(raw);
        if (!*path) {
            /* the top directory itself: counted like any entry (else a
             * flood of "./" entries, or data under ".", would escape the
             * caps), and only ever a directory */
            if ((r = count_entry(u, false, "./", err)) < 0)
                goto out;
            if (archive_entry_filetype(e) != AE_IFDIR) {
                r = al_err(err, "skill", EINVAL, "an entry named \".\" that is not the top directory");
                goto out;
            }
            continue;
        }
        if ((r = al_skill_path_check(path, NULL, err)) < 0)
            goto out;
        mode_t type = archive_entry_filetype(e);
        if (archive_entry_hardlink(e) || type == AE_IFLNK) {
            r = al_err(err, "skill", EPERM, "\"%.200s\" is a link: a skill holds regular files and directories only",
                       path);
            goto out;
        }
        if (type == AE_IFDIR) {
            if ((r = make_dir_entry(u, path, err)) < 0)
                goto out;
            continue;
        }
        if (type != AE_IFREG) {
            r = al_err(err, "skill", EPERM,
                       "\"%.200s\" is a device, fifo or socket: a skill holds regular files and directories only", path);
            goto out;
        }
        if (archive_entry_size_is_set(e) && archive_entry_size(e) > AL_SKILL_BYTES_MAX) {
            r = al_err(err, "skill", EFBIG, "\"%.200s\" is larger than %d bytes", path, AL_SKILL_BYTES_MAX);
            goto out;
        }
        _cleanup_close_ int fd = create_file(u, path, (archive_entry_perm(e) & 0111) != 0, err);
        if (fd < 0) {
            r = fd;
            goto out;
        }
        char buf[65536];
        for (;;) {
            la_ssize_t n = archive_read_data(a, buf, sizeof buf);
            if (n == 0)
                break;
            if (n < 0) {
                r = al_err(err, "skill", EINVAL, "read %.200s from the archive: %s", path, archive_error_string(a));
                goto out;
            }
            if ((r = add_bytes(u, (size_t)n, err)) < 0)
                goto out;
            if ((r = al_write_all(fd, buf, (size_t)n)) < 0) {
                r = al_err(err, "skill", -r, "write %.200s: %s", path, strerror(-r));
                goto out;
            }
        }
    }
out:
    archive_read_free(a);
    return r;
}

/* A bundled skill's directory, copied by the same rules as an upload. */
static int copy_tree(unpack *u, int src, const char *prefix, unsigned depth, al_error *err) {
    if (depth > AL_SKILL_DEPTH_MAX)
        return al_err(err, "skill", ELOOP, "%s: deeper than %d levels", prefix, AL_SKILL_DEPTH_MAX);
    int dup_fd = fcntl(src, F_DUPFD_CLOEXEC, 3);
    if (dup_fd < 0)
        return al_err(err, "skill", errno, "dup: %m");
    DIR *d = fdopendir(dup_fd);
    if (!d) {
        close(dup_fd);
        return al_err(err, "skill", errno, "read %s: %m", prefix);
    }
    int r = 0;
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        /* Python's bytecode caches are not part of a skill */
        if (strcmp(de->d_name, "__pycache__") == 0)
            continue;
        char path[AL_SKILL_PATH_MAX + 2];
        if ((size_t)snprintf(path, sizeof path, "%s%s", prefix, de->d_name) >= sizeof path - 1) {
            r = al_err(err, "skill", ENAMETOOLONG, "%s%s: name too long", prefix, de->d_name);
            break;
        }
        if ((r = al_skill_path_check(path, NULL, err)) < 0)
            break;
        struct stat st;
        if (fstatat(src, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            r = al_err(err, "skill", errno, "stat %s: %m", path);
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if ((r = make_dir_entry(u, path, err)) < 0)
                break;
            _cleanup_close_ int sub = openat(src, de->d_name, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            char pre[AL_SKILL_PATH_MAX + 2];
            snprintf(pre, sizeof pre, "%s/", path);
            r = sub < 0 ? al_err(err, "skill", errno, "open %s: %m", path) : copy_tree(u, sub, pre, depth + 1, err);
        } else if (S_ISREG(st.st_mode)) {
            _cleanup_close_ int in = openat(src, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
            _cleanup_close_ int out = in < 0 ? -1 : create_file(u, path, (st.st_mode & 0111) != 0, err);
            if (in < 0)
                r = al_err(err, "skill", errno, "open %s: %m", path);
            else if (out < 0)
                r = out;
            char buf[65536];
            while (r == 0) {
                ssize_t n = read(in, buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0)
                    r = al_err(err, "skill", errno, "read %s: %m", path);
                if (n <= 0)
                    break;
                if ((r = add_bytes(u, (size_t)n, err)) == 0 && (r = al_write_all(out, buf, (size_t)n)) < 0)
                    r = al_err(err, "skill", -r, "write %s: %s", path, strerror(-r));
            }
        } else {
            r = al_err(err, "skill", EPERM, "\"%s\" is a link, device, fifo or socket: a skill holds regular files "
                                            "and directories only", path);
        }
    }
    closedir(d);
    return r;
}

int al_skill_unpack(int rootfd, const void *body, size_t len, al_error *err) {
    unpack u = { .rootfd = rootfd };
    return unpack_archive(&u, body, len, err);
}

int al_skill_copy_dir(int rootfd, const char *path, al_error *err) {
    _cleanup_close_ int src = open(path, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0)
        return al_err(err, "skill", errno, "open %s: %m", path);
    unpack u = { .rootfd = rootfd };
    return copy_tree(&u, src, "", 1, err);
}
