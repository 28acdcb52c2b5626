/*
 * Import a `docker save` or OCI image-layout tarball as a runtime image.
 * The outer archive and every layer are untrusted: each entry's path is
 * checked (no absolute path, no "..", bounded length and count), every
 * file is created beneath the new tree with openat2 and no link followed
 * (a symlink planted by one entry cannot be written through by the next),
 * device nodes are refused, setuid/setgid bits dropped, hard links must
 * point inside the tree, and whiteouts of later layers remove what earlier
 * ones put.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "../box/collect.h"
#include "image.h"

#define MAX_ENTRIES 500000
#define MAX_BYTES (16ULL << 30)
#define MAX_PATH 4000

typedef struct limits {
    uint64_t entries, bytes;
    uint64_t max_entries;         /* MAX_ENTRIES, or lower from AIRLOCK_IMPORT_MAX_ENTRIES */
} limits;

/* "./a/b" -> "a/b"; refuses absolute paths, "..", empty components. */
static int clean_path(const char *in, char *out, size_t len) {
    while (in[0] == '.' && in[1] == '/')
        in += 2;
    if (in[0] == '/' || strlen(in) >= len || strlen(in) > MAX_PATH)
        return -EINVAL;
    size_t o = 0;
    for (const char *c = in; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return -EINVAL;
        if (!(n == 0 || (n == 1 && c[0] == '.'))) {
            if (o)
                out[o++] = '/';
            memcpy(out + o, c, n);
            o += n;
        }
        c += n;
        while (*c == '/')
            c++;
    }
    out[o] = '\0';
    return o ? 0 : -ENOENT; /* the root itself */
}

static void split(char *path, char **dir, char **base) {
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        *dir = path;
        *base = slash + 1;
    } else {
        *dir = ".";
        *base = path;
    }
}

static int open_dir(int rootfd, const char *dir) {
    if (strcmp(dir, ".") == 0)
        return fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    return al_openat_beneath(rootfd, dir, O_RDONLY | O_DIRECTORY, 0);
}

static int mkdir_p(int rootfd, const char *rel) {
    char buf[MAX_PATH + 8];
    snprintf(buf, sizeof buf, "%s", rel);
    for (char *p = buf;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            _cleanup_close_ int fd = al_openat_beneath(rootfd, buf, O_RDONLY | O_DIRECTORY, 0);
            if (fd < 0) {
                if (fd != -ENOENT)
                    return fd;
                char *d, *b;
                char tmp[MAX_PATH + 8];
                snprintf(tmp, sizeof tmp, "%s", buf);
                split(tmp, &d, &b);
                _cleanup_close_ int dfd = open_dir(rootfd, d);
                if (dfd < 0)
                    return dfd;
                if (mkdirat(dfd, b, 0755) < 0 && errno != EEXIST)
                    return -errno;
            }
            if (c == '\0')
                return 0;
            *p = c;
        }
    }
}


/* Apply one layer (an archive already open on A) to ROOTFD. */
static int apply_layer(struct archive *a, int rootfd, limits *lim, al_error *err) {
    struct archive_entry *e;
    int rc;
    while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        if (++lim->entries > lim->max_entries)
            return al_err(err, "import", E2BIG, "more than %llu entries", (unsigned long long)lim->max_entries);
        const char *raw = archive_entry_pathname(e);
        char path[MAX_PATH + 8];
        int r = raw ? clean_path(raw, path, sizeof path) : -EINVAL;
        if (r == -ENOENT)
            continue; /* "./" itself */
        if (r < 0)
            return al_err(err, "import", EINVAL, "refused entry \"%.200s\": absolute, \"..\" or too long", raw ? raw : "");
        char pcopy[MAX_PATH + 8];
        snprintf(pcopy, sizeof pcopy, "%s", path);
        char *dir, *base;
        split(pcopy, &dir, &base);
        if ((r = mkdir_p(rootfd, dir)) < 0 && strcmp(dir, ".") != 0)
            return al_err(err, "import", -r, "\"%.200s\": its directory cannot be made beneath the tree (%s)", path, strerror(-r));
        _cleanup_close_ int dfd = open_dir(rootfd, dir);
        if (dfd < 0)
            return al_err(err, "import", -dfd, "\"%.200s\": a link in its path, or not a directory", path);
        /* whiteouts: .wh.NAME removes NAME; .wh..wh..opq empties the directory */
        if (strcmp(base, ".wh..wh..opq") == 0) {
            DIR *d = fdopendir(fcntl(dfd, F_DUPFD_CLOEXEC, 3));
            struct dirent *de;
            while (d && (de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                    al_rm_tree(dfd, de->d_name);
            if (d)
                closedir(d);
            continue;
        }
        if (strncmp(base, ".wh.", 4) == 0) {
            if (base[4] && strcmp(base + 4, ".") != 0 && strcmp(base + 4, "..") != 0)
                al_rm_tree(dfd, base + 4);
            continue;
        }
        mode_t type = archive_entry_filetype(e);
        mode_t mode = archive_entry_perm(e) & 01777; /* no setuid, no setgid */
        const char *hl = archive_entry_hardlink(e);
        if (hl) {
            char target[MAX_PATH + 8];
            if (clean_path(hl, target, sizeof target) < 0)
                return al_err(err, "import", EINVAL, "hard link \"%.200s\" points outside the tree", path);
            _cleanup_close_ int t = al_openat_beneath(rootfd, target, O_PATH, 0);
            if (t < 0)
                return al_err(err, "import", -t, "hard link \"%.200s\" -> \"%.200s\": no such file in the tree", path, target);
            al_rm_tree(dfd, base);
            if (linkat(t, "", dfd, base, AT_EMPTY_PATH) < 0)
                return al_err(err, "import", errno, "hard link %.200s: %m", path);
            continue;
        }
        if (type == AE_IFDIR) {
            if (mkdirat(dfd, base, mode | 0700) < 0 && errno != EEXIST)
                return al_err(err, "import", errno, "mkdir %.200s: %m", path);
            _cleanup_close_ int sub = al_openat_beneath(dfd, base, O_RDONLY | O_DIRECTORY, 0);
            if (sub < 0)
                return al_err(err, "import", -sub, "\"%.200s\" is not a directory in the tree", path);
            fchmod(sub, mode);
        } else if (type == AE_IFREG) {
            al_rm_tree(dfd, base);
            _cleanup_close_ int fd = al_openat_beneath(dfd, base, O_WRONLY | O_CREAT | O_EXCL, 0600);
            if (fd < 0)
                return al_err(err, "import", -fd, "create %.200s: %s", path, strerror(-fd));
            const void *buf;
            size_t size;
            la_int64_t off;
            while ((rc = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK) {
                lim->bytes += size;
                if (lim->bytes > MAX_BYTES)
                    return al_err(err, "import", EFBIG, "more than %llu bytes of content", (unsigned long long)MAX_BYTES);
                if (pwrite(fd, buf, size, off) != (ssize_t)size)
                    return al_err(err, "import", errno, "write %.200s: %m", path);
            }
            if (rc != ARCHIVE_EOF)
                return al_err(err, "import", EIO, "read %.200s: %s", path, archive_error_string(a));
            fchmod(fd, mode);
        } else if (type == AE_IFLNK) {
            const char *target = archive_entry_symlink(e);
            al_rm_tree(dfd, base);
            /* kept as written: it resolves inside the box, where only the image is */
            if (!target || symlinkat(target, dfd, base) < 0)
                return al_err(err, "import", errno, "symlink %.200s: %m", path);
        } else if (type == AE_IFCHR || type == AE_IFBLK) {
            return al_err(err, "import", EPERM, "refused device node \"%.200s\"", path);
        }
        /* fifos and sockets are not image content: left out */
    }
    if (rc != ARCHIVE_EOF)
        return al_err(err, "import", EIO, "read the archive: %s", archive_error_string(a));
    return 0;
}

static struct archive *open_archive(const char *path, al_error *err) {
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        al_err(err, "import", EIO, "open %s: %s", path, archive_error_string(a));
        archive_read_free(a);
        return NULL;
    }
    return a;
}

/* The outer archive into WORKDIR (flat, checked), then the layer list. */
int al_image_import(const char *images_dir, const char *tarball, char ret_digest[65], al_error *err) {
    char work[4200];
    snprintf(work, sizeof work, "%s/.import-XXXXXX", images_dir);
    if (mkdir(images_dir, 0755) < 0 && errno != EEXIST)
        return al_err(err, "import", errno, "mkdir %s: %m", images_dir);
    if (!mkdtemp(work))
        return al_err(err, "import", errno, "mkdtemp: %m");
    _cleanup_close_ int wfd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = 0;
    limits lim = { .max_entries = MAX_ENTRIES };
    const char *me = getenv("AIRLOCK_IMPORT_MAX_ENTRIES");
    uint64_t v;
    if (me && al_parse_u64(me, &v) == 0 && v > 0 && v < MAX_ENTRIES)
        lim.max_entries = v;
    if (mkdirat(wfd, "outer", 0700) < 0 || mkdirat(wfd, "rootfs", 0755) < 0) {
        r = al_err(err, "import", errno, "mkdir: %m");
        goto out;
    }
    {
        _cleanup_close_ int ofd = openat(wfd, "outer", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct archive *a = open_archive(tarball, err);
        if (!a) {
            r = -EIO;
            goto out;
        }
        r = apply_layer(a, ofd, &lim, err);
        archive_read_free(a);
        if (r < 0)
            goto out;
    }
    /* docker save: manifest.json [{"Layers": [...]}]; OCI: index.json ->
     * manifest blob -> layers[].digest under blobs/sha256/ */
    char mpath[4300];
    snprintf(mpath, sizeof mpath, "%s/outer/manifest.json", work);
    json_t *layers = json_array();
    json_t *m = json_load_file(mpath, 0, NULL);
    if (m) {
        json_t *ls = json_object_get(json_array_get(m, 0), "Layers");
        size_t i;
        json_t *l;
        json_array_foreach(ls, i, l) if (json_is_string(l)) json_array_append(layers, l);
        json_decref(m);
    } else {
        snprintf(mpath, sizeof mpath, "%s/outer/index.json", work);
        json_t *idx = json_load_file(mpath, 0, NULL);
        const char *md = json_string_value(json_object_get(json_array_get(json_object_get(idx, "manifests"), 0), "digest"));
        if (md && strncmp(md, "sha256:", 7) == 0) {
            snprintf(mpath, sizeof mpath, "%s/outer/blobs/sha256/%.64s", work, md + 7);
            json_t *man = json_load_file(mpath, 0, NULL);
            size_t i;
            json_t *l;
            json_array_foreach(json_object_get(man, "layers"), i, l) {
                const char *d = json_string_value(json_object_get(l, "digest"));
                if (d && strncmp(d, "sha256:", 7) == 0)
                    json_array_append_new(layers, json_sprintf("blobs/sha256/%.64s", d + 7));
            }
            json_decref(man);
        }
        json_decref(idx);
    }
    if (json_array_size(layers) == 0) {
        json_decref(layers);
        r = al_err(err, "import", EINVAL, "%s is neither a docker save nor an OCI layout tarball (no layers)", tarball);
        goto out;
    }
    {
        _cleanup_close_ int rfd = openat(wfd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        size_t i;
        json_t *l;
        json_array_foreach(layers, i, l) {
            char rel[MAX_PATH + 8], lp[8400];
            if (clean_path(json_string_value(l), rel, sizeof rel) < 0) {
                r = al_err(err, "import", EINVAL, "layer path \"%.200s\" is outside the archive", json_string_value(l));
                break;
            }
            snprintf(lp, sizeof lp, "%s/outer/%s", work, rel);
            struct archive *a = open_archive(lp, err);
            if (!a) {
                r = -EIO;
                break;
            }
            r = apply_layer(a, rfd, &lim, err);
            archive_read_free(a);
            if (r < 0)
                break;
        }
    }
    json_decref(layers);
    if (r < 0)
        goto out;
    {
        char rootfs[4300];
        snprintf(rootfs, sizeof rootfs, "%s/rootfs", work);
        json_t *info = json_pack("{s:s}", "imported_from", tarball);
        r = al_image_commit(images_dir, rootfs, info, ret_digest, err);
        json_decref(info);
    }
out:
    /* what remains of the work directory goes, whatever happened */
    {
        _cleanup_close_ int pfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        const char *slash = strrchr(work, '/');
        if (pfd >= 0 && slash)
            al_rm_tree(pfd, slash + 1);
    }
    return r;
}
