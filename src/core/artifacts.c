/*
 * Artifacts: content-addressed blobs on disk (blobs/ab/abcdef...), one row
 * per version. Ingest moves what a run left in /out into the blob store and
 * publishes it to the run's thread; files under /out/preview are kept with
 * the run for the model instead. Staging links a thread's latest versions
 * into the next run's /work/documents.
 */
#include <dirent.h>
#include <fcntl.h>
#include <nettle/base64.h>
#include <nettle/sha2.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../box/box.h"
#include "../util/hash.h"
#include "../box/collect.h"
#include "service.h"
#include "service_int.h"
#include "../store/artifacts.h"

#define PREVIEW_MAX_BYTES (1u << 20)
#define PREVIEW_MAX_COUNT 8

static const struct { const char *ext, *type; } types[] = {
    { ".png", "image/png" }, { ".jpg", "image/jpeg" }, { ".jpeg", "image/jpeg" }, { ".gif", "image/gif" },
    { ".svg", "image/svg+xml" }, { ".webp", "image/webp" }, { ".pdf", "application/pdf" },
    { ".csv", "text/csv" }, { ".txt", "text/plain; charset=utf-8" }, { ".md", "text/markdown; charset=utf-8" },
    { ".json", "application/json" }, { ".html", "text/html; charset=utf-8" }, { ".xml", "application/xml" },
    { ".xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" },
    { ".docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document" },
    { ".zip", "application/zip" }, { ".ics", "text/calendar" }, { ".py", "text/x-python" },
    { ".js", "text/javascript" }, { ".sh", "text/x-shellscript" },
};

const char *al_content_type(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash))
        for (size_t i = 0; i < ELEMENTSOF(types); i++)
            if (strcasecmp(dot, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

void al_blob_path(al_service *s, const char *sha, char *buf, size_t len) {
    snprintf(buf, len, "%s/%.2s/%s", s->blobs_dir, sha, sha);
}

int al_blob_open(al_service *s, const char *sha, int64_t size) {
    if (!sha || strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64)
        return -EINVAL;
    char path[PATH_MAX];
    al_blob_path(s, sha, path, sizeof path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != size) {
        close(fd);
        return -EIO;
    }
    return fd;
}

/* Blobs stored before ingest verified content (before migration 006) may
 * hold bytes other than their name says: one of the lossy-name collisions
 * put a file of one tenant under the hash of another's. Once per store,
 * every blob is re-hashed and one that does not hold its hash is removed
 * (its artifacts then read as missing, never as another's bytes). The
 * number removed, or -errno. */
typedef struct verify_ctx {
    al_service *s;
    int removed;
} verify_ctx;

static int verify_blob(const char *sha, void *userdata) {
    verify_ctx *v = userdata;
    if (!al_is_sha256_hex(sha))
        return 0;
    char path[PATH_MAX];
    al_blob_path(v->s, sha, path, sizeof path);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    char got[65] = "";
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || al_sha256_fd(fd, got, NULL) < 0 || strcmp(got, sha) != 0) {
        if (unlink(path) == 0)
            v->removed++;
    }
    return 0;
}

int al_blobs_verify_once(al_service *s, al_error *err) {
    char mark[PATH_MAX];
    snprintf(mark, sizeof mark, "%s/.verified-1", s->blobs_dir);
    if (access(mark, F_OK) == 0)
        return 0;
    verify_ctx v = { .s = s };
    int r = al_store_artifact_blobs(s->store, verify_blob, &v, err);
    if (r < 0)
        return r;
    int removed = v.removed;
    _cleanup_close_ int m = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (m < 0)
        return al_err(err, "artifacts", errno, "mark the blob store verified: %m");
    return removed;
}

void al_rm_rf(const char *path) { al_rm_tree(AT_FDCWD, path); }

int64_t al_artifacts_org_usage(al_service *s, const char *org_id) {
    al_error err = { 0 };
    int64_t used = 0;
    /* a failed read counts as full: fail closed */
    return al_store_org_storage_used(s->store, org_id, &used, &err) < 0 ? AL_USAGE_UNKNOWN : used;
}

int64_t al_artifacts_org_quota(al_service *s, const char *org_id) {
    if (s->cfg.storage_quota_bytes)
        return (int64_t)s->cfg.storage_quota_bytes;
    al_error err = { 0 };
    int64_t q = 0;
    return al_store_org_storage_quota(s->store, org_id, &q, &err) < 0 ? 0 : q;
}

json_t *al_artifact_json(const al_store_artifact *a) {
    return json_pack("{s:s, s:s?, s:s, s:s, s:I, s:I, s:s, s:s, s:s}", "id", a->id, "thread_id",
                     a->thread_id[0] ? a->thread_id : NULL, "run_id", a->run_id, "path", a->path, "version",
                     (json_int_t)a->version, "size", (json_int_t)a->size, "sha256", a->sha256, "content_type",
                     a->content_type, "created_at", a->created_at);
}

json_t *al_artifacts_json(const al_store_artifacts *l) {
    json_t *out = json_array();
    for (size_t i = 0; l && i < l->n; i++)
        json_array_append_new(out, al_artifact_json(&l->v[i]));
    return out;
}

json_t *al_artifact_doc(const al_store_artifact *a) {
    return json_pack("{s:s, s:s, s:I, s:I, s:s}", "id", a->id, "path", a->path, "version", (json_int_t)a->version,
                     "size", (json_int_t)a->size, "sha256", a->sha256);
}

/* Each component of a stored path came from a directory listing in the
 * box, so none is empty, "." or ".."; check anyway before it becomes a path
 * on the host. */
#define REL_MAX 4000
static bool safe_rel(const char *p) {
    if (!*p || *p == '/' || strlen(p) > REL_MAX)
        return false;
    for (const char *c = p; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c += n;
        if (*c == '/')
            c++;
    }
    return true;
}

/* What a thread's documents may take of /work, which also holds the
 * script and the run's inline files (each bounded by the service's
 * configuration) and shares its tmpfs with nothing else. */
static void documents_budget(al_service *s, uint64_t *ret_files, uint64_t *ret_bytes, uint64_t *ret_depth) {
    al_box_limits lim;
    al_box_limits_default(&lim);
    uint64_t room = lim.stage_bytes < lim.tmpfs_bytes ? lim.stage_bytes : lim.tmpfs_bytes;
    uint64_t reserve = s->cfg.body_max + s->cfg.code_max + (1u << 20); /* + directory blocks */
    uint64_t freserve = s->cfg.files_max + 4;                           /* the script, args.json, documents/ */
    *ret_bytes = room > reserve ? room - reserve : 0;
    *ret_files = lim.stage_files > freserve ? lim.stage_files - freserve : 0;
    /* /work/documents is itself one level of what the box stages */
    *ret_depth = lim.max_depth > 1 ? lim.max_depth - 1 : 0;
}

/* The key of a thread's artifacts: "t:" and the thread id, or "r:" and the
 * run id for a run without a thread. Neither id holds a ':' (a thread id
 * is A-Z a-z 0-9 . _ -), so no id of one kind can name the other's files. */
int al_artifacts_thread_key(const char *thread_id, const char *run_id, char *buf, size_t len) {
    int n = thread_id ? snprintf(buf, len, "t:%s", thread_id) : snprintf(buf, len, "r:%s", run_id ? run_id : "");
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* What of a thread could not be staged: the first DOC_SKIPS_LISTED with
 * their reasons, then only a count (a thread may hold many files; the run's
 * record must stay small). */
#define DOC_SKIPS_LISTED 100
#define STAGE_ROWS_MAX 4096
typedef struct doc_skips {
    json_t *list;
    size_t listed, more;
} doc_skips;

static void skip_doc(doc_skips *ds, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void skip_doc(doc_skips *ds, const char *path, const char *fmt, ...) {
    if (ds->listed >= DOC_SKIPS_LISTED) {
        ds->more++;
        return;
    }
    char why[300], where[4200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(where, sizeof where, "/work/documents/%s", path);
    json_t *e = json_pack("{s:s, s:s}", "path", where, "why", why);
    if (e && ds->list)
        json_array_append_new(ds->list, e);
    else
        json_decref(e);
    ds->listed++;
}

/* Link the inode FD at NAME in DIRFD: that very inode, never a name
 * looked up again. -1 with errno on failure. */
static int link_fd(int fd, int dirfd, const char *name) {
    if (linkat(fd, "", dirfd, name, AT_EMPTY_PATH) == 0)
        return 0;
    if (errno != EPERM && errno != ENOENT)
        return -1;
    /* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH: the fd's magic link instead */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    return linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW);
}

/* Link blob SHA at PATH under DOCS (an fd), making its directories; 1 when
 * staged, 0 when skipped (with the reason in SKIPPED), -errno when airlock
 * itself failed. *DIRS counts the directories made. */
static int stage_one(al_service *s, int docs, const char *path, const char *sha, uint64_t size, uint64_t *dirs,
                     doc_skips *skipped) {
    _cleanup_close_ int cur = fcntl(docs, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return -errno;
    char comp[NAME_MAX + 1];
    const char *c = path;
    for (;;) {
        size_t n = strcspn(c, "/");
        if (n > NAME_MAX) {
            skip_doc(skipped, path, "not staged: a path component is longer than %d bytes", NAME_MAX);
            return 0;
        }
        memcpy(comp, c, n);
        comp[n] = '\0';
        if (c[n] == '\0')
            break;
        bool made = mkdirat(cur, comp, 0755) == 0;
        if (!made && errno != EEXIST)
            return -errno;
        int sub = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            if (errno != ENOTDIR && errno != ELOOP)
                return -errno;
            skip_doc(skipped, path,
                     "not staged: another of the thread's files is named \"%.*s\", where this one needs a directory "
                     "(that one was staged: the run named it, or it is newer)", (int)(c + n - path), path);
            return 0;
        }
        *dirs += made;
        close(cur);
        cur = sub;
        c += n + 1;
    }
    _cleanup_close_ int blob = al_blob_open(s, sha, (int64_t)size);
    if (blob < 0) {
        skip_doc(skipped, path, "not staged: its content is missing from the store");
        return 0;
    }
    if (link_fd(blob, cur, comp) == 0)
        return 1;
    if (errno == EEXIST) {
        skip_doc(skipped, path,
                 "not staged: a directory of this name holds other files of the thread (those were staged: the run "
                 "named them, or they are newer)");
        return 0;
    }
    if (errno == ENOENT) {
        skip_doc(skipped, path, "not staged: its content is missing from the store");
        return 0;
    }
    return -errno;
}

json_t *al_artifacts_select(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                            bool *ret_cut, al_error *err) {
    json_t *rows = json_array();
    *ret_cut = false;
    /* the artifacts the run names first: each wins over the thread's copy
     * of its path; then the thread's latest versions, newest first, so that
     * of two that cannot both be staged (a file "x" and a file "x/y") the
     * thread's most recent state is */
    for (size_t i = 0; i < json_array_size(artifact_ids); i++) {
        const char *id = json_string_value(json_array_get(artifact_ids, i));
        al_store_artifact a;
        int g = id ? al_store_artifact_get(s->store, ws_id, id, &a, err) : -ENOENT;
        if (g < 0 && g != -ENOENT) {
            json_decref(rows);
            return NULL;
        }
        if (g == 0) {
            json_array_append_new(rows, al_artifact_doc(&a));
            al_store_artifact_done(&a);
        }
    }
    if (thread_id) {
        char key[128];
        if (al_artifacts_thread_key(thread_id, NULL, key, sizeof key) < 0) {
            json_decref(rows);
            al_err(err, "stage", ENAMETOOLONG, "thread id too long");
            return NULL;
        }
        al_store_artifacts t;
        if (al_store_artifacts_latest(s->store, ws_id, key, STAGE_ROWS_MAX + 1, &t, err) < 0) {
            json_decref(rows);
            return NULL;
        }
        if (t.n > STAGE_ROWS_MAX) {
            /* the newest are staged (no more could be); the rest is said */
            *ret_cut = true;
        }
        for (size_t i = 0; i < t.n && i < STAGE_ROWS_MAX; i++)
            json_array_append_new(rows, al_artifact_doc(&t.v[i]));
        al_store_artifacts_free(&t);
    }
    /* one row a path: the first, the one staging keeps */
    json_t *seen = json_object(), *out = json_array();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        const char *path = json_string_value(json_object_get(row, "path"));
        if (!path || json_object_get(seen, path))
            continue;
        json_object_set_new(seen, path, json_true());
        json_array_append(out, row);
    }
    json_decref(seen);
    json_decref(rows);
    return out;
}

int al_artifacts_stage(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                       const char *dir, json_t *skipped, al_error *err) {
    doc_skips ds = { .list = skipped };
    bool thread_cut = false;
    json_t *rows = al_artifacts_select(s, ws_id, thread_id, artifact_ids, &thread_cut, err);
    if (!rows)
        return -EIO;
    if (!json_array_size(rows)) {
        json_decref(rows);
        return 0;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        json_decref(rows);
        return al_err(err, "stage", errno, "mkdir %s: %m", dir);
    }
    _cleanup_close_ int docs = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (docs < 0) {
        json_decref(rows);
        return al_err(err, "stage", errno, "open %s: %m", dir);
    }
    uint64_t max_files, max_bytes, max_depth, files = 0, bytes = 0;
    documents_budget(s, &max_files, &max_bytes, &max_depth);
    int staged = 0, r = 0;
    for (size_t i = 0; i < json_array_size(rows) && r >= 0; i++) {
        json_t *row = json_array_get(rows, i);
        const char *path = json_string_value(json_object_get(row, "path"));
        const char *sha = json_string_value(json_object_get(row, "sha256"));
        uint64_t size = (uint64_t)json_integer_value(json_object_get(row, "size"));
        if (!path)
            continue;
        if (!sha || !safe_rel(path)) {
            skip_doc(&ds, path, "not staged: not a plain relative path of at most %d bytes", REL_MAX);
            continue;
        }
        uint64_t depth = 0;
        for (const char *c = path; *c; c++)
            depth += *c == '/';
        if (depth > max_depth) {
            skip_doc(&ds, path, "not staged: more than %llu directories deep", (unsigned long long)max_depth);
            continue;
        }
        /* every directory is a staged entry too: at most DEPTH new ones */
        if (files + 1 + depth > max_files || bytes + size > max_bytes) {
            skip_doc(&ds, path, "not staged: the thread's documents exceed what /work holds (%llu files, %llu bytes)",
                     (unsigned long long)max_files, (unsigned long long)max_bytes);
            continue;
        }
        uint64_t dirs = 0;
        r = stage_one(s, docs, path, sha, size, &dirs, &ds);
        files += dirs;
        if (r == 1) {
            files++;
            bytes += size;
            staged++;
        }
    }
    json_decref(rows);
    if ((ds.more || thread_cut) && skipped) {
        char why[300];
        if (thread_cut)
            snprintf(why, sizeof why, "not staged: %zu more of the thread's files, and its older files beyond the "
                     "newest %d", ds.more, STAGE_ROWS_MAX);
        else
            snprintf(why, sizeof why, "not staged: %zu more of the thread's files", ds.more);
        json_array_append_new(skipped, json_pack("{s:s, s:s}", "path", "/work/documents/", "why", why));
    }
    if (r < 0)
        return al_err(err, "stage", -r, "stage the thread's documents: %s", strerror(-r));
    return staged;
}

/* Hash what FD holds from its start: at most MAX bytes (-EFBIG past
 * that); the bytes too when RET_DATA. */
static int hash_fd(int fd, uint64_t max, char hex[65], uint64_t *ret_size, char **ret_data) {
    struct sha256_ctx md;
    sha256_init(&md);
    _cleanup_free_ char *data = NULL;
    if (ret_data && !(data = malloc(max + 1)))
        return -ENOMEM;
    char buf[65536];
    uint64_t got = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        if (got + (uint64_t)n > max)
            return -EFBIG;
        sha256_update(&md, (size_t)n, (const uint8_t *)buf);
        if (data)
            memcpy(data + got, buf, (size_t)n);
        got += (uint64_t)n;
    }
    al_sha256_finish_hex(&md, hex);
    *ret_size = got;
    if (ret_data)
        *ret_data = TAKE_PTR(data);
    return 0;
}

/* Whether blob SHA in DIRFD is a regular file of SIZE bytes that hashes to SHA. */
static bool blob_verified(int dirfd, const char *sha, uint64_t size) {
    _cleanup_close_ int fd = openat(dirfd, sha, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
        return false;
    char hex[65];
    uint64_t got = 0;
    return hash_fd(fd, size, hex, &got, NULL) == 0 && got == size && strcmp(hex, sha) == 0;
}

/*
 * Put the inode FD (hashed: SHA, SIZE) into the blob store. An existing
 * blob of that name is shared only once its own content is seen to hash
 * to its name; anything else there (planted, cut short, corrupted) is
 * replaced by this verified inode. The link is made to a private name
 * and renamed over, so a reader never sees a half-made blob.
 */
static int blob_store(al_service *s, int fd, const char *sha, uint64_t size) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%.2s", s->blobs_dir, sha);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    if (blob_verified(dfd, sha, size))
        return 0;
    static unsigned seq;
    char tmp[128];
    snprintf(tmp, sizeof tmp, ".in-%.16s-%ld-%u", sha, (long)getpid(), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED));
    /* exactly the inode that was hashed */
    if (link_fd(fd, dfd, tmp) < 0)
        return -errno;
    if (renameat(dfd, tmp, dfd, sha) < 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        return -e;
    }
    return 0;
}

static void skip_art(json_t *skipped, const char *rel, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void skip_art(json_t *skipped, const char *rel, const char *fmt, ...) {
    char why[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:s, s:s}", "path", rel, "why", why);
    if (e)
        json_array_append_new(skipped, e);
}

/*
 * Everything about a run's output is the run's, not airlock's: a file that
 * is not what the box's report says, or cannot be stored, is listed as
 * skipped with the reason and the run ends as its script did. Only the
 * store's own failures are errors.
 */
int al_artifacts_ingest(al_service *s, const al_store_run *run, const char *out_dir, json_t *result,
                        json_t **ret_published, json_t **ret_previews, json_t *skipped, al_error *err) {
    const char *run_id = run->id, *org_id = run->org_id, *ws_id = run->workspace_id;
    const char *thread_id = run->thread_id[0] ? run->thread_id : NULL;
    char thread_key[128];
    json_t *published = json_array(), *previews = json_array();
    *ret_published = published;
    *ret_previews = previews;
    if (al_artifacts_thread_key(thread_id, run_id, thread_key, sizeof thread_key) < 0)
        return al_err(err, "artifacts", ENAMETOOLONG, "thread id too long");
    int64_t limit = al_artifacts_org_quota(s, org_id);
    int64_t used = al_artifacts_org_usage(s, org_id);
    json_t *arts = json_object_get(result, "artifacts");
    _cleanup_close_ int outfd = json_array_size(arts) ? open(out_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    int r = 0;
    for (size_t i = 0; i < json_array_size(arts); i++) {
        json_t *a = json_array_get(arts, i);
        const char *rel = json_string_value(json_object_get(a, "path"));
        const char *sha = json_string_value(json_object_get(a, "sha256"));
        json_int_t said = json_integer_value(json_object_get(a, "size"));
        if (!rel)
            continue;
        if (!sha || strlen(sha) != 64 || strspn(sha, "0123456789abcdef") != 64 || said < 0) {
            skip_art(skipped, rel, "not kept: the box's report of it is malformed");
            continue;
        }
        if (!safe_rel(rel)) {
            skip_art(skipped, rel, "not kept: the path is longer than %d bytes, or not a plain relative path",
                     REL_MAX);
            continue;
        }
        bool preview = strncmp(rel, "preview/", 8) == 0;
        if (preview && json_array_size(previews) >= PREVIEW_MAX_COUNT) {
            skip_art(skipped, rel, "preview not kept (more than 8, or larger than 1 MiB)");
            continue;
        }
        /* beneath out/, by the name as stored, no link followed, a
         * regular file only; then what is there is what counts */
        _cleanup_close_ int fd = outfd < 0 ? -EBADF : al_openat_beneath(outfd, rel, O_RDONLY | O_NONBLOCK, 0);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            skip_art(skipped, rel, "not kept: no regular file of this name in the run's output");
            continue;
        }
        char hex[65];
        uint64_t size = 0;
        _cleanup_free_ char *data = NULL;
        int h = hash_fd(fd, preview ? PREVIEW_MAX_BYTES : (uint64_t)said, hex, &size, preview ? &data : NULL);
        if (h == -EFBIG && preview) {
            skip_art(skipped, rel, "preview not kept (more than 8, or larger than 1 MiB)");
            continue;
        }
        if (h < 0 || size != (uint64_t)said || strcmp(hex, sha) != 0) {
            skip_art(skipped, rel, "not kept: the file differs from what the box reported of it");
            continue;
        }
        if (preview) {
            _cleanup_free_ char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(size) + 1);
            json_t *p = NULL;
            if (b64) {
                base64_encode_raw(b64, size, (const uint8_t *)data);
                b64[BASE64_ENCODE_RAW_LENGTH(size)] = '\0';
                p = json_pack("{s:s, s:s, s:I, s:s, s:s}", "path", rel, "content_type", al_content_type(rel), "size",
                              (json_int_t)size, "sha256", hex, "content_base64", b64);
            }
            if (p)
                json_array_append_new(previews, p);
            else
                skip_art(skipped, rel, "preview not kept (out of memory)");
            continue;
        }
        if (used + (int64_t)size > limit) {
            skip_art(skipped, rel, "organisation storage quota exceeded");
            continue;
        }
        int b = blob_store(s, fd, hex, size);
        if (b < 0) {
            skip_art(skipped, rel, "not kept: it could not be stored (%s)", strerror(-b));
            continue;
        }
        al_store_artifact rec = { .path = (char *)rel, .size = (int64_t)size };
        al_store_new_id("art", rec.id, sizeof rec.id);
        al_store_now(rec.created_at, sizeof rec.created_at);
        snprintf(rec.org_id, sizeof rec.org_id, "%s", org_id ? org_id : "");
        snprintf(rec.workspace_id, sizeof rec.workspace_id, "%s", ws_id ? ws_id : "");
        snprintf(rec.thread_id, sizeof rec.thread_id, "%s", thread_id ? thread_id : "");
        snprintf(rec.thread_key, sizeof rec.thread_key, "%s", thread_key);
        snprintf(rec.run_id, sizeof rec.run_id, "%s", run_id ? run_id : "");
        snprintf(rec.sha256, sizeof rec.sha256, "%s", hex);
        snprintf(rec.content_type, sizeof rec.content_type, "%s", al_content_type(rel));
        int n = al_store_artifact_add(s->store, &rec, err);
        if (n < 0) {
            r = n;
            break;
        }
        used += (int64_t)size;
        json_array_append_new(published, al_artifact_json(&rec));
    }
    return r;
}
