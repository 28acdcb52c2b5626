/*
 * A sandbox's home pinned for an approval (sandbox.h): copied into the
 * run's own directory when a command that waits for an approval is asked
 * for, listed (path, size, sha256) for its card and its hash, each file
 * readable by the approver, and staged in the home's place. What is read
 * came from a box: every name opened beneath its tree, no link followed,
 * bounded as the sandbox is.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/hash.h"
#include "sandbox_int.h"
#include "service.h"
#include "service_int.h"

typedef struct pinner {
    json_t *files;  /* [{path, size, sha256}] */
    uint64_t bytes, entries;
} pinner;


/* One regular file NAME of SRC (whose path is REL): hashed, and copied into
 * DST when DST >= 0; its bytes counted as read, never as stat said. */
static int pin_file(pinner *pn, int src, int dst, const char *name, const char *rel) {
    _cleanup_close_ int in = al_sandbox_beneath(src, name, O_RDONLY | O_NONBLOCK, 0);
    if (in < 0)
        return in;
    struct stat st;
    if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
        return 0; /* swapped for something else: not a file, not staged */
    _cleanup_close_ int out = -1;
    if (dst >= 0 && (out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                                  (st.st_mode & 0111) ? 0755 : 0644)) < 0)
        return -errno;
    struct sha256_ctx md;
    sha256_init(&md);
    char buf[65536];
    uint64_t got = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        got += (uint64_t)n;
        if (pn->bytes + got > AL_SANDBOX_BYTES_MAX)
            return -EDQUOT;
        sha256_update(&md, (size_t)n, (const uint8_t *)buf);
        if (out >= 0 && al_write_all(out, buf, (size_t)n) < 0)
            return -errno;
    }
    pn->bytes += got;
    char hex[65];
    al_sha256_finish_hex(&md, hex);
    json_t *e = json_pack("{s:s, s:I, s:s}", "path", rel, "size", (json_int_t)got, "sha256", hex);
    return e && json_array_append_new(pn->files, e) == 0 ? 0 : -ENOMEM;
}

/* The tree SRC (whose path is REL), DEPTH deep: its regular files and
 * directories (what staging takes) into PN, copied into DST when >= 0. */
static int pin_tree(pinner *pn, int src, int dst, const char *rel, int depth) {
    if (depth > WALK_DEPTH_MAX)
        return -EDQUOT;
    _cleanup_closedir_ DIR *d = al_dir_open(src);
    if (!d)
        return -errno;
    int r = 0;
    for (struct dirent *de; r == 0 && (de = al_dir_next(d));) {
        if (++pn->entries > AL_SANDBOX_ENTRIES_MAX) {
            r = -EDQUOT;
            break;
        }
        char path[1024];
        if (snprintf(path, sizeof path, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) >= (int)sizeof path)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (S_ISREG(st.st_mode)) {
            r = pin_file(pn, dirfd(d), dst, de->d_name, path);
        } else if (S_ISDIR(st.st_mode)) {
            if (dst >= 0 && mkdirat(dst, de->d_name, 0755) < 0) {
                r = -errno;
                break;
            }
            _cleanup_close_ int sub = al_sandbox_beneath(dirfd(d), de->d_name, O_PATH | O_DIRECTORY, 0);
            _cleanup_close_ int subdst = dst >= 0 ? al_sandbox_beneath(dst, de->d_name, O_PATH | O_DIRECTORY, 0) : -1;
            if (sub >= 0 && (dst < 0 || subdst >= 0))
                r = pin_tree(pn, sub, subdst, path, depth + 1);
        }
        /* links, fifos, sockets: never staged, so neither pinned nor shown */
    }
    return r;
}

static int by_path(const void *a, const void *b) {
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, "path")),
                  json_string_value(json_object_get(*(json_t *const *)b, "path")));
}

/* The files SRC holds (copied into DST when >= 0), sorted by path. */
static json_t *pin(int src, int dst, al_error *err) {
    pinner pn = { .files = json_array() };
    if (!pn.files)
        return NULL;
    int r = pin_tree(&pn, src, dst, "", 0);
    if (r < 0) {
        json_decref(pn.files);
        if (r == -EDQUOT)
            al_err(err, "sandbox", EDQUOT, "the sandbox holds more than %llu MiB or %d entries",
                   (unsigned long long)(AL_SANDBOX_BYTES_MAX >> 20), AL_SANDBOX_ENTRIES_MAX);
        else
            al_err(err, "sandbox", -r, "cannot read the sandbox's files: %s", strerror(-r));
        return NULL;
    }
    size_t n = json_array_size(pn.files);
    json_t **v = n ? calloc(n, sizeof *v) : NULL;
    json_t *sorted = json_array();
    if ((n && !v) || !sorted) {
        free(v);
        json_decref(sorted);
        json_decref(pn.files);
        al_err(err, "sandbox", ENOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = json_array_get(pn.files, i);
    if (n > 1) /* an empty home is no array at all (qsort wants one) */
        qsort(v, n, sizeof *v, by_path);
    for (size_t i = 0; i < n; i++)
        json_array_append(sorted, v[i]);
    free(v);
    json_decref(pn.files);
    return sorted;
}

int al_sandbox_pin_home(al_service *s, const char *id, const char *dst, int64_t *ret_bytes, al_error *err) {
    char home[PATH_MAX];
    if (al_sandbox_dir(s, id, AL_SANDBOX_HOME, home, sizeof home) < 0)
        return al_err(err, "sandbox", ENAMETOOLONG, "the state directory's path is too long");
    _cleanup_close_ int src = open(home, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (src < 0)
        return al_err(err, "sandbox", ENOENT, "sandbox %s is gone (killed or ended)", id);
    if (mkdir(dst, 0700) < 0)
        return al_err(err, "sandbox", errno, "cannot make %s: %m", dst);
    _cleanup_close_ int dfd = open(dst, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dfd < 0)
        return al_err(err, "sandbox", errno, "cannot open %s: %m", dst);
    json_t *files = pin(src, dfd, err);
    if (!files)
        return -(err->err ? err->err : EIO);
    *ret_bytes = 0;
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) *ret_bytes += json_integer_value(json_object_get(f, "size"));
    json_decref(files);
    return 0;
}

json_t *al_sandbox_pinned_files(const char *dir, al_error *err) {
    _cleanup_close_ int src = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (src < 0) {
        al_err(err, "sandbox", errno, "the sandbox's pinned files are gone: %m");
        return NULL;
    }
    return pin(src, -1, err);
}

int al_sandbox_pinned_open(const char *dir, size_t idx, int *ret_fd, char **ret_path, al_error *err) {
    *ret_fd = -1;
    *ret_path = NULL;
    json_t *files = al_sandbox_pinned_files(dir, err);
    if (!files)
        return -ENOENT;
    const char *path = json_string_value(json_object_get(json_array_get(files, idx), "path"));
    int r = 0;
    _cleanup_close_ int root = path ? open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    if (!path)
        r = al_err(err, "inputs", ENOENT, "no file %zu of the sandbox's kept for the approval", idx);
    else if (root < 0 || (*ret_fd = al_sandbox_beneath(root, path, O_RDONLY | O_NONBLOCK, 0)) < 0)
        r = al_err(err, "inputs", ENOENT, "the sandbox's files kept for the approval are gone");
    else if (!(*ret_path = strdup(path))) {
        close(*ret_fd);
        *ret_fd = -1;
        r = al_err(err, "inputs", ENOMEM, "out of memory");
    }
    json_decref(files);
    return r;
}
