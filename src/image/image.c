#include "image.h"
#include "../util/hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../box/mount.h"

typedef struct line {
    char *path;                   /* raw bytes, for sorting */
    char *text;
} line;

/* Paths and link targets as text that cannot break a line or a field. */
static char *escape(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(n * 4 + 1), *p = o;
    if (!o)
        return NULL;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c <= 0x20 || *c >= 0x7f || *c == '\\')
            p += sprintf(p, "\\x%02x", *c);
        else
            *p++ = (char)*c;
    }
    *p = '\0';
    return o;
}

static int hash_file(int dirfd, const char *name, char out[65]) {
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    /* what was opened, not what was listed: a FIFO swapped in is no file */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    return al_sha256_fd(fd, out, NULL);
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const line *)a)->path, ((const line *)b)->path);
}

typedef struct walk {
    line *lines;
    size_t n, cap;
} walk;

static int add_line(walk *w, const char *path, const char *text) {
    if (w->n == AL_IMAGE_MAX_ENTRIES)
        return -E2BIG;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        line *nl = realloc(w->lines, cap * sizeof *nl);
        if (!nl)
            return -ENOMEM;
        w->lines = nl;
        w->cap = cap;
    }
    w->lines[w->n].path = strdup(path);
    w->lines[w->n].text = strdup(text);
    if (!w->lines[w->n].path || !w->lines[w->n].text)
        return -ENOMEM;
    w->n++;
    return 0;
}

static int walk_dir(walk *w, int dirfd, const char *prefix, unsigned depth, al_error *err) {
    if (depth > AL_IMAGE_MAX_DEPTH)
        return al_err(err, "image", ELOOP, "the tree is deeper than %d levels at %s", AL_IMAGE_MAX_DEPTH, prefix);
    int dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return al_err(err, "image", errno, "read %s: %m", prefix[0] ? prefix : "/");
    }
    int r = 0;
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", prefix, de->d_name) >= (int)sizeof path) {
            r = al_err(err, "image", ENAMETOOLONG, "path too long under %s", prefix);
            break;
        }
        struct stat st;
        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            r = al_err(err, "image", errno, "stat %s: %m", path);
            break;
        }
        _cleanup_free_ char *ep = escape(path);
        char sum[65] = "-";
        const char *type;
        _cleanup_free_ char *target = NULL;
        if (S_ISREG(st.st_mode)) {
            type = "f";
            int h = hash_file(dirfd, de->d_name, sum);
            if (h < 0) {
                r = al_err(err, "image", h, "read %s: %s", path, strerror(-h));
                break;
            }
        } else if (S_ISDIR(st.st_mode)) {
            type = "d";
        } else if (S_ISLNK(st.st_mode)) {
            type = "l";
            char t[4096];
            ssize_t n = readlinkat(dirfd, de->d_name, t, sizeof t - 1);
            if (n < 0) {
                r = al_err(err, "image", errno, "readlink %s: %m", path);
                break;
            }
            t[n] = '\0';
            target = escape(t);
        } else {
            /* no device nodes, fifos or sockets in an image */
            continue;
        }
        if (!ep || (S_ISLNK(st.st_mode) && !target)) {
            r = al_err(err, "image", ENOMEM, "out of memory");
            break;
        }
        /* the whole line, however long its escaped path and target: a line
         * cut to a fixed buffer would leave its hash (and its newline) out of
         * the digest, and a change there would verify as intact */
        _cleanup_free_ char *text = NULL;
        if (asprintf(&text, "%s %s %04o %lld %s %s\n", ep, type, (unsigned)(st.st_mode & 07777),
                     S_ISREG(st.st_mode) ? (long long)st.st_size : 0LL, sum, target ? target : "-") < 0) {
            text = NULL;
            r = al_err(err, "image", ENOMEM, "out of memory");
            break;
        }
        if ((r = add_line(w, path, text)) < 0) {
            r = r == -E2BIG ? al_err(err, "image", E2BIG, "more than %d entries", AL_IMAGE_MAX_ENTRIES)
                            : al_err(err, "image", -r, "%s", strerror(-r));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            _cleanup_close_ int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) {
                r = al_err(err, "image", errno, "open %s: %m", path);
                break;
            }
            r = walk_dir(w, sub, path, depth + 1, err);
        }
    }
    closedir(d);
    return r;
}

int al_image_manifest(int rootfd, char **ret_text, size_t *ret_len, char ret_digest[65], al_error *err) {
    walk w = { 0 };
    int r = walk_dir(&w, rootfd, "", 0, err);
    char *text = NULL;
    size_t len = 0;
    if (r == 0) {
        if (w.n) /* an empty tree has no lines, and qsort's base must not be NULL */
            qsort(w.lines, w.n, sizeof *w.lines, by_path);
        for (size_t i = 0; i < w.n; i++)
            len += strlen(w.lines[i].text);
        text = malloc(len + 1);
        if (!text)
            r = -ENOMEM;
    }
    if (r == 0) {
        size_t o = 0;
        for (size_t i = 0; i < w.n; i++) {
            size_t l = strlen(w.lines[i].text);
            memcpy(text + o, w.lines[i].text, l);
            o += l;
        }
        text[len] = '\0';
        al_sha256_hex(text, len, ret_digest);
        *ret_text = text;
        *ret_len = len;
    }
    for (size_t i = 0; i < w.n; i++) {
        free(w.lines[i].path);
        free(w.lines[i].text);
    }
    free(w.lines);
    return r;
}

void al_image_dir(const char *state_dir, char *buf, size_t len) { snprintf(buf, len, "%s/images", state_dir); }

int al_image_dir_make(const char *images_dir, al_error *err) {
    char p[4200];
    if (snprintf(p, sizeof p, "%s", images_dir) >= (int)sizeof p)
        return al_err(err, "image", ENAMETOOLONG, "path too long: %.200s", images_dir);
    /* a fresh machine has no state directory yet: it (and what is missing
     * above it) is made 0700, as the service makes it; images/ is 0755 */
    for (char *c = p + 1; *c; c++) {
        if (*c != '/')
            continue;
        *c = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST)
            return al_err(err, "image", errno, "mkdir %s: %m", p);
        *c = '/';
    }
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        return al_err(err, "image", errno, "mkdir %s: %m", p);
    struct stat st;
    if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
        return al_err(err, "image", ENOTDIR, "%s is not a directory", p);
    return 0;
}

static int write_file(const char *path, const char *text, size_t len) {
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0)
        return -errno;
    return al_write_all(fd, text, len);
}


/* Total bytes and entries listed by a manifest's text. */
json_int_t al_image_manifest_bytes(const char *text, json_int_t *ret_entries) {
    json_int_t bytes = 0, entries = 0;
    for (const char *ln = text; *ln;) {
        char type;
        unsigned mode;
        long long size;
        if (sscanf(ln, "%*s %c %o %lld", &type, &mode, &size) == 3)
            bytes += size;
        entries++;
        ln += strcspn(ln, "\n");
        if (*ln)
            ln++;
    }
    if (ret_entries)
        *ret_entries = entries;
    return bytes;
}

static int read_store(const char *path, size_t max, char **ret, size_t *ret_len);

int al_image_commit(const char *images_dir, const char *src, json_t *info, char ret_digest[65], al_error *err) {
    _cleanup_close_ int sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sfd < 0)
        return al_err(err, "image", errno, "open %s: %m", src);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = al_image_manifest(sfd, &text, &len, ret_digest, err);
    if (r < 0)
        return r;
    char dir[4200], rootfs[4300], p[4300];
    snprintf(dir, sizeof dir, "%s/sha256-%s", images_dir, ret_digest);
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", dir);
    if (access(rootfs, F_OK) == 0) {
        /* the same tree is already stored: one image. What made it this
         * time (a recipe whose files changed but not the tree) is recorded,
         * so that a cache keyed by the recipe's hash finds it (tests/integration/
         * image_util.py); when it was first made is kept. */
        al_rm_tree(AT_FDCWD, src);
        snprintf(p, sizeof p, "%s/info.json", dir);
        _cleanup_free_ char *otext = NULL;
        size_t olen = 0;
        json_t *old = read_store(p, 1u << 20, &otext, &olen) == 0 ? json_loadb(otext, olen, 0, NULL) : NULL;
        if (json_is_object(old) && json_object_size(info)) {
            json_object_update(old, info);
            char *it = json_dumps(old, JSON_INDENT(2));
            char tmp[4400];
            snprintf(tmp, sizeof tmp, "%s.tmp", p);
            r = it ? write_file(tmp, it, strlen(it)) : -ENOMEM;
            free(it);
            if (r == 0 && rename(tmp, p) < 0)
                r = -errno;
            if (r < 0) {
                unlink(tmp);
                json_decref(old);
                return al_err(err, "image", -r, "write %s: %s", p, strerror(-r));
            }
        }
        json_decref(old);
        return 0;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return al_err(err, "image", errno, "mkdir %s: %m", dir);
    snprintf(p, sizeof p, "%s/manifest", dir);
    if ((r = write_file(p, text, len)) < 0)
        return al_err(err, "image", r, "write %s: %s", p, strerror(-r));
    char now[40];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(info, "created", json_string(now));
    json_object_set_new(info, "digest", json_sprintf("sha256:%s", ret_digest));
    /* size and entry count, from the manifest just made */
    json_int_t entries = 0, bytes = al_image_manifest_bytes(text, &entries);
    json_object_set_new(info, "bytes", json_integer(bytes));
    json_object_set_new(info, "entries", json_integer(entries));
    char *it = json_dumps(info, JSON_INDENT(2));
    snprintf(p, sizeof p, "%s/info.json", dir);
    r = it ? write_file(p, it, strlen(it)) : -ENOMEM;
    free(it);
    if (r < 0)
        return al_err(err, "image", r, "write %s: %s", p, strerror(-r));
    /* last: the tree appears under its name whole, or not at all */
    if (rename(src, rootfs) < 0)
        return al_err(err, "image", errno, "move %s into the store: %m", src);
    return 0;
}

/* A file of the store (alias, manifest, info.json): a regular file, no link
 * followed, at most MAX bytes. The store is airlock's own, but nothing it
 * reads there should be able to name a host file or block on a FIFO. */
static int read_store(const char *path, size_t max, char **ret, size_t *ret_len) {
    return al_read_regular(AT_FDCWD, path, max, true, ret, ret_len);
}

static int resolve(const char *images_dir, const char *name, bool tree, char *ret_dir, size_t len,
                   char ret_digest[65], al_error *err) {
    char digest[80] = "";
    if (strncmp(name, "sha256:", 7) == 0)
        snprintf(digest, sizeof digest, "%s", name + 7);
    else if (al_is_sha256_hex(name))
        snprintf(digest, sizeof digest, "%s", name);
    else {
        /* an alias: one plain name, never a path */
        if (!*name || strchr(name, '/') || name[0] == '.' || strlen(name) > 64)
            return al_err(err, "image", EINVAL, "bad image name \"%s\"", name);
        char p[4200];
        snprintf(p, sizeof p, "%s/aliases/%s", images_dir, name);
        _cleanup_free_ char *t = NULL;
        if (read_store(p, 200, &t, NULL) < 0)
            return al_err(err, "image", ENOENT, "no image named \"%s\" in %s", name, images_dir);
        t[strcspn(t, "\n")] = '\0';
        snprintf(digest, sizeof digest, "%s", strncmp(t, "sha256:", 7) == 0 ? t + 7 : t);
    }
    if (!al_is_sha256_hex(digest))
        return al_err(err, "image", EINVAL, "bad image digest \"%s\"", name);
    snprintf(ret_dir, len, "%s/sha256-%s", images_dir, digest);
    char rootfs[4300], oci[4300], manifest[4300];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", ret_dir);
    snprintf(oci, sizeof oci, "%s/oci.json", ret_dir);
    snprintf(manifest, sizeof manifest, "%s/manifest", ret_dir);
    /* a reference entry (info.json, manifest and oci.json, no rootfs) names
     * an image a registry holds: enough for a driver that runs it by that
     * reference, never for one that runs the tree */
    bool ref = access(oci, F_OK) == 0 && access(manifest, F_OK) == 0;
    if (access(rootfs, F_OK) != 0) {
        if (!ref)
            return al_err(err, "image", ENOENT, "no image sha256:%s", digest);
        if (tree)
            return al_err(err, "image", ENOENT,
                          "the image sha256:%.12s is a reference entry (its oci.json, no rootfs: what the server image "
                          "carries for the kubernetes driver); this driver runs the image's tree: build or import "
                          "the image into %s",
                          digest, images_dir);
    }
    memcpy(ret_digest, digest, 65);
    return 0;
}

int al_image_resolve(const char *images_dir, const char *name, char *ret_dir, size_t len, char ret_digest[65],
                     al_error *err) {
    return resolve(images_dir, name, true, ret_dir, len, ret_digest, err);
}

int al_image_resolve_ref(const char *images_dir, const char *name, char *ret_dir, size_t len, char ret_digest[65],
                         al_error *err) {
    return resolve(images_dir, name, false, ret_dir, len, ret_digest, err);
}

bool al_image_name_ok(const char *name) {
    /* the names al_image_resolve takes for an alias: one plain name, never a path */
    return *name && !strchr(name, '/') && name[0] != '.' && strlen(name) <= 64 && !al_is_sha256_hex(name) &&
           strncmp(name, "sha256:", 7) != 0;
}

int al_image_alias(const char *images_dir, const char *alias, const char *digest, al_error *err) {
    char p[4200], tmp[4300], text[80];
    if (!al_image_name_ok(alias))
        return al_err(err, "image", EINVAL, "bad alias \"%.80s\": one name of at most 64 characters, no '/', not starting with '.'", alias);
    snprintf(p, sizeof p, "%s/aliases", images_dir);
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        return al_err(err, "image", errno, "mkdir %s: %m", p);
    snprintf(p, sizeof p, "%s/aliases/%s", images_dir, alias);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    snprintf(text, sizeof text, "sha256:%s\n", digest);
    int r = write_file(tmp, text, strlen(text));
    if (r < 0 || rename(tmp, p) < 0)
        return al_err(err, "image", r < 0 ? -r : errno, "write alias %s", alias);
    return 0;
}

bool al_image_imported(const char *image_dir) {
    char p[4300];
    snprintf(p, sizeof p, "%s/info.json", image_dir);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (read_store(p, 1u << 20, &text, &len) < 0)
        return true;
    json_t *info = json_loadb(text, len, 0, NULL);
    bool imported = !json_is_object(info) || json_object_get(info, "imported_from") != NULL;
    json_decref(info);
    return imported;
}

int al_image_verify(const char *image_dir, const char *digest, al_error *err) {
    char rootfs[4300], mpath[4300];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", image_dir);
    snprintf(mpath, sizeof mpath, "%s/manifest", image_dir);
    _cleanup_close_ int fd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "image", errno, "open %s: %m", rootfs);
    _cleanup_free_ char *now = NULL, *stored = NULL;
    size_t len = 0, slen = 0;
    char d[65];
    int r = al_image_manifest(fd, &now, &len, d, err);
    if (r < 0)
        return r;
    if (strcmp(d, digest) == 0)
        return 1;
    /* name the first entry that differs */
    if (read_store(mpath, 1u << 30, &stored, &slen) == 0) {
        const char *a = stored, *b = now;
        while (*a && *b) {
            size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
            if (la != lb || memcmp(a, b, la) != 0) {
                snprintf(err->msg, sizeof err->msg, "first difference: stored \"%.*s\", now \"%.*s\"", (int)(la > 200 ? 200 : la), a,
                         (int)(lb > 200 ? 200 : lb), b);
                return 0;
            }
            a += la + (a[la] == '\n');
            b += lb + (b[lb] == '\n');
        }
        snprintf(err->msg, sizeof err->msg, "entries were %s", *a ? "removed" : "added");
    }
    return 0;
}

int al_image_remove(const char *images_dir, const char *digest, al_error *err) {
    char name[100];
    snprintf(name, sizeof name, "sha256-%s", digest);
    _cleanup_close_ int dfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return al_err(err, "image", errno, "open %s: %m", images_dir);
    al_rm_tree(dfd, name);
    /* aliases that pointed at it go too */
    char ad[4200];
    snprintf(ad, sizeof ad, "%s/aliases", images_dir);
    DIR *d = opendir(ad);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            char p[4500];
            snprintf(p, sizeof p, "%s/%s", ad, de->d_name);
            _cleanup_free_ char *t = NULL;
            if (read_store(p, 200, &t, NULL) == 0 && strstr(t, digest))
                unlink(p);
        }
        closedir(d);
    }
    return 0;
}

json_t *al_image_list(const char *images_dir) {
    json_t *out = json_array();
    DIR *d = opendir(images_dir);
    if (!d)
        return out;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "sha256-", 7) != 0)
            continue;
        char p[4500];
        snprintf(p, sizeof p, "%s/%s/info.json", images_dir, de->d_name);
        _cleanup_free_ char *itext = NULL;
        size_t ilen = 0;
        json_t *info = read_store(p, 1u << 20, &itext, &ilen) == 0 ? json_loadb(itext, ilen, 0, NULL) : NULL;
        if (info && !json_is_object(info)) {
            json_decref(info);
            info = NULL;
        }
        if (!info)
            info = json_pack("{s:s+}", "digest", "sha256:", de->d_name + 7);
        json_t *aliases = json_array();
        char ad[4200];
        snprintf(ad, sizeof ad, "%s/aliases", images_dir);
        DIR *a = opendir(ad);
        struct dirent *ae;
        while (a && (ae = readdir(a))) {
            if (ae->d_name[0] == '.')
                continue;
            char ap[4500];
            snprintf(ap, sizeof ap, "%s/%s", ad, ae->d_name);
            _cleanup_free_ char *t = NULL;
            if (read_store(ap, 200, &t, NULL) == 0 && strstr(t, de->d_name + 7))
                json_array_append_new(aliases, json_string(ae->d_name));
        }
        if (a)
            closedir(a);
        json_object_set_new(info, "aliases", aliases);
        if (!json_object_get(info, "bytes")) {
            /* an image stored before its size was recorded: from its manifest */
            char mp[4500];
            snprintf(mp, sizeof mp, "%s/%s/manifest", images_dir, de->d_name);
            _cleanup_free_ char *text = NULL;
            json_int_t bytes = read_store(mp, 1u << 30, &text, NULL) == 0 ? al_image_manifest_bytes(text, NULL) : 0;
            json_object_set_new(info, "bytes", json_integer(bytes));
        }
        json_array_append_new(out, info);
    }
    closedir(d);
    return out;
}

/* S appended to BUF (LEN bytes, a string), cut to fit; a control byte of S as '?' */
static void put(char *buf, size_t len, const char *s) {
    size_t o = strlen(buf);
    for (; s && *s && o + 1 < len; s++)
        buf[o++] = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
    buf[o] = '\0';
}

void al_image_holds_line(json_t *entry, char *buf, size_t len) {
    json_t *h = json_object_get(entry, "holds");
    const char *debian = json_string_value(json_object_get(json_object_get(h, "system"), "debian_version"));
    const char *suite = json_string_value(json_object_get(json_object_get(h, "source"), "suite"));
    const char *py = json_string_value(json_object_get(json_object_get(h, "python"), "version"));
    const char *node = json_string_value(json_object_get(json_object_get(h, "node"), "version"));
    buf[0] = '\0';
    if (debian || suite) {
        put(buf, len, "Debian ");
        put(buf, len, debian ? debian : suite);
        if (debian && suite) {
            put(buf, len, " (");
            put(buf, len, suite);
            put(buf, len, ")");
        }
        put(buf, len, ", ");
    }
    put(buf, len, "python ");
    put(buf, len, py ? py : "-");
    put(buf, len, ", node ");
    put(buf, len, node ? node : "-");
    const char *k;
    json_t *v;
    bool first = true;
    json_object_foreach(json_object_get(json_object_get(h, "python"), "libraries"), k, v) {
        const char *ver = json_string_value(json_object_get(v, "version"));
        put(buf, len, first ? " (" : ", ");
        put(buf, len, k);
        put(buf, len, " ");
        put(buf, len, ver ? ver : "?");
        first = false;
    }
    if (!first)
        put(buf, len, ")");
}
