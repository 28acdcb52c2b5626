/*
 * Skills, the service side: bundles stored by digest under STATE/skills
 * (sha256-<hex>/ holds the files, normalised: directories 0755, files 0644
 * or 0755, root's), one row per uploaded version in the `skills` table,
 * bundled skills loaded from the skills directory at start, and the one
 * function that starts a skill's run (al_skill_run, see skills.h).
 * Unpacking is skill_bundle.c.
 *
 * A bundle lives as long as something refers to it: a version of any
 * workspace (the same digest is shared), a bundled skill, a run that has
 * not ended, or a run being created (a pin). Deleting a version removes its
 * row; al_skills_gc then removes the bundles nothing refers to. Everything
 * that adds or removes a bundle or a reference to one holds skills_mu.
 */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

#include "../box/collect.h"
#include "../image/image.h"
#include "audit.h"
#include "roles.h"
#include "service.h"
#include "service_int.h"
#include "skills.h"
#include "../store/skills.h"

static json_t *error_doc(const char *code, const char *fmt, ...) _printf_(2, 3);
static json_t *error_doc(const char *code, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_utf8_fix(msg); /* names quoted with %.64s may be cut inside a character */
    return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg);
}

static al_status fail(json_t **ret, al_status status, const char *code, const char *msg) {
    *ret = error_doc(code, "%s", msg);
    return status;
}

/* An audit event of P's workspace (steals DATA); false, with the error
 * answer in *RET and a log line, when it could not be written: never a
 * change that the trail does not show without anyone hearing of it. */
static bool audited(al_service *s, const al_principal *p, const char *kind, json_t *data, json_t **ret) {
    al_error err = { 0 };
    if (al_workspace_audit(s, p, kind, data, &err) >= 0)
        return true;
    *ret = error_doc("audit_failed", "the change was made but its audit event (%s) could not be written: %s", kind,
                     err.msg);
    return false;
}

/* ------------------------------------------------------------- the store */



/* Check the unpacked tree at TMP (an fd on it) and move it into the store
 * under its digest. RET_MANIFEST and RET_DIGEST ("sha256:<hex>"). */
static int commit_tree(al_service *s, const char *tmp, int tmpfd, json_t **ret_manifest, char ret_digest[72],
                       int64_t *ret_bytes, al_error *err) {
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    /* the tree is ours, made just now from regular files and directories */
    struct stat mst;
    if (fstatat(tmpfd, "skill.json", &mst, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(mst.st_mode))
        return al_err(err, "skill", ENOENT, "the bundle has no skill.json at its top");
    int r = al_read_small(tmpfd, "skill.json", AL_SKILL_MANIFEST_MAX + 1, &text, &len);
    if (r == -EFBIG || (r == 0 && len > AL_SKILL_MANIFEST_MAX))
        return al_err(err, "skill", EFBIG, "skill.json is larger than %d bytes", AL_SKILL_MANIFEST_MAX);
    if (r < 0)
        return al_err(err, "skill", -r, "read skill.json: %s", strerror(-r));
    json_t *m = NULL;
    if ((r = al_skill_manifest_parse(text, len, &m, err)) < 0)
        return r;
    size_t i;
    json_t *ep;
    json_array_foreach(json_object_get(m, "entrypoints"), i, ep) {
        const char *script = json_string_value(json_object_get(ep, "script"));
        _cleanup_close_ int sf = al_openat_beneath(tmpfd, script, O_RDONLY | O_NOFOLLOW, 0);
        struct stat st;
        if (sf < 0 || fstat(sf, &st) < 0 || !S_ISREG(st.st_mode)) {
            r = al_err(err, "skill", ENOENT, "entrypoint %s: its script \"%s\" is not a file of the bundle",
                       json_string_value(json_object_get(ep, "name")), script);
            json_decref(m);
            return r;
        }
    }
    _cleanup_free_ char *mtext = NULL;
    size_t mlen;
    char hexd[65];
    if ((r = al_image_manifest(tmpfd, &mtext, &mlen, hexd, err)) < 0) {
        json_decref(m);
        return r;
    }
    snprintf(ret_digest, 72, "sha256:%s", hexd);
    if (ret_bytes)
        *ret_bytes = al_image_manifest_bytes(mtext, NULL);
    char dest[PATH_MAX + 80];
    al_skills_dir(s, ret_digest, dest, sizeof dest);
    /* the top directory itself must be enterable by the box's user */
    fchmod(tmpfd, 0755);
    if (rename(tmp, dest) < 0) {
        if (errno != EEXIST && errno != ENOTEMPTY) {
            r = al_err(err, "skill", errno, "store the bundle: %m");
            json_decref(m);
            return r;
        }
        al_rm_tree(AT_FDCWD, tmp); /* the same bundle is stored already */
    }
    *ret_manifest = m;
    return 0;
}

typedef int (*fill_fn)(int rootfd, const void *a, size_t b, al_error *err);

/* Unpack into a fresh temporary directory with FILL, then commit. */
/* Fill a fresh temporary directory of the store (path in TMP, an fd on it
 * in *RET_FD) with FILL; on failure nothing is left. */
static int unpack_tmp(al_service *s, fill_fn fill, const void *a, size_t b, char tmp[PATH_MAX + 64], int *ret_fd,
                      al_error *err) {
    char root[PATH_MAX], id[40];
    al_skills_root(s, root, sizeof root);
    al_store_new_id("tmp", id, sizeof id);
    snprintf(tmp, PATH_MAX + 64, "%s/%s", root, id);
    if (mkdir(tmp, 0755) < 0)
        return al_err(err, "skill", errno, "mkdir %s: %m", tmp);
    int fd = open(tmp, O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        al_rm_tree(AT_FDCWD, tmp);
        return al_err(err, "skill", errno, "open %s: %m", tmp);
    }
    int r = fill(fd, a, b, err);
    if (r < 0) {
        close(fd);
        al_rm_tree(AT_FDCWD, tmp);
        return r;
    }
    *ret_fd = fd;
    return 0;
}

/* Unpack with FILL, then commit. */
static int ingest(al_service *s, fill_fn fill, const void *a, size_t b, json_t **ret_manifest, char ret_digest[72],
                  al_error *err) {
    char tmp[PATH_MAX + 64];
    _cleanup_close_ int fd = -1;
    int r = unpack_tmp(s, fill, a, b, tmp, &fd, err);
    if (r < 0)
        return r;
    r = commit_tree(s, tmp, fd, ret_manifest, ret_digest, NULL, err);
    if (r < 0)
        al_rm_tree(AT_FDCWD, tmp);
    return r;
}

static int fill_archive(int rootfd, const void *body, size_t len, al_error *err) {
    return al_skill_unpack(rootfd, body, len, err);
}

static int fill_dir(int rootfd, const void *path, size_t unused, al_error *err) {
    return al_skill_copy_dir(rootfd, path, err);
}

/* -------------------------------------------------------------- records */

static json_t *entrypoints_json(json_t *m) {
    json_t *out = json_array();
    size_t i;
    json_t *ep;
    json_array_foreach(json_object_get(m, "entrypoints"), i, ep) {
        json_t *e = json_pack("{s:O, s:O, s:O, s:O, s:O}", "name", json_object_get(ep, "name"), "language",
                              json_object_get(ep, "language"), "script", json_object_get(ep, "script"), "description",
                              json_object_get(ep, "description"), "input_schema", json_object_get(ep, "input_schema"));
        if (json_object_get(ep, "timeout_s"))
            json_object_set(e, "timeout_s", json_object_get(ep, "timeout_s"));
        json_array_append_new(out, e);
    }
    return out;
}

static json_t *skill_json(json_t *m, const char *digest, const char *source, const char *state) {
    json_t *img = json_object_get(m, "image");
    return json_pack("{s:O, s:O, s:O, s:s, s:s, s:s, s:s, s:o}", "name", json_object_get(m, "name"), "version",
                     json_object_get(m, "version"), "description", json_object_get(m, "description"), "image",
                     img ? json_string_value(img) : "default", "digest", digest, "source", source, "state", state,
                     "entrypoints", entrypoints_json(m));
}

/* A stored version as the API shows it. */
static json_t *row_json(const al_store_skill *k) {
    json_t *m = json_loads(k->manifest ? k->manifest : "", 0, NULL);
    if (!m)
        return NULL;
    json_t *j = skill_json(m, k->digest, "workspace", al_store_skill_state_name(k->state));
    json_decref(m);
    json_object_set_new(j, "uploaded_at", json_string(k->created_at));
    json_object_set_new(j, "promoted_at", k->promoted_at[0] ? json_string(k->promoted_at) : json_null());
    return j;
}

/* The bundled skill NAME (borrowed from s->skills_bundled), or NULL. */
static json_t *bundled(al_service *s, const char *name) {
    size_t i;
    json_t *b;
    json_array_foreach(s->skills_bundled, i, b) {
        if (strcmp(json_string_value(json_object_get(json_object_get(b, "manifest"), "name")), name) == 0)
            return b;
    }
    return NULL;
}

/* ------------------------------------------------------------ lifetime */

/* Count a run being made from DIGEST (BY +1), or no longer (-1). Under skills_mu. */
static void pin(al_service *s, const char *digest, int by) {
    json_int_t n = json_integer_value(json_object_get(s->skills_pins, digest)) + by;
    if (n > 0)
        json_object_set_new(s->skills_pins, digest, json_integer(n));
    else
        json_object_del(s->skills_pins, digest);
}






al_status al_skills_delete(al_service *s, const al_principal *p, const char *name, const char *version, json_t **ret) {
    al_error err = { 0 };
    if (al_principal_role(p) != AL_ROLE_ADMIN)
        return fail(ret, AL_STATUS_FORBIDDEN, "forbidden", "only an admin of the workspace deletes a skill");
    if (bundled(s, name)) {
        *ret = error_doc("conflict", "%.64s is a bundled skill: it ships with airlock and cannot be deleted (the "
                                     "workspace's tool allow-list decides whether agents run skills at all)", name);
        return AL_STATUS_CONFLICT;
    }
    pthread_mutex_lock(&s->skills_mu);
    al_store_skills rows;
    int n = al_store_skill_delete(s->store, p->workspace_id, name, version, &rows, &err);
    if (n > 0)
        al_skills_gc_locked(s, NULL, &err); /* a failure leaves garbage for the next collection, never a hole */
    pthread_mutex_unlock(&s->skills_mu);
    if (n < 0)
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    if (n == 0) {
        al_store_skills_free(&rows);
        *ret = version ? error_doc("not_found", "skill %.64s has no version %.80s in this workspace", name, version)
                       : error_doc("not_found", "no skill named %.64s in this workspace", name);
        return AL_STATUS_NOT_FOUND;
    }
    /* which of this workspace's runs still use a deleted version: their
     * bundles stay until they end (other workspaces' holdings are not told) */
    json_t *deleted = json_array(), *live_runs = json_array();
    for (size_t i = 0; i < rows.n; i++) {
        const al_store_skill *row = &rows.v[i];
        char users[100][40];
        int nu = al_store_skill_live_runs(s->store, p->workspace_id, row->digest, users, ELEMENTSOF(users), &err);
        for (int j = 0; j < nu; j++)
            json_array_append_new(live_runs, json_string(users[j]));
        json_array_append_new(deleted, json_pack("{s:s, s:s, s:s, s:s}", "version", row->version, "digest", row->digest,
                                                 "state", al_store_skill_state_name(row->state), "bundle",
                                                 nu > 0 ? "kept_for_runs" : "released"));
    }
    al_store_skills_free(&rows);
    if (!audited(s, p, "skill.deleted",
                 json_pack("{s:s, s:s?, s:O, s:O}", "skill", name, "version", version, "deleted", deleted, "live_runs",
                           live_runs),
                 ret)) {
        json_decref(deleted);
        json_decref(live_runs);
        return AL_STATUS_INTERNAL;
    }
    *ret = json_pack("{s:s, s:o, s:o}", "name", name, "deleted", deleted, "live_runs", live_runs);
    return AL_STATUS_OK;
}

int al_skills_init(al_service *s, const char *skills_dir, al_error *err) {
    char root[PATH_MAX];
    al_skills_root(s, root, sizeof root);
    /* 0755: the boxes' users enter it through the bind of one bundle only,
     * but the bind's source is resolved with the caller's rights */
    if (mkdir(root, 0755) < 0 && errno != EEXIST)
        return al_err(err, "skill", errno, "mkdir %s: %m", root);
    s->skills_bundled = json_array();
    s->skills_pins = json_object();
    pthread_mutex_init(&s->skills_mu, NULL);
    /* leftovers of an upload interrupted by a crash */
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, "tmp_", 4) == 0)
            al_rm_tree(dirfd(d), de->d_name);
    if (d)
        closedir(d);
    if (!skills_dir || !*skills_dir)
        return 0;
    d = opendir(skills_dir);
    if (!d)
        return errno == ENOENT ? 0 : al_err(err, "skill", errno, "open the skills directory %s: %m", skills_dir);
    int r = 0;
    char names[64][AL_SKILL_NAME_MAX + 1];
    size_t n = 0;
    while ((de = readdir(d)) && n < ELEMENTSOF(names)) {
        char p[PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s/skill.json", skills_dir, de->d_name);
        if (de->d_name[0] != '.' && strlen(de->d_name) <= AL_SKILL_NAME_MAX && access(p, F_OK) == 0)
            snprintf(names[n++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d);
    for (size_t i = 0; r == 0 && i < n; i++) {
        char p[PATH_MAX + 80], digest[72];
        snprintf(p, sizeof p, "%s/%s", skills_dir, names[i]);
        json_t *m = NULL;
        al_error e = { 0 };
        if ((r = ingest(s, fill_dir, p, 0, &m, digest, &e)) < 0) {
            r = al_err(err, "skill", e.err ? e.err : EINVAL, "bundled skill %s: %s", p, e.msg);
            break;
        }
        if (bundled(s, json_string_value(json_object_get(m, "name")))) {
            r = al_err(err, "skill", EEXIST, "two bundled skills are named %s", json_string_value(json_object_get(m, "name")));
            json_decref(m);
            break;
        }
        json_array_append_new(s->skills_bundled, json_pack("{s:o, s:s}", "manifest", m, "digest", digest));
    }
    return r;
}

void al_skills_free(al_service *s) {
    json_decref(s->skills_bundled);
    json_decref(s->skills_pins);
    s->skills_bundled = s->skills_pins = NULL;
    pthread_mutex_destroy(&s->skills_mu);
}

static al_status upload_locked(al_service *s, const al_principal *p, const char *tmp, int fd, al_idem *idem, json_t **ret);

/* An upload whose Idempotency-Key an earlier upload of P used: false none
 * did, else true and the answer (the version it recorded, or a conflict). */
static bool upload_replay(al_service *s, const al_principal *p, al_idem *k, al_status *ret_status, json_t **ret) {
    al_error err = { 0 };
    char id[40];
    int r = k && k->key[0] ? al_idem_lookup(s->store, p, k, "skill", id, &err) : 0;
    if (r == 0)
        return false;
    if (r == -EEXIST) {
        *ret = error_doc("idempotency_conflict", "%s", err.msg);
        *ret_status = AL_STATUS_CONFLICT;
        return true;
    }
    if (r < 0) {
        *ret_status = fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
        return true;
    }
    al_store_skill k_row;
    json_t *doc = NULL;
    if (al_store_skill_get(s->store, p->workspace_id, id, &k_row, &err) == 0) {
        doc = row_json(&k_row);
        al_store_skill_done(&k_row);
    }
    if (!doc) {
        *ret = error_doc("idempotency_conflict", "the skill version that this Idempotency-Key uploaded has been deleted "
                                                 "since: upload it again with a new key");
        *ret_status = AL_STATUS_CONFLICT;
        return true;
    }
    k->replayed = true;
    *ret = doc;
    *ret_status = AL_STATUS_OK;
    return true;
}

al_status al_skills_upload(al_service *s, const al_principal *p, const void *body, size_t len, al_idem *idem,
                           json_t **ret) {
    if (len == 0)
        return fail(ret, AL_STATUS_INVALID, "bad_request", "the body must be the bundle: a tar or tar.gz archive with skill.json at its top");
    al_status replay;
    if (upload_replay(s, p, idem, &replay, ret))
        return replay;
    char tmp[PATH_MAX + 64];
    _cleanup_close_ int fd = -1;
    al_error err = { 0 };
    /* unpacked outside the lock (tmp_* are never collected); the lock spans
     * moving the bundle into the store and recording its row, so a
     * collection in between cannot take the bundle away */
    if (unpack_tmp(s, fill_archive, body, len, tmp, &fd, &err) < 0) {
        *ret = error_doc(err.err == EFBIG || err.err == E2BIG ? "payload_too_large" : "bad_request", "invalid skill bundle: %s",
                         err.msg);
        return err.err == EFBIG || err.err == E2BIG ? AL_STATUS_TOO_LARGE : AL_STATUS_INVALID;
    }
    pthread_mutex_lock(&s->skills_mu);
    al_status st = upload_locked(s, p, tmp, fd, idem, ret);
    pthread_mutex_unlock(&s->skills_mu);
    return st;
}

static al_status upload_locked(al_service *s, const al_principal *p, const char *tmp, int fd, al_idem *idem, json_t **ret) {
    json_t *m = NULL;
    char digest[72];
    int64_t bytes = 0;
    al_error err = { 0 };
    if (commit_tree(s, tmp, fd, &m, digest, &bytes, &err) < 0) {
        al_rm_tree(AT_FDCWD, tmp);
        *ret = error_doc(err.err == EFBIG || err.err == E2BIG ? "payload_too_large" : "bad_request", "invalid skill bundle: %s",
                         err.msg);
        return err.err == EFBIG || err.err == E2BIG ? AL_STATUS_TOO_LARGE : AL_STATUS_INVALID;
    }
    char name[AL_SKILL_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s", json_string_value(json_object_get(m, "name")));
    if (bundled(s, name)) {
        json_decref(m);
        *ret = error_doc("conflict", "%s is the name of a bundled skill: choose another name", name);
        al_skills_gc_locked(s, NULL, &err); /* what was just stored for nothing */
        return AL_STATUS_CONFLICT;
    }
    /* Limits on what a workspace keeps: versions per skill, and the bytes
     * of bundles the organisation does not hold already, against its
     * storage quota (shared with artifacts). A new version of nothing is
     * recorded and the stored copy is collected again. */
    int64_t versions = 0;
    bool held = false;
    /* a failed count reads as none held (as it always has): the quota
     * check and the insert's own failure still stand */
    (void)al_store_skill_counts(s->store, p->workspace_id, name, digest, p->org_id, &versions, &held, &err);
    int64_t quota = al_artifacts_org_quota(s, p->org_id), used = al_artifacts_org_usage(s, p->org_id);
    al_status refuse = versions >= AL_SKILL_VERSIONS_MAX                   ? AL_STATUS_CONFLICT
                       : (!held && quota > 0 && used + bytes > quota) ? AL_STATUS_QUOTA
                                                                      : AL_STATUS_OK;
    if (refuse != AL_STATUS_OK) {
        json_decref(m);
        if (refuse == AL_STATUS_CONFLICT)
            *ret = error_doc("too_many_versions", "%s has %d versions in this workspace already: delete old ones "
                             "(DELETE /v1/skills/%s/versions/{version})", name, AL_SKILL_VERSIONS_MAX, name);
        else
            *ret = error_doc("quota_exceeded", "the organisation's storage quota (%lld bytes, artifacts and skills) "
                             "has no room for this bundle's %lld bytes", (long long)quota, (long long)bytes);
        al_skills_gc_locked(s, NULL, &err);
        return refuse;
    }
    al_store_skill rec = { .bytes = bytes };
    al_store_new_id("skl", rec.id, sizeof rec.id);
    al_store_now(rec.created_at, sizeof rec.created_at);
    snprintf(rec.org_id, sizeof rec.org_id, "%s", p->org_id);
    snprintf(rec.workspace_id, sizeof rec.workspace_id, "%s", p->workspace_id);
    snprintf(rec.name, sizeof rec.name, "%s", name);
    snprintf(rec.version, sizeof rec.version, "%s", json_string_value(json_object_get(m, "version")) ?: "");
    snprintf(rec.digest, sizeof rec.digest, "%s", digest);
    snprintf(rec.uploaded_by, sizeof rec.uploaded_by, "%s", p->person_id);
    char *mtext = json_dumps(m, JSON_COMPACT);
    rec.manifest = mtext;
    /* the same bundle uploaded again is the same version: one row; and the
     * upload's Idempotency-Key with it, in one transaction */
    int n = al_store_begin(s->store, &err), taken = 0;
    bool began = n >= 0;
    if (n >= 0)
        n = al_store_skill_add(s->store, &rec, &err);
    int inserted = n;
    char keyed_id[40] = "";
    if (n >= 0 && idem && idem->key[0]) {
        al_store_skill row;
        int g = al_store_skill_get_digest(s->store, p->workspace_id, name, digest, &row, &err);
        if (g == 0) {
            snprintf(keyed_id, sizeof keyed_id, "%s", row.id);
            al_store_skill_done(&row);
        }
        n = taken = g == 0 ? al_idem_record(s->store, p, idem, "skill", keyed_id, &err) : -EIO;
    }
    if (n >= 0)
        n = al_store_commit(s->store, &err);
    else if (began)
        al_store_rollback(s->store);
    free(mtext);
    json_decref(m);
    if (n < 0) {
        al_status st = AL_STATUS_INTERNAL;
        bool replayed = taken == -EEXIST && upload_replay(s, p, idem, &st, ret);
        al_skills_gc_locked(s, NULL, &err); /* a bundle stored for a row that was not made */
        return replayed ? st : fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    }
    n = inserted;
    if (!audited(s, p, "skill.uploaded", json_pack("{s:s, s:s, s:b}", "skill", name, "digest", digest, "new", n > 0), ret)) {
        /* failed loudly: a retry with the key must try (and audit) again,
         * not be answered as done */
        if (keyed_id[0])
            al_idem_forget(s->store, p, idem, keyed_id, &err);
        return AL_STATUS_INTERNAL;
    }
    al_store_skill row;
    json_t *doc = NULL;
    if (al_store_skill_get_digest(s->store, p->workspace_id, name, digest, &row, &err) == 0) {
        doc = row_json(&row);
        al_store_skill_done(&row);
    }
    if (!doc)
        return fail(ret, AL_STATUS_INTERNAL, "internal", "the stored skill vanished");
    *ret = doc;
    return n > 0 ? AL_STATUS_CREATED : AL_STATUS_OK;
}

al_status al_skills_list(al_service *s, const al_principal *p, json_t **ret) {
    al_error err = { 0 };
    json_t *out = json_array();
    size_t i;
    json_t *b;
    json_array_foreach(s->skills_bundled, i, b) json_array_append_new(
        out, skill_json(json_object_get(b, "manifest"), json_string_value(json_object_get(b, "digest")), "bundled",
                        "bundled"));
    /* per name: the promoted version when there is one, else the newest */
    al_store_skills rows;
    if (al_store_skills_list(s->store, p->workspace_id, 1000, &rows, &err) < 0) {
        json_decref(out);
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    }
    const char *last = "";
    for (i = 0; i < rows.n; i++) {
        const char *name = rows.v[i].name;
        if (strcmp(name, last) == 0)
            continue;
        last = name;
        json_t *j = row_json(&rows.v[i]);
        if (j)
            json_array_append_new(out, j);
    }
    *ret = json_pack("{s:o}", "skills", out);
    al_store_skills_free(&rows);
    return AL_STATUS_OK;
}

al_status al_skills_get(al_service *s, const al_principal *p, const char *name, json_t **ret) {
    al_error err = { 0 };
    json_t *b = bundled(s, name);
    if (b) {
        *ret = skill_json(json_object_get(b, "manifest"), json_string_value(json_object_get(b, "digest")), "bundled",
                          "bundled");
        return AL_STATUS_OK;
    }
    al_store_skills rows;
    if (al_store_skill_versions(s->store, p->workspace_id, name, NULL, false, 100, &rows, &err) < 0)
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    if (rows.n == 0) {
        al_store_skills_free(&rows);
        *ret = error_doc("not_found", "no skill named %.64s in this workspace or among the bundled skills", name);
        return AL_STATUS_NOT_FOUND;
    }
    /* the runnable (promoted) version first, then every version newest first */
    json_t *versions = json_array(), *shown = NULL;
    for (size_t i = 0; i < rows.n; i++) {
        json_t *j = row_json(&rows.v[i]);
        if (!j)
            continue;
        if (!shown && rows.v[i].state == AL_STORE_SKILL_PROMOTED)
            shown = json_deep_copy(j);
        json_array_append_new(versions, j);
    }
    if (!shown)
        shown = json_deep_copy(json_array_get(versions, 0));
    json_object_set_new(shown, "versions", versions);
    al_store_skills_free(&rows);
    *ret = shown;
    return AL_STATUS_OK;
}

al_status al_skills_promote(al_service *s, const al_principal *p, const char *name, const char *digest, json_t **ret) {
    al_error err = { 0 };
    if (al_principal_role(p) != AL_ROLE_ADMIN)
        return fail(ret, AL_STATUS_FORBIDDEN, "forbidden", "only an admin of the workspace promotes a skill");
    if (bundled(s, name)) {
        *ret = error_doc("conflict", "%.64s is a bundled skill: it is runnable already", name);
        return AL_STATUS_CONFLICT;
    }
    al_store_skills rows;
    if (al_store_skill_versions(s->store, p->workspace_id, name, digest, false, 1, &rows, &err) < 0)
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    if (rows.n == 0) {
        al_store_skills_free(&rows);
        *ret = digest ? error_doc("not_found", "skill %.64s has no version %.80s in this workspace", name, digest)
                      : error_doc("not_found", "no skill named %.64s in this workspace", name);
        return AL_STATUS_NOT_FOUND;
    }
    char chosen[80], now[40];
    snprintf(chosen, sizeof chosen, "%s", rows.v[0].digest);
    al_store_skills_free(&rows);
    al_store_now(now, sizeof now);
    if (al_store_skill_promote(s->store, p->workspace_id, name, chosen, p->person_id, now, &err) < 0)
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    if (!audited(s, p, "skill.promoted", json_pack("{s:s, s:s}", "skill", name, "digest", chosen), ret))
        return AL_STATUS_INTERNAL;
    return al_skills_get(s, p, name, ret);
}

/* ------------------------------------------------------------- running */

/* The version of NAME that MODE may run: its manifest and digest. */
static al_status resolve(al_service *s, const al_principal *p, const char *name, const char *digest, al_skill_mode mode,
                         json_t **ret_manifest, char ret_digest[80], json_t **ret) {
    al_error err = { 0 };
    json_t *b = bundled(s, name);
    if (b) {
        *ret_manifest = json_incref(json_object_get(b, "manifest"));
        snprintf(ret_digest, 80, "%s", json_string_value(json_object_get(b, "digest")));
        return AL_STATUS_OK;
    }
    al_store_skills rows;
    if (al_store_skill_versions(s->store, p->workspace_id, name, digest, true, 0, &rows, &err) < 0)
        return fail(ret, AL_STATUS_INTERNAL, "internal", err.msg);
    const al_store_skill *row = NULL;
    for (size_t i = 0; i < rows.n; i++) {
        const al_store_skill *r = &rows.v[i];
        bool promoted = r->state == AL_STORE_SKILL_PROMOTED;
        if (mode == AL_SKILL_RUN && !promoted)
            continue;
        /* the test bench runs the newest upload unless told which */
        if (mode == AL_SKILL_TEST && !digest && row && row->seq > r->seq)
            continue;
        row = r;
        if (mode == AL_SKILL_RUN)
            break;
    }
    if (!row) {
        al_status st = rows.n ? AL_STATUS_CONFLICT : AL_STATUS_NOT_FOUND;
        *ret = rows.n
                   ? error_doc("not_promoted", "skill %.64s has not been promoted for agents: an admin promotes it with "
                                               "POST /v1/skills/%.64s/promote after testing it", name, name)
                   : error_doc("not_found", "no skill named %.64s%s%.80s in this workspace or among the bundled skills",
                               name, digest ? " with digest " : "", digest ? digest : "");
        al_store_skills_free(&rows);
        return st;
    }
    *ret_manifest = json_loads(row->manifest, 0, NULL);
    snprintf(ret_digest, 80, "%s", row->digest);
    al_store_skills_free(&rows);
    return *ret_manifest ? AL_STATUS_OK : fail(ret, AL_STATUS_INTERNAL, "internal", "a stored manifest does not parse");
}

static al_status run_resolved(al_service *s, const al_principal *p, const char *name, const char *entrypoint,
                              json_t *args, const char *thread_id, const al_skill_opts *opt, json_t *m, const char *dg,
                              json_t **ret);

al_status al_skill_run(al_service *s, const al_principal *p, const char *name, const char *entrypoint, json_t *args,
                       const char *thread_id, const al_skill_opts *opts, json_t **ret) {
    static const al_skill_opts defaults = { .mode = AL_SKILL_RUN };
    const al_skill_opts *opt = opts ? opts : &defaults;
    const char *digest = opt->digest;
    al_skill_mode mode = opt->mode;
    if (!name || !al_skill_name_valid(name))
        return fail(ret, AL_STATUS_INVALID, "bad_request", "skill must be a skill's name (1-64 characters of a-z 0-9 -)");
    if (!entrypoint || !*entrypoint)
        return fail(ret, AL_STATUS_INVALID, "bad_request", "entrypoint is required: the name of one of the skill's entrypoints");
    /* a retry gets its first attempt's run, whatever became of the skill */
    al_run_extra rx = { .wait = opt->wait, .idem = opt->idem };
    al_status st;
    if (al_run_replay(s, p, &rx, &st, ret))
        return st;
    json_t *m = NULL;
    char dg[80];
    /* pinned from the lookup until the run's row exists (or, waiting, has
     * ended): a delete meanwhile cannot take the bundle from under it */
    pthread_mutex_lock(&s->skills_mu);
    st = resolve(s, p, name, digest, mode, &m, dg, ret);
    if (st == AL_STATUS_OK)
        pin(s, dg, 1);
    pthread_mutex_unlock(&s->skills_mu);
    if (st != AL_STATUS_OK)
        return st;
    st = run_resolved(s, p, name, entrypoint, args, thread_id, opt, m, dg, ret);
    pthread_mutex_lock(&s->skills_mu);
    pin(s, dg, -1);
    pthread_mutex_unlock(&s->skills_mu);
    /* a delete that came while the run was being made collects now */
    al_skills_run_ended(s);
    json_decref(m);
    return st;
}

static al_status run_resolved(al_service *s, const al_principal *p, const char *name, const char *entrypoint,
                              json_t *args, const char *thread_id, const al_skill_opts *opt, json_t *m, const char *dg,
                              json_t **ret) {
    al_status st;
    al_skill_mode mode = opt->mode;
    al_error serr = { 0 };
    al_settings settings;
    if (al_settings_get(s, p->workspace_id, &settings, &serr) < 0) /* fail closed, as for any run */
        return fail(ret, AL_STATUS_UNAVAILABLE, "settings_unavailable", serr.msg);
    bool code_ok = settings.tools & AL_TOOL_BIT(AL_TOOL_CODE_EXECUTION);
    if (mode == AL_SKILL_TEST && !code_ok) {
        /* The test bench runs a version no admin promoted: code no one has
         * reviewed, which is code execution whatever it is called. A
         * workspace that does not allow code_execution (agents may run
         * promoted skills only) does not get it through the bench. */
        al_settings_done(&settings);
        al_error aerr = { 0 };
        int ar = al_workspace_audit(s, p, "capability.invoke_denied",
                                    json_pack("{s:s, s:s, s:s, s:s}", "tool", "code_execution", "via",
                                              "skill_test_bench", "skill", name, "reason",
                                              "the test bench runs unpromoted code: code_execution is not on the "
                                              "workspace's tool allow-list"),
                                    &aerr);
        if (ar < 0)
            return fail(ret, AL_STATUS_INTERNAL, "audit_failed", aerr.msg);
        *ret = error_doc("tool_not_allowed", "the skill test bench runs unpromoted code, which is code_execution, and "
                         "code_execution is not on this workspace's tool allow-list (settings tools): test %.64s where "
                         "code execution is allowed, or have an admin promote it", name);
        return AL_STATUS_FORBIDDEN;
    }
    json_t *ep = al_skill_entrypoint(m, entrypoint);
    if (!ep) {
        char have[600] = "";
        size_t i, o = 0;
        json_t *e;
        json_array_foreach(json_object_get(m, "entrypoints"), i, e) o += (size_t)snprintf(
            have + o, o < sizeof have ? sizeof have - o : 0, "%s%s", i ? ", " : "", json_string_value(json_object_get(e, "name")));
        *ret = error_doc("bad_request", "skill %s has no entrypoint \"%.64s\" (its entrypoints: %s)", name, entrypoint, have);
        al_settings_done(&settings);
        return AL_STATUS_INVALID;
    }
    json_t *empty = NULL;
    if (!args || json_is_null(args))
        args = empty = json_object();
    al_error err = { 0 };
    if (al_skill_args_validate(json_object_get(ep, "input_schema"), args, &err) < 0) {
        *ret = error_doc("bad_request", "arguments of %s/%s do not match its input_schema: %s", name, entrypoint, err.msg);
        json_decref(empty);
        al_settings_done(&settings);
        return AL_STATUS_INVALID;
    }
    /* what the run is, in its own record: the approval hash and the audit's
     * input hash cover the skill's digest, the entrypoint and the arguments */
    json_t *what = json_pack("{s:s, s:O, s:s, s:s, s:O}", "skill", name, "version", json_object_get(m, "version"), "digest",
                             dg, "entrypoint", entrypoint, "args", args);
    _cleanup_free_ char *code = json_dumps(what, JSON_COMPACT | JSON_SORT_KEYS);
    _cleanup_free_ char *args_text = json_dumps(args, JSON_COMPACT);
    json_decref(what);
    const char *lang = json_string_value(json_object_get(ep, "language")) ?: "";
    const char *img = json_string_value(json_object_get(m, "image"));
    const char *version = json_string_value(json_object_get(m, "version"));
    _cleanup_free_ char *desc = NULL;
    /* what a listing of runs, and an approver, see first */
    int dn = asprintf(&desc, "skill %s %s, entrypoint %s%s", name, version ? version : "", entrypoint,
                      mode == AL_SKILL_TEST ? " (test bench)" : "");
    al_run_skill k = { .name = (char *)name, .version = (char *)version, .digest = (char *)dg,
                       .entrypoint = (char *)entrypoint,
                       .script = (char *)json_string_value(json_object_get(ep, "script")),
                       .mode = mode == AL_SKILL_TEST ? "test" : "run", .args_json = args_text };
    al_run_spec sp = { 0 };
    const char *image = img ? img : "default";
    bool built = dn >= 0 && code && args_text && al_run_text_set(&sp.language, lang, strlen(lang)) == 0 &&
                 al_run_text_set(&sp.code, code, strlen(code)) == 0 &&
                 al_run_text_set(&sp.image, image, strlen(image)) == 0 &&
                 al_run_text_set(&sp.description, desc, strlen(desc)) == 0 &&
                 (!thread_id || al_run_text_set(&sp.thread_id, thread_id, strlen(thread_id)) == 0) &&
                 (!opt->network || al_run_text_set(&sp.network, opt->network, strlen(opt->network)) == 0) &&
                 al_run_spec_set_skill(&sp, &k) == 0;
    if (opt->limits)
        memcpy(sp.limit, opt->limits, sizeof sp.limit);
    if (json_object_get(ep, "timeout_s") && !sp.limit[AL_LIMIT_TIMEOUT_S].has) {
        /* the entrypoint's own timeout, within the workspace's maximum */
        json_int_t t = json_integer_value(json_object_get(ep, "timeout_s"));
        json_int_t mx = (json_int_t)settings.max_timeout_s;
        if (mx > s->cfg.max_timeout_s)
            mx = s->cfg.max_timeout_s;
        sp.limit[AL_LIMIT_TIMEOUT_S] = (al_run_limit_req){ true, (double)(t < mx ? t : mx) };
    }
    al_settings_done(&settings);
    json_decref(empty);
    if (!built) {
        al_run_spec_free(&sp);
        return fail(ret, AL_STATUS_INTERNAL, "internal", "out of memory");
    }
    al_run_extra x = { .tool = "run_skill_script", .wait = opt->wait, .via = opt->via, .idem = opt->idem };
    st = al_run_create(s, p, &sp, &x, ret);
    al_run_spec_free(&sp);
    if (st == AL_STATUS_INVALID && strstr(json_string_value(json_object_get(json_object_get(*ret, "error"), "message")) ?: "", "image")) {
        /* say which skill needs what */
        json_decref(*ret);
        *ret = error_doc("bad_request", "skill %s runs on the runtime image \"%s\", which this service does not have "
                                        "(an operator builds it: airlock image build)",
                         name, image);
    }
    return st;
}
