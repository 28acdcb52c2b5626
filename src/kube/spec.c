/* The objects of a run (kube.h, al_kube_objects): the Secret, the Pod and
 * the deny-all NetworkPolicy, exactly as /work/prompts/kube_contract.md
 * lays them out, from the driver's options and the box config alone.
 * Every name and path that reaches a field is checked here, so nothing
 * sent to the API server is a string a tenant shaped freely. */
#include "spec.h"

#include <string.h>
#include <time.h>

#include "../util/hash.h"
#include "b64.h"

/* The pod's stage: the Secret's items copied into /work (only the items:
 * a Secret volume holds ..data and a timestamped directory beside them),
 * then the run's argv run with its stdin ($2: the Secret's stdin item, or
 * /dev/null when the run has none, as on the native box). The script is
 * the shell's child, not exec'd: a container's PID 1 gets no signal it has
 * no handler for, so an exec'd script could not kill itself. The shell
 * exits with the script's status; a death by signal N is 128+N, which the
 * end mapping reads as signal N (kube.h). The shell's own stderr is
 * /dev/null while it waits (the script's is the container's, fd 3 closed
 * for it, set in the subshell that execs it: dash applies a simple
 * command's redirections in the parent before it forks): the shell's
 * "Terminated" for a killed child is not the script's output. */
#define STAGE "n=$1; s=$2; shift 2; cd /airlock/in || exit 126; while [ \"$n\" -gt 0 ]; do cp -R -L -- \"$1\" " \
              "/work/ || exit 126; shift; n=$((n-1)); done; cd /work || exit 126; exec 3>&2 2>/dev/null; " \
              "(exec \"$@\" <\"$s\" 2>&3 3>&-); exit $?"
/* The native sidecar: /out as a base64 tar on its log once SIGTERM comes
 * (the kubelet sends it after every regular container has ended). */
#define COLLECT "trap 'echo airlock-out-begin; cd /out && tar -cf - . | base64; echo \"airlock-out-end $?\"; exit 0' " \
                "TERM; echo airlock-collect-ready; while :; do sleep 1 & wait $!; done"

const char al_kube_stage_script[] = STAGE;
const char al_kube_collect_script[] = COLLECT;

static bool all_of(const char *s, size_t n, const char *set) {
    return strspn(s, set) == n;
}

#define LOWER_HEX "0123456789abcdef"
#define DNS_CHARS "abcdefghijklmnopqrstuvwxyz0123456789-."

/* "airlock-" and 16 lowercase hex: the contract's name of a run */
bool al_kube_valid_run_name(const char *s) {
    return s && strlen(s) == 24 && strncmp(s, "airlock-", 8) == 0 && all_of(s + 8, 16, LOWER_HEX);
}

/* a DNS-1123 subdomain (a RuntimeClass's name) */
static bool dns_subdomain(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n <= 253 && all_of(s, n, DNS_CHARS) && s[0] != '-' && s[0] != '.' && s[n - 1] != '-' &&
           s[n - 1] != '.';
}

/* REPO@sha256:<64 hex>, never a tag: what a pod's image must be */
bool al_kube_valid_image_ref(const char *s) {
    size_t n = s ? strlen(s) : 0;
    const char *at = s ? strchr(s, '@') : NULL;
    if (!at || n >= AL_KUBE_REF_MAX || at == s || strncmp(at + 1, "sha256:", 7) != 0 || !al_is_sha256_hex(at + 8))
        return false;
    size_t rl = (size_t)(at - s);
    return all_of(s, rl, DNS_CHARS "/:_") && s[0] != '/' && s[rl - 1] != '/' && !memmem(s, rl, "//", 2);
}

/* an environment variable's name, as the API server allows it */
static bool env_name(const char *s, size_t n) {
    return n > 0 && n <= 255 &&
           all_of(s, n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") &&
           !(s[0] >= '0' && s[0] <= '9');
}

static json_t *metadata(const al_kube_opts *o, time_t deadline) {
    char d[32];
    snprintf(d, sizeof d, "%lld", (long long)deadline);
    return json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s}}", "name", o->run_id, "labels",
                     "app.kubernetes.io/managed-by", "airlock", "airlock.dev/sandbox", "true", "airlock.dev/node",
                     o->node, "airlock.dev/instance", o->instance, "airlock.dev/run", o->run_id, "annotations",
                     "airlock.dev/deadline", d);
}

static int check_opts(const al_kube_opts *o, al_error *err) {
    if (!al_kube_valid_run_name(o->run_id))
        return al_err(err, "provisioning", EINVAL, "the run's name must be airlock-<16 lowercase hex>");
    if (!o->node || strlen(o->node) != 12 || !all_of(o->node, 12, LOWER_HEX) || !o->instance ||
        strlen(o->instance) != 12 || !all_of(o->instance, 12, LOWER_HEX))
        return al_err(err, "provisioning", EINVAL, "the node and instance labels must be 12 lowercase hex");
    if (!al_kube_valid_image_ref(o->image_ref))
        return al_err(err, "provisioning", EINVAL, "the image reference \"%.200s\" is not REPO@sha256:<64 hex> "
                      "(a pod's image is pinned by digest, never a tag)", o->image_ref ? o->image_ref : "");
    if (o->runtime_class && *o->runtime_class && !dns_subdomain(o->runtime_class))
        return al_err(err, "provisioning", EINVAL, "the runtime class \"%.200s\" is not a DNS-1123 name",
                      o->runtime_class);
    if (o->seccomp == AL_KUBE_SECCOMP_LOCALHOST) {
        al_error e = { 0 };
        if (!o->seccomp_localhost || o->seccomp_localhost[0] == '/' || al_kube_check_path(o->seccomp_localhost, &e) < 0)
            return al_err(err, "provisioning", EINVAL, "the localhost seccomp profile must be a relative path "
                          "under the kubelet's seccomp directory, without . or .. components");
    }
    return 0;
}

int al_kube_parse_seccomp(const char *s, al_kube_seccomp *kind, const char **path, al_error *err) {
    *kind = AL_KUBE_SECCOMP_RUNTIME_DEFAULT;
    *path = NULL;
    if (!s || !*s || strcmp(s, "runtime-default") == 0)
        return 0;
    al_error e = { 0 };
    const char *p = strncmp(s, "localhost:", 10) == 0 ? s + 10 : NULL;
    if (!p || !*p || p[0] == '/' || strlen(p) > 1024 || al_kube_check_path(p, &e) < 0)
        return al_err(err, "config", EINVAL, "seccomp %.200s: want runtime-default or localhost:PATH, PATH relative "
                      "to the kubelet's seccomp root (e.g. localhost:airlock/airlock.json), without empty, . or .. "
                      "components", s);
    *kind = AL_KUBE_SECCOMP_LOCALHOST;
    *path = p;
    return 0;
}

static json_t *secret(const al_kube_opts *o, const al_kube_files *f, time_t deadline) {
    json_t *data = json_object();
    for (size_t i = 0; data && i < f->n; i++) {
        char key[32];
        snprintf(key, sizeof key, "f%zu", i);
        char *b = al_kube_b64_encode(f->items[i].data, f->items[i].len);
        if (!b || json_object_set_new(data, key, json_string(b)) < 0)
            json_decref(TAKE_PTR(data));
        free(b);
    }
    /* the stdin key only when the run has stdin: the Secret holds what
     * the run was given and nothing else */
    if (data && f->has_stdin) {
        char *b = al_kube_b64_encode(f->stdin_data ? f->stdin_data : "", f->stdin_len);
        if (!b || json_object_set_new(data, "stdin", json_string(b)) < 0)
            json_decref(TAKE_PTR(data));
        free(b);
    }
    if (!data)
        return NULL;
    return json_pack("{s:s, s:s, s:o, s:s, s:b, s:o}", "apiVersion", "v1", "kind", "Secret", "metadata",
                     metadata(o, deadline), "type", "Opaque", "immutable", 1, "data", data);
}

static json_t *security_context(void) {
    return json_pack("{s:b, s:b, s:b, s:{s:[s]}, s:b}", "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1,
                     "runAsNonRoot", 1, "capabilities", "drop", "ALL", "privileged", 0);
}

static json_t *tmpfs(const char *name, uint64_t bytes) {
    char q[32];
    snprintf(q, sizeof q, "%llu", (unsigned long long)bytes);
    return json_pack("{s:s, s:{s:s, s:s}}", "name", name, "emptyDir", "medium", "Memory", "sizeLimit", q);
}

/* the env: the box's own three, then the run's (a name of the run's
 * replaces the box's) */
static json_t *env(const al_box_config *cfg, al_error *err) {
    static const char *const base[][2] = { { "PATH", "/usr/local/bin:/usr/bin:/bin" }, { "HOME", "/work" },
                                           { "TMPDIR", "/tmp" } };
    json_t *a = json_array();
    for (size_t i = 0; a && i < ELEMENTSOF(base); i++) {
        bool mine = false;
        for (size_t k = 0; cfg->envp && cfg->envp[k]; k++)
            mine |= strncmp(cfg->envp[k], base[i][0], strlen(base[i][0])) == 0 &&
                    cfg->envp[k][strlen(base[i][0])] == '=';
        if (!mine)
            json_array_append_new(a, json_pack("{s:s, s:s}", "name", base[i][0], "value", base[i][1]));
    }
    for (size_t k = 0; a && cfg->envp && cfg->envp[k]; k++) {
        const char *eq = strchr(cfg->envp[k], '=');
        size_t nl = eq ? (size_t)(eq - cfg->envp[k]) : 0;
        if (!eq || !env_name(cfg->envp[k], nl)) {
            al_err(err, "provisioning", EINVAL, "environment variable \"%.100s\": not NAME=VALUE with a name the "
                   "API server allows", cfg->envp[k]);
            json_decref(a);
            return NULL;
        }
        json_t *v = json_stringn(eq + 1, strlen(eq + 1));
        if (!v) {
            al_err(err, "provisioning", EINVAL, "environment variable %.*s: its value is not UTF-8", (int)nl,
                   cfg->envp[k]);
            json_decref(a);
            return NULL;
        }
        json_array_append_new(a, json_pack("{s:s%, s:o}", "name", cfg->envp[k], nl, "value", v));
    }
    return a;
}

/* main's command: the stage, its count of top components, the script's
 * stdin, the top components, argv */
static json_t *command(const al_kube_files *f, const al_box_config *cfg, json_t **ret_items, al_error *err) {
    json_t *tops = json_array(), *items = json_array();
    for (size_t i = 0; tops && items && i < f->n; i++) {
        char key[32];
        snprintf(key, sizeof key, "f%zu", i);
        json_array_append_new(items, json_pack("{s:s, s:s}", "key", key, "path", f->items[i].path));
        size_t tl = strcspn(f->items[i].path, "/");
        bool seen = false;
        for (size_t k = 0; k < json_array_size(tops); k++) {
            const char *t = json_string_value(json_array_get(tops, k));
            seen |= strlen(t) == tl && strncmp(t, f->items[i].path, tl) == 0;
        }
        if (!seen)
            json_array_append_new(tops, json_stringn(f->items[i].path, tl));
    }
    char n[32];
    snprintf(n, sizeof n, "%zu", json_array_size(tops));
    json_t *cmd = json_pack("[s, s, s, s, s, s]", "/bin/sh", "-c", STAGE, "airlock-stage", n,
                            f->has_stdin ? "/airlock/stdin/stdin" : "/dev/null");
    if (cmd && tops)
        json_array_extend(cmd, tops);
    for (size_t k = 0; cmd && cfg->argv && cfg->argv[k]; k++) {
        json_t *s = json_string(cfg->argv[k]);
        if (!s) {
            al_err(err, "provisioning", EINVAL, "argument %zu is not UTF-8 (the API server takes JSON strings)", k);
            json_decref(TAKE_PTR(cmd));
            break;
        }
        json_array_append_new(cmd, s);
    }
    json_decref(tops);
    if (!cmd || !items || !cfg->argv || !cfg->argv[0]) {
        json_decref(cmd);
        json_decref(items);
        if (!cfg->argv || !cfg->argv[0])
            al_err(err, "provisioning", EINVAL, "the run has no argv");
        return NULL;
    }
    *ret_items = items;
    return cmd;
}

static json_t *resources(const char *cpu, const char *mem) {
    return json_pack("{s:{s:s, s:s}, s:{s:s, s:s}}", "limits", "cpu", cpu, "memory", mem, "requests", "cpu", cpu,
                     "memory", mem);
}

static json_t *pod_spec(const al_kube_opts *o, const al_box_config *cfg, json_t *cmd, json_t *items, json_t *envs,
                        bool has_stdin) {
    const al_box_limits *l = &cfg->limits;
    char cpu[32], mem[32];
    snprintf(cpu, sizeof cpu, "%llum", (unsigned long long)(l->cpu_millis ? l->cpu_millis : 1000));
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)l->memory_bytes);
    json_t *seccomp = o->seccomp == AL_KUBE_SECCOMP_LOCALHOST
        ? json_pack("{s:s, s:s}", "type", "Localhost", "localhostProfile", o->seccomp_localhost)
        : json_pack("{s:s}", "type", "RuntimeDefault");
    json_t *mounts = json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s, s:b}]", "name", "work", "mountPath",
                               "/work", "name", "out", "mountPath", "/out", "name", "tmp", "mountPath", "/tmp", "name",
                               "in", "mountPath", "/airlock/in", "readOnly", 1);
    /* the stdin volume only with stdin (the stage reads /dev/null without) */
    if (mounts && has_stdin)
        json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "stdin", "mountPath", "/airlock/stdin",
                                                "readOnly", 1));
    json_t *main_c = json_pack("{s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:o}", "name", "main", "image", o->image_ref,
                               "imagePullPolicy", "IfNotPresent", "command", cmd, "workingDir", "/work", "env", envs,
                               "resources", resources(cpu, mem), "securityContext", security_context(),
                               "volumeMounts", mounts);
    json_t *collect = json_pack("{s:s, s:s, s:s, s:s, s:[s, s, s], s:o, s:o, s:[{s:s, s:s, s:b}]}", "name",
                                "collect", "image", o->image_ref, "imagePullPolicy", "IfNotPresent", "restartPolicy",
                                "Always", "command", "/bin/sh", "-c", COLLECT, "resources", resources("50m", "32Mi"),
                                "securityContext", security_context(), "volumeMounts", "name", "out", "mountPath",
                                "/out", "readOnly", 1);
    json_t *volumes = json_pack("[o, o, o, {s:s, s:{s:s, s:i, s:o}}]", tmpfs("work", l->tmpfs_bytes),
                                tmpfs("out", l->tmpfs_bytes), tmpfs("tmp", l->tmpfs_bytes), "name", "in", "secret",
                                "secretName", o->run_id, "defaultMode", 420, "items", items);
    if (volumes && has_stdin)
        json_array_append_new(volumes, json_pack("{s:s, s:{s:s, s:i, s:[{s:s, s:s}]}}", "name", "stdin", "secret",
                                                 "secretName", o->run_id, "defaultMode", 420, "items", "key",
                                                 "stdin", "path", "stdin"));
    json_t *spec = json_pack("{s:s, s:I, s:i, s:b, s:b, s:b, s:b, s:b, s:{s:b, s:i, s:i, s:i, s:o}, s:[o], s:[o], "
                             "s:o}",
                             "restartPolicy", "Never", "activeDeadlineSeconds",
                             (json_int_t)((l->wall_ms + 999) / 1000 + 30), "terminationGracePeriodSeconds", 2,
                             "automountServiceAccountToken", 0, "enableServiceLinks", 0, "hostNetwork", 0, "hostPID",
                             0, "hostIPC", 0, "securityContext", "runAsNonRoot", 1, "runAsUser", 65534, "runAsGroup",
                             65534, "fsGroup", 65534, "seccompProfile", seccomp, "initContainers", collect,
                             "containers", main_c, "volumes", volumes);
    if (spec && o->runtime_class && *o->runtime_class)
        json_object_set_new(spec, "runtimeClassName", json_string(o->runtime_class));
    return spec;
}

json_t *al_kube_netpol(const char *namespace_) {
    json_t *md = json_pack("{s:s}", "name", "airlock-sandbox-deny-all");
    if (md && namespace_ && *namespace_)
        json_object_set_new(md, "namespace", json_string(namespace_));
    return json_pack("{s:s, s:s, s:o, s:{s:{s:{s:s}}, s:[s, s]}}", "apiVersion", "networking.k8s.io/v1", "kind",
                     "NetworkPolicy", "metadata", md, "spec", "podSelector", "matchLabels", "airlock.dev/sandbox",
                     "true", "policyTypes", "Ingress", "Egress");
}

int al_kube_objects(const al_kube_opts *o, const al_box_config *cfg, json_t **ret_secret, json_t **ret_pod,
                    json_t **ret_netpol, al_error *err) {
    *ret_secret = *ret_pod = *ret_netpol = NULL;
    int r = check_opts(o, err);
    if (r < 0)
        return r;
    al_kube_files f;
    if ((r = al_kube_files_read(cfg, &f, err)) < 0)
        return r;
    time_t deadline = time(NULL) + (time_t)((cfg->limits.wall_ms + 999) / 1000 + 30);
    json_t *items = NULL, *envs = env(cfg, err);
    json_t *cmd = envs ? command(&f, cfg, &items, err) : NULL;
    json_t *sec = cmd ? secret(o, &f, deadline) : NULL;
    bool has_stdin = f.has_stdin;
    al_kube_files_free(&f);
    if (!cmd || !sec) {
        json_decref(envs);
        json_decref(cmd);
        json_decref(items);
        json_decref(sec);
        return err->err ? -err->err : al_err(err, "provisioning", ENOMEM, "out of memory");
    }
    json_t *spec = pod_spec(o, cfg, cmd, items, envs, has_stdin);
    json_t *pod = spec ? json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata",
                                   metadata(o, deadline), "spec", spec)
                       : NULL;
    json_t *np = al_kube_netpol(o->cluster ? o->cluster->namespace_ : NULL);
    if (!pod || !np) {
        json_decref(sec);
        json_decref(pod);
        json_decref(np);
        return al_err(err, "provisioning", ENOMEM, "out of memory");
    }
    *ret_secret = sec;
    *ret_pod = pod;
    *ret_netpol = np;
    return 0;
}
