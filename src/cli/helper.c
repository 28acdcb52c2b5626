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
 *    "docker_box": {"id", "image_id", "holder", "uid", "hold_until"}: the
 *    container the service made ahead of need, to run in if still fit
 *    (the service removes it after; optional)}
 * The result carries "network": {policy, mode, egress: [...], egress_dropped}.
 */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>

#include "../box/runtime_ro.h"
#ifdef AIRLOCK_SERVER
#include "../docker/docker.h"
#endif
#include "../image/image.h"
#include "../lang/lang.h"
#include "cli.h"
#include "net.h"

#define MAX_JOB (1u << 20)
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

int cli_helper(int argc, char **argv) {
    if (cli_help_asked(argc, argv)) {
        printf("usage: airlock helper   (internal: the service's per-run process; one JSON job on stdin)\n");
        return 0;
    }
    _cleanup_free_ char *buf = malloc(MAX_JOB + 1);
    size_t len = 0;
    if (!buf)
        return fail("job", "out of memory");
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf + len, MAX_JOB - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (memchr(buf + len - (size_t)n, '\n', (size_t)n))
            break;
        if (len == MAX_JOB)
            return fail("job", "job larger than 1 MiB");
    }
    json_error_t jerr;
    json_t *job = json_loadb(buf, len, 0, &jerr);
    if (!job)
        return fail("job", jerr.text);
    const char *lang_name = json_string_value(json_object_get(job, "language"));
    const char *code = json_string_value(json_object_get(job, "code"));
    const char *out_dir = json_string_value(json_object_get(job, "out_dir"));
    const al_lang *lang = lang_name ? al_lang_by_name(lang_name) : NULL;
    if (!lang || !code || !out_dir) {
        json_decref(job);
        return fail("job", "the job needs language, code and out_dir");
    }
    al_box_limits lim;
    al_box_limits_from_job(json_object_get(job, "limits"), &lim);

    json_t *ins = json_object_get(job, "inputs");
    const char *inputs[MAX_INPUTS];
    size_t n_inputs = 0;
    for (size_t i = 0; i < json_array_size(ins) && n_inputs < MAX_INPUTS; i++)
        if (json_is_string(json_array_get(ins, i)))
            inputs[n_inputs++] = json_string_value(json_array_get(ins, i));

    _cleanup_close_ int out_fd = open(out_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (out_fd < 0) {
        json_decref(job);
        return fail("job", "cannot open out_dir");
    }
    _cleanup_close_ int sig_fd = cli_cancel_signals();
    signal(SIGPIPE, SIG_IGN);
    /* one fd that is readable when either a signal or stdin's end comes */
    _cleanup_close_ int cancel = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event e1 = { .events = EPOLLIN }, e2 = { .events = EPOLLIN | EPOLLHUP };
    if (cancel < 0 || epoll_ctl(cancel, EPOLL_CTL_ADD, sig_fd, &e1) < 0 ||
        epoll_ctl(cancel, EPOLL_CTL_ADD, STDIN_FILENO, &e2) < 0) {
        json_decref(job);
        return fail("job", "cannot watch for cancellation");
    }

    /* the runtime: the host's, or an image the service resolved */
    al_image_runtime ir;
    const al_runtime *runtime = &al_runtime_host;
    const char *img_dir = json_string_value(json_object_get(job, "image_dir"));
    const char *img_digest = json_string_value(json_object_get(job, "image_digest"));
    if (img_dir && img_digest) {
        al_image_runtime_init(&ir, img_dir, img_digest);
        runtime = &ir.rt;
    }
    /* a skill: its bundle read-only at /skill, its entrypoint run from there */
    const char *skill_dir = json_string_value(json_object_get(job, "skill_dir"));
    const char *script = json_string_value(json_object_get(job, "script"));
    al_runtime_ro ro;
    if (skill_dir && script) {
        al_runtime_ro_init(&ro, runtime, skill_dir, "skill");
        runtime = &ro.rt;
    }
    /* the script's arguments and standard input, when the run has them */
    json_t *jargs = json_object_get(job, "args");
    size_t nargs = json_array_size(jargs) < 256 ? json_array_size(jargs) : 256;
    char *box_argv[256 + 3] = { (char *)lang->interpreter,
                                (char *)(skill_dir && script ? script : lang->default_file) };
    for (size_t k = 0; k < nargs; k++)
        box_argv[2 + k] = (char *)(json_string_value(json_array_get(jargs, k)) ?: "");
    box_argv[2 + nargs] = NULL;
    const char *stdin_path = json_string_value(json_object_get(job, "stdin_path"));
    _cleanup_close_ int in_fd = stdin_path ? open(stdin_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
    _cleanup_free_ cli_net *net = calloc(1, sizeof *net);
    al_error nerr = { 0 };
    if (!net || cli_net_init(net, json_string_value(json_object_get(job, "network")), &nerr) < 0) {
        json_decref(job);
        return fail("network", net ? nerr.msg : "out of memory");
    }
    al_box_file sf = { lang->default_file, code, strlen(code), 0644 };
    al_box_config cfg = {
        .runtime = runtime,
        .argv = box_argv,
        .envp = net->env,
        .files = &sf,
        .n_files = skill_dir && script ? 0 : 1,
        .inputs = inputs,
        .n_inputs = n_inputs,
        .stdin_fd = in_fd,
        .out_dirfd = out_fd,
        .limits = lim,
        .on_output = on_output,
        .on_started = on_started,
        .cancel_fd = cancel,
        .userdata = net,
        .listen_port = cli_net_listen_port(net),
        .on_listener = on_listener,
    };
    al_box_result res;
    const char *driver = json_string_value(json_object_get(job, "driver"));
    if (driver && strcmp(driver, "docker") == 0) {
#ifdef AIRLOCK_SERVER
        al_docker_opts o = { .socket = json_string_value(json_object_get(job, "docker_socket")),
                             .runtime = AL_DOCKER_RUNC };
        const char *rt = json_string_value(json_object_get(job, "docker_runtime"));
        if (rt && al_docker_runtime_from_name(rt, &o.runtime) < 0) {
            json_decref(job);
            return fail("job", "docker_runtime: want runc or runsc");
        }
        if (skill_dir && script) {
            json_decref(job);
            return fail("driver", "skills run on the native driver; the docker driver does not mount a skill's "
                                  "bundle yet");
        }
        if (!img_dir || !img_digest) {
            json_decref(job);
            return fail("driver", "the docker driver runs on an image, not the host's /usr: give the workspace "
                                  "an image (default)");
        }
        o.image_dir = ir.root;
        o.image_digest = img_digest;
        json_t *jb = json_object_get(job, "docker_box");
        al_docker_held held = { .holder_lock = -1, .uid_lock = -1 };
        if (json_is_object(jb)) {
            snprintf(held.id, sizeof held.id, "%s", json_string_value(json_object_get(jb, "id")) ?: "");
            snprintf(held.image_id, sizeof held.image_id, "%s",
                     json_string_value(json_object_get(jb, "image_id")) ?: "");
            held.holder = (uid_t)json_integer_value(json_object_get(jb, "holder"));
            held.uid = (uid_t)json_integer_value(json_object_get(jb, "uid"));
            held.hold_until_s = json_integer_value(json_object_get(jb, "hold_until"));
            o.held = &held;
        }
        al_docker_run(&o, &cfg, &res);
#else
        json_decref(job);
        return fail("driver", "the docker driver runs in airlock-server helper");
#endif
    } else if (driver && strcmp(driver, "native") != 0) {
        json_decref(job);
        return fail("job", "unknown driver");
    } else {
        al_box_run(&cfg, &res);
    }
    json_t *network = cli_net_finish(net, &res);
    json_t *doc = cli_result_json(&res, cfg.runtime);
    if (doc)
        json_object_set_new(doc, "network", network);
    else
        json_decref(network);
    emit(json_pack("{s:s, s:o}", "type", "result", "result", doc));
    al_box_result_free(&res);
    json_decref(job);
    return 0;
}
