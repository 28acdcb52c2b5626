/*
 * The package layer store (layer.h).
 */
#include "layer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../box/collect.h"
#include "../util/hash.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void feed(struct sha256_ctx *c, const char *s) {
    s = s ? s : "";
    sha256_update(c, strlen(s) + 1, (const uint8_t *)s);
}

/* N specs V, sorted (a copy of the pointers: the caller's order stays),
 * after their count: a list is framed by its length, not by the word that
 * follows it, since "node" is a spec of either language too (python
 * ["a"], node ["node", "x"] and python ["a", "node"], node ["x"] would
 * otherwise feed the same strings) */
static void feed_sorted(struct sha256_ctx *c, char *const *v, size_t n) {
    char count[24];
    snprintf(count, sizeof count, "%zu", n);
    feed(c, count);
    if (!n)
        return;
    const char **s = calloc(n, sizeof *s);
    if (!s) {
        /* no memory: the key of the specs in the order given (a miss, never a wrong hit) */
        for (size_t i = 0; i < n; i++)
            feed(c, v[i]);
        return;
    }
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_str);
    for (size_t i = 0; i < n; i++)
        feed(c, s[i]);
    free(s);
}

void al_layer_key(const al_layer_want *w, char ret_key[65]) {
    struct sha256_ctx c;
    sha256_init(&c);
    /* -2: the lists framed by their counts (-1 keys were ambiguous) */
    feed(&c, "airlock-layer-2");
    feed(&c, w->image ? w->image : "host");
    feed(&c, w->installer);
    feed(&c, "python");
    feed_sorted(&c, w->python, w->n_python);
    feed(&c, "node");
    feed_sorted(&c, w->node, w->n_node);
    feed(&c, w->n_python ? w->index_python : "");
    feed(&c, w->n_node ? w->registry_node : "");
    feed(&c, w->scripts ? "scripts" : "no-scripts");
    al_sha256_finish_hex(&c, ret_key);
}

/* tmp- directories of installs that died (a killed helper, a crash): an
 * install holds an flock on its tmp- directory for as long as it lives
 * (al_layer_tmp), so one whose lock can be taken is nobody's, however
 * young (an age rule left each dead install's bytes, up to the layer's
 * cap, for hours). Removed only while this sweeper holds its lock and the
 * name is still that directory. */
static void sweep_stale(int layers_fd) {
    DIR *d = al_dir_open(layers_fd);
    struct dirent *e;
    while (d && (e = al_dir_next(d))) {
        if (strncmp(e->d_name, "tmp-", 4) != 0)
            continue;
        _cleanup_close_ int fd = openat(layers_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat held, named;
        if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0)
            continue;
        if (fstat(fd, &held) == 0 && fstatat(layers_fd, e->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino)
            al_rm_tree(layers_fd, e->d_name);
    }
    if (d)
        closedir(d);
}

int al_layer_dir_open(const char *layers_dir, int *ret_fd, al_error *err) {
    if (!layers_dir || layers_dir[0] != '/')
        return al_err(err, "install", EINVAL, "the layers directory must be an absolute path");
    if (mkdir(layers_dir, 0755) < 0 && errno != EEXIST)
        return al_err(err, "install", errno, "mkdir %s: %m", layers_dir);
    int fd = open(layers_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "install", errno, "open %s: %m", layers_dir);
    sweep_stale(fd);
    *ret_fd = fd;
    return 0;
}

static bool key_ok(const char *key) { return key && al_is_sha256_hex(key); }

int al_layer_find(int layers_fd, const char *key, int *ret_fd, json_t **ret_meta, al_error *err) {
    if (!key_ok(key))
        return al_err(err, "install", EINVAL, "a layer's key is 64 hex digits");
    char name[80];
    snprintf(name, sizeof name, "sha256-%s", key);
    _cleanup_close_ int fd = openat(layers_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : al_err(err, "install", errno, "open layer %s: %m", name);
    /* layer.json is written last: without it, no layer */
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = al_read_regular(fd, "layer.json", AL_LAYER_REPORT_MAX, true, &text, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return al_err(err, "install", -r, "read %s/layer.json: %s", name, strerror(-r));
    json_t *meta = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(meta) || strcmp(json_string_value(json_object_get(meta, "key")) ?: "", key) != 0) {
        json_decref(meta);
        return al_err(err, "install", EINVAL, "%s/layer.json is not this layer's", name);
    }
    if (ret_meta)
        *ret_meta = meta;
    else
        json_decref(meta);
    if (ret_fd)
        *ret_fd = TAKE_FD(fd);
    return 1;
}

/* KEY's lock file opened and flock'd (HOW: LOCK_EX or LOCK_SH) without
 * blocking: 1 with its fd in *RET_FD, 0 when held otherwise, -errno. The
 * lock is the name's own: a collector removes a layer's lock file (holding
 * it), so one taken on an inode that no longer has the name is let go and
 * the name opened again, or two lockers would hold two different locks. */
static int lock_try(int layers_fd, const char *name, int how, int *ret_fd) {
    for (int attempt = 0; attempt < 8; attempt++) {
        _cleanup_close_ int fd = openat(layers_fd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return -errno;
        if (flock(fd, how | LOCK_NB) < 0)
            return errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
        struct stat held, named;
        if (fstat(fd, &held) == 0 && fstatat(layers_fd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 &&
            held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
            *ret_fd = TAKE_FD(fd);
            return 1;
        }
    }
    return 0;
}

static int lock_wait(int layers_fd, const char *key, int how, int cancel_fd, uint64_t timeout_ms, int *ret_fd,
                     al_error *err) {
    if (!key_ok(key))
        return al_err(err, "install", EINVAL, "a layer's key is 64 hex digits");
    char name[80];
    snprintf(name, sizeof name, "sha256-%s.lock", key);
    uint64_t until = al_now_ms() + timeout_ms;
    for (;;) {
        int r = lock_try(layers_fd, name, how, ret_fd);
        if (r < 0)
            return al_err(err, "install", -r, "lock %s: %s", name, strerror(-r));
        if (r > 0)
            return 0;
        if (al_now_ms() >= until)
            return al_err(err, "install", ETIMEDOUT, "another install of the same packages held %s for %llu ms", name,
                          (unsigned long long)timeout_ms);
        /* another helper installs the same set (or a collector removes
         * it): wait for it, unless this run is canceled meanwhile */
        struct pollfd p = { .fd = cancel_fd, .events = POLLIN };
        if (poll(&p, cancel_fd >= 0 ? 1 : 0, 100) > 0)
            return al_err(err, "install", ECANCELED, "canceled while another install of the same packages ran");
    }
}

int al_layer_lock(int layers_fd, const char *key, int cancel_fd, uint64_t timeout_ms, int *ret_fd, al_error *err) {
    return lock_wait(layers_fd, key, LOCK_EX, cancel_fd, timeout_ms, ret_fd, err);
}

int al_layer_use(int layers_fd, const char *key, int cancel_fd, uint64_t timeout_ms, int *ret_fd, al_error *err) {
    return lock_wait(layers_fd, key, LOCK_SH, cancel_fd, timeout_ms, ret_fd, err);
}

int al_layer_touch(int layer_fd) {
    _cleanup_close_ int fd = openat(layer_fd, "used", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || futimens(fd, NULL) < 0)
        return -errno;
    return 0;
}

int al_layer_tmp(int layers_fd, char ret_name[16], int *ret_fd, al_error *err) {
    static const char set[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (int attempt = 0; attempt < 32; attempt++) {
        unsigned char rnd[6];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return al_err(err, "install", EIO, "no random bytes for a temporary layer's name");
        char name[16] = "tmp-";
        for (size_t i = 0; i < sizeof rnd; i++)
            name[4 + i] = set[rnd[i] % (sizeof set - 1)];
        name[4 + sizeof rnd] = '\0';
        if (mkdirat(layers_fd, name, 0755) < 0) {
            if (errno == EEXIST)
                continue;
            return al_err(err, "install", errno, "mkdir %s: %m", name);
        }
        /* the umask may have taken bits: the run's box reads through it */
        int fd = openat(layers_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* held while the install lives (the caller keeps FD): a sweeper
         * takes it only from a dead one. A sweeper that took it between
         * the mkdir and here has removed it, or will: another name */
        struct stat held, named;
        if (fd >= 0 && (flock(fd, LOCK_EX | LOCK_NB) < 0 || fstat(fd, &held) < 0 || held.st_nlink == 0 ||
                        fstatat(layers_fd, name, &named, AT_SYMLINK_NOFOLLOW) < 0 || held.st_ino != named.st_ino ||
                        held.st_dev != named.st_dev)) {
            close(fd);
            continue;
        }
        if (fd < 0 || fchmod(fd, 0755) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            al_rm_tree(layers_fd, name);
            return al_err(err, "install", e, "open %s: %m", name);
        }
        snprintf(ret_name, 16, "%s", name);
        *ret_fd = fd;
        return 0;
    }
    return al_err(err, "install", EEXIST, "no free temporary layer name");
}

/* PATH beneath DIRFD (a layer under way: the collect's copy of what an
 * install box wrote) as JSON in *RET, NULL when there is none. */
static int read_report(int dirfd, const char *path, json_t **ret, al_error *err) {
    *ret = NULL;
    _cleanup_close_ int fd = al_openat_beneath(dirfd, path, O_RDONLY | O_NOCTTY, 0);
    if (fd < 0)
        return fd == -ENOENT ? 0 : al_err(err, "install", -fd, "open %s: %s", path, strerror(-fd));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return al_err(err, "install", EINVAL, "%s is not a regular file", path);
    if ((uint64_t)st.st_size > AL_LAYER_REPORT_MAX)
        return al_err(err, "install", EFBIG, "%s is more than %u bytes", path, AL_LAYER_REPORT_MAX);
    _cleanup_free_ char *text = malloc((size_t)st.st_size + 1);
    size_t len = 0;
    while (text && len < (size_t)st.st_size) {
        ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (!text)
        return al_err(err, "install", ENOMEM, "read %s: out of memory", path);
    json_error_t je;
    /* jansson's own depth limit bounds the recursion */
    *ret = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!*ret)
        return al_err(err, "install", EINVAL, "%s is not JSON (line %d: %.80s)", path, je.line, je.text);
    return 0;
}

/* S a string of 1 to MAX bytes, each of SET (NULL: any printable ASCII) */
static bool field_ok(const char *s, size_t max, const char *set) {
    size_t n = s ? strlen(s) : 0;
    if (!n || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e || (set && !strchr(set, s[i])))
            return false;
    return true;
}

static const char NAME_SET[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-@/";
static const char VERSION_SET[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+!";

int al_layer_python_report(int tmp_fd, json_t **ret, al_error *err) {
    json_t *doc = NULL;
    int r = read_report(tmp_fd, "python-report.json", &doc, err);
    if (r < 0)
        return r;
    json_t *out = json_array(), *inst = json_object_get(doc, "install"), *e;
    size_t i;
    if (doc && !json_is_array(inst)) {
        json_decref(doc);
        json_decref(out);
        return al_err(err, "install", EINVAL, "python-report.json: no \"install\" list");
    }
    if (json_array_size(inst) > AL_LAYER_PACKAGES_MAX) {
        json_decref(doc);
        json_decref(out);
        return al_err(err, "install", E2BIG, "python-report.json: more than %d packages", AL_LAYER_PACKAGES_MAX);
    }
    json_array_foreach(inst, i, e) {
        json_t *md = json_object_get(e, "metadata"), *info = json_object_get(e, "download_info");
        const char *name = json_string_value(json_object_get(md, "name"));
        const char *version = json_string_value(json_object_get(md, "version"));
        const char *sha = json_string_value(json_object_get(json_object_get(json_object_get(info, "archive_info"), "hashes"), "sha256"));
        if (!field_ok(name, 214, NAME_SET) || !field_ok(version, 128, VERSION_SET) || (sha && !al_is_sha256_hex(sha))) {
            json_decref(doc);
            json_decref(out);
            return al_err(err, "install", EINVAL, "python-report.json: install entry %zu: a name, version or sha256 of the wrong form", i);
        }
        json_array_append_new(out, json_pack("{s:s, s:s, s:s?}", "name", name, "version", version, "sha256", sha));
    }
    json_decref(doc);
    *ret = out;
    return 0;
}

int al_layer_node_report(int tmp_fd, json_t **ret, al_error *err) {
    json_t *doc = NULL;
    int r = read_report(tmp_fd, "node/package-lock.json", &doc, err);
    if (r < 0)
        return r;
    json_t *out = json_array(), *pkgs = json_object_get(doc, "packages"), *e;
    const char *path;
    if (doc && !json_is_object(pkgs)) {
        json_decref(doc);
        json_decref(out);
        return al_err(err, "install", EINVAL, "node/package-lock.json: no \"packages\" (a lockfile of version 2 or 3)");
    }
    if (json_object_size(pkgs) > AL_LAYER_PACKAGES_MAX + 1) {
        json_decref(doc);
        json_decref(out);
        return al_err(err, "install", E2BIG, "node/package-lock.json: more than %d packages", AL_LAYER_PACKAGES_MAX);
    }
    json_object_foreach(pkgs, path, e) {
        /* "" is the install's own package.json; each other is a
         * node_modules/.../node_modules/NAME path, its name the last part */
        if (!path[0])
            continue;
        const char *last = strstr(path, "node_modules/"), *at;
        while (last && (at = strstr(last + 13, "node_modules/")))
            last = at;
        const char *name = last ? last + 13 : NULL;
        const char *version = json_string_value(json_object_get(e, "version"));
        const char *integ = json_string_value(json_object_get(e, "integrity"));
        if (!name || !field_ok(name, 214, NAME_SET) || !field_ok(version, 128, VERSION_SET) ||
            (integ && !field_ok(integ, 200, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/=- "))) {
            /* (PATH is the document's: said before it is freed) */
            int r2 = al_err(err, "install", EINVAL, "node/package-lock.json: %.100s: a name, version or integrity of the "
                            "wrong form", path);
            json_decref(doc);
            json_decref(out);
            return r2;
        }
        json_array_append_new(out, json_pack("{s:s, s:s, s:s?}", "name", name, "version", version, "integrity", integ));
    }
    json_decref(doc);
    *ret = out;
    return 0;
}

int al_layer_commit(int layers_fd, const char *tmp_name, const char *key, json_t *meta, al_error *err) {
    if (!key_ok(key))
        return al_err(err, "install", EINVAL, "a layer's key is 64 hex digits");
    _cleanup_close_ int dir = openat(layers_fd, tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        return al_err(err, "install", errno, "open %s: %m", tmp_name);
    _cleanup_free_ char *text = json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text)
        return al_err(err, "install", ENOMEM, "layer.json: out of memory");
    _cleanup_close_ int fd = openat(dir, "layer.json", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return al_err(err, "install", errno, "create %s/layer.json: %m", tmp_name);
    /* complete on disk before it has its name: a crash leaves a tmp- directory, never a half layer */
    if (al_write_all(fd, text, strlen(text)) < 0 || al_write_all(fd, "\n", 1) < 0 || fsync(fd) < 0 || fsync(dir) < 0)
        return al_err(err, "install", errno, "write %s/layer.json: %m", tmp_name);
    char name[80];
    snprintf(name, sizeof name, "sha256-%s", key);
    if (renameat(layers_fd, tmp_name, layers_fd, name) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY)
            return al_err(err, "install", errno, "rename %s to %s: %m", tmp_name, name);
        al_rm_tree(layers_fd, tmp_name);
        return 0;
    }
    fsync(layers_fd);
    return 0;
}

void al_layer_discard(int layers_fd, const char *tmp_name) {
    if (tmp_name && strncmp(tmp_name, "tmp-", 4) == 0)
        al_rm_tree(layers_fd, tmp_name);
}

/* The bytes under DIRFD (its blocks), DEPTH levels down at most: a layer
 * came out of a capped collect, so the walk is bounded by its caps. */
static uint64_t tree_bytes(int dirfd, int depth) {
    uint64_t total = 0;
    DIR *d = depth > 0 ? al_dir_open(dirfd) : NULL;
    struct dirent *e;
    while (d && (e = al_dir_next(d))) {
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        total += (uint64_t)st.st_blocks * 512;
        if (S_ISDIR(st.st_mode)) {
            _cleanup_close_ int sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                total += tree_bytes(sub, depth - 1);
        }
    }
    if (d)
        closedir(d);
    return total;
}

/* A layer's bytes: its layer.json's count (the collector's, made when the
 * layer was: a sweep every minute does not stat each file of every layer
 * again), else, for a layer without one, the walk. */
static uint64_t layer_bytes(int fd) {
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (al_read_regular(fd, "layer.json", AL_LAYER_REPORT_MAX, true, &text, &len) >= 0) {
        json_t *meta = json_loadb(text, len, 0, NULL), *b = json_object_get(meta, "bytes");
        json_int_t n = json_is_integer(b) ? json_integer_value(b) : -1;
        json_decref(meta);
        if (n >= 0)
            return (uint64_t)n;
    }
    return tree_bytes(fd, 64);
}

/* Lock files of keys that have no layer (a failed install's): removed
 * under their lock, as al_layer_remove removes a layer's. */
static void sweep_locks(int layers_fd) {
    DIR *d = al_dir_open(layers_fd);
    struct dirent *e;
    while (d && (e = al_dir_next(d))) {
        size_t n = strlen(e->d_name);
        char dir[80];
        if (n != 7 + 64 + 5 || strncmp(e->d_name, "sha256-", 7) != 0 || strcmp(e->d_name + 71, ".lock") != 0)
            continue;
        snprintf(dir, sizeof dir, "%.71s", e->d_name);
        _cleanup_close_ int lfd = -1;
        if (faccessat(layers_fd, dir, F_OK, AT_SYMLINK_NOFOLLOW) == 0 || lock_try(layers_fd, e->d_name, LOCK_EX, &lfd) <= 0)
            continue;
        if (faccessat(layers_fd, dir, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
            unlinkat(layers_fd, e->d_name, 0);
    }
    if (d)
        closedir(d);
}

static int cmp_lru(const void *a, const void *b) {
    const al_layer_info *x = a, *y = b;
    return x->used < y->used ? -1 : x->used > y->used ? 1 : strcmp(x->key, y->key);
}

int al_layer_list(int layers_fd, al_layer_info **ret, size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    DIR *d = al_dir_open(layers_fd);
    if (!d)
        return al_err(err, "install", errno, "read the layers directory: %m");
    al_layer_info *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = al_dir_next(d))) {
        if (strncmp(e->d_name, "sha256-", 7) != 0 || !key_ok(e->d_name + 7))
            continue;
        _cleanup_close_ int fd = openat(layers_fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (fd < 0)
            continue;
        /* its last use: the used file a run touches, else when it was made */
        if (fstatat(fd, "used", &st, AT_SYMLINK_NOFOLLOW) < 0 && fstatat(fd, "layer.json", &st, AT_SYMLINK_NOFOLLOW) < 0 &&
            fstat(fd, &st) < 0)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            al_layer_info *nv = realloc(v, nc * sizeof *v);
            if (!nv) {
                free(v);
                closedir(d);
                return al_err(err, "install", ENOMEM, "list the layers: out of memory");
            }
            v = nv;
            cap = nc;
        }
        al_layer_info *li = &v[n++];
        memset(li, 0, sizeof *li);
        snprintf(li->key, sizeof li->key, "%s", e->d_name + 7);
        li->used = st.st_mtim.tv_sec;
        li->bytes = layer_bytes(fd);
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof *v, cmp_lru);
    *ret = v;
    *ret_n = n;
    return 0;
}

/* KEY's layer removed, if nobody uses it: 1 removed, 0 busy (a run holds
 * it, or an install), -errno. Under the key's lock taken exclusively; the
 * directory is renamed to a tmp- name first (a lookup never sees half a
 * layer), and the lock file goes last, still held (lock_try's check). */
int al_layer_remove(int layers_fd, const char *key, al_error *err) {
    if (!key_ok(key))
        return al_err(err, "install", EINVAL, "a layer's key is 64 hex digits");
    char name[80], lock[88];
    snprintf(name, sizeof name, "sha256-%s", key);
    snprintf(lock, sizeof lock, "sha256-%s.lock", key);
    _cleanup_close_ int lfd = -1;
    int r = lock_try(layers_fd, lock, LOCK_EX, &lfd);
    if (r <= 0)
        return r < 0 ? al_err(err, "install", -r, "lock %s: %s", lock, strerror(-r)) : 0;
    char tmp[16];
    _cleanup_close_ int tfd = -1;
    /* an empty tmp- directory exchanged with the layer: the layer's name
     * is at once an empty (incomplete) directory, the layer a tmp- one */
    if ((r = al_layer_tmp(layers_fd, tmp, &tfd, err)) < 0)
        return r;
    if (renameat2(layers_fd, name, layers_fd, tmp, RENAME_EXCHANGE) < 0) {
        int e = errno;
        al_rm_tree(layers_fd, tmp);
        if (e == ENOENT)
            return 0;
        return al_err(err, "install", e, "rename %s: %m", name);
    }
    /* NAME is now the empty directory made for the exchange: gone first */
    unlinkat(layers_fd, name, AT_REMOVEDIR);
    al_rm_tree(layers_fd, tmp);
    unlinkat(layers_fd, lock, 0);
    return 1;
}

int al_layer_collect(int layers_fd, int64_t now, int64_t max_age_s, uint64_t max_bytes, al_layer_removed_fn fn,
                     void *ud, al_error *err) {
    al_layer_info *v = NULL;
    size_t n = 0;
    int r = al_layer_list(layers_fd, &v, &n, err);
    if (r < 0)
        return r;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].bytes;
    sweep_locks(layers_fd);
    int removed = 0;
    /* least recently used first: the old ones, then while over the bound */
    for (size_t i = 0; i < n; i++) {
        const char *why = max_age_s >= 0 && now - v[i].used >= max_age_s ? "unused" : total > max_bytes ? "store_full" : NULL;
        if (!why)
            continue;
        al_error e = { 0 };
        int x = al_layer_remove(layers_fd, v[i].key, &e);
        if (x <= 0)
            continue;
        total -= v[i].bytes;
        removed++;
        if (fn)
            fn(ud, &v[i], why);
    }
    free(v);
    return removed;
}
