/*
 * A run's packages, installed before its box (install.h). The steps:
 *
 *  1. the layer's key (src/image/layer.c: the run's image, the installer,
 *     the sorted specs, the registries, the scripts flag); a complete
 *     layer under that key is reused as it is;
 *  2. else, holding the key's lock (two runs wanting the same set install
 *     once: the second finds the first's layer when it has the lock), an
 *     install box per language: the native box on the installer image, as
 *     65534 like every box, its network the job's pkg_network through the
 *     egress proxy, its limits the job's pkg_limits, its /out collected by
 *     the box's own collect (beneath /out, regular files and directories
 *     only, links skipped and counted) into a new tmp- directory of the
 *     store within the layer's caps;
 *  3. layer.json from pip's report and npm's lock, read as hostile data
 *     with caps, written last, and the directory renamed to sha256-KEY.
 *
 * A failed step (non-zero exit, timeout, over a cap) ends there: nothing
 * is kept, and the run gets no box. The install's output goes to the
 * caller's callback, at most AL_INSTALL_OUTPUT_MAX bytes in all.
 */
#include "install.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../box/collect.h"
#include "../image/image.h"
#include "../image/layer.h"
#include "../util/hash.h"
#include "../proxy/request.h"
#include "box_net.h"
#include "pkg_spec.h"

#define HOST_CA "/etc/ssl/certs/ca-certificates.crt"
#define BOX_CA "/work/ca-certificates.crt"
#define LOCK_SLACK_MS (60 * 1000)

/* The install scripts: $1 the index (or registry) URL, $2 1 when scripts
 * and source builds may run, then the specs (checked: none is an option,
 * and `--` ends the options anyway). */
static const char PIP_SH[] =
    "set -u\n"
    "url=$1 scripts=$2; shift 2\n"
    "extra=()\n"
    "[ \"$scripts\" = 1 ] || extra+=(--only-binary=:all:)\n"
    /* plain http only reaches a registry the operator gave a range (the
     * proxy refuses it to any other): pip then needs to be told */
    "case $url in http://*) h=${url#http://}; h=${h%%/*}; extra+=(--trusted-host \"${h%%:*}\");; esac\n"
    /* the report to stdout, which only pip holds (a build's output is
     * pip's to capture), not a file of /out, which a package's build code
     * can rewrite after pip wrote it (put_report takes it from the log) */
    "exec python3 -m pip install --target /out/python --report - --no-cache-dir \\\n"
    "    --disable-pip-version-check --no-input --progress-bar off \"${extra[@]}\" --index-url \"$url\" -- \"$@\"\n";
static const char NPM_SH[] =
    "set -u\n"
    "url=$1 scripts=$2; shift 2\n"
    "extra=()\n"
    "[ \"$scripts\" = 1 ] || extra+=(--ignore-scripts)\n"
    "mkdir -p /out/node || exit 1\n"
    "exec npm install --prefix /out/node --no-bin-links --no-audit --no-fund --package-lock --no-update-notifier \\\n"
    "    --loglevel=warn \"${extra[@]}\" --registry \"$url\" -- \"$@\"\n";

/* BUF's LEN bytes of stderr kept as the tail (the last sizeof tail bytes) */
static void keep_tail(al_install *in, const char *buf, size_t len) {
    size_t cap = sizeof in->tail;
    if (len >= cap) {
        memcpy(in->tail, buf + len - cap, cap);
        in->tail_len = cap;
        return;
    }
    if (in->tail_len + len > cap) {
        size_t drop = in->tail_len + len - cap;
        memmove(in->tail, in->tail + drop, in->tail_len - drop);
        in->tail_len -= drop;
    }
    memcpy(in->tail + in->tail_len, buf, len);
    in->tail_len += len;
}

static void say(void *ud, al_stream s, const char *buf, size_t len) {
    al_install *in = ud;
    if (s == AL_STREAM_STDERR)
        keep_tail(in, buf, len);
    if (s == AL_STREAM_STDOUT && in->capture) {
        if (in->report_over || in->report_len + len > AL_LAYER_REPORT_MAX) {
            in->report_over = true;
            return;
        }
        char *n = realloc(in->report, in->report_len + len + 1);
        if (!n) {
            in->report_over = true;
            return;
        }
        memcpy(n + in->report_len, buf, len);
        in->report = n;
        in->report_len += len;
        in->report[in->report_len] = '\0';
    }
    if (!in->on_output || in->output_cut)
        return;
    size_t room = AL_INSTALL_OUTPUT_MAX - in->output_sent;
    if (len > room) {
        in->on_output(in->ud, s, buf, room);
        static const char cut[] = "\n[airlock: the install's output passed 1 MiB; the rest is not shown]\n";
        in->on_output(in->ud, AL_STREAM_STDERR, cut, sizeof cut - 1);
        in->output_cut = true;
        in->output_sent = AL_INSTALL_OUTPUT_MAX;
        return;
    }
    in->on_output(in->ud, s, buf, len);
    in->output_sent += len;
}

/* an install box's network (its proxy) and whose install it is */
typedef struct install_net {
    al_box_net net;
    al_install *in;
} install_net;

static void on_box_output(al_stream s, const char *buf, size_t len, void *userdata) {
    install_net *nx = userdata;
    say(nx->in, s, buf, len);
}

static int on_box_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    install_net *nx = userdata;
    return al_box_net_on_listener(fd, uid, gid, &nx->net, err);
}

/* the installer's digest: its directory is the store's sha256-HEX */
static const char *installer_digest(const char *dir) {
    const char *base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    return strncmp(base, "sha256-", 7) == 0 && al_is_sha256_hex(base + 7) ? base + 7 : NULL;
}

int al_install_image(const char *images_dir, char *ret_dir, size_t len, al_error *err) {
    char digest[65];
    return al_image_resolve(images_dir, AL_INSTALLER_IMAGE, ret_dir, len, digest, err);
}

/* One install box: SCRIPT run with bash on the installer image, its /out
 * collected into OUT_FD within MAX_FILES and MAX_BYTES. Its result in RES. */
typedef struct step {
    const char *name;             /* "python", "node" */
    const char *script;
    const char *url;
    char *const *specs;
    size_t n_specs;
} step;

static int run_step(al_install *in, const step *st, int out_fd, uint64_t max_files, uint64_t max_bytes,
                    uint64_t wall_ms, al_box_result *res, al_error *err) {
    const al_job *j = in->job;
    const char *idigest = installer_digest(j->pkg_installer_dir);
    al_image_runtime ir;
    al_image_runtime_init(&ir, j->pkg_installer_dir, idigest);
    /* the network: the box's proxy (the policy and its registries the job's) */
    install_net *nx = calloc(1, sizeof *nx);
    if (!nx)
        return al_err(err, "install", ENOMEM, "out of memory");
    if (al_box_net_init(&nx->net, j->pkg_network, err) < 0) {
        free(nx);
        return -EINVAL;
    }
    nx->in = in;
    char *argv[AL_JOB_PKG_MAX + 6];
    size_t a = 0;
    argv[a++] = "/bin/bash";
    argv[a++] = "/work/install.sh";
    argv[a++] = (char *)st->url;
    argv[a++] = j->pkg_scripts ? "1" : "0";
    for (size_t i = 0; i < st->n_specs; i++)
        argv[a++] = st->specs[i];
    argv[a] = NULL;
    al_box_file file = { "install.sh", st->script, strlen(st->script), 0644 };
    /* the host's CA bundle, which the operator keeps (a corporate CA in
     * it included): pip and npm trust it, not the image's own */
    const char *inputs[1] = { HOST_CA };
    bool ca = access(HOST_CA, R_OK) == 0;
    static char *const ca_env[] = { "PIP_CERT=" BOX_CA, "NPM_CONFIG_CAFILE=" BOX_CA, "SSL_CERT_FILE=" BOX_CA,
                                    "NODE_EXTRA_CA_CERTS=" BOX_CA };
    al_box_limits l = j->pkg_limits;
    l.wall_ms = wall_ms;
    l.max_artifacts = max_files;
    l.max_artifact_bytes = max_bytes;
    l.max_artifacts_total = max_bytes;
    l.max_depth = 48;
    /* /out holds the layer; /tmp pip's builds and npm's cache */
    if (l.tmpfs_bytes < max_bytes + (64ULL << 20))
        l.tmpfs_bytes = max_bytes + (64ULL << 20);
    if (l.tmpfs_inodes < max_files + 8192)
        l.tmpfs_inodes = max_files + 8192;
    al_box_config cfg = {
        .runtime = &ir.rt, .argv = argv, .envp = nx->net.env, .files = &file, .n_files = 1,
        .inputs = ca ? inputs : NULL, .n_inputs = ca ? 1 : 0, .stdin_fd = -1, .out_dirfd = out_fd,
        .limits = l, .on_output = on_box_output, .userdata = nx, .cancel_fd = in->cancel_fd,
        .listen_port = al_box_net_listen_port(&nx->net), .on_listener = on_box_listener,
        .env_extra = ca ? ca_env : NULL, .n_env_extra = ca ? ELEMENTSOF(ca_env) : 0,
    };
    al_box_run(&cfg, res);
    json_decref(al_box_net_finish(&nx->net, res));
    free(nx);
    return 0;
}

/* Whether LINE (N bytes) is one that says why pip or npm failed: pip's
 * "ERROR: ...", "error: ..." and "× ..." lines; npm's "npm ERR! ..." / "npm error ..." lines but
 * their code, log-file and blank ones */
static bool says_why(const char *line, size_t n, bool pip) {
    if (pip) /* pip 23's "ERROR: ", pip 25's "error: " and its "× " summary */
        return n > 7 && (strncmp(line, "ERROR: ", 7) == 0 || strncmp(line, "error: ", 7) == 0 ||
                         strncmp(line, "\xc3\x97 ", 3) == 0);
    size_t p = n > 8 && strncmp(line, "npm ERR!", 8) == 0 ? 8 : n > 9 && strncmp(line, "npm error", 9) == 0 ? 9 : 0;
    if (!p)
        return false;
    while (p < n && line[p] == ' ')
        p++;
    return p + 4 < n && strncmp(line + p, "code ", 5) != 0 && strncmp(line + p, "errno ", 6) != 0 &&
           !memmem(line + p, n - p, "complete log", 12) && line[p] != '/';
}

/* The words of the install's stderr tail that say why it failed, at most
 * two lines, printable ASCII, in BUF ("" when none): the failure's message
 * carries them, since a reader of the result alone (an agent) has no
 * other view of the output */
static void why_from_tail(const al_install *in, bool pip, char *buf, size_t len) {
    size_t o = 0, found = 0;
    buf[0] = '\0';
    const char *t = in->tail, *end = in->tail + in->tail_len;
    /* from the first whole line of the tail */
    const char *nl = in->tail_len == sizeof in->tail ? memchr(t, '\n', in->tail_len) : NULL;
    if (nl)
        t = nl + 1;
    while (t < end && found < 2) {
        const char *e = memchr(t, '\n', (size_t)(end - t));
        size_t n = e ? (size_t)(e - t) : (size_t)(end - t);
        if (says_why(t, n, pip)) {
            size_t skip = strncmp(t, "\xc3\x97 ", 3) == 0 ? 3 : 0;
            t += skip;
            n -= skip;
            if (found++ && o + 2 < len) {
                buf[o++] = ';';
                buf[o++] = ' ';
            }
            for (size_t i = 0; i < n && o + 1 < len; i++)
                buf[o++] = (t[i] >= 0x20 && t[i] < 0x7f) ? t[i] : '?';
            buf[o] = '\0';
        }
        t += n + 1;
    }
}

/* Why ST's box failed (RES), in ERR: 0 when it did not. */
static int step_failed(al_install *in, const step *st, const al_box_result *res, al_error *err) {
    in->exit_code = res->exit_code;
    if (res->reason == AL_REASON_EXITED && res->exit_code == 0) {
        for (size_t i = 0; i < res->n_skipped; i++)
            /* a cap's skip fails the install; a link or special file left out is counted */
            if (res->skipped[i].kind == AL_SKIP_CAP) {
                in->failed_step = st->name;
                return al_err(err, "install", EFBIG, "the %s install is over the layer's caps: %s: %s", st->name,
                              res->skipped[i].path, res->skipped[i].why);
            }
        return 0;
    }
    in->failed_step = st->name;
    const char *tool = strcmp(st->name, "python") == 0 ? "pip" : "npm";
    switch (res->reason) {
    case AL_REASON_EXITED: {
        char why[360];
        why_from_tail(in, strcmp(tool, "pip") == 0, why, sizeof why);
        return al_err(err, "install", EIO, "the %s install (%s) failed with exit code %d: %s%s(its whole output: the "
                      "run's installing events)", st->name, tool, res->exit_code, why, why[0] ? " " : "");
    }
    case AL_REASON_TIMEOUT:
        return al_err(err, "install", ETIMEDOUT, "the %s install (%s) did not finish within the install timeout",
                      st->name, tool);
    case AL_REASON_MEMORY:
        return al_err(err, "install", ENOMEM, "the %s install (%s) ran out of its memory limit", st->name, tool);
    case AL_REASON_CANCELED:
        return al_err(err, "install", ECANCELED, "the run was canceled during the %s install", st->name);
    case AL_REASON_ERROR:
        return al_err(err, "install", res->error.err ? res->error.err : EIO, "the %s install box failed: %s: %s",
                      st->name, res->error.step, res->error.msg);
    default:
        return al_err(err, "install", EIO, "the %s install (%s) ended: %s", st->name, tool, al_reason_name(res->reason));
    }
}

/* Whether the layer under TFD holds a package manager (asked, or pulled
 * in by a package): the run's box never holds one (its image has none,
 * docs/operations.md), and a layer is in the run's box. What it found in
 * *RET_WHAT, the language in *RET_LANG. The installers' own top-level
 * trees are looked for, beneath the layer: pip's, uv's, pipx's, poetry's,
 * pdm's, conda's; npm's, yarn's, pnpm's, corepack's. */
static bool holds_package_manager(int tfd, const char **ret_what, const char **ret_lang) {
    static const struct { const char *lang, *path, *what; } pm[] = {
        { "python", "python/pip", "pip" },          { "python", "python/uv", "uv" },
        { "python", "python/pipx", "pipx" },        { "python", "python/poetry", "poetry" },
        { "python", "python/pdm", "pdm" },          { "python", "python/conda", "conda" },
        { "node", "node/node_modules/npm", "npm" }, { "node", "node/node_modules/yarn", "yarn" },
        { "node", "node/node_modules/pnpm", "pnpm" }, { "node", "node/node_modules/corepack", "corepack" },
    };
    for (size_t i = 0; i < ELEMENTSOF(pm); i++) {
        int fd = al_openat_beneath(tfd, pm[i].path, O_PATH, 0);
        if (fd >= 0) {
            close(fd);
            *ret_what = pm[i].what;
            *ret_lang = pm[i].lang;
            return true;
        }
    }
    return false;
}

/* pip's report, as its stdout said it, in place of whatever /out held
 * under that name (a package's build code may have written one) */
static int put_report(al_install *in, int tfd, al_error *err) {
    in->failed_step = "python";
    if (in->report_over)
        return al_err(err, "install", EFBIG, "pip's report is more than %u bytes", AL_LAYER_REPORT_MAX);
    if (unlinkat(tfd, "python-report.json", 0) < 0 && errno != ENOENT)
        return al_err(err, "install", errno, "python-report.json: %m");
    /* pip's stdout is its log lines and, between them, the report as
     * rich prints it: a line "{", indented lines, a line "}" (no log line
     * is a lone brace: each has its words) */
    const char *o = in->report, *a = NULL, *b = NULL;
    if (o)
        a = strncmp(o, "{\n", 2) == 0 ? o : strstr(o, "\n{\n");
    if (a && a != o)
        a++;
    if (a)
        b = strstr(a, "\n}\n") ? strstr(a, "\n}\n") + 2 : (in->report_len >= 2 && strcmp(o + in->report_len - 2, "\n}") == 0)
                                                             ? o + in->report_len : NULL;
    if (!a || !b)
        return al_err(err, "install", EINVAL, "pip printed no report");
    _cleanup_close_ int fd = openat(tfd, "python-report.json", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || al_write_all(fd, a, (size_t)(b - a)) < 0)
        return al_err(err, "install", errno, "python-report.json: %m");
    in->failed_step = NULL;
    return 0;
}

/* The steps into a new tmp- layer, layer.json, renamed to sha256-KEY. */
static int install_new(al_install *in, al_error *err) {
    const al_job *j = in->job;
    char tmp[16];
    _cleanup_close_ int tfd = -1;
    int r = al_layer_tmp(in->layer_fd, tmp, &tfd, err);
    if (r < 0)
        return r;
    step steps[2] = {
        { "python", PIP_SH, j->pkg_index_python, j->pkg_python, j->n_pkg_python },
        { "node", NPM_SH, j->pkg_registry_node, j->pkg_node, j->n_pkg_node },
    };
    uint64_t files = 0, bytes = 0, start = al_now_ms(), skipped_links = 0;
    uint64_t max_files = j->pkg_layer_max_files ? j->pkg_layer_max_files : 50000;
    uint64_t max_bytes = j->pkg_layer_max_bytes ? j->pkg_layer_max_bytes : 512ULL << 20;
    uint64_t wall = j->pkg_limits.wall_ms;
    for (size_t s = 0; s < 2 && r == 0; s++) {
        if (!steps[s].n_specs)
            continue;
        uint64_t spent = al_now_ms() - start;
        al_box_result res;
        /* the second step gets what the first left of the time and caps */
        if (spent >= wall) {
            in->failed_step = steps[s].name;
            r = al_err(err, "install", ETIMEDOUT, "the install timeout passed before the %s install", steps[s].name);
            break;
        }
        in->capture = s == 0;
        r = run_step(in, &steps[s], tfd, max_files - files, max_bytes - bytes, wall - spent, &res, err);
        in->capture = false;
        if (r < 0) {
            in->failed_step = steps[s].name;
            break;
        }
        r = step_failed(in, &steps[s], &res, err);
        if (r == 0 && s == 0)
            r = put_report(in, tfd, err);
        files += res.n_artifacts;
        for (size_t i = 0; i < res.n_artifacts; i++)
            bytes += res.artifacts[i].size;
        for (size_t i = 0; i < res.n_skipped; i++)
            skipped_links += res.skipped[i].kind == AL_SKIP_LINK;
        al_box_result_free(&res);
    }
    const char *pm = NULL, *pm_lang = NULL;
    if (r == 0 && holds_package_manager(tfd, &pm, &pm_lang)) {
        in->failed_step = pm_lang;
        r = al_err(err, "install", EPERM, "the %s packages would put a package manager (%s) in the run's box, asked "
                   "or pulled in by a package: a run's box never holds one; ask for the packages the code needs "
                   "instead", pm_lang, pm);
    }
    json_t *py = NULL, *node = NULL;
    if (r == 0 && (r = al_layer_python_report(tfd, &py, err)) == 0)
        r = al_layer_node_report(tfd, &node, err);
    if (r < 0) {
        if (!in->failed_step)
            in->failed_step = py ? "node" : "python";
        json_decref(py);
        json_decref(node);
        al_layer_discard(in->layer_fd, tmp);
        return r;
    }
    char image[80], installer[80];
    snprintf(image, sizeof image, "%s%s", in->image_digest ? "sha256:" : "", in->image_digest ? in->image_digest : "host");
    snprintf(installer, sizeof installer, "sha256:%s", installer_digest(j->pkg_installer_dir));
    in->meta = json_pack("{s:s, s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I}", "key", in->key, "image", image, "installer",
                         installer, "python", py, "node", node, "files", (json_int_t)files, "bytes", (json_int_t)bytes,
                         "skipped_links", (json_int_t)skipped_links, "created_at", (json_int_t)time(NULL));
    if (!in->meta) {
        al_layer_discard(in->layer_fd, tmp);
        return al_err(err, "install", ENOMEM, "layer.json: out of memory");
    }
    if ((r = al_layer_commit(in->layer_fd, tmp, in->key, in->meta, err)) < 0) {
        al_layer_discard(in->layer_fd, tmp);
        return r;
    }
    return 0;
}

/* The found layer's trees as the run box's binds: python/ at
 * /opt/airlock/python (and PYTHONPATH), node/node_modules at /node_modules
 * (Node's walk up from /work finds it, for require and import alike). */
static int layer_binds(al_install *in, int dirfd, al_error *err) {
    static char pythonpath[] = "PYTHONPATH=/opt/airlock/python";
    const al_job *j = in->job;
    struct { bool want; const char *path, *box; } b[] = {
        { j->n_pkg_python > 0, "python", "/opt/airlock/python" },
        { j->n_pkg_node > 0, "node/node_modules", "/node_modules" },
    };
    for (size_t i = 0; i < ELEMENTSOF(b); i++) {
        if (!b[i].want)
            continue;
        int fd = openat(dirfd, b[i].path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        /* a set that installs nothing at all (every spec already... never:
         * pip and npm make the directory) is an error, said */
        if (fd < 0)
            return al_err(err, "install", errno, "the layer has no %s: %m", b[i].path);
        snprintf(in->bind_paths[in->n_binds], sizeof in->bind_paths[0], "%s/sha256-%s/%s", j->pkg_layers_dir,
                 in->key, b[i].path);
        in->binds[in->n_binds] = (al_box_bind){ fd, in->bind_paths[in->n_binds], b[i].box };
        in->n_binds++;
    }
    if (j->n_pkg_python)
        in->env[in->n_env++] = pythonpath;
    return 0;
}

static int check_job(al_install *in, al_error *err) {
    const al_job *j = in->job;
    al_error e = { 0 };
    in->failed_step = "prepare";
    if (!j->pkg_installer_dir || !installer_digest(j->pkg_installer_dir))
        return al_err(err, "install", ENOENT, "package installs need the installer image (airlock image build "
                      "installer), and this service has none");
    if (!j->pkg_layers_dir)
        return al_err(err, "install", EINVAL, "the job names no layers directory");
    if ((j->n_pkg_python && !j->pkg_index_python) || (j->n_pkg_node && !j->pkg_registry_node))
        return al_err(err, "install", EINVAL, "the job names no index (python) or registry (node) URL");
    for (size_t i = 0; i < j->n_pkg_python + j->n_pkg_node; i++) {
        bool py = i < j->n_pkg_python;
        if (al_pkg_spec_check(py ? AL_PKG_PYTHON : AL_PKG_NODE, py ? j->pkg_python[i] : j->pkg_node[i - j->n_pkg_python],
                              &e) < 0)
            return al_err(err, "install", EINVAL, "%s", e.msg);
    }
    in->failed_step = NULL;
    return 0;
}

int al_install_run(al_install *in, al_error *err) {
    const al_job *j = in->job;
    uint64_t start = al_now_ms();
    in->layer_fd = in->use_fd = -1;
    in->exit_code = -1;
    in->n_binds = in->n_env = 0;
    int r = check_job(in, err);
    if (r < 0)
        return r;
    al_layer_want w = { in->image_digest, installer_digest(j->pkg_installer_dir), j->pkg_python, j->n_pkg_python,
                        j->pkg_node, j->n_pkg_node, j->pkg_index_python, j->pkg_registry_node, j->pkg_scripts };
    al_layer_key(&w, in->key);
    in->failed_step = "prepare";
    if ((r = al_layer_dir_open(j->pkg_layers_dir, &in->layer_fd, err)) < 0)
        return r;
    _cleanup_close_ int dirfd = -1;
    uint64_t wait_ms = j->pkg_limits.wall_ms + LOCK_SLACK_MS;
    bool installed = false;
    /* The layer is used under its lock held shared (al_layer_use) until
     * the run ends: the collector takes it exclusively, so it never
     * removes a layer a box has mounted. Found, then locked, then found
     * again (a collector may have removed it in between); not there: it
     * is installed under the lock held exclusively, and the loop comes
     * round to use it. A collector between the two is a bounded race. */
    for (int attempt = 0; attempt < 4; attempt++) {
        if (dirfd >= 0)
            close(TAKE_FD(dirfd));
        json_decref(in->meta);
        in->meta = NULL;
        r = al_layer_find(in->layer_fd, in->key, NULL, NULL, err);
        if (r < 0)
            return r;
        if (r == 1) {
            if ((r = al_layer_use(in->layer_fd, in->key, in->cancel_fd, wait_ms, &in->use_fd, err)) < 0)
                return r;
            if ((r = al_layer_find(in->layer_fd, in->key, &dirfd, &in->meta, err)) < 0)
                return r;
            if (r == 1)
                break;
            close(TAKE_FD(in->use_fd));
            continue;
        }
        /* not there: install it, holding its lock; a helper that held it
         * before this one may have made it meanwhile */
        /* (the other install is bound by the same timeout) */
        _cleanup_close_ int lockfd = -1;
        if ((r = al_layer_lock(in->layer_fd, in->key, in->cancel_fd, wait_ms, &lockfd, err)) < 0)
            return r;
        if ((r = al_layer_find(in->layer_fd, in->key, NULL, NULL, err)) < 0)
            return r;
        if (r == 0) {
            in->failed_step = NULL;
            /* the collect makes the layer's directories: readable by every
             * box's user whatever the service's umask (its unit's is 0077) */
            mode_t um = umask(022);
            r = install_new(in, err);
            umask(um);
            if (r < 0)
                return r;
            in->failed_step = "prepare";
            installed = true;
        }
    }
    if (in->use_fd < 0)
        return al_err(err, "install", ENOENT, "the layer was removed each time it was about to be used");
    in->reused = !installed;
    /* its last use, for the collector's age and LRU rules */
    al_layer_touch(dirfd);
    in->failed_step = "prepare";
    if ((r = layer_binds(in, dirfd, err)) < 0)
        return r;
    in->failed_step = NULL;
    in->ms = al_now_ms() - start;
    return 0;
}

void al_install_free(al_install *in) {
    free(in->report);
    in->report = NULL;
    in->report_len = 0;
    for (size_t i = 0; i < in->n_binds; i++)
        if (in->binds[i].host_fd >= 0)
            close(in->binds[i].host_fd);
    in->n_binds = 0;
    if (in->layer_fd >= 0)
        close(in->layer_fd);
    in->layer_fd = -1;
    /* the run's box is gone: the layer may be collected */
    if (in->use_fd >= 0)
        close(in->use_fd);
    in->use_fd = -1;
    json_decref(in->meta);
    in->meta = NULL;
}

static json_t *list_of(const al_install *in, const char *k) {
    json_t *v = in->meta ? json_object_get(in->meta, k) : NULL;
    return json_is_array(v) ? json_incref(v) : json_array();
}

json_t *al_install_event(const al_install *in) {
    char layer[80];
    snprintf(layer, sizeof layer, "sha256:%s", in->key);
    return json_pack("{s:s, s:s, s:b, s:I, s:o, s:o}", "type", "installed", "layer", layer, "reused", in->reused, "ms",
                     (json_int_t)in->ms, "python", list_of(in, "python"), "node", list_of(in, "node"));
}

json_t *al_install_result(const al_install *in) {
    char layer[80];
    snprintf(layer, sizeof layer, "sha256:%s", in->key);
    json_t *o = json_pack("{s:s, s:b, s:I, s:o, s:o}", "layer", layer, "reused", in->reused, "install_ms",
                          (json_int_t)in->ms, "python", list_of(in, "python"), "node", list_of(in, "node"));
    if (o && in->failed_step)
        json_object_set_new(o, "failed", json_string(in->failed_step));
    return o;
}

/* URL's host and port, of an http or https URL (*RET_PLAIN: http) */
static int url_host(const char *url, al_host *h, uint16_t *port, bool *ret_plain) {
    bool plain = strncmp(url, "http://", 7) == 0;
    if (!plain && strncmp(url, "https://", 8) != 0)
        return -EINVAL;
    const char *a = url + (plain ? 7 : 8);
    size_t n = strcspn(a, "/?#");
    char host[256];
    if (!n || memchr(a, '@', n) || al_proxy_split_authority(a, n, plain ? 80 : 443, host, sizeof host, port) < 0 ||
        al_host_parse(host, h) != AL_HOST_NAME)
        return -EINVAL;
    *ret_plain = plain;
    return 0;
}

int al_install_network(const char *registries, const char *index_python, const char *registry_node, char *ret,
                       size_t len, al_error *err) {
    const char *list = registries && *registries ? registries : AL_NET_DEFAULT_PACKAGES;
    int n = snprintf(ret, len, "packages:%s", list);
    if (n < 0 || (size_t)n >= len)
        return al_err(err, "packages", E2BIG, "package_registries is too long");
    /* (large: on the heap; the service may call this from any thread) */
    _cleanup_free_ al_net_policy *p = calloc(1, sizeof *p);
    if (!p)
        return al_err(err, "packages", ENOMEM, "out of memory");
    al_error perr = { 0 };
    if (al_net_policy_parse(ret, p, &perr) < 0)
        return al_err(err, "packages", EINVAL, "package_registries: %s", perr.msg);
    const char *urls[2] = { index_python, registry_node }, *what[2] = { "package_index_python", "package_registry_node" };
    for (size_t i = 0; i < 2; i++) {
        if (!urls[i])
            continue;
        al_host h;
        uint16_t port = 0;
        bool plain = false;
        char why[384];
        if (strlen(urls[i]) > 1024 || url_host(urls[i], &h, &port, &plain) < 0)
            return al_err(err, "packages", EINVAL, "%s \"%.200s\" is not an http(s) URL naming a host", what[i], urls[i]);
        /* the usual way here: package_registries given for one language
         * while the other's URL stays the default: say both ways out */
        if (!al_net_decide(p, &h, port, why, sizeof why))
            return al_err(err, "packages", EINVAL,
                          "%s %.200s: %s: add its host to package_registries (the hosts installs may reach: %.300s), "
                          "or set %s to a URL of one of them",
                          what[i], urls[i], why, list, what[i]);
        if (plain && !al_net_plain_http_ok(p, &h, why, sizeof why))
            return al_err(err, "packages", EINVAL, "%s: %s", what[i], why);
    }
    return 0;
}

/* LAYERS_DIR opened, without making it: 0 with no fd when it is not there */
static int layers_open(const char *layers_dir, int *ret_fd, al_error *err) {
    *ret_fd = -1;
    struct stat st;
    if (!layers_dir || layers_dir[0] != '/')
        return al_err(err, "install", EINVAL, "the layers directory must be an absolute path");
    if (stat(layers_dir, &st) < 0)
        return errno == ENOENT ? 0 : al_err(err, "install", errno, "stat %s: %m", layers_dir);
    return al_layer_dir_open(layers_dir, ret_fd, err);
}

int al_install_layers_collect(const char *layers_dir, int64_t now, int64_t max_age_s, uint64_t max_bytes,
                              al_layer_removed_fn fn, void *ud, al_error *err) {
    _cleanup_close_ int fd = -1;
    int r = layers_open(layers_dir, &fd, err);
    if (r < 0 || fd < 0)
        return r;
    return al_layer_collect(fd, now, max_age_s, max_bytes, fn, ud, err);
}

int al_install_layers_list(const char *layers_dir, al_layer_info **ret, size_t *ret_n, al_error *err) {
    *ret = NULL;
    *ret_n = 0;
    _cleanup_close_ int fd = -1;
    int r = layers_open(layers_dir, &fd, err);
    if (r < 0 || fd < 0)
        return r;
    return al_layer_list(fd, ret, ret_n, err);
}
