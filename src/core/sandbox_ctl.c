/*
 * The E2B control plane's operations (sandbox.h): create, get, list, the
 * end time, connect, pause and resume, kill, and the reaper. Each change a
 * person makes is audited (via: e2b) in the same unit of work as the row.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../image/image.h"
#include "../store/runs.h"
#include "../util/hash.h"
#include "artifacts.h"
#include "folders.h"
#include "governance.h"
#include "queue.h"
#include "runs.h"
#include "sandbox_int.h"
#include "sandbox_run.h"
#include "session_box.h"
#include "service.h"
#include "service_int.h"
#include "text.h"

/* ------------------------------------------------------------ what create asks */

/* OBJ (NULL: none), FIELD of the request: an object of at most
 * AL_SANDBOX_META_MAX strings, bounded in size; environment names when ENV. */
static int strings_check(json_t *obj, const char *field, bool env, al_error *err) {
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj))
        return al_err(err, field, EINVAL, "%s: want an object of strings", field);
    if (json_object_size(obj) > AL_SANDBOX_META_MAX)
        return al_err(err, field, EINVAL, "%s: at most %d entries", field, AL_SANDBOX_META_MAX);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        /* E2B's metadata are strings: the folders' array goes as its JSON
         * text, which an agent sending the array itself must be told */
        if (!json_is_string(v) && !env && strcmp(k, AL_SANDBOX_META_FOLDERS) == 0)
            return al_err(err, field, EINVAL,
                          "%s.%s: want a string, the folders' array as JSON text (E2B's metadata values are strings): "
                          "JSON.stringify([{folder: 'docs', paths: ['a.csv']}]) in JavaScript, json.dumps(...) in "
                          "Python",
                          field, k);
        if (!json_is_string(v))
            return al_err(err, field, EINVAL, "%s.%s: want a string", field, k);
        if (strlen(k) > AL_SANDBOX_META_KEY_MAX || !k[0])
            return al_err(err, field, EINVAL, "%s: a key is empty or longer than %d bytes", field,
                          AL_SANDBOX_META_KEY_MAX);
        /* airlock_folders holds a list of paths (folders.h), airlock_packages
         * up to 64 specs: room for them */
        size_t vmax = env                                          ? AL_SANDBOX_META_VALUE_MAX
                      : strcmp(k, AL_SANDBOX_META_FOLDERS) == 0  ? AL_SANDBOX_META_FOLDERS_MAX
                      : strcmp(k, AL_SANDBOX_META_PACKAGES) == 0 ? AL_SANDBOX_META_PACKAGES_MAX
                                                                 : AL_SANDBOX_META_VALUE_MAX;
        if (json_string_length(v) > vmax || strlen(json_string_value(v)) != json_string_length(v))
            return al_err(err, field, EINVAL, "%s.%s: longer than %zu bytes, or holds a NUL", field, k, vmax);
        const char *bad = env ? al_sandbox_env_problem(k) : NULL;
        if (bad)
            return al_err(err, field, EINVAL, "%s: %s %s", field, k, bad);
    }
    return 0;
}

/* TEMPLATE's image into IMAGE: E2B's base and code-interpreter templates
 * are the workspace's default image; any other is one of this service's
 * image aliases, else -ENOENT. */
static int template_image(al_service *s, const char *t, char *image, size_t n, al_error *err) {
    if (strcmp(t, "base") == 0 || strcmp(t, "code-interpreter-v1") == 0 || strcmp(t, "code-interpreter") == 0) {
        image[0] = '\0';
        return 0;
    }
    bool word = strlen(t) < 64 && t[0];
    for (const char *c = t; *c && word; c++)
        word = isalnum((unsigned char)*c) || strchr("._-", *c);
    char images[PATH_MAX + 16], idir[PATH_MAX + 64], digest[65];
    al_error ierr = { 0 };
    al_service_images_dir(&s->cfg, images, sizeof images);
    if (!word || (s->driver->image_by_reference ? al_image_resolve_ref : al_image_resolve)(images, t, idir, sizeof idir,
                                                                                          digest, &ierr) < 0)
        return al_err(err, "template", ENOENT,
                      "template not found: %.64s (airlock serves \"base\", \"code-interpreter-v1\" and this service's "
                      "image aliases)", t);
    snprintf(image, n, "%s", t);
    return 0;
}

/* E2B's "all traffic" in denyOut (its ALL_TRAFFIC constant) */
#define ALL_TRAFFIC "0.0.0.0/0"

/* SP's network as an airlock policy in OUT, within what the workspace's
 * settings ST allow: -EINVAL what airlock cannot express, -EPERM wider. */
static int network_of(const al_settings *st, const al_sandbox_spec *sp, char *out, size_t n, al_error *err) {
    bool deny_all = false;
    if (sp->deny_out && !json_is_array(sp->deny_out))
        return al_err(err, "network", EINVAL, "network.denyOut: want an array of strings");
    for (size_t i = 0; i < json_array_size(sp->deny_out); i++) {
        const char *d = json_string_value(json_array_get(sp->deny_out, i));
        if (!d || strcmp(d, ALL_TRAFFIC) != 0)
            return al_err(err, "network", EINVAL,
                          "network.denyOut: airlock cannot deny single destinations (%.64s): its policies allow a list "
                          "of hosts, all the internet or nothing; deny \"" ALL_TRAFFIC "\" and name what is allowed "
                          "in allowOut",
                          d ? d : "a non-string");
        deny_all = true;
    }
    if (sp->allow_out && !json_is_array(sp->allow_out))
        return al_err(err, "network", EINVAL, "network.allowOut: want an array of host names");
    size_t o = 0;
    if (json_array_size(sp->allow_out)) {
        o = (size_t)snprintf(out, n, "hosts:");
        for (size_t i = 0; i < json_array_size(sp->allow_out); i++) {
            const char *h = json_string_value(json_array_get(sp->allow_out, i));
            if (!h || !h[0] || strpbrk(h, ",/ ") || o + strlen(h) + 2 > n)
                return al_err(err, "network", EINVAL,
                              "network.allowOut: want host names (airlock allows hosts by name, not addresses or "
                              "ranges), at most %zu bytes in all", n - 8);
            o += (size_t)snprintf(out + o, n - o, "%s%s", i ? "," : "", h);
        }
    } else if (sp->allow_internet == 0 || deny_all)
        snprintf(out, n, "offline");
    else if (sp->allow_internet == 1)
        snprintf(out, n, "internet");
    else /* E2B's default is the internet; airlock's is the workspace's */
        snprintf(out, n, "%s", st->network ? st->network : "offline");
    al_net_policy *np = calloc(1, sizeof *np);
    int r;
    if (!np)
        r = -ENOMEM;
    else if ((r = al_net_policy_parse(out, np, err)) < 0)
        r = al_err(err, "network", EINVAL, "network: %s", err->msg);
    else if ((r = al_settings_network_check(st->doc, np, err)) < 0)
        r = -EPERM;
    free(np);
    return r;
}

/* TIMEOUT_S (< 0: the default) within the workspace's maximum, into *RET. */
static int timeout_of(al_service *s, const char *ws, int64_t timeout_s, int64_t *ret, al_error *err) {
    al_settings st;
    int r = al_settings_get(s, ws, &st, err);
    if (r < 0)
        return r;
    int64_t max = st.sandbox_max_timeout_s;
    al_settings_done(&st);
    if (timeout_s > max)
        return al_err(err, "timeout", EINVAL, "timeout: at most %lld seconds (the workspace's sandbox_max_timeout_s)",
                      (long long)max);
    *ret = timeout_s >= 0 ? timeout_s : AL_SANDBOX_TIMEOUT_DEFAULT_S < max ? AL_SANDBOX_TIMEOUT_DEFAULT_S : max;
    return 0;
}

/* ------------------------------------------------------------ create */

static json_t *audit_data(const char *id, json_t *more) {
    json_t *d = json_pack("{s:s, s:s}", "sandbox_id", id, "via", "e2b");
    if (more) {
        json_object_update(d, more);
        json_decref(more);
    }
    return d;
}

/* Add row B and its audit event KIND (DATA stolen) as one unit of work. */
static int store_with_audit(al_service *s, const al_principal *p, const al_store_sandbox *b, const char *kind,
                            json_t *data, al_error *err) {
    int r = al_store_begin(s->store, err);
    if (r < 0) {
        json_decref(data);
        return r;
    }
    if ((r = al_store_sandbox_put(s->store, b, AL_SANDBOX_LIVE_MAX, AL_SANDBOX_LIVE_PER_PERSON, err)) < 0)
        json_decref(data);
    else
        r = al_workspace_audit(s, p, kind, data, err);
    if (r < 0) {
        al_store_rollback(s->store);
        return r;
    }
    return al_store_commit(s->store, err);
}

/* SP checked against P's workspace into B; its lifetime in *RET_TIMEOUT. */
static int spec_check(al_service *s, const al_principal *p, const al_sandbox_spec *sp, al_store_sandbox *b,
                      int64_t *ret_timeout, al_error *err) {
    const char *t = sp->template_id ? sp->template_id : "base";
    int r;
    if ((r = template_image(s, t, b->image, sizeof b->image, err)) < 0)
        return r;
    snprintf(b->template_id, sizeof b->template_id, "%s", t);
    if (sp->timeout_s == 0)
        return al_err(err, "timeout", EINVAL, "timeout: at least 1 second");
    if ((r = strings_check(sp->metadata, "metadata", false, err)) < 0 ||
        (r = strings_check(sp->env_vars, "envVars", true, err)) < 0)
        return r;
    al_settings st;
    if ((r = al_settings_get(s, p->workspace_id, &st, err)) < 0)
        return r;
    int64_t max = st.sandbox_max_timeout_s;
    r = network_of(&st, sp, b->network, sizeof b->network, err);
    al_settings_done(&st);
    if (r == 0 && sp->timeout_s > max)
        r = al_err(err, "timeout", EINVAL, "timeout: at most %lld seconds (the workspace's sandbox_max_timeout_s)",
                   (long long)max);
    *ret_timeout = sp->timeout_s > 0 ? sp->timeout_s : AL_SANDBOX_TIMEOUT_DEFAULT_S < max ? AL_SANDBOX_TIMEOUT_DEFAULT_S : max;
    return r;
}

/* Metadata airlock_folders (MD's, when it has it): the connected folders'
 * files read beneath their roots and copied into sandbox ID's home as
 * documents/FOLDER/PATH (its /work/documents), as a run's imports are;
 * what was copied in *RET_IMPORTS (for the audit). 0 or -errno (-EINVAL a
 * refusal, -EEXIST a folder replaced since it was registered). */
static int stage_folders(al_service *s, const al_principal *p, json_t *md, const char *id, json_t **ret_imports,
                         al_error *err) {
    *ret_imports = NULL;
    const char *text = json_string_value(json_object_get(md, AL_SANDBOX_META_FOLDERS));
    if (!text)
        return 0;
    al_run_spec fs = { 0 };
    char home[PATH_MAX + 128], docs[PATH_MAX + 160];
    int r = al_folder_request_parse(text, &fs, err);
    if (r == 0 && (r = al_folder_resolve(s->store, p->workspace_id, &fs, err)) < 0)
        r = r == -ESTALE ? -EEXIST : r == -EIO || r == -ENOMEM ? r : -EINVAL;
    /* the copies are the sandbox's files: within the organisation's
     * storage, as a file written to it is */
    int64_t add = 0;
    for (size_t i = 0; r == 0 && i < fs.n_imports; i++)
        add += (int64_t)fs.imports[i].size;
    if (r == 0 && add > 0) {
        int64_t quota = al_artifacts_org_quota(s, p->org_id), used = al_artifacts_org_usage(s, p->org_id),
                pending = al_runs_pending_input_bytes(s, p->org_id);
        if (used == AL_USAGE_UNKNOWN || pending == AL_USAGE_UNKNOWN)
            r = al_err(err, "sandbox", EIO, "the organisation's storage use cannot be read: try again");
        else if (used + pending + add > quota)
            r = al_err(err, "sandbox", EDQUOT,
                       "the organisation's storage (%lld bytes) is full: it holds %lld, inputs of runs that wait "
                       "%lld, and the folders' files are %lld",
                       (long long)quota, (long long)used, (long long)pending, (long long)add);
    }
    if (r == 0 && al_sandbox_run_dir(s, id, "home", home, sizeof home) < 0)
        r = al_err(err, "sandbox", ENAMETOOLONG, "the state directory's path is too long");
    snprintf(docs, sizeof docs, "%s/documents", home);
    if (r == 0 && (r = al_folder_stage(s->store, p->workspace_id, &fs, docs, false, err)) > 0)
        r = 0;
    if (r == 0)
        *ret_imports = al_run_spec_imports_json(&fs);
    al_run_spec_free(&fs);
    return r;
}

int al_sandbox_create(al_service *s, const al_principal *p, const char *key, const al_sandbox_spec *sp,
                      al_sandbox *out, char token[72], al_error *err) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    al_store_sandbox b = { 0 };
    int64_t timeout_s = 0;
    int r = spec_check(s, p, sp, &b, &timeout_s, err);
    if (r < 0)
        return r;
    if ((r = al_store_key_id_of(s->store, key, b.key_id, err)) <= 0)
        return r < 0 ? r : al_err(err, "sandbox", EACCES, "the API key is not valid");
    b.owner = *p;
    if (al_store_new_id("sbx", b.id, sizeof b.id) < 0)
        return al_err(err, "sandbox", EIO, "no randomness for an id");
    if ((r = al_sandbox_token(s, b.id, token, err)) < 0)
        return r;
    al_sha256_hex(token, strlen(token), b.token_hash);
    al_store_now(b.started_at, sizeof b.started_at);
    al_cluster_time_after(timeout_s * 1000, b.end_at, sizeof b.end_at);
    snprintf(b.state, sizeof b.state, "running");
    b.metadata = json_is_object(sp->metadata) ? json_dumps(sp->metadata, JSON_COMPACT) : strdup("{}");
    b.env_vars = json_is_object(sp->env_vars) ? json_dumps(sp->env_vars, JSON_COMPACT) : strdup("{}");
    if (!b.metadata || !b.env_vars)
        r = al_err(err, "sandbox", ENOMEM, "out of memory");
    json_t *imports = NULL;
    if (r == 0)
        r = al_sandbox_make_dirs(s, b.id, err);
    if (r == 0 && (r = stage_folders(s, p, sp->metadata, b.id, &imports, err)) < 0)
        al_sandbox_remove_dirs(s, b.id);
    bool had_imports = imports != NULL;
    if (r == 0 &&
        (r = store_with_audit(s, p, &b, "sandbox.create",
                              audit_data(b.id, json_pack("{s:s, s:s, s:s, s:o?}", "template", b.template_id, "network",
                                                         b.network, "end_at", b.end_at, "imports", imports)),
                              err)) < 0)
        al_sandbox_remove_dirs(s, b.id);
    /* its folders' files are on its disk from the start (IMPORTS went to
     * the audit event: only whether there were any is read) */
    if (r == 0 && had_imports)
        al_sandbox_account(s, b.id);
    if (r == 0)
        r = al_sandbox_from_store(&b, out, err);
    al_store_sandbox_done(&b);
    if (r < 0)
        token[0] = '\0';
    return r;
}

/* ------------------------------------------------------------ the others */

/* Whether END_AT is past. */
static bool ended(const char *end_at) {
    char now[40];
    al_store_now(now, sizeof now);
    return strcmp(end_at, now) <= 0;
}

/* Whether B is past its end and waits for the reaper: E2B's API knows no
 * such sandbox any more (a paused one's end waits for its resume). */
static bool expired(const al_store_sandbox *b) { return strcmp(b->state, "running") == 0 && ended(b->end_at); }

/* P's sandbox ID as the store has it: 0, -ENOENT (said), -errno. */
static int fetch(al_service *s, const al_principal *p, const char *id, al_store_sandbox *b, al_error *err) {
    if (!id || strlen(id) >= sizeof b->id) {
        memset(b, 0, sizeof *b);
        return al_err(err, "sandbox", ENOENT, "sandbox not found");
    }
    int r = al_store_sandbox_get(s->store, p->workspace_id, id, false, b, err);
    if (r == -ENOENT)
        return al_err(err, "sandbox", ENOENT, "sandbox %s not found", id);
    return r;
}

int al_sandbox_get(al_service *s, const al_principal *p, const char *id, al_sandbox *out, al_error *err) {
    memset(out, 0, sizeof *out);
    al_store_sandbox b = { 0 };
    int r = fetch(s, p, id, &b, err);
    if (r == 0 && expired(&b))
        r = al_err(err, "sandbox", ENOENT, "sandbox %s not found (it has ended)", id);
    if (r == 0)
        r = al_sandbox_from_store(&b, out, err);
    al_store_sandbox_done(&b);
    return r;
}

void al_sandbox_list_free(al_sandbox_list *l) {
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        al_sandbox_clear(&l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Whether MD holds every key and value of FILTER. */
static bool metadata_match(json_t *md, json_t *filter) {
    const char *k;
    json_t *v;
    json_object_foreach(filter, k, v) {
        if (!json_equal(json_object_get(md, k), v))
            return false;
    }
    return true;
}

/* Whether B (SB, as the core reads it) is one Q asks for. */
static bool wanted(const al_store_sandbox *b, const al_sandbox *sb, const al_sandbox_query *q) {
    return !expired(b) && (!q->states || (q->states & (1u << sb->state))) &&
           (!q->metadata || metadata_match(sb->metadata, q->metadata)) &&
           (!q->template_id || strcmp(b->template_id, q->template_id) == 0) &&
           (!q->started_after || strcmp(b->started_at, q->started_after) > 0);
}

int al_sandbox_list_page(al_service *s, const al_principal *p, const al_sandbox_query *q, al_sandbox_list *ret,
                         al_error *err) {
    memset(ret, 0, sizeof *ret);
    int64_t after = 0;
    if (q->after && q->after[0]) {
        char *end;
        errno = 0;
        long long v = strtoll(q->after, &end, 10);
        if (errno || *end || v <= 0)
            return al_err(err, "nextToken", EINVAL, "nextToken: not a token this service gave");
        after = v;
    }
    /* a workspace holds at most AL_SANDBOX_LIVE_MAX: read them all, filter here */
    al_store_sandboxes l;
    int r = al_store_sandboxes_list(s->store, p->workspace_id, AL_SANDBOX_LIVE_MAX * 2, &l, err);
    if (r < 0)
        return r;
    if (l.n && !(ret->v = calloc(l.n, sizeof *ret->v)))
        r = al_err(err, "sandbox", ENOMEM, "out of memory");
    int64_t last = 0;
    /* the store's rows are the newest first; the token is the last seq given */
    for (size_t k = 0; r == 0 && k < l.n; k++) {
        const al_store_sandbox *b = &l.v[q->oldest_first ? l.n - 1 - k : k];
        if (after && (q->oldest_first ? b->seq <= after : b->seq >= after))
            continue;
        al_sandbox sb;
        if ((r = al_sandbox_from_store(b, &sb, err)) < 0)
            break;
        if (!wanted(b, &sb, q)) {
            al_sandbox_clear(&sb);
            continue;
        }
        if (ret->n == q->limit) {
            /* one more than the page: the next page starts after the last */
            snprintf(ret->next, sizeof ret->next, "%lld", (long long)last);
            al_sandbox_clear(&sb);
            break;
        }
        ret->v[ret->n++] = sb;
        last = b->seq;
    }
    al_store_sandboxes_free(&l);
    if (r < 0)
        al_sandbox_list_free(ret);
    return r;
}

/* Set P's sandbox ID's END_AT and STATE (either NULL: kept) with the audit
 * event KIND (DATA stolen; NULL: none) as one unit: 0, -ENOENT. */
static int change(al_service *s, const al_principal *p, const char *id, const char *end_at, const char *state,
                  const char *kind, json_t *data, al_error *err) {
    int r = al_store_begin(s->store, err);
    if (r < 0) {
        json_decref(data);
        return r;
    }
    if ((r = al_store_sandbox_set(s->store, id, end_at, state, err)) == 0)
        r = al_err(err, "sandbox", ENOENT, "sandbox %s not found", id);
    if (r < 0)
        json_decref(data);
    else if (kind)
        r = al_workspace_audit(s, p, kind, data, err);
    if (r < 0) {
        al_store_rollback(s->store);
        return r;
    }
    return al_store_commit(s->store, err);
}

int al_sandbox_set_timeout(al_service *s, const al_principal *p, const char *id, int64_t timeout_s, al_error *err) {
    if (timeout_s < 0)
        return al_err(err, "timeout", EINVAL, "timeout: whole seconds, 0 or more");
    al_store_sandbox b = { 0 };
    int r = timeout_of(s, p->workspace_id, timeout_s, &timeout_s, err);
    if (r == 0)
        r = fetch(s, p, id, &b, err);
    bool gone = r == 0 && expired(&b);
    al_store_sandbox_done(&b);
    if (r < 0)
        return r;
    if (gone) /* past its end, waiting for the reaper: as good as killed */
        return al_err(err, "sandbox", ENOENT, "sandbox %s has ended", id);
    char end[40];
    al_cluster_time_after(timeout_s * 1000, end, sizeof end);
    return change(s, p, id, end, NULL, "sandbox.timeout",
                  audit_data(id, json_pack("{s:I, s:s}", "timeout_s", (json_int_t)timeout_s, "end_at", end)), err);
}

int al_sandbox_connect(al_service *s, const al_principal *p, const char *id, int64_t timeout_s, al_sandbox *out,
                       al_error *err) {
    memset(out, 0, sizeof *out);
    int64_t fresh;
    al_store_sandbox b = { 0 };
    int r = timeout_of(s, p->workspace_id, timeout_s, &fresh, err);
    if (r == 0)
        r = fetch(s, p, id, &b, err);
    if (r < 0)
        return r;
    bool paused = strcmp(b.state, "paused") == 0;
    if (!paused && ended(b.end_at))
        r = al_err(err, "sandbox", ENOENT, "sandbox %s has ended", id);
    char end[40];
    snprintf(end, sizeof end, "%s", b.end_at);
    if (timeout_s >= 0 || paused) {
        /* a paused sandbox's end was frozen: it resumes with its timeout anew */
        char want[40];
        al_cluster_time_after(fresh * 1000, want, sizeof want);
        if (paused || strcmp(want, end) > 0)
            snprintf(end, sizeof end, "%s", want);
    }
    if (r == 0 && (paused || strcmp(end, b.end_at) != 0))
        r = change(s, p, id, end, "running", paused ? "sandbox.resume" : NULL,
                   paused ? audit_data(id, json_pack("{s:s}", "end_at", end)) : NULL, err);
    /* the token connect hands out is derived again: if the service's secret
     * was replaced (sandbox-token.key removed), the stored hash follows it */
    char token[72], hash[65];
    if (r == 0 && (r = al_sandbox_token(s, id, token, err)) == 0) {
        al_sha256_hex(token, strlen(token), hash);
        if (strcmp(hash, b.token_hash) != 0 && (r = al_store_sandbox_set_token(s->store, id, hash, err)) > 0)
            r = 0;
    }
    al_store_sandbox_done(&b);
    return r < 0 ? r : al_sandbox_get(s, p, id, out, err);
}

int al_sandbox_pause(al_service *s, const al_principal *p, const char *id, bool pause, al_error *err) {
    al_store_sandbox b = { 0 };
    int r = fetch(s, p, id, &b, err);
    if (r < 0)
        return r;
    bool paused = strcmp(b.state, "paused") == 0;
    if (!paused && ended(b.end_at))
        r = al_err(err, "sandbox", ENOENT, "sandbox %s has ended", id);
    else if (paused == pause)
        r = al_err(err, "sandbox", EALREADY, "sandbox %s is %s already", id, pause ? "paused" : "running");
    al_store_sandbox_done(&b);
    int64_t fresh = 0;
    if (r == 0)
        r = timeout_of(s, p->workspace_id, -1, &fresh, err);
    if (r < 0)
        return r;
    char end[40];
    al_cluster_time_after(fresh * 1000, end, sizeof end);
    r = change(s, p, id, pause ? NULL : end, pause ? "paused" : "running",
               pause ? "sandbox.pause" : "sandbox.resume", audit_data(id, NULL), err);
    /* E2B's own pause keeps the files: a session box's processes end and
     * its /work flows back (asked of whichever node holds it) */
    if (r == 0 && pause)
        al_session_box_ask_end(s, id);
    return r;
}

/* Delete sandbox ID (of OWNER) with its audit event (BY: who; NULL the
 * reaper), then its directory: 0, -ENOENT. */
/* How many of a sandbox's newest runs its kill looks through for live ones
 * (its person's share of the queue holds far fewer) */
#define KILL_RUNS_LOOKED 200

/* The commands of sandbox ID (its thread's runs) that have not ended,
 * canceled as its OWNER: E2B's kill ends every process of the sandbox, and
 * a command left running would go on to its timeout, charged, holding its
 * person's places, its end reaching no one. */
static void cancel_commands(al_service *s, const al_principal *owner, const char *id) {
    char thread[72];
    snprintf(thread, sizeof thread, "e2b-%s", id);
    al_store_run_filter f = { .ws_id = owner->workspace_id, .state = _AL_RUN_STATE_INVALID, .thread_id = thread,
                              .before_seq = INT64_MAX, .limit = KILL_RUNS_LOOKED };
    al_store_run_brief *b = NULL;
    size_t n = 0;
    al_error err = { 0 };
    if (al_store_run_list(s->store, &f, &b, &n, &err) < 0) {
        al_service_log(s, AL_LOG_WARN, "sandbox.kill_commands_unread",
                       json_pack("{s:s, s:s}", "sandbox_id", id, "error", err.msg));
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!al_run_state_ended(b[i].run.state))
            al_run_cancel(s, owner, b[i].run.id);
    al_store_run_briefs_free(b, n);
}

static int kill_one(al_service *s, const al_principal *owner, const char *id, const char *why, al_error *err) {
    int r = al_store_begin(s->store, err);
    if (r < 0)
        return r;
    if ((r = al_store_sandbox_delete(s->store, id, err)) == 0)
        r = al_err(err, "sandbox", ENOENT, "sandbox %s not found", id);
    if (r > 0)
        r = al_workspace_audit(s, owner, "sandbox.kill", audit_data(id, json_pack("{s:s}", "reason", why)), err);
    if (r < 0) {
        al_store_rollback(s->store);
        return r;
    }
    if ((r = al_store_commit(s->store, err)) < 0)
        return r;
    /* the row went first: nothing admits the sandbox while its commands
     * and files go (a command's end that puts its tree back after this
     * removes it: sandbox_run.c); its session box ends (held here at
     * once, on another node when its keeper sees the directory gone) */
    cancel_commands(s, owner, id);
    al_session_box_end(s, id);
    al_sandbox_remove_dirs(s, id);
    return 0;
}

int al_sandbox_kill(al_service *s, const al_principal *p, const char *id, al_error *err) {
    al_store_sandbox b = { 0 };
    int r = fetch(s, p, id, &b, err);
    bool gone = r == 0 && expired(&b);
    al_store_sandbox_done(&b);
    if (r < 0)
        return r;
    if (gone) { /* the reaper's: E2B answers 404 for a sandbox past its end */
        kill_one(s, &b.owner, id, "timeout", err);
        return al_err(err, "sandbox", ENOENT, "sandbox %s not found (it had ended)", id);
    }
    return kill_one(s, p, id, "killed", err);
}

#define SWEEP_SANDBOXES_MAX 256

int al_sandbox_sweep(al_service *s) {
    char now[40], next[40];
    al_store_now(now, sizeof now);
    al_cluster_time_after(1000, next, sizeof next);
    al_error err = { 0 };
    int c = al_store_sweep_claim(s->store, "sandboxes", s->node_id, now, next, &err);
    if (c <= 0)
        return c;
    al_store_sandboxes l;
    int r = al_store_sandboxes_ended(s->store, now, SWEEP_SANDBOXES_MAX, &l, &err);
    int done = 0;
    for (size_t i = 0; r >= 0 && i < l.n; i++) {
        if (strcmp(l.v[i].state, "paused") == 0) /* a paused sandbox waits for its owner */
            continue;
        al_error kerr = { 0 };
        int k = kill_one(s, &l.v[i].owner, l.v[i].id, "timeout", &kerr);
        if (k == 0)
            done++;
        else if (k != -ENOENT) {
            r = k;
            err = kerr;
        }
    }
    al_store_sandboxes_free(&l);
    if (done > 0 || r < 0)
        al_service_log(s, r < 0 ? AL_LOG_ERROR : AL_LOG_INFO, r < 0 ? "sandboxes.sweep_failed" : "sandboxes.reaped",
                       json_pack("{s:i, s:s?}", "sandboxes", done, "error", r < 0 ? err.msg : NULL));
    return r < 0 ? r : done;
}
