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
#include "../drivers/remote_net.h"
#include "run_kube.h"
#endif
#include "../image/image.h"
#include "../lang/lang.h"
#include "cli.h"

#define EXIT_AIRLOCK 125
#define MAX_SCRIPT (4u << 20)
#define MAX_INPUTS 256
#define MAX_ARGS 1024


static void usage(FILE *f) {
    fprintf(f, "usage: airlock run [--lang L] [--in PATH]... [--out DIR] [--timeout S] [--memory SIZE]\n"
               "                   [--cpus N] [--pids N] [--driver native|docker|e2b|daytona|kubernetes] [--runtime runc|runsc]\n"
               "                   [--kubeconfig PATH] [--namespace NS] [--registry R] [--runtime-class RC]\n"
               "                   [--image-ref REPO@sha256:HEX] [--seccomp runtime-default|localhost:PATH] [--dry-run]\n"
               "                   [--package python:SPEC|node:SPEC]... [--package-registries LIST]\n"
               "                   [--package-index URL] [--package-npm-registry URL] [--package-scripts box|refuse]\n"
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
    al_box_net net;
} run_ud;

static int on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    return al_box_net_on_listener(fd, uid, gid, &((run_ud *)userdata)->net, err);
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

static void human_bytes(char *buf, size_t n, uint64_t b) {
    if (b >= (1ULL << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (1 << 20));
    else
        snprintf(buf, n, "%llu KiB", (unsigned long long)(b >> 10));
}

/* What `airlock run` was asked, from its command line. */
typedef struct run_opts {
    al_box_limits lim;
    uint64_t wall_s;
    const char *lang_name, *code, *file, *out_dir, *stdin_path, *image, *net_spec, *driver, *engine_runtime;
    const char *inputs[MAX_INPUTS];
    size_t n_inputs;
    bool json, forked, docker, kube;
    /* --driver kubernetes: --kubeconfig, --namespace, --registry,
     * --runtime-class, --image-ref, --seccomp, --dry-run */
    const char *kubeconfig, *kube_namespace, *registry, *runtime_class, *image_ref, *seccomp;
    bool dry_run;
    char **script_args;
    size_t n_args;
    cli_pkg_opts pkg;             /* --package and its settings */
} run_opts;

/* A limit's option A with value V into O: -1, or the exit status. */
static int set_bound(run_opts *o, const char *a, const char *v) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    bound bounds[] = {
        { "--timeout", &o->wall_s, 1, 3600, K_SECONDS },
        { "--memory", &o->lim.memory_bytes, 16ULL << 20, 16ULL << 30, K_SIZE },
        { "--cpus", &o->lim.cpu_millis, 10, (uint64_t)(ncpu > 0 ? ncpu : 1) * 1000, K_MILLIS },
        { "--pids", &o->lim.pids, 8, 4096, K_COUNT },
        { "--tmpfs-size", &o->lim.tmpfs_bytes, 1ULL << 20, 1ULL << 30, K_SIZE },
        { "--output-limit", &o->lim.output_bytes, 1024, 64ULL << 20, K_SIZE },
        { "--max-artifacts", &o->lim.max_artifacts, 0, 10000, K_COUNT },
        { "--max-artifact-size", &o->lim.max_artifact_bytes, 0, 1ULL << 30, K_SIZE },
        { "--max-artifacts-total", &o->lim.max_artifacts_total, 0, 4ULL << 30, K_SIZE },
        { "--max-depth", &o->lim.max_depth, 1, 64, K_COUNT },
    };
    bound *b = NULL;
    for (size_t k = 0; k < ELEMENTSOF(bounds); k++)
        if (strcmp(a, bounds[k].flag) == 0)
            b = &bounds[k];
    if (!b)
        return usage_error("unknown option %s", a);
    uint64_t val;
    int r = b->kind == K_SIZE ? al_parse_size(v, &val) : b->kind == K_MILLIS ? al_parse_millis(v, &val) : al_parse_u64(v, &val);
    if (r < 0) {
        fprintf(stderr, "airlock run: %s: bad value \"%s\"\n", a, v);
        return EXIT_AIRLOCK;
    }
    if (val < b->min || val > b->max) {
        fprintf(stderr, "airlock run: %s %s is outside the allowed range\n", a, v);
        return EXIT_AIRLOCK;
    }
    *b->field = val;
    return -1;
}

/* Option A with value V into O: -1, or the exit status. */
static int set_option(run_opts *o, const char *a, const char *v) {
    int pr = cli_pkg_option(&o->pkg, a, v);
    if (pr != 0)
        return pr;
    if (strcmp(a, "--lang") == 0) {
        o->lang_name = v;
    } else if (strcmp(a, "--in") == 0) {
        if (o->n_inputs == MAX_INPUTS)
            return usage_error("too many --in (at most 256)");
        o->inputs[o->n_inputs++] = v;
    } else if (strcmp(a, "--out") == 0) {
        o->out_dir = v;
    } else if (strcmp(a, "--stdin") == 0) {
        o->stdin_path = v;
    } else if (strcmp(a, "--image") == 0) {
        o->image = v;
    } else if (strcmp(a, "--net") == 0) {
        o->net_spec = v;
    } else if (strcmp(a, "--driver") == 0) {
        if (strcmp(v, "native") != 0 && strcmp(v, "docker") != 0 && strcmp(v, "e2b") != 0 &&
            strcmp(v, "daytona") != 0 && strcmp(v, "kubernetes") != 0)
            return usage_error("--driver %s: want native, docker, e2b, daytona or kubernetes", v);
        o->driver = v;
    } else if (strcmp(a, "--runtime") == 0) {
        o->engine_runtime = v;
    } else if (strcmp(a, "--kubeconfig") == 0) {
        o->kubeconfig = v;
    } else if (strcmp(a, "--namespace") == 0) {
        o->kube_namespace = v;
    } else if (strcmp(a, "--registry") == 0) {
        o->registry = v;
    } else if (strcmp(a, "--runtime-class") == 0) {
        o->runtime_class = v;
    } else if (strcmp(a, "--image-ref") == 0) {
        o->image_ref = v;
    } else if (strcmp(a, "--seccomp") == 0) {
        o->seccomp = v;
    } else {
        return set_bound(o, a, v);
    }
    return -1;
}

/* ARGV into O: -1, or the exit status (--help: 0). */
static int parse_args(int argc, char **argv, run_opts *o) {
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
            o->code = argv[++i];
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "--json") == 0) {
            o->json = true;
            continue;
        }
        if (strcmp(a, "--fork") == 0) {
            o->forked = true;
            continue;
        }
        if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = true;
            continue;
        }
        /* among the options only: after the script, --help is the script's */
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return usage_error("%s needs a value", a);
        int r = set_option(o, a, argv[++i]);
        if (r >= 0)
            return r;
    }
    o->lim.wall_ms = o->wall_s * 1000;
    if (!o->code) {
        if (i >= argc)
            return usage_error("no script given (a FILE or -c CODE)");
        o->file = argv[i++];
    }
    o->script_args = argv + i;
    o->n_args = (size_t)(argc - i);
    if (o->n_args > MAX_ARGS)
        return usage_error("too many script arguments (at most 1024)");
    o->docker = strcmp(o->driver, "docker") == 0;
    o->kube = strcmp(o->driver, "kubernetes") == 0;
    if (o->engine_runtime && !o->docker)
        return usage_error("--runtime %s is the docker driver's (--driver docker)", o->engine_runtime);
    if (!o->kube && (o->kubeconfig || o->kube_namespace || o->registry || o->runtime_class || o->image_ref ||
                     o->seccomp || o->dry_run))
        return usage_error("--kubeconfig, --namespace, --registry, --runtime-class, --image-ref, --seccomp and "
                           "--dry-run are the kubernetes driver's (--driver kubernetes)");
    if (o->kube && o->forked)
        return usage_error("--fork is the native driver's");
    if (cli_pkg_wanted(&o->pkg) && (o->forked || strcmp(o->driver, "native") != 0))
        return usage_error("--package installs for a cold box of the native driver (not --fork, not --driver %s)",
                           o->driver);
#ifdef AIRLOCK_SERVER
    al_docker_runtime rt;
    if (o->engine_runtime && al_docker_runtime_from_name(o->engine_runtime, &rt) < 0)
        return usage_error("--runtime %s: want runc or runsc", o->engine_runtime);
#else
    if (strcmp(o->driver, "native") != 0)
        return usage_error("--driver %s runs in airlock-server (beside airlock)", o->driver);
#endif
    /* a container runs on an image: airlock's default unless named */
    if ((o->docker || o->kube) && (!o->image || strcmp(o->image, "host") == 0)) {
        if (o->image)
            return usage_error("--driver %s runs on an image, not the host's /usr (--image default)", o->driver);
        o->image = "default";
    }
    return -1;
}

/* O's language: named, or told by its file's extension. NULL after
 * saying why. */
static const al_lang *lang_of(const run_opts *o) {
    const al_lang *lang = NULL;
    if (o->lang_name) {
        if (!(lang = al_lang_by_name(o->lang_name)))
            usage_error("unknown language \"%s\" (python, node, bash)", o->lang_name);
    } else if (o->file) {
        if (!(lang = al_lang_by_file(o->file)))
            usage_error("cannot tell the language of %s from its extension: use --lang", o->file);
    } else {
        usage_error("-c needs --lang");
    }
    return lang;
}

/* O's script (its file's bytes, or -c's code) into *RET (of *RET_LEN
 * bytes); its name in /work into *RET_NAME (the file's, or LANG's default
 * name). -1, or the exit status. */
static int read_script(const run_opts *o, const al_lang *lang, char **ret, size_t *ret_len, char *name, size_t name_len) {
    snprintf(name, name_len, "%s", lang->default_file);
    if (o->file) {
        int r = al_read_small(AT_FDCWD, o->file, MAX_SCRIPT, ret, ret_len);
        if (r < 0) {
            fprintf(stderr, "airlock run: read %s: %s\n", o->file, r == -EFBIG ? "larger than 4 MiB" : strerror(-r));
            return EXIT_AIRLOCK;
        }
        /* a forked box's interpreter started as `python3 main.py`, before
         * its run was known: its script is main.py, as every service run's */
        _cleanup_free_ char *copy = strdup(o->file);
        if (!o->forked && copy)
            snprintf(name, name_len, "%s", basename(copy));
        return -1;
    }
    *ret_len = strlen(o->code);
    if (*ret_len > MAX_SCRIPT)
        return usage_error("-c code is larger than 4 MiB");
    *ret = strdup(o->code);
    return -1;
}

/* O's --out (made) and --stdin, opened into *RET_OUT and *RET_IN: -1, or
 * the exit status. */
static int open_files(const run_opts *o, int *ret_out, int *ret_in) {
    if (o->out_dir) {
        if (mkdir(o->out_dir, 0755) < 0 && errno != EEXIST) {
            fprintf(stderr, "airlock run: create %s: %s\n", o->out_dir, strerror(errno));
            return EXIT_AIRLOCK;
        }
        *ret_out = open(o->out_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
        if (*ret_out < 0) {
            fprintf(stderr, "airlock run: open %s: %s\n", o->out_dir, strerror(errno));
            return EXIT_AIRLOCK;
        }
    }
    if (o->stdin_path) {
        struct stat st;
        *ret_in = open(o->stdin_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (*ret_in < 0 || fstat(*ret_in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (16 << 20)) {
            fprintf(stderr, "airlock run: --stdin %s: must be a regular file of at most 16 MiB\n", o->stdin_path);
            return EXIT_AIRLOCK;
        }
    }
    return -1;
}

/* RES said on stderr, as a person reads it (--json: on stdout, whole, by
 * the caller), with what the network did (NETWORK, under policy SPEC). */
static void report(const run_opts *o, const al_box_result *res, json_t *network, const char *spec) {
    char peak[32];
    human_bytes(peak, sizeof peak, res->peak_memory_bytes);
    fprintf(stderr, "airlock: %s", al_reason_name(res->reason));
    if (res->signal)
        fprintf(stderr, " (signal %d)", res->signal);
    else
        fprintf(stderr, " %d", res->exit_code);
    if (o->kube)
        /* the API reports neither: a 0 would read as measured */
        fprintf(stderr, " in %llu ms (cpu and peak memory are not reported by Kubernetes)",
                (unsigned long long)res->wall_ms);
    else
        fprintf(stderr, " in %llu ms, cpu %llu ms, peak %s", (unsigned long long)res->wall_ms,
                (unsigned long long)res->cpu_ms, peak);
    if (res->out_truncated[0] || res->out_truncated[1])
        fprintf(stderr, ", output truncated at %llu bytes", (unsigned long long)o->lim.output_bytes);
    fprintf(stderr, "; %zu artifact%s", res->n_artifacts, res->n_artifacts == 1 ? "" : "s");
    if (o->out_dir && res->n_artifacts)
        fprintf(stderr, " in %s", o->out_dir);
    if (res->n_skipped)
        fprintf(stderr, ", %zu skipped", res->n_skipped);
    fputc('\n', stderr);
    for (size_t k = 0; k < res->n_skipped; k++) {
        fprintf(stderr, "airlock: skipped /out/");
        cli_write_safe(stderr, res->skipped[k].path, strlen(res->skipped[k].path));
        fprintf(stderr, ": %s\n", res->skipped[k].why);
    }
    size_t ne = json_array_size(json_object_get(network, "egress")), denied = 0;
    for (size_t k = 0; k < ne; k++)
        denied += strcmp(json_string_value(json_object_get(json_array_get(json_object_get(network, "egress"), k),
                                                           "decision")) ?: "", "allowed") != 0;
    if (ne)
        fprintf(stderr, "airlock: network %s: %zu connection%s, %zu denied (--json lists them)\n", spec, ne,
                ne == 1 ? "" : "s", denied);
}

/* RES (R: al_box_run's return) said, --json or as a person reads it, with
 * NETWORK: the exit status. */
static int finish(const run_opts *o, int r, const al_box_result *res, const al_runtime *rt, json_t *network,
                  const char *spec, const cli_pkg_run *pkg) {
    int status;
    bool failed = r < 0 || res->reason == AL_REASON_ERROR;
    if (failed)
        status = EXIT_AIRLOCK;
    else if (res->signal)
        status = 128 + res->signal;
    else
        status = res->exit_code;
    if (failed)
        fprintf(stderr, "airlock: failed at step \"%s\": %s (%s)\n", res->error.step[0] ? res->error.step : "run",
                res->error.msg[0] ? res->error.msg : "unknown error", strerror(res->error.err ? res->error.err : EIO));
    if (o->json) {
        json_t *doc = al_box_result_json(res, rt);
        if (doc)
            json_object_set(doc, "network", network);
        if (doc && pkg->started)
            json_object_set_new(doc, "packages", al_install_result(&pkg->in));
        char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        else
            status = EXIT_AIRLOCK;
        free(s);
        json_decref(doc);
    } else if (!failed) {
        report(o, res, network, spec);
    }
    return status;
}

/* A run whose packages did not install (PKG says why): no box was made;
 * its result says install_failed, with the install's exit code. */
static int install_failed(const run_opts *o, const cli_pkg_run *pkg, const al_runtime *rt, al_box_net *net) {
    al_box_result res = { .exit_code = pkg->in.exit_code, .reason = AL_REASON_ERROR, .error = pkg->error };
    fprintf(stderr, "airlock: install failed (%s): %s\n", pkg->in.failed_step ? pkg->in.failed_step : "install",
            pkg->error.msg);
    if (o->json) {
        json_t *doc = al_box_result_json(&res, rt);
        if (doc) {
            json_object_set_new(doc, "reason", json_string(al_reason_name(pkg->error.err == ECANCELED ? AL_REASON_CANCELED
                                                                                        : AL_REASON_INSTALL_FAILED)));
            json_object_set_new(doc, "packages", al_install_result(&pkg->in));
            json_object_set_new(doc, "network", al_box_net_finish(net, &res));
        }
        char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(doc);
    }
    return EXIT_AIRLOCK;
}

/* --package: the layer made (or found) before the box, into *RET_PKG
 * (allocated here, for the caller to free): -1 to go on to the box, else
 * the status the run ends with (the install failed, or could not start),
 * its contents freed. */
static int packages_first(const run_opts *o, cli_pkg_run **ret_pkg, const char *img_digest, int sig_fd,
                          const al_runtime *rt, al_box_net *net) {
    cli_pkg_run *pkg = *ret_pkg = calloc(1, sizeof *pkg);
    if (!pkg)
        return EXIT_AIRLOCK;
    if (!cli_pkg_wanted(&o->pkg))
        return -1;
    int st = cli_pkg_install(&o->pkg, img_digest[0] ? img_digest : NULL, sig_fd, pkg);
    if (st < 0 && pkg->failed)
        st = install_failed(o, pkg, rt, net);
    if (st >= 0)
        cli_pkg_free(pkg);
    return st;
}

#ifdef AIRLOCK_SERVER
/* `--driver e2b|daytona`: CFG in a sandbox of that cloud, its service and
 * key from the environment as its SDK reads them (E2B_API_KEY,
 * E2B_API_URL, E2B_SANDBOX_URL, E2B_TEMPLATE; DAYTONA_API_KEY,
 * DAYTONA_API_URL, DAYTONA_TARGET). -1 when it ran (*RES), else the exit
 * status after saying why. */
static int run_remote(al_remote_kind kind, const al_box_net *net, al_box_config *cfg, al_box_result *res) {
    bool e2b = kind == AL_REMOTE_E2B;
    const char *key = getenv(e2b ? "E2B_API_KEY" : "DAYTONA_API_KEY");
    const char *api = getenv(e2b ? "E2B_API_URL" : "DAYTONA_API_URL");
    if (!key || !*key)
        return usage_error("--driver %s needs its key in %s", e2b ? "e2b" : "daytona",
                           e2b ? "E2B_API_KEY" : "DAYTONA_API_KEY");
    const char *why = NULL;
    if (!al_driver_remote_net_held(kind, net->policy.mode, &why))
        return usage_error("--net %s: %s", net->spec, why);
    const char *hosts[AL_REMOTE_HOSTS_MAX];
    al_remote_opts ro = { .kind = kind, .api_key = key,
                          .api_url = api && *api ? api : e2b ? "https://api.e2b.app" : "https://app.daytona.io/api",
                          .sandbox_url = e2b ? getenv("E2B_SANDBOX_URL") : NULL,
                          .template_name = getenv(e2b ? "E2B_TEMPLATE" : "DAYTONA_TARGET"), .tag = "cli" };
    al_driver_remote_net(&net->policy, &ro, hosts);
    cfg->listen_port = 0;
    al_remote_run(&ro, cfg, res);
    return -1;
}
#endif

int cli_run(int argc, char **argv) {
    _cleanup_free_ run_opts *o = calloc(1, sizeof *o);
    if (!o)
        return EXIT_AIRLOCK;
    al_box_limits_default(&o->lim);
    o->wall_s = o->lim.wall_ms / 1000;
    o->driver = "native";
    int st = parse_args(argc, argv, o);
    if (st >= 0)
        return st;
#ifdef AIRLOCK_SERVER
    /* (its name checked with the options) */
    al_docker_opts dopts = { .runtime = AL_DOCKER_RUNC, .owner_fd = -1 };
    if (o->engine_runtime)
        al_docker_runtime_from_name(o->engine_runtime, &dopts.runtime);
#endif
    const al_lang *lang = lang_of(o);
    if (!lang)
        return EXIT_AIRLOCK;
    _cleanup_free_ char *script = NULL;
    size_t script_len = 0;
    char script_name[NAME_MAX + 1];
    if ((st = read_script(o, lang, &script, &script_len, script_name, sizeof script_name)) >= 0)
        return st;
    _cleanup_close_ int out_fd = -1, in_fd = -1;
    if ((st = open_files(o, &out_fd, &in_fd)) >= 0)
        return st;
    _cleanup_free_ char **box_argv = calloc(o->n_args + 3, sizeof *box_argv);
    if (!box_argv)
        return EXIT_AIRLOCK;
    box_argv[0] = (char *)lang->interpreter;
    box_argv[1] = script_name;
    for (size_t k = 0; k < o->n_args; k++)
        box_argv[k + 2] = o->script_args[k];

    /* Ctrl-C, SIGTERM or a hangup cancel the box cleanly (killed, cgroup
     * removed) instead of leaving it to die with us */
    _cleanup_close_ int sig_fd = al_cancel_signals();

    _cleanup_free_ run_ud *ud = calloc(1, sizeof *ud);
    if (!ud)
        return EXIT_AIRLOCK;
    ud->tty = isatty(STDOUT_FILENO) || isatty(STDERR_FILENO);
    al_error nerr = { 0 };
    if (al_box_net_init(&ud->net, o->net_spec, &nerr) < 0)
        return usage_error("--net %s: %s", o->net_spec, nerr.msg);
    /* the runtime: the host's /usr, or an image named by alias or digest */
    al_image_runtime ir = { 0 };
    char img_digest[65] = "";
    const al_runtime *runtime = &al_runtime_host;
    /* (--image-ref names the pod's image in its registry: no local one) */
    if (o->image && strcmp(o->image, "host") != 0 && !(o->kube && o->image_ref)) {
        char images[PATH_MAX], dir[PATH_MAX], digest[65];
        al_error ierr = { 0 };
        cli_images_dir(images, sizeof images);
        /* the kubernetes driver names the pod's image by the entry's
         * oci.json: a reference entry (the server image's) will do */
        int r = (o->kube ? al_image_resolve_ref : al_image_resolve)(images, o->image, dir, sizeof dir, digest, &ierr);
        if (r < 0) {
            fprintf(stderr, "airlock run: --image %s: %s%s\n", o->image, ierr.msg,
                    r == -ENOENT && strncmp(ierr.msg, "no image", 8) == 0
                        ? " (`airlock image build` makes the default image there; AIRLOCK_IMAGES=DIR in the "
                                   "environment names another directory)" : "");
            return EXIT_AIRLOCK;
        }
        al_image_runtime_init(&ir, dir, digest);
        runtime = &ir.rt;
        snprintf(img_digest, sizeof img_digest, "%s", digest);
    }
    /* --package: the layer before the box (or the run ends here) */
    _cleanup_free_ cli_pkg_run *pkg = NULL;
    if ((st = packages_first(o, &pkg, img_digest, sig_fd, runtime, &ud->net)) >= 0)
        return st;
    al_box_file sf = { script_name, script, script_len, 0644 };
    al_box_config cfg = {
        .runtime = runtime,
        .argv = box_argv,
        .envp = ud->net.env,
        .files = &sf,
        .n_files = 1,
        .inputs = o->inputs,
        .n_inputs = o->n_inputs,
        .stdin_fd = in_fd,
        .out_dirfd = out_fd,
        .limits = o->lim,
        .on_output = o->json ? NULL : on_output,
        .userdata = ud,
        .cancel_fd = sig_fd,
        .listen_port = al_box_net_listen_port(&ud->net),
        .on_listener = on_listener,
    };
    cli_pkg_box(pkg, &cfg);
    al_box_result res;
    int r;
#ifdef AIRLOCK_SERVER
    if (o->kube && ud->net.policy.mode != AL_NET_OFFLINE)
        return usage_error("--net %s: refused by the kubernetes driver: sandbox pods are deny-all (the chart's "
                           "NetworkPolicy); an egress proxy for them is not built yet", ud->net.spec);
    if (o->kube && o->dry_run) {
        cli_kube_args ka = { .kubeconfig = o->kubeconfig, .namespace_ = o->kube_namespace, .registry = o->registry,
                             .runtime_class = o->runtime_class, .image_ref = o->image_ref, .image = o->image,
                             .seccomp = o->seccomp,
                             .image_dir = o->image_ref ? NULL : ir.root, .dry_run = true };
        cfg.listen_port = 0;
        return cli_run_kube_dry_run(&ka, &cfg);
    }
    al_remote_kind rk;
    if (o->kube) {
        cli_kube_args ka = { .kubeconfig = o->kubeconfig, .namespace_ = o->kube_namespace, .registry = o->registry,
                             .runtime_class = o->runtime_class, .image_ref = o->image_ref, .image = o->image,
                             .seccomp = o->seccomp,
                             .image_dir = ir.root };
        cfg.listen_port = 0;
        if ((st = cli_run_kube(&ka, &cfg, &res, &r)) >= 0)
            return st;
    } else if (al_remote_kind_from_name(o->driver, &rk) == 0) {
        if ((st = run_remote(rk, &ud->net, &cfg, &res)) >= 0)
            return st;
        r = 0;
    } else if (o->docker) {
        dopts.image_dir = ir.root;
        dopts.image_digest = ir.digest;
        r = al_docker_run(&dopts, &cfg, &res);
    } else
#endif
    if (o->forked)
        r = cli_run_forked(lang, &cfg, runtime == &al_runtime_host ? NULL : ir.root, &res);
    else
        r = al_box_run(&cfg, &res);
    json_t *network = al_box_net_finish(&ud->net, &res);
#ifdef AIRLOCK_SERVER
    if (al_remote_kind_from_name(o->driver, &rk) == 0) {
        const char *hosts[AL_REMOTE_HOSTS_MAX];
        al_remote_opts ro = { .kind = rk };
        al_driver_remote_net(&ud->net.policy, &ro, hosts);
        al_remote_network_control(&ro, &res.controls.network);
    }
    if (o->kube) {
        /* the namespace's deny-all NetworkPolicy, not a namespace of ours */
        al_controls kc;
        al_kube_controls(NULL, false, &kc);
        res.controls.network = kc.network;
    }
#endif
    st = finish(o, r, &res, cfg.runtime, network, ud->net.spec, pkg);
    json_decref(network);
    al_box_result_free(&res);
    cli_pkg_free(pkg);
    return st;
}
