/* `airlock run --driver kubernetes --dry-run` (airlock-server only): the
 * Secret, the Pod and the NetworkPolicy a run would be, printed as JSON,
 * with no cluster asked anything. A kubeconfig, when named, is read (its
 * namespace; its errors said) but never contacted. */
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kube/cluster.h"
#include "../kube/spec.h"
#include "../util/hash.h"
#include "cli.h"
#include "run_kube.h"

#define EXIT_AIRLOCK 125

/* IMAGE_DIR's oci.json (`airlock image export`'s record) as
 * REGISTRY/airlock-box@DIGEST into REF: -1, or the exit status after
 * saying why. */
int cli_kube_image_ref(const cli_kube_args *k, char *ref, size_t n) {
    if (k->image_ref) {
        if (!al_kube_valid_image_ref(k->image_ref)) {
            fprintf(stderr, "airlock: --image-ref %s: want REPO@sha256:<64 hex> (a pod's image is pinned by "
                            "digest, never a tag)\n", k->image_ref);
            return EXIT_AIRLOCK;
        }
        snprintf(ref, n, "%s", k->image_ref);
        return -1;
    }
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    char path[4096];
    int r = snprintf(path, sizeof path, "%s/oci.json", k->image_dir);
    /* a path cut short would read another file (or none, said wrongly) */
    r = r < 0 || (size_t)r >= sizeof path ? -ENAMETOOLONG : al_read_small(AT_FDCWD, path, 64 << 10, &text, &len);
    json_t *doc = r == 0 ? json_loadb(text, len, 0, NULL) : NULL;
    const char *digest = json_string_value(json_object_get(doc, "manifest_digest"));
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || !al_is_sha256_hex(digest + 7)) {
        json_decref(doc);
        fprintf(stderr, "airlock: --driver kubernetes: image %s was never exported for a registry: run "
                        "`airlock image export %s --out DIR`, push DIR to your registry "
                        "(skopeo copy --preserve-digests oci:DIR docker://REGISTRY/airlock-box), then give "
                        "--registry REGISTRY (or --image-ref REPO@sha256:HEX)\n", k->image, k->image);
        return EXIT_AIRLOCK;
    }
    if (!k->registry || !*k->registry) {
        json_decref(doc);
        fprintf(stderr, "airlock: --driver kubernetes: give --registry REGISTRY (where image %s was pushed) or "
                        "--image-ref REPO@sha256:HEX\n", k->image);
        return EXIT_AIRLOCK;
    }
    snprintf(ref, n, "%s/airlock-box@%s", k->registry, digest);
    json_decref(doc);
    if (!al_kube_valid_image_ref(ref)) {
        fprintf(stderr, "airlock: --registry %s: not a registry's name (HOST[:PORT][/PATH])\n", k->registry);
        return EXIT_AIRLOCK;
    }
    return -1;
}

int cli_kube_seccomp(const char *cmd, const char *v, al_kube_seccomp *kind, const char **path) {
    al_error err = { 0 };
    if (al_kube_parse_seccomp(v, kind, path, &err) < 0) {
        fprintf(stderr, "airlock %s: --%s\n", cmd, err.msg);
        return EXIT_AIRLOCK;
    }
    return -1;
}

/* this host's 12 hex, and a run's name: the driver's rule (sha256 of
 * "<node>/<instance>/<run id>"), with the CLI's pid and clock for them */
static void names(char node[13], char instance[13], char run[25]) {
    char host[256] = "", buf[512], hex[65];
    gethostname(host, sizeof host - 1);
    al_sha256_hex(host, strlen(host), hex);
    snprintf(node, 13, "%.12s", hex);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, sizeof buf, "cli/%d/%lld.%09ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec);
    al_sha256_hex(buf, strlen(buf), hex);
    snprintf(instance, 13, "%.12s", hex);
    snprintf(buf, sizeof buf, "%s/%s/cli", node, instance);
    al_sha256_hex(buf, strlen(buf), hex);
    snprintf(run, 25, "airlock-%.16s", hex);
}

/* (run_kube.h) The kubeconfig to read into FIRST ("": none given, in-cluster): --kubeconfig,
 * then AIRLOCK_KUBECONFIG, then KUBECONFIG, which may list files (a:b): the
 * first, as the driver reads one. -1, or the exit status after saying why
 * (a path cut to fit would be another file). */
int cli_kube_config_path(const char *cmd, const cli_kube_args *k, char *first, size_t n) {
    const char *kc = k->kubeconfig;
    if (!kc || !*kc)
        kc = getenv("AIRLOCK_KUBECONFIG");
    if (!kc || !*kc)
        kc = getenv("KUBECONFIG");
    first[0] = '\0';
    if (!kc || !*kc)
        return -1;
    size_t len = strcspn(kc, ":");
    if (len >= n) {
        fprintf(stderr, "airlock %s: the kubeconfig's path is over %zu bytes: give a shorter one\n", cmd, n - 1);
        return EXIT_AIRLOCK;
    }
    memcpy(first, kc, len);
    first[len] = '\0';
    return -1;
}

/* What a run and its dry run read alike from K: the seccomp profile, the
 * image's reference (REF) and the kubeconfig's path (FIRST, "" for none):
 * -1 when all are good, else the exit status (the error printed). */
static int run_args(const cli_kube_args *k, char ref[AL_KUBE_REF_MAX], al_kube_seccomp *sk, const char **sp,
                    char first[4096]) {
    int st = cli_kube_seccomp("run", k->seccomp, sk, sp);
    if (st < 0)
        st = cli_kube_image_ref(k, ref, AL_KUBE_REF_MAX);
    if (st < 0)
        st = cli_kube_config_path("run", k, first, 4096);
    return st;
}

int cli_run_kube_dry_run(const cli_kube_args *k, const al_box_config *cfg) {
    char ref[AL_KUBE_REF_MAX], first[4096];
    al_kube_seccomp sk;
    const char *sp;
    int st = run_args(k, ref, &sk, &sp, first);
    if (st >= 0)
        return st;
    al_kube_cluster cluster = { 0 };
    bool have = false;
    al_error err = { 0 };
    if (first[0]) {
        if (al_kube_cluster_load(first, k->namespace_, &cluster, &err) < 0) {
            fprintf(stderr, "airlock run: kubeconfig %s: %s\n", first, err.msg);
            return EXIT_AIRLOCK;
        }
        have = true;
    }
    if (!have && k->namespace_ && !al_kube_valid_namespace(k->namespace_)) {
        fprintf(stderr, "airlock run: --namespace %s: not a DNS-1123 label\n", k->namespace_);
        return EXIT_AIRLOCK;
    }
    char node[13], instance[13], run[25];
    names(node, instance, run);
    al_kube_opts o = { .cluster = have ? &cluster : NULL, .image_ref = ref, .runtime_class = k->runtime_class,
                       .seccomp = sk, .seccomp_localhost = sp, .run_id = run, .node = node,
                       .instance = instance };
    const char *ns = have ? cluster.namespace_ : k->namespace_;
    json_t *sec = NULL, *pod = NULL, *np = NULL;
    int r = al_kube_objects(&o, cfg, &sec, &pod, &np, &err);
    if (have)
        al_kube_cluster_free(&cluster);
    if (r < 0) {
        fprintf(stderr, "airlock: failed at step \"%s\": %s\n", err.step[0] ? err.step : "provisioning", err.msg);
        return EXIT_AIRLOCK;
    }
    if (ns && *ns) {
        json_object_set_new(json_object_get(sec, "metadata"), "namespace", json_string(ns));
        json_object_set_new(json_object_get(pod, "metadata"), "namespace", json_string(ns));
        json_object_set_new(json_object_get(np, "metadata"), "namespace", json_string(ns));
    }
    json_t *doc = json_pack("{s:o, s:o, s:o}", "secret", sec, "pod", pod, "network_policy", np);
    char *s = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (!s)
        return EXIT_AIRLOCK;
    printf("%s\n", s);
    free(s);
    return 0;
}

int cli_run_kube(const cli_kube_args *k, const al_box_config *cfg, al_box_result *res, int *ret_r) {
    char ref[AL_KUBE_REF_MAX], first[4096];
    al_kube_seccomp sk;
    const char *sp;
    int st = run_args(k, ref, &sk, &sp, first);
    if (st >= 0)
        return st;
    al_kube_cluster cluster = { 0 };
    al_error err = { 0 };
    if (al_kube_cluster_load(first[0] ? first : NULL, k->namespace_, &cluster, &err) < 0) {
        fprintf(stderr, "airlock run: kubeconfig %s: %s\n", first[0] ? first : "(in-cluster)", err.msg);
        al_kube_cluster_free(&cluster);
        return EXIT_AIRLOCK;
    }
    char node[13], instance[13], run[25];
    names(node, instance, run);
    al_kube_opts o = { .cluster = &cluster, .image_ref = ref, .runtime_class = k->runtime_class,
                       .seccomp = sk, .seccomp_localhost = sp, .run_id = run, .node = node,
                       .instance = instance, .schedule_timeout_s = k->schedule_timeout_s };
    *ret_r = al_kube_run(&o, cfg, res);
    al_kube_cluster_free(&cluster);
    return -1;
}
