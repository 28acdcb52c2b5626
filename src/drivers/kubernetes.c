/* The kubernetes driver: each run is `airlock-server helper` (the helper
 * of the binary that links libcurl), whose job names the kubeconfig, the
 * namespace, the image by digest and the pod's name; the helper makes the
 * run's Secret and Pod, follows them and deletes them (src/kube/run.c).
 * Its cancel and wait are any helper's: SIGTERM to the helper deletes the
 * pod. The service's own talk with the API server is the probe (/version)
 * and the sweep of a dead service's pods. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../image/image.h"
#include "../kube/api.h"
#include "../kube/kube.h"
#include "../kube/smoke.h"
#include "../kube/spec.h"
#include "../util/hash.h"
#include "driver.h"
#include "helper_start.h"

static struct {
    bool set;
    char kubeconfig[PATH_MAX];       /* "": in-cluster */
    char namespace_[AL_KUBE_NAME_MAX]; /* "": the context's */
    char registry[256];
    char runtime_class[254];
    char seccomp[PATH_MAX + 16];     /* "runtime-default" or "localhost:PATH" */
    int schedule_timeout_s;
    char node[13], instance[13];     /* the labels of this service's pods */
    al_kube_cluster cluster;         /* the service's own (probe, sweep) */
    bool loaded;
    char load_error[256];
    bool network_confirmed;          /* the smoke test passed (K-client's smoke at start) */
    bool smoke;                      /* run it at start (kubernetes_smoke) */
    char images_dir[PATH_MAX];       /* where its "default" image is */
    char smoke_why[400];             /* the network badge's reason while not confirmed */
    bool swept;
    pthread_mutex_t mu;
    uint64_t probe_ok_ms;
} conf = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* SRC (NULL: "") into DST, or -ENAMETOOLONG: a value cut to fit would be
 * another file, namespace or class, which the checks after would pass */
static int set_key(char *dst, size_t n, const char *src, const char *key, al_error *err) {
    if ((size_t)snprintf(dst, n, "%s", src ? src : "") >= n)
        return al_err(err, "config", ENAMETOOLONG, "%s is over %zu bytes: give a shorter one", key, n - 1);
    return 0;
}

int al_driver_kube_configure(const al_driver_kube_config *k, const char *state_dir, al_error *err) {
    if (k->registry == NULL || !*k->registry || strlen(k->registry) >= sizeof conf.registry ||
        strpbrk(k->registry, " \t\r\n@"))
        return al_err(err, "config", EINVAL,
                      "driver = kubernetes needs kubernetes_registry: where `airlock image export`'s images are "
                      "pushed (e.g. registry.example.com/airlock)");
    const char *sc = k->seccomp && *k->seccomp ? k->seccomp : "runtime-default";
    al_kube_seccomp kind;
    const char *path;
    al_error se = { 0 };
    if (strlen(sc) >= sizeof conf.seccomp || al_kube_parse_seccomp(sc, &kind, &path, &se) < 0)
        return al_err(err, "config", EINVAL, "kubernetes_%s", se.msg[0] ? se.msg : "seccomp: too long");
    int r;
    if ((r = set_key(conf.kubeconfig, sizeof conf.kubeconfig, k->kubeconfig, "kubeconfig", err)) < 0 ||
        (r = set_key(conf.namespace_, sizeof conf.namespace_, k->namespace_, "kubernetes_namespace", err)) < 0 ||
        (r = set_key(conf.runtime_class, sizeof conf.runtime_class, k->runtime_class, "kubernetes_runtime_class",
                     err)) < 0 ||
        (r = set_key(conf.images_dir, sizeof conf.images_dir, k->images_dir, "the images directory", err)) < 0)
        return r;
    snprintf(conf.registry, sizeof conf.registry, "%s", k->registry);
    size_t n = strlen(conf.registry);
    while (n && conf.registry[n - 1] == '/')
        conf.registry[--n] = '\0';
    snprintf(conf.seccomp, sizeof conf.seccomp, "%s", sc);
    conf.schedule_timeout_s = k->schedule_timeout_s > 0 ? k->schedule_timeout_s : 60;
    conf.smoke = k->smoke;
    snprintf(conf.smoke_why, sizeof conf.smoke_why, "%s", k->smoke ? "the smoke test has not finished yet"
             : "the smoke test is off (kubernetes_smoke = false): run `airlock smoke --driver kubernetes`");
    /* this service's pods: the host and state directory (one node), and
     * this start of it (a sweep deletes only other starts' pods) */
    char host[64] = "host", seed[PATH_MAX + 80], hex[65];
    gethostname(host, sizeof host - 1);
    snprintf(seed, sizeof seed, "%s:%s", host, state_dir ? state_dir : "");
    al_sha256_hex(seed, strlen(seed), hex);
    snprintf(conf.node, sizeof conf.node, "%.12s", hex);
    uint8_t rnd[6] = { 0 };
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return al_err(err, "config", EIO, "getrandom: %m");
    snprintf(conf.instance, sizeof conf.instance, "%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5]);
    al_error e = { 0 };
    if (al_kube_cluster_load(conf.kubeconfig[0] ? conf.kubeconfig : NULL, conf.namespace_[0] ? conf.namespace_ : NULL,
                             &conf.cluster, &e) < 0)
        return al_err(err, "config", EINVAL, "driver = kubernetes: %s", e.msg);
    conf.loaded = conf.set = true;
    return 0;
}

void al_driver_kube_network_confirmed(bool confirmed) {
    pthread_mutex_lock(&conf.mu);
    conf.network_confirmed = confirmed;
    pthread_mutex_unlock(&conf.mu);
}

static void opts(al_kube_opts *o) {
    bool local = strncmp(conf.seccomp, "localhost:", 10) == 0;
    *o = (al_kube_opts){ .cluster = conf.loaded ? &conf.cluster : NULL,
                         .runtime_class = conf.runtime_class,
                         .seccomp = local ? AL_KUBE_SECCOMP_LOCALHOST : AL_KUBE_SECCOMP_RUNTIME_DEFAULT,
                         .seccomp_localhost = local ? conf.seccomp + 10 : NULL,
                         .node = conf.node, .instance = conf.instance,
                         .schedule_timeout_s = (unsigned)conf.schedule_timeout_s };
}

static json_t *control(const al_control *c) {
    return json_pack("{s:s, s:s}", "level", al_level_name(c->level), "detail", c->detail);
}

static json_t *kube_capabilities(void) {
    al_kube_opts o;
    opts(&o);
    pthread_mutex_lock(&conf.mu);
    bool confirmed = conf.network_confirmed;
    pthread_mutex_unlock(&conf.mu);
    char why[sizeof conf.smoke_why];
    pthread_mutex_lock(&conf.mu);
    snprintf(why, sizeof why, "%s", conf.smoke_why);
    pthread_mutex_unlock(&conf.mu);
    al_controls c;
    al_kube_controls(&o, confirmed, &c);
    /* what the smoke test said, or that it has not said yet */
    if (!confirmed) {
        size_t n = strlen(c.network.detail);
        snprintf(c.network.detail + n, sizeof c.network.detail - n, " (%s)", why);
        al_utf8_fix(c.network.detail);
    }
    json_t *doc = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "isolation", control(&c.userns),
                            "seccomp", control(&c.seccomp), "no_new_privs", control(&c.no_new_privs), "network",
                            control(&c.network), "memory", control(&c.memory), "pids", control(&c.pids), "cpu",
                            control(&c.cpu), "tmpfs", control(&c.tmpfs), "capabilities", control(&c.caps));
    json_object_set_new(doc, "output",
                        json_pack("{s:s, s:s}", "level", "applied", "detail",
                                  "stdout and stderr come merged, both as stdout: the API server serves a "
                                  "container's log as one stream (split streams are an alpha gate); capped at "
                                  "output_bytes as the native box caps a stream"));
    json_object_set_new(doc, "namespace", json_string(conf.cluster.namespace_));
    return doc;
}

/* An API server found up is not asked again for this long (every run's
 * admission asks); one found down is asked again on the next run. */
#define PROBE_TTL_MS 5000

static int kube_probe(al_error *err) {
    if (!conf.set)
        return al_err(err, "driver", EINVAL, "driver = kubernetes is not configured");
    pthread_mutex_lock(&conf.mu);
    bool fresh = conf.probe_ok_ms && al_now_ms() - conf.probe_ok_ms < PROBE_TTL_MS;
    pthread_mutex_unlock(&conf.mu);
    if (fresh) {
        memset(err, 0, sizeof *err);
        return 0;
    }
    long code = 0;
    json_t *doc = NULL;
    al_error e = { 0 };
    int r = al_kube_call(&conf.cluster, "GET", "/version", NULL, 5000, &code, &doc, &e);
    json_decref(doc);
    if (r == 0 && code != 200)
        r = al_err(&e, "driver", EIO, "GET /version answered %ld", code);
    pthread_mutex_lock(&conf.mu);
    conf.probe_ok_ms = r < 0 ? 0 : al_now_ms();
    pthread_mutex_unlock(&conf.mu);
    memset(err, 0, sizeof *err);
    if (r < 0)
        return al_err(err, "driver", -r, "kubernetes driver: the API server %s: %s (check that it is up and that "
                      "the kubeconfig's server and credentials are this cluster's: airlock smoke --driver kubernetes "
                      "tries them)", conf.cluster.server, e.msg);
    return 0;
}

/* IMAGE_DIR's manifest digest (oci.json, `airlock image export`'s record)
 * as the run's image reference */
static int image_ref(const char *image_dir, char *ret, size_t n, al_error *err) {
    if (!image_dir)
        return al_err(err, "provisioning", EINVAL, "the kubernetes driver runs on an image (none given)");
    _cleanup_close_ int dfd = open(image_dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    char *text = NULL;
    size_t len = 0;
    if (dfd < 0 || al_read_small(dfd, "oci.json", 4096, &text, &len) < 0)
        return al_err(err, "provisioning", ENOENT,
                      "the image %s was never exported for Kubernetes: run `airlock image export sha256:%s --out DIR`, "
                      "then push DIR to %s/airlock-box (skopeo copy --preserve-digests oci:DIR docker://%s/airlock-box)",
                      image_dir, strrchr(image_dir, '/') ? strrchr(image_dir, '/') + 1 : image_dir, conf.registry,
                      conf.registry);
    json_t *doc = json_loadb(text, len, 0, NULL);
    free(text);
    const char *d = json_string_value(json_object_get(doc, "manifest_digest"));
    int r = 0;
    if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 71 || strspn(d + 7, "0123456789abcdef") != 64)
        r = al_err(err, "provisioning", EINVAL, "%s/oci.json holds no manifest_digest (sha256:<64 hex>)", image_dir);
    else if ((size_t)snprintf(ret, n, "%s/airlock-box@%s", conf.registry, d) >= n)
        r = al_err(err, "provisioning", ENAMETOOLONG, "the image reference is too long");
    json_decref(doc);
    return r;
}

/* The runs whose helpers live, by the helper's pid: when a helper dies
 * without its own cleanup (SIGKILL, the OOM killer, a crash), the service
 * deletes its pod and Secret at once, rather than leaving them to the
 * pod's activeDeadlineSeconds (which kills, never deletes) and the next
 * start's sweep (a Secret of the tenant's code and inputs, kept until a
 * restart). */
typedef struct live_run {
    struct live_run *next;
    pid_t pid;
    char name[AL_KUBE_NAME_MAX];
} live_run;

static live_run *live;
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

static void live_add(pid_t pid, const char *name) {
    live_run *l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->pid = pid;
    snprintf(l->name, sizeof l->name, "%s", name);
    pthread_mutex_lock(&live_mu);
    l->next = live;
    live = l;
    pthread_mutex_unlock(&live_mu);
}

/* PID's run's name into NAME (and forgotten): whether it had one */
static bool live_take(pid_t pid, char name[AL_KUBE_NAME_MAX]) {
    bool found = false;
    pthread_mutex_lock(&live_mu);
    for (live_run **p = &live; *p; p = &(*p)->next)
        if ((*p)->pid == pid) {
            live_run *l = *p;
            *p = l->next;
            snprintf(name, AL_KUBE_NAME_MAX, "%s", l->name);
            free(l);
            found = true;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    return found;
}

static int kube_wait(al_driver_run *r) {
    pid_t pid = r->pid;
    int st = al_driver_helper_wait(r);
    char name[AL_KUBE_NAME_MAX];
    /* a helper that exited ran its own cleanup (run.c deletes on every
     * path); one a signal ended did not */
    if (pid > 0 && live_take(pid, name) && WIFSIGNALED(st) && conf.loaded) {
        al_error e = { 0 };
        al_kube_delete_run(&conf.cluster, name, &e);
    }
    return st;
}

static int kube_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
    if (!conf.set)
        return al_err(err, "driver", EINVAL, "driver = kubernetes is not configured");
    if (job->work_in || job->work_out)
        return al_err(err, "provisioning", EOPNOTSUPP,
                      "E2B sandbox commands run on the native driver only: the kubernetes driver does not carry a "
                      "sandbox's working directory");
    char ref[AL_KUBE_REF_MAX];
    int r = image_ref(job->image_dir, ref, sizeof ref, err);
    if (r < 0)
        return r;
    al_job j = *job;
    j.driver = AL_JOB_KUBERNETES;
    j.kube_config = conf.kubeconfig[0] ? conf.kubeconfig : NULL;
    j.kube_namespace = conf.cluster.namespace_;
    j.kube_image_ref = ref;
    j.kube_runtime_class = conf.runtime_class[0] ? conf.runtime_class : NULL;
    j.kube_seccomp = conf.seccomp;
    j.kube_node = conf.node;
    j.kube_instance = conf.instance;
    j.kube_schedule_timeout_s = conf.schedule_timeout_s;
    /* the pod's name: the run's id (its out_dir is STATE/runs/ID/out)
     * under this node and start, hashed to a DNS label */
    char run[128] = "", seed[200], hex[65], name[AL_KUBE_NAME_MAX];
    if (job->out_dir) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", job->out_dir);
        snprintf(run, sizeof run, "%.120s", basename(dirname(copy)));
    }
    if (!run[0]) {
        uint8_t rnd[8] = { 0 };
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return al_err(err, "provisioning", EIO, "getrandom: %m");
        al_sha256_hex(rnd, sizeof rnd, hex);
        snprintf(run, sizeof run, "%.16s", hex);
    }
    snprintf(seed, sizeof seed, "%s/%s/%s", conf.node, conf.instance, run);
    al_sha256_hex(seed, strlen(seed), hex);
    snprintf(name, sizeof name, "airlock-%.16s", hex);
    j.kube_name = name;
    char copy[PATH_MAX], exe[PATH_MAX + 32];
    snprintf(copy, sizeof copy, "%s", self_exe);
    snprintf(exe, sizeof exe, "%s/airlock-server", dirname(copy));
    int r2 = al_driver_helper_start(exe, &j, NULL, 0, ret, err);
    if (r2 == 0 && ret->pid > 0)
        live_add(ret->pid, name);
    return r2;
}

/* Once per start: the pods and Secrets a dead service of this node left
 * (its other starts'); this service's own are deleted by their helpers */
static void *sweep_thread(void *arg) {
    (void)arg;
    al_error err = { 0 };
    /* an API server that cannot be reached now leaves them to the next
     * start (and each pod to its activeDeadlineSeconds) */
    al_kube_sweep(&conf.cluster, conf.node, conf.instance, &err);
    return NULL;
}

/* Once per start, when kubernetes_smoke: the NetworkPolicy smoke test
 * (kube/smoke.h) on the "default" image, its outcome the network badge's;
 * until it has passed the badge says "unconfirmed" with why. */
static void *smoke_thread(void *arg) {
    (void)arg;
    char dir[PATH_MAX], digest[65], ref[AL_KUBE_REF_MAX], why[sizeof conf.smoke_why];
    al_error e = { 0 };
    bool ok = false;
    if (al_image_resolve_ref(conf.images_dir, "default", dir, sizeof dir, digest, &e) < 0 ||
        image_ref(dir, ref, sizeof ref, &e) < 0) {
        snprintf(why, sizeof why, "the smoke test could not start: %s", e.msg);
    } else {
        al_kube_opts ko;
        opts(&ko);
        al_kube_smoke_opts o = { .cluster = &conf.cluster, .image_ref = ref, .runtime_class = conf.runtime_class,
                                 .seccomp = ko.seccomp, .seccomp_localhost = ko.seccomp_localhost, .timeout_s = 300 };
        al_kube_smoke_result res;
        if (al_kube_smoke(&o, &res, &e) < 0) {
            snprintf(why, sizeof why, "the smoke test could not start: %s", e.msg);
        } else {
            ok = res.outcome == AL_KUBE_SMOKE_ENFORCED;
            snprintf(why, sizeof why, "the smoke test at start: %s: %s", al_kube_smoke_outcome_name(res.outcome),
                     res.reason);
            json_decref(res.detail);
        }
    }
    pthread_mutex_lock(&conf.mu);
    conf.network_confirmed = ok;
    snprintf(conf.smoke_why, sizeof conf.smoke_why, "%s", why);
    pthread_mutex_unlock(&conf.mu);
    return NULL;
}

static void kube_sweep(void) {
    pthread_mutex_lock(&conf.mu);
    bool due = conf.set && !conf.swept;
    conf.swept = true;
    pthread_mutex_unlock(&conf.mu);
    pthread_t t;
    if (due && pthread_create(&t, NULL, sweep_thread, NULL) == 0)
        pthread_detach(t);
    if (due && conf.smoke && pthread_create(&t, NULL, smoke_thread, NULL) == 0)
        pthread_detach(t);
}

static bool kube_net_held(al_net_mode mode, const char **why) {
    if (mode == AL_NET_OFFLINE)
        return true;
    *why = "refused by the kubernetes driver: sandbox pods are deny-all (the chart's NetworkPolicy); an egress proxy "
           "for them is not built yet";
    return false;
}

const al_driver_ops al_driver_kubernetes = {
    .name = "kubernetes",
    .capabilities = kube_capabilities,
    .probe = kube_probe,
    .start = kube_start,
    .cancel = al_driver_helper_cancel,
    .wait = kube_wait,
    .sweep = kube_sweep,
    .needs_image = true,
    .image_by_reference = true,
    .net_mode_held = kube_net_held,
};
