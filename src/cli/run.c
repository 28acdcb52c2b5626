/* `airlock run`: options, then FILE or -c CODE, then the script's args. */
#include <fcntl.h>
#include <stdarg.h>
#include <libgen.h>
#include <limits.h>
#include <string.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>

#ifdef AIRLOCK_SERVER
#include "../docker/docker.h"
#endif
#include "../image/image.h"
#include "../lang/lang.h"
#include "cli.h"
#include "net.h"

#define EXIT_AIRLOCK 125
#define MAX_SCRIPT (4u << 20)
#define MAX_INPUTS 256
#define MAX_ARGS 1024

char *const cli_box_env[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/tmp",
    "TMPDIR=/tmp",
    "LANG=C.UTF-8",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "MPLCONFIGDIR=/tmp/.matplotlib",
    NULL,
};

static void usage(FILE *f) {
    fprintf(f, "usage: airlock run [--lang L] [--in PATH]... [--out DIR] [--timeout S] [--memory SIZE]\n"
               "                   [--cpus N] [--pids N] [--driver native|docker] [--runtime runc|runsc]\n"
               "                   [--json] [--fork] ... (FILE | -c CODE) [ARGS...]\n"
               "see docs/cli.md for every option\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "airlock run: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    usage(stderr);
    return EXIT_AIRLOCK;
}

typedef struct bound {
    const char *flag;
    uint64_t *field;
    uint64_t min, max;
    enum { K_SIZE, K_COUNT, K_SECONDS, K_MILLIS } kind;
} bound;

typedef struct run_ud {
    bool tty;
    cli_net net;
} run_ud;

static int on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    return cli_net_on_listener(fd, uid, gid, &((run_ud *)userdata)->net, err);
}

static void on_output(al_stream s, const char *buf, size_t len, void *userdata) {
    bool tty = ((run_ud *)userdata)->tty;
    FILE *f = s == AL_STREAM_STDOUT ? stdout : stderr;
    if (tty)
        cli_write_safe(f, buf, len);
    else
        fwrite(buf, 1, len, f);
    fflush(f);
}

int cli_cancel_signals(void) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    return signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
}

static void human_bytes(char *buf, size_t n, uint64_t b) {
    if (b >= (1ULL << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%llu KiB", (unsigned long long)(b >> 10));
}

int cli_run(int argc, char **argv) {
    al_box_limits lim;
    al_box_limits_default(&lim);
    uint64_t wall_s = lim.wall_ms / 1000;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    bound bounds[] = {
        { "--timeout", &wall_s, 1, 3600, K_SECONDS },
        { "--memory", &lim.memory_bytes, 16ULL << 20, 16ULL << 30, K_SIZE },
        { "--cpus", &lim.cpu_millis, 10, (uint64_t)(ncpu > 0 ? ncpu : 1) * 1000, K_MILLIS },
        { "--pids", &lim.pids, 8, 4096, K_COUNT },
        { "--tmpfs-size", &lim.tmpfs_bytes, 1ULL << 20, 1ULL << 30, K_SIZE },
        { "--output-limit", &lim.output_bytes, 1024, 64ULL << 20, K_SIZE },
        { "--max-artifacts", &lim.max_artifacts, 0, 10000, K_COUNT },
        { "--max-artifact-size", &lim.max_artifact_bytes, 0, 1ULL << 30, K_SIZE },
        { "--max-artifacts-total", &lim.max_artifacts_total, 0, 4ULL << 30, K_SIZE },
        { "--max-depth", &lim.max_depth, 1, 64, K_COUNT },
    };
    const char *lang_name = NULL, *code = NULL, *file = NULL, *out_dir = NULL, *stdin_path = NULL, *image = NULL;
    const char *net_spec = NULL, *driver = "native", *engine_runtime = NULL;
    const char *inputs[MAX_INPUTS];
    size_t n_inputs = 0;
    bool json = false, forked = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-c") == 0) {
            if (i + 1 >= argc)
                return usage_error("-c needs the code");
            code = argv[++i];
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "--json") == 0) {
            json = true;
            continue;
        }
        if (strcmp(a, "--fork") == 0) {
            forked = true;
            continue;
        }
        /* among the options only: after the script, --help is the script's */
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value", a);
        const char *v = argv[++i];
        if (strcmp(a, "--lang") == 0) {
            lang_name = v;
        } else if (strcmp(a, "--in") == 0) {
            if (n_inputs == MAX_INPUTS)
                return usage_error("too many --in (at most 256)");
            inputs[n_inputs++] = v;
        } else if (strcmp(a, "--out") == 0) {
            out_dir = v;
        } else if (strcmp(a, "--stdin") == 0) {
            stdin_path = v;
        } else if (strcmp(a, "--image") == 0) {
            image = v;
        } else if (strcmp(a, "--net") == 0) {
            net_spec = v;
        } else if (strcmp(a, "--driver") == 0) {
            if (strcmp(v, "native") != 0 && strcmp(v, "docker") != 0)
                return usage_error("--driver %s: want native or docker", v);
            driver = v;
        } else if (strcmp(a, "--runtime") == 0) {
            engine_runtime = v;

        } else {
            bound *b = NULL;
            for (size_t k = 0; k < ELEMENTSOF(bounds); k++)
                if (strcmp(a, bounds[k].flag) == 0)
                    b = &bounds[k];
            if (!b)
                return usage_error("unknown option %s", a);
            uint64_t val;
            int r = b->kind == K_SIZE ? al_parse_size(v, &val)
                    : b->kind == K_MILLIS ? al_parse_millis(v, &val)
                                          : al_parse_u64(v, &val);
            if (r < 0) {
                fprintf(stderr, "airlock run: %s: bad value \"%s\"\n", a, v);
                return EXIT_AIRLOCK;
            }
            if (val < b->min || val > b->max) {
                fprintf(stderr, "airlock run: %s %s is outside the allowed range\n", a, v);
                return EXIT_AIRLOCK;
            }
            *b->field = val;
        }
    }
    lim.wall_ms = wall_s * 1000;
    if (!code) {
        if (i >= argc)
            return usage_error("no script given (a FILE or -c CODE)");
        file = argv[i++];
    }
    char **script_args = argv + i;
    size_t n_args = (size_t)(argc - i);
    if (n_args > MAX_ARGS)
        return usage_error("too many script arguments (at most 1024)");

    bool docker = strcmp(driver, "docker") == 0;
    if (engine_runtime && !docker)
        return usage_error("--runtime %s is the docker driver's (--driver docker)", engine_runtime);
#ifdef AIRLOCK_SERVER
    al_docker_opts dopts = { .runtime = AL_DOCKER_RUNC, .owner_fd = -1 };
    if (engine_runtime && al_docker_runtime_from_name(engine_runtime, &dopts.runtime) < 0)
        return usage_error("--runtime %s: want runc or runsc", engine_runtime);
#else
    if (docker)
        return usage_error("--driver docker runs in airlock-server (beside airlock)");
#endif
    /* a container runs on an image: airlock's default unless named */
    if (docker && (!image || strcmp(image, "host") == 0)) {
        if (image)
            return usage_error("--driver docker runs on an image, not the host's /usr (--image default)");
        image = "default";
    }

    const al_lang *lang = NULL;
    if (lang_name) {
        lang = al_lang_by_name(lang_name);
        if (!lang)
            return usage_error("unknown language \"%s\" (python, node, bash)", lang_name);
    } else if (file) {
        lang = al_lang_by_file(file);
        if (!lang)
            return usage_error("cannot tell the language of %s from its extension: use --lang", file);
    } else {
        return usage_error("-c needs --lang");
    }

    _cleanup_free_ char *script = NULL;
    size_t script_len = 0;
    const char *script_name = lang->default_file;
    _cleanup_free_ char *file_copy = NULL;
    if (file) {
        int r = al_read_small(AT_FDCWD, file, MAX_SCRIPT, &script, &script_len);
        if (r < 0) {
            fprintf(stderr, "airlock run: read %s: %s\n", file, r == -EFBIG ? "larger than 4 MiB" : strerror(-r));
            return EXIT_AIRLOCK;
        }
        file_copy = strdup(file);
        /* a forked box's interpreter started as `python3 main.py`, before
         * its run was known: its script is main.py, as every service run's */
        if (!forked)
            script_name = basename(file_copy);
    } else {
        script_len = strlen(code);
        if (script_len > MAX_SCRIPT)
            return usage_error("-c code is larger than 4 MiB");
        script = strdup(code);
    }

    _cleanup_close_ int out_fd = -1, in_fd = -1;
    if (out_dir) {
        if (mkdir(out_dir, 0755) < 0 && errno != EEXIST) {
            fprintf(stderr, "airlock run: create %s: %s\n", out_dir, strerror(errno));
            return EXIT_AIRLOCK;
        }
        out_fd = open(out_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (out_fd < 0) {
            fprintf(stderr, "airlock run: open %s: %s\n", out_dir, strerror(errno));
            return EXIT_AIRLOCK;
        }
    }
    if (stdin_path) {
        struct stat st;
        in_fd = open(stdin_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (in_fd < 0 || fstat(in_fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20)) {
            fprintf(stderr, "airlock run: --stdin %s: must be a regular file of at most 16 MiB\n", stdin_path);
            return EXIT_AIRLOCK;
        }
    }

    _cleanup_free_ char **box_argv = calloc(n_args + 3, sizeof *box_argv);
    if (!box_argv)
        return EXIT_AIRLOCK;
    box_argv[0] = (char *)lang->interpreter;
    box_argv[1] = (char *)script_name;
    for (size_t k = 0; k < n_args; k++)
        box_argv[k + 2] = script_args[k];

    /* Ctrl-C, SIGTERM or a hangup cancel the box cleanly (killed, cgroup
     * removed) instead of leaving it to die with us */
    _cleanup_close_ int sig_fd = cli_cancel_signals();

    _cleanup_free_ run_ud *ud = calloc(1, sizeof *ud);
    if (!ud)
        return EXIT_AIRLOCK;
    ud->tty = isatty(STDOUT_FILENO) || isatty(STDERR_FILENO);
    al_error nerr = { 0 };
    if (cli_net_init(&ud->net, net_spec, &nerr) < 0)
        return usage_error("--net %s: %s", net_spec, nerr.msg);
    /* the runtime: the host's /usr, or an image named by alias or digest */
    al_image_runtime ir;
    const al_runtime *runtime = &al_runtime_host;
    if (image && strcmp(image, "host") != 0) {
        char images[PATH_MAX], dir[PATH_MAX], digest[65];
        al_error ierr = { 0 };
        cli_images_dir(images, sizeof images);
        if (al_image_resolve(images, image, dir, sizeof dir, digest, &ierr) < 0) {
            fprintf(stderr, "airlock run: --image %s: %s\n", image, ierr.msg);
            return EXIT_AIRLOCK;
        }
        al_image_runtime_init(&ir, dir, digest);
        runtime = &ir.rt;
    }
    al_box_file sf = { script_name, script, script_len, 0644 };
    al_box_config cfg = {
        .runtime = runtime,
        .argv = box_argv,
        .envp = ud->net.env,
        .files = &sf,
        .n_files = 1,
        .inputs = inputs,
        .n_inputs = n_inputs,
        .stdin_fd = in_fd,
        .out_dirfd = out_fd,
        .limits = lim,
        .on_output = json ? NULL : on_output,
        .userdata = ud,
        .cancel_fd = sig_fd,
        .listen_port = cli_net_listen_port(&ud->net),
        .on_listener = on_listener,
    };
    al_box_result res;
    int r;
#ifdef AIRLOCK_SERVER
    if (docker) {
        dopts.image_dir = ir.root;
        dopts.image_digest = ir.digest;
        r = al_docker_run(&dopts, &cfg, &res);
    } else
#endif
    if (forked)
        r = cli_run_forked(lang, &cfg, runtime == &al_runtime_host ? NULL : ir.root, &res);
    else
        r = al_box_run(&cfg, &res);
    json_t *network = cli_net_finish(&ud->net, &res);
    int status;
    if (r < 0 || res.reason == AL_REASON_ERROR)
        status = EXIT_AIRLOCK;
    else if (res.signal)
        status = 128 + res.signal;
    else
        status = res.exit_code;

    if (r < 0 || res.reason == AL_REASON_ERROR)
        fprintf(stderr, "airlock: failed at step \"%s\": %s (%s)\n", res.error.step[0] ? res.error.step : "run",
                res.error.msg[0] ? res.error.msg : "unknown error", strerror(res.error.err ? res.error.err : EIO));
    if (json) {
        json_t *doc = cli_result_json(&res, cfg.runtime);
        if (doc)
            json_object_set(doc, "network", network);
        char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        else
            status = EXIT_AIRLOCK;
        free(s);
        json_decref(doc);
    } else if (r == 0 && res.reason != AL_REASON_ERROR) {
        char peak[32];
        human_bytes(peak, sizeof peak, res.peak_memory_bytes);
        fprintf(stderr, "airlock: %s", al_reason_name(res.reason));
        if (res.signal)
            fprintf(stderr, " (signal %d)", res.signal);
        else
            fprintf(stderr, " %d", res.exit_code);
        fprintf(stderr, " in %llu ms, cpu %llu ms, peak %s", (unsigned long long)res.wall_ms,
                (unsigned long long)res.cpu_ms, peak);
        if (res.out_truncated[0] || res.out_truncated[1])
            fprintf(stderr, ", output truncated at %llu bytes", (unsigned long long)lim.output_bytes);
        fprintf(stderr, "; %zu artifact%s", res.n_artifacts, res.n_artifacts == 1 ? "" : "s");
        if (out_dir && res.n_artifacts)
            fprintf(stderr, " in %s", out_dir);
        if (res.n_skipped)
            fprintf(stderr, ", %zu skipped", res.n_skipped);
        fputc('\n', stderr);
        for (size_t k = 0; k < res.n_skipped; k++) {
            fprintf(stderr, "airlock: skipped /out/");
            cli_write_safe(stderr, res.skipped[k].path, strlen(res.skipped[k].path));
            fprintf(stderr, ": %s\n", res.skipped[k].why);
        }
    }
    if (!json && r == 0 && res.reason != AL_REASON_ERROR) {
        size_t ne = json_array_size(json_object_get(network, "egress")), denied = 0;
        for (size_t k = 0; k < ne; k++)
            denied += strcmp(json_string_value(json_object_get(json_array_get(json_object_get(network, "egress"), k),
                                                               "decision")) ?: "", "allowed") != 0;
        if (ne)
            fprintf(stderr, "airlock: network %s: %zu connection%s, %zu denied (--json lists them)\n", ud->net.spec, ne,
                    ne == 1 ? "" : "s", denied);
    }
    json_decref(network);
    al_box_result_free(&res);
    return status;
}
