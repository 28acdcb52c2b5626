/* `airlock smoke --driver kubernetes` (airlock-server only): whether the
 * cluster enforces the sandbox pods' deny-all NetworkPolicy, with a
 * positive control (kube/smoke.h). Exit 0 only for "enforced"; 1 for NOT
 * ENFORCED; 2 for inconclusive; 125 when it could not start. The outcome
 * is printed as JSON on stdout and as a line on stderr. */
#include <limits.h>
#include <string.h>

#include "../image/image.h"
#include "../kube/cluster.h"
#include "../kube/smoke.h"
#include "cli.h"
#include "run_kube.h"

#define EXIT_AIRLOCK 125

static int usage(FILE *f) {
    fprintf(f, "usage: airlock smoke --driver kubernetes [--kubeconfig PATH] [--namespace NS]\n"
               "                     [--image-ref REPO@sha256:HEX | --registry R [--image NAME]]\n"
               "                     [--runtime-class RC] [--seccomp runtime-default|localhost:PATH] [--timeout S]\n"
               "Runs a target pod, a control probe and a sandbox probe (airlock.dev/sandbox=true) in the\n"
               "namespace: enforced when the control reaches the target and the sandbox probe does not\n"
               "(and, with --seccomp localhost:PATH, the sandbox probe under that profile sees ptrace, keyctl\n"
               "and io_uring_setup refused, as airlock's profile refuses them).\n");
    return f == stdout ? 0 : EXIT_AIRLOCK;
}

typedef struct smoke_args {
    cli_kube_args k;
    const char *driver;
    uint64_t timeout_s;
} smoke_args;

static int parse(int argc, char **argv, smoke_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        /* (the JSON is always printed: accepted as the other commands take it) */
        if (strcmp(o, "--json") == 0)
            continue;
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0)
            return usage(stdout);
        if (i + 1 >= argc) {
            fprintf(stderr, "airlock smoke: %s needs a value\n", o);
            return usage(stderr);
        }
        const char *v = argv[++i];
        if (strcmp(o, "--driver") == 0)
            a->driver = v;
        else if (strcmp(o, "--kubeconfig") == 0)
            a->k.kubeconfig = v;
        else if (strcmp(o, "--namespace") == 0)
            a->k.namespace_ = v;
        else if (strcmp(o, "--image-ref") == 0)
            a->k.image_ref = v;
        else if (strcmp(o, "--registry") == 0)
            a->k.registry = v;
        else if (strcmp(o, "--image") == 0)
            a->k.image = v;
        else if (strcmp(o, "--runtime-class") == 0)
            a->k.runtime_class = v;
        else if (strcmp(o, "--seccomp") == 0)
            a->k.seccomp = v;
        else if (strcmp(o, "--timeout") == 0) {
            if (al_parse_u64(v, &a->timeout_s) < 0 || a->timeout_s < 10 || a->timeout_s > 1800) {
                fprintf(stderr, "airlock smoke: --timeout %s: want 10 to 1800 seconds\n", v);
                return EXIT_AIRLOCK;
            }
        } else {
            fprintf(stderr, "airlock smoke: unknown option %s\n", o);
            return usage(stderr);
        }
    }
    if (!a->driver || strcmp(a->driver, "kubernetes") != 0) {
        fprintf(stderr, "airlock smoke: --driver kubernetes is the one smoke test there is\n");
        return usage(stderr);
    }
    return -1;
}

int cli_smoke(int argc, char **argv) {
    smoke_args a = { .k.image = "default", .timeout_s = 180 };
    int st = parse(argc, argv, &a);
    if (st >= 0)
        return st;
    char dir[PATH_MAX], ref[AL_KUBE_REF_MAX];
    al_kube_seccomp sk;
    const char *sp;
    if ((st = cli_kube_seccomp("smoke", a.k.seccomp, &sk, &sp)) >= 0)
        return st;
    if (!a.k.image_ref) {
        char images[PATH_MAX], digest[65];
        al_error ierr = { 0 };
        cli_images_dir(images, sizeof images);
        /* the kubernetes driver's: a reference entry (the server image's) will do */
        int r = al_image_resolve_ref(images, a.k.image, dir, sizeof dir, digest, &ierr);
        if (r < 0) {
            fprintf(stderr, "airlock smoke: --image %s: %s%s\n", a.k.image, ierr.msg,
                    r == -ENOENT && strncmp(ierr.msg, "no image", 8) == 0
                        ? " (`airlock image build` makes the default image there; AIRLOCK_IMAGES=DIR in the "
                                   "environment names another directory; or --image-ref REPO@sha256:HEX)" : "");
            return EXIT_AIRLOCK;
        }
        a.k.image_dir = dir;
    }
    if ((st = cli_kube_image_ref(&a.k, ref, sizeof ref)) >= 0)
        return st;
    char first[PATH_MAX];
    if ((st = cli_kube_config_path("smoke", &a.k, first, sizeof first)) >= 0)
        return st;
    al_kube_cluster c;
    al_error err = { 0 };
    if (al_kube_cluster_load(first, a.k.namespace_, &c, &err) < 0) {
        fprintf(stderr, "airlock smoke: kubeconfig %s: %s\n", first[0] ? first : "(in-cluster)", err.msg);
        return EXIT_AIRLOCK;
    }
    al_kube_smoke_opts o = { .cluster = &c, .image_ref = ref, .runtime_class = a.k.runtime_class,
                             .seccomp = sk, .seccomp_localhost = sp, .timeout_s = (unsigned)a.timeout_s };
    al_kube_smoke_result res;
    int r = al_kube_smoke(&o, &res, &err);
    if (r < 0) {
        al_kube_cluster_free(&c);
        fprintf(stderr, "airlock smoke: %s\n", err.msg);
        return EXIT_AIRLOCK;
    }
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:O}", "outcome", al_kube_smoke_outcome_name(res.outcome), "reason",
                            res.reason, "namespace", c.namespace_, "image", ref, "detail", res.detail);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    if (text)
        printf("%s\n", text);
    fprintf(stderr, "airlock smoke: kubernetes %s (namespace %s): %s: %s\n", c.server, c.namespace_,
            al_kube_smoke_outcome_name(res.outcome), res.reason);
    free(text);
    json_decref(doc);
    json_decref(res.detail);
    al_kube_cluster_free(&c);
    return res.outcome == AL_KUBE_SMOKE_ENFORCED ? 0 : res.outcome == AL_KUBE_SMOKE_NOT_ENFORCED ? 1 : 2;
}
