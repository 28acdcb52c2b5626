/*
 * `airlock helper`'s work (src/cli/helper.c reads its arguments): the
 * single-threaded process the drivers start for each run (helper_start.c). It reads one job (JSON) on stdin, runs the
 * box, and writes events as JSON lines on stdout:
 *   {"type":"started"}
 *   {"type":"stdout"|"stderr","data_base64":"..."} (the bytes exactly)
 *   {"type":"result","result":{...the fields of airlock run --json...}}
 * SIGTERM cancels the box, and so does the end of stdin: the service keeps
 * it open for the run's life, so its death (any death) ends the box. Job,
 * one line on stdin, read by src/drivers/job_codec.c (its fields: job.h):
 *   {"language", "code", "inputs": [host paths], "out_dir": host dir,
 *    "limits": {"timeout_ms" (or "timeout_s"), "memory_bytes", "cpu_millis", "pids",
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
 *
 * A job with packages ("packages": job.h's pkg_* fields) installs them
 * before the run's box (install.c), in an install box of its own, with
 * these events before "started":
 *   {"type":"installing","stream":"stdout"|"stderr","data_base64":"..."}
 *      (the install's output, as a run's; at most 1 MiB in all)
 *   {"type":"installed","layer":"sha256:KEY","reused":bool,"ms":N,
 *    "python":[{"name","version","sha256"}],"node":[{"name","version","integrity"}]}
 * and its result carries "packages": {"layer":"sha256:KEY","reused":bool,
 * "install_ms":N,"python":[...],"node":[...]} (the same lists). An install
 * that fails ends the run there, no run box made: its result has
 * "reason":"install_failed", the install's "exit_code" (null when it never
 * exited: a timeout, a refusal before it ran), "error":{"step":"install",
 * "message": which step failed and why} and "packages" with "failed": the
 * step ("python", "node", or "prepare"). A job with packages for a warm or
 * forked box, or another driver, is refused (an "error" event).
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "../box/runtime_ro.h"
#include "../box/uidpool.h"
#include "job.h"
#ifdef AIRLOCK_SERVER
#include "../docker/docker.h"
#include "remote_net.h"
#include "../kube/kube.h"
#endif
#include "../image/image.h"
#include "../lang/lang.h"
#include "box_net.h"
#include "box_result.h"
#include "cancel_signals.h"
#include "helper_main.h"
#include "install.h"
#include "zygote_config.h"

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
    emit(json_pack("{s:s, s:o}", "type", st == AL_STREAM_STDOUT ? "stdout" : "stderr", "data_base64", al_box_result_base64(buf, len)));
}

static int on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    return al_box_net_on_listener(fd, uid, gid, userdata, err);
}

static void on_started(void *userdata) { emit(json_pack("{s:s}", "type", "started")); }

static int fail(const char *step, const char *msg) {
    emit(json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "step", step, "message", msg));
    return 125;
}

/* One job's parts, read, with the storage its box config points into. */
typedef struct job {
    al_job doc;
    const al_lang *lang;
    const char *code;
    al_box_limits lim;
    int out_fd, in_fd;
    int work_fd;                  /* a sandbox's run: where /work is collected to; -1 none */
    char work_script[32];         /* its script's name in /work: hidden, beside the tree */
    al_image_runtime ir;
    al_runtime_ro ro;
    const al_runtime *runtime;
    const char *img_dir, *img_digest, *skill_dir, *script;
    char *box_argv[AL_JOB_ARGS_MAX + 3];
    al_box_net *net;
    al_box_file sf;
} job;

static void job_free(job *j) {
    if (j->out_fd >= 0)
        close(j->out_fd);
    if (j->in_fd >= 0)
        close(j->in_fd);
    if (j->work_fd >= 0)
        close(j->work_fd);
    free(j->net);
    al_job_free(&j->doc);
    j->out_fd = j->in_fd = j->work_fd = -1;
    j->net = NULL;
}

/* Stdin's next line (a job) into RET: at most AL_JOB_MAX bytes, what
 * follows its newline kept in BUF for the next call. 0, or -errno at its
 * end or on error, with why in ERR. */
typedef struct line_reader {
    char *buf;
    size_t len;
} line_reader;

static int read_job(line_reader *lr, al_job *ret, al_error *err) {
    al_job_init(ret);
    for (;;) {
        char *nl = memchr(lr->buf, '\n', lr->len);
        if (nl) {
            size_t n = (size_t)(nl - lr->buf);
            int r = al_job_decode(lr->buf, n, ret, err);
            memmove(lr->buf, nl + 1, lr->len - n - 1);
            lr->len -= n + 1;
            return r;
        }
        if (lr->len == AL_JOB_MAX)
            return al_err(err, "job", E2BIG, "job larger than AL_JOB_MAX (16 MiB)");
        ssize_t n = read(STDIN_FILENO, lr->buf + lr->len, AL_JOB_MAX - lr->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* a last job without its newline */
            size_t len = lr->len;
            lr->len = 0;
            if (!len)
                return al_err(err, "job", ENODATA, "no job came");
            return al_job_decode(lr->buf, len, ret, err);
        }
        lr->len += (size_t)n;
    }
}

/* DOC's parts into J (which owns DOC from here, and empties it). CODE: the
 * code to run (NULL: the job's); OUT_NEEDED: the job must name its
 * out_dir. 0, or the failed step and why. */
static int job_parse(al_job *doc, job *j, const char *code, bool out_needed, const char **step, const char **why) {
    *j = (job){ .doc = *doc, .out_fd = -1, .in_fd = -1, .work_fd = -1, .runtime = &al_runtime_host };
    al_job_init(doc);
    const al_job *d = &j->doc;
    j->lang = d->lang;
    j->code = code ? code : d->code;
    *step = "job";
    if (!j->lang || !j->code || (out_needed && !d->out_dir)) {
        *why = "the job needs language, code and out_dir";
        return -EINVAL;
    }
    j->lim = d->limits;
    if (d->out_dir && (j->out_fd = open(d->out_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC)) < 0) {
        *why = "cannot open out_dir";
        return -errno;
    }
    /* the runtime: the host's, or an image the service resolved */
    j->img_dir = d->image_dir;
    j->img_digest = d->image_digest;
    if (j->img_dir && j->img_digest) {
        al_image_runtime_init(&j->ir, j->img_dir, j->img_digest);
        j->runtime = &j->ir.rt;
    }
    /* a skill: its bundle read-only at /skill, its entrypoint run from there */
    j->skill_dir = d->skill_dir;
    j->script = d->script;
    if (j->skill_dir && j->script) {
        al_runtime_ro_init(&j->ro, j->runtime, j->skill_dir, "skill");
        j->runtime = &j->ro.rt;
    }
    /* a sandbox's working directory: its script under a name of the box's
     * own (main.py is a name a user gives a file), not collected back */
    const char *script_name = j->lang->default_file;
    if (d->work_in && d->work_out) {
        if ((j->work_fd = open(d->work_out, O_DIRECTORY | O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
            *why = "cannot open work_out";
            return -errno;
        }
        snprintf(j->work_script, sizeof j->work_script, ".airlock-%s", j->lang->default_file);
        script_name = j->work_script;
    }
    /* the script's arguments and standard input, when the run has them */
    j->box_argv[0] = (char *)j->lang->interpreter;
    j->box_argv[1] = (char *)(j->skill_dir && j->script ? j->script : script_name);
    for (size_t k = 0; k < d->n_args; k++)
        j->box_argv[2 + k] = d->args[k];
    j->box_argv[2 + d->n_args] = NULL;
    if (d->stdin_path && (j->in_fd = open(d->stdin_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
        *why = "cannot open stdin_path";
        return -errno;
    }
    static al_error nerr;
    if (!(j->net = calloc(1, sizeof *j->net)) || al_box_net_init(j->net, d->network, &nerr) < 0) {
        *step = "network";
        *why = j->net ? nerr.msg : "out of memory";
        return -EINVAL;
    }
    j->sf = (al_box_file){ script_name, j->code, strlen(j->code), 0644 };
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
        .inputs = (const char *const *)j->doc.inputs,
        .n_inputs = j->doc.n_inputs,
        .stdin_fd = j->in_fd,
        .out_dirfd = j->out_fd,
        .work_in = j->work_fd >= 0 ? j->doc.work_in : NULL,
        .collect_work = j->work_fd >= 0,
        .work_dirfd = j->work_fd,
        .limits = j->lim,
        .on_output = on_output,
        .on_started = on_started,
        .cancel_fd = cancel,
        .userdata = j->net,
        .listen_port = al_box_net_listen_port(j->net),
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
    al_job run_doc;               /* the run, when it came with the box's job (its lang set) */
} warm_ctx;

static void warm_ready(void *ud, uint64_t memory_bytes) {
    emit(json_pack("{s:s, s:I}", "type", "ready", "memory_bytes", (json_int_t)memory_bytes));
}

/* The run of W: the one that came with the box's job, else the next line. */
static int warm_next(warm_ctx *w, al_job *ret, al_error *err) {
    if (w->run_doc.lang) {
        *ret = w->run_doc;
        al_job_init(&w->run_doc);
        return 0;
    }
    return read_job(w->lr, ret, err);
}

static int warm_handoff(void *ud, al_box_config *run, al_error *err) {
    warm_ctx *w = ud;
    const char *why = NULL, *step = NULL;
    al_job doc;
    al_error rerr = { 0 };
    if (warm_next(w, &doc, &rerr) < 0) {
        al_job_free(&doc);
        return al_err(err, "warm", ECANCELED, "%s", rerr.msg);
    }
    int r = job_parse(&doc, &w->run, NULL, true, &step, &why);
    w->have_run = true;
    if (r < 0)
        return al_err(err, step, -r, "%s", why);
    const job *s = w->shape, *j = &w->run;
    /* the box was made for one shape of run: any other is not this box's */
    if (j->lang != s->lang || !j->img_digest != !s->img_digest ||
        (j->img_digest && strcmp(j->img_digest, s->img_digest) != 0) ||
        memcmp(&j->lim, &s->lim, sizeof j->lim) != 0 || j->skill_dir || al_box_net_listen_port(j->net) || j->work_fd >= 0 ||
        j->doc.driver != AL_JOB_NATIVE || (j->in_fd >= 0 && strcmp(j->lang->name, "python") != 0))
        return al_err(err, "warm", EINVAL, "the run is not of the shape this warm box was made for");
    job_config(&w->run, w->cancel, run);
    return 0;
}

#ifdef AIRLOCK_SERVER
/* The service's locks of U's holder and uid (its "lock_fds"), passed as
 * the same open files: held by this process too until it ends, so that
 * they outlive a service killed before the run is over. Each is checked to
 * be that uid's lock file, and kept from what this process starts. */
static bool adopt_locks(const al_job_uids *u, int ret_fds[2]) {
    uid_t uids[2] = { u->holder, u->uid };
    for (size_t k = 0; k < 2; k++) {
        int fd = u->lock_fds[k];
        if (!u->set || fd <= 2 || !al_uid_lock_is(fd, uids[k]) || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
            return false;
        ret_fds[k] = fd;
    }
    return true;
}

static int docker_runtime_of(const al_job *doc, al_docker_runtime *ret) {
    *ret = AL_DOCKER_RUNC;
    return doc->docker_runtime ? al_docker_runtime_from_name(doc->docker_runtime, ret) : 0;
}

/* "docker_keep": this process is the keeper of a container the service
 * made ahead of need (docker_pool.c), holding its uids' locks until the
 * container's init has ended, and removing it once the service has closed
 * this process's stdin (done with it, or killed). Returns only when it
 * cannot keep it. */
static int keep_held(const al_job *doc) {
    /* what `ps` and the service's tests tell apart from a run's helper */
    prctl(PR_SET_NAME, "airlock-keeper");
    al_docker_runtime rt;
    if (docker_runtime_of(doc, &rt) < 0)
        return fail("job", "docker_runtime: want runc or runsc");
    int fds[2];
    if (!adopt_locks(&doc->docker_keep.uids, fds))
        return fail("job", "docker_keep: the locks of its uids were not passed");
    al_error err = { 0 };
    al_docker_keep_held(doc->docker_socket, rt, doc->docker_keep.id, fds, STDIN_FILENO, &err);
    return fail(err.step[0] ? err.step : "keeper", err.msg);
}

/* J (CFG) in a container of the docker driver, its result in *RES: 0, or
 * the step and why it could not start. */
static int run_docker(job *j, al_box_config *cfg, al_box_result *res, const char **step, const char **why) {
    const al_job *doc = &j->doc;
    /* stdin is the job's pipe from the service, the owner of a held
     * container: its end is the service's */
    al_docker_opts o = { .socket = doc->docker_socket, .owner_fd = STDIN_FILENO };
    *step = "job";
    if (docker_runtime_of(doc, &o.runtime) < 0) {
        *why = "docker_runtime: want runc or runsc";
        return -EINVAL;
    }
    if (!j->img_dir || !j->img_digest) {
        *step = "driver";
        *why = "the docker driver runs on an image, not the host's /usr: give the workspace an image (default)";
        return -EINVAL;
    }
    o.image_dir = j->ir.root;
    o.image_digest = j->img_digest;
    /* a skill's bundle: bound read-only at the container's /skill */
    if (j->skill_dir && j->script)
        o.skill_dir = j->skill_dir;
    al_docker_held held = { .holder_lock = -1, .uid_lock = -1 };
    if (doc->docker_box.set) {
        snprintf(held.id, sizeof held.id, "%s", doc->docker_box.id);
        snprintf(held.image_id, sizeof held.image_id, "%s", doc->docker_box.image_id);
        held.holder = doc->docker_box.uids.holder;
        held.uid = doc->docker_box.uids.uid;
        held.hold_until_s = doc->docker_box.hold_until_s;
        if (!adopt_locks(&doc->docker_box.uids, o.lock_fds)) {
            *why = "docker_box: the locks of its uids were not passed";
            return -EINVAL;
        }
        o.held = &held;
    }
    /* a cold run's uids, the service's (which removes its container if
     * this process cannot) */
    if (doc->docker_uids.set) {
        o.holder = doc->docker_uids.holder;
        o.uid = doc->docker_uids.uid;
        if (!adopt_locks(&doc->docker_uids, o.lock_fds)) {
            *why = "docker_uids: the locks of its uids were not passed";
            return -EINVAL;
        }
    }
    al_docker_run(&o, cfg, res);
    return 0;
}
#endif

#ifdef AIRLOCK_SERVER
/* J's remote service, and its network as the cloud can hold it */
static void remote_opts(const job *j, al_remote_opts *o, const char **hosts) {
    const al_job *doc = &j->doc;
    *o = (al_remote_opts){ .kind = doc->driver == AL_JOB_DAYTONA ? AL_REMOTE_DAYTONA : AL_REMOTE_E2B,
                           .api_url = doc->remote_api_url, .sandbox_url = doc->remote_sandbox_url,
                           .api_key = doc->remote_key, .template_name = doc->remote_template,
                           .tag = doc->remote_tag };
    al_driver_remote_net(&j->net->policy, o, hosts);
}

/* J (CFG) in a sandbox of a cloud service (e2b, daytona), its result in
 * *RES: 0, or the step and why it could not. No listener: the cloud's
 * sandbox has its own network, filtered there (remote.h). */
static int run_remote(job *j, al_box_config *cfg, al_box_result *res, const char **step, const char **why) {
    if (!j->doc.remote_api_url || !j->doc.remote_key) {
        *step = "job";
        *why = "a remote job needs remote_api_url and remote_key";
        return -EINVAL;
    }
    if (j->skill_dir) {
        /* its bundle is a directory of this host, bound at /skill */
        *step = "driver";
        *why = "a skill runs on the native or docker driver, not in a remote sandbox";
        return -EINVAL;
    }
    const char *hosts[AL_REMOTE_HOSTS_MAX];
    al_remote_opts o;
    remote_opts(j, &o, hosts);
    if (!al_driver_remote_net_held(o.kind, j->net->policy.mode, why)) {
        *step = "network";
        return -EINVAL;
    }
    cfg->listen_port = 0;
    al_remote_run(&o, cfg, res);
    return 0;
}
#endif

#ifdef AIRLOCK_SERVER
/* J (CFG) in a pod of a Kubernetes cluster: its cluster loaded here from
 * the kubeconfig (or in-cluster), so its token is this process's read of
 * the file, never carried in the job. Offline only (the namespace's
 * deny-all NetworkPolicy): no listener. */
static int run_kube(job *j, al_box_config *cfg, al_box_result *res, const char **step, const char **why) {
    const al_job *d = &j->doc;
    static char msg[320];
    if (j->skill_dir) {
        *step = "driver";
        *why = "a skill runs on the native or docker driver, not in a Kubernetes pod";
        return -EINVAL;
    }
    if (j->net->policy.mode != AL_NET_OFFLINE) {
        *step = "network";
        *why = "refused by the kubernetes driver: sandbox pods are deny-all (the chart's NetworkPolicy); an egress "
               "proxy for them is not built yet";
        return -EINVAL;
    }
    al_kube_cluster cluster = { 0 };
    al_error err = { 0 };
    if (al_kube_cluster_load(d->kube_config, d->kube_namespace, &cluster, &err) < 0) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        *step = "provisioning";
        *why = msg;
        al_kube_cluster_free(&cluster);
        return -EINVAL;
    }
    bool local = d->kube_seccomp && strncmp(d->kube_seccomp, "localhost:", 10) == 0;
    al_kube_opts o = { .cluster = &cluster, .image_ref = d->kube_image_ref, .runtime_class = d->kube_runtime_class,
                       .seccomp = local ? AL_KUBE_SECCOMP_LOCALHOST : AL_KUBE_SECCOMP_RUNTIME_DEFAULT,
                       .seccomp_localhost = local ? d->kube_seccomp + 10 : NULL, .run_id = d->kube_name,
                       .node = d->kube_node, .instance = d->kube_instance,
                       .schedule_timeout_s = (unsigned)d->kube_schedule_timeout_s };
    cfg->listen_port = 0;
    al_kube_run(&o, cfg, res);
    al_kube_cluster_free(&cluster);
    return 0;
}
#endif

/* A fd the service passed (FD), close-on-exec from here; -1 when the job
 * names none or it is not open. */
static int passed_fd(int fd) {
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

static void on_installing(void *ud, al_stream st, const char *buf, size_t len) {
    emit(json_pack("{s:s, s:s, s:o}", "type", "installing", "stream", st == AL_STREAM_STDOUT ? "stdout" : "stderr",
                   "data_base64", al_box_result_base64(buf, len)));
}

/* What a helper does with its job, and what it holds while it runs. */
typedef struct helper {
    line_reader lr;
    job j;
    bool warm, zygote, forked_now;
    int fork_fd, zygote_fd;
    const char *launcher;         /* a warm box's code: its language's warm start */
    int sig_fd, cancel;
    char *wenv[AL_BOX_NET_ENV_MAX + 3];
    char preload[1024], warm_fd[32];
    warm_ctx wc;
    al_box_warm bw;
    al_box_fork bf;
    al_zygote_config zs;
    bool installed;               /* the job's packages are in INSTALL */
    al_install install;
} helper;

/* DOC's mode into H: a run, a warm box (made now, its run later:
 * src/lang/warm/), a zygote (the box warm boxes of its shape are forked
 * from: box.h), or a run whose box a zygote forks now. NULL, or why not. */
static const char *mode_of(helper *h, al_job *doc) {
    h->warm = doc->warm;
    h->zygote = doc->zygote;
    h->fork_fd = passed_fd(doc->fork_fd);
    h->zygote_fd = passed_fd(doc->zygote_fd);
    if (h->zygote && (h->warm || h->zygote_fd < 0))
        return "a zygote is not warm, and needs its request socket (zygote_fd)";
    if (h->warm || h->zygote) {
        if (!doc->lang || !(h->launcher = al_lang_warm_start(doc->lang)))
            return "a warm box is for a language with a warm start (python, node)";
        if (h->zygote && !al_lang_zygote(doc->lang))
            return "a zygote is for a language with a fork server (python)";
    }
    /* a run with fork_fd and no "warm": its own box forked now, by the
     * zygote on the other end (the pool had none ready), and handed this
     * run at once; the box is made for the run's shape (its language,
     * image and limits, the rest the run's) */
    h->forked_now = h->fork_fd >= 0 && !h->warm;
    if (h->forked_now) {
        al_job run = *doc;
        al_job_init(doc);
        doc->warm = true;
        doc->lang = run.lang;
        doc->limits = run.limits;
        if (al_job_set(&doc->image_dir, run.image_dir) < 0 || al_job_set(&doc->image_digest, run.image_digest) < 0) {
            al_job_free(&run);
            return "out of memory";
        }
        h->wc.run_doc = run;
        h->warm = true;
        if (!run.lang || !(h->launcher = al_lang_warm_start(run.lang)))
            return "a forked box is for a language with a warm start (python)";
    }
    return NULL;
}

/* H's box config in *CFG: a warm box's environment is its run's
 * (offline), with what it preloads, so that its interpreter starts as that
 * run's would; a zygote's is its own. NULL, or why not. */
static const char *config_of(helper *h, al_box_config *cfg) {
    job *j = &h->j;
    job_config(j, h->cancel, cfg);
    h->wc.lr = &h->lr;
    h->wc.shape = j;
    h->wc.cancel = h->cancel;
    h->bw = (al_box_warm){ .on_ready = h->forked_now ? NULL : warm_ready, .handoff = warm_handoff, .ud = &h->wc,
                           .ready_timeout_ms = 120000, .run_fd = h->forked_now ? -1 : STDIN_FILENO };
    h->bf = (al_box_fork){ .fd = h->fork_fd };
    if (!h->warm && !h->zygote)
        return NULL;
    if (cfg->listen_port || j->skill_dir || j->doc.n_inputs || j->in_fd >= 0 || j->work_fd >= 0)
        return "a warm box is offline and holds no input until its run";
    if (j->doc.driver != AL_JOB_NATIVE)
        return "a warm box is the native driver's";
    size_t k = 0;
    for (; k < AL_BOX_NET_ENV_MAX && j->net->env[k]; k++)
        h->wenv[k] = j->net->env[k];
    snprintf(h->preload, sizeof h->preload, "AIRLOCK_PRELOAD=%s", j->doc.preload ?: "");
    h->wenv[k++] = h->preload;
    snprintf(h->warm_fd, sizeof h->warm_fd, "AIRLOCK_WARM_FD=%d", AL_BOX_WARM_FD);
    h->wenv[k++] = h->warm_fd;
    h->wenv[k] = NULL;
    cfg->envp = h->wenv;
    /* until its run comes, only a signal cancels: the run's own line on
     * stdin is not its end (a box forked for its run has it) */
    cfg->cancel_fd = h->forked_now ? h->cancel : h->sig_fd;
    cfg->warm = &h->bw;
    cfg->on_started = NULL;
    if (h->fork_fd >= 0)
        cfg->fork = &h->bf;
    if (h->zygote) {
        /* it lasts until the pool is done with it (the end of its request
         * socket) or its helper's stdin ends; it says it is there once it
         * runs */
        al_box_config base = *cfg;
        const char *zwhy = NULL;
        if (al_zygote_config_init(j->lang, &base, j->img_dir, h->zygote_fd, &h->zs, cfg, &zwhy) < 0)
            return zwhy;
        cfg->cancel_fd = h->cancel;
        cfg->on_started = zygote_started;
    }
    return NULL;
}

/* The box of H's job run, its result in *RES: 0, or the step and why it
 * could not (nothing in *RES then). */
static int run_box(helper *h, al_box_config *cfg, al_box_result *res, bool *cold_again, const char **step,
                   const char **why) {
    if (h->j.doc.driver != AL_JOB_NATIVE) {
#ifdef AIRLOCK_SERVER
        if (h->j.doc.driver == AL_JOB_DOCKER)
            return run_docker(&h->j, cfg, res, step, why);
        if (h->j.doc.driver == AL_JOB_KUBERNETES)
            return run_kube(&h->j, cfg, res, step, why);
        return run_remote(&h->j, cfg, res, step, why);
#else
        *step = "driver";
        *why = "the docker, e2b, daytona and kubernetes drivers run in airlock-server helper";
        return -EINVAL;
#endif
    }
    al_box_run(cfg, res);
    if (h->warm && h->bw.handed && res->reason == AL_REASON_ERROR && strcmp(res->error.step, "warm") == 0) {
        /* its warm box failed it after the hand-off, before the run's
         * first instruction: the run goes cold, in a box of its own */
        run_cold(&h->wc.run, h->cancel, res);
        *cold_again = true;
    }
    if (h->warm && !h->wc.have_run && res->error.err != ECANCELED) {
        /* its box died idle: the pool hears it (and drops this helper), but
         * a run it handed this helper meanwhile may be on its way; that one
         * goes cold, in a box of its own, as one handed a failing box does */
        emit(json_pack("{s:s, s:s}", "type", "warm_lost", "why", res->error.msg));
        al_job rd;
        static al_error rerr;
        if (warm_next(&h->wc, &rd, &rerr) < 0) {
            al_job_free(&rd);
            /* a line that is no job is its run's error; none: no run */
            if (rerr.err != ENODATA && rerr.err != ECANCELED) {
                al_box_result_free(res);
                *step = rerr.step;
                *why = rerr.msg;
                return -EINVAL;
            }
        } else if (job_parse(&rd, &h->wc.run, NULL, true, step, why) == 0) {
            h->wc.have_run = true;
            run_cold(&h->wc.run, h->cancel, res);
            *cold_again = true;
        } else {
            /* what it could not parse is its run's error */
            job_free(&h->wc.run);
            al_box_result_free(res);
            return -EINVAL;
        }
    }
    return 0;
}

/* The result of H's run (RES) as its last event. */
static void emit_result(helper *h, al_box_result *res, const al_box_config *cfg, bool cold_again) {
    job *ran = h->warm ? &h->wc.run : &h->j;
    json_t *network = al_box_net_finish(ran->net, res);
#ifdef AIRLOCK_SERVER
    if (ran->doc.driver == AL_JOB_E2B || ran->doc.driver == AL_JOB_DAYTONA) {
        /* what the cloud filters, not airlock's proxy (none ran) */
        const char *hosts[AL_REMOTE_HOSTS_MAX];
        al_remote_opts o;
        remote_opts(ran, &o, hosts);
        al_remote_network_control(&o, &res->controls.network);
    }
    if (ran->doc.driver == AL_JOB_KUBERNETES) {
        /* the namespace's deny-all NetworkPolicy, not a namespace of ours */
        al_controls c;
        al_kube_controls(NULL, false, &c);
        res->controls.network = c.network;
    }
#endif
    json_t *result = al_box_result_json(res, cfg->runtime);
    if (result && h->installed)
        json_object_set_new(result, "packages", al_install_result(&h->install));
    if (result) {
        json_object_set_new(result, "network", network);
        if (h->warm && !cold_again)
            json_object_set_new(json_object_get(result, "box"), "warm", json_true());
    } else {
        json_decref(network);
    }
    emit(json_pack("{s:s, s:o}", "type", "result", "result", result));
}

static void helper_free(helper *h) {
    if (h->installed)
        al_install_free(&h->install);
    if (h->warm)
        job_free(&h->wc.run);
    al_job_free(&h->wc.run_doc);
    job_free(&h->j);
    if (h->cancel >= 0)
        close(h->cancel);
    if (h->sig_fd >= 0)
        close(h->sig_fd);
}

/* H's job's packages installed (or their layer found) before its box:
 * 0, and the "installed" event said; else the run ends here, before any
 * box of its own: -1 when its result (reason install_failed) was said, or
 * the helper's exit status when the job cannot have packages at all. */
static int install_packages(helper *h) {
    job *j = &h->j;
    if (h->warm || h->zygote || j->doc.driver != AL_JOB_NATIVE)
        return fail("install", "package installs run on the native driver, in a cold box (not a warm or forked "
                               "one, nor a container or a remote sandbox)");
    h->install = (al_install){ .job = &j->doc, .image_digest = j->img_digest, .cancel_fd = h->cancel,
                               .on_output = on_installing, .layer_fd = -1 };
    h->installed = true;
    al_error err = { 0 };
    if (al_install_run(&h->install, &err) == 0) {
        emit(al_install_event(&h->install));
        return 0;
    }
    /* the result of a run that got no box: the install's exit code, its
     * reason, and which step failed (its output went as "installing") */
    al_box_result res = { .exit_code = h->install.exit_code, .reason = AL_REASON_ERROR, .error = err };
    json_t *result = al_box_result_json(&res, j->runtime);
    if (result) {
        /* canceled meanwhile: the run's end is its cancel, not the install's */
        json_object_set_new(result, "reason", json_string(al_reason_name(err.err == ECANCELED ? AL_REASON_CANCELED : AL_REASON_INSTALL_FAILED)));
        json_object_set_new(result, "packages", al_install_result(&h->install));
        json_object_set_new(result, "network", al_box_net_finish(j->net, &res));
    }
    emit(json_pack("{s:s, s:o}", "type", "result", "result", result));
    return -1;
}

/* H's job, read, run, and its result said: the helper's exit status. */
static int helper_run(helper *h) {
    const char *why = NULL, *step = "job";
    al_job doc;
    al_error err = { 0 };
    if (read_job(&h->lr, &doc, &err) < 0) {
        al_job_free(&doc);
        return fail("job", err.msg);
    }
#ifdef AIRLOCK_SERVER
    if (doc.docker_keep.set) {
        int r = keep_held(&doc);
        al_job_free(&doc);
        return r;
    }
#endif
    why = mode_of(h, &doc);
    if (why) {
        al_job_free(&doc);
        return fail("job", why);
    }
    if (job_parse(&doc, &h->j, h->launcher, !h->warm && !h->zygote, &step, &why) < 0)
        return fail(step, why);
    h->sig_fd = al_cancel_signals();
    signal(SIGPIPE, SIG_IGN);
    /* one fd that is readable when either a signal or stdin's end comes */
    h->cancel = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e1 = { .events = EPOLLIN }, e2 = { .events = EPOLLIN | EPOLLHUP };
    if (h->cancel < 0 || epoll_ctl(h->cancel, EPOLL_CTL_ADD, h->sig_fd, &e1) < 0 ||
        epoll_ctl(h->cancel, EPOLL_CTL_ADD, STDIN_FILENO, &e2) < 0)
        return fail("job", "cannot watch for cancellation");
    if (al_job_has_packages(&h->j.doc)) {
        int r = install_packages(h);
        if (r != 0)
            return r < 0 ? 0 : r; /* the run ended there: its result said so */
    }
    al_box_config cfg;
    if ((why = config_of(h, &cfg)))
        return fail("job", why);
    if (h->installed) {
        /* the layer's trees read-only in the run's own (cold) box */
        cfg.binds = h->install.binds;
        cfg.n_binds = h->install.n_binds;
        cfg.env_extra = h->install.env;
        cfg.n_env_extra = h->install.n_env;
    }
    al_box_result res;
    bool cold_again = false;
    if (run_box(h, &cfg, &res, &cold_again, &step, &why) < 0)
        return fail(step, why);
    /* a warm box that never got its run has no result to give */
    if (h->warm && !h->wc.have_run) {
        al_error e = res.error;
        al_box_result_free(&res);
        return fail(e.step[0] ? e.step : "warm", e.msg);
    }
    emit_result(h, &res, &cfg, cold_again);
    al_box_result_free(&res);
    return 0;
}

int al_driver_helper_main(void) {
    _cleanup_free_ char *buf = malloc(AL_JOB_MAX + 1);
    if (!buf)
        return fail("job", "out of memory");
    /* (large: its environment and a zygote's config) */
    static helper h;
    h = (helper){ .lr = { .buf = buf }, .j = { .out_fd = -1, .in_fd = -1, .work_fd = -1 }, .fork_fd = -1, .zygote_fd = -1,
                  .sig_fd = -1, .cancel = -1 };
    al_job_init(&h.j.doc);
    al_job_init(&h.wc.run_doc);
    h.wc.run = (job){ .out_fd = -1, .in_fd = -1, .work_fd = -1 };
    al_job_init(&h.wc.run.doc);
    int r = helper_run(&h);
    helper_free(&h);
    return r;
}
