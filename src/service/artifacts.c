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
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service.h"

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

void al_rm_rf(const char *path) { al_rm_tree(AT_FDCWD, path); }

int64_t al_artifacts_org_usage(al_service *s, const char *org_id) {
    al_error err = { 0 };
    /* artifacts, and each skill bundle the organisation keeps, once */
    json_t *rows = al_store_query(s->store, &err,
                                  "SELECT (SELECT COALESCE(SUM(size), 0) FROM artifacts WHERE org_id = ?) + "
                                  "(SELECT COALESCE(SUM(b), 0) FROM (SELECT MAX(bytes) AS b FROM skills WHERE org_id = ? "
                                  "GROUP BY digest)) AS used",
                                  "ss", org_id, org_id);
    int64_t used = rows ? json_integer_value(json_object_get(json_array_get(rows, 0), "used")) : 0;
    json_decref(rows);
    return used;
}

int64_t al_artifacts_org_quota(al_service *s, const char *org_id) {
    if (s->cfg.storage_quota_bytes)
        return (int64_t)s->cfg.storage_quota_bytes;
    al_error err = { 0 };
    json_t *rows = al_store_query(s->store, &err, "SELECT storage_quota_bytes AS q FROM orgs WHERE id = ?", "s", org_id);
    int64_t q = rows && json_array_size(rows) ? json_integer_value(json_object_get(json_array_get(rows, 0), "q")) : 0;
    json_decref(rows);
    return q;
}

/* Each component of a stored path came from a directory listing in the
 * box, so none is empty, "." or ".."; check anyway before it becomes a path
 * on the host. */
static bool safe_rel(const char *p) {
    if (!*p || *p == '/' || strlen(p) > 4000)
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

static int mkdirs_for(const char *base, const char *rel) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", base, rel) >= (int)sizeof p)
        return -ENAMETOOLONG;
    for (char *c = p + strlen(base) + 1; (c = strchr(c, '/')); c++) {
        *c = '\0';
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
            return -errno;
        *c = '/';
    }
    return 0;
}

json_t *al_artifacts_select(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids, al_error *err) {
    json_t *rows = json_array();
    if (thread_id) {
        json_t *t = al_store_query(s->store, err,
                                   "SELECT id, path, version, size, sha256 FROM artifacts a WHERE workspace_id = ? AND thread_key = ? "
                                   "AND version = (SELECT MAX(version) FROM artifacts b WHERE b.workspace_id = a.workspace_id "
                                   "AND b.thread_key = a.thread_key AND b.path = a.path) ORDER BY path",
                                   "ss", ws_id, thread_id);
        if (!t) {
            json_decref(rows);
            return NULL;
        }
        json_array_extend(rows, t);
        json_decref(t);
    }
    for (size_t i = 0; i < json_array_size(artifact_ids); i++) {
        json_t *t = al_store_query(s->store, err,
                                   "SELECT id, path, version, size, sha256 FROM artifacts WHERE workspace_id = ? AND id = ?",
                                   "ss", ws_id, json_string_value(json_array_get(artifact_ids, i)));
        if (!t) {
            json_decref(rows);
            return NULL;
        }
        json_array_extend(rows, t);
        json_decref(t);
    }
    return rows;
}

int al_artifacts_stage(al_service *s, const char *ws_id, const char *thread_id, json_t *artifact_ids,
                       const char *dir, al_error *err) {
    json_t *rows = al_artifacts_select(s, ws_id, thread_id, artifact_ids, err);
    if (!rows)
        return -EIO;
    int staged = 0;
    if (json_array_size(rows) && mkdir(dir, 0755) < 0 && errno != EEXIST) {
        json_decref(rows);
        return al_err(err, "stage", errno, "mkdir %s: %m", dir);
    }
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        const char *path = json_string_value(json_object_get(r, "path"));
        const char *sha = json_string_value(json_object_get(r, "sha256"));
        if (!path || !sha || !safe_rel(path) || mkdirs_for(dir, path) < 0)
            continue;
        char src[PATH_MAX], dst[PATH_MAX * 2];
        al_blob_path(s, sha, src, sizeof src);
        snprintf(dst, sizeof dst, "%s/%s", dir, path);
        unlink(dst); /* an explicitly referenced artifact wins over the thread's copy */
        /* a hard link costs nothing; blobs are never written in place */
        if (link(src, dst) < 0) {
            json_decref(rows);
            return al_err(err, "stage", errno, "stage artifact %s: %m", path);
        }
        staged++;
    }
    json_decref(rows);
    return staged;
}

static json_t *preview_json(const char *file, const char *rel, json_t *art) {
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    if (al_read_small(AT_FDCWD, file, PREVIEW_MAX_BYTES, &data, &len) < 0)
        return NULL;
    _cleanup_free_ char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!b64)
        return NULL;
    base64_encode_raw(b64, len, (const uint8_t *)data);
    b64[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
    return json_pack("{s:s, s:s, s:O, s:O, s:s}", "path", rel, "content_type", al_content_type(rel), "size",
                     json_object_get(art, "size"), "sha256", json_object_get(art, "sha256"), "content_base64", b64);
}

int al_artifacts_ingest(al_service *s, json_t *run, const char *out_dir, json_t *result, json_t **ret_published,
                        json_t **ret_previews, json_t *skipped, al_error *err) {
    const char *run_id = json_string_value(json_object_get(run, "id"));
    const char *org_id = json_string_value(json_object_get(run, "org_id"));
    const char *ws_id = json_string_value(json_object_get(run, "workspace_id"));
    const char *thread_id = json_string_value(json_object_get(run, "thread_id"));
    const char *thread_key = thread_id ? thread_id : run_id;
    json_t *published = json_array(), *previews = json_array();
    int64_t limit = al_artifacts_org_quota(s, org_id);
    int64_t used = al_artifacts_org_usage(s, org_id);
    json_t *arts = json_object_get(result, "artifacts");
    int r = 0;
    for (size_t i = 0; i < json_array_size(arts); i++) {
        json_t *a = json_array_get(arts, i);
        const char *rel = json_string_value(json_object_get(a, "path"));
        const char *sha = json_string_value(json_object_get(a, "sha256"));
        int64_t size = json_integer_value(json_object_get(a, "size"));
        if (!rel || !sha || strlen(sha) != 64 || !safe_rel(rel))
            continue;
        char file[PATH_MAX * 2];
        snprintf(file, sizeof file, "%s/%s", out_dir, rel);
        if (strncmp(rel, "preview/", 8) == 0) {
            json_t *p = json_array_size(previews) < PREVIEW_MAX_COUNT ? preview_json(file, rel, a) : NULL;
            if (p)
                json_array_append_new(previews, p);
            else
                json_array_append_new(skipped, json_pack("{s:s, s:s}", "path", rel, "why",
                                                         "preview not kept (more than 8, or larger than 1 MiB)"));
            continue;
        }
        if (used + size > limit) {
            json_array_append_new(skipped, json_pack("{s:s, s:s}", "path", rel, "why",
                                                     "organisation storage quota exceeded"));
            continue;
        }
        char blob[PATH_MAX], dir[PATH_MAX];
        al_blob_path(s, sha, blob, sizeof blob);
        snprintf(dir, sizeof dir, "%s/%.2s", s->blobs_dir, sha);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            r = al_err(err, "artifacts", errno, "mkdir %s: %m", dir);
            break;
        }
        /* content-addressed: an existing blob with this hash is this file */
        if (access(blob, F_OK) != 0 && rename(file, blob) < 0) {
            r = al_err(err, "artifacts", errno, "store %s: %m", rel);
            break;
        }
        char id[40], now[40];
        al_store_new_id("art", id, sizeof id);
        al_store_now(now, sizeof now);
        int n = al_store_exec(s->store, err,
                              "INSERT INTO artifacts (id, org_id, workspace_id, thread_id, thread_key, run_id, path, version, "
                              "size, sha256, content_type, created_at) SELECT ?, ?, ?, ?, ?, ?, ?, COALESCE(MAX(version), 0) + 1, "
                              "?, ?, ?, ? FROM artifacts WHERE workspace_id = ? AND thread_key = ? AND path = ?",
                              "sssSsssissssss", id, org_id, ws_id, thread_id, thread_key, run_id, rel, (int64_t)size,
                              sha, al_content_type(rel), now, ws_id, thread_key, rel);
        if (n < 0) {
            r = n;
            break;
        }
        used += size;
        json_t *row = al_store_query(s->store, err,
                                     "SELECT id, thread_id, run_id, path, version, size, sha256, content_type, created_at "
                                     "FROM artifacts WHERE id = ?",
                                     "s", id);
        if (row && json_array_size(row))
            json_array_append(published, json_array_get(row, 0));
        json_decref(row);
    }
    *ret_published = published;
    *ret_previews = previews;
    return r;
}
