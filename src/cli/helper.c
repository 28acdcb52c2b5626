/*
 * `airlock helper`: the single-threaded process the service's native
 * driver starts for each run. It reads one job (JSON) on stdin, runs the
 * box, and writes events as JSON lines on stdout:
 *   {"type":"started"}
 *   {"type":"stdout"|"stderr","data_base64":"..."} (the bytes exactly)
 *   {"type":"result","result":{...the fields of airlock run --json...}}
 * SIGTERM cancels the box, and so does the end of stdin: the service keeps
 * it open for the run's life, so its death (any death) ends the box. Job,
 * one line on stdin:
 *   {"language", "code", "inputs": [host paths], "out_dir": host dir,
 *    "limits": {"timeout_s", "memory_bytes", "cpu_millis", "pids",
 *               "output_bytes", "tmpfs_bytes"},
 *    "image_dir", "image_digest" (optional: run on that image),
 *    "args": [strings] (optional), "stdin_path": host file (optional),
 *    "network": policy, as `airlock run --net` takes it (optional: offline),
 *    "skill_dir": host dir bound read-only at /skill, "script": the path in
 *    the box to run instead of the code (both optional: a skill's run),
 *    "driver": "docker" with "docker_socket" and "docker_runtime" (runc,
 *    runsc) to run it in a container instead (airlock-server only), and
 *    "docker_box": {"id", "image_id", "holder", "uid", "hold_until",
 *    "lock_fds": [the fds of the service's locks of holder and uid, passed]}:
 *    the container the service made ahead of need, to run in if still fit
 *    (the service removes it after), else "docker_uids": {"holder", "uid",
 *    "lock_fds"}: the uids of the container to make (both optional)}
 * The result carries "network": {policy, mode, egress: [...], egress_dropped}.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../box/runtime_ro.h"
#include "../box/uidpool.h"
#include "../drivers/driver.h"
#ifdef AIRLOCK_SERVER
#include "../docker/docker.h"
#endif
#include "../image/image.h"
#include "../lang/lang.h"
#include "cli.h"
#include "net.h"

#define MAX_INPUTS 1024

static void emit(json_t *ev) {
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n';
    al_write_all(STDOUT_FILENO, s, n + 1);
    free(s);
}

static void on_output(al_stream st, const char *buf, size_t len, void *userdata) {
    /* bytes, exactly: a chunk may hold a NUL, bytes that are not UTF-8, or
     * end inside a character; the service decides how they are shown */
    emit(json_pack("{s:s, s:o}", "type", st == AL_STREAM_STDOUT ? "stdout" : "stderr", "data_base64", cli_base64(buf, len)));
}

static int on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    return cli_net_on_listener(fd, uid, gid, userdata, err);
}

static void on_started(void *userdata) { emit(json_pack("{s:s}", "type", "started")); }

static int fail(const char *step, const char *msg) {
    emit(json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "step", step, "message", msg));
    return 125;
}

/* One job's parts, parsed, with the storage its box config points into. */
typedef struct job {
    json_t *doc;
    const al_lang *lang;
    const char *code;
    al_box_limits lim;
    const char *inputs[MAX_INPUTS];
    size_t n_inputs;
    int out_fd, in_fd;
    al_image_runtime ir;
    al_runtime_ro ro;
    const al_runtime *runtime;
    const char *img_dir, *img_digest, *skill_dir, *script;
    char *box_argv[256 + 3];
    cli_net *net;
    al_box_file sf;
} job;

static void job_free(job *j) {
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->in_fd >= 0)
        close(j->in_fd);
    free(j->net);
    json_decref(j->doc);
}

/* Stdin's next line (a job) as JSON: at most AL_JOB_MAX bytes, what follows
 * its newline kept in BUF for the next call. NULL at its end or on error,
 * with why in *WHY. */
typedef struct line_reader {
    char *buf;
    size_t len;
} line_reader;

static json_t *read_job(line_reader *lr, const char **why) {
    for (;;) {
        char *nl = memchr(lr->buf, '\n', lr->len);
        if (nl) {
            size_t n = (size_t)(nl - lr->buf);
            json_error_t jerr;
            json_t *doc = json_loadb(lr->buf, n, 0, &jerr);
            memmove(lr->buf, nl + 1, lr->len - n - 1);
            lr->len -= n + 1;
            *why = doc ? NULL : "the job is not JSON";
            return doc;
        }
        if (lr->len == AL_JOB_MAX) {
            *why = "job larger than AL_JOB_MAX (16 MiB)";
            return NULL;
        }
        ssize_t n = read(STDIN_FILENO, lr->buf + lr->len, AL_JOB_MAX - lr->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* a last job without its newline */
            json_t *doc = lr->len ? json_loadb(lr->buf, lr->len, 0, NULL) : NULL;
            lr->len = 0;
            *why = doc ? NULL : "no job came";
            return doc;
        }
        lr->len += (size_t)n;
    }
}

/* DOC's parts into J (which owns DOC from here). CODE: the code to run
 * (NULL: the job's "code"); OUT_NEEDED: the job must name its out_dir.
 * 0, or the failed step and why. */
static int job_parse(json_t *doc, job *j, const char *code, bool out_needed, const char **step, const char **why) {
    *j = (job){ .doc = doc, .out_fd = -1, .in_fd = -1, .runtime = &al_runtime_host };
    const char *lang_name = json_string_value(json_object_get(doc, "language"));
    const char *out_dir = json_string_value(json_object_get(doc, "out_dir"));
    j->lang = lang_name ? al_lang_by_name(lang_name) : NULL;
    j->code = code ? code : json_string_value(json_object_get(doc, "code"));
    *step = "job";
    if (!j->lang || !j->code || (out_needed && !out_dir)) {
        *why = "the job needs language, code and out_dir";
        return -EINVAL;
    }
    al_box_limits_from_job(json_object_get(doc, "limits"), &j->lim);
    json_t *ins = json_object_get(doc, "inputs");
    for (size_t i = 0; i < json_array_size(ins) && j->n_inputs < MAX_INPUTS; i++)
        if (json_is_string(json_array_get(ins, i)))
            j->inputs[j->n_inputs++] = json_string_value(json_array_get(ins, i));
    if (out_dir && (j->out_fd = open(out_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC)) < 0) {
        *why = "cannot open out_dir";
        return -errno;
    }
    /* the runtime: the host's, or an image the service resolved */
    j->img_dir = json_string_value(json_object_get(doc, "image_dir"));
    j->img_digest = json_string_value(json_object_get(doc, "image_digest"));
    if (j->img_dir && j->img_digest) {
        al_image_runtime_init(&j->ir, j->img_dir, j->img_digest);
        j->runtime = &j->ir.rt;
    }
    /* a skill: its bundle read-only at /skill, its entrypoint run from there */
    j->skill_dir = json_string_value(json_object_get(doc, "skill_dir"));
    j->script = json_string_value(json_object_get(doc, "script"));
    if (j->skill_dir && j->script) {
        al_runtime_ro_init(&j->ro, j->runtime, j->skill_dir, "skill");
        j->runtime = &j->ro.rt;
    }
    /* the script's arguments and standard input, when the run has them */
    json_t *jargs = json_object_get(doc, "args");
    size_t nargs = json_array_size(jargs) < 256 ? json_array_size(jargs) : 256;
    j->box_argv[0] = (char *)j->lang->interpreter;
    j->box_argv[1] = (char *)(j->skill_dir && j->script ? j->script : j->lang->default_file);
    for (size_t k = 0; k < nargs; k++)
        j->box_argv[2 + k] = (char *)(json_string_value(json_array_get(jargs, k)) ?: "");
    j->box_argv[2 + nargs] = NULL;
    const char *stdin_path = json_string_value(json_object_get(doc, "stdin_path"));
    if (stdin_path && (j->in_fd = open(stdin_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        *why = "cannot open stdin_path";
        return -errno;
    }
    static al_error nerr;
    if (!(j->net = calloc(1, sizeof *j->net)) ||
        cli_net_init(j->net, json_string_value(json_object_get(doc, "network")), &nerr) < 0) {
        *step = "network";
        *why = j->net ? nerr.msg : "out of memory";
        return -EINVAL;
    }
    j->sf = (al_box_file){ j->lang->default_file, j->code, strlen(j->code), 0644 };
    return 0;
}

/* J as a box's config, cancelled through CANCEL. */
static void job_config(job *j, int cancel, al_box_config *cfg) {
    *cfg = (al_box_config){
        .runtime = j->runtime,
        .argv = j->box_argv,
        .envp = j->net->env,
        .files = &j->sf,
        .n_files = j->skill_dir && j->script ? 0 : 1,
        .inputs = j->inputs,
        .n_inputs = j->n_inputs,
        .stdin_fd = j->in_fd,
        .out_dirfd = j->out_fd,
        .limits = j->lim,
        .on_output = on_output,
        .on_started = on_started,
        .cancel_fd = cancel,
        .userdata = j->net,
        .listen_port = cli_net_listen_port(j->net),
        .on_listener = on_listener,
    };
}

/* A warm box's handoff (box.h): say it is ready, then read its run, which
 * must be of the shape the box was made for. */
typedef struct warm_ctx {
    line_reader *lr;
    const job *shape;
    job run;
    bool have_run;
    int cancel;
    json_t *run_doc;              /* the run, when it came with the box's job */
} warm_ctx;

static void warm_ready(void *ud, uint64_t memory_bytes) {
    emit(json_pack("{s:s, s:I}", "type", "ready", "memory_bytes", (json_int_t)memory_bytes));
}

static int warm_handoff(void *ud, al_box_config *run, al_error *err) {
    warm_ctx *w = ud;
    const char *why = NULL, *step = NULL;
    json_t *doc = w->run_doc ? w->run_doc : read_job(w->lr, &why);
    w->run_doc = NULL;
    if (!doc)
        return al_err(err, "warm", ECANCELED, "%s", why);
    int r = job_parse(doc, &w->run, NULL, true, &step, &why);
    w->have_run = true;
    if (r < 0)
        return al_err(err, step, -r, "%s", why);
    const job *s = w->shape, *j = &w->run;
    /* the box was made for one shape of run: any other is not this box's */
    if (j->lang != s->lang || !j->img_digest != !s->img_digest ||
        (j->img_digest && strcmp(j->img_digest, s->img_digest) != 0) ||
        memcmp(&j->lim, &s->lim, sizeof j->lim) != 0 || j->skill_dir || cli_net_listen_port(j->net) ||
        json_object_get(j->doc, "driver") || (j->in_fd >= 0 && strcmp(j->lang->name, "python") != 0))
        return al_err(err, "warm", EINVAL, "the run is not of the shape this warm box was made for");
    job_config(&w->run, w->cancel, run);
    return 0;
}

#ifdef AIRLOCK_SERVER
/* The service's locks of HOLDER's and UID's (J's "lock_fds"), passed as the
 * same open files: held by this process too until it ends, so that they
 * outlive a service killed before the run is over. Each is checked to be
 * that uid's lock file, and kept from what this process starts. */
static bool adopt_locks(json_t *j, uid_t holder, uid_t uid, int ret_fds[2]) {
    json_t *lf = json_object_get(j, "lock_fds");
    uid_t uids[2] = { holder, uid };
    for (size_t k = 0; k < 2; k++) {
        int fd = (int)json_integer_value(json_array_get(lf, k));
        if (json_array_size(lf) != 2 || fd <= 2 || !al_uid_lock_is(fd, uids[k]) || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
            return false;
        ret_fds[k] = fd;
    }
    return true;
}
#endif

#ifdef AIRLOCK_SERVER
/* "docker_keep": {"id", "holder", "uid", "lock_fds"}: this process is the
 * keeper of a container the service made ahead of need (docker_pool.c),
 * holding its uids' locks until the container's init has ended, and
 * removing it once the service has closed this process's stdin (done with
 * it, or killed). Returns only when it cannot keep it. */
static int keep_held(json_t *doc, json_t *k) {
    /* what `ps` and the service's tests tell apart from a run's helper */
    prctl(PR_SET_NAME, "airlock-keeper");
    al_docker_runtime rt = AL_DOCKER_RUNC;
    const char *rts = json_string_value(json_object_get(doc, "docker_runtime"));
    if (rts && al_docker_runtime_from_name(rts, &rt) < 0)
        return fail("job", "docker_runtime: want runc or runsc");
    int fds[2];
    if (!adopt_locks(k, (uid_t)json_integer_value(json_object_get(k, "holder")),
                     (uid_t)json_integer_value(json_object_get(k, "uid")), fds))
        return fail("job", "docker_keep: the locks of its uids were not passed");
    al_error err = { 0 };
    al_docker_keep_held(json_string_value(json_object_get(doc, "docker_socket")), rt,
                        json_string_value(json_object_get(k, "id")), fds, STDIN_FILENO, &err);
    return fail(err.step[0] ? err.step : "keeper", err.msg);
}
#endif

/* The number of a fd the service passed (job field NAME), close-on-exec
 * from here; -1 when the job names none or it is not open. */
static int passed_fd(json_t *doc, const char *name) {
    json_t *v = json_object_get(doc, name);
    int fd = json_is_integer(v) ? (int)json_integer_value(v) : -1;
    if (fd <= 2 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return -1;
    return fd;
}

static void zygote_started(void *userdata) {
    emit(json_pack("{s:s, s:I}", "type", "ready", "memory_bytes", (json_int_t)0));
}

/* RUN, handed a warm box that could not take it, in a cold box of its own
 * (its result in *RES, replacing the warm box's failure). */
static void run_cold(job *run, int cancel, al_box_result *res) {
    al_box_config cfg;
    job_config(run, cancel, &cfg);
    al_box_result_free(res);
    al_box_run(&cfg, res);
}

int cli_helper(int argc, char **argv) {
    if (cli_help_asked(argc, argv)) {
        printf("usage: airlock helper   (internal: the service's per-run process; one JSON job on stdin)\n");
        return 0;
    }
    _cleanup_free_ char *buf = malloc(AL_JOB_MAX + 1);
    if (!buf)
        return fail("job", "out of memory");
    line_reader lr = { .buf = buf };
    const char *why = NULL, *step = NULL;
    json_t *doc = read_job(&lr, &why);
    if (!doc)
        return fail("job", why);
#ifdef AIRLOCK_SERVER
    if (json_is_object(json_object_get(doc, "docker_keep"))) {
        int r = keep_held(doc, json_object_get(doc, "docker_keep"));
        json_decref(doc);
        return r;
    }
#endif
    /* a warm box: made now, its run later (src/lang/warm/); a zygote: the
     * box warm boxes of its shape are forked from (box.h) */
    bool warm = json_is_true(json_object_get(doc, "warm"));
    bool zygote = json_is_true(json_object_get(doc, "zygote"));
    int fork_fd = passed_fd(doc, "fork_fd"), zygote_fd = passed_fd(doc, "zygote_fd");
    if (zygote && (warm || zygote_fd < 0)) {
        json_decref(doc);
        return fail("job", "a zygote is not warm, and needs its request socket (zygote_fd)");
    }
    const char *launcher = NULL;
    if (warm || zygote) {
        const char *ln = json_string_value(json_object_get(doc, "language"));
        const al_lang *l = ln ? al_lang_by_name(ln) : NULL;
        if (!l || !(launcher = al_lang_warm_start(l))) {
            json_decref(doc);
            return fail("job", "a warm box is for a language with a warm start (python, node)");
        }
        if (zygote && !al_lang_zygote(l)) {
            json_decref(doc);
            return fail("job", "a zygote is for a language with a fork server (python)");
        }
    }
    /* a run with fork_fd and no "warm": its own box forked now, by the
     * zygote on the other end (the pool had none ready), and handed this
     * run at once; the box is made for the run's shape (its language,
     * image and limits, the rest the run's) */
    bool forked_now = fork_fd >= 0 && !warm;
    json_t *run_doc = NULL;
    if (forked_now) {
        run_doc = doc;
        doc = json_pack("{s:b, s:O?, s:O?, s:O?, s:O?}", "warm", 1, "language", json_object_get(run_doc, "language"),
                        "limits", json_object_get(run_doc, "limits"), "image_dir", json_object_get(run_doc, "image_dir"),
                        "image_digest", json_object_get(run_doc, "image_digest"));
        warm = true;
        const char *ln = json_string_value(json_object_get(run_doc, "language"));
        const al_lang *l = ln ? al_lang_by_name(ln) : NULL;
        if (!doc || !l || !(launcher = al_lang_warm_start(l))) {
            json_decref(doc);
            json_decref(run_doc);
            return fail("job", "a forked box is for a language with a warm start (python)");
        }
    }
    job j;
    if (job_parse(doc, &j, launcher, !warm && !zygote, &step, &why) < 0) {
        json_decref(run_doc);
        job_free(&j);
        return fail(step, why);
    }
    _cleanup_close_ int sig_fd = cli_cancel_signals();
    signal(SIGPIPE, SIG_IGN);
    /* one fd that is readable when either a signal or stdin's end comes */
    _cleanup_close_ int cancel = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e1 = { .events = EPOLLIN }, e2 = { .events = EPOLLIN | EPOLLHUP };
    if (cancel < 0 || epoll_ctl(cancel, EPOLL_CTL_ADD, sig_fd, &e1) < 0 ||
        epoll_ctl(cancel, EPOLL_CTL_ADD, STDIN_FILENO, &e2) < 0) {
        job_free(&j);
        return fail("job", "cannot watch for cancellation");
    }
    al_box_config cfg;
    job_config(&j, cancel, &cfg);
    /* a warm box's environment is its run's (offline), with what it
     * preloads: its interpreter starts as that run's would */
    char *wenv[CLI_NET_ENV_MAX + 3];
    char preload[1024], warm_fd[32];
    warm_ctx wc = { .lr = &lr, .shape = &j, .cancel = cancel, .run_doc = run_doc };
    al_box_warm bw = { .on_ready = forked_now ? NULL : warm_ready, .handoff = warm_handoff, .ud = &wc,
                       .ready_timeout_ms = 120000, .run_fd = forked_now ? -1 : STDIN_FILENO };
    al_box_fork bf = { .fd = fork_fd };
    cli_zygote zs;
    if (warm || zygote) {
        if (cfg.listen_port || j.skill_dir || j.n_inputs || j.in_fd >= 0) {
            job_free(&j);
            return fail("job", "a warm box is offline and holds no input until its run");
        }
        size_t k = 0;
        for (; k < CLI_NET_ENV_MAX && j.net->env[k]; k++)
            wenv[k] = j.net->env[k];
        snprintf(preload, sizeof preload, "AIRLOCK_PRELOAD=%s", json_string_value(json_object_get(doc, "preload")) ?: "");
        wenv[k++] = preload;
        snprintf(warm_fd, sizeof warm_fd, "AIRLOCK_WARM_FD=%d", AL_BOX_WARM_FD);
        wenv[k++] = warm_fd;
        wenv[k] = NULL;
        cfg.envp = wenv;
        /* until its run comes, only a signal cancels: the run's own line
         * on stdin is not its end (a box forked for its run has it) */
        cfg.cancel_fd = forked_now ? cancel : sig_fd;
        cfg.warm = &bw;
        cfg.on_started = NULL;
        if (fork_fd >= 0)
            cfg.fork = &bf;
    }
    if (zygote) {
        /* it lasts until the pool is done with it (the end of its request
         * socket) or its helper's stdin ends; it says it is there once it
         * runs */
        al_box_config base = cfg;
        const char *zwhy = NULL;
        if (cli_zygote_config(j.lang, &base, j.img_dir, zygote_fd, &zs, &cfg, &zwhy) < 0) {
            job_free(&j);
            return fail("job", zwhy);
        }
        cfg.cancel_fd = cancel;
        cfg.on_started = zygote_started;
    }
    al_box_result res;
    bool cold_again = false;
    const char *driver = json_string_value(json_object_get(doc, "driver"));
    if ((warm || zygote) && driver) {
        job_free(&j);
        return fail("job", "a warm box is the native driver's");
    } else if (driver && strcmp(driver, "docker") == 0) {
#ifdef AIRLOCK_SERVER
        /* stdin is the job's pipe from the service, the owner of a held
         * container: its end is the service's */
        al_docker_opts o = { .socket = json_string_value(json_object_get(doc, "docker_socket")),
                             .runtime = AL_DOCKER_RUNC, .owner_fd = STDIN_FILENO };
        const char *rt = json_string_value(json_object_get(doc, "docker_runtime"));
        if (rt && al_docker_runtime_from_name(rt, &o.runtime) < 0) {
            job_free(&j);
            return fail("job", "docker_runtime: want runc or runsc");
        }
        if (!j.img_dir || !j.img_digest) {
            job_free(&j);
            return fail("driver", "the docker driver runs on an image, not the host's /usr: give the workspace "
                                  "an image (default)");
        }
        o.image_dir = j.ir.root;
        o.image_digest = j.img_digest;
        /* a skill's bundle: bound read-only at the container's /skill */
        if (j.skill_dir && j.script)
            o.skill_dir = j.skill_dir;
        json_t *jb = json_object_get(doc, "docker_box");
        al_docker_held held = { .holder_lock = -1, .uid_lock = -1 };
        if (json_is_object(jb)) {
            snprintf(held.id, sizeof held.id, "%s", json_string_value(json_object_get(jb, "id")) ?: "");
            snprintf(held.image_id, sizeof held.image_id, "%s",
                     json_string_value(json_object_get(jb, "image_id")) ?: "");
            held.holder = (uid_t)json_integer_value(json_object_get(jb, "holder"));
            held.uid = (uid_t)json_integer_value(json_object_get(jb, "uid"));
            held.hold_until_s = json_integer_value(json_object_get(jb, "hold_until"));
            if (!adopt_locks(jb, held.holder, held.uid, o.lock_fds)) {
                job_free(&j);
                return fail("job", "docker_box: the locks of its uids were not passed");
            }
            o.held = &held;
        }
        /* a cold run's uids, the service's (which removes its container
         * if this process cannot) */
        json_t *ju = json_object_get(doc, "docker_uids");
        if (json_is_object(ju)) {
            o.holder = (uid_t)json_integer_value(json_object_get(ju, "holder"));
            o.uid = (uid_t)json_integer_value(json_object_get(ju, "uid"));
            if (!adopt_locks(ju, o.holder, o.uid, o.lock_fds)) {
                job_free(&j);
                return fail("job", "docker_uids: the locks of its uids were not passed");
            }
        }
        al_docker_run(&o, &cfg, &res);
#else
        job_free(&j);
        return fail("driver", "the docker driver runs in airlock-server helper");
#endif
    } else if (driver && strcmp(driver, "native") != 0) {
        job_free(&j);
        return fail("job", "unknown driver");
    } else {
        al_box_run(&cfg, &res);
        if (warm && bw.handed && res.reason == AL_REASON_ERROR && strcmp(res.error.step, "warm") == 0) {
            /* its warm box failed it after the hand-off, before the run's
             * first instruction: the run goes cold, in a box of its own */
            run_cold(&wc.run, cancel, &res);
            cold_again = true;
        }
    }
    if (warm && !wc.have_run && res.error.err != ECANCELED) {
        /* its box died idle: the pool hears it (and drops this helper), but
         * a run it handed this helper meanwhile may be on its way; that one
         * goes cold, in a box of its own, as one handed a failing box does */
        emit(json_pack("{s:s, s:s}", "type", "warm_lost", "why", res.error.msg));
        const char *rwhy = NULL;
        json_t *rd = wc.run_doc ? wc.run_doc : read_job(&lr, &rwhy);
        wc.run_doc = NULL;
        if (rd && job_parse(rd, &wc.run, NULL, true, &step, &why) == 0) {
            wc.have_run = true;
            run_cold(&wc.run, cancel, &res);
            cold_again = true;
        } else if (rd) {
            /* what it could not parse is its run's error */
            job_free(&wc.run);
            job_free(&j);
            al_box_result_free(&res);
            return fail(step, why);
        }
    }
    /* a warm box that never got its run has no result to give */
    if (warm && !wc.have_run) {
        al_error e = res.error;
        job_free(&j);
        al_box_result_free(&res);
        return fail(e.step[0] ? e.step : "warm", e.msg);
    }
    job *ran = warm ? &wc.run : &j;
    json_t *network = cli_net_finish(ran->net, &res);
    json_t *result = cli_result_json(&res, cfg.runtime);
    if (result) {
        json_object_set_new(result, "network", network);
        if (warm && !cold_again)
            json_object_set_new(json_object_get(result, "box"), "warm", json_true());
    } else {
        json_decref(network);
    }
    emit(json_pack("{s:s, s:o}", "type", "result", "result", result));
    al_box_result_free(&res);
    if (warm)
        job_free(&wc.run);
    json_decref(wc.run_doc);
    job_free(&j);
    return 0;
}
