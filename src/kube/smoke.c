/* The NetworkPolicy smoke test (smoke.h). */
#include "smoke.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "spec.h"

#define PORT "8080"
#define CALL_MS 20000L
#define LOG_MAX (64u << 10)

/* Syscalls airlock's profile refuses (box/seccomp_policy.c) that a
 * runtime's default profile may let through (Docker's and containerd's
 * allow ptrace), each called with arguments the kernel itself refuses
 * harmlessly (no such pid, no such key, zero entries): the errno says
 * whether the call reached the kernel (ESRCH, EINVAL, ...) or a filter
 * refused it (EPERM, ENOSYS). x86_64 numbers: the profile is x86_64's. */
#define SYSCALLS                                                                                                   \
    "try:\n"                                                                                                       \
    "    import ctypes\n"                                                                                          \
    "    libc = ctypes.CDLL(None, use_errno=True)\n"                                                               \
    "    libc.syscall.restype = ctypes.c_long\n"                                                                   \
    "    def sc(*a):\n"                                                                                            \
    "        ctypes.set_errno(0)\n"                                                                                \
    "        rc = libc.syscall(*[ctypes.c_long(x) for x in a])\n"                                                  \
    "        return ctypes.get_errno() if rc == -1 else 0\n"                                                       \
    "    r['syscalls'] = {'ptrace': sc(101, 2, 2147483647, 0, 0), 'keyctl': sc(250, 0, 2147483647, 0),\n"        \
    "                     'io_uring_setup': sc(425, 0, 0)}\n"                                                      \
    "except Exception as e:\n"                                                                                    \
    "    r['syscalls_error'] = str(e)[:200]\n"

/* The probe: TCP to the target's port, then what the pod is from inside,
 * one line on its log. A refused connection is tried again for a while:
 * the target pod runs before its server listens (python's start, on a busy
 * node), and only a listener not up yet refuses; a policy drops (a timeout)
 * or leaves no route, which is judged at once. */
#define PROBE                                                                                                      \
    "import json, os, socket, sys, time\n"                                                                         \
    "r = {}\n"                                                                                                     \
    "until = time.monotonic() + 30\n"                                                                              \
    "while True:\n"                                                                                                \
    "    try:\n"                                                                                                   \
    "        socket.create_connection((sys.argv[1], " PORT "), timeout=4).close()\n"                                \
    "        r['reached'] = True\n"                                                                                \
    "    except ConnectionRefusedError as e:\n"                                                                    \
    "        if time.monotonic() < until:\n"                                                                       \
    "            time.sleep(0.5)\n"                                                                                \
    "            continue\n"                                                                                       \
    "        r['reached'] = False\n"                                                                               \
    "        r['error'] = str(e)[:200]\n"                                                                          \
    "    except Exception as e:\n"                                                                                 \
    "        r['reached'] = False\n"                                                                               \
    "        r['error'] = str(e)[:200]\n"                                                                          \
    "    break\n"                                                                                                  \
    "r['uid'] = os.getuid()\n"                                                                                     \
    "r['service_account_token'] = os.path.exists('/var/run/secrets/kubernetes.io/serviceaccount/token')\n"        \
    "try:\n"                                                                                                       \
    "    open('/airlock-smoke-write', 'w').close()\n"                                                              \
    "    r['read_only_root'] = False\n"                                                                            \
    "except OSError:\n"                                                                                            \
    "    r['read_only_root'] = True\n"                                                                             \
    SYSCALLS                                                                                                       \
    "try:\n"                                                                                                       \
    "    r['kernel'] = open('/proc/version').read(200).strip()\n"                                                  \
    "except OSError:\n"                                                                                            \
    "    pass\n"                                                                                                   \
    "print('airlock-smoke ' + json.dumps(r), flush=True)\n"

const char *al_kube_smoke_outcome_name(al_kube_smoke_outcome o) {
    return o == AL_KUBE_SMOKE_ENFORCED ? "enforced" : o == AL_KUBE_SMOKE_NOT_ENFORCED ? "NOT ENFORCED" : "inconclusive";
}

typedef struct smoke {
    const al_kube_smoke_opts *o;
    al_kube_smoke_result *res;
    char base[256];               /* /api/v1/namespaces/NS */
    char names[3][AL_KUBE_NAME_MAX];
    bool made[3];
    uint64_t deadline_ms;
} smoke;

enum { TARGET, CONTROL, SANDBOX };
static const char *const roles[] = { "target", "control", "sandbox" };

static int finish(smoke *s, al_kube_smoke_outcome out, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int finish(smoke *s, al_kube_smoke_outcome out, const char *fmt, ...) {
    s->res->outcome = out;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->res->reason, sizeof s->res->reason, fmt, ap);
    va_end(ap);
    al_utf8_fix(s->res->reason);
    return 0;
}

static json_t *pod(smoke *s, int role, const char *target_ip) {
    const al_kube_smoke_opts *o = s->o;
    json_t *labels = json_pack("{s:s, s:s}", "app.kubernetes.io/managed-by", "airlock", "airlock.dev/smoke", roles[role]);
    if (role == SANDBOX)
        json_object_set_new(labels, "airlock.dev/sandbox", json_string("true"));
    json_t *cmd = role == TARGET
        ? json_pack("[s, s, s, s, s, s, s, s]", "python3", "-m", "http.server", PORT, "--bind", "0.0.0.0",
                    "--directory", "/usr")
        : json_pack("[s, s, s, s]", "python3", "-c", PROBE, target_ip);
    json_t *c = json_pack("{s:s, s:s, s:s, s:o, s:[{s:s, s:s}], s:{s:{s:s, s:s}, s:{s:s, s:s}}, "
                          "s:{s:b, s:b, s:b, s:{s:[s]}, s:b}}",
                          "name", roles[role], "image", o->image_ref, "imagePullPolicy", "IfNotPresent", "command", cmd,
                          "env", "name", "PYTHONDONTWRITEBYTECODE", "value", "1", "resources", "limits", "cpu", "100m",
                          "memory", "64Mi", "requests", "cpu", "100m", "memory", "64Mi", "securityContext",
                          "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "runAsNonRoot", 1,
                          "capabilities", "drop", "ALL", "privileged", 0);
    json_t *spec = json_pack("{s:s, s:i, s:i, s:b, s:b, s:{s:b, s:i, s:i, s:{s:s}}, s:[o]}", "restartPolicy", "Never",
                             "activeDeadlineSeconds", role == TARGET ? 300 : 120, "terminationGracePeriodSeconds", 1,
                             "automountServiceAccountToken", 0, "enableServiceLinks", 0, "securityContext",
                             "runAsNonRoot", 1, "runAsUser", 65534, "runAsGroup", 65534, "seccompProfile", "type",
                             "RuntimeDefault", "containers", c);
    if (spec && o->runtime_class && *o->runtime_class)
        json_object_set_new(spec, "runtimeClassName", json_string(o->runtime_class));
    /* the sandbox probe under a run's profile; the others need none of it */
    if (spec && role == SANDBOX && o->seccomp == AL_KUBE_SECCOMP_LOCALHOST)
        json_object_set_new(json_object_get(spec, "securityContext"), "seccompProfile",
                            json_pack("{s:s, s:s}", "type", "Localhost", "localhostProfile", o->seccomp_localhost));
    return json_pack("{s:s, s:s, s:{s:s, s:o}, s:o}", "apiVersion", "v1", "kind", "Pod", "metadata", "name",
                     s->names[role], "labels", labels, "spec", spec);
}

static const char *message(const json_t *doc) {
    const char *m = json_string_value(json_object_get(doc, "message"));
    return m ? m : "";
}

static int create(smoke *s, int role, const char *target_ip, al_error *err) {
    json_t *p = pod(s, role, target_ip);
    if (!p)
        return al_err(err, "smoke", ENOMEM, "out of memory");
    char path[512];
    snprintf(path, sizeof path, "%s/pods?fieldValidation=Strict", s->base);
    long code = 0;
    json_t *doc = NULL;
    int r = al_kube_call(s->o->cluster, "POST", path, p, CALL_MS, &code, &doc, err);
    json_decref(p);
    if (r == 0 && (code < 200 || code > 299))
        r = al_err(err, "smoke", EIO, "create the %s pod: %ld: %.300s", roles[role], code, message(doc));
    json_decref(doc);
    if (r == 0)
        s->made[role] = true;
    return r;
}

static void delete_pod(smoke *s, int role) {
    if (!s->made[role])
        return;
    char path[512];
    snprintf(path, sizeof path, "%s/pods/%s", s->base, s->names[role]);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1", "gracePeriodSeconds",
                             0, "propagationPolicy", "Background");
    for (int i = 0; i < 3; i++) {
        long code = 0;
        json_t *doc = NULL;
        al_error e = { 0 };
        int r = al_kube_call(s->o->cluster, "DELETE", path, body, CALL_MS, &code, &doc, &e);
        json_decref(doc);
        if (r == 0 && ((code >= 200 && code < 300) || code == 404))
            break;
    }
    json_decref(body);
}

static bool stopped(smoke *s) {
    return al_now_ms() >= s->deadline_ms || (s->o->stop && s->o->stop(s->o->ud));
}

/* ROLE's pod, GET, into *RET (a new reference): 0, or -errno */
static int get(smoke *s, int role, json_t **ret, al_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/pods/%s", s->base, s->names[role]);
    long code = 0;
    int r = al_kube_call(s->o->cluster, "GET", path, NULL, CALL_MS, &code, ret, err);
    if (r == 0 && code != 200) {
        r = al_err(err, "smoke", EIO, "get the %s pod: %ld: %.300s", roles[role], code, message(*ret));
        json_decref(*ret);
        *ret = NULL;
    }
    return r;
}

/* the reason a pod will not start (an image pull, a config error), or NULL */
static const char *waiting_error(const json_t *p) {
    static const char *const bad[] = { "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                                       "CreateContainerConfigError", "CreateContainerError" };
    size_t i;
    json_t *cs;
    json_array_foreach(json_object_get(json_object_get(p, "status"), "containerStatuses"), i, cs) {
        const char *why = json_string_value(json_object_get(json_object_get(json_object_get(cs, "state"), "waiting"),
                                                            "reason"));
        for (size_t k = 0; why && k < ELEMENTSOF(bad); k++)
            if (strcmp(why, bad[k]) == 0)
                return why;
    }
    return NULL;
}

/* ROLE's pod until it runs with an IP (TARGET) or has ended (a probe):
 * 0 with the pod in *RET; -errno with why in ERR */
static int wait_pod(smoke *s, int role, json_t **ret, al_error *err) {
    *ret = NULL;
    for (;;) {
        json_t *p = NULL;
        int r = get(s, role, &p, err);
        if (r < 0)
            return r;
        const char *phase = json_string_value(json_object_get(json_object_get(p, "status"), "phase")) ?: "";
        const char *ip = json_string_value(json_object_get(json_object_get(p, "status"), "podIP"));
        const char *bad = waiting_error(p);
        if (bad) {
            r = al_err(err, "smoke", EIO, "the %s pod cannot start: %s", roles[role], bad);
        } else if (role == TARGET && strcmp(phase, "Running") == 0 && ip && *ip) {
            *ret = p;
            return 0;
        } else if (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0) {
            if (role != TARGET) {
                *ret = p;
                return 0;
            }
            r = al_err(err, "smoke", EIO, "the target pod ended (%s) before it served", phase);
        }
        json_decref(p);
        if (r < 0)
            return r;
        if (stopped(s))
            return al_err(err, "smoke", ETIMEDOUT, "the %s pod did not %s in time", roles[role],
                          role == TARGET ? "start serving" : "finish");
        usleep(300 * 1000);
    }
}

typedef struct logbuf {
    char buf[LOG_MAX];
    size_t len;
} logbuf;

static int log_data(const char *p, size_t n, void *ud) {
    logbuf *l = ud;
    if (n > sizeof l->buf - 1 - l->len)
        n = sizeof l->buf - 1 - l->len;
    memcpy(l->buf + l->len, p, n);
    l->len += n;
    return 0;
}

/* ROLE's report, the last "airlock-smoke {...}" line of its log: a new
 * reference, or NULL with why in ERR */
static json_t *report(smoke *s, int role, al_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/pods/%s/log?container=%s&limitBytes=%u", s->base, s->names[role], roles[role],
             LOG_MAX - 1);
    logbuf *l = calloc(1, sizeof *l);
    if (!l)
        return al_err(err, "smoke", ENOMEM, "out of memory"), NULL;
    al_kube_stream_ops ops = { .data = log_data, .ud = l };
    long code = 0;
    json_t *status = NULL;
    int r = al_kube_stream(s->o->cluster, path, &ops, &code, &status, err);
    if (r == 0 && code != 200)
        al_err(err, "smoke", EIO, "the %s pod's log: %ld: %.300s", roles[role], code, message(status));
    json_decref(status);
    json_t *rep = NULL;
    if (r == 0 && code == 200) {
        l->buf[l->len] = '\0';
        for (char *line = l->buf, *next; line && *line; line = next) {
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (strncmp(line, "airlock-smoke ", 14) == 0) {
                json_decref(rep);
                rep = json_loads(line + 14, 0, NULL);
            }
        }
        if (!json_is_object(rep)) {
            json_decref(rep);
            rep = NULL;
            al_err(err, "smoke", EPROTO, "the %s pod reported nothing (its log: %.200s)", roles[role], l->buf);
        }
    }
    free(l);
    return rep;
}

/* The first of the probe's syscalls that a filter did not refuse (its
 * errno neither EPERM nor ENOSYS: the kernel answered it), "(no report)"
 * when the probe could not say, or NULL when all were refused. */
static const char *seccomp_reached(const json_t *sandbox) {
    const json_t *calls = json_object_get(sandbox, "syscalls");
    if (!json_is_object(calls))
        return "syscall check (the probe could not make it)";
    static const char *const names[] = { "ptrace", "keyctl", "io_uring_setup" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const json_t *e = json_object_get(calls, names[i]);
        if (!json_is_integer(e) || (json_integer_value(e) != EPERM && json_integer_value(e) != ENOSYS))
            return names[i];
    }
    return NULL;
}

/* the verdict from the two reports and the sandbox pod as the server has it */
static int judge(smoke *s, json_t *control, json_t *sandbox, json_t *sandbox_pod) {
    if (!json_is_true(json_object_get(control, "reached")))
        return finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "the control probe (no sandbox label) could not reach the "
                      "target pod (%s): the pod network does not work here, so nothing is shown of the policy",
                      json_string_value(json_object_get(control, "error")) ?: "no error said");
    if (json_is_true(json_object_get(sandbox, "reached")))
        return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "a pod labelled airlock.dev/sandbox=true reached another pod: "
                      "this cluster's CNI does not enforce the NetworkPolicy airlock-sandbox-deny-all (or it is "
                      "not installed in namespace %s)", s->o->cluster->namespace_);
    /* the probe always says reached: true or false; a report without it
     * (a probe that broke after its line began) shows nothing, and must
     * not read as "could not reach" */
    if (!json_is_false(json_object_get(sandbox, "reached")))
        return finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "the sandbox probe's report does not say whether it reached "
                      "the target pod: run `airlock smoke --driver kubernetes` again, and read the sandbox pod's log "
                      "if it repeats");
    json_t *uid = json_object_get(sandbox, "uid");
    if (!json_is_integer(uid) || json_integer_value(uid) == 0)
        return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "the sandbox probe ran as root: its pod's runAsNonRoot was "
                      "not applied");
    if (!json_is_false(json_object_get(sandbox, "service_account_token")))
        return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "the sandbox probe found a service-account token mounted");
    if (!json_is_true(json_object_get(sandbox, "read_only_root")))
        return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "the sandbox probe could write its root filesystem");
    const char *want = s->o->runtime_class && *s->o->runtime_class ? s->o->runtime_class : NULL;
    const char *ran = json_string_value(json_object_get(json_object_get(sandbox_pod, "spec"), "runtimeClassName"));
    if ((want || ran) && (!want || !ran || strcmp(want, ran) != 0))
        return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "the sandbox probe ran with runtime class %s, not %s",
                      ran ? ran : "(none)", want ? want : "(none)");
    const char *local = s->o->seccomp == AL_KUBE_SECCOMP_LOCALHOST ? s->o->seccomp_localhost : NULL;
    if (local) {
        const char *reached = seccomp_reached(sandbox);
        if (reached)
            return finish(s, AL_KUBE_SMOKE_NOT_ENFORCED, "the sandbox probe's %s, which airlock's seccomp profile "
                          "refuses, was not refused under seccompProfile Localhost %s: the node's file there is not "
                          "airlock's profile (install `airlock seccomp-profile`'s output)", reached, local);
    }
    return finish(s, AL_KUBE_SMOKE_ENFORCED, "a pod labelled airlock.dev/sandbox=true could not reach a pod the "
                  "control probe reached; it ran as uid %lld, with no service-account token, a read-only root%s%s%s%s",
                  (long long)json_integer_value(uid), want ? " and runtime class " : "", want ? want : "",
                  local ? ", and under seccompProfile Localhost " : "",
                  local ? "refused ptrace, keyctl and io_uring_setup as airlock's profile does" : "");
}

/* Smoke pods an earlier test left (its process killed mid-test; each is
 * ended by its activeDeadlineSeconds, but the object stays): deleted when
 * older than STALE_S, so that another node's test now running keeps its. */
#define STALE_S (15 * 60)
static void sweep_stale(smoke *s) {
    char path[512];
    snprintf(path, sizeof path, "%s/pods?labelSelector=airlock.dev%%2Fsmoke", s->base);
    long code = 0;
    json_t *list = NULL;
    al_error e = { 0 };
    if (al_kube_call(s->o->cluster, "GET", path, NULL, CALL_MS, &code, &list, &e) < 0 || code != 200) {
        json_decref(list);
        return;
    }
    size_t i;
    json_t *p;
    time_t now = time(NULL);
    json_array_foreach(json_object_get(list, "items"), i, p) {
        const char *name = json_string_value(json_object_get(json_object_get(p, "metadata"), "name"));
        const char *ts = json_string_value(json_object_get(json_object_get(p, "metadata"), "creationTimestamp"));
        struct tm tm = { 0 };
        const char *end = ts ? strptime(ts, "%Y-%m-%dT%H:%M:%SZ", &tm) : NULL;
        if (!name || strncmp(name, "airlock-smoke-", 14) != 0 || strlen(name) >= AL_KUBE_NAME_MAX ||
            strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(name) || !end || *end ||
            now - timegm(&tm) < STALE_S)
            continue;
        snprintf(path, sizeof path, "%s/pods/%s", s->base, name);
        json_t *doc = NULL;
        al_kube_call(s->o->cluster, "DELETE", path, NULL, CALL_MS, &code, &doc, &e);
        json_decref(doc);
    }
    json_decref(list);
}

/* the test's steps; the pods made are deleted by the caller */
static int steps(smoke *s) {
    al_error err = { 0 };
    sweep_stale(s);
    json_t *target = NULL;
    if (create(s, TARGET, NULL, &err) < 0 || wait_pod(s, TARGET, &target, &err) < 0)
        return finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "%s", err.msg);
    /* the server's word, which goes into the probes' argv and their
     * connect(): an address, or the test says it could not judge */
    char ip[INET6_ADDRSTRLEN];
    const char *tip = json_string_value(json_object_get(json_object_get(target, "status"), "podIP"));
    unsigned char bin[sizeof(struct in6_addr)];
    bool addr = tip && strlen(tip) < sizeof ip &&
                (inet_pton(AF_INET, tip, bin) == 1 || inet_pton(AF_INET6, tip, bin) == 1);
    if (addr)
        snprintf(ip, sizeof ip, "%s", tip);
    json_decref(target);
    if (!addr)
        return finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "the target pod's status.podIP is not an IP address: check "
                      "that the kubeconfig's server is a Kubernetes API server");
    json_object_set_new(s->res->detail, "target_ip", json_string(ip));
    if (create(s, CONTROL, ip, &err) < 0 || create(s, SANDBOX, ip, &err) < 0)
        return finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "%s", err.msg);
    json_t *cpod = NULL, *spod = NULL, *crep = NULL, *srep = NULL;
    if (wait_pod(s, CONTROL, &cpod, &err) == 0 && wait_pod(s, SANDBOX, &spod, &err) == 0 &&
        (crep = report(s, CONTROL, &err)) && (srep = report(s, SANDBOX, &err))) {
        json_object_set(s->res->detail, "control", crep);
        json_object_set(s->res->detail, "sandbox", srep);
        judge(s, crep, srep, spod);
    } else {
        finish(s, AL_KUBE_SMOKE_INCONCLUSIVE, "%s", err.msg);
    }
    json_decref(cpod);
    json_decref(spod);
    json_decref(crep);
    json_decref(srep);
    return 0;
}

int al_kube_smoke(const al_kube_smoke_opts *o, al_kube_smoke_result *res, al_error *err) {
    *res = (al_kube_smoke_result){ .outcome = AL_KUBE_SMOKE_INCONCLUSIVE };
    if (!o->cluster)
        return al_err(err, "smoke", EINVAL, "no cluster");
    if (!al_kube_valid_image_ref(o->image_ref))
        return al_err(err, "smoke", EINVAL, "the image reference \"%.200s\" is not REPO@sha256:<64 hex>",
                      o->image_ref ? o->image_ref : "");
    if (!(res->detail = json_object()))
        return al_err(err, "smoke", ENOMEM, "out of memory");
    smoke *s = calloc(1, sizeof *s);
    if (!s) {
        json_decref(res->detail);
        res->detail = NULL;
        return al_err(err, "smoke", ENOMEM, "out of memory");
    }
    s->o = o;
    s->res = res;
    s->deadline_ms = al_now_ms() + (uint64_t)(o->timeout_s ? o->timeout_s : 180) * 1000;
    snprintf(s->base, sizeof s->base, "/api/v1/namespaces/%s", o->cluster->namespace_);
    uint8_t rnd[4] = { 0 };
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(rnd, &ts.tv_nsec, sizeof rnd);
    }
    for (int i = 0; i < 3; i++)
        snprintf(s->names[i], sizeof s->names[i], "airlock-smoke-%02x%02x%02x%02x-%s", rnd[0], rnd[1], rnd[2], rnd[3],
                 roles[i]);
    steps(s);
    for (int i = 2; i >= 0; i--)
        delete_pod(s, i);
    free(s);
    return 0;
}
