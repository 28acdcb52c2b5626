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
#include <nettle/sha2.h>
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "../box/collect.h"
#include "../util/hash.h"
#include "image.h"

#define MAX_ENTRIES 500000
#define MAX_BYTES (16ULL << 30)
#define MAX_PATH 4000
#define MAX_JSON (4u << 20)       /* manifest.json, index.json, an OCI manifest */
#define MAX_LAYERS 512
#define MAX_NAME_BYTES (32u << 20) /* of the outer tarball's names, all told */

typedef struct limits {
    uint64_t entries, bytes;
    uint64_t max_entries;         /* MAX_ENTRIES, or lower from AIRLOCK_IMPORT_MAX_ENTRIES */
    uint64_t max_bytes;           /* MAX_BYTES, or lower from AIRLOCK_IMPORT_MAX_BYTES */
} limits;

/* "./a/b" -> "a/b"; refuses absolute paths, "..", empty components. */
static int clean_path(const char *in, char *out, size_t len) {
    while (in[0] == '.' && in[1] == '/')
        in += 2;
    if (in[0] == '/' || strlen(in) >= len || strlen(in) > MAX_PATH)
        return -EINVAL;
    size_t o = 0, depth = 0;
    for (const char *c = in; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return -EINVAL;
        if (!(n == 0 || (n == 1 && c[0] == '.'))) {
            /* no deeper than a stored image may be (al_image_manifest) */
            if (++depth > AL_IMAGE_MAX_DEPTH)
                return -ELOOP;
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

/* The directory REL beneath ROOTFD, made where missing: one component at a
 * time from the last one's fd, none of them a link (so a path of D levels
 * costs D lookups, not D*D/2). Its fd, or -errno. */
static int open_dir_p(int rootfd, const char *rel) {
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -errno;
    if (strcmp(rel, ".") == 0)
        return fd;
    char buf[MAX_PATH + 8];
    snprintf(buf, sizeof buf, "%s", rel);
    for (char *c = buf, *next; c && *c; c = next) {
        next = strchr(c, '/');
        if (next)
            *next++ = '\0';
        int sub = al_openat_beneath(fd, c, O_RDONLY | O_DIRECTORY, 0);
        if (sub == -ENOENT) {
            if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
                int e = -errno;
                close(fd);
                return e;
            }
            sub = al_openat_beneath(fd, c, O_RDONLY | O_DIRECTORY, 0);
        }
        close(fd);
        if (sub < 0)
            return sub;
        fd = sub;
    }
    return fd;
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
        if (r == -ELOOP)
            return al_err(err, "import", ELOOP, "refused entry \"%.200s\": deeper than %d levels", raw, AL_IMAGE_MAX_DEPTH);
        if (r < 0)
            return al_err(err, "import", EINVAL, "refused entry \"%.200s\": absolute, \"..\" or too long", raw ? raw : "");
        char pcopy[MAX_PATH + 8];
        snprintf(pcopy, sizeof pcopy, "%s", path);
        char *dir, *base;
        split(pcopy, &dir, &base);
        _cleanup_close_ int dfd = open_dir_p(rootfd, dir);
        if (dfd < 0)
            return al_err(err, "import", -dfd, "\"%.200s\": its directory cannot be made beneath the tree (a link in its path, "
                          "or not a directory: %s)", path, strerror(-dfd));
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
            /* every name of a file is read (hashed, staged) at its full
             * size: a hard link counts its target's size again */
            struct stat ts;
            if (fstat(t, &ts) < 0)
                return al_err(err, "import", errno, "hard link %.200s: %m", path);
            uint64_t tsz = S_ISREG(ts.st_mode) ? (uint64_t)ts.st_size : 0;
            if (tsz > lim->max_bytes - lim->bytes)
                return al_err(err, "import", EFBIG, "more than %llu bytes of content (at hard link %.200s; each link counts its file)",
                              (unsigned long long)lim->max_bytes, path);
            lim->bytes += tsz;
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
            /* the apparent size is what the tree will hold and every later
             * step (hashing, staging) reads: counted before any work, so a
             * sparse entry's holes are not free */
            la_int64_t asz = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
            if (asz < 0 || (uint64_t)asz > lim->max_bytes - lim->bytes)
                return al_err(err, "import", EFBIG, "more than %llu bytes of content (at %.200s; a sparse file counts its holes)",
                              (unsigned long long)lim->max_bytes, path);
            lim->bytes += (uint64_t)asz;
            const void *buf;
            size_t size;
            la_int64_t off;
            while ((rc = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK) {
                if (off < 0)
                    return al_err(err, "import", EINVAL, "read %.200s: a negative offset", path);
                if ((uint64_t)off + size > (uint64_t)asz) {
                    /* data past the declared size: counted as it comes */
                    uint64_t past = (uint64_t)off + size - (uint64_t)asz;
                    if (past > lim->max_bytes - lim->bytes)
                        return al_err(err, "import", EFBIG, "more than %llu bytes of content", (unsigned long long)lim->max_bytes);
                    lim->bytes += past;
                    asz = off + (la_int64_t)size;
                }
                if (pwrite(fd, buf, size, off) != (ssize_t)size)
                    return al_err(err, "import", errno, "write %.200s: %m", path);
            }
            if (rc != ARCHIVE_EOF)
                return al_err(err, "import", EIO, "read %.200s: %s", path, archive_error_string(a));
            /* a trailing hole is part of the file */
            if (ftruncate(fd, asz) < 0)
                return al_err(err, "import", errno, "write %.200s: %m", path);
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

/*
 * The outer archive is read entry by entry with libarchive and never
 * extracted: manifest.json, index.json, the OCI manifest and every layer are
 * read from their own entry's data, so a link, FIFO or device the tarball
 * names in their place is refused instead of being opened on the host.
 */
typedef struct oentry {
    char *path;                   /* clean path in the tarball */
    char *link;                   /* hard link target (clean), or NULL */
    mode_t type;
    la_int64_t pos;               /* offset of its header in the (plain) tarball */
} oentry;

typedef struct outer {
    int fd;                       /* the tarball, plain (a compressed one is spooled once) and seekable */
    const char *name;
    oentry *e;
    size_t n, cap;
    size_t name_bytes;            /* of every path and link held in E */
    struct archive *a;            /* open on the tarball, or NULL */
    struct sha256_ctx h;          /* of the layer being read */
    uint8_t buf[1 << 16];
} outer;

/* An entry named blobs/sha256/<hex> (OCI, and docker save since 25) is
 * content-addressed: what it holds must hash to its name. The hex, or NULL. */
static const char *named_digest(const char *name) {
    const char *p = "blobs/sha256/";
    if (strncmp(name, p, strlen(p)) != 0)
        return NULL;
    name += strlen(p);
    if (strlen(name) != 64)
        return NULL;
    for (const char *c = name; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return NULL;
    return name;
}

static int check_digest(struct sha256_ctx *h, const char *name, al_error *err) {
    const char *want = named_digest(name);
    if (!want)
        return 0;
    char got[65];
    al_sha256_finish_hex(h, got);
    if (strcmp(got, want) != 0)
        return al_err(err, "import", EINVAL, "%.200s in the tarball does not hold what its name says (its content is sha256:%s)", name, got);
    return 0;
}

static void outer_close(outer *o) {
    if (o->a)
        archive_read_free(o->a);
    o->a = NULL;
}

/* Open the archive at OFF: 0, or an entry's header (each is read by seeking
 * to it, so the cost of a lookup does not grow with the tarball). */
static int outer_reopen(outer *o, la_int64_t off, al_error *err) {
    outer_close(o);
    if (lseek(o->fd, off, SEEK_SET) < 0)
        return al_err(err, "import", errno, "seek in %s: %m", o->name);
    o->a = archive_read_new();
    if (!o->a)
        return al_err(err, "import", ENOMEM, "out of memory");
    archive_read_support_format_tar(o->a);
    archive_read_support_filter_none(o->a);
    if (archive_read_open_fd(o->a, o->fd, sizeof o->buf) != ARCHIVE_OK) {
        int r = al_err(err, "import", EIO, "open %s: %s", o->name, archive_error_string(o->a));
        outer_close(o);
        return r;
    }
    return 0;
}

/* A compressed tarball (or one from a pipe) is decompressed once into an
 * unlinked file of ours (counted against the byte cap), so that every later
 * lookup is a seek and not another decompression from the start. */
static int outer_spool(outer *o, const char *images_dir, limits *lim, bool pipe, al_error *err) {
    struct archive *a = archive_read_new();
    if (!a)
        return al_err(err, "import", ENOMEM, "out of memory");
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    archive_read_support_format_raw(a);
    int r = 0, t = -1;
    struct archive_entry *e;
    if (archive_read_open_fd(a, o->fd, sizeof o->buf) != ARCHIVE_OK) {
        r = al_err(err, "import", EIO, "open %s: %s", o->name, archive_error_string(a));
        goto out;
    }
    if (archive_filter_count(a) <= 1 && !pipe)
        goto out; /* a plain file: read in place */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.import-tar-XXXXXX", images_dir);
    if ((t = mkostemp(tmp, O_CLOEXEC)) < 0) {
        r = al_err(err, "import", errno, "mkstemp %s: %m", tmp);
        goto out;
    }
    unlink(tmp);
    if (archive_read_next_header(a, &e) != ARCHIVE_OK) {
        r = al_err(err, "import", EIO, "read %s: %s", o->name, archive_error_string(a));
        goto out;
    }
    uint64_t total = 0;
    for (;;) {
        la_ssize_t n = archive_read_data(a, o->buf, sizeof o->buf);
        if (n < 0) {
            r = al_err(err, "import", EIO, "read %s: %s", o->name, archive_error_string(a));
            goto out;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (total > lim->max_bytes) {
            r = al_err(err, "import", EFBIG, "%s uncompressed is more than %llu bytes", o->name, (unsigned long long)lim->max_bytes);
            goto out;
        }
        if ((r = al_write_all(t, o->buf, (size_t)n)) < 0) {
            r = al_err(err, "import", -r, "write %s: %s", tmp, strerror(-r));
            goto out;
        }
    }
    close(o->fd);
    o->fd = t;
    t = -1;
out:
    if (t >= 0)
        close(t);
    archive_read_free(a);
    return r;
}

/* Position the archive at entry IDX (its data is what archive_read_data gives). */
static int outer_goto(outer *o, size_t idx, al_error *err) {
    int r = outer_reopen(o, o->e[idx].pos, err);
    if (r < 0)
        return r;
    struct archive_entry *e;
    if (archive_read_next_header(o->a, &e) != ARCHIVE_OK)
        return al_err(err, "import", EIO, "read %s: %s", o->name, archive_error_string(o->a) ?: "?");
    /* the entry found there is the one indexed, or the tarball changed */
    char path[MAX_PATH + 8];
    const char *raw = archive_entry_pathname(e);
    int c = raw ? clean_path(raw, path, sizeof path) : -EINVAL;
    if (c == -ENOENT)
        path[0] = '\0';
    if ((c < 0 && c != -ENOENT) || strcmp(path, o->e[idx].path) != 0)
        return al_err(err, "import", EIO, "read %s: it changed while it was read", o->name);
    return 0;
}

/* Pass 1: every entry's name and type, nothing read through the file system. */
static int outer_index(outer *o, limits *lim, al_error *err) {
    int r = outer_reopen(o, 0, err), rc;
    if (r < 0)
        return r;
    struct archive_entry *e;
    while ((rc = archive_read_next_header(o->a, &e)) == ARCHIVE_OK) {
        if (++lim->entries > lim->max_entries)
            return al_err(err, "import", E2BIG, "more than %llu entries", (unsigned long long)lim->max_entries);
        const char *raw = archive_entry_pathname(e), *hl = archive_entry_hardlink(e);
        char path[MAX_PATH + 8], link[MAX_PATH + 8];
        r = raw ? clean_path(raw, path, sizeof path) : -EINVAL;
        if (r == -ENOENT)
            path[0] = '\0'; /* "./" itself: kept so that indexes stay entry numbers */
        else if (r < 0)
            return al_err(err, "import", EINVAL, "refused entry \"%.200s\": absolute, \"..\" or too long", raw ? raw : "");
        if (hl && clean_path(hl, link, sizeof link) < 0)
            return al_err(err, "import", EINVAL, "hard link \"%.200s\" points outside the tarball", path);
        if (o->n == o->cap) {
            size_t cap = o->cap ? o->cap * 2 : 64;
            oentry *ne = realloc(o->e, cap * sizeof *ne);
            if (!ne)
                return al_err(err, "import", ENOMEM, "out of memory");
            o->e = ne;
            o->cap = cap;
        }
        /* what the index holds is bounded by more than the entry count: a
         * gzip'd tarball of long names is small, its index would not be */
        o->name_bytes += strlen(path) + (hl ? strlen(link) : 0) + 2;
        if (o->name_bytes > MAX_NAME_BYTES)
            return al_err(err, "import", E2BIG, "the tarball's names are more than %u bytes", MAX_NAME_BYTES);
        oentry *oe = &o->e[o->n];
        oe->path = strdup(path);
        oe->link = hl ? strdup(link) : NULL;
        oe->type = archive_entry_filetype(e);
        oe->pos = archive_read_header_position(o->a);
        if (!oe->path || (hl && !oe->link))
            return al_err(err, "import", ENOMEM, "out of memory");
        o->n++;
    }
    if (rc != ARCHIVE_EOF)
        return al_err(err, "import", EIO, "read %s: %s", o->name, archive_error_string(o->a));
    return 0;
}

static const char *type_name(mode_t t) {
    switch (t) {
    case AE_IFLNK: return "symbolic link";
    case AE_IFDIR: return "directory";
    case AE_IFIFO: return "FIFO";
    case AE_IFCHR: case AE_IFBLK: return "device";
    case AE_IFSOCK: return "socket";
    default: return "special file";
    }
}

/* The entry WANT names (the last of that name before BEFORE, as tar has it),
 * through hard links to earlier entries: its index, -ENOENT when none, or
 * an error when it is anything but a regular file. */
static int outer_find(outer *o, const char *want, const char *what, size_t *ret, al_error *err) {
    const char *name = want;
    size_t before = o->n;
    for (int hop = 0; hop < 8; hop++) {
        size_t i = before;
        while (i > 0 && strcmp(o->e[i - 1].path, name) != 0)
            i--;
        if (i == 0)
            return hop == 0 ? -ENOENT
                            : al_err(err, "import", ENOENT, "%s \"%.200s\" in the tarball is a hard link to nothing before it", what, want);
        oentry *oe = &o->e[i - 1];
        if (oe->link) {
            name = oe->link;
            before = i - 1;
            continue;
        }
        if (oe->type != AE_IFREG)
            return al_err(err, "import", EINVAL, "%s \"%.200s\" in the tarball is a %s, not a regular file: refused", what, want,
                          type_name(oe->type));
        *ret = i - 1;
        return 0;
    }
    return al_err(err, "import", ELOOP, "%s \"%.200s\" in the tarball: too many hard links", what, want);
}

/* A JSON document from the entry named NAME, at most MAX_JSON bytes. */
static int outer_json(outer *o, const char *name, json_t **ret, al_error *err) {
    size_t idx;
    int r = outer_find(o, name, "the file", &idx, err);
    if (r < 0)
        return r;
    if ((r = outer_goto(o, idx, err)) < 0)
        return r;
    _cleanup_free_ char *text = malloc(MAX_JSON + 1);
    if (!text)
        return al_err(err, "import", ENOMEM, "out of memory");
    size_t len = 0;
    for (;;) {
        la_ssize_t n = archive_read_data(o->a, text + len, MAX_JSON + 1 - len);
        if (n < 0)
            return al_err(err, "import", EIO, "read %.200s in the tarball: %s", name, archive_error_string(o->a));
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > MAX_JSON)
            return al_err(err, "import", EFBIG, "%.200s in the tarball is over %u bytes", name, MAX_JSON);
    }
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, len, (const uint8_t *)text);
    if ((r = check_digest(&h, name, err)) < 0)
        return r;
    json_error_t je;
    *ret = json_loadb(text, len, 0, &je);
    if (!*ret)
        return al_err(err, "import", EINVAL, "%.200s in the tarball is not JSON (line %d: %s)", name, je.line, je.text);
    return 0;
}

/* "sha256:<hex>" -> "blobs/sha256/<hex>", or NULL */
static json_t *blob_path(const char *digest) {
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || !al_is_sha256_hex(digest + 7))
        return NULL;
    return json_sprintf("blobs/sha256/%s", digest + 7);
}

/* docker save: manifest.json [{"Layers": [...]}]; OCI: index.json ->
 * manifest blob -> layers[].digest under blobs/sha256/. */
static int layer_list(outer *o, json_t *layers, al_error *err) {
    json_t *m = NULL;
    int r = outer_json(o, "manifest.json", &m, err);
    if (r == 0) {
        json_t *ls = json_object_get(json_array_get(m, 0), "Layers");
        size_t i;
        json_t *l;
        json_array_foreach(ls, i, l) if (json_is_string(l)) json_array_append(layers, l);
        json_decref(m);
        return 0;
    }
    if (r != -ENOENT)
        return r;
    json_t *idx = NULL;
    if ((r = outer_json(o, "index.json", &idx, err)) < 0)
        return r == -ENOENT ? 0 : r;
    json_t *mp = blob_path(json_string_value(json_object_get(json_array_get(json_object_get(idx, "manifests"), 0), "digest")));
    json_decref(idx);
    if (!mp)
        return 0;
    json_t *man = NULL;
    r = outer_json(o, json_string_value(mp), &man, err);
    json_decref(mp);
    if (r < 0)
        return r == -ENOENT ? al_err(err, "import", ENOENT, "the OCI manifest index.json names is not in the tarball") : r;
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(man, "layers"), i, l) {
        json_t *lp = blob_path(json_string_value(json_object_get(l, "digest")));
        if (!lp) {
            json_decref(man);
            return al_err(err, "import", EINVAL, "layer %zu of the OCI manifest has no sha256 digest", i);
        }
        json_array_append_new(layers, lp);
    }
    json_decref(man);
    return 0;
}

/* A layer is read straight from its entry's data in the outer archive. */
static la_ssize_t layer_read(struct archive *inner, void *ud, const void **buf) {
    outer *o = ud;
    la_ssize_t n = archive_read_data(o->a, o->buf, sizeof o->buf);
    if (n < 0) {
        archive_set_error(inner, EIO, "%s", archive_error_string(o->a) ?: "read error");
        return -1;
    }
    sha256_update(&o->h, (size_t)n, o->buf);
    *buf = o->buf;
    return n;
}

static int apply_entry(outer *o, const char *name, int rootfd, limits *lim, al_error *err) {
    size_t idx;
    int r = outer_find(o, name, "layer", &idx, err);
    if (r == -ENOENT)
        return al_err(err, "import", ENOENT, "layer \"%.200s\" is not in the tarball", name);
    if (r < 0 || (r = outer_goto(o, idx, err)) < 0)
        return r;
    struct archive *a = archive_read_new();
    if (!a)
        return al_err(err, "import", ENOMEM, "out of memory");
    archive_read_support_format_tar(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_none(a);
    sha256_init(&o->h);
    if (archive_read_open(a, o, NULL, layer_read, NULL) != ARCHIVE_OK)
        r = al_err(err, "import", EIO, "layer %.200s: %s", name, archive_error_string(a));
    else
        r = apply_layer(a, rootfd, lim, err);
    archive_read_free(a);
    if (r < 0)
        return r;
    /* the rest of the entry (padding after the layer's end) is in its digest */
    la_ssize_t n;
    while ((n = archive_read_data(o->a, o->buf, sizeof o->buf)) > 0)
        sha256_update(&o->h, (size_t)n, o->buf);
    if (n < 0)
        return al_err(err, "import", EIO, "read %.200s in the tarball: %s", name, archive_error_string(o->a));
    return check_digest(&o->h, name, err);
}

static bool dir_empty(int dfd) {
    DIR *d = fdopendir(fcntl(dfd, F_DUPFD_CLOEXEC, 3));
    if (!d)
        return false;
    struct dirent *de;
    bool empty = true;
    while (empty && (de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            empty = false;
    closedir(d);
    return empty;
}

int al_image_import(const char *images_dir, const char *tarball, char ret_digest[65], al_error *err) {
    int r = al_image_dir_make(images_dir, err);
    if (r < 0)
        return r;
    limits lim = { .max_entries = MAX_ENTRIES, .max_bytes = MAX_BYTES };
    const char *me = getenv("AIRLOCK_IMPORT_MAX_ENTRIES"), *mb = getenv("AIRLOCK_IMPORT_MAX_BYTES");
    uint64_t v;
    if (me && al_parse_u64(me, &v) == 0 && v > 0 && v < MAX_ENTRIES)
        lim.max_entries = v;
    if (mb && al_parse_u64(mb, &v) == 0 && v > 0 && v < MAX_BYTES)
        lim.max_bytes = v;
    /* the tarball itself is the caller's to name: a file, or a pipe
     * (`docker save | airlock image import /dev/stdin`), which is spooled
     * once since entries are read by seeking; never a device */
    outer *o = calloc(1, sizeof *o);
    if (!o)
        return al_err(err, "import", ENOMEM, "out of memory");
    o->name = tarball;
    o->fd = open(tarball, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    char work[4200] = "";
    json_t *layers = json_array();
    if (o->fd < 0) {
        r = al_err(err, "import", errno, "open %s: %m", tarball);
        goto out;
    }
    if (fstat(o->fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
        r = al_err(err, "import", EINVAL, "%s is not a file or a pipe", tarball);
        goto out;
    }
    /* the O_NONBLOCK was for opening a FIFO safely; reads wait for data */
    fcntl(o->fd, F_SETFL, fcntl(o->fd, F_GETFL) & ~O_NONBLOCK);
    if ((r = outer_spool(o, images_dir, &lim, !S_ISREG(st.st_mode), err)) < 0 || (r = outer_index(o, &lim, err)) < 0 ||
        (r = layer_list(o, layers, err)) < 0)
        goto out;
    if (json_array_size(layers) == 0) {
        r = al_err(err, "import", EINVAL, "%s is neither a docker save nor an OCI layout tarball (no layers)", tarball);
        goto out;
    }
    if (json_array_size(layers) > MAX_LAYERS) {
        r = al_err(err, "import", E2BIG, "more than %d layers", MAX_LAYERS);
        goto out;
    }
    snprintf(work, sizeof work, "%s/.import-XXXXXX", images_dir);
    if (!mkdtemp(work)) {
        r = al_err(err, "import", errno, "mkdtemp: %m");
        work[0] = '\0';
        goto out;
    }
    {
        _cleanup_close_ int wfd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (wfd < 0 || mkdirat(wfd, "rootfs", 0755) < 0) {
            r = al_err(err, "import", errno, "mkdir %s/rootfs: %m", work);
            goto out;
        }
        _cleanup_close_ int rfd = openat(wfd, "rootfs", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (rfd < 0) {
            r = al_err(err, "import", errno, "open %s/rootfs: %m", work);
            goto out;
        }
        size_t i;
        json_t *l;
        json_array_foreach(layers, i, l) {
            char rel[MAX_PATH + 8];
            if (clean_path(json_string_value(l), rel, sizeof rel) < 0) {
                r = al_err(err, "import", EINVAL, "layer path \"%.200s\" is outside the archive", json_string_value(l));
                goto out;
            }
            if ((r = apply_entry(o, rel, rfd, &lim, err)) < 0)
                goto out;
        }
        if (dir_empty(rfd)) {
            r = al_err(err, "import", EINVAL, "the image holds no files: its layers are empty");
            goto out;
        }
    }
    {
        char rootfs[4300];
        snprintf(rootfs, sizeof rootfs, "%s/rootfs", work);
        json_t *info = json_pack("{s:s}", "imported_from", tarball);
        r = al_image_commit(images_dir, rootfs, info, ret_digest, err);
        json_decref(info);
    }
out:
    json_decref(layers);
    outer_close(o);
    if (o->fd >= 0)
        close(o->fd);
    for (size_t i = 0; i < o->n; i++) {
        free(o->e[i].path);
        free(o->e[i].link);
    }
    free(o->e);
    free(o);
    /* what remains of the work directory goes, whatever happened */
    if (work[0]) {
        _cleanup_close_ int pfd = open(images_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        const char *slash = strrchr(work, '/');
        if (pfd >= 0 && slash)
            al_rm_tree(pfd, slash + 1);
    }
    return r;
}
