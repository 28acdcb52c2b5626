/* The objects of a Kubernetes run (kube/spec.c, al_kube_objects): every
 * hardening field of the Pod asserted as the contract lays it out, the
 * Secret's contents and its 1 MiB refusal, input paths a Secret cannot
 * carry refused, names and references checked. Real files in a temp
 * directory; no cluster. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kube/b64.h"
#include "kube/cluster.h"
#include "kube/spec.h"

#define REF "127.0.0.1:5000/airlock/airlock-box@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char tmp[] = "/tmp/airlock-kube-spec-XXXXXX";

static const char *put(const char *name, const char *data, size_t len) {
    static char path[8][512];
    static int k;
    char *p = path[k++ % 8];
    snprintf(p, 512, "%s/%s", tmp, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        if (write(fd, data, len) != (ssize_t)len)
            fprintf(stderr, "short write\n");
        close(fd);
    }
    return p;
}

static al_kube_opts opts(void) {
    return (al_kube_opts){ .image_ref = REF, .run_id = "airlock-0123456789abcdef", .node = "aaaaaaaaaaaa",
                           .instance = "bbbbbbbbbbbb", .seccomp = AL_KUBE_SECCOMP_RUNTIME_DEFAULT };
}

static char *argv_[] = { "/usr/bin/python3", "main.py", "x", NULL };
static al_box_file script = { "main.py", "print(1)\n", 9, 0644 };

static al_box_config config(void) {
    al_box_config c = { .argv = argv_, .files = &script, .n_files = 1, .stdin_fd = -1, .out_dirfd = -1 };
    al_box_limits_default(&c.limits);
    c.limits.wall_ms = 10500;
    c.limits.memory_bytes = 256u << 20;
    c.limits.cpu_millis = 750;
    c.limits.tmpfs_bytes = 8u << 20;
    return c;
}

static const char *s_at(json_t *j, const char *path) {
    json_t *v = json_object_get(j, path);
    return json_string_value(v);
}

#define GET(j, ...) json_path(j, (const char *[]){ __VA_ARGS__, NULL })
static json_t *json_path(json_t *j, const char **keys) {
    for (; j && *keys; keys++)
        j = json_object_get(j, *keys);
    return j;
}

static json_t *named(json_t *arr, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (strcmp(json_string_value(json_object_get(v, "name")) ?: "", name) == 0) return v;
    return NULL;
}

static void check_security(json_t *sc) {
    CHECK(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
    CHECK(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
    CHECK(json_is_true(json_object_get(sc, "runAsNonRoot")));
    CHECK(json_is_false(json_object_get(sc, "privileged")));
    json_t *drop = GET(sc, "capabilities", "drop");
    CHECK(json_array_size(drop) == 1 && strcmp(json_string_value(json_array_get(drop, 0)) ?: "", "ALL") == 0);
}

static void test_pod(void) {
    al_kube_opts o = opts();
    o.runtime_class = "gvisor";
    const char *in = put("data.csv", "a,b\n", 4);
    const char *ins[] = { in };
    al_box_config c = config();
    c.inputs = ins;
    c.n_inputs = 1;
    char *env[] = { "LANG=C.UTF-8", NULL };
    c.envp = env;
    json_t *sec, *pod, *np;
    al_error err = { 0 };
    CHECK(al_kube_objects(&o, &c, &sec, &pod, &np, &err) == 0);
    if (!pod)
        return;
    json_t *spec = json_object_get(pod, "spec");
    CHECK(strcmp(s_at(spec, "restartPolicy") ?: "", "Never") == 0);
    CHECK(json_integer_value(json_object_get(spec, "activeDeadlineSeconds")) == 11 + 30);
    CHECK(json_integer_value(json_object_get(spec, "terminationGracePeriodSeconds")) == 2);
    CHECK(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
    CHECK(json_is_false(json_object_get(spec, "enableServiceLinks")));
    CHECK(!json_is_true(json_object_get(spec, "hostNetwork")) && !json_is_true(json_object_get(spec, "hostPID")) &&
          !json_is_true(json_object_get(spec, "hostIPC")));
    CHECK(strcmp(s_at(spec, "runtimeClassName") ?: "", "gvisor") == 0);
    json_t *psc = json_object_get(spec, "securityContext");
    CHECK(json_is_true(json_object_get(psc, "runAsNonRoot")));
    CHECK(json_integer_value(json_object_get(psc, "runAsUser")) == 65534);
    CHECK(json_integer_value(json_object_get(psc, "runAsGroup")) == 65534);
    CHECK(json_integer_value(json_object_get(psc, "fsGroup")) == 65534);
    CHECK(strcmp(json_string_value(GET(psc, "seccompProfile", "type")) ?: "", "RuntimeDefault") == 0);

    json_t *main_c = named(json_object_get(spec, "containers"), "main");
    CHECK(json_array_size(json_object_get(spec, "containers")) == 1 && main_c);
    CHECK(strcmp(s_at(main_c, "image") ?: "", REF) == 0);
    CHECK(strcmp(s_at(main_c, "imagePullPolicy") ?: "", "IfNotPresent") == 0);
    CHECK(strcmp(s_at(main_c, "workingDir") ?: "", "/work") == 0);
    check_security(json_object_get(main_c, "securityContext"));
    CHECK(strcmp(json_string_value(GET(main_c, "resources", "limits", "cpu")) ?: "", "750m") == 0);
    CHECK(strcmp(json_string_value(GET(main_c, "resources", "limits", "memory")) ?: "", "268435456") == 0);
    CHECK(json_equal(GET(main_c, "resources", "limits"), GET(main_c, "resources", "requests")));
    json_t *cmd = json_object_get(main_c, "command");
    CHECK(json_array_size(cmd) == 6 + 2 + 3);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 2)) ?: "", al_kube_stage_script) == 0);
    /* the script is the stage shell's child, never exec'd (a container's
     * PID 1 ignores the signals it sends itself), its status the shell's */
    CHECK(strstr(al_kube_stage_script, "; (exec \"$@\" <\"$s\" 2>&3 3>&-); exit $?") != NULL);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 3)) ?: "", "airlock-stage") == 0);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 4)) ?: "", "2") == 0);
    /* no stdin: the script's is /dev/null, as on the native box */
    CHECK(strcmp(json_string_value(json_array_get(cmd, 5)) ?: "", "/dev/null") == 0);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 6)) ?: "", "main.py") == 0);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 7)) ?: "", "data.csv") == 0);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 8)) ?: "", "/usr/bin/python3") == 0);
    CHECK(strcmp(json_string_value(json_array_get(cmd, 10)) ?: "", "x") == 0);
    json_t *envs = json_object_get(main_c, "env");
    CHECK(strcmp(s_at(named(envs, "PATH"), "value") ?: "", "/usr/local/bin:/usr/bin:/bin") == 0);
    CHECK(strcmp(s_at(named(envs, "HOME"), "value") ?: "", "/work") == 0);
    CHECK(strcmp(s_at(named(envs, "TMPDIR"), "value") ?: "", "/tmp") == 0);
    CHECK(strcmp(s_at(named(envs, "LANG"), "value") ?: "", "C.UTF-8") == 0);
    json_t *mounts = json_object_get(main_c, "volumeMounts");
    CHECK(json_array_size(mounts) == 4 && !named(mounts, "stdin"));
    CHECK(strcmp(s_at(named(mounts, "in"), "mountPath") ?: "", "/airlock/in") == 0 &&
          json_is_true(json_object_get(named(mounts, "in"), "readOnly")));
    CHECK(strcmp(s_at(named(mounts, "work"), "mountPath") ?: "", "/work") == 0);
    CHECK(strcmp(s_at(named(mounts, "out"), "mountPath") ?: "", "/out") == 0);
    CHECK(strcmp(s_at(named(mounts, "tmp"), "mountPath") ?: "", "/tmp") == 0);

    json_t *col = named(json_object_get(spec, "initContainers"), "collect");
    CHECK(col && strcmp(s_at(col, "restartPolicy") ?: "", "Always") == 0);
    CHECK(strcmp(s_at(col, "image") ?: "", REF) == 0);
    check_security(json_object_get(col, "securityContext"));
    CHECK(strcmp(json_string_value(GET(col, "resources", "limits", "cpu")) ?: "", "50m") == 0);
    CHECK(strcmp(json_string_value(GET(col, "resources", "requests", "memory")) ?: "", "32Mi") == 0);
    CHECK(strcmp(json_string_value(json_array_get(json_object_get(col, "command"), 2)) ?: "",
                 al_kube_collect_script) == 0);
    json_t *cm = json_object_get(col, "volumeMounts");
    CHECK(json_array_size(cm) == 1 && strcmp(s_at(named(cm, "out"), "mountPath") ?: "", "/out") == 0 &&
          json_is_true(json_object_get(named(cm, "out"), "readOnly")));

    json_t *vols = json_object_get(spec, "volumes");
    CHECK(json_array_size(vols) == 4 && !named(vols, "stdin"));
    for (const char *const *v = (const char *const[]){ "work", "out", "tmp", NULL }; *v; v++) {
        CHECK(strcmp(json_string_value(GET(named(vols, *v), "emptyDir", "medium")) ?: "", "Memory") == 0);
        CHECK(strcmp(json_string_value(GET(named(vols, *v), "emptyDir", "sizeLimit")) ?: "", "8388608") == 0);
    }
    json_t *items = GET(named(vols, "in"), "secret", "items");
    CHECK(json_integer_value(GET(named(vols, "in"), "secret", "defaultMode")) == 420);
    CHECK(strcmp(json_string_value(GET(named(vols, "in"), "secret", "secretName")) ?: "",
                 "airlock-0123456789abcdef") == 0);
    CHECK(json_array_size(items) == 2);
    CHECK(strcmp(s_at(json_array_get(items, 0), "key") ?: "", "f0") == 0 &&
          strcmp(s_at(json_array_get(items, 0), "path") ?: "", "main.py") == 0);
    CHECK(strcmp(s_at(json_array_get(items, 1), "path") ?: "", "data.csv") == 0);

    /* labels and the deadline on both */
    for (json_t *obj = pod;; obj = sec) {
        json_t *l = GET(obj, "metadata", "labels");
        CHECK(strcmp(s_at(l, "app.kubernetes.io/managed-by") ?: "", "airlock") == 0);
        CHECK(strcmp(s_at(l, "airlock.dev/sandbox") ?: "", "true") == 0);
        CHECK(strcmp(s_at(l, "airlock.dev/node") ?: "", "aaaaaaaaaaaa") == 0);
        CHECK(strcmp(s_at(l, "airlock.dev/instance") ?: "", "bbbbbbbbbbbb") == 0);
        CHECK(strcmp(s_at(l, "airlock.dev/run") ?: "", "airlock-0123456789abcdef") == 0);
        const char *d = json_string_value(GET(obj, "metadata", "annotations", "airlock.dev/deadline"));
        CHECK(d && strtoll(d, NULL, 10) > time(NULL) + 30 && strtoll(d, NULL, 10) <= time(NULL) + 42);
        CHECK(strcmp(json_string_value(GET(obj, "metadata", "name")) ?: "", "airlock-0123456789abcdef") == 0);
        if (obj == sec)
            break;
    }
    CHECK(strcmp(s_at(sec, "type") ?: "", "Opaque") == 0 && json_is_true(json_object_get(sec, "immutable")));
    CHECK(strcmp(json_string_value(GET(sec, "data", "f0")) ?: "", "cHJpbnQoMSkK") == 0);
    CHECK(strcmp(json_string_value(GET(sec, "data", "f1")) ?: "", "YSxiCg==") == 0);
    /* no stdin: no stdin key (the Secret holds what the run was given) */
    CHECK(!GET(sec, "data", "stdin") && json_object_size(json_object_get(sec, "data")) == 2);

    CHECK(strcmp(s_at(np, "kind") ?: "", "NetworkPolicy") == 0);
    CHECK(strcmp(json_string_value(GET(np, "metadata", "name")) ?: "", "airlock-sandbox-deny-all") == 0);
    CHECK(strcmp(json_string_value(GET(np, "spec", "podSelector", "matchLabels", "airlock.dev/sandbox")) ?: "",
                 "true") == 0);
    CHECK(json_array_size(GET(np, "spec", "policyTypes")) == 2 && !GET(np, "spec", "ingress") &&
          !GET(np, "spec", "egress"));
    json_decref(sec);
    json_decref(pod);
    json_decref(np);

    /* with stdin (empty): the Secret's stdin item, its volume, its mount */
    const char *sp = put("stdin.txt", "", 0);
    c.stdin_fd = open(sp, O_RDONLY | O_CLOEXEC);
    CHECK(al_kube_objects(&o, &c, &sec, &pod, &np, &err) == 0);
    close(c.stdin_fd);
    c.stdin_fd = -1;
    json_t *mc = named(GET(pod, "spec", "containers"), "main");
    CHECK(strcmp(json_string_value(json_array_get(json_object_get(mc, "command"), 5)) ?: "",
                 "/airlock/stdin/stdin") == 0);
    json_t *sm = named(json_object_get(mc, "volumeMounts"), "stdin");
    CHECK(strcmp(s_at(sm, "mountPath") ?: "", "/airlock/stdin") == 0 && json_is_true(json_object_get(sm, "readOnly")));
    json_t *sitems = GET(named(GET(pod, "spec", "volumes"), "stdin"), "secret", "items");
    CHECK(json_array_size(sitems) == 1 && strcmp(s_at(json_array_get(sitems, 0), "key") ?: "", "stdin") == 0 &&
          strcmp(s_at(json_array_get(sitems, 0), "path") ?: "", "stdin") == 0);
    CHECK(json_is_string(GET(sec, "data", "stdin")) && strcmp(json_string_value(GET(sec, "data", "stdin")), "") == 0);
    json_decref(sec);
    json_decref(pod);
    json_decref(np);

    /* no runtime class: no field; a localhost profile */
    o.runtime_class = "";
    o.seccomp = AL_KUBE_SECCOMP_LOCALHOST;
    o.seccomp_localhost = "airlock/box.json";
    c.n_inputs = 0;
    CHECK(al_kube_objects(&o, &c, &sec, &pod, &np, &err) == 0);
    CHECK(!GET(pod, "spec", "runtimeClassName"));
    CHECK(strcmp(json_string_value(GET(pod, "spec", "securityContext", "seccompProfile", "type")) ?: "",
                 "Localhost") == 0);
    CHECK(strcmp(json_string_value(GET(pod, "spec", "securityContext", "seccompProfile", "localhostProfile")) ?: "",
                 "airlock/box.json") == 0);
    json_decref(sec);
    json_decref(pod);
    json_decref(np);
}

static int objects(const al_kube_opts *o, const al_box_config *c, al_error *err) {
    json_t *s = NULL, *p = NULL, *n = NULL;
    *err = (al_error){ 0 };
    int r = al_kube_objects(o, c, &s, &p, &n, err);
    CHECK(r < 0 ? !s && !p && !n : s && p && n);
    json_decref(s);
    json_decref(p);
    json_decref(n);
    return r;
}

static void test_secret_cap(void) {
    al_kube_opts o = opts();
    al_box_config c = config();
    al_error err;
    size_t big = (1u << 20) - 9;       /* with the 9-byte script: exactly 1 MiB */
    char *buf = calloc(1, big + 2);
    memset(buf, 'x', big + 1);
    const char *in = put("big.bin", buf, big);
    const char *ins[] = { in };
    c.inputs = ins;
    c.n_inputs = 1;
    CHECK(objects(&o, &c, &err) == 0);
    in = put("big.bin", buf, big + 1);
    CHECK(objects(&o, &c, &err) == -E2BIG);
    CHECK(strcmp(err.step, "provisioning") == 0);
    CHECK(strstr(err.msg, "(1048577 bytes) exceed what a Kubernetes Secret holds (1 MiB)") != NULL);
    /* stdin counts */
    put("big.bin", buf, big - 10);
    const char *sp = put("stdin.txt", buf, 11);
    c.stdin_fd = open(sp, O_RDONLY | O_CLOEXEC);
    CHECK(objects(&o, &c, &err) == -E2BIG);
    close(c.stdin_fd);
    sp = put("stdin.txt", buf, 10);
    c.stdin_fd = open(sp, O_RDONLY | O_CLOEXEC);
    CHECK(objects(&o, &c, &err) == 0);
    close(c.stdin_fd);
    free(buf);
}

static void test_hostile_paths(void) {
    al_kube_opts o = opts();
    al_box_config c = config();
    al_error err;
    char p[600];
    const char *ins[] = { p };
    c.inputs = ins;
    c.n_inputs = 1;
    snprintf(p, sizeof p, "%s/..", tmp);
    CHECK(objects(&o, &c, &err) == -EINVAL);
    snprintf(p, sizeof p, "%s/.", tmp);
    CHECK(objects(&o, &c, &err) == -EINVAL);
    snprintf(p, sizeof p, "/");
    CHECK(objects(&o, &c, &err) == -EINVAL);
    put("..data", "x", 1);
    snprintf(p, sizeof p, "%s/..data", tmp);
    CHECK(objects(&o, &c, &err) == -EINVAL);
    CHECK(strstr(err.msg, "begins with \"..\"") != NULL);
    /* the path named is followed, as the native box follows it */
    snprintf(p, sizeof p, "%s/link", tmp);
    CHECK(symlink("/etc/hostname", p) == 0);
    CHECK(objects(&o, &c, &err) == 0);
    /* a link inside an input's tree neither */
    char d[600];
    snprintf(d, sizeof d, "%s/tree", tmp);
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/tree/shadow", tmp);
    CHECK(symlink("/etc/shadow", p) == 0);
    snprintf(p, sizeof p, "%s/tree", tmp);
    CHECK(objects(&o, &c, &err) == -ELOOP);
    /* two inputs of one name */
    c.n_inputs = 0;
    al_box_file two[] = { script, { "main.py", "", 0, 0644 } };
    c.files = two;
    c.n_files = 2;
    CHECK(objects(&o, &c, &err) == -EEXIST);
    al_box_file slash[] = { { "a/b", "", 0, 0644 } };
    c.files = slash;
    c.n_files = 1;
    CHECK(objects(&o, &c, &err) == -EINVAL);
    al_box_file empty[] = { { "", "", 0, 0644 } };
    c.files = empty;
    CHECK(objects(&o, &c, &err) == -EINVAL);
    CHECK(al_kube_check_path("a//b", &err) == -EINVAL);
    CHECK(al_kube_check_path("a/../b", &(al_error){ 0 }) == -EINVAL);
    CHECK(al_kube_check_path("a/./b", &(al_error){ 0 }) == -EINVAL);
    CHECK(al_kube_check_path("a/..data", &(al_error){ 0 }) == 0);
    CHECK(al_kube_check_path("a/b/c.txt", &(al_error){ 0 }) == 0);
    /* a bad environment name */
    c.files = &script;
    char *env[] = { "1BAD=x", NULL };
    c.envp = env;
    CHECK(objects(&o, &c, &err) == -EINVAL);
}

static void test_names(void) {
    al_box_config c = config();
    al_error err;
    al_kube_opts o = opts();
    CHECK(objects(&o, &c, &err) == 0);
    const char *bad_runs[] = { "airlock-0123456789ABCDEF", "airlock-0123", "pod-0123456789abcdef",
                               "airlock-0123456789abcdefa", NULL };
    for (const char **b = bad_runs; *b; b++) {
        o = opts();
        o.run_id = *b;
        CHECK(objects(&o, &c, &err) == -EINVAL);
    }
    o = opts();
    o.node = "AAAAAAAAAAAA";
    CHECK(objects(&o, &c, &err) == -EINVAL);
    o = opts();
    o.instance = "bbbbbbbbbbb";
    CHECK(objects(&o, &c, &err) == -EINVAL);
    const char *bad_refs[] = { "repo:latest", "repo@sha256:abc", "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                               "Repo@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                               "r e@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", NULL };
    for (const char **b = bad_refs; *b; b++) {
        o = opts();
        o.image_ref = *b;
        CHECK(objects(&o, &c, &err) == -EINVAL);
        CHECK(!al_kube_valid_image_ref(*b));
    }
    CHECK(al_kube_valid_image_ref(REF));
    o = opts();
    o.runtime_class = "Bad_Class";
    CHECK(objects(&o, &c, &err) == -EINVAL);
    o = opts();
    o.seccomp = AL_KUBE_SECCOMP_LOCALHOST;
    o.seccomp_localhost = "../etc/x.json";
    CHECK(objects(&o, &c, &err) == -EINVAL);
    o.seccomp_localhost = "/abs.json";
    CHECK(objects(&o, &c, &err) == -EINVAL);
    CHECK(al_kube_valid_namespace("airlock-sandbox") && !al_kube_valid_namespace("-x") &&
          !al_kube_valid_namespace("A") && !al_kube_valid_namespace(""));
    CHECK(al_kube_loopback_url("https://127.0.0.1:6443") && al_kube_loopback_url("https://[::1]:1") &&
          al_kube_loopback_url("https://localhost") && !al_kube_loopback_url("https://127.0.0.1.evil.com") &&
          !al_kube_loopback_url("https://10.0.0.1:6443") && !al_kube_loopback_url("https://user@127.0.0.1"));
}

static void test_b64(void) {
    const char *cases[][2] = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" }, { "foob", "Zm9vYg==" } };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *e = al_kube_b64_encode(cases[i][0], strlen(cases[i][0]));
        CHECK(e && strcmp(e, cases[i][1]) == 0);
        size_t n = 0;
        char *d = al_kube_b64_decode(cases[i][1], &n);
        CHECK(d && n == strlen(cases[i][0]) && memcmp(d, cases[i][0], n) == 0);
        free(e);
        free(d);
    }
    size_t n;
    CHECK(al_kube_b64_decode("Zm9v!", &n) == NULL);
    CHECK(al_kube_b64_decode("Z", &n) == NULL);
}

/* kubernetes_seccomp / --seccomp: runtime-default or localhost:PATH, PATH
 * beneath the kubelet's seccomp root; the Pod then carries it */
static void test_seccomp(void) {
    al_kube_seccomp k;
    const char *p;
    al_error err = { 0 };
    CHECK(al_kube_parse_seccomp(NULL, &k, &p, &err) == 0 && k == AL_KUBE_SECCOMP_RUNTIME_DEFAULT && !p);
    CHECK(al_kube_parse_seccomp("runtime-default", &k, &p, &err) == 0 && k == AL_KUBE_SECCOMP_RUNTIME_DEFAULT);
    CHECK(al_kube_parse_seccomp("localhost:airlock/airlock.json", &k, &p, &err) == 0 &&
          k == AL_KUBE_SECCOMP_LOCALHOST && strcmp(p, "airlock/airlock.json") == 0);
    const char *bad[] = { "unconfined", "localhost:", "localhost:/abs.json", "localhost:../x", "localhost:a/../b",
                          "localhost:a//b", "localhost:./a", "Localhost:a", "runtime-default ", NULL };
    for (const char **b = bad; *b; b++) {
        err = (al_error){ 0 };   /* (al_err keeps the first error) */
        CHECK(al_kube_parse_seccomp(*b, &k, &p, &err) == -EINVAL);
        CHECK(strstr(err.msg, "localhost:PATH") != NULL);
    }
    al_box_config c = config();
    al_kube_opts o = opts();
    CHECK(al_kube_parse_seccomp("localhost:airlock/airlock.json", &o.seccomp, &o.seccomp_localhost, &err) == 0);
    json_t *sec = NULL, *pod = NULL, *np = NULL;
    CHECK(al_kube_objects(&o, &c, &sec, &pod, &np, &err) == 0);
    json_t *sp = json_object_get(json_object_get(json_object_get(pod, "spec"), "securityContext"), "seccompProfile");
    json_t *want = json_pack("{s:s, s:s}", "type", "Localhost", "localhostProfile", "airlock/airlock.json");
    CHECK(json_equal(sp, want));
    json_decref(want);
    json_decref(sec);
    json_decref(pod);
    json_decref(np);
}

/* four sparse inputs of 2^62 bytes sum to 2^64: a total that wrapped to 0
 * passed the cap and the run went on without them. tmpfs (/dev/shm) holds
 * a file that size at no cost; ext4 does not. */
static void test_secret_cap_no_wrap(void) {
    char dir[] = "/dev/shm/airlock-kube-spec-XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "FAIL: no /dev/shm (tmpfs) for the sparse inputs\n");
        failed++;
        return;
    }
    char paths[4][128];
    const char *ins[4];
    for (int i = 0; i < 4; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/s%d", dir, i);
        int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)1 << 62) == 0);
        if (fd >= 0)
            close(fd);
        ins[i] = paths[i];
    }
    al_kube_opts o = opts();
    al_box_config c = config();
    c.inputs = ins;
    c.n_inputs = 4;
    al_error err;
    CHECK(objects(&o, &c, &err) == -E2BIG);
    for (int i = 0; i < 4; i++)
        unlink(paths[i]);
    rmdir(dir);
}

int main(void) {
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_pod();
    test_secret_cap();
    test_secret_cap_no_wrap();
    test_hostile_paths();
    test_names();
    test_b64();
    test_seccomp();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    printf("kube-spec: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
