/* The remote drivers, e2b and daytona: each run is `airlock-server
 * helper` (the helper of the binary that links libcurl), whose job names
 * the cloud service, its key and the sandbox's tag; the helper makes the
 * sandbox, stages, runs, streams, collects /out and deletes the sandbox
 * (src/remote/). Its cancel and wait are any helper's: SIGTERM to the
 * helper stops the command and deletes the sandbox. The key is read once
 * here, from its file or the environment, and goes to the helper only in
 * its job (on its stdin): never in argv, the environment of a box, a
 * result, the settings or a log. */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../remote/remote.h"
#include "../util/hash.h"
#include "driver.h"
#include "helper_start.h"
#include "remote_net.h"

typedef struct remote_conf {
    bool set;
    char api_url[AL_REMOTE_URL_MAX], sandbox_url[AL_REMOTE_URL_MAX];
    char key[AL_REMOTE_KEY_MAX];
    char template_name[128];
    char key_error[256];          /* why there is no key, or "" */
    char node[160];               /* "<host>:<hash of the state dir>": this service's sandboxes */
    char instance[20];            /* this start's: its sandboxes are not a dead service's */
    bool swept;
    pthread_mutex_t mu;
} remote_conf;

static remote_conf confs[_AL_REMOTE_KIND_MAX] = { { .mu = PTHREAD_MUTEX_INITIALIZER },
                                                  { .mu = PTHREAD_MUTEX_INITIALIZER } };

static const char *const key_env[] = { [AL_REMOTE_E2B] = "E2B_API_KEY", [AL_REMOTE_DAYTONA] = "DAYTONA_API_KEY" };
static const char *const key_name[] = { [AL_REMOTE_E2B] = "e2b_api_key_file",
                                        [AL_REMOTE_DAYTONA] = "daytona_api_key_file" };

/* the key from FILE (its first line, at most AL_REMOTE_KEY_MAX - 1 bytes)
 * or the environment; "" and why in C->key_error when there is none */
static void read_key(remote_conf *c, al_remote_kind kind, const char *file) {
    c->key[0] = c->key_error[0] = '\0';
    if (file && *file) {
        _cleanup_close_ int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = fd < 0 ? -1 : read(fd, c->key, sizeof c->key - 1);
        if (n < 0) {
            snprintf(c->key_error, sizeof c->key_error, "%s = %.120s: cannot read it (%s)", key_name[kind], file,
                     strerror(errno));
            n = 0;
        }
        c->key[n] = '\0';
    } else {
        const char *v = getenv(key_env[kind]);
        snprintf(c->key, sizeof c->key, "%s", v ? v : "");
    }
    c->key[strcspn(c->key, "\r\n")] = '\0';
    for (const char *p = c->key; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) {
            snprintf(c->key_error, sizeof c->key_error, "the %s key holds a space or a control character",
                     al_remote_kind_name(kind));
            c->key[0] = '\0';
        }
    if (!c->key[0] && !c->key_error[0])
        snprintf(c->key_error, sizeof c->key_error,
                 "driver = %s has no API key: set %s (a file holding it) or %s in the service's environment",
                 al_remote_kind_name(kind), key_name[kind], key_env[kind]);
}

static bool url_ok(const char *u) {
    return u && (strncmp(u, "https://", 8) == 0 || strncmp(u, "http://", 7) == 0) && strlen(u) < AL_REMOTE_URL_MAX &&
           !strpbrk(u, " \t\r\n?#");
}

int al_driver_remote_configure(const char *kind_name, const char *api_url, const char *sandbox_url,
                               const char *key_file, const char *template_name, const char *state_dir, al_error *err) {
    al_remote_kind kind;
    if (al_remote_kind_from_name(kind_name, &kind) < 0)
        return al_err(err, "config", EINVAL, "driver %s: not a remote driver", kind_name);
    remote_conf *c = &confs[kind];
    if (!url_ok(api_url))
        return al_err(err, "config", EINVAL, "%s_api_url = %s: want an http(s) URL", kind_name, api_url ? api_url : "");
    if (sandbox_url && *sandbox_url && !url_ok(sandbox_url))
        return al_err(err, "config", EINVAL, "e2b_sandbox_url = %s: want an http(s) URL", sandbox_url);
    if (template_name && strlen(template_name) >= sizeof c->template_name)
        return al_err(err, "config", ENAMETOOLONG, "the template or target name is too long");
    snprintf(c->api_url, sizeof c->api_url, "%s", api_url);
    size_t n = strlen(c->api_url);
    while (n > 0 && c->api_url[n - 1] == '/')
        c->api_url[--n] = '\0';
    snprintf(c->sandbox_url, sizeof c->sandbox_url, "%s", sandbox_url ? sandbox_url : "");
    n = strlen(c->sandbox_url);
    while (n > 0 && c->sandbox_url[n - 1] == '/')
        c->sandbox_url[--n] = '\0';
    snprintf(c->template_name, sizeof c->template_name, "%s", template_name ? template_name : "");
    read_key(c, kind, key_file);
    if (!c->key[0])
        return al_err(err, "config", EACCES, "%s", c->key_error);
    char host[64] = "host", hex[65];
    gethostname(host, sizeof host - 1);
    al_sha256_hex(state_dir ? state_dir : "", strlen(state_dir ? state_dir : ""), hex);
    snprintf(c->node, sizeof c->node, "%.63s:%.12s", host, hex);
    uint8_t rnd[6] = { 0 };
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return al_err(err, "config", EIO, "getrandom: %m");
    snprintf(c->instance, sizeof c->instance, "%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
             rnd[5]);
    c->set = true;
    return 0;
}

static int remote_probe(al_remote_kind kind, al_error *err) {
    remote_conf *c = &confs[kind];
    if (!c->set)
        return al_err(err, "driver", EINVAL, "driver = %s is not configured", al_remote_kind_name(kind));
    if (!c->key[0])
        return al_err(err, "driver", EACCES, "%s", c->key_error);
    memset(err, 0, sizeof *err);
    return 0;
}

static json_t *control(const al_control *c) {
    return json_pack("{s:s, s:s}", "level", al_level_name(c->level), "detail", c->detail);
}

static json_t *remote_capabilities(al_remote_kind kind) {
    al_controls c;
    al_remote_controls(kind, &c);
    json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "isolation", control(&c.userns), "seccomp",
                          control(&c.seccomp), "no_new_privs", control(&c.no_new_privs), "network",
                          control(&c.network), "memory", control(&c.memory), "pids", control(&c.pids), "cpu",
                          control(&c.cpu), "tmpfs", control(&c.tmpfs), "capabilities", control(&c.caps));
    /* what offline and an allow-list become there; the URL, never the key */
    al_remote_opts off = { .kind = kind }, hosts = { .kind = kind, .n_hosts = 1 };
    al_control a, b;
    al_remote_network_control(&off, &a);
    al_remote_network_control(&hosts, &b);
    json_object_set_new(o, "network",
                        json_pack("{s:s, s:s, s:s}", "level", al_level_name(a.level), "detail", a.detail, "hosts",
                                  kind == AL_REMOTE_DAYTONA ? "refused: Daytona filters by address, not by name"
                                                            : b.detail));
    json_object_set_new(o, "output", json_pack("{s:s, s:s}", "level", "applied", "detail",
                                               kind == AL_REMOTE_DAYTONA
                                                   ? "not streamed: Daytona's process/execute answers once the "
                                                     "command has ended, stdout and stderr merged (as stdout)"
                                                   : "streamed live over envd's process.Process/Start"));
    al_error err = { 0 };
    bool ok = remote_probe(kind, &err) == 0;
    json_object_set_new(o, "service",
                        json_pack("{s:s, s:s}", "level", ok ? "unconfirmed" : "not-enforced", "detail",
                                  ok ? confs[kind].api_url : err.msg));
    return o;
}

static int remote_start(al_remote_kind kind, const char *self_exe, const al_job *job, al_driver_run *ret,
                        al_error *err) {
    remote_conf *c = &confs[kind];
    int r = remote_probe(kind, err);
    if (r < 0)
        return r;
    /* a sandbox's working directory is this host's, staged and collected
     * by the native box alone: a remote sandbox would lose what the
     * command wrote (refused, never run without it) */
    if (job->work_in || job->work_out)
        return al_err(err, "provisioning", EOPNOTSUPP,
                      "E2B sandbox commands run on the native driver only: the %s driver does not carry a "
                      "sandbox's working directory", al_remote_kind_name(kind));
    al_job j = *job;
    j.driver = kind == AL_REMOTE_E2B ? AL_JOB_E2B : AL_JOB_DAYTONA;
    j.remote_api_url = c->api_url;
    j.remote_sandbox_url = c->sandbox_url[0] ? c->sandbox_url : NULL;
    j.remote_key = c->key;
    j.remote_template = c->template_name[0] ? c->template_name : NULL;
    /* the run's id: its out_dir is STATE/runs/ID/out */
    char run[128] = "", tag[320];
    if (job->out_dir) {
        char copy[PATH_MAX];
        snprintf(copy, sizeof copy, "%s", job->out_dir);
        snprintf(run, sizeof run, "%.120s", basename(dirname(copy)));
    }
    snprintf(tag, sizeof tag, "%s/%s/%s", c->node, c->instance, run);
    j.remote_tag = tag;
    char copy[PATH_MAX], exe[PATH_MAX + 32];
    snprintf(copy, sizeof copy, "%s", self_exe);
    snprintf(exe, sizeof exe, "%s/airlock-server", dirname(copy));
    return al_driver_helper_start(exe, &j, NULL, 0, ret, err);
}

/* Once per start: the sandboxes a dead service of this node left (its
 * other instances'); later sweeps find nothing new (this service's own
 * are deleted by their helpers, or by the cloud at their timeout) */
static void *sweep_thread(void *arg) {
    remote_conf *c = arg;
    al_remote_kind kind = c == &confs[AL_REMOTE_E2B] ? AL_REMOTE_E2B : AL_REMOTE_DAYTONA;
    al_remote_opts o = { .kind = kind, .api_url = c->api_url, .api_key = c->key };
    char prefix[200], keep[200];
    snprintf(prefix, sizeof prefix, "%s/", c->node);
    snprintf(keep, sizeof keep, "%s/%s/", c->node, c->instance);
    al_error err = { 0 };
    /* a cloud that cannot be reached now leaves them to their own timeout */
    al_remote_sweep(&o, prefix, keep, &err);
    return NULL;
}

static void remote_sweep(al_remote_kind kind) {
    remote_conf *c = &confs[kind];
    pthread_mutex_lock(&c->mu);
    bool due = c->set && c->key[0] && !c->swept;
    c->swept = true;
    pthread_mutex_unlock(&c->mu);
    /* in a thread of its own: a cloud slow to answer does not hold up
     * the service's start (its calls are bounded: http.c) */
    pthread_t t;
    if (due && pthread_create(&t, NULL, sweep_thread, c) == 0)
        pthread_detach(t);
}

void al_driver_remote_net(const al_net_policy *p, al_remote_opts *o, const char **hosts) {
    o->internet = p->mode == AL_NET_INTERNET;
    o->hosts = hosts;
    o->n_hosts = 0;
    if (p->mode == AL_NET_HOSTS)
        for (size_t i = 0; i < p->n_hosts && o->n_hosts < AL_REMOTE_HOSTS_MAX; i++)
            hosts[o->n_hosts++] = p->hosts[i];
    if (p->mode == AL_NET_PACKAGES || (p->mode == AL_NET_HOSTS && p->with_packages))
        for (size_t i = 0; i < p->n_packages && o->n_hosts < AL_REMOTE_HOSTS_MAX; i++)
            hosts[o->n_hosts++] = p->packages[i];
}

bool al_driver_remote_net_held(al_remote_kind kind, al_net_mode mode, const char **why) {
    if (kind == AL_REMOTE_E2B || mode == AL_NET_OFFLINE || mode == AL_NET_INTERNET)
        return true;
    *why = "refused by the daytona driver: Daytona filters egress by address (CIDR), not by host name";
    return false;
}

static bool e2b_net_held(al_net_mode mode, const char **why) {
    return al_driver_remote_net_held(AL_REMOTE_E2B, mode, why);
}
static bool daytona_net_held(al_net_mode mode, const char **why) {
    return al_driver_remote_net_held(AL_REMOTE_DAYTONA, mode, why);
}

static json_t *e2b_capabilities(void) { return remote_capabilities(AL_REMOTE_E2B); }
static json_t *daytona_capabilities(void) { return remote_capabilities(AL_REMOTE_DAYTONA); }
static int e2b_probe(al_error *err) { return remote_probe(AL_REMOTE_E2B, err); }
static int daytona_probe(al_error *err) { return remote_probe(AL_REMOTE_DAYTONA, err); }
static int e2b_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
    return remote_start(AL_REMOTE_E2B, self_exe, job, ret, err);
}
static int daytona_start(const char *self_exe, const al_job *job, al_driver_run *ret, al_error *err) {
    return remote_start(AL_REMOTE_DAYTONA, self_exe, job, ret, err);
}
static void e2b_sweep(void) { remote_sweep(AL_REMOTE_E2B); }
static void daytona_sweep(void) { remote_sweep(AL_REMOTE_DAYTONA); }

const al_driver_ops al_driver_e2b = {
    .name = "e2b",
    .capabilities = e2b_capabilities,
    .probe = e2b_probe,
    .start = e2b_start,
    .cancel = al_driver_helper_cancel,
    .wait = al_driver_helper_wait,
    .sweep = e2b_sweep,
    .net_mode_held = e2b_net_held,
};

const al_driver_ops al_driver_daytona = {
    .name = "daytona",
    .capabilities = daytona_capabilities,
    .probe = daytona_probe,
    .start = daytona_start,
    .cancel = al_driver_helper_cancel,
    .wait = al_driver_helper_wait,
    .sweep = daytona_sweep,
    .net_mode_held = daytona_net_held,
};
