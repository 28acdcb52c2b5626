/*
 * The e2b box: one run in an E2B sandbox (remote.h), over E2B's control
 * plane (POST /v2/sandboxes, DELETE /sandboxes/ID, X-API-KEY) and the
 * sandbox's envd (multipart POST /files, GET /files, Connect RPC with the
 * JSON codec: process.Process/Start streamed as envelopes, SendSignal,
 * filesystem.Filesystem/MakeDir and ListDir), as the e2b SDK 2.51.0 speaks
 * them (/work/shared/research/e2b-wire.md).
 *
 * envd's calls are made as user root (Basic "root:"): E2B's base template
 * has no /work or /out, and only root may make them at /; the sandbox is
 * a VM made for this run alone, whose root is the VM's, not this host's.
 * A server that refuses root (401, as airlock's own E2B API may: its /work
 * and /out always exist) is asked again as its default user.
 */
#include "remote_int.h"

#include <signal.h>
#include <string.h>

#include <nettle/base64.h>

#define ENVD_PORT "49983"
#define SETUP_MARGIN_MS 180000    /* making the sandbox, staging, collecting, beside the run's wall clock */
#define STREAM_GRACE_MS 30000     /* after the wall clock: the kill and the stream's end */
#define FRAME_MAX (4u << 20)      /* one Connect envelope */

typedef struct e2b {
    const al_remote_opts *o;
    const al_box_config *cfg;
    al_box_result *res;
    al_http api, envd;
    char id[96];
    char envd_url[AL_REMOTE_URL_MAX + 128];
    bool made, as_root;
    /* the command's stream */
    al_buf frame;
    uint64_t deadline_ms;
    uint32_t pid;
    bool started, ended, over_output, canceled, timed_out, bad_stream;
    int exit_code;
    char status[128], stream_error[300];
} e2b;

static const char *const connect_json[] = { "Connect-Protocol-Version: 1", NULL };
static const char *const connect_json_root[] = { "Connect-Protocol-Version: 1", "Authorization: Basic cm9vdDo=", NULL };

static const char *const *rpc_headers(e2b *b) { return b->as_root ? connect_json_root : connect_json; }

/* envd's unary call METHOD with SEND: 0 with the answer, else -errno */
static int rpc(e2b *b, const char *method, json_t *send, json_t **ret, long *status, al_error *err) {
    char url[sizeof b->envd_url + 64];
    snprintf(url, sizeof url, "%s/%s", b->envd_url, method);
    return al_http_json(&b->envd, "POST", url, send, rpc_headers(b), 60000, ret, status, "e2b", err);
}

static int create(e2b *b, al_error *err) {
    const al_remote_opts *o = b->o;
    json_t *req = json_pack("{s:s, s:I, s:{s:s}, s:{}, s:b, s:b}", "templateID",
                            o->template_name && *o->template_name ? o->template_name : "base", "timeout",
                            (json_int_t)((b->cfg->limits.wall_ms + SETUP_MARGIN_MS) / 1000), "metadata", "airlock",
                            o->tag ? o->tag : "", "envVars", "secure", 1, "allowInternetAccess",
                            o->internet || o->n_hosts > 0);
    if (req && !o->internet && o->n_hosts) {
        /* E2B's documented allow-list: the hosts, and nothing else */
        json_t *allow = json_array();
        for (size_t i = 0; i < o->n_hosts; i++)
            json_array_append_new(allow, json_string(o->hosts[i]));
        json_object_set_new(req, "network", json_pack("{s:o, s:[s]}", "allowOut", allow, "denyOut", "0.0.0.0/0"));
    }
    if (!req)
        return al_err(err, "e2b", ENOMEM, "out of memory");
    char url[AL_REMOTE_URL_MAX + 32];
    snprintf(url, sizeof url, "%s/v2/sandboxes", o->api_url);
    json_t *ans = NULL;
    int r = al_http_json(&b->api, "POST", url, req, NULL, 120000, &ans, NULL, "e2b", err);
    json_decref(req);
    if (r < 0)
        return r;
    const char *id = json_string_value(json_object_get(ans, "sandboxID"));
    const char *token = json_string_value(json_object_get(ans, "envdAccessToken"));
    const char *domain = json_string_value(json_object_get(ans, "domain"));
    if (!id || !*id || strlen(id) >= sizeof b->id || strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789_-") != strlen(id)) {
        json_decref(ans);
        return al_err(err, "e2b", EPROTO, "E2B: the new sandbox's answer has no usable sandboxID");
    }
    snprintf(b->id, sizeof b->id, "%s", id);
    b->made = true;
    if (o->sandbox_url && *o->sandbox_url)
        snprintf(b->envd_url, sizeof b->envd_url, "%s", o->sandbox_url);
    else
        snprintf(b->envd_url, sizeof b->envd_url, "https://" ENVD_PORT "-%s.%.100s", b->id,
                 domain && *domain && strspn(domain, "abcdefghijklmnopqrstuvwxyz0123456789.-") == strlen(domain)
                     ? domain
                     : "e2b.app");
    char h_id[160], h_tok[300];
    snprintf(h_id, sizeof h_id, "E2b-Sandbox-Id: %s", b->id);
    snprintf(h_tok, sizeof h_tok, "X-Access-Token: %.250s", token ? token : "");
    const char *hdrs[] = { h_id, "E2b-Sandbox-Port: " ENVD_PORT, token ? h_tok : NULL, NULL };
    json_decref(ans);
    r = al_http_open(&b->envd, "E2B envd", hdrs, err);
    b->envd.deadline_ms = b->api.deadline_ms;
    b->envd.stop = b->api.stop;
    b->envd.stop_ud = b->api.stop_ud;
    return r;
}

/* /work and /out, as root; already there is as good */
static int make_dirs(e2b *b, al_error *err) {
    static const char *const dirs[] = { "/work", "/out" };
    for (size_t i = 0; i < 2; i++) {
        json_t *ans = NULL;
        long st = 0;
        json_t *req = json_pack("{s:s}", "path", dirs[i]);
        int r = rpc(b, "filesystem.Filesystem/MakeDir", req, &ans, &st, err);
        if (r < 0 && st == 401 && b->as_root) {
            /* a server that runs everything as its one user */
            b->as_root = false;
            memset(err, 0, sizeof *err);
            r = rpc(b, "filesystem.Filesystem/MakeDir", req, &ans, &st, err);
        }
        json_decref(req);
        json_decref(ans);
        if (r < 0 && st != 409)
            return r;
        memset(err, 0, sizeof *err);
    }
    return 0;
}

/* One file into /work/NAME: DATA (LEN bytes), or the host file PATH */
static int upload(e2b *b, const char *name, const void *data, size_t len, const char *path, al_error *err) {
    char dest[600];
    if (snprintf(dest, sizeof dest, "/work/%s", name) >= (int)sizeof dest)
        return al_err(err, "stage", ENAMETOOLONG, "input name too long: %.80s", name);
    _cleanup_free_ char *q = al_http_escape(&b->envd, dest);
    char url[sizeof b->envd_url + sizeof dest * 3 + 64];
    snprintf(url, sizeof url, "%s/files?path=%s%s", b->envd_url, q ? q : "", b->as_root ? "&username=root" : "");
    curl_mime *m = curl_mime_init(b->envd.curl);
    curl_mimepart *p = m ? curl_mime_addpart(m) : NULL;
    if (!p || !q) {
        curl_mime_free(m);
        return al_err(err, "stage", ENOMEM, "out of memory");
    }
    curl_mime_name(p, "file");
    curl_mime_filename(p, dest);
    curl_mime_type(p, "application/octet-stream");
    CURLcode cc = path ? curl_mime_filedata(p, path) : curl_mime_data(p, data, len);
    if (path)
        curl_mime_filename(p, dest); /* filedata names the part after the host file: the path is the box's */
    if (cc != CURLE_OK) {
        curl_mime_free(m);
        return al_err(err, "stage", EIO, "cannot read input %s", path ? path : name);
    }
    al_http_req req = { .method = "POST", .url = url, .mime = m, .timeout_ms = 300000,
                        .headers = b->as_root ? connect_json_root + 1 : NULL };
    long st = 0;
    al_buf ans = { 0 };
    int r = al_http_call(&b->envd, &req, &st, &ans, "stage", err);
    curl_mime_free(m);
    if (r == 0 && (st < 200 || st > 299))
        r = al_err(err, "stage", EIO, "E2B envd: upload of %s: HTTP %ld: %.200s", dest, st, ans.buf ? ans.buf : "");
    free(ans.buf);
    return r;
}

static int stage(e2b *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    int r = 0;
    for (size_t i = 0; r == 0 && i < cfg->n_files; i++)
        r = upload(b, cfg->files[i].name, cfg->files[i].data, cfg->files[i].len, NULL, err);
    for (size_t i = 0; r == 0 && i < cfg->n_inputs; i++) {
        const char *base = strrchr(cfg->inputs[i], '/');
        r = upload(b, base ? base + 1 : cfg->inputs[i], NULL, 0, cfg->inputs[i], err);
    }
    if (r == 0 && cfg->stdin_fd >= 0) {
        char p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", cfg->stdin_fd);
        r = upload(b, ".airlock-stdin", NULL, 0, p, err);
    }
    return r;
}

/* ---- the command, streamed ---- */

static void on_event(e2b *b, json_t *ev) {
    json_t *start = json_object_get(ev, "start"), *data = json_object_get(ev, "data"),
           *end = json_object_get(ev, "end");
    if (start) {
        b->pid = (uint32_t)json_integer_value(json_object_get(start, "pid"));
        b->started = true;
        if (b->cfg->on_started)
            b->cfg->on_started(b->cfg->userdata);
    } else if (data) {
        for (int s = 0; s < _AL_STREAM_MAX; s++) {
            const char *b64 = json_string_value(json_object_get(data, s == AL_STREAM_STDOUT ? "stdout" : "stderr"));
            if (!b64)
                continue;
            size_t n = strlen(b64);
            _cleanup_free_ char *raw = malloc(BASE64_DECODE_LENGTH(n) + 1);
            struct base64_decode_ctx d;
            base64_decode_init(&d);
            size_t got = raw ? BASE64_DECODE_LENGTH(n) : 0;
            if (!raw || !base64_decode_update(&d, &got, (uint8_t *)raw, n, b64) || !base64_decode_final(&d)) {
                b->bad_stream = true;
                continue;
            }
            if (al_box_result_output(b->cfg, b->res, (al_stream)s, raw, got))
                b->over_output = true;
        }
    } else if (end) {
        b->ended = true;
        json_t *code = json_object_get(end, "exitCode");
        b->exit_code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
        snprintf(b->status, sizeof b->status, "%s", json_string_value(json_object_get(end, "status")) ?: "");
    }
}

/* whole envelopes out of the frame buffer */
static bool frames(e2b *b) {
    size_t off = 0;
    while (b->frame.len - off >= 5) {
        const uint8_t *p = (const uint8_t *)b->frame.buf + off;
        uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
        if (n > FRAME_MAX || (p[0] & 1)) {
            b->bad_stream = true;
            return false;
        }
        if (b->frame.len - off - 5 < n)
            break;
        json_t *doc = json_loadb((const char *)p + 5, n, 0, NULL);
        if (!doc)
            b->bad_stream = true;
        else if (p[0] & 2) {
            json_t *e = json_object_get(doc, "error");
            if (e)
                snprintf(b->stream_error, sizeof b->stream_error, "%s: %s",
                         json_string_value(json_object_get(e, "code")) ?: "unknown",
                         json_string_value(json_object_get(e, "message")) ?: "");
        } else
            on_event(b, json_object_get(doc, "event"));
        json_decref(doc);
        off += 5 + n;
    }
    memmove(b->frame.buf, b->frame.buf + off, b->frame.len - off);
    b->frame.len -= off;
    return !b->bad_stream;
}

static size_t on_stream(char *p, size_t size, size_t n, void *ud) {
    e2b *b = ud;
    size_t k = size * n;
    long st = 0;
    curl_easy_getinfo(b->envd.curl, CURLINFO_RESPONSE_CODE, &st);
    if (st != 200) {
        /* a refusal: its body (Connect's unary error) is why */
        size_t have = strlen(b->stream_error);
        snprintf(b->stream_error + have, sizeof b->stream_error - have, "%.*s", (int)k, p);
        return k;
    }
    if (b->frame.len + k > FRAME_MAX + 5) {
        b->bad_stream = true;
        return 0;
    }
    char *nb = realloc(b->frame.buf, b->frame.len + k + 1);
    if (!nb)
        return 0;
    b->frame.buf = nb;
    memcpy(nb + b->frame.len, p, k);
    b->frame.len += k;
    if (!frames(b) || b->over_output)
        return 0;
    return k;
}

static int canceled(void *ud) {
    e2b *b = ud;
    return al_remote_should_stop(b->cfg, 0, &b->canceled);
}

static int on_tick(void *ud) {
    e2b *b = ud;
    if (al_remote_should_stop(b->cfg, b->deadline_ms, &b->canceled)) {
        b->timed_out = !b->canceled;
        return 1;
    }
    return 0;
}

static void kill_command(e2b *b) {
    if (!b->pid)
        return;
    al_error e = { 0 };
    json_t *req = json_pack("{s:{s:I}, s:s}", "process", "pid", (json_int_t)b->pid, "signal", "SIGNAL_SIGKILL");
    json_t *ans = NULL;
    rpc(b, "process.Process/SendSignal", req, &ans, NULL, &e);
    json_decref(req);
    json_decref(ans);
}

/* "signal: killed" and the like: the signal's number, or 0 */
static int signal_of(const char *status) {
    static const struct { const char *name; int sig; } sigs[] = {
        { "killed", SIGKILL }, { "terminated", SIGTERM }, { "segmentation fault", SIGSEGV },
        { "aborted", SIGABRT }, { "interrupt", SIGINT }, { "hangup", SIGHUP }, { "broken pipe", SIGPIPE },
    };
    if (strncmp(status, "signal: ", 8) != 0)
        return 0;
    for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
        if (strncmp(status + 8, sigs[i].name, strlen(sigs[i].name)) == 0)
            return sigs[i].sig;
    return SIGKILL;
}

static int run_command(e2b *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    _cleanup_free_ char *cmd = al_remote_command(cfg, cfg->stdin_fd >= 0 ? ".airlock-stdin" : NULL);
    json_t *msg = cmd ? json_pack("{s:{s:s, s:[s, s], s:{}, s:s}, s:b}", "process", "cmd", "/bin/bash", "args", "-c",
                                  cmd, "envs", "cwd", "/work", "stdin", 0)
                      : NULL;
    _cleanup_free_ char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text)
        return al_err(err, "e2b", ENOMEM, "out of memory");
    size_t n = strlen(text);
    _cleanup_free_ char *env = malloc(n + 5);
    if (!env)
        return al_err(err, "e2b", ENOMEM, "out of memory");
    env[0] = 0;
    env[1] = (char)(n >> 24), env[2] = (char)(n >> 16), env[3] = (char)(n >> 8), env[4] = (char)n;
    memcpy(env + 5, text, n);
    char url[sizeof b->envd_url + 64], tmo[64];
    snprintf(url, sizeof url, "%s/process.Process/Start", b->envd_url);
    snprintf(tmo, sizeof tmo, "Connect-Timeout-Ms: %llu", (unsigned long long)cfg->limits.wall_ms);
    const char *hdrs[] = { "Connect-Protocol-Version: 1", tmo, b->as_root ? "Authorization: Basic cm9vdDo=" : NULL,
                           NULL };
    uint64_t t0 = al_now_ms();
    b->deadline_ms = t0 + cfg->limits.wall_ms;
    b->frame.max = FRAME_MAX;
    al_http_req req = { .method = "POST", .url = url, .content_type = "application/connect+json", .body = env,
                        .body_len = n + 5, .headers = hdrs, .timeout_ms = cfg->limits.wall_ms + STREAM_GRACE_MS,
                        .write = on_stream, .progress = on_tick, .userdata = b };
    long st = 0;
    al_error cerr = { 0 };
    int r = al_http_call(&b->envd, &req, &st, NULL, "run", &cerr);
    res->wall_ms = al_now_ms() - t0;
    free(b->frame.buf);
    b->frame = (al_buf){ 0 };
    if (b->timed_out || b->canceled || b->over_output) {
        kill_command(b);
        res->reason = b->canceled ? AL_REASON_CANCELED : b->over_output ? AL_REASON_OUTPUT_LIMIT : AL_REASON_TIMEOUT;
        res->exit_code = -1;
        res->signal = SIGKILL;
        return 0;
    }
    if (r < 0) {
        *err = cerr;
        return r;
    }
    if (st != 200)
        return al_err(err, "run", EIO, "E2B envd: process.Process/Start: HTTP %ld: %s", st, b->stream_error);
    if (b->bad_stream)
        return al_err(err, "run", EPROTO, "E2B envd: process.Process/Start: a malformed stream");
    if (!b->ended && strncmp(b->stream_error, "deadline_exceeded", 17) == 0) {
        kill_command(b);
        res->reason = AL_REASON_TIMEOUT;
        res->exit_code = -1;
        res->signal = SIGKILL;
        return 0;
    }
    if (!b->ended)
        return al_err(err, "run", EIO, "E2B envd: the command's stream ended without its end%s%s",
                      b->stream_error[0] ? ": " : "", b->stream_error);
    int sig = signal_of(b->status);
    res->reason = AL_REASON_EXITED;
    res->exit_code = sig ? -1 : b->exit_code;
    res->signal = sig;
    return 0;
}

/* ---- /out ---- */

static int download(void *ud, const char *rel, al_http_write_fn w, void *wud, al_error *err) {
    e2b *b = ud;
    char path[4200];
    snprintf(path, sizeof path, "/out/%s", rel);
    _cleanup_free_ char *q = al_http_escape(&b->envd, path);
    _cleanup_free_ char *url = NULL;
    if (!q || asprintf(&url, "%s/files?path=%s%s", b->envd_url, q, b->as_root ? "&username=root" : "") < 0)
        return al_err(err, "collect", ENOMEM, "out of memory");
    return al_http_download(&b->envd, url, b->as_root ? connect_json_root + 1 : NULL, w, wud, "collect", err);
}

static int list_out(e2b *b, al_remote_listing *l, al_error *err) {
    json_t *req = json_pack("{s:s, s:I}", "path", "/out", "depth", (json_int_t)b->cfg->limits.max_depth + 1);
    json_t *ans = NULL;
    long st = 0;
    int r = rpc(b, "filesystem.Filesystem/ListDir", req, &ans, &st, err);
    json_decref(req);
    if (r < 0) {
        if (st == 404)
            memset(err, 0, sizeof *err);
        return st == 404 ? 0 : r;
    }
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(ans, "entries"), i, e) {
        const char *path = json_string_value(json_object_get(e, "path"));
        const char *type = json_string_value(json_object_get(e, "type")) ?: "";
        const char *link = json_string_value(json_object_get(e, "symlinkTarget"));
        json_t *size = json_object_get(e, "size");
        if (!path || strncmp(path, "/out/", 5) != 0 || !path[5])
            continue;
        uint64_t sz = json_is_string(size) ? strtoull(json_string_value(size), NULL, 10)
                                           : (uint64_t)json_integer_value(size);
        bool is_link = link && *link;
        if ((r = al_remote_listing_add(l, path + 5, !is_link && strcmp(type, "FILE_TYPE_DIRECTORY") == 0,
                                       !is_link && strcmp(type, "FILE_TYPE_FILE") == 0, sz)) < 0) {
            json_decref(ans);
            return al_err(err, "collect", ENOMEM, "out of memory");
        }
    }
    json_decref(ans);
    return 0;
}

static void destroy(e2b *b) {
    if (!b->made)
        return;
    char url[AL_REMOTE_URL_MAX + 160];
    snprintf(url, sizeof url, "%s/sandboxes/%s", b->o->api_url, b->id);
    al_http_delete(&b->api, url, "e2b");
}

static int open_api(e2b *b, al_error *err) {
    char auth[AL_REMOTE_KEY_MAX + 32];
    snprintf(auth, sizeof auth, "X-API-KEY: %s", b->o->api_key ? b->o->api_key : "");
    const char *hdrs[] = { auth, NULL };
    int r = al_http_open(&b->api, "E2B", hdrs, err);
    explicit_bzero(auth, sizeof auth);
    return r;
}

/* ---- the steps of a run (al_remote_steps) ---- */

static int op_open(void *ud, al_error *err) {
    e2b *b = ud;
    int r = open_api(b, err);
    b->api.deadline_ms = al_now_ms() + b->cfg->limits.wall_ms + SETUP_MARGIN_MS;
    b->api.stop = canceled;
    b->api.stop_ud = b;
    return r;
}

static int op_prepare(void *ud, al_error *err) {
    e2b *b = ud;
    int r;
    if ((r = create(b, err)) < 0 || (r = make_dirs(b, err)) < 0 || (r = stage(b, err)) < 0)
        return r;
    return run_command(b, err);
}

static int op_list_out(void *ud, al_remote_listing *l, al_error *err) { return list_out(ud, l, err); }

static void op_finish(void *ud) {
    e2b *b = ud;
    destroy(b);
    al_http_close(&b->envd);
    al_http_close(&b->api);
}

static bool op_canceled(void *ud) { return ((e2b *)ud)->canceled; }

static const al_remote_ops e2b_ops = { AL_REMOTE_E2B, op_open, op_prepare, op_list_out, download, op_finish,
                                       op_canceled };

int al_remote_e2b_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res) {
    e2b b = { .o = o, .cfg = cfg, .res = res, .as_root = true };
    return al_remote_steps(&e2b_ops, &b, cfg, res);
}

int al_remote_e2b_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err) {
    e2b b = { .o = o };
    int r = open_api(&b, err);
    if (r < 0)
        return r;
    char url[AL_REMOTE_URL_MAX + 64];
    snprintf(url, sizeof url, "%s/v2/sandboxes?limit=100", o->api_url);
    json_t *ans = NULL;
    r = al_http_json(&b.api, "GET", url, NULL, NULL, 30000, &ans, NULL, "sweep", err);
    int n = 0;
    size_t i;
    json_t *sb;
    json_array_foreach(r == 0 ? ans : NULL, i, sb) {
        const char *tag = json_string_value(json_object_get(json_object_get(sb, "metadata"), "airlock"));
        const char *id = json_string_value(json_object_get(sb, "sandboxID"));
        if (!id || !al_remote_tag_stale(tag, prefix, keep) || strlen(id) >= sizeof b.id)
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
