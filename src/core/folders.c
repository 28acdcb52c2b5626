/*
 * Connected folders (folders.h): registration, the root opened and checked
 * by its identity, listings, the imports of a run resolved (walked with
 * caps, hashed) and staged again at its start (copied, hashed as copied).
 * Library code: no log, no exit; every refusal names the folder, the path
 * and the rule.
 */
#include "folders.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "../util/hash.h"
#include "../util/util.h"

/* names read from one directory of a walk or a listing: past this, the
 * directory is refused (a walk) or the listing truncated, so that a
 * directory of millions of entries costs a bounded read */
#define DIR_NAMES_MAX 10000

/* A regular file of more than one name: a hard link is the file itself, so
 * nothing tells the name inside the folder from one outside it (a link
 * made to /etc/shadow, or to the service's own state on the same
 * filesystem, reads as a plain file). Such a file is never read: listed
 * and walked it is left out, named it is refused. */
#define HARD_LINK_WHY                                                                                                  \
    "is a hard link (its file has more than one name, and another may lie outside the folder), which a folder's "   \
    "import never reads: copy the file into the folder"

/* Why a directory entry NAME is left out of a listing and a walk (a path
 * holding it is refused at the request): not valid UTF-8, or a control or
 * bidirectional-override character. NULL when it is fine. */
static const char *name_fault(const char *name) { return al_run_folder_name_fault(name, strlen(name)); }

/* ------------------------------------------------------------ opening */

/* What an openat2 failure says of a path, in a refusal's words. */
static const char *open_fault(int e) {
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return "does not exist";
    case ELOOP:
        return "is or passes through a symbolic link, which a folder's import never follows";
    case EXDEV:
        return "is or crosses a mount point (or leaves the folder), which a folder's import never crosses";
    case EACCES:
    case EPERM:
        return "cannot be read by the service";
    default:
        return strerror(e);
    }
}

/* What a file of mode M is, when it is not a regular file or a directory. */
static const char *kind_of(mode_t m) {
    return S_ISLNK(m)                  ? "a symbolic link"
           : S_ISFIFO(m)               ? "a FIFO"
           : S_ISCHR(m) || S_ISBLK(m)  ? "a device"
           : S_ISSOCK(m)               ? "a socket"
                                       : "not a regular file";
}

int al_folder_open_root(const al_store_folder *f, al_error *err) {
    int fd = open(f->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "folder", errno == ENOENT ? ENOENT : errno, "folder %s: its root %s cannot be opened: %m",
                      f->name, f->path);
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return al_err(err, "folder", e, "folder %s: stat %s: %s", f->name, f->path, strerror(e));
    }
    if ((uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino) {
        close(fd);
        return al_err(err, "folder", ESTALE,
                      "folder %s: %s is not the directory registered (device %llu inode %llu then, device %llu "
                      "inode %llu now): an operator must register it again",
                      f->name, f->path, (unsigned long long)f->dev, (unsigned long long)f->ino,
                      (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    }
    return fd;
}

/* REL beneath ROOT as a regular file, opened for reading: first as O_PATH
 * (its type read without opening it: a FIFO never blocks, a device is
 * never opened), then for reading, the two the same file. The fd and its
 * stat, or -errno with *RET_WHY (a link, a FIFO, ...). */
static int open_regular(int root, const char *rel, struct stat *ret, const char **ret_why) {
    struct stat ps;
    *ret_why = NULL;
    _cleanup_close_ int pfd = al_openat_beneath(root, rel, O_PATH, 0);
    if (pfd < 0) {
        *ret_why = open_fault(-pfd);
        return pfd;
    }
    if (fstat(pfd, &ps) < 0)
        return -errno;
    if (!S_ISREG(ps.st_mode)) {
        *ret_why = S_ISDIR(ps.st_mode) ? "is a directory" : kind_of(ps.st_mode);
        return -EINVAL;
    }
    if (ps.st_nlink > 1) {
        *ret_why = HARD_LINK_WHY;
        return -EMLINK;
    }
    int fd = al_openat_beneath(root, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
    if (fd < 0) {
        *ret_why = open_fault(-fd);
        return fd;
    }
    if (fstat(fd, ret) < 0 || !S_ISREG(ret->st_mode) || ret->st_dev != ps.st_dev || ret->st_ino != ps.st_ino ||
        ret->st_nlink > 1) {
        close(fd);
        *ret_why = "was replaced while it was opened";
        return -EAGAIN;
    }
    return fd;
}

static bool glob_allows(const char *glob, const char *rel) {
    return !glob || !*glob || fnmatch(glob, rel, 0) == 0;
}

/* ------------------------------------------------------- registration */

/* Whether directory FD is the directory of identity (DEV, INO) or lies
 * beneath it: its ".." followed up to the root, each compared by identity,
 * not by name (a bind mount shows the state directory under another path,
 * and realpath would not see it). 1, 0, or -errno. */
static int beneath_id(int fd, dev_t dev, ino_t ino) {
    _cleanup_close_ int cur = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0)
        return -errno;
    for (int up = 0; up < 4096; up++) {
        struct stat a, b;
        if (fstat(cur, &a) < 0)
            return -errno;
        if (a.st_dev == dev && a.st_ino == ino)
            return 1;
        int next = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (next < 0)
            return -errno;
        close(cur);
        cur = next;
        if (fstat(cur, &b) < 0)
            return -errno;
        if (b.st_dev == a.st_dev && b.st_ino == a.st_ino)
            return 0; /* the root: its .. is itself */
    }
    return -ELOOP;
}

/* Whether one of A and B (paths within one filesystem) is the other or
 * beneath it, component by component. */
static bool nested(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), n = la < lb ? la : lb;
    if (strncmp(a, b, n) != 0)
        return false;
    /* "/" holds everything; else the shorter must end at a component */
    return la == lb || n == 1 || (la > lb ? a[n] : b[n]) == '/';
}

/* mountinfo's octal escapes (\040 a space) undone in place. */
static void unescape_octal(char *s) {
    char *o = s;
    for (; *s; s++, o++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
            *o = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *o = *s;
        }
    }
    *o = '\0';
}

/* Directory FD's path within its filesystem (RP its real path in this
 * mount namespace): its mount's root in the filesystem (mountinfo's 4th
 * field; a bind mount of /var/lib/airlock/runs at /srv/x has root
 * /var/lib/airlock/runs, or its path within its device) joined with RP
 * beneath the mount point. A bind mount shows a directory under another
 * name, and .. from its root leads to the mount point's parent, so this
 * is how a folder lent through a bind of the state's inside is seen.
 * 0, or -errno. */
static int fs_path(int fd, const char *rp, char *out, size_t len) {
    char fdinfo[64], line[2 * PATH_MAX + 512];
    snprintf(fdinfo, sizeof fdinfo, "/proc/self/fdinfo/%d", fd);
    FILE *f = fopen(fdinfo, "re");
    long mnt = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "mnt_id: %ld", &mnt) == 1)
            break;
    if (f)
        fclose(f);
    if (mnt < 0 || !(f = fopen("/proc/self/mountinfo", "re")))
        return -ENOENT;
    int r = -ENOENT;
    char root[PATH_MAX], point[PATH_MAX];
    long id;
    while (r == -ENOENT && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%ld %*d %*s %4095s %4095s", &id, root, point) != 3 || id != mnt)
            continue;
        unescape_octal(root);
        unescape_octal(point);
        size_t pl = strlen(point);
        const char *rest = strcmp(point, "/") == 0 ? rp : strncmp(rp, point, pl) == 0 ? rp + pl : NULL;
        if (!rest || (*rest && *rest != '/'))
            r = -EXDEV;
        else
            r = snprintf(out, len, "%s%s", strcmp(root, "/") == 0 && *rest ? "" : root, rest) >= (int)len
                    ? -ENAMETOOLONG
                    : 0;
    }
    fclose(f);
    return r;
}

/* The filesystems of the kernel's own objects (processes, devices,
 * cgroups, tracing, firmware variables): not files an admin means to lend.
 * /proc lent would list every process and read each one's files as the
 * service's user; /sys's files are the kernel's attributes, some of which
 * do something when read. Its name, or NULL for a filesystem of files. */
static const char *pseudo_fs(int fd) {
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0)
        return NULL;
    static const struct { unsigned long magic; const char *name; } v[] = {
        { PROC_SUPER_MAGIC, "proc" },     { SYSFS_MAGIC, "sysfs" },          { DEBUGFS_MAGIC, "debugfs" },
        { TRACEFS_MAGIC, "tracefs" },     { SECURITYFS_MAGIC, "securityfs" }, { CGROUP_SUPER_MAGIC, "cgroup" },
        { CGROUP2_SUPER_MAGIC, "cgroup2" }, { BPF_FS_MAGIC, "bpf" },          { EFIVARFS_MAGIC, "efivarfs" },
        { PSTOREFS_MAGIC, "pstore" },     { SELINUX_MAGIC, "selinuxfs" },    { DEVPTS_SUPER_MAGIC, "devpts" },
        { BINFMTFS_MAGIC, "binfmt_misc" }, { NSFS_MAGIC, "nsfs" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if ((unsigned long)sf.f_type == v[i].magic)
            return v[i].name;
    return NULL;
}

/* Whether directory FD (PATH, as given) may be lent: not a kernel's
 * filesystem, and neither the service's state directory STATE_DIR (every
 * tenant's inputs, blobs, sandboxes, its database and audit key), nor
 * inside it, nor holding it, compared by identity. 0 or -EINVAL with ERR. */
static int lendable(int fd, const char *path, const char *state_dir, al_error *err) {
    const char *fs = pseudo_fs(fd);
    if (fs)
        return al_err(err, "folder", EINVAL,
                      "PATH %s is on a %s filesystem (the kernel's objects, not files): lend a directory of files",
                      path, fs);
    if (!state_dir)
        return 0;
    _cleanup_close_ int sfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat ss, fs_st;
    if (sfd < 0 || fstat(sfd, &ss) < 0 || fstat(fd, &fs_st) < 0)
        return al_err(err, "folder", EINVAL,
                      "the service's state directory %s cannot be opened (%m), so PATH %s cannot be checked "
                      "against it: give the service's --state",
                      state_dir, path);
    char rs[PATH_MAX];
    if (!realpath(state_dir, rs))
        snprintf(rs, sizeof rs, "%s", state_dir);
    int in = beneath_id(fd, ss.st_dev, ss.st_ino), holds = beneath_id(sfd, fs_st.st_dev, fs_st.st_ino);
    if (in < 0 || holds < 0)
        return al_err(err, "folder", EINVAL, "PATH %s: its place against the state directory %s cannot be read: %s",
                      path, rs, strerror(-(in < 0 ? in : holds)));
    /* on one filesystem, a bind mount may show one inside the other under
     * another name: compared as paths within the filesystem */
    char fp[PATH_MAX], sp[PATH_MAX];
    if (!in && !holds && fs_st.st_dev == ss.st_dev) {
        int a = fs_path(fd, path, fp, sizeof fp), b = fs_path(sfd, rs, sp, sizeof sp);
        if (a < 0 || b < 0)
            return al_err(err, "folder", EINVAL,
                          "PATH %s is on the filesystem of the state directory %s, and where on it cannot be read "
                          "(/proc/self/mountinfo: %s): lend a directory of another filesystem",
                          path, rs, strerror(-(a < 0 ? a : b)));
        if (nested(fp, sp)) {
            in = strlen(fp) >= strlen(sp);
            holds = !in;
        }
    }
    if (in || holds)
        return al_err(err, "folder", EINVAL,
                      "PATH %s %s the service's state directory %s, which holds every tenant's files: lend a "
                      "directory outside it",
                      path, holds ? "holds" : "is inside", rs);
    return 0;
}

int al_folder_add(al_store *st, const char *ws_id, const char *name, const char *path, const char *glob,
                  const char *state_dir, al_error *err) {
    if (!al_valid_thread_id(name))
        return al_err(err, "folder", EINVAL, "NAME must be 1-64 characters of A-Z a-z 0-9 . _ - (not . or ..)");
    if (!path || path[0] != '/' || strlen(path) >= PATH_MAX)
        return al_err(err, "folder", EINVAL, "PATH must be an absolute path of an existing directory");
    if (glob && (strlen(glob) > AL_FOLDER_GLOB_MAX))
        return al_err(err, "folder", EINVAL, "--glob must be at most %d bytes", AL_FOLDER_GLOB_MAX);
    int64_t n = 0;
    al_store_folder *have = NULL;
    size_t nhave = 0;
    int r = al_store_folders_list(st, ws_id, AL_FOLDERS_PER_WORKSPACE + 1, &have, &nhave, err);
    al_store_folders_free(have, nhave);
    if (r < 0)
        return r;
    n = (int64_t)nhave;
    if (n >= AL_FOLDERS_PER_WORKSPACE)
        return al_err(err, "folder", EDQUOT, "workspace %s has %d folders, the most it may: remove one first "
                      "(airlock admin folder rm --workspace WS NAME)", ws_id,
                      AL_FOLDERS_PER_WORKSPACE);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat s;
    if (fd < 0)
        return al_err(err, "folder", errno == ENOTDIR || errno == ELOOP ? EINVAL : errno,
                      "PATH %s: %m (it must be an existing directory, not a symbolic link)", path);
    if (fstat(fd, &s) < 0 || !S_ISDIR(s.st_mode))
        return al_err(err, "folder", EINVAL, "PATH %s is not a directory", path);
    /* the path each start opens again by name: its own, with no link on
     * the way (/proc/self/cwd, a link another user may repoint) */
    char rp[PATH_MAX];
    if (!realpath(path, rp))
        return al_err(err, "folder", errno, "PATH %s: %m", path);
    if (strcmp(rp, path) != 0)
        return al_err(err, "folder", EINVAL,
                      "PATH %s passes through a symbolic link (or a . or .. or a / too many): register its real "
                      "path, %s",
                      path, rp);
    if ((r = lendable(fd, path, state_dir, err)) < 0)
        return r;
    al_store_folder f = { .path = (char *)path, .glob = (char *)(glob ? glob : ""), .dev = (uint64_t)s.st_dev,
                          .ino = (uint64_t)s.st_ino };
    snprintf(f.workspace_id, sizeof f.workspace_id, "%s", ws_id);
    snprintf(f.name, sizeof f.name, "%s", name);
    return al_store_folder_add(st, &f, err);
}

int al_folder_remove(al_store *st, const char *ws_id, const char *name, al_error *err) {
    return al_store_folder_remove(st, ws_id, name, err);
}

json_t *al_folder_json(const al_store_folder *f, bool with_path) {
    json_t *o = json_pack("{s:s, s:s, s:s}", "name", f->name, "glob", f->glob ? f->glob : "", "created_at",
                          f->created_at);
    if (o && with_path)
        json_object_set_new(o, "path", json_string(f->path));
    return o;
}

/* ------------------------------------------------------------ listing */

static int cmp_entry(const void *a, const void *b) {
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "name")),
                  json_string_value(json_object_get(*(json_t *const *)b, "name")));
}

static void rfc3339(time_t t, char *buf, size_t len) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* One entry NAME of directory DFD (REL its path in the folder) as the
 * listing shows it, or NULL when it is left out. */
static json_t *entry_of(int dfd, const char *name, const char *rel, const char *glob) {
    _cleanup_close_ int fd = al_openat_beneath(dfd, name, O_PATH, 0);
    struct stat s;
    if (fd < 0 || fstat(fd, &s) < 0 || name_fault(name))
        return NULL; /* a link, a mount point, gone meanwhile, a name that is not text */
    bool dir = S_ISDIR(s.st_mode);
    if (!dir && (!S_ISREG(s.st_mode) || s.st_nlink > 1 || !glob_allows(glob, rel)))
        return NULL;
    char mt[40];
    rfc3339(s.st_mtime, mt, sizeof mt);
    return json_pack("{s:s, s:s, s:I, s:s}", "name", name, "type", dir ? "dir" : "file", "size",
                     (json_int_t)(dir ? 0 : s.st_size), "mtime", mt);
}

json_t *al_folder_entries(al_store *st, const char *ws_id, const char *name, const char *sub, al_error *err) {
    al_store_folder f;
    int r = al_store_folder_get(st, ws_id, name, &f, err);
    if (r < 0) {
        if (r == -ENOENT)
            al_err(err, "folder", ENOENT, "no folder named %s in this workspace (GET /v1/folders lists them)", name);
        return NULL;
    }
    const char *rel = sub && *sub ? sub : ".";
    const char *why = al_run_folder_path_fault(rel, strlen(rel));
    if (why) {
        al_store_folder_done(&f);
        al_err(err, "folder", EINVAL, "path %s %s: a path is relative to its folder (no .., not absolute)", rel, why);
        return NULL;
    }
    _cleanup_close_ int root = al_folder_open_root(&f, err);
    char glob[AL_FOLDER_GLOB_MAX + 1];
    snprintf(glob, sizeof glob, "%s", f.glob);
    al_store_folder_done(&f);
    if (root < 0)
        return NULL;
    int dfd = al_openat_beneath(root, rel, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0) {
        al_err(err, "folder", -dfd == ENOTDIR ? ENOENT : -dfd == ENOENT ? ENOENT : EINVAL,
               "folder %s: %s %s", name, rel, -dfd == ENOTDIR ? "is not a directory" : open_fault(-dfd));
        return NULL;
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        al_err(err, "folder", errno, "folder %s: list %s: %m", name, rel);
        return NULL;
    }
    json_t *list = json_array();
    bool truncated = false;
    size_t seen = 0;
    struct dirent *de;
    while (list && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (++seen > DIR_NAMES_MAX || json_array_size(list) >= AL_FOLDER_ENTRIES_MAX) {
            truncated = true;
            break;
        }
        char crel[AL_RUN_FOLDER_PATH_MAX + 300];
        snprintf(crel, sizeof crel, "%s%s%s", strcmp(rel, ".") == 0 ? "" : rel, strcmp(rel, ".") == 0 ? "" : "/",
                 de->d_name);
        json_t *e = entry_of(dirfd(d), de->d_name, crel, glob);
        if (e)
            json_array_append_new(list, e);
    }
    closedir(d);
    if (!list) {
        al_err(err, "folder", ENOMEM, "out of memory");
        return NULL;
    }
    /* sorted by name: readdir's order is the filesystem's */
    size_t n = json_array_size(list);
    json_t **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_incref(json_array_get(list, i));
    if (v) {
        qsort(v, n, sizeof *v, cmp_entry);
        json_array_clear(list);
        for (size_t i = 0; i < n; i++)
            json_array_append_new(list, v[i]);
        free(v);
    }
    return json_pack("{s:s, s:s, s:o, s:b}", "folder", name, "path", rel, "entries", list, "truncated", truncated);
}

/* ---------------------------------------------------------- resolving */

typedef struct walk {
    int root;
    const char *folder, *glob;
    al_run_spec *sp;
    uint64_t files, bytes;
    uint64_t names; /* names read in all the walk's directories */
    al_error *err;
} walk;

static bool already(const al_run_spec *sp, const char *folder, const char *rel) {
    for (size_t i = 0; i < sp->n_imports; i++)
        if (strcmp(sp->imports[i].folder, folder) == 0 && strcmp(sp->imports[i].path, rel) == 0)
            return true;
    return false;
}

/* Regular file REL (its fd FD, of stat S) read, hashed and added. */
static int take_file(walk *w, const char *rel, int fd, const struct stat *s) {
    if (already(w->sp, w->folder, rel))
        return 0;
    if (w->files + 1 > AL_FOLDER_FILES_MAX)
        return al_err(w->err, "folder", E2BIG, "folder %s: %s: the imports would pass %d files in all", w->folder, rel,
                      AL_FOLDER_FILES_MAX);
    if (w->bytes + (uint64_t)s->st_size > AL_FOLDER_BYTES_MAX)
        return al_err(w->err, "folder", EFBIG, "folder %s: %s (%lld bytes): the imports would pass %llu bytes (64 MiB) "
                      "in all", w->folder, rel, (long long)s->st_size, AL_FOLDER_BYTES_MAX);
    char hex[65];
    uint64_t got = 0;
    /* capped by the size seen: a file that grows as it is read is read to
     * that size, never further */
    int r = al_sha256_fd_capped(fd, (uint64_t)s->st_size, -1, hex, &got);
    if (r < 0)
        return al_err(w->err, "folder", -r, "folder %s: read %s: %s", w->folder, rel, strerror(-r));
    w->files++;
    w->bytes += got;
    return al_run_spec_add_import(w->sp, w->folder, rel, got, hex) < 0
               ? al_err(w->err, "folder", ENOMEM, "out of memory")
               : 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in directory REL beneath W's root, sorted (so that what a walk
 * takes, and the order it is hashed in, does not depend on readdir's). */
static int dir_names(walk *w, const char *rel, char ***ret, size_t *ret_n) {
    *ret = NULL;
    *ret_n = 0;
    int dfd = al_openat_beneath(w->root, rel, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return al_err(w->err, "folder", -dfd == ENOENT ? ENOENT : EINVAL, "folder %s: %s %s", w->folder, rel,
                      open_fault(-dfd));
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return al_err(w->err, "folder", errno, "folder %s: list %s: %m", w->folder, rel);
    }
    char **v = NULL;
    size_t n = 0;
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (n >= DIR_NAMES_MAX) {
            r = al_err(w->err, "folder", E2BIG, "folder %s: directory %s holds more than %d entries: name the files "
                       "or subdirectories inside it instead", w->folder, rel,
                       DIR_NAMES_MAX);
            break;
        }
        /* a tree of many directories, each under the cap, is a cost the
         * request would pay in full (a glob that matches nothing of it
         * takes no file, so the file cap never ends the walk) */
        if (++w->names > AL_FOLDER_NAMES_MAX) {
            r = al_err(w->err, "folder", E2BIG,
                       "folder %s: the imports' directories hold more than %d names in all (reached in %s): name "
                       "the files or smaller directories",
                       w->folder, AL_FOLDER_NAMES_MAX, rel);
            break;
        }
        char **nv = realloc(v, (n + 1) * sizeof *v);
        if (!nv || !(nv[n] = strdup(de->d_name))) {
            if (nv)
                v = nv;
            r = al_err(w->err, "folder", ENOMEM, "out of memory");
            break;
        }
        v = nv;
        n++;
    }
    closedir(d);
    if (r < 0) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        free(v);
        return r;
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_names);
    *ret = v;
    *ret_n = n;
    return 0;
}

/* Directory REL (DEPTH beneath the root) taken whole: its regular files
 * the glob allows, its directories walked; the rest left out. */
static int walk_dir(walk *w, const char *rel, int depth) {
    if (depth > AL_FOLDER_DEPTH_MAX)
        return al_err(w->err, "folder", E2BIG, "folder %s: %s is more than %d directories deep", w->folder, rel,
                      AL_FOLDER_DEPTH_MAX);
    char **names = NULL;
    size_t n = 0;
    int r = dir_names(w, rel, &names, &n);
    bool top = strcmp(rel, ".") == 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (name_fault(names[i]))
            continue; /* not text: left out, as the listing leaves it out */
        char crel[AL_RUN_FOLDER_PATH_MAX + 300];
        int len = snprintf(crel, sizeof crel, "%s%s%s", top ? "" : rel, top ? "" : "/", names[i]);
        if (len < 0 || (size_t)len > AL_RUN_FOLDER_PATH_MAX) {
            r = al_err(w->err, "folder", ENAMETOOLONG, "folder %s: a path beneath %s is longer than %d bytes",
                       w->folder, rel, AL_RUN_FOLDER_PATH_MAX);
            break;
        }
        _cleanup_close_ int pfd = al_openat_beneath(w->root, crel, O_PATH, 0);
        struct stat s;
        if (pfd < 0 || fstat(pfd, &s) < 0)
            continue; /* a link, a mount point, gone meanwhile: left out */
        if (S_ISDIR(s.st_mode)) {
            r = walk_dir(w, crel, depth + 1);
        } else if (S_ISREG(s.st_mode) && glob_allows(w->glob, crel)) {
            struct stat rs;
            const char *why;
            _cleanup_close_ int fd = open_regular(w->root, crel, &rs, &why);
            if (fd >= 0)
                r = take_file(w, crel, fd, &rs);
            else if (fd != -ELOOP && fd != -EXDEV && fd != -ENOENT && fd != -EINVAL && fd != -EMLINK)
                r = al_err(w->err, "folder", -fd, "folder %s: %s %s", w->folder, crel, why ? why : strerror(-fd));
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

/* Path REL of folder W, as asked: a regular file, or a directory taken whole. */
static int take_path(walk *w, const char *rel) {
    _cleanup_close_ int pfd = al_openat_beneath(w->root, rel, O_PATH, 0);
    struct stat s;
    bool missing = pfd == -ENOENT || pfd == -ENOTDIR;
    if (pfd < 0 && missing) /* where to look, for an agent that guessed */
        return al_err(w->err, "folder", ENOENT, "folder %s: %s %s (GET /v1/folders/%s/entries lists what it holds)",
                      w->folder, rel, open_fault(-pfd), w->folder);
    if (pfd < 0)
        return al_err(w->err, "folder", EINVAL, "folder %s: %s %s", w->folder, rel, open_fault(-pfd));
    if (fstat(pfd, &s) < 0)
        return al_err(w->err, "folder", errno, "folder %s: stat %s: %m", w->folder, rel);
    if (S_ISDIR(s.st_mode)) {
        int depth = strcmp(rel, ".") == 0 ? 0 : 1;
        for (const char *c = rel; *c; c++)
            depth += *c == '/';
        return walk_dir(w, rel, depth);
    }
    if (!S_ISREG(s.st_mode))
        return al_err(w->err, "folder", EINVAL, "folder %s: %s is %s: only regular files and directories are imported",
                      w->folder, rel, kind_of(s.st_mode));
    if (!glob_allows(w->glob, rel))
        return al_err(w->err, "folder", EINVAL, "folder %s: %s is not allowed by the folder's glob (%s)", w->folder, rel,
                      w->glob);
    struct stat rs;
    const char *why;
    _cleanup_close_ int fd = open_regular(w->root, rel, &rs, &why);
    if (fd < 0)
        return al_err(w->err, "folder", -fd == ENOENT ? ENOENT : EINVAL, "folder %s: %s %s", w->folder, rel,
                      why ? why : strerror(-fd));
    return take_file(w, rel, fd, &rs);
}

int al_folder_resolve(al_store *st, const char *ws_id, al_run_spec *sp, al_error *err) {
    walk w = { .sp = sp, .err = err, .root = -1 };
    int r = 0;
    for (size_t i = 0; r == 0 && i < sp->n_folders; i++) {
        const al_run_folder *rf = &sp->folders[i];
        al_store_folder f;
        r = al_store_folder_get(st, ws_id, rf->name.s, &f, err);
        if (r == -ENOENT) {
            *err = (al_error){ 0 };
            return al_err(err, "folder", ENOENT,
                          "folders[%zu]: no folder named %s in this workspace (GET /v1/folders, or code_execution's "
                          "description over MCP, lists them; an operator lends one with airlock admin folder add)",
                          i, rf->name.s);
        }
        if (r < 0)
            return -EIO;
        w.root = al_folder_open_root(&f, err);
        w.folder = rf->name.s;
        w.glob = f.glob;
        if (w.root < 0)
            r = w.root == -ESTALE ? -ESTALE : -EIO;
        for (size_t k = 0; r == 0 && k < rf->n_paths; k++)
            r = take_path(&w, rf->paths[k].s);
        if (w.root >= 0)
            close(w.root);
        w.root = -1;
        al_store_folder_done(&f);
    }
    return r;
}

/* ------------------------------------------------------------ staging */

/* The directories of REL (its last component not among them) made beneath
 * DFD: the fd of the last one, or -errno. */
static int make_parents(int dfd, const char *rel, char *last, size_t last_len) {
    char buf[AL_RUN_FOLDER_PATH_MAX + 1];
    snprintf(buf, sizeof buf, "%s", rel);
    int cur = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    if (cur < 0)
        return -errno;
    char *c = buf;
    for (char *slash; (slash = strchr(c, '/')); c = slash + 1) {
        *slash = '\0';
        if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(cur);
            return -e;
        }
        int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(cur);
        if (next < 0)
            return -e;
        cur = next;
    }
    snprintf(last, last_len, "%s", c);
    return cur;
}

/* Import I of SP copied from ROOT into FOLDER_FD, hashed as copied. */
static int stage_one(int root, int folder_fd, const al_run_import_id *im, bool approved, al_error *err) {
    const char *since = approved ? "since it was approved" : "since the run was requested";
    struct stat s;
    const char *why;
    _cleanup_close_ int fd = open_regular(root, im->path, &s, &why);
    if (fd < 0)
        return al_err(err, "folder_changed", EBADMSG, "folder %s: %s changed %s (it %s now)", im->folder, im->path,
                      since, why ? why : strerror(-fd));
    if ((uint64_t)s.st_size != im->size)
        return al_err(err, "folder_changed", EBADMSG, "folder %s: %s changed %s (%llu bytes then, %lld now)",
                      im->folder, im->path, since, (unsigned long long)im->size, (long long)s.st_size);
    char name[NAME_MAX + 1];
    _cleanup_close_ int pdir = make_parents(folder_fd, im->path, name, sizeof name);
    if (pdir < 0)
        return al_err(err, "folder", -pdir, "folder %s: stage %s: %s", im->folder, im->path, strerror(-pdir));
    _cleanup_close_ int out = openat(pdir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0)
        return al_err(err, "folder", errno, "folder %s: stage %s: %m", im->folder, im->path);
    char hex[65];
    uint64_t got = 0;
    int r = al_sha256_fd_capped(fd, im->size, out, hex, &got);
    if (r < 0)
        return al_err(err, "folder", -r, "folder %s: copy %s: %s", im->folder, im->path, strerror(-r));
    if (got != im->size || strcmp(hex, im->sha256) != 0)
        return al_err(err, "folder_changed", EBADMSG, "folder %s: %s changed %s (its content is not the one pinned)",
                      im->folder, im->path, since);
    return 0;
}

int al_folder_stage(al_store *st, const char *ws_id, const al_run_spec *sp, const char *docs_dir, bool approved,
                    al_error *err) {
    if (!sp->n_imports)
        return 0;
    if (mkdir(docs_dir, 0755) < 0 && errno != EEXIST)
        return al_err(err, "folder", errno, "mkdir %s: %m", docs_dir);
    _cleanup_close_ int docs = open(docs_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (docs < 0)
        return al_err(err, "folder", errno, "open %s: %m", docs_dir);
    int root = -1, folder_fd = -1, r = 0;
    const char *cur = NULL;
    al_store_folder f = { 0 };
    size_t i;
    for (i = 0; r == 0 && i < sp->n_imports; i++) {
        const al_run_import_id *im = &sp->imports[i];
        if (!cur || strcmp(cur, im->folder) != 0) {
            if (root >= 0)
                close(root);
            if (folder_fd >= 0)
                close(folder_fd);
            root = folder_fd = -1;
            al_store_folder_done(&f);
            cur = im->folder;
            int g = al_store_folder_get(st, ws_id, im->folder, &f, err);
            if (g == -ENOENT) {
                r = al_err(err, "folder", ENOENT, "folder %s was removed since the run was requested", im->folder);
                break;
            }
            if (g < 0 || (root = al_folder_open_root(&f, err)) < 0) {
                r = g < 0 ? g : root;
                break;
            }
            /* /work/documents/FOLDER is the folder's alone: a thread's
             * document of that top-level name was staged there already */
            if (mkdirat(docs, im->folder, 0755) < 0) {
                r = errno == EEXIST ? al_err(err, "folder", EEXIST,
                                             "folder %s: the thread's documents hold /work/documents/%s already: "
                                             "a folder is staged under its own name, which no document's path may "
                                             "begin with",
                                             im->folder, im->folder)
                                    : al_err(err, "folder", errno, "mkdir %s/%s: %m", docs_dir, im->folder);
                break;
            }
            folder_fd = openat(docs, im->folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (folder_fd < 0) {
                r = al_err(err, "folder", errno, "open %s/%s: %m", docs_dir, im->folder);
                break;
            }
        }
        /* the folder as registered now: an operator who narrowed its glob
         * (folder rm, then add) between the request and the start has
         * withdrawn what the glob no longer allows, approved or not */
        if (!glob_allows(f.glob, im->path)) {
            r = al_err(err, "folder", EACCES,
                       "folder %s: %s is not allowed by the folder's glob (%s) any more: it was registered again "
                       "since the run was requested",
                       im->folder, im->path, f.glob);
            break;
        }
        r = stage_one(root, folder_fd, im, approved, err);
    }
    if (root >= 0)
        close(root);
    if (folder_fd >= 0)
        close(folder_fd);
    al_store_folder_done(&f);
    return r < 0 ? r : (int)sp->n_imports;
}

int al_folder_clash(json_t *docs, const al_run_spec *sp, al_error *err) {
    size_t i;
    json_t *d;
    json_array_foreach(docs, i, d) {
        const char *path = json_string_value(json_object_get(d, "path"));
        size_t n = path ? strcspn(path, "/") : 0;
        for (size_t k = 0; n && k < sp->n_folders; k++)
            if (strlen(sp->folders[k].name.s) == n && strncmp(path, sp->folders[k].name.s, n) == 0)
                return al_err(err, "folder", EEXIST,
                              "folders[%zu]: folder %s would be staged at /work/documents/%s, where the thread's "
                              "document %s is staged: a folder's name must not be a document's top-level name",
                              k, sp->folders[k].name.s, sp->folders[k].name.s, path);
    }
    return 0;
}

int al_folder_request_parse(const char *text, al_run_spec *sp, al_error *err) {
    json_error_t jerr;
    json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    char msg[512];
    const char *code;
    al_status st = a ? al_run_spec_folders_of(sp, a, msg, sizeof msg, &code) : AL_STATUS_INVALID;
    json_decref(a);
    if (st == AL_STATUS_OK)
        st = al_run_spec_check_folders(sp, msg, sizeof msg, &code);
    else if (st == AL_STATUS_INVALID && !a)
        snprintf(msg, sizeof msg, "%s", AL_RUN_RULE_FOLDERS);
    return st == AL_STATUS_OK ? 0 : al_err(err, "folder", st == AL_STATUS_INVALID ? EINVAL : ENOMEM, "%s", msg);
}
