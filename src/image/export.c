/*
 * Export a runtime image as an OCI image (layout directory or its tar
 * archive), so a cluster can pull it by digest: the kubernetes driver names
 * `<registry>/airlock-box@<manifest digest>`.
 *
 * Deterministic: the same image gives the same bytes, hence the same
 * manifest digest, every time. Entries are written in sorted order (each
 * directory's names by strcmp, depth first), with the tree's uid, gid and
 * mode, every mtime clamped to the image's creation time (as
 * SOURCE_DATE_EPOCH does: files older keep their times, so Python's .pyc
 * files stay valid), no user or group names, and one gzip layer whose header
 * carries no timestamp and no file name (zlib's gzip wrapper, a fixed level).
 * libarchive writes the tar; the uncompressed stream is hashed on its way to
 * zlib, which gives the layer's diff_id without a second pass.
 *
 * The tree is read beneath its root: each directory is opened from its
 * parent's fd with openat2 (RESOLVE_BENEATH, no symlinks, no other file
 * system), each file likewise and checked to be what was listed; a link is stored as a link, never followed. Anything not a regular
 * file, directory or symlink is refused, as is a tree deeper or larger than
 * an image may be.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <zlib.h>

#include "../box/collect.h"
#include "../util/hash.h"
#include "export.h"

#define GZIP_LEVEL 1 /* a 670 MB tree in seconds; part of the digest: never change it silently */
#define IO_CHUNK (256u << 10)
#define MAX_TOTAL_BYTES (64ULL << 30)

typedef struct layer_out {
    int fd;                       /* the blob being written */
    z_stream z;
    struct sha256_ctx diff;       /* of the uncompressed tar: the diff_id */
    struct sha256_ctx blob;       /* of the gzip: the layer's digest */
    uint64_t blob_size;
    unsigned char *zbuf;
    int error;                    /* -errno of the first failure */
} layer_out;

typedef struct walker {
    struct archive *a;
    layer_out *lo;
    int64_t clamp;                /* mtimes are at most this */
    uint64_t entries, bytes;
    char *iobuf;
    al_error *err;
} walker;

static int deflate_out(layer_out *lo, int flush) {
    int r;
    do {
        lo->z.next_out = lo->zbuf;
        lo->z.avail_out = IO_CHUNK;
        r = deflate(&lo->z, flush);
        if (r == Z_STREAM_ERROR)
            return -EIO;
        size_t have = IO_CHUNK - lo->z.avail_out;
        if (have) {
            sha256_update(&lo->blob, have, lo->zbuf);
            lo->blob_size += have;
            int w = al_write_all(lo->fd, lo->zbuf, have);
            if (w < 0)
                return w;
        }
    } while (lo->z.avail_out == 0 || (flush == Z_FINISH && r != Z_STREAM_END));
    return 0;
}

/* libarchive's writer: the tar bytes, hashed, then compressed. */
static la_ssize_t tar_write(struct archive *a, void *data, const void *buf, size_t len) {
    (void)a;
    layer_out *lo = data;
    if (lo->error)
        return -1;
    sha256_update(&lo->diff, len, buf);
    lo->z.next_in = (unsigned char *)buf;
    lo->z.avail_in = (uInt)len;
    int r = deflate_out(lo, Z_NO_FLUSH);
    if (r < 0) {
        lo->error = r;
        return -1;
    }
    return (la_ssize_t)len;
}

static void entry_freep(struct archive_entry **e) {
    if (*e)
        archive_entry_free(*e);
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int not_dots(const struct dirent *d) { return strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0; }

static void fill_entry(walker *w, struct archive_entry *e, const char *path, const struct stat *st) {
    archive_entry_set_pathname(e, path);
    archive_entry_set_uid(e, st->st_uid);
    archive_entry_set_gid(e, st->st_gid);
    archive_entry_set_perm(e, st->st_mode & 07777);
    archive_entry_set_mtime(e, st->st_mtime < w->clamp ? st->st_mtime : w->clamp, 0);
}

static int put_header(walker *w, struct archive_entry *e, const char *path) {
    if (archive_write_header(w->a, e) != ARCHIVE_OK)
        return al_err(w->err, "export", w->lo->error ? -w->lo->error : EIO, "write %s: %s", path,
                      archive_error_string(w->a) ?: "failed");
    return 0;
}

static int put_file(walker *w, int dirfd, const char *name, const char *path, const struct stat *listed) {
    /* beneath the directory, no link followed, no other file system */
    _cleanup_close_ int fd = al_openat_beneath(dirfd, name, O_RDONLY | O_NONBLOCK, 0);
    struct stat st;
    if (fd < 0)
        return al_err(w->err, "export", -fd, "open %s: %s", path, strerror(-fd));
    if (fstat(fd, &st) < 0)
        return al_err(w->err, "export", errno, "stat %s: %m", path);
    /* what was opened, not what was listed: a FIFO or another file swapped in is refused */
    if (!S_ISREG(st.st_mode) || st.st_ino != listed->st_ino || st.st_dev != listed->st_dev)
        return al_err(w->err, "export", EINVAL, "%s changed while it was read", path);
    w->bytes += (uint64_t)st.st_size;
    if (w->bytes > MAX_TOTAL_BYTES)
        return al_err(w->err, "export", E2BIG, "the tree holds more than %llu GiB", MAX_TOTAL_BYTES >> 30);
    _cleanup_(entry_freep) struct archive_entry *e = archive_entry_new();
    if (!e)
        return al_err(w->err, "export", ENOMEM, "out of memory");
    fill_entry(w, e, path, &st);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, st.st_size);
    int r = put_header(w, e, path);
    if (r < 0)
        return r;
    /* exactly the size the header promised: a file that grows or shrinks meanwhile is an error */
    off_t left = st.st_size;
    while (left > 0) {
        ssize_t n = read(fd, w->iobuf, left < IO_CHUNK ? (size_t)left : IO_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return al_err(w->err, "export", n < 0 ? errno : EIO, "read %s: %s", path, n < 0 ? strerror(errno) : "it shrank");
        if (archive_write_data(w->a, w->iobuf, (size_t)n) != n)
            return al_err(w->err, "export", EIO, "write %s: %s", path, archive_error_string(w->a) ?: "failed");
        left -= n;
    }
    return 0;
}

static int put_dir(walker *w, int dirfd, const char *prefix, unsigned depth);

static int put_one(walker *w, int dirfd, const char *name, const char *path, unsigned depth) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return al_err(w->err, "export", errno, "stat %s: %m", path);
    if (++w->entries > AL_IMAGE_MAX_ENTRIES)
        return al_err(w->err, "export", E2BIG, "the tree holds more than %d entries", AL_IMAGE_MAX_ENTRIES);
    if (S_ISREG(st.st_mode))
        return put_file(w, dirfd, name, path, &st);
    _cleanup_(entry_freep) struct archive_entry *e = archive_entry_new();
    if (!e)
        return al_err(w->err, "export", ENOMEM, "out of memory");
    fill_entry(w, e, path, &st);
    if (S_ISLNK(st.st_mode)) {
        char t[PATH_MAX];
        ssize_t n = readlinkat(dirfd, name, t, sizeof t - 1);
        if (n < 0)
            return al_err(w->err, "export", errno, "readlink %s: %m", path);
        t[n] = '\0';
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, t);
        return put_header(w, e, path);
    }
    if (!S_ISDIR(st.st_mode))
        return al_err(w->err, "export", EINVAL, "%s is not a regular file, directory or symlink (mode %o): an image holds no other kind", path, (unsigned)st.st_mode);
    archive_entry_set_filetype(e, AE_IFDIR);
    int r = put_header(w, e, path);
    if (r < 0)
        return r;
    _cleanup_close_ int sub = al_openat_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
    if (sub < 0)
        return al_err(w->err, "export", -sub, "open %s: %s", path, strerror(-sub));
    return put_dir(w, sub, path, depth + 1);
}

static int put_dir(walker *w, int dirfd, const char *prefix, unsigned depth) {
    if (depth > AL_IMAGE_MAX_DEPTH)
        return al_err(w->err, "export", ELOOP, "the tree is deeper than %d levels at %s", AL_IMAGE_MAX_DEPTH, prefix);
    struct dirent **names = NULL;
    /* scandirat on "." of the fd: the directory that was opened, not a path looked up again */
    int n = scandirat(dirfd, ".", &names, not_dots, by_name);
    if (n < 0)
        return al_err(w->err, "export", errno, "read %s: %m", prefix[0] ? prefix : "/");
    int r = 0;
    for (int i = 0; i < n; i++) {
        if (r == 0) {
            char path[PATH_MAX];
            if (snprintf(path, sizeof path, "%s%s%s", prefix, prefix[0] ? "/" : "", names[i]->d_name) >= (int)sizeof path)
                r = al_err(w->err, "export", ENAMETOOLONG, "a path under %s is too long", prefix);
            else
                r = put_one(w, dirfd, names[i]->d_name, path, depth);
        }
        free(names[i]);
    }
    free(names);
    return r;
}

/* The layer: ROOTFD's tree as a gzip'd tar into BLOBFD. */
static int write_layer(int rootfd, int blobfd, int64_t clamp, char diff_id[65], char digest[65], uint64_t *size,
                       al_error *err) {
    layer_out lo = { .fd = blobfd };
    sha256_init(&lo.diff);
    sha256_init(&lo.blob);
    /* windowBits 16+15: a gzip wrapper; zlib writes mtime 0, no name, OS unix */
    if (deflateInit2(&lo.z, GZIP_LEVEL, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return al_err(err, "export", ENOMEM, "zlib would not start");
    _cleanup_free_ unsigned char *zbuf = malloc(IO_CHUNK);
    _cleanup_free_ char *iobuf = malloc(IO_CHUNK);
    struct archive *a = archive_write_new();
    int r = 0;
    if (!zbuf || !iobuf || !a) {
        r = al_err(err, "export", ENOMEM, "out of memory");
        goto out;
    }
    lo.zbuf = zbuf;
    /* pax (restricted): plain ustar headers, a pax record only for what ustar cannot hold (long names, big ids) */
    /* hdrcharset BINARY: names are bytes, as in the tree, not translated by the locale (which refuses non-UTF-8 ones) */
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_format_option(a, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open2(a, &lo, NULL, tar_write, NULL, NULL) != ARCHIVE_OK) {
        r = al_err(err, "export", EIO, "tar: %s", archive_error_string(a) ?: "failed");
        goto out;
    }
    walker w = { .a = a, .lo = &lo, .clamp = clamp, .iobuf = iobuf, .err = err };
    r = put_dir(&w, rootfd, "", 0);
    if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
        r = al_err(err, "export", lo.error ? -lo.error : EIO, "tar: %s", archive_error_string(a) ?: "failed");
    if (r == 0) {
        lo.z.next_in = NULL;
        lo.z.avail_in = 0;
        int f = deflate_out(&lo, Z_FINISH);
        if (f < 0)
            r = al_err(err, "export", -f, "write the layer: %s", strerror(-f));
    }
    if (r == 0) {
        al_sha256_finish_hex(&lo.diff, diff_id);
        al_sha256_finish_hex(&lo.blob, digest);
        *size = lo.blob_size;
    }
out:
    if (a)
        archive_write_free(a);
    deflateEnd(&lo.z);
    return r;
}

/* Write a small blob (JSON) under blobs/sha256 and give its digest. */
static int put_blob(int blobsfd, const char *text, char digest[65], al_error *err) {
    al_sha256_hex(text, strlen(text), digest);
    _cleanup_close_ int fd = openat(blobsfd, digest, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || al_write_all(fd, text, strlen(text)) < 0)
        return al_err(err, "export", errno, "write blob %s: %m", digest);
    return 0;
}

static char *dump(json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return s;
}

static const char *oci_arch(void) {
    struct utsname u;
    if (uname(&u) < 0)
        return "amd64";
    if (strcmp(u.machine, "x86_64") == 0)
        return "amd64";
    if (strcmp(u.machine, "aarch64") == 0)
        return "arm64";
    return "amd64";
}

/* "2026-12-07T02:02:42Z" -> seconds, or 0. */
static int64_t parse_created(const char *s) {
    struct tm tm = { 0 };
    if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return 0;
    return (int64_t)timegm(&tm);
}

/* config, manifest, index.json and oci-layout around the layer */
static int write_meta(int outfd, int blobsfd, const char *created, const char *image_digest, const char *diff_id,
                      const char *layer_digest, uint64_t layer_size, uint32_t user, al_export_result *res, al_error *err) {
    char dref[80], lref[80], cref[80], uid[16];
    snprintf(uid, sizeof uid, "%u", user);
    snprintf(dref, sizeof dref, "sha256:%s", diff_id);
    snprintf(lref, sizeof lref, "sha256:%s", layer_digest);
    _cleanup_free_ char *config = dump(json_pack(
        "{s:s, s:s, s:s, s:{s:[s], s:s, s:s, s:{s:s}}, s:{s:s, s:[s]}}", "created", created, "architecture", oci_arch(),
        "os", "linux", "config", "Env", "PATH=/usr/local/bin:/usr/bin:/bin", "User", uid, "WorkingDir",
        user == AL_EXPORT_BOX_USER ? "/work" : "/",
        "Labels", "dev.airlock.image", image_digest, "rootfs", "type", "layers", "diff_ids", dref));
    if (!config)
        return al_err(err, "export", ENOMEM, "out of memory");
    char cdig[65];
    int r = put_blob(blobsfd, config, cdig, err);
    if (r < 0)
        return r;
    snprintf(cref, sizeof cref, "sha256:%s", cdig);
    _cleanup_free_ char *manifest = dump(json_pack(
        "{s:i, s:s, s:{s:s, s:s, s:I}, s:[{s:s, s:s, s:I}], s:{s:s}}", "schemaVersion", 2, "mediaType",
        "application/vnd.oci.image.manifest.v1+json", "config", "mediaType", "application/vnd.oci.image.config.v1+json",
        "digest", cref, "size", (json_int_t)strlen(config), "layers", "mediaType",
        "application/vnd.oci.image.layer.v1.tar+gzip", "digest", lref, "size", (json_int_t)layer_size, "annotations",
        "dev.airlock.image", image_digest));
    if (!manifest)
        return al_err(err, "export", ENOMEM, "out of memory");
    char mdig[65];
    if ((r = put_blob(blobsfd, manifest, mdig, err)) < 0)
        return r;
    snprintf(res->manifest_digest, sizeof res->manifest_digest, "sha256:%s", mdig);
    snprintf(res->config_digest, sizeof res->config_digest, "sha256:%s", cdig);
    _cleanup_free_ char *index = dump(json_pack("{s:i, s:s, s:[{s:s, s:s, s:I}]}", "schemaVersion", 2, "mediaType",
                                                "application/vnd.oci.image.index.v1+json", "manifests", "mediaType",
                                                "application/vnd.oci.image.manifest.v1+json", "digest",
                                                res->manifest_digest, "size", (json_int_t)strlen(manifest)));
    if (!index || al_write_str(outfd, "index.json", index) < 0 ||
        al_write_str(outfd, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}") < 0)
        return al_err(err, "export", errno ? errno : ENOMEM, "write index.json: %m");
    return 0;
}

/* The layout into the (new, empty) directory DIR. */
static int export_layout(const char *image_dir, const char *dir, uint32_t user, al_export_result *res, al_error *err) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/info.json", image_dir);
    json_t *info = json_load_file(p, 0, NULL);
    const char *created = json_string_value(json_object_get(info, "created"));
    char created_s[32], image_digest[80];
    snprintf(created_s, sizeof created_s, "%s", created && strlen(created) < 32 ? created : "1970-01-01T00:00:00Z");
    snprintf(image_digest, sizeof image_digest, "%s", json_string_value(json_object_get(info, "digest")) ?: "-");
    json_decref(info);
    snprintf(p, sizeof p, "%s/rootfs", image_dir);
    _cleanup_close_ int rootfd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int outfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (rootfd < 0 || outfd < 0)
        return al_err(err, "export", errno, "open %s: %m", rootfd < 0 ? p : dir);
    if ((mkdirat(outfd, "blobs", 0755) < 0 && errno != EEXIST) ||
        (mkdirat(outfd, "blobs/sha256", 0755) < 0 && errno != EEXIST))
        return al_err(err, "export", errno, "mkdir %s/blobs/sha256: %m", dir);
    _cleanup_close_ int blobsfd = openat(outfd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int lfd = blobsfd < 0 ? -1 : openat(blobsfd, ".layer", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (lfd < 0)
        return al_err(err, "export", errno, "create the layer in %s: %m", dir);
    char diff_id[65], layer[65];
    uint64_t lsize = 0;
    int r = write_layer(rootfd, lfd, parse_created(created_s), diff_id, layer, &lsize, err);
    if (r < 0)
        return r;
    if (renameat(blobsfd, ".layer", blobsfd, layer) < 0)
        return al_err(err, "export", errno, "rename the layer: %m");
    res->layer_bytes = lsize;
    snprintf(res->diff_id, sizeof res->diff_id, "sha256:%s", diff_id);
    return write_meta(outfd, blobsfd, created_s, image_digest, diff_id, layer, lsize, user, res, err);
}

/* The layout directory SRC as an uncompressed tar at DST (index.json and
 * oci-layout first, then the blobs, sorted: deterministic too). */
static int archive_entries(struct archive *a, const char *src, const char *dst, al_error *err) {
    _cleanup_close_ int sfd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int bfd = sfd < 0 ? -1 : openat(sfd, "blobs/sha256", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct dirent **names = NULL;
    int n = bfd < 0 ? -1 : scandirat(bfd, ".", &names, not_dots, by_name);
    if (n < 0)
        return al_err(err, "export", errno, "read %s: %m", src);
    const char *fixed[] = { "oci-layout", "index.json", "blobs/", "blobs/sha256/" };
    _cleanup_free_ char *buf = malloc(IO_CHUNK);
    int r = buf ? 0 : al_err(err, "export", ENOMEM, "out of memory");
    for (int i = -4; r == 0 && i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, i < 0 ? "%s" : "blobs/sha256/%s", i < 0 ? fixed[i + 4] : names[i]->d_name);
        bool dir = path[strlen(path) - 1] == '/';
        _cleanup_(entry_freep) struct archive_entry *e = archive_entry_new();
        _cleanup_close_ int fd = dir ? -1 : openat(sfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st = { 0 };
        if (!e || (!dir && (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)))) {
            r = al_err(err, "export", errno ? errno : EINVAL, "open %s: %m", path);
            break;
        }
        archive_entry_set_pathname(e, path);
        archive_entry_set_perm(e, dir ? 0755 : 0644);
        archive_entry_set_filetype(e, dir ? AE_IFDIR : AE_IFREG);
        archive_entry_set_size(e, dir ? 0 : st.st_size);
        if (archive_write_header(a, e) != ARCHIVE_OK)
            r = al_err(err, "export", EIO, "%s: %s", dst, archive_error_string(a) ?: "failed");
        /* exactly the size the header promised, as put_file writes the
         * layer: a read that fails or ends short would leave a blob that
         * libarchive pads with zeros, whose digest is not its name */
        off_t left = dir ? 0 : st.st_size;
        while (r == 0 && left > 0) {
            ssize_t k = read(fd, buf, left < IO_CHUNK ? (size_t)left : IO_CHUNK);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0)
                r = al_err(err, "export", k < 0 ? errno : EIO, "read %s/%s: %s", src, path,
                           k < 0 ? strerror(errno) : "it shrank");
            else if (archive_write_data(a, buf, (size_t)k) != k)
                r = al_err(err, "export", EIO, "%s: %s", dst, archive_error_string(a) ?: "failed");
            else
                left -= k;
        }
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

static int archive_layout(const char *src, const char *dst, al_error *err) {
    struct archive *a = archive_write_new();
    if (!a)
        return al_err(err, "export", ENOMEM, "out of memory");
    int r = 0;
    if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK || archive_write_open_filename(a, dst) != ARCHIVE_OK)
        r = al_err(err, "export", EIO, "%s: %s", dst, archive_error_string(a) ?: "failed");
    if (r == 0)
        r = archive_entries(a, src, dst, err);
    if (r == 0 && archive_write_close(a) != ARCHIVE_OK)
        r = al_err(err, "export", EIO, "%s: %s", dst, archive_error_string(a) ?: "failed");
    archive_write_free(a);
    return r;
}

/* IMAGE_DIR/oci.json, written whole or not at all (a temp file renamed in). */
static int record(const char *image_dir, const al_export_result *res, al_error *err) {
    char now[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    _cleanup_free_ char *text = dump(json_pack("{s:s, s:s, s:s}", "manifest_digest", res->manifest_digest,
                                               "config_digest", res->config_digest, "exported_at", now));
    char tmp[PATH_MAX], dst[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.oci.json.%d", image_dir, (int)getpid());
    snprintf(dst, sizeof dst, "%s/oci.json", image_dir);
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (!text || fd < 0 || al_write_all(fd, text, strlen(text)) < 0 || al_write_all(fd, "\n", 1) < 0 || fsync(fd) < 0 ||
        rename(tmp, dst) < 0) {
        int e = errno ? errno : ENOMEM;
        unlink(tmp);
        return al_err(err, "export", e, "record %s: %s", dst, strerror(e));
    }
    return 0;
}

int al_image_export(const char *image_dir, const char *out, al_export_format format, uint32_t user,
                    al_export_result *res, al_error *err) {
    memset(res, 0, sizeof *res);
    if (user == 0)
        return al_err(err, "export", EINVAL, "an exported image runs as a user that is not root (--user 0 refused)");
    struct stat st;
    if (lstat(out, &st) == 0)
        return al_err(err, "export", EEXIST, "%s exists: name a new path", out);
    /* built beside OUT and renamed in: a failed export leaves nothing */
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", out) >= (int)sizeof tmp)
        return al_err(err, "export", ENAMETOOLONG, "the path is too long: %s", out);
    if (!mkdtemp(tmp))
        return al_err(err, "export", errno, "create %s: %m", tmp);
    chmod(tmp, 0755);
    int r = export_layout(image_dir, tmp, user, res, err);
    char tar[PATH_MAX + 8];
    snprintf(tar, sizeof tar, "%s.tar", tmp);
    if (r == 0 && format == AL_EXPORT_OCI_ARCHIVE)
        r = archive_layout(tmp, tar, err);
    /* the record before the rename: a failure to write it leaves no output
     * either (the digest is the image's wherever the output goes) */
    if (r == 0)
        r = record(image_dir, res, err);
    if (r == 0 && rename(format == AL_EXPORT_OCI ? tmp : tar, out) < 0)
        r = al_err(err, "export", errno, "rename to %s: %m", out);
    if (format == AL_EXPORT_OCI_ARCHIVE || r < 0)
        al_rm_tree(AT_FDCWD, tmp);
    if (format == AL_EXPORT_OCI_ARCHIVE && r < 0)
        unlink(tar);
    return r;
}
