/* A run's files for its Secret (spec_int.h): the script and files from the
 * config, the inputs read from the host (files and trees, no link
 * followed, bounded depth and count), and stdin; their total checked
 * against what a Secret holds before anything is sent. */
#include "spec.h"

#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH_DEFAULT 16
#define MAX_FILES_DEFAULT 4096

void al_kube_files_free(al_kube_files *f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->items[i].path);
        free(f->items[i].data);
    }
    free(f->items);
    free(f->stdin_data);
    *f = (al_kube_files){ 0 };
}

/* One component of an item's path, as a Secret volume's item path allows
 * and /work can hold: not empty, not . or .., no / (or NUL: C strings). */
int al_kube_check_component(const char *c, size_t len, al_error *err) {
    if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.') || len > 255 ||
        memchr(c, '/', len))
        return al_err(err, "provisioning", EINVAL, "an input's path \"%.*s\" has a component a Secret cannot carry "
                      "(empty, \".\", \"..\" or over 255 bytes)", (int)(len > 200 ? 200 : len), c);
    return 0;
}

int al_kube_check_path(const char *p, al_error *err) {
    if (!*p || strlen(p) > 4096)
        return al_err(err, "provisioning", EINVAL, "an input's path is empty or over 4096 bytes");
    /* the kubelet refuses an item path beginning with "..": its own
     * ..data and ..<timestamp> live beside the items */
    if (strncmp(p, "..", 2) == 0)
        return al_err(err, "provisioning", EINVAL, "an input's path \"%.200s\" begins with \"..\", which a Secret "
                      "volume keeps for itself", p);
    for (const char *s = p;;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int r = al_kube_check_component(s, len, err);
        if (r < 0)
            return r;
        if (!e)
            return 0;
        s = e + 1;
    }
}

/* whether SIZE more bytes pass the Secret's cap; counted without wrapping
 * (sparse files' sizes summed could pass 2^64 and come back under it) */
static bool past_cap(const al_kube_files *f, uint64_t size) {
    return f->total > AL_KUBE_SECRET_MAX || size > AL_KUBE_SECRET_MAX - f->total;
}

static void count(al_kube_files *f, uint64_t size) {
    f->total = size > UINT64_MAX - f->total ? UINT64_MAX : f->total + size;
}

static int add_item(al_kube_files *f, const char *path, const void *data, size_t len, uint64_t size, al_error *err) {
    int r = al_kube_check_path(path, err);
    if (r < 0)
        return r;
    if (f->n >= f->max_files)
        return al_err(err, "provisioning", E2BIG, "more than %zu input files", f->max_files);
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->items[i].path, path) == 0)
            return al_err(err, "provisioning", EEXIST, "two inputs are named \"%.200s\"", path);
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        al_kube_item *n = realloc(f->items, cap * sizeof *n);
        if (!n)
            return al_err(err, "provisioning", ENOMEM, "out of memory");
        f->items = n;
        f->cap = cap;
    }
    al_kube_item *it = &f->items[f->n];
    *it = (al_kube_item){ .path = strdup(path), .len = len };
    if (!it->path)
        return al_err(err, "provisioning", ENOMEM, "out of memory");
    if (data) {
        if (!(it->data = malloc(len ? len : 1))) {
            free(it->path);
            return al_err(err, "provisioning", ENOMEM, "out of memory");
        }
        memcpy(it->data, data, len);
    }
    f->n++;
    count(f, size);
    return 0;
}

/* FD's bytes (a regular file of SIZE bytes) into a new item PATH; past the
 * Secret's cap only its size is counted (the run is refused with the sum). */
static int add_fd(al_kube_files *f, int fd, const char *path, uint64_t size, al_error *err) {
    if (past_cap(f, size)) {
        count(f, size);
        return 0;
    }
    _cleanup_free_ char *buf = malloc(size ? size : 1);
    if (!buf)
        return al_err(err, "provisioning", ENOMEM, "out of memory");
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return al_err(err, "provisioning", errno, "read input %.200s: %m", path);
        if (n == 0)
            break;    /* shrank as we read: what is there */
        got += (size_t)n;
    }
    if (got != size) {
        f->total -= size - got;
        size = got;
    }
    return add_item(f, path, buf, got, size, err);
}

static int add_tree(al_kube_files *f, int dfd, char *path, size_t plen, unsigned depth, al_error *err);

/* NAME under DFD (no link followed) into PATH: a file, or a tree. */
static int add_entry(al_kube_files *f, int dfd, const char *name, char *path, size_t plen, unsigned depth,
                     al_error *err) {
    size_t nl = strlen(name);
    int r = al_kube_check_component(name, nl, err);
    if (r < 0)
        return r;
    if (plen + nl + 2 > 4096)
        return al_err(err, "provisioning", ENAMETOOLONG, "an input's path is over 4096 bytes");
    size_t at = plen;
    if (plen)
        path[at++] = '/';
    memcpy(path + at, name, nl + 1);
    _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (errno == ELOOP)
            return al_err(err, "provisioning", ELOOP, "input %.200s is a symbolic link: not followed", path);
        return al_err(err, "provisioning", errno, "open input %.200s: %m", path);
    }
    if (S_ISREG(st.st_mode))
        r = add_fd(f, fd, path, (uint64_t)st.st_size, err);
    else if (S_ISDIR(st.st_mode))
        r = add_tree(f, fd, path, at + nl, depth + 1, err);
    else
        r = al_err(err, "provisioning", EINVAL, "input %.200s is neither a file nor a directory", path);
    path[plen] = '\0';
    return r;
}

static int add_tree(al_kube_files *f, int dfd, char *path, size_t plen, unsigned depth, al_error *err) {
    if (depth > f->max_depth)
        return al_err(err, "provisioning", ELOOP, "input %.200s is nested deeper than %u", path, f->max_depth);
    DIR *d = al_dir_open(dfd);
    if (!d)
        return al_err(err, "provisioning", errno, "read input %.200s: %m", path);
    int r = 0;
    for (struct dirent *e; r == 0 && (e = al_dir_next(d));)
        r = add_entry(f, dfd, e->d_name, path, plen, depth, err);
    closedir(d);
    return r;
}

/* The last component of HOST (trailing slashes ignored, as basename). */
static int input_name(const char *host, char *name, size_t n, al_error *err) {
    size_t len = strlen(host);
    while (len > 1 && host[len - 1] == '/')
        len--;
    const char *s = host + len;
    while (s > host && s[-1] != '/')
        s--;
    size_t nl = (size_t)(host + len - s);
    int r = al_kube_check_component(s, nl, err);
    if (r < 0)
        return r;
    if (nl >= n)
        return al_err(err, "provisioning", ENAMETOOLONG, "input %.200s: its name is too long", host);
    memcpy(name, s, nl);
    name[nl] = '\0';
    return 0;
}

static int read_stdin(al_kube_files *f, int fd, al_error *err) {
    if (fd < 0)
        return 0;
    f->has_stdin = true;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        /* its size first: a large file is refused without reading it */
        uint64_t size = (uint64_t)st.st_size;
        if (past_cap(f, size)) {
            count(f, size);
            return 0;
        }
    }
    size_t cap = AL_KUBE_SECRET_MAX + 1, len = 0;
    _cleanup_free_ char *buf = malloc(cap);
    if (!buf)
        return al_err(err, "provisioning", ENOMEM, "out of memory");
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return al_err(err, "provisioning", errno, "read stdin: %m");
        if (n == 0)
            break;
        len += (size_t)n;
        if (len == cap)
            break;
    }
    count(f, len);
    f->stdin_len = len;
    f->stdin_data = TAKE_PTR(buf);
    return 0;
}

int al_kube_files_read(const al_box_config *cfg, al_kube_files *f, al_error *err) {
    *f = (al_kube_files){ .max_depth = cfg->limits.max_depth ? (unsigned)cfg->limits.max_depth : MAX_DEPTH_DEFAULT,
                          .max_files = cfg->limits.stage_files ? (size_t)cfg->limits.stage_files : MAX_FILES_DEFAULT };
    if (f->max_files > MAX_FILES_DEFAULT)
        f->max_files = MAX_FILES_DEFAULT;
    int r = 0;
    for (size_t i = 0; r == 0 && i < cfg->n_files; i++) {
        const al_box_file *bf = &cfg->files[i];
        r = al_kube_check_component(bf->name, strlen(bf->name), err);
        if (r == 0)
            r = add_item(f, bf->name, bf->data, bf->len, bf->len, err);
    }
    char path[4096];
    for (size_t i = 0; r == 0 && i < cfg->n_inputs; i++) {
        char name[256];
        if ((r = input_name(cfg->inputs[i], name, sizeof name, err)) < 0)
            break;
        /* the path the caller named is followed, as the native box's
         * staging follows it (its own path); links inside a tree are not */
        _cleanup_close_ int fd = open(cfg->inputs[i], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            r = al_err(err, "provisioning", errno, "open input %.200s: %m", cfg->inputs[i]);
            break;
        }
        snprintf(path, sizeof path, "%s", name);
        if (S_ISREG(st.st_mode))
            r = add_fd(f, fd, path, (uint64_t)st.st_size, err);
        else if (S_ISDIR(st.st_mode))
            r = add_tree(f, fd, path, strlen(path), 1, err);
        else
            r = al_err(err, "provisioning", EINVAL, "input %.200s is neither a file nor a directory", cfg->inputs[i]);
    }
    if (r == 0)
        r = read_stdin(f, cfg->stdin_fd, err);
    if (r == 0 && f->total > AL_KUBE_SECRET_MAX)
        r = al_err(err, "provisioning", E2BIG, "the run's code, inputs and stdin (%llu bytes) exceed what a "
                   "Kubernetes Secret holds (1 MiB): run inputs this large with the native or docker driver", (unsigned long long)f->total);
    if (r < 0)
        al_kube_files_free(f);
    return r;
}
