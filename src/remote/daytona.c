/*
 * The daytona box: one run in a Daytona sandbox (remote.h), over Daytona's
 * REST API as @daytonaio/sdk 0.218.0 speaks it (its api-client and
 * toolbox-api-client): POST {api}/sandbox, its toolbox at
 * {toolboxProxyUrl}/{id}: POST files/folder, POST files/bulk-upload
 * (multipart files[i].path, files[i].file), POST process/execute {command,
 * cwd, timeout} -> {exitCode, result}, GET files?path= (a listing), GET
 * files/download?path=; DELETE {api}/sandbox/{id}. Authorization: Bearer.
 *
 * Daytona's execute is not streamed: the run's output arrives when it has
 * ended, stdout and stderr merged (all as stdout); the driver's badge and
 * docs say so. Its network filter takes addresses (CIDRs), not names: a
 * run is offline (networkBlockAll) or has the internet.
 */
#include "remote_int.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include <nettle/base64.h>

#define SETUP_MARGIN_MS 180000
#define EXEC_GRACE_MS 30000
#define START_WAIT_MS 120000

typedef struct dt {
    const al_remote_opts *o;
    const al_box_config *cfg;
    al_box_result *res;
    al_http api;
    char id[128];
    char tb[AL_REMOTE_URL_MAX + 160];  /* the toolbox of this sandbox: {toolboxProxyUrl}/{id} */
    bool made, canceled;
    uint64_t deadline_ms;
} dt;

static bool id_ok(const char *id, size_t max) {
    return id && *id && strlen(id) < max && strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == strlen(id);
}

static int toolbox_of(dt *b, json_t *sb, al_error *err) {
    const char *url = json_string_value(json_object_get(sb, "toolboxProxyUrl"));
    json_t *ans = NULL;
    if (!url || !*url) {
        char u[AL_REMOTE_URL_MAX + 200];
        snprintf(u, sizeof u, "%s/sandbox/%s/toolbox-proxy-url", b->o->api_url, b->id);
        int r = al_http_json(&b->api, "GET", u, NULL, NULL, 30000, &ans, NULL, "daytona", err);
        if (r < 0)
            return r;
        url = json_string_value(json_object_get(ans, "url"));
    }
    int r = 0;
    if (!url || strncmp(url, "http", 4) != 0 || strlen(url) > AL_REMOTE_URL_MAX)
        r = al_err(err, "daytona", EPROTO, "Daytona: no usable toolboxProxyUrl for sandbox %s", b->id);
    else
        snprintf(b->tb, sizeof b->tb, "%s%s%s", url, url[strlen(url) - 1] == '/' ? "" : "/", b->id);
    json_decref(ans);
    return r;
}

static int create(dt *b, al_error *err) {
    const al_remote_opts *o = b->o;
    /* a sandbox left by a service that died stops on its own, and is
     * deleted when it stops */
    json_int_t stop_min = (json_int_t)((b->cfg->limits.wall_ms + SETUP_MARGIN_MS) / 60000 + 1);
    json_t *req = json_pack("{s:{}, s:{s:s}, s:I, s:I, s:b}", "env", "labels", "airlock", o->tag ? o->tag : "",
                            "autoStopInterval", stop_min, "autoDeleteInterval", (json_int_t)0, "networkBlockAll",
                            !o->internet);
    if (req && o->template_name && *o->template_name)
        json_object_set_new(req, "target", json_string(o->template_name));
    if (!req)
        return al_err(err, "daytona", ENOMEM, "out of memory");
    char url[AL_REMOTE_URL_MAX + 32];
    snprintf(url, sizeof url, "%s/sandbox", o->api_url);
    json_t *sb = NULL;
    int r = al_http_json(&b->api, "POST", url, req, NULL, 120000, &sb, NULL, "daytona", err);
    json_decref(req);
    if (r < 0)
        return r;
    const char *id = json_string_value(json_object_get(sb, "id"));
    if (!id_ok(id, sizeof b->id)) {
        json_decref(sb);
        return al_err(err, "daytona", EPROTO, "Daytona: the new sandbox's answer has no usable id");
    }
    snprintf(b->id, sizeof b->id, "%s", id);
    b->made = true;
    /* until it has started (as the SDK waits) */
    uint64_t until = al_now_ms() + START_WAIT_MS;
    for (;;) {
        const char *state = json_string_value(json_object_get(sb, "state")) ?: "";
        if (strcmp(state, "started") == 0)
            break;
        if (strcmp(state, "error") == 0 || strcmp(state, "build_failed") == 0 || al_now_ms() > until) {
            r = al_err(err, "daytona", EIO, "Daytona: sandbox %s is %s, not started", b->id, state);
            json_decref(sb);
            return r;
        }
        if (al_remote_should_stop(b->cfg, 0, &b->canceled)) {
            json_decref(sb);
            return al_err(err, "daytona", ECANCELED, "canceled");
        }
        struct timespec ts = { 0, 500 * 1000000L };
        nanosleep(&ts, NULL);
        json_decref(sb);
        sb = NULL;
        char u[AL_REMOTE_URL_MAX + 160];
        snprintf(u, sizeof u, "%s/sandbox/%s", o->api_url, b->id);
        if ((r = al_http_json(&b->api, "GET", u, NULL, NULL, 30000, &sb, NULL, "daytona", err)) < 0)
            return r;
    }
    r = toolbox_of(b, sb, err);
    json_decref(sb);
    return r;
}

/* POST the toolbox's PATH?QUERY (no body): 0, else -errno */
static int tb_post(dt *b, const char *path, const char *query, al_error *err) {
    char url[sizeof b->tb + 1200];
    snprintf(url, sizeof url, "%s/%s?%s", b->tb, path, query);
    json_t *ans = NULL;
    int r = al_http_json(&b->api, "POST", url, NULL, NULL, 60000, &ans, NULL, "daytona", err);
    json_decref(ans);
    return r;
}

static int stage(dt *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    static const char *const dirs[] = { "path=%2Fwork&mode=755", "path=%2Fout&mode=755" };
    for (size_t i = 0; i < 2; i++)
        if (tb_post(b, "files/folder", dirs[i], err) < 0)
            memset(err, 0, sizeof *err); /* there already: the upload says if it is not */
    curl_mime *m = curl_mime_init(b->api.curl);
    if (!m)
        return al_err(err, "stage", ENOMEM, "out of memory");
    size_t n = cfg->n_files + cfg->n_inputs + (cfg->stdin_fd >= 0);
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        char field[64], dest[600], fdpath[64];
        const char *name, *host = NULL;
        if (i < cfg->n_files) {
            name = cfg->files[i].name;
        } else if (i < cfg->n_files + cfg->n_inputs) {
            host = cfg->inputs[i - cfg->n_files];
            name = strrchr(host, '/') ? strrchr(host, '/') + 1 : host;
        } else {
            snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", cfg->stdin_fd);
            host = fdpath;
            name = ".airlock-stdin";
        }
        snprintf(dest, sizeof dest, "/work/%s", name);
        curl_mimepart *p = curl_mime_addpart(m);
        snprintf(field, sizeof field, "files[%zu].path", i);
        if (!p || curl_mime_name(p, field) != CURLE_OK || curl_mime_data(p, dest, CURL_ZERO_TERMINATED) != CURLE_OK ||
            !(p = curl_mime_addpart(m))) {
            r = al_err(err, "stage", ENOMEM, "out of memory");
            break;
        }
        snprintf(field, sizeof field, "files[%zu].file", i);
        curl_mime_name(p, field);
        CURLcode cc = host ? curl_mime_filedata(p, host) : curl_mime_data(p, cfg->files[i].data, cfg->files[i].len);
        curl_mime_filename(p, dest);
        curl_mime_type(p, "application/octet-stream");
        if (cc != CURLE_OK)
            r = al_err(err, "stage", EIO, "cannot read input %s", host ? host : name);
    }
    if (r == 0) {
        char url[sizeof b->tb + 64];
        snprintf(url, sizeof url, "%s/files/bulk-upload", b->tb);
        al_http_req req = { .method = "POST", .url = url, .mime = m, .timeout_ms = 300000 };
        long st = 0;
        al_buf ans = { 0 };
        r = al_http_call(&b->api, &req, &st, &ans, "stage", err);
        if (r == 0 && (st < 200 || st > 299))
            r = al_err(err, "stage", EIO, "Daytona: files/bulk-upload: HTTP %ld: %.200s", st, ans.buf ? ans.buf : "");
        free(ans.buf);
    }
    curl_mime_free(m);
    return r;
}

static int on_tick(void *ud) {
    dt *b = ud;
    return al_remote_should_stop(b->cfg, 0, &b->canceled);
}


static int run_command(dt *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    _cleanup_free_ char *inner = al_remote_command(cfg, cfg->stdin_fd >= 0 ? ".airlock-stdin" : NULL);
    if (!inner)
        return al_err(err, "daytona", ENOMEM, "out of memory");
    /* the toolbox splits its command on spaces, honouring quotes but no
     * escapes, and runs it without a shell: the script's line goes as
     * base64 (no quote, no space), decoded by the shell it is fed to; its
     * own stdin is redirected in it (al_remote_command), never the pipe's */
    size_t n = strlen(inner);
    _cleanup_free_ char *b64 = malloc(BASE64_ENCODE_LENGTH(n) + BASE64_ENCODE_FINAL_LENGTH + 1);
    if (!b64)
        return al_err(err, "daytona", ENOMEM, "out of memory");
    struct base64_encode_ctx e;
    base64_encode_init(&e);
    size_t k = base64_encode_update(&e, b64, n, (const uint8_t *)inner);
    k += base64_encode_final(&e, b64 + k);
    b64[k] = '\0';
    al_buf q = { 0 };
    if (asprintf(&q.buf, "/bin/bash -c \"echo %s | base64 -d | /bin/bash\"", b64) < 0)
        return al_err(err, "daytona", ENOMEM, "out of memory");
    uint64_t secs = (cfg->limits.wall_ms + 999) / 1000;
    json_t *msg = json_pack("{s:s, s:s, s:I}", "command", q.buf, "cwd", "/work", "timeout", (json_int_t)secs);
    free(q.buf);
    _cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text)
        return al_err(err, "daytona", ENOMEM, "out of memory");
    char url[sizeof b->tb + 64];
    snprintf(url, sizeof url, "%s/process/execute", b->tb);
    if (cfg->on_started)
        cfg->on_started(cfg->userdata);
    uint64_t t0 = al_now_ms();
    al_http_req req = { .method = "POST", .url = url, .body = text, .body_len = strlen(text),
                        .timeout_ms = cfg->limits.wall_ms + EXEC_GRACE_MS, .progress = on_tick, .userdata = b };
    long st = 0;
    al_buf ans = { 0 };
    al_error cerr = { 0 };
    int r = al_http_call(&b->api, &req, &st, &ans, "run", &cerr);
    res->wall_ms = al_now_ms() - t0;
    json_t *doc = r == 0 && ans.len ? json_loadb(ans.buf, ans.len, 0, NULL) : NULL;
    free(ans.buf);
    bool over_time = res->wall_ms >= cfg->limits.wall_ms;
    /* 408: the toolbox ended the command at its timeout */
    if (b->canceled || (r < 0 && cerr.err == ETIMEDOUT) || (r == 0 && st == 408)) {
        /* the sandbox's deletion ends the command */
        json_decref(doc);
        res->reason = b->canceled ? AL_REASON_CANCELED : AL_REASON_TIMEOUT;
        res->exit_code = -1;
        res->signal = SIGKILL;
        return 0;
    }
    if (r < 0) {
        *err = cerr;
        return r;
    }
    json_t *code = json_object_get(doc, "exitCode");
    if (!json_is_integer(code))
        code = json_object_get(doc, "code");
    const char *out = json_string_value(json_object_get(doc, "result"));
    if (st < 200 || st > 299 || !json_is_integer(code)) {
        r = al_err(err, "run", EIO, "Daytona: process/execute: HTTP %ld%s%.200s", st, out ? ": " : "", out ? out : "");
        json_decref(doc);
        return r;
    }
    int exit_code = (int)json_integer_value(code);
    bool over = out && al_box_result_output(cfg, res, AL_STREAM_STDOUT, out, strlen(out));
    json_decref(doc);
    /* the toolbox ends a command at its timeout: an exit that came at or
     * past the wall clock, unsuccessful, is that */
    if (over_time && exit_code != 0) {
        res->reason = AL_REASON_TIMEOUT;
        res->exit_code = -1;
        res->signal = SIGKILL;
        return 0;
    }
    res->reason = over ? AL_REASON_OUTPUT_LIMIT : AL_REASON_EXITED;
    res->exit_code = exit_code > 128 && exit_code <= 128 + 64 ? -1 : exit_code;
    res->signal = exit_code > 128 && exit_code <= 128 + 64 ? exit_code - 128 : 0;
    return 0;
}

/* ---- /out ---- */

static int list_dir(dt *b, const char *rel, json_t **ret, al_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "/out%s%s", *rel ? "/" : "", rel);
    _cleanup_free_ char *q = al_http_escape(&b->api, path);
    _cleanup_free_ char *url = NULL;
    if (!q || asprintf(&url, "%s/files?path=%s", b->tb, q) < 0)
        return al_err(err, "collect", ENOMEM, "out of memory");
    return al_http_json(&b->api, "GET", url, NULL, NULL, 60000, ret, NULL, "collect", err);
}

/* /out, breadth first, to the depth cap and the entry cap */
static int list_out(dt *b, al_remote_listing *l, al_error *err) {
    uint64_t max_entries = b->cfg->limits.max_artifacts * 10 + 1000;
    int r = al_remote_listing_add(l, "", true, false, 0);
    for (size_t k = 0; r == 0 && k < l->n && l->n < max_entries; k++) {
        if (!l->e[k].dir)
            continue;
        uint64_t depth = 0;
        for (const char *p = l->e[k].path; *p; p++)
            depth += *p == '/';
        if (*l->e[k].path && depth + 1 > b->cfg->limits.max_depth)
            continue; /* its children are past the cap; it is listed as too deep itself */
        json_t *items = NULL;
        if ((r = list_dir(b, l->e[k].path, &items, err)) < 0) {
            if (k == 0 && err->err == ENOENT) {
                memset(err, 0, sizeof *err);
                r = 0;
            }
            break;
        }
        size_t i;
        json_t *e;
        json_array_foreach(items, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *mode = json_string_value(json_object_get(e, "mode")) ?: "";
            if (!name || !*name || strchr(name, '/'))
                continue;
            bool dir = json_is_true(json_object_get(e, "isDir"));
            bool link = mode[0] == 'L' || mode[0] == 'l';
            _cleanup_free_ char *path = NULL;
            if (asprintf(&path, "%s%s%s", l->e[k].path, *l->e[k].path ? "/" : "", name) < 0 ||
                (r = al_remote_listing_add(l, path, dir && !link, !dir && !link,
                                           (uint64_t)json_integer_value(json_object_get(e, "size")))) < 0) {
                r = al_err(err, "collect", ENOMEM, "out of memory");
                break;
            }
        }
        json_decref(items);
    }
    /* the root itself is not an entry of /out */
    if (l->n) {
        free(l->e[0].path);
        memmove(l->e, l->e + 1, (l->n - 1) * sizeof *l->e);
        l->n--;
    }
    return r;
}

static int download(void *ud, const char *rel, al_http_write_fn w, void *wud, al_error *err) {
    dt *b = ud;
    char path[4200];
    snprintf(path, sizeof path, "/out/%s", rel);
    _cleanup_free_ char *q = al_http_escape(&b->api, path);
    _cleanup_free_ char *url = NULL;
    if (!q || asprintf(&url, "%s/files/download?path=%s", b->tb, q) < 0)
        return al_err(err, "collect", ENOMEM, "out of memory");
    return al_http_download(&b->api, url, NULL, w, wud, "collect", err);
}

static void destroy(dt *b) {
    if (!b->made)
        return;
    char url[AL_REMOTE_URL_MAX + 160];
    snprintf(url, sizeof url, "%s/sandbox/%s", b->o->api_url, b->id);
    al_http_delete(&b->api, url, "daytona");
}

static int open_api(dt *b, al_error *err) {
    char auth[AL_REMOTE_KEY_MAX + 32];
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", b->o->api_key ? b->o->api_key : "");
    const char *hdrs[] = { auth, "X-Daytona-Source: airlock", NULL };
    int r = al_http_open(&b->api, "Daytona", hdrs, err);
    explicit_bzero(auth, sizeof auth);
    return r;
}

/* ---- the steps of a run (al_remote_steps) ---- */

static int op_open(void *ud, al_error *err) {
    dt *b = ud;
    int r = open_api(b, err);
    b->api.deadline_ms = al_now_ms() + b->cfg->limits.wall_ms + SETUP_MARGIN_MS;
    b->api.stop = on_tick;
    b->api.stop_ud = b;
    return r;
}

static int op_prepare(void *ud, al_error *err) {
    dt *b = ud;
    int r;
    if ((r = create(b, err)) < 0 || (r = stage(b, err)) < 0)
        return r;
    return run_command(b, err);
}

static int op_list_out(void *ud, al_remote_listing *l, al_error *err) { return list_out(ud, l, err); }

static void op_finish(void *ud) {
    dt *b = ud;
    destroy(b);
    al_http_close(&b->api);
}

static bool op_canceled(void *ud) { return ((dt *)ud)->canceled; }

static const al_remote_ops daytona_ops = { AL_REMOTE_DAYTONA, op_open, op_prepare, op_list_out, download, op_finish,
                                           op_canceled };

int al_remote_daytona_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res) {
    dt b = { .o = o, .cfg = cfg, .res = res };
    return al_remote_steps(&daytona_ops, &b, cfg, res);
}

int al_remote_daytona_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err) {
    dt b = { .o = o };
    int r = open_api(&b, err);
    if (r < 0)
        return r;
    char url[AL_REMOTE_URL_MAX + 64];
    snprintf(url, sizeof url, "%s/sandbox?limit=100", o->api_url);
    json_t *ans = NULL;
    r = al_http_json(&b.api, "GET", url, NULL, NULL, 30000, &ans, NULL, "sweep", err);
    json_t *items = json_is_array(ans) ? ans : json_object_get(ans, "items");
    int n = 0;
    size_t i;
    json_t *sb;
    json_array_foreach(r == 0 ? items : NULL, i, sb) {
        const char *tag = json_string_value(json_object_get(json_object_get(sb, "labels"), "airlock"));
        const char *id = json_string_value(json_object_get(sb, "id"));
        if (!al_remote_tag_stale(tag, prefix, keep) || !id_ok(id, sizeof b.id))
            continue;
        snprintf(b.id, sizeof b.id, "%s", id);
        b.made = true;
        destroy(&b);
        n++;
    }
    json_decref(ans);
    al_http_close(&b.api);
    return r < 0 ? r : n;
}
