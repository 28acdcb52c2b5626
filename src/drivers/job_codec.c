/*
 * The job's wire form: the one line of JSON a driver writes on the stdin
 * of `airlock helper`, and the helper reads. The only reader and writer of
 * it (the fields: job.h). Decoding is strict, as for any parser at a
 * boundary: no unknown field, each of its type and within its cap, and
 * decode(encode(job)) is job (tests/fuzz/fuzz_job.c holds it to that).
 */
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../util/json_keys.h"
#include "job.h"

void al_job_init(al_job *job) {
    *job = (al_job){ .fork_fd = -1, .zygote_fd = -1 };
    al_box_limits_default(&job->limits);
    al_box_limits_default(&job->pkg_limits);
}

static void free_strv(char **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

void al_job_free(al_job *job) {
    free(job->code);
    free_strv(job->inputs, job->n_inputs);
    free(job->out_dir);
    free(job->image_dir);
    free(job->image_digest);
    free_strv(job->args, job->n_args);
    free(job->stdin_path);
    free(job->network);
    free(job->skill_dir);
    free(job->script);
    free(job->work_in);
    free(job->work_out);
    free(job->preload);
    free(job->docker_socket);
    free(job->docker_runtime);
    free(job->remote_api_url);
    free(job->remote_sandbox_url);
    if (job->remote_key)
        explicit_bzero(job->remote_key, strlen(job->remote_key));
    free(job->remote_key);
    free(job->remote_template);
    free(job->remote_tag);
    free(job->kube_config);
    free(job->kube_namespace);
    free(job->kube_image_ref);
    free(job->kube_runtime_class);
    free(job->kube_seccomp);
    free(job->kube_name);
    free(job->kube_node);
    free(job->kube_instance);
    free_strv(job->pkg_python, job->n_pkg_python);
    free_strv(job->pkg_node, job->n_pkg_node);
    free(job->pkg_layers_dir);
    free(job->pkg_installer_dir);
    free(job->pkg_index_python);
    free(job->pkg_registry_node);
    free(job->pkg_network);
    al_job_init(job);
}

int al_job_set(char **dst, const char *s) {
    char *c = NULL;
    if (s && !(c = strdup(s)))
        return -ENOMEM;
    free(*dst);
    *dst = c;
    return 0;
}

static int push(char ***v, size_t *n, size_t max, const char *s) {
    if (*n >= max)
        return -E2BIG;
    char **nv = realloc(*v, (*n + 1) * sizeof **v);
    if (!nv)
        return -ENOMEM;
    *v = nv;
    if (!(nv[*n] = strdup(s)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

int al_job_add_input(al_job *job, const char *path) {
    return push(&job->inputs, &job->n_inputs, AL_JOB_INPUTS_MAX, path);
}

int al_job_add_arg(al_job *job, const char *arg) {
    job->has_args = true;
    return push(&job->args, &job->n_args, AL_JOB_ARGS_MAX, arg);
}

int al_job_add_pkg_python(al_job *job, const char *spec) {
    return push(&job->pkg_python, &job->n_pkg_python, AL_JOB_PKG_MAX, spec);
}

int al_job_add_pkg_node(al_job *job, const char *spec) {
    return push(&job->pkg_node, &job->n_pkg_node, AL_JOB_PKG_MAX, spec);
}

bool al_job_has_packages(const al_job *job) {
    return job->n_pkg_python > 0 || job->n_pkg_node > 0;
}

int al_job_copy(const al_job *job, al_job *ret) {
    al_job c = *job;
    /* none of JOB's storage: each pointer is copied below */
    c.code = c.out_dir = c.image_dir = c.image_digest = c.stdin_path = c.network = NULL;
    c.skill_dir = c.script = c.preload = c.docker_socket = c.docker_runtime = c.work_in = c.work_out = NULL;
    c.remote_api_url = c.remote_sandbox_url = c.remote_key = c.remote_template = c.remote_tag = NULL;
    c.kube_config = c.kube_namespace = c.kube_image_ref = c.kube_runtime_class = c.kube_seccomp = NULL;
    c.kube_name = c.kube_node = c.kube_instance = NULL;
    c.inputs = c.args = c.pkg_python = c.pkg_node = NULL;
    c.n_inputs = c.n_args = c.n_pkg_python = c.n_pkg_node = 0;
    c.pkg_layers_dir = c.pkg_installer_dir = c.pkg_index_python = c.pkg_registry_node = c.pkg_network = NULL;
    int r = 0;
    struct { char **dst; const char *src; } s[] = {
        { &c.code, job->code },           { &c.out_dir, job->out_dir },   { &c.image_dir, job->image_dir },
        { &c.image_digest, job->image_digest }, { &c.stdin_path, job->stdin_path }, { &c.network, job->network },
        { &c.skill_dir, job->skill_dir }, { &c.script, job->script },     { &c.preload, job->preload },
        { &c.docker_socket, job->docker_socket }, { &c.docker_runtime, job->docker_runtime },
        { &c.remote_api_url, job->remote_api_url }, { &c.remote_sandbox_url, job->remote_sandbox_url },
        { &c.remote_key, job->remote_key }, { &c.remote_template, job->remote_template },
        { &c.remote_tag, job->remote_tag },
        { &c.kube_config, job->kube_config }, { &c.kube_namespace, job->kube_namespace },
        { &c.kube_image_ref, job->kube_image_ref }, { &c.kube_runtime_class, job->kube_runtime_class },
        { &c.kube_seccomp, job->kube_seccomp }, { &c.kube_name, job->kube_name },
        { &c.kube_node, job->kube_node }, { &c.kube_instance, job->kube_instance },
        { &c.work_in, job->work_in },     { &c.work_out, job->work_out },
        { &c.pkg_layers_dir, job->pkg_layers_dir }, { &c.pkg_installer_dir, job->pkg_installer_dir },
        { &c.pkg_index_python, job->pkg_index_python }, { &c.pkg_registry_node, job->pkg_registry_node },
        { &c.pkg_network, job->pkg_network },
    };
    for (size_t i = 0; i < ELEMENTSOF(s) && r == 0; i++)
        r = al_job_set(s[i].dst, s[i].src);
    for (size_t i = 0; i < job->n_inputs && r == 0; i++)
        r = al_job_add_input(&c, job->inputs[i]);
    for (size_t i = 0; i < job->n_args && r == 0; i++)
        r = al_job_add_arg(&c, job->args[i]);
    for (size_t i = 0; i < job->n_pkg_python && r == 0; i++)
        r = al_job_add_pkg_python(&c, job->pkg_python[i]);
    for (size_t i = 0; i < job->n_pkg_node && r == 0; i++)
        r = al_job_add_pkg_node(&c, job->pkg_node[i]);
    c.has_args = job->has_args;
    *ret = c;
    return r;
}

/* -- encode -------------------------------------------------------------- */

static void set_str(json_t *o, const char *k, const char *v) {
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static json_t *strv(char *const *v, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *uids_json(const al_job_uids *u) {
    return json_pack("{s:I, s:I, s:[i, i]}", "holder", (json_int_t)u->holder, "uid", (json_int_t)u->uid, "lock_fds",
                     u->lock_fds[0], u->lock_fds[1]);
}

static json_t *held_json(const al_job_held *h, bool keep) {
    json_t *o = uids_json(&h->uids);
    json_object_set_new(o, "id", json_string(h->id));
    if (!keep) {
        json_object_set_new(o, "image_id", json_string(h->image_id));
        json_object_set_new(o, "hold_until", json_integer(h->hold_until_s));
    }
    return o;
}

static json_t *limits_json(const al_box_limits *l) {
    /* the wall clock in milliseconds: in seconds, a 500 ms timeout was 0 */
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "timeout_ms", (json_int_t)l->wall_ms, "memory_bytes",
                     (json_int_t)l->memory_bytes, "cpu_millis", (json_int_t)l->cpu_millis, "pids", (json_int_t)l->pids,
                     "output_bytes", (json_int_t)l->output_bytes, "tmpfs_bytes", (json_int_t)l->tmpfs_bytes);
}

/* the packages' fields, one member: all there, or none */
static json_t *packages_json(const al_job *j) {
    json_t *o = json_object();
    json_object_set_new(o, "python", strv(j->pkg_python, j->n_pkg_python));
    json_object_set_new(o, "node", strv(j->pkg_node, j->n_pkg_node));
    set_str(o, "layers_dir", j->pkg_layers_dir);
    set_str(o, "installer_dir", j->pkg_installer_dir);
    set_str(o, "index_python", j->pkg_index_python);
    set_str(o, "registry_node", j->pkg_registry_node);
    set_str(o, "network", j->pkg_network);
    json_object_set_new(o, "scripts", json_boolean(j->pkg_scripts));
    json_object_set_new(o, "limits", limits_json(&j->pkg_limits));
    json_object_set_new(o, "layer_max_bytes", json_integer((json_int_t)j->pkg_layer_max_bytes));
    json_object_set_new(o, "layer_max_files", json_integer((json_int_t)j->pkg_layer_max_files));
    return o;
}

static json_t *job_json(const al_job *j) {
    json_t *o = json_object();
    if (j->lang)
        set_str(o, "language", j->lang->name);
    set_str(o, "code", j->code);
    if (j->n_inputs)
        json_object_set_new(o, "inputs", strv(j->inputs, j->n_inputs));
    set_str(o, "out_dir", j->out_dir);
    json_object_set_new(o, "limits", limits_json(&j->limits));
    set_str(o, "image_dir", j->image_dir);
    set_str(o, "image_digest", j->image_digest);
    if (j->has_args)
        json_object_set_new(o, "args", strv(j->args, j->n_args));
    set_str(o, "stdin_path", j->stdin_path);
    set_str(o, "network", j->network);
    set_str(o, "skill_dir", j->skill_dir);
    set_str(o, "script", j->script);
    set_str(o, "work_in", j->work_in);
    set_str(o, "work_out", j->work_out);
    if (j->warm)
        json_object_set_new(o, "warm", json_true());
    if (j->zygote)
        json_object_set_new(o, "zygote", json_true());
    if (j->fork_fd >= 0)
        json_object_set_new(o, "fork_fd", json_integer(j->fork_fd));
    if (j->zygote_fd >= 0)
        json_object_set_new(o, "zygote_fd", json_integer(j->zygote_fd));
    set_str(o, "preload", j->preload);
    if (j->driver == AL_JOB_DOCKER)
        json_object_set_new(o, "driver", json_string("docker"));
    else if (j->driver == AL_JOB_E2B || j->driver == AL_JOB_DAYTONA)
        json_object_set_new(o, "driver", json_string(j->driver == AL_JOB_E2B ? "e2b" : "daytona"));
    else if (j->driver == AL_JOB_KUBERNETES)
        json_object_set_new(o, "driver", json_string("kubernetes"));
    set_str(o, "kube_config", j->kube_config);
    set_str(o, "kube_namespace", j->kube_namespace);
    set_str(o, "kube_image_ref", j->kube_image_ref);
    set_str(o, "kube_runtime_class", j->kube_runtime_class);
    set_str(o, "kube_seccomp", j->kube_seccomp);
    set_str(o, "kube_name", j->kube_name);
    set_str(o, "kube_node", j->kube_node);
    set_str(o, "kube_instance", j->kube_instance);
    if (j->kube_schedule_timeout_s)
        json_object_set_new(o, "kube_schedule_timeout_s", json_integer(j->kube_schedule_timeout_s));
    set_str(o, "remote_api_url", j->remote_api_url);
    set_str(o, "remote_sandbox_url", j->remote_sandbox_url);
    set_str(o, "remote_key", j->remote_key);
    set_str(o, "remote_template", j->remote_template);
    set_str(o, "remote_tag", j->remote_tag);
    set_str(o, "docker_socket", j->docker_socket);
    set_str(o, "docker_runtime", j->docker_runtime);
    if (j->docker_box.set)
        json_object_set_new(o, "docker_box", held_json(&j->docker_box, false));
    if (j->docker_uids.set)
        json_object_set_new(o, "docker_uids", uids_json(&j->docker_uids));
    if (j->docker_keep.set)
        json_object_set_new(o, "docker_keep", held_json(&j->docker_keep, true));
    if (al_job_has_packages(j))
        json_object_set_new(o, "packages", packages_json(j));
    return o;
}

int al_job_encode(const al_job *job, char **ret_text, size_t *ret_len, al_error *err) {
    json_t *o = job_json(job);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        return al_err(err, "provisioning", ENOMEM, "the run's job: out of memory");
    size_t n = strlen(text);
    if (n >= AL_JOB_MAX) {
        free(text);
        return al_err(err, "provisioning", E2BIG, "the run's job is %zu bytes, more than its helper takes (%u)", n,
                      AL_JOB_MAX);
    }
    *ret_text = text;
    *ret_len = n;
    return 0;
}

/* -- decode -------------------------------------------------------------- */

#define BAD(...) al_err(err, "job", EINVAL, __VA_ARGS__)

/* O's string K into *DST (absent: left NULL). */
static int get_str(json_t *o, const char *k, char **dst, al_error *err) {
    json_t *v = json_object_get(o, k);
    if (!v)
        return 0;
    if (!json_is_string(v))
        return BAD("%s: want a string", k);
    return al_job_set(dst, json_string_value(v)) < 0 ? al_err(err, "job", ENOMEM, "out of memory") : 0;
}

/* O's integer K, from MIN to MAX, into *RET (absent: left as it is). */
static int get_int(json_t *o, const char *k, json_int_t min, json_int_t max, json_int_t *ret, al_error *err) {
    json_t *v = json_object_get(o, k);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return BAD("%s: want an integer from %lld to %lld", k, (long long)min, (long long)max);
    *ret = json_integer_value(v);
    return 0;
}

static int get_bool(json_t *o, const char *k, bool *ret, al_error *err) {
    json_t *v = json_object_get(o, k);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return BAD("%s: want true or false", k);
    *ret = json_is_true(v);
    return 0;
}

static int get_strv(json_t *o, const char *k, al_job *j, int (*add)(al_job *, const char *), al_error *err) {
    json_t *a = json_object_get(o, k), *v;
    size_t i;
    if (!a)
        return 0;
    if (!json_is_array(a))
        return BAD("%s: want an array of strings", k);
    json_array_foreach(a, i, v) {
        if (!json_is_string(v))
            return BAD("%s: want an array of strings", k);
        int r = add(j, json_string_value(v));
        if (r < 0)
            return r == -E2BIG ? BAD("%s: more than %d", k,
                                     add == al_job_add_arg ? AL_JOB_ARGS_MAX
                                     : add == al_job_add_input ? AL_JOB_INPUTS_MAX : AL_JOB_PKG_MAX)
                               : al_err(err, "job", ENOMEM, "out of memory");
    }
    return 0;
}

static int keys_only(json_t *o, const char *where, const char *const *allowed, size_t n, al_error *err) {
    if (!json_is_object(o))
        return BAD("%s: want an object", where);
    const char *k = al_json_unknown_key(o, allowed, n);
    return k ? BAD("%s: unknown field %s", where, k) : 0;
}

static int limits_of(json_t *o, al_box_limits *l, al_error *err) {
    /* the wall clock as timeout_ms (what this writes) or timeout_s (what
     * the tests and older drivers write), not both */
    static const char *const keys[] = { "timeout_s", "memory_bytes", "cpu_millis", "pids", "output_bytes", "tmpfs_bytes",
                                        "timeout_ms" };
    json_int_t v[ELEMENTSOF(keys)] = { (json_int_t)(l->wall_ms / 1000), (json_int_t)l->memory_bytes,
                                       (json_int_t)l->cpu_millis, (json_int_t)l->pids,
                                       (json_int_t)l->output_bytes, (json_int_t)l->tmpfs_bytes, (json_int_t)l->wall_ms };
    int r = keys_only(o, "limits", keys, ELEMENTSOF(keys), err);
    if (r == 0 && json_object_get(o, "timeout_s") && json_object_get(o, "timeout_ms"))
        return BAD("limits: timeout_s or timeout_ms, not both");
    /* the wall clock in milliseconds must not wrap */
    for (size_t i = 0; i < ELEMENTSOF(keys) && r == 0; i++)
        r = get_int(o, keys[i], 0, i == 0 ? (json_int_t)(INT64_MAX / 1000) : INT64_MAX, &v[i], err);
    if (r < 0)
        return r;
    l->wall_ms = json_object_get(o, "timeout_s") ? (uint64_t)v[0] * 1000 : (uint64_t)v[6];
    l->memory_bytes = (uint64_t)v[1];
    l->cpu_millis = (uint64_t)v[2];
    l->pids = (uint64_t)v[3];
    l->output_bytes = (uint64_t)v[4];
    l->tmpfs_bytes = (uint64_t)v[5];
    return 0;
}

static int uids_of(json_t *o, const char *where, al_job_uids *u, al_error *err) {
    json_int_t holder = 0, uid = 0;
    json_t *lf = json_object_get(o, "lock_fds");
    if (!json_is_object(o) || !json_is_integer(json_object_get(o, "holder")) ||
        !json_is_integer(json_object_get(o, "uid")) || json_array_size(lf) != 2)
        return BAD("%s: want holder, uid and lock_fds", where);
    int r = get_int(o, "holder", 0, UINT32_MAX - 1, &holder, err);
    if (r == 0)
        r = get_int(o, "uid", 0, UINT32_MAX - 1, &uid, err);
    for (size_t k = 0; k < 2 && r == 0; k++) {
        json_t *fd = json_array_get(lf, k);
        if (!json_is_integer(fd) || json_integer_value(fd) < 0 || json_integer_value(fd) > INT_MAX)
            return BAD("%s: lock_fds: want two fds", where);
        u->lock_fds[k] = (int)json_integer_value(fd);
    }
    u->holder = (uid_t)holder;
    u->uid = (uid_t)uid;
    u->set = r == 0;
    return r;
}

static int held_of(json_t *o, const char *where, bool keep, al_job_held *h, al_error *err) {
    static const char *const box_keys[] = { "id", "image_id", "holder", "uid", "hold_until", "lock_fds" };
    /* a keeper's: id, holder, uid, lock_fds */
    static const char *const keep_keys[] = { "id", "holder", "uid", "lock_fds" };
    int r = keep ? keys_only(o, where, keep_keys, ELEMENTSOF(keep_keys), err)
                 : keys_only(o, where, box_keys, ELEMENTSOF(box_keys), err);
    if (r < 0 || (r = uids_of(o, where, &h->uids, err)) < 0)
        return r;
    json_t *id = json_object_get(o, "id"), *image_id = json_object_get(o, "image_id");
    if (!json_is_string(id) || strlen(json_string_value(id)) >= sizeof h->id ||
        (!keep && (!json_is_string(image_id) || strlen(json_string_value(image_id)) >= sizeof h->image_id)))
        return BAD("%s: want an id (and image_id) of under 80 bytes", where);
    snprintf(h->id, sizeof h->id, "%s", json_string_value(id));
    if (!keep) {
        snprintf(h->image_id, sizeof h->image_id, "%s", json_string_value(image_id));
        json_int_t until = 0;
        if ((r = get_int(o, "hold_until", INT64_MIN, INT64_MAX, &until, err)) < 0)
            return r;
        h->hold_until_s = until;
    }
    h->set = true;
    return 0;
}

/* S is N bytes at most, each of SET */
static bool only(const char *s, size_t max, const char *set) {
    size_t n = s ? strlen(s) : 0;
    return n && n <= max && strspn(s, set) == n;
}

/* the kubernetes fields within their caps: names as Kubernetes takes them,
 * paths, an image pinned by digest */
static int kube_of(const al_job *j, al_error *err) {
    static const char dns[] = "abcdefghijklmnopqrstuvwxyz0123456789-.", hex[] = "0123456789abcdef";
    if (j->kube_config && (strlen(j->kube_config) >= 4096 || j->kube_config[0] != '/'))
        return BAD("kube_config: want an absolute path");
    if (j->kube_namespace && !only(j->kube_namespace, 63, dns))
        return BAD("kube_namespace: want a DNS label");
    if (j->kube_runtime_class && !only(j->kube_runtime_class, 253, dns))
        return BAD("kube_runtime_class: want a DNS name");
    if (j->kube_name && (!only(j->kube_name, 63, dns) || strncmp(j->kube_name, "airlock-", 8) != 0))
        return BAD("kube_name: want airlock-<hex>");
    if ((j->kube_node && !only(j->kube_node, 12, hex)) || (j->kube_instance && !only(j->kube_instance, 12, hex)))
        return BAD("kube_node, kube_instance: want 12 hex digits");
    const char *at = j->kube_image_ref ? strstr(j->kube_image_ref, "@sha256:") : NULL;
    if (j->kube_image_ref && (strlen(j->kube_image_ref) >= 512 || !at || strlen(at + 8) != 64 ||
                              strspn(at + 8, hex) != 64))
        return BAD("kube_image_ref: want REPO@sha256:<64 hex>");
    if (j->kube_seccomp && strcmp(j->kube_seccomp, "runtime-default") != 0 &&
        (strncmp(j->kube_seccomp, "localhost:", 10) != 0 || strlen(j->kube_seccomp) > 4096 ||
         !j->kube_seccomp[10]))
        return BAD("kube_seccomp: want runtime-default or localhost:PATH");
    if (j->driver == AL_JOB_KUBERNETES && (!j->kube_name || !j->kube_image_ref || !j->kube_node || !j->kube_instance))
        return BAD("a kubernetes job needs kube_name, kube_image_ref, kube_node and kube_instance");
    return 0;
}

/* "packages": its specs (at most AL_JOB_PKG_MAX each, of
 * AL_JOB_PKG_SPEC_MAX bytes: what they are is the helper's to check, at
 * its use), where layers go, the installer, the registries, the install
 * box's policy and limits, the layer's caps */
static int packages_of(json_t *o, al_job *j, al_error *err) {
    static const char *const keys[] = { "python", "node", "layers_dir", "installer_dir", "index_python",
                                        "registry_node", "network", "scripts", "limits", "layer_max_bytes",
                                        "layer_max_files" };
    int r = keys_only(o, "packages", keys, ELEMENTSOF(keys), err);
    if (r == 0)
        r = get_strv(o, "python", j, al_job_add_pkg_python, err);
    if (r == 0)
        r = get_strv(o, "node", j, al_job_add_pkg_node, err);
    for (size_t i = 0; i < j->n_pkg_python + j->n_pkg_node && r == 0; i++) {
        const char *spec = i < j->n_pkg_python ? j->pkg_python[i] : j->pkg_node[i - j->n_pkg_python];
        if (!spec[0] || strlen(spec) > AL_JOB_PKG_SPEC_MAX)
            r = BAD("packages: a spec of 1 to %d bytes", AL_JOB_PKG_SPEC_MAX);
    }
    if (r == 0 && !al_job_has_packages(j))
        r = BAD("packages: want python or node specs");
    struct { const char *k; char **dst; } s[] = {
        { "layers_dir", &j->pkg_layers_dir },     { "installer_dir", &j->pkg_installer_dir },
        { "index_python", &j->pkg_index_python }, { "registry_node", &j->pkg_registry_node },
        { "network", &j->pkg_network },
    };
    for (size_t i = 0; i < ELEMENTSOF(s) && r == 0; i++)
        r = get_str(o, s[i].k, s[i].dst, err);
    if (r == 0)
        r = get_bool(o, "scripts", &j->pkg_scripts, err);
    json_t *v;
    if (r == 0 && (v = json_object_get(o, "limits")))
        r = limits_of(v, &j->pkg_limits, err);
    json_int_t mb = 0, mf = 0;
    if (r == 0)
        r = get_int(o, "layer_max_bytes", 0, INT64_MAX, &mb, err);
    if (r == 0)
        r = get_int(o, "layer_max_files", 0, INT64_MAX, &mf, err);
    j->pkg_layer_max_bytes = (uint64_t)mb;
    j->pkg_layer_max_files = (uint64_t)mf;
    return r;
}

static int decode_obj(json_t *o, al_job *j, al_error *err) {
    static const char *const keys[] = {
        "language", "code", "inputs", "out_dir", "limits", "image_dir", "image_digest", "args", "stdin_path",
        "network", "skill_dir", "script", "warm", "zygote", "fork_fd", "zygote_fd", "preload", "driver",
        "docker_socket", "docker_runtime", "docker_box", "docker_uids", "docker_keep", "remote_api_url",
        "remote_sandbox_url", "remote_key", "remote_template", "remote_tag", "work_in", "work_out",
        "kube_config", "kube_namespace", "kube_image_ref", "kube_runtime_class", "kube_seccomp", "kube_name",
        "kube_node", "kube_instance", "kube_schedule_timeout_s", "packages",
    };
    int r = keys_only(o, "the job", keys, ELEMENTSOF(keys), err);
    json_t *lang = json_object_get(o, "language"), *drv = json_object_get(o, "driver"), *v;
    if (r == 0 && lang && (!json_is_string(lang) || !(j->lang = al_lang_by_name(json_string_value(lang)))))
        r = BAD("language: not one airlock runs");
    if (r == 0 && drv) {
        const char *d = json_string_value(drv);
        if (d && strcmp(d, "docker") == 0)
            j->driver = AL_JOB_DOCKER;
        else if (d && strcmp(d, "e2b") == 0)
            j->driver = AL_JOB_E2B;
        else if (d && strcmp(d, "daytona") == 0)
            j->driver = AL_JOB_DAYTONA;
        else if (d && strcmp(d, "kubernetes") == 0)
            j->driver = AL_JOB_KUBERNETES;
        else if (!d || strcmp(d, "native") != 0)
            r = BAD("unknown driver");
    }
    struct { const char *k; char **dst; } s[] = {
        { "code", &j->code },           { "out_dir", &j->out_dir },       { "image_dir", &j->image_dir },
        { "image_digest", &j->image_digest }, { "stdin_path", &j->stdin_path }, { "network", &j->network },
        { "skill_dir", &j->skill_dir }, { "script", &j->script },         { "preload", &j->preload },
        { "docker_socket", &j->docker_socket }, { "docker_runtime", &j->docker_runtime },
        { "remote_api_url", &j->remote_api_url }, { "remote_sandbox_url", &j->remote_sandbox_url },
        { "remote_key", &j->remote_key }, { "remote_template", &j->remote_template },
        { "remote_tag", &j->remote_tag },
        { "work_in", &j->work_in },     { "work_out", &j->work_out },
        { "kube_config", &j->kube_config }, { "kube_namespace", &j->kube_namespace },
        { "kube_image_ref", &j->kube_image_ref }, { "kube_runtime_class", &j->kube_runtime_class },
        { "kube_seccomp", &j->kube_seccomp }, { "kube_name", &j->kube_name },
        { "kube_node", &j->kube_node }, { "kube_instance", &j->kube_instance },
    };
    for (size_t i = 0; i < ELEMENTSOF(s) && r == 0; i++)
        r = get_str(o, s[i].k, s[i].dst, err);
    if (r == 0)
        r = kube_of(j, err);
    json_int_t sched = 0;
    if (r == 0)
        r = get_int(o, "kube_schedule_timeout_s", 0, 86400, &sched, err);
    j->kube_schedule_timeout_s = (int)sched;
    if (r == 0)
        r = get_strv(o, "inputs", j, al_job_add_input, err);
    if (r == 0 && (v = json_object_get(o, "args"))) {
        j->has_args = true;
        r = get_strv(o, "args", j, al_job_add_arg, err);
    }
    if (r == 0 && (v = json_object_get(o, "limits")))
        r = limits_of(v, &j->limits, err);
    json_int_t fork_fd = -1, zygote_fd = -1;
    if (r == 0)
        r = get_int(o, "fork_fd", -1, INT_MAX, &fork_fd, err);
    if (r == 0)
        r = get_int(o, "zygote_fd", -1, INT_MAX, &zygote_fd, err);
    j->fork_fd = (int)fork_fd;
    j->zygote_fd = (int)zygote_fd;
    if (r == 0)
        r = get_bool(o, "warm", &j->warm, err);
    if (r == 0)
        r = get_bool(o, "zygote", &j->zygote, err);
    if (r == 0 && (v = json_object_get(o, "docker_box")))
        r = held_of(v, "docker_box", false, &j->docker_box, err);
    if (r == 0 && (v = json_object_get(o, "docker_keep")))
        r = held_of(v, "docker_keep", true, &j->docker_keep, err);
    if (r == 0 && (v = json_object_get(o, "packages")))
        r = packages_of(v, j, err);
    if (r == 0 && (v = json_object_get(o, "docker_uids"))) {
        static const char *const uk[] = { "holder", "uid", "lock_fds" };
        if ((r = keys_only(v, "docker_uids", uk, ELEMENTSOF(uk), err)) == 0)
            r = uids_of(v, "docker_uids", &j->docker_uids, err);
    }
    /* a working directory flows in and back, or not at all: one without
     * the other would lose what the run wrote, or what it was given */
    if (r == 0 && !j->work_in != !j->work_out)
        r = BAD("work_in and work_out go together");
    return r;
}

int al_job_decode(const char *text, size_t len, al_job *ret, al_error *err) {
    al_job_init(ret);
    if (len >= AL_JOB_MAX)
        return BAD("job larger than AL_JOB_MAX (16 MiB)");
    json_error_t jerr;
    json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return BAD("the job is not JSON");
    int r = decode_obj(o, ret, err);
    json_decref(o);
    return r;
}
