/*
 * Governance: per-workspace settings, credits (charge at provisioning,
 * refund on airlock's own failure), approvals (a card bound by hash to what
 * runs), and the audit events around them.
 */
#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "audit.h"
#include "../util/hash.h"
#include "dlp.h"
#include "sandbox.h"
#include "service.h"
#include "service_int.h"
#include "../store/artifacts.h"
#include "../store/governance.h"
#include "../store/tenants.h"

/* ------------------------------------------------------------- settings */

/* The bounds of a workspace's settings that the service itself sets. */
static al_settings_bounds service_bounds(al_service *s) {
    return (al_settings_bounds){ .driver = s->driver->name, .max_timeout_s = s->cfg.max_timeout_s,
                                 .per_person = s->cfg.per_person, .package_installs = s->cfg.package_installs,
                                 .package_scripts = s->cfg.package_install_scripts };
}

json_t *al_settings_load(al_service *s, const char *ws_id, al_error *err) {
    /* Fail closed: settings that cannot be read are not the defaults. A
     * corrupt row read as "nothing set" would turn approval off and drop
     * the DLP patterns, so every caller refuses instead. The price is the
     * operator's (workspaces.price_per_run), read beside what the
     * workspace's admins set. */
    al_store_settings row;
    int r0 = al_store_settings_get(s->store, ws_id, &row, err);
    if (r0 < 0 && r0 != -ENOENT)
        return NULL;
    if (r0 == -ENOENT) /* no workspace: the defaults, as for one that set nothing */
        *err = (al_error){ 0 };
    al_settings_bounds b = service_bounds(s);
    json_t *eff = al_settings_defaults(&b), *names = json_array();
    if (!eff || !names) {
        al_store_settings_done(&row);
        json_decref(eff);
        json_decref(names);
        al_err(err, "settings", ENOMEM, "out of memory");
        return NULL;
    }
    if (row.has_price)
        json_object_set_new(eff, "price_per_run", json_integer(row.price_per_run));
    if (row.has_row) {
        json_error_t jerr;
        json_t *st = json_loads(row.settings ?: "", 0, &jerr);
        json_t *sec = json_loads(row.secrets ?: "", 0, &jerr);
        if (!json_is_object(st) || !json_is_object(sec)) {
            json_decref(st);
            json_decref(sec);
            al_store_settings_done(&row);
            json_decref(eff);
            json_decref(names);
            al_err(err, "settings", EBADMSG, "the workspace's stored settings are corrupt (not a JSON object)");
            return NULL;
        }
        json_object_del(st, "price_per_run"); /* never the workspace's own say */
        json_object_update(eff, st);
        json_decref(st);
        const char *k;
        json_t *v;
        /* write-only: names, never values */
        json_object_foreach(sec, k, v) json_array_append_new(names, json_string(k));
        json_decref(sec);
    }
    al_store_settings_done(&row);
    if (!al_settings_sane(eff)) {
        json_decref(eff);
        json_decref(names);
        al_err(err, "settings", EBADMSG, "the workspace's stored settings are corrupt (a setting of the wrong type or "
               "value)");
        return NULL;
    }
    json_object_set_new(eff, "secrets", names);
    /* the service's own driver bounds the workspace's choice */
    if (strcmp(s->driver->name, "disabled") == 0)
        json_object_set_new(eff, "driver", json_string("disabled"));
    return eff;
}

int al_settings_get(al_service *s, const char *ws_id, al_settings *ret, al_error *err) {
    *ret = (al_settings){ 0 };
    json_t *eff = al_settings_load(s, ws_id, err);
    if (!eff)
        return err->err ? -err->err : -EIO;
    int r = al_settings_parse(eff, ret, err);
    json_decref(eff);
    return r;
}

int al_settings_put(al_service *s, const char *ws_id, json_t *body, json_t **ret, al_error *err) {
    int r0 = al_settings_body_check(body, err);
    if (r0 < 0)
        return r0;
    al_store_workspace w;
    if ((r0 = al_store_workspace_get(s->store, ws_id, &w, err)) < 0)
        return r0 == -ENOENT ? al_err(err, "settings", ENOENT, "no workspace") : r0;
    al_store_settings row;
    if ((r0 = al_store_settings_get(s->store, ws_id, &row, err)) < 0)
        return r0 == -ENOENT ? al_err(err, "settings", ENOENT, "no workspace") : r0;
    json_t *cur = NULL, *sec = NULL;
    if (row.has_row) {
        cur = json_loads(row.settings ?: "", 0, NULL);
        sec = json_loads(row.secrets ?: "", 0, NULL);
        if (!json_is_object(cur) || !json_is_object(sec)) {
            /* a change over a corrupt row would silently drop what it held
             * (approval, DLP patterns, secrets): an operator repairs it */
            json_decref(cur);
            json_decref(sec);
            al_store_settings_done(&row);
            return al_err(err, "settings", EBADMSG, "the workspace's stored settings are corrupt (not a JSON object): "
                          "they are not changed over; an operator must repair the row");
        }
    } else {
        cur = json_object();
        sec = json_object();
    }
    al_store_settings_done(&row);
    al_settings_bounds b = service_bounds(s);
    b.max_memory_mb = (double)w.max_memory_mb;
    b.max_cpus = (double)w.max_cpus_milli / 1000.0;
    b.has_price = w.has_price;
    b.price = w.price_per_run;
    int r = al_settings_apply(&b, cur, sec, body, err);
    if (r == 0) {
        char now[40];
        al_store_now(now, sizeof now);
        char *st = json_dumps(cur, JSON_COMPACT), *se = json_dumps(sec, JSON_COMPACT);
        r = st && se ? al_store_settings_put(s->store, ws_id, st, se, now, err)
                     : al_err(err, "settings", ENOMEM, "out of memory");
        free(st);
        free(se);
    }
    json_decref(cur);
    json_decref(sec);
    if (r < 0)
        return r;
    *ret = al_settings_load(s, ws_id, err);
    return *ret ? 0 : -EIO;
}

/* -------------------------------------------------------------- credits */

int64_t al_credits_balance(al_service *s, const char *org_id) {
    al_error err = { 0 };
    int64_t b = 0;
    return al_store_credit_balance(s->store, org_id, &b, &err) < 0 ? 0 : b;
}

/* ------------------------------------------------------------ approvals */

#define INPUT_FILES_MAX 1024

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The names in the run's stored input directory (runs/ID/in), sorted: the
 * order of the manifest and of the input URLs. 0 and an empty list when
 * the run has no files. */
static int input_names(al_service *s, const char *run_id, int *ret_dirfd, char ***ret_names, size_t *ret_n,
                       al_error *err) {
    char path[PATH_MAX + 80];
    snprintf(path, sizeof path, "%s/%s/in", s->runs_dir, run_id);
    *ret_dirfd = -1;
    *ret_names = NULL;
    *ret_n = 0;
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : al_err(err, "inputs", errno, "open the run's inputs: %m");
    int lfd = dup(dfd);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int e = errno;
        if (lfd >= 0)
            close(lfd);
        close(dfd);
        return al_err(err, "inputs", e, "list the run's inputs: %m");
    }
    char **names = NULL;
    size_t n = 0;
    int r = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char **nn = n < INPUT_FILES_MAX ? realloc(names, (n + 1) * sizeof *names) : NULL;
        char *dup_name = nn ? strdup(de->d_name) : NULL;
        if (nn)
            names = nn;
        if (!dup_name) {
            r = al_err(err, "inputs", n < INPUT_FILES_MAX ? ENOMEM : E2BIG, "too many inputs to list");
            break;
        }
        names[n++] = dup_name;
    }
    closedir(d);
    if (r < 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        close(dfd);
        return r;
    }
    if (n)
        qsort(names, n, sizeof *names, cmp_names);
    *ret_dirfd = dfd;
    *ret_names = names;
    *ret_n = n;
    return 0;
}

/* A regular file NAME beneath DFD (no link followed), opened for reading. */
static int open_input(int dfd, const char *name, al_error *err) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return al_err(err, "inputs", errno, "open input %s: %m", name);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return al_err(err, "inputs", EINVAL, "input %s is not a regular file", name);
    }
    return fd;
}

json_t *al_approval_documents(al_service *s, const al_store_run *run, al_error *err) {
    json_t *inputs = al_json_text(run->inputs);
    /* a sandbox's run stages its working directory, not its thread's
     * documents (run_job.c): none are pinned or shown */
    if (json_is_string(json_object_get(inputs, "sandbox"))) {
        json_decref(inputs);
        return json_array();
    }
    bool cut = false;
    /* one row a path, in staging order: what staging will leave there */
    json_t *rows = al_artifacts_select(s, run->workspace_id, run->thread_id[0] ? run->thread_id : NULL,
                                       json_object_get(inputs, "artifacts"), &cut, err);
    json_decref(inputs);
    return rows;
}

json_t *al_approval_manifest(al_service *s, const al_store_run *run, al_error *err) {
    const char *id = run->id, *ws = run->workspace_id;
    if (!id[0] || !ws[0]) {
        al_err(err, "inputs", EINVAL, "not a run");
        return NULL;
    }
    json_t *inputs = al_json_text(run->inputs);
    json_t *m = json_object(), *files = json_array();
    json_object_set_new(m, "files", files);
    int dfd = -1;
    char **names = NULL;
    size_t n = 0;
    int r = input_names(s, id, &dfd, &names, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        int fd = open_input(dfd, names[i], err);
        uint64_t size = 0;
        char hex[65];
        r = fd < 0 ? fd : al_sha256_fd(fd, hex, &size);
        if (fd >= 0)
            close(fd);
        if (r == 0)
            json_array_append_new(files, json_pack("{s:s, s:I, s:s}", "name", names[i], "size", (json_int_t)size,
                                                   "sha256", hex));
        else if (!err->msg[0])
            al_err(err, "inputs", -r, "read input %s: %s", names[i], strerror(-r));
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (dfd >= 0)
        close(dfd);
    /* stdin, as stored */
    json_object_set_new(m, "stdin", json_null());
    if (r == 0) {
        char sp[PATH_MAX + 80];
        snprintf(sp, sizeof sp, "%s/%s/stdin", s->runs_dir, id);
        int fd = open(sp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd < 0 && errno != ENOENT)
            r = al_err(err, "inputs", errno, "open the run's stdin: %m");
        if (fd >= 0) {
            uint64_t size = 0;
            char hex[65];
            if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                r = al_err(err, "inputs", EINVAL, "the run's stdin is not a regular file");
            else if ((r = al_sha256_fd(fd, hex, &size)) < 0)
                al_err(err, "inputs", -r, "read the run's stdin: %s", strerror(-r));
            else
                json_object_set_new(m, "stdin", json_pack("{s:I, s:s}", "size", (json_int_t)size, "sha256", hex));
            close(fd);
        }
    }
    json_t *args = json_object_get(inputs, "args"), *arts = json_object_get(inputs, "artifacts");
    json_t *skill = json_object_get(inputs, "skill");
    json_object_set_new(m, "args", json_is_array(args) ? json_incref(args) : json_null());
    json_object_set_new(m, "artifacts", json_is_array(arts) ? json_incref(arts) : json_array());
    json_object_set_new(m, "skill", json_is_object(skill) ? json_incref(skill) : json_null());
    /* the documents: the versions pinned at request time, each as the store
     * has it now (one that is gone is missing here, so the hash differs);
     * without a pin, what staging would take now */
    json_t *pinned = json_object_get(inputs, "documents");
    json_t *docs = NULL;
    if (r == 0 && json_is_array(pinned)) {
        docs = json_array();
        size_t i;
        json_t *pd;
        json_array_foreach(pinned, i, pd) {
            const char *aid = json_string_value(json_object_get(pd, "id"));
            al_store_artifact a;
            int g = aid ? al_store_artifact_get(s->store, ws, aid, &a, err) : -ENOENT;
            if (g < 0 && g != -ENOENT) {
                r = -EIO;
                break;
            }
            if (g == 0) {
                json_array_append_new(docs, al_artifact_doc(&a));
                al_store_artifact_done(&a);
            }
        }
    } else if (r == 0) {
        docs = al_approval_documents(s, run, err);
        if (!docs)
            r = -EIO;
    }
    if (r < 0) {
        json_decref(inputs);
        json_decref(docs);
        json_decref(m);
        return NULL;
    }
    json_object_set_new(m, "documents", docs);
    /* the connected folders' files, as read when the run was requested
     * (core/folders.c): their bytes are read again and checked as they are
     * copied at the start (al_folder_stage), so the manifest names them as
     * pinned; only a run that has some says so */
    json_t *imports = json_object_get(inputs, "imports");
    if (json_is_array(imports) && json_array_size(imports))
        json_object_set(m, "imports", imports);
    json_decref(inputs);
    /* a sandbox's command pinned for an approval: its home as pinned (one
     * that is gone is missing here, so the hash differs) */
    char pin_dir[PATH_MAX + 128];
    struct stat pst;
    snprintf(pin_dir, sizeof pin_dir, "%s/%s/" AL_SANDBOX_PINNED_HOME, s->runs_dir, id);
    if (lstat(pin_dir, &pst) == 0) {
        json_t *home = al_sandbox_pinned_files(pin_dir, err);
        if (!home) {
            json_decref(m);
            return NULL;
        }
        json_object_set_new(m, "sandbox_files", home);
    }
    return m;
}

int al_approval_staged(json_t *manifest, al_run_staged *ret) {
    al_run_staged st = { 0 };
    *ret = st;
    json_t *files = json_object_get(manifest, "files"), *in = json_object_get(manifest, "stdin");
    json_t *docs = json_object_get(manifest, "documents");
    if (!json_is_array(files) || !json_is_array(docs) || (in && !json_is_null(in) && !json_is_object(in)))
        return -EBADMSG;
    int r = 0;
    size_t i;
    json_t *e;
    /* each identity whole, or the manifest is none: a field missing would
     * hash as another input */
#define TEXT(o, k) json_string_value(json_object_get(o, k))
#define NUM(o, k) json_integer_value(json_object_get(o, k))
#define HAS_NUM(o, k) json_is_integer(json_object_get(o, k))
    json_array_foreach(files, i, e) {
        if (r == 0 && (!TEXT(e, "name") || !HAS_NUM(e, "size") || !TEXT(e, "sha256")))
            r = -EBADMSG;
        if (r == 0)
            r = al_run_staged_add_file(&st, TEXT(e, "name"), (uint64_t)NUM(e, "size"), TEXT(e, "sha256"));
    }
    if (r == 0 && json_is_object(in)) {
        if (!HAS_NUM(in, "size") || !TEXT(in, "sha256"))
            r = -EBADMSG;
        else {
            st.has_stdin = true;
            st.stdin_id.size = (uint64_t)NUM(in, "size");
            snprintf(st.stdin_id.sha256, sizeof st.stdin_id.sha256, "%s", TEXT(in, "sha256"));
        }
    }
    json_array_foreach(docs, i, e) {
        if (r == 0 && (!TEXT(e, "id") || !TEXT(e, "path") || !HAS_NUM(e, "version") || !HAS_NUM(e, "size") ||
                       !TEXT(e, "sha256")))
            r = -EBADMSG;
        if (r == 0)
            r = al_run_staged_add_doc(&st, TEXT(e, "id"), TEXT(e, "path"), (int64_t)NUM(e, "version"),
                                      (uint64_t)NUM(e, "size"), TEXT(e, "sha256"));
    }
    /* the folders' imports, pinned */
    json_t *imports = json_object_get(manifest, "imports");
    if (imports && !json_is_array(imports))
        r = -EBADMSG;
    json_array_foreach(imports, i, e) {
        if (r == 0 && (!TEXT(e, "folder") || !TEXT(e, "path") || !HAS_NUM(e, "size") || !TEXT(e, "sha256")))
            r = -EBADMSG;
        if (r == 0)
            r = al_run_staged_add_import(&st, TEXT(e, "folder"), TEXT(e, "path"), (uint64_t)NUM(e, "size"),
                                         TEXT(e, "sha256"));
    }
    /* a sandbox's pinned home: as documents (a sandbox's run has none of
     * its thread's), each named by the id "sandbox-home" and version 0 */
    json_t *home = json_object_get(manifest, "sandbox_files");
    if (home && !json_is_array(home))
        r = -EBADMSG;
    json_array_foreach(home, i, e) {
        if (r == 0 && (!TEXT(e, "path") || !HAS_NUM(e, "size") || !TEXT(e, "sha256")))
            r = -EBADMSG;
        if (r == 0)
            r = al_run_staged_add_doc(&st, AL_SANDBOX_PINNED_HOME, TEXT(e, "path"), 0, (uint64_t)NUM(e, "size"),
                                      TEXT(e, "sha256"));
    }
#undef TEXT
#undef NUM
#undef HAS_NUM
    if (r < 0) {
        al_run_staged_free(&st);
        return r;
    }
    *ret = st;
    return 0;
}

void al_approval_hash(const al_store_run *run, json_t *manifest, char out[65]) {
    /* the spec as its record holds it, and its inputs as they are now */
    al_run_spec sp = { 0 };
    al_run_staged st = { 0 };
    out[0] = '\0';
    if (al_run_spec_of_record(run, &sp) == 0 && al_approval_staged(manifest, &st) == 0)
        al_run_spec_hash(&sp, &st, out);
    al_run_staged_free(&st);
    al_run_spec_free(&sp);
}

int al_approval_verify_documents(al_service *s, json_t *manifest, al_error *err) {
    /* a document is staged by linking its blob: what the box reads is the
     * blob's bytes, so those are what must match the approved sha256 */
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(manifest, "documents"), i, d) {
        const char *want = json_string_value(json_object_get(d, "sha256"));
        const char *path = json_string_value(json_object_get(d, "path"));
        char blob[PATH_MAX], got[65] = "";
        uint64_t size = 0;
        if (!want || strlen(want) != 64)
            return al_err(err, "approval", EINVAL, "document %s has no content hash", path ? path : "?");
        al_blob_path(s, want, blob, sizeof blob);
        int fd = open(blob, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        int r = fd < 0 ? -errno : fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL : al_sha256_fd(fd, got, &size);
        if (fd >= 0)
            close(fd);
        if (r < 0)
            return al_err(err, "approval", -r, "document %s: cannot read its stored bytes: %s", path ? path : "?",
                          strerror(-r));
        if (strcmp(got, want) != 0)
            return al_err(err, "approval", EBADMSG, "document %s: its stored bytes are not the approved version", path ? path : "?");
    }
    return 0;
}

json_t *al_approval_card_inputs(const char *run_id, json_t *manifest) {
    json_t *c = json_deep_copy(manifest);
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(c, "files"), i, f)
        json_object_set_new(f, "url", json_sprintf("/v1/runs/%s/inputs/%zu", run_id, i));
    if (json_is_object(json_object_get(c, "stdin")))
        json_object_set_new(json_object_get(c, "stdin"), "url", json_sprintf("/v1/runs/%s/inputs/stdin", run_id));
    json_array_foreach(json_object_get(c, "documents"), i, f)
        json_object_set_new(f, "url", json_sprintf("/v1/artifacts/%s/content", json_string_value(json_object_get(f, "id"))));
    /* a sandbox's files kept for the approval: each readable, so that the
     * approver reads the script a command runs, not only its name */
    json_array_foreach(json_object_get(c, "sandbox_files"), i, f)
        json_object_set_new(f, "url", json_sprintf("/v1/runs/%s/inputs/home-%zu", run_id, i));
    return c;
}

int al_run_input_open(al_service *s, const char *run_id, const char *which, int *ret_fd, uint64_t *ret_size,
                      char **ret_name, al_error *err) {
    *ret_fd = -1;
    *ret_name = NULL;
    int fd = -1;
    char *name = NULL;
    if (strcmp(which, "stdin") == 0) {
        char sp[PATH_MAX + 80];
        snprintf(sp, sizeof sp, "%s/%s", s->runs_dir, run_id);
        int dfd = open(sp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
            return errno == ENOENT ? al_err(err, "inputs", ENOENT, "the run's inputs are gone") : al_err(err, "inputs", errno, "%m");
        fd = openat(dfd, "stdin", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        int e = errno;
        close(dfd);
        if (fd < 0)
            return al_err(err, "inputs", e == ENOENT ? ENOENT : e, "the run has no stdin (or it is gone)");
        name = strdup("stdin");
    } else if (strncmp(which, "home-", 5) == 0) {
        /* a file of the sandbox's home kept for the approval */
        uint64_t idx;
        char dir[PATH_MAX + 128];
        snprintf(dir, sizeof dir, "%s/%s/" AL_SANDBOX_PINNED_HOME, s->runs_dir, run_id);
        if (al_parse_u64(which + 5, &idx) < 0)
            return al_err(err, "inputs", ENOENT, "no input %s (home-N: a file of the sandbox's)", which);
        int r = al_sandbox_pinned_open(dir, (size_t)idx, &fd, &name, err);
        if (r < 0)
            return r;
    } else {
        uint64_t idx;
        if (al_parse_u64(which, &idx) < 0)
            return al_err(err, "inputs", ENOENT, "no input %s (stdin, or a file's index)", which);
        int dfd = -1;
        char **names = NULL;
        size_t n = 0;
        int r = input_names(s, run_id, &dfd, &names, &n, err);
        if (r < 0)
            return r;
        if (idx < n) {
            fd = open_input(dfd, names[idx], err);
            name = fd >= 0 ? strdup(names[idx]) : NULL;
        }
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        if (dfd >= 0)
            close(dfd);
        if (fd < 0)
            return err->msg[0] ? -EIO : al_err(err, "inputs", ENOENT, "no input file %s (or the run's inputs are gone)", which);
    }
    struct stat st;
    if (!name || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        free(name);
        return al_err(err, "inputs", EIO, "cannot read the input");
    }
    *ret_fd = fd;
    *ret_size = (uint64_t)st.st_size;
    *ret_name = name;
    return 0;
}



int al_governance_audit(al_service *s, const al_store_run *run, const char *kind, const char *person_id, json_t *data) {
    al_error err = { 0 };
    int r = run ? al_audit_append(s->store, run->org_id, run->workspace_id, kind, person_id ? person_id : run->person_id,
                                  run->id, data, &err)
                : (json_decref(data), al_err(&err, "audit", EINVAL, "no run to audit"));
    if (r < 0) /* never silent: the log says which event of which run was lost, and why */
        al_service_log(s, AL_LOG_ERROR, "audit.failed", json_pack("{s:s, s:s?, s:s}", "kind", kind,
                                                    "run_id", run ? run->id : NULL,
                                                    "error", err.msg));
    return r;
}

int al_workspace_audit(al_service *s, const al_principal *p, const char *kind, json_t *data, al_error *err) {
    int r = al_audit_append(s->store, p->org_id, p->workspace_id, kind, p->person_id, NULL, data, err);
    if (r < 0) /* never silent, whatever the caller does next */
        al_service_log(s, AL_LOG_ERROR, "audit.failed", json_pack("{s:s, s:s, s:s, s:s}", "kind", kind, "workspace_id",
                                                    p->workspace_id, "person_id", p->person_id, "error", err->msg));
    return r;
}
