/*
 * A sandbox's files (sandbox.h): what envd's /files and filesystem RPCs do,
 * on the host directory STATE/sandboxes/ID/{home,out}. What is there may
 * have come from a box (each command's /work is collected back), so every
 * path is opened beneath its root with openat2 (no "..", no symbolic or
 * magic link, no other mount), each step after that is one name relative
 * to a directory fd, no link is ever followed, and the walks are bounded.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../store/sandboxes.h"
#include "../util/hash.h"
#include "artifacts.h"
#include "queue.h"
#include "sandbox_int.h"
#include "service.h"
#include "service_int.h"
#include "sandbox_session.h"



/* ROOT of SB as an O_PATH directory fd. */
static int root_fd(al_service *s, const al_sandbox *sb, al_sandbox_root root, al_error *err) {
    char d[PATH_MAX];
    /* a session box holds the sandbox's files while it lives (its /work is
     * its own, flowed back when it ends): refused, never stale */
    if (al_session_box_holds(s->cfg.state_dir, sb->id))
        return al_err(err, "files", EBUSY, "the sandbox's session box holds /home/user and /out while it lives "
                      "(e2b_session_box): reach its files with a command or a cell, or pause the sandbox (its "
                      "processes end, its files are kept) and the files API works on them again");
    if (al_sandbox_dir(s, sb->id, root, d, sizeof d) < 0)
        return al_err(err, "files", ENAMETOOLONG, "the state directory's path is too long");
    int fd = open(d, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    return fd < 0 ? al_err(err, "files", EIO, "the sandbox's directory is gone (%m): it was killed") : fd;
}

/* The directory holding REL beneath ROOTFD (made, with its parents, when
 * MAKE) as an fd, and REL's last name in *NAME (a pointer into REL). */
static int parent_of(int rootfd, const char *rel, bool make, const char **name) {
    const char *slash = strrchr(rel, '/');
    *name = slash ? slash + 1 : rel;
    if (!slash) {
        int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        return fd < 0 ? -errno : fd;
    }
    char dir[1024];
    if ((size_t)(slash - rel) >= sizeof dir)
        return -ENAMETOOLONG;
    memcpy(dir, rel, (size_t)(slash - rel));
    dir[slash - rel] = '\0';
    if (!make)
        return al_sandbox_beneath(rootfd, dir, O_PATH | O_DIRECTORY, 0);
    /* one name at a time: each made if missing, then opened without links */
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    for (char *p = dir, *save = NULL, *seg = strtok_r(p, "/", &save); fd >= 0 && seg;
         seg = strtok_r(NULL, "/", &save)) {
        if (mkdirat(fd, seg, 0755) < 0 && errno != EEXIST) {
            int e = -errno;
            close(fd);
            return e;
        }
        int next = al_sandbox_beneath(fd, seg, O_PATH | O_DIRECTORY, 0);
        close(fd);
        fd = next;
    }
    return fd;
}

static int fs_err(al_error *err, int r, const char *rel) {
    const char *shown = rel[0] ? rel : "(the root)";
    switch (-r) {
    case ENOENT: return al_err(err, "files", ENOENT, "%s: no such file or directory", shown);
    case ELOOP: return al_err(err, "files", ELOOP, "%s: a symbolic link is on the path (never followed)", shown);
    case EXDEV: return al_err(err, "files", ELOOP, "%s: leaves the sandbox's directory", shown);
    case ENOTDIR: return al_err(err, "files", ENOTDIR, "%s: a part of the path is not a directory", shown);
    case EISDIR: return al_err(err, "files", EISDIR, "%s: is a directory", shown);
    case EEXIST: return al_err(err, "files", EEXIST, "%s: exists already", shown);
    case ENOTEMPTY: return al_err(err, "files", ENOTEMPTY, "%s: the directory is not empty", shown);
    default: return al_err(err, "files", -r, "%s: %s", shown, strerror(-r));
    }
}

/* ------------------------------------------------------------ reading */

int al_sandbox_fs_open(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, int *ret_fd,
                       uint64_t *ret_size, al_error *err) {
    *ret_fd = -1;
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    if (!rel[0])
        return fs_err(err, -EISDIR, rel);
    int fd = al_sandbox_beneath(rfd, rel, O_RDONLY | O_NONBLOCK, 0);
    if (fd < 0)
        return fs_err(err, fd, rel);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fs_err(err, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, rel);
    }
    *ret_fd = fd;
    *ret_size = (uint64_t)st.st_size;
    return 0;
}

static void entry_of(const char *rel, const struct stat *st, al_sandbox_entry *e) {
    memset(e, 0, sizeof *e);
    snprintf(e->rel, sizeof e->rel, "%s", rel);
    e->dir = S_ISDIR(st->st_mode);
    e->link = S_ISLNK(st->st_mode);
    e->special = !e->dir && !e->link && !S_ISREG(st->st_mode);
    e->size = (uint64_t)st->st_size;
    e->mode = st->st_mode & 07777;
    e->mtime = (int64_t)st->st_mtim.tv_sec;
}

int al_sandbox_fs_stat(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel,
                       al_sandbox_entry *ret, al_error *err) {
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    struct stat st;
    if (!rel[0]) {
        if (fstat(rfd, &st) < 0)
            return fs_err(err, -errno, rel);
        entry_of(rel, &st, ret);
        return 0;
    }
    const char *name;
    _cleanup_close_ int pfd = parent_of(rfd, rel, false, &name);
    if (pfd < 0)
        return fs_err(err, pfd, rel);
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fs_err(err, -errno, rel);
    entry_of(rel, &st, ret);
    return 0;
}

void al_sandbox_entries_free(al_sandbox_entries *l) {
    if (!l)
        return;
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

typedef struct lister {
    al_sandbox_entries *out;
    size_t cap;
    size_t seen;                  /* entries examined, against the bound */
} lister;

static int add_entry(lister *ls, const char *rel, const struct stat *st) {
    if (ls->out->n == ls->cap) {
        size_t cap = ls->cap ? ls->cap * 2 : 64;
        al_sandbox_entry *v = realloc(ls->out->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        ls->out->v = v;
        ls->cap = cap;
    }
    entry_of(rel, st, &ls->out->v[ls->out->n++]);
    return 0;
}

/* The entries of directory DFD (whose path is REL), DEPTH levels deep. */
static int list_dir(lister *ls, int dfd, const char *rel, int depth) {
    _cleanup_closedir_ DIR *d = al_dir_open(dfd);
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r == 0 && (de = al_dir_next(d));) {
        if (++ls->seen > AL_SANDBOX_ENTRIES_MAX * 2) {
            r = -E2BIG;
            break;
        }
        /* a name a path could not name is not shown (as /out skips it) */
        if (al_sandbox_name_problem(de->d_name, strlen(de->d_name)))
            continue;
        char path[1024];
        if (snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= (int)sizeof path)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        r = add_entry(ls, path, &st);
        if (r == 0 && S_ISDIR(st.st_mode) && depth > 1) {
            int sub = al_sandbox_beneath(dirfd(d), de->d_name, O_PATH | O_DIRECTORY, 0);
            if (sub >= 0) {
                r = list_dir(ls, sub, path, depth - 1);
                close(sub);
            }
        }
    }
    return r;
}

static int by_rel(const void *a, const void *b) {
    return strcmp(((const al_sandbox_entry *)a)->rel, ((const al_sandbox_entry *)b)->rel);
}

int al_sandbox_fs_list(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, int depth,
                       al_sandbox_entries *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (depth < 1 || depth > WALK_DEPTH_MAX)
        return al_err(err, "files", EINVAL, "depth: between 1 and %d", WALK_DEPTH_MAX);
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    _cleanup_close_ int dfd = rel[0] ? al_sandbox_beneath(rfd, rel, O_PATH | O_DIRECTORY, 0) : fcntl(rfd, F_DUPFD_CLOEXEC, 3);
    if (dfd < 0)
        return fs_err(err, dfd == -1 ? -errno : dfd, rel);
    lister ls = { .out = ret };
    int r = list_dir(&ls, dfd, rel, depth);
    if (r == -E2BIG)
        r = al_err(err, "files", E2BIG, "%s: more than %d entries to list", rel[0] ? rel : "(the root)",
                   AL_SANDBOX_ENTRIES_MAX * 2);
    else if (r < 0)
        r = fs_err(err, r, rel);
    if (r < 0) {
        al_sandbox_entries_free(ret);
        return r;
    }
    if (ret->n > 1)
        qsort(ret->v, ret->n, sizeof *ret->v, by_rel);
    return 0;
}

/* The files beneath DFD (whose path is REL_LEN bytes), DEPTH levels deep,
 * added to *COUNT; *SEEN against the listing's bound. */
static int count_dir(int dfd, size_t rel_len, int depth, size_t *seen, int64_t *count) {
    _cleanup_closedir_ DIR *d = al_dir_open(dfd);
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r == 0 && (de = al_dir_next(d));) {
        if (++*seen > AL_SANDBOX_ENTRIES_MAX * 2)
            return -E2BIG;
        size_t len = strlen(de->d_name), path_len = rel_len + (rel_len ? 1 : 0) + len;
        /* what the listing would not show is not counted either */
        if (al_sandbox_name_problem(de->d_name, len) || path_len >= 1024)
            continue;
        unsigned char type = de->d_type;
        if (type == DT_UNKNOWN) {
            struct stat st;
            if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            type = S_ISREG(st.st_mode) ? DT_REG : S_ISDIR(st.st_mode) ? DT_DIR : DT_UNKNOWN;
        }
        if (type == DT_REG)
            (*count)++;
        else if (type == DT_DIR && depth > 1) {
            int sub = al_sandbox_beneath(dirfd(d), de->d_name, O_PATH | O_DIRECTORY, 0);
            if (sub >= 0) {
                r = count_dir(sub, path_len, depth - 1, seen, count);
                close(sub);
            }
        }
    }
    return r;
}

int al_sandbox_fs_count(al_service *s, const al_sandbox *sb, al_sandbox_root root, int64_t *count, al_error *err) {
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    size_t seen = 0;
    int r = count_dir(rfd, 0, WALK_DEPTH_MAX, &seen, count);
    if (r == -E2BIG)
        return al_err(err, "files", E2BIG, "more than %d entries to count", AL_SANDBOX_ENTRIES_MAX * 2);
    return r < 0 ? fs_err(err, r, "") : 0;
}

/* ------------------------------------------------------------ the bound */

typedef struct usage {
    uint64_t bytes, entries;
} usage;

static int walk_usage(int dfd, int depth, usage *u) {
    if (depth > WALK_DEPTH_MAX)
        return -EDQUOT;
    _cleanup_closedir_ DIR *d = al_dir_open(dfd);
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r == 0 && (de = al_dir_next(d));) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        u->entries++;
        u->bytes += S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        if (u->entries > AL_SANDBOX_ENTRIES_MAX || u->bytes > AL_SANDBOX_BYTES_MAX)
            r = -EDQUOT;
        else if (S_ISDIR(st.st_mode)) {
            int sub = al_sandbox_beneath(dirfd(d), de->d_name, O_PATH | O_DIRECTORY, 0);
            if (sub >= 0) {
                r = walk_usage(sub, depth + 1, u);
                close(sub);
            }
        }
    }
    return r;
}

/* Whether SB may hold ADD more bytes and NEW_ENTRIES more entries (home/
 * and out/ together): 0, or -EDQUOT said. */
static int check_room(al_service *s, const al_sandbox *sb, uint64_t add, uint64_t new_entries, al_error *err) {
    usage u = { 0 };
    int r = 0;
    for (int root = AL_SANDBOX_HOME; r == 0 && root <= AL_SANDBOX_OUT; root++) {
        al_error e = { 0 };
        _cleanup_close_ int rfd = root_fd(s, sb, (al_sandbox_root)root, &e);
        r = rfd < 0 ? rfd : walk_usage(rfd, 0, &u);
    }
    if (r == 0 && (u.bytes + add > AL_SANDBOX_BYTES_MAX || u.entries + new_entries > AL_SANDBOX_ENTRIES_MAX))
        r = -EDQUOT;
    if (r == -EDQUOT)
        return al_err(err, "files", EDQUOT,
                      "the sandbox would hold more than %llu MiB or %d files and directories (home and /out "
                      "together): remove some first",
                      (unsigned long long)(AL_SANDBOX_BYTES_MAX >> 20), AL_SANDBOX_ENTRIES_MAX);
    return r < 0 ? al_err(err, "files", -r, "cannot count the sandbox's files: %s", strerror(-r)) : 0;
}

/* What the tree DFD holds (regular files' bytes), DEPTH deep, into U: no
 * cap on the bytes (a command may leave each root at the box's caps), a
 * bound on the entries looked at, for a bounded cost. */
static void count_tree(int dfd, int depth, usage *u) {
    if (depth > WALK_DEPTH_MAX || u->entries > AL_SANDBOX_ENTRIES_MAX * 4)
        return;
    _cleanup_closedir_ DIR *d = al_dir_open(dfd);
    if (!d)
        return;
    for (struct dirent *de; (de = al_dir_next(d)) && u->entries <= AL_SANDBOX_ENTRIES_MAX * 4;) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        u->entries++;
        u->bytes += S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        if (S_ISDIR(st.st_mode)) {
            int sub = al_sandbox_beneath(dirfd(d), de->d_name, O_PATH | O_DIRECTORY, 0);
            if (sub >= 0) {
                count_tree(sub, depth + 1, u);
                close(sub);
            }
        }
    }
}

void al_sandbox_account(al_service *s, const char *id) {
    usage u = { 0 };
    for (int root = AL_SANDBOX_HOME; root <= AL_SANDBOX_OUT; root++) {
        char d[PATH_MAX];
        if (al_sandbox_dir(s, id, (al_sandbox_root)root, d, sizeof d) < 0)
            return;
        _cleanup_close_ int fd = open(d, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0)
            count_tree(fd, 0, &u);
    }
    al_error err = { 0 };
    if (al_store_sandbox_set_bytes(s->store, id, (int64_t)u.bytes, &err) < 0)
        al_service_log(s, AL_LOG_WARN, "sandbox.bytes_unrecorded",
                       json_pack("{s:s, s:s}", "sandbox_id", id, "error", err.msg));
}

/* Whether the organisation of SB has room for ADD more bytes (its storage
 * quota: artifacts, runs, skills, the inputs of runs that wait, and its
 * sandboxes, this one as it is): 0, or -EDQUOT said. */
static int check_org_room(al_service *s, const al_sandbox *sb, uint64_t add, al_error *err) {
    int64_t quota = al_artifacts_org_quota(s, sb->owner.org_id), used = al_artifacts_org_usage(s, sb->owner.org_id),
            pending = al_runs_pending_input_bytes(s, sb->owner.org_id);
    if (used == AL_USAGE_UNKNOWN || pending == AL_USAGE_UNKNOWN)
        return al_err(err, "files", EIO, "the organisation's storage use cannot be read: try again");
    if (used + pending + (int64_t)add > quota)
        return al_err(err, "files", EDQUOT,
                      "the organisation's storage (%lld bytes) is full: artifacts, runs, skills and sandboxes hold "
                      "%lld, inputs of runs that wait %lld, and this file is %llu",
                      (long long)quota, (long long)used, (long long)pending, (unsigned long long)add);
    return 0;
}

/* ------------------------------------------------------------ writing */

int al_sandbox_fs_write(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, const void *data,
                        size_t len, al_error *err) {
    if (!rel[0])
        return fs_err(err, -EISDIR, rel);
    /* room for it as a new file and as many new directories as it is deep */
    uint64_t depth = 1;
    for (const char *p = rel; *p; p++)
        depth += *p == '/';
    int r = check_room(s, sb, len, depth, err);
    if (r == 0)
        r = check_org_room(s, sb, len, err);
    if (r < 0)
        return r;
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    const char *name;
    _cleanup_close_ int pfd = parent_of(rfd, rel, true, &name);
    if (pfd < 0)
        return fs_err(err, pfd, rel);
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        return fs_err(err, -EISDIR, rel);
    /* written aside, then renamed over it: a reader sees the old or the new
     * file, and a link standing there is replaced, never written through */
    char tmp[64];
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd)
        return al_err(err, "files", EIO, "no randomness");
    snprintf(tmp, sizeof tmp, ".airlock-upload-%08x", rnd);
    _cleanup_close_ int fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return fs_err(err, -errno, rel);
    const char *p = data;
    for (size_t left = len; left > 0;) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            r = -errno;
            unlinkat(pfd, tmp, 0);
            return fs_err(err, r, rel);
        }
        p += w;
        left -= (size_t)w;
    }
    if (renameat(pfd, tmp, pfd, name) < 0) {
        r = -errno;
        unlinkat(pfd, tmp, 0);
        return fs_err(err, r, rel);
    }
    al_sandbox_account(s, sb->id);
    return 0;
}

int al_sandbox_fs_mkdir(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err) {
    if (!rel[0])
        return fs_err(err, -EEXIST, rel);
    uint64_t depth = 1;
    for (const char *p = rel; *p; p++)
        depth += *p == '/';
    int r = check_room(s, sb, 0, depth, err);
    if (r < 0)
        return r;
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    const char *name;
    _cleanup_close_ int pfd = parent_of(rfd, rel, true, &name);
    if (pfd < 0)
        return fs_err(err, pfd, rel);
    return mkdirat(pfd, name, 0755) < 0 ? fs_err(err, -errno, rel) : 0;
}

int al_sandbox_fs_move(al_service *s, const al_sandbox *sb, al_sandbox_root from_root, const char *from,
                       al_sandbox_root to_root, const char *to, al_error *err) {
    if (!from[0] || !to[0])
        return al_err(err, "files", EINVAL, "a root (/home/user, /out) cannot be moved, nor replaced");
    _cleanup_close_ int ffd = root_fd(s, sb, from_root, err);
    if (ffd < 0)
        return ffd;
    _cleanup_close_ int tfd = root_fd(s, sb, to_root, err);
    if (tfd < 0)
        return tfd;
    const char *fname, *tname;
    _cleanup_close_ int fp = parent_of(ffd, from, false, &fname);
    if (fp < 0)
        return fs_err(err, fp, from);
    struct stat st;
    if (fstatat(fp, fname, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fs_err(err, -errno, from);
    _cleanup_close_ int tp = parent_of(tfd, to, true, &tname);
    if (tp < 0)
        return fs_err(err, tp, to);
    return renameat(fp, fname, tp, tname) < 0 ? fs_err(err, -errno, to) : 0;
}

/* Remove what the root ROOTFD holds, whatever its names (a name the API
 * could not address goes too), the root itself staying. */
static int empty_root(int rootfd, al_error *err) {
    _cleanup_closedir_ DIR *d = al_dir_open(rootfd);
    if (!d)
        return fs_err(err, -errno, "");
    /* removing while reading may skip entries: read again until a pass
     * finds nothing (bounded: each pass removes what it saw) */
    for (int pass = 0, found = 1; found && pass < 8; pass++) {
        found = 0;
        rewinddir(d);
        for (struct dirent *de; (de = al_dir_next(d));) {
            al_rm_tree(dirfd(d), de->d_name);
            found = 1;
        }
    }
    return 0;
}

static int fs_remove(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err);

int al_sandbox_fs_remove(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err) {
    int r = fs_remove(s, sb, root, rel, err);
    al_sandbox_account(s, sb->id); /* what went, whatever failed after */
    return r;
}

static int fs_remove(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err) {
    _cleanup_close_ int rfd = root_fd(s, sb, root, err);
    if (rfd < 0)
        return rfd;
    if (!rel[0])
        return empty_root(rfd, err);
    const char *name;
    _cleanup_close_ int pfd = parent_of(rfd, rel, false, &name);
    if (pfd < 0)
        return fs_err(err, pfd, rel);
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fs_err(err, -errno, rel);
    if (!S_ISDIR(st.st_mode))
        return unlinkat(pfd, name, 0) < 0 ? fs_err(err, -errno, rel) : 0;
    /* al_rm_tree wants a directory it can read: the parent opened for it */
    _cleanup_close_ int dfd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return fs_err(err, -errno, rel);
    al_rm_tree(dfd, name);
    return fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? fs_err(err, -EBUSY, rel) : 0;
}
