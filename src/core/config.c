/* The service's configuration: defaults, `key = value` files, and one
 * setting at a time (--config, the command line and AIRLOCK_* all end here). */
#include <stddef.h>
#include <string.h>

#include "../drivers/install.h"
#include "../image/image.h"
#include "service.h"
#include "service_int.h"

void al_service_images_dir(const al_service_config *c, char *buf, size_t len) {
    if (c->images_dir[0])
        snprintf(buf, len, "%s", c->images_dir);
    else
        al_image_dir(c->state_dir, buf, len);
}

void al_service_config_default(al_service_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->port = 8080;
    c->listen_fd = -1;
    /* a rolling restart's runs finish rather than end (operations.md) */
    c->stop_grace_s = 30;
    snprintf(c->state_dir, sizeof c->state_dir, "/var/lib/airlock");
    snprintf(c->driver, sizeof c->driver, "native");
    snprintf(c->store, sizeof c->store, "sqlite");
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    c->max_concurrent = n > 0 ? (int)n * 2 : 4;
    c->per_person = 3;
    c->node_lease_s = 10;
    c->queue_max = 1000;
    /* no one person or organisation fills the queue for everyone else */
    c->queue_per_person = 100;
    c->queue_per_org = 300;
    c->max_timeout_s = 120;
    c->body_max = 8u << 20;
    c->code_max = 1u << 20;
    c->run_sweep_s = 60;
    c->files_max = 64;
    /* A quarter of the slots per address: one client (or one NAT) cannot take
     * them all, and four busy addresses still can; behind a reverse proxy
     * every client has the proxy's address, so raise it there. A person's
     * long-held requests are capped per person (below), so the people behind
     * one address are not bound by what one of them holds. */
    c->max_connections = 512;
    c->connections_per_address = 128;
    c->connection_timeout_s = 30;
    c->followers_per_person = 16;
    c->waits_per_person = 16;
    c->docker_pool = 2;
    /* on: sized by demand, so a host that runs no Python or Node keeps none */
    c->warm_pool = 2;
    c->warm_pool_memory_mb = 1024;
    c->warm_fork = true;
    c->kubernetes_smoke = true;
    snprintf(c->warm_preload, sizeof c->warm_preload, "%s", "numpy,pandas,matplotlib,matplotlib.pyplot,PIL");
    /* four bodies at the cap: one person cannot make the daemon hold a
     * body on every connection of theirs */
    c->body_bytes_per_person = 4 * c->body_max;
    c->audit_checkpoint_s = 60;
    /* a client that trickles its request a byte at a time holds a slot for
     * at most this (connection_timeout_s bounds only the silence between
     * bytes); a quarter of the slots wait for requests whose key is valid */
    c->request_timeout_s = 30;
    c->connections_reserved = -1; /* a quarter of max_connections, as it is set */
    c->operator_access = AL_OPERATOR_LOOPBACK;
    /* packages: off until an operator or a workspace's admin turns them on */
    c->package_install_scripts = true;
    snprintf(c->package_index_python, sizeof c->package_index_python, "%s", AL_INSTALL_INDEX_PYTHON_DEFAULT);
    snprintf(c->package_registry_node, sizeof c->package_registry_node, "%s", AL_INSTALL_REGISTRY_NODE_DEFAULT);
    c->package_install_timeout_s = AL_INSTALL_TIMEOUT_S_DEFAULT;
    c->package_install_memory_mb = AL_INSTALL_MEMORY_MB_DEFAULT;
    c->package_layer_max_mb = AL_INSTALL_LAYER_MAX_MB_DEFAULT;
    c->package_layer_max_files = AL_INSTALL_LAYER_MAX_FILES_DEFAULT;
    c->package_layer_retention_days = 30;
    c->package_layers_max_mb = 20480;
}

/* Whether V is module names separated by commas: each of dotted parts
 * that are identifiers (letters, digits, "_"; not starting with a digit),
 * a part under 64 characters (the pool's scan of a run's code matches the
 * first part as a word: an empty one would match everything). Empty is no
 * module. */
static bool module_list(const char *v) {
    if (!*v)
        return true;
    for (const char *p = v;;) {
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        if (n == 0 || n >= 64 || (*p >= '0' && *p <= '9'))
            return false;
        p += n;
        if (*p == '\0')
            return true;
        if (*p != '.' && *p != ',')
            return false;
        p++;
    }
}

static int set_int(int *field, const char *v, int min, int max, const char *key, al_error *err) {
    uint64_t x;
    if (al_parse_u64(v, &x) < 0 || x < (uint64_t)min || x > (uint64_t)max)
        return al_err(err, "config", EINVAL, "%s = %s: want a number from %d to %d", key, v, min, max);
    *field = (int)x;
    return 0;
}

static int set_bool(bool *field, const char *v, const char *key, al_error *err) {
    if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0)
        return al_err(err, "config", EINVAL, "%s = %s: want true or false", key, v);
    *field = strcmp(v, "true") == 0;
    return 0;
}

/* The settings that are one bounded integer each. */
static const struct {
    const char *key;
    size_t offset;
    int min, max;
} int_keys[] = {
    { "max_concurrent", offsetof(al_service_config, max_concurrent), 1, 1024 },
    { "node_lease_s", offsetof(al_service_config, node_lease_s), 2, 600 },
    { "run_sweep_s", offsetof(al_service_config, run_sweep_s), 1, 86400 },
    { "per_person_concurrency", offsetof(al_service_config, per_person), 1, 1024 },
    { "queue_max", offsetof(al_service_config, queue_max), 1, 100000 },
    { "queue_per_person", offsetof(al_service_config, queue_per_person), 1, 100000 },
    { "queue_per_org", offsetof(al_service_config, queue_per_org), 1, 100000 },
    { "max_timeout_s", offsetof(al_service_config, max_timeout_s), 1, 3600 },
    { "max_connections", offsetof(al_service_config, max_connections), 1, 16384 },
    { "connections_per_address", offsetof(al_service_config, connections_per_address), 1, 16384 },
    { "connection_timeout_s", offsetof(al_service_config, connection_timeout_s), 1, 3600 },
    { "followers_per_person", offsetof(al_service_config, followers_per_person), 1, 16384 },
    { "waits_per_person", offsetof(al_service_config, waits_per_person), 1, 16384 },
    { "stop_grace_s", offsetof(al_service_config, stop_grace_s), 0, 3600 },
    { "audit_checkpoint_s", offsetof(al_service_config, audit_checkpoint_s), 1, 86400 },
    { "request_timeout_s", offsetof(al_service_config, request_timeout_s), 1, 3600 },
    { "connections_reserved", offsetof(al_service_config, connections_reserved), 0, 16384 },
    { "package_install_timeout_s", offsetof(al_service_config, package_install_timeout_s), 1, 3600 },
    { "package_install_memory_mb", offsetof(al_service_config, package_install_memory_mb), 64, 1 << 16 },
    { "package_layer_max_mb", offsetof(al_service_config, package_layer_max_mb), 1, 1 << 16 },
    { "package_layer_max_files", offsetof(al_service_config, package_layer_max_files), 1, 10000000 },
    { "package_layer_retention_days", offsetof(al_service_config, package_layer_retention_days), 1, 3650 },
    { "package_layers_max_mb", offsetof(al_service_config, package_layers_max_mb), 1, 1 << 30 },
};

/* the package installs' keys that are no bounded integer: 0 or -errno
 * when KEY is one, 1 when it is not. The URLs' hosts are held to
 * package_registries where the proxy reads both (at start). */
static int package_key(al_service_config *c, const char *key, const char *value, al_error *err) {
    if (strcmp(key, "package_installs") == 0) {
        if (strcmp(value, "off") != 0 && strcmp(value, "thread") != 0)
            return al_err(err, "config", EINVAL, "package_installs = %s: want off or thread", value);
        c->package_installs = strcmp(value, "thread") == 0;
        return 0;
    }
    if (strcmp(key, "package_install_scripts") == 0) {
        if (strcmp(value, "refuse") != 0 && strcmp(value, "box") != 0)
            return al_err(err, "config", EINVAL, "package_install_scripts = %s: want refuse or box", value);
        c->package_install_scripts = strcmp(value, "box") == 0;
        return 0;
    }
    if (strcmp(key, "package_registries") == 0) {
        /* its form is the proxy's to read (at start, with the URLs) */
        if (strlen(value) >= sizeof c->package_registries || strpbrk(value, "\"'\\`"))
            return al_err(err, "config", EINVAL, "package_registries = %s: want HOST or HOST=CIDR[+CIDR...], comma "
                          "separated, at most %zu bytes", value, sizeof c->package_registries - 1);
        snprintf(c->package_registries, sizeof c->package_registries, "%s", value);
        return 0;
    }
    char *dst = strcmp(key, "package_index_python") == 0    ? c->package_index_python
                : strcmp(key, "package_registry_node") == 0 ? c->package_registry_node
                                                            : NULL;
    if (!dst)
        return 1;
    /* an address handed to pip and npm as one argument: no space, quote or
     * control character, and http(s) only */
    bool ok = (strncmp(value, "https://", 8) == 0 || strncmp(value, "http://", 7) == 0) &&
              strlen(value) < sizeof c->package_index_python && strlen(value) > 8;
    for (const char *v = value; ok && *v; v++)
        ok = *v > 0x20 && *v < 0x7f && !strchr("\"'<>\\`", *v);
    if (!ok)
        return al_err(err, "config", EINVAL, "%s = %s: want an http(s) URL of at most %zu bytes", key, value,
                      sizeof c->package_index_python - 1);
    snprintf(dst, sizeof c->package_index_python, "%s", value);
    return 0;
}

/* the docker and kubernetes drivers' keys (drivers/kubernetes.c checks
 * its own whole): 0 or -errno when KEY is one, 1 when it is not */
static int driver_key(al_service_config *c, const char *key, const char *value, al_error *err) {
    if (strcmp(key, "docker_socket") == 0) {
        if (value[0] != '/' || strlen(value) >= sizeof c->docker_socket)
            return al_err(err, "config", EINVAL, "docker_socket = %s: want the absolute path of the daemon's socket",
                          value);
        snprintf(c->docker_socket, sizeof c->docker_socket, "%s", value);
        return 0;
    }
    if (strcmp(key, "kubernetes_pool") == 0) {
        /* no warm pods (measured, docs/kubernetes.md "Speed"): a pool asked
         * for is refused, not ignored */
        int r = set_int(&c->kubernetes_pool, value, 0, 16, key, err);
        if (r == 0 && c->kubernetes_pool > 0)
            return al_err(err, "config", EOPNOTSUPP,
                          "kubernetes_pool = %s: the kubernetes driver keeps no warm pods (want 0): a pod made "
                          "before its run could only receive it through a volume, which starts it later than a "
                          "new pod (docs/kubernetes.md, Speed)",
                          value);
        return r;
    }
    if (strcmp(key, "kubernetes_schedule_timeout_s") == 0)
        return set_int(&c->kubernetes_schedule_timeout_s, value, 1, 3600, key, err);
    if (strcmp(key, "kubernetes_smoke") == 0)
        return set_bool(&c->kubernetes_smoke, value, key, err);
    static const char dns[] = "abcdefghijklmnopqrstuvwxyz0123456789-.";
    struct { const char *k; char *dst; size_t n; const char *set; bool path; } kube[] = {
        { "kubeconfig", c->kubeconfig, sizeof c->kubeconfig, NULL, true },
        { "kubernetes_namespace", c->kubernetes_namespace, sizeof c->kubernetes_namespace, dns, false },
        { "kubernetes_registry", c->kubernetes_registry, sizeof c->kubernetes_registry, NULL, false },
        { "kubernetes_runtime_class", c->kubernetes_runtime_class, sizeof c->kubernetes_runtime_class, dns, false },
        { "kubernetes_seccomp", c->kubernetes_seccomp, sizeof c->kubernetes_seccomp, NULL, false },
    };
    for (size_t i = 0; i < ELEMENTSOF(kube); i++) {
        if (strcmp(key, kube[i].k) != 0)
            continue;
        if (strlen(value) >= kube[i].n || (kube[i].path && value[0] != '/') ||
            (kube[i].set && strspn(value, kube[i].set) != strlen(value)) || strpbrk(value, " \t\r\n"))
            return al_err(err, "config", EINVAL, "%s = %s: want %s", key, value,
                          kube[i].path ? "an absolute path" : kube[i].set ? "a DNS name" : "a shorter value");
        snprintf(kube[i].dst, kube[i].n, "%s", value);
        return 0;
    }
    return 1;
}

int al_service_config_set(al_service_config *c, const char *key, const char *value, al_error *err) {
    for (size_t i = 0; i < ELEMENTSOF(int_keys); i++)
        if (strcmp(key, int_keys[i].key) == 0)
            return set_int((int *)((char *)c + int_keys[i].offset), value, int_keys[i].min, int_keys[i].max, key, err);
    if (strcmp(key, "listen") == 0) {
        const char *colon = strrchr(value, ':');
        if (!colon || colon == value || (size_t)(colon - value) >= sizeof c->listen_host)
            return al_err(err, "config", EINVAL, "listen = %s: want ADDR:PORT", value);
        snprintf(c->listen_host, sizeof c->listen_host, "%.*s", (int)(colon - value), value);
        return set_int(&c->port, colon + 1, 1, 65535, key, err);
    }
    if (strcmp(key, "listen_fd") == 0)
        /* a socket bound and listening already, given by whoever started us
         * (airlock mcp --local): no one can take its port in between */
        return set_int(&c->listen_fd, value, 0, 65535, key, err);
    if (strcmp(key, "state") == 0) {
        if (value[0] != '/' && value[0] != '.')
            return al_err(err, "config", EINVAL, "state = %s: want a path", value);
        snprintf(c->state_dir, sizeof c->state_dir, "%s", value);
        return 0;
    }
    if (strcmp(key, "store") == 0) {
        char where[sizeof c->store];
        int r = al_store_locate(value, "", where, sizeof where, err);
        if (r < 0)
            return r;
        snprintf(c->store, sizeof c->store, "%s", value);
        return 0;
    }
    if (strcmp(key, "driver") == 0) {
        if (!al_driver_by_name(value))
            return al_err(err, "config", EINVAL, "driver = %s: want native, docker, e2b, daytona, kubernetes or disabled", value);
        snprintf(c->driver, sizeof c->driver, "%s", value);
        return 0;
    }
    {
        /* the remote drivers' (drivers/remote.c checks the URLs' form) */
        struct { const char *k; char *dst; size_t n; bool path; } remote[] = {
            { "e2b_api_url", c->e2b_api_url, sizeof c->e2b_api_url, false },
            { "e2b_sandbox_url", c->e2b_sandbox_url, sizeof c->e2b_sandbox_url, false },
            { "e2b_api_key_file", c->e2b_api_key_file, sizeof c->e2b_api_key_file, true },
            { "e2b_template", c->e2b_template, sizeof c->e2b_template, false },
            { "daytona_api_url", c->daytona_api_url, sizeof c->daytona_api_url, false },
            { "daytona_api_key_file", c->daytona_api_key_file, sizeof c->daytona_api_key_file, true },
            { "daytona_target", c->daytona_target, sizeof c->daytona_target, false },
        };
        for (size_t i = 0; i < ELEMENTSOF(remote); i++) {
            if (strcmp(key, remote[i].k) != 0)
                continue;
            if (strlen(value) >= remote[i].n || (remote[i].path && value[0] != '/'))
                return al_err(err, "config", EINVAL, "%s: want %s", key,
                              remote[i].path ? "an absolute path" : "a shorter value");
            snprintf(remote[i].dst, remote[i].n, "%s", value);
            return 0;
        }
    }
    int dr = driver_key(c, key, value, err);
    if (dr <= 0)
        return dr;
    if ((dr = package_key(c, key, value, err)) <= 0)
        return dr;
    if (strcmp(key, "public_url") == 0) {
        /* the console's address as people reach it (through a proxy that
         * terminates TLS, for https) */
        size_t n = strlen(value);
        if ((strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0) || n >= sizeof c->public_url ||
            strpbrk(value, "#? \t\"'<>"))
            return al_err(err, "config", EINVAL, "public_url = %s: want http(s)://HOST[:PORT][/PATH], no query or fragment",
                          value);
        snprintf(c->public_url, sizeof c->public_url, "%s", value);
        return 0;
    }
    if (strcmp(key, "runtime") == 0) {
        if (strcmp(value, "runc") != 0 && strcmp(value, "runsc") != 0)
            return al_err(err, "config", EINVAL, "runtime = %s: want runc or runsc (the docker driver's)", value);
        snprintf(c->engine_runtime, sizeof c->engine_runtime, "%s", value);
        return 0;
    }
    if (strcmp(key, "docker_pool") == 0)
        return set_int(&c->docker_pool, value, 0, 16, key, err);
    if (strcmp(key, "warm_pool") == 0)
        return set_int(&c->warm_pool, value, 0, 8, key, err);
    if (strcmp(key, "warm_fork") == 0)
        return set_bool(&c->warm_fork, value, key, err);
    if (strcmp(key, "listen_shared") == 0)
        /* off: a second service on the same address is refused, not handed
         * half of the first one's connections */
        return set_bool(&c->listen_shared, value, key, err);
    if (strcmp(key, "access_log") == 0)
        return set_bool(&c->access_log, value, key, err);
    if (strcmp(key, "warm_pool_memory_mb") == 0)
        return set_int(&c->warm_pool_memory_mb, value, 0, 1 << 20, key, err);
    if (strcmp(key, "warm_preload") == 0) {
        if (strlen(value) >= sizeof c->warm_preload || !module_list(value))
            return al_err(err, "config", EINVAL, "warm_preload = %s: want module names (a, a.b) separated by commas",
                          value);
        snprintf(c->warm_preload, sizeof c->warm_preload, "%s", value);
        return 0;
    }
    if (strcmp(key, "storage_quota_mb") == 0) {
        int mb = 0;
        int r = set_int(&mb, value, 1, 1 << 30, key, err);
        if (r == 0)
            c->storage_quota_bytes = (uint64_t)mb << 20;
        return r;
    }
    if (strcmp(key, "body_mb_per_person") == 0) {
        int mb = 0;
        int r = set_int(&mb, value, 1, 1 << 20, key, err);
        if (r == 0)
            c->body_bytes_per_person = (uint64_t)mb << 20;
        return r;
    }
    if (strcmp(key, "images") == 0) {
        if (value[0] != '/' && value[0] != '.' && value[0] != '\0')
            return al_err(err, "config", EINVAL, "images = %s: want a path", value);
        snprintf(c->images_dir, sizeof c->images_dir, "%s", value);
        return 0;
    }
    if (strcmp(key, "operator_access") == 0) {
        static const char *const names[_AL_OPERATOR_ACCESS_MAX] = { "loopback", "token", "open" };
        for (int i = 0; i < _AL_OPERATOR_ACCESS_MAX; i++)
            if (strcmp(value, names[i]) == 0) {
                c->operator_access = (al_operator_access)i;
                return 0;
            }
        return al_err(err, "config", EINVAL, "operator_access = %s: want loopback, token or open", value);
    }
    if (strcmp(key, "operator_token_file") == 0) {
        if (value[0] != '/' || strlen(value) >= sizeof c->operator_token_file)
            return al_err(err, "config", EINVAL, "operator_token_file = %s: want an absolute path", value);
        snprintf(c->operator_token_file, sizeof c->operator_token_file, "%s", value);
        return 0;
    }
    if (strcmp(key, "skills_dir") == 0) {
        if (value[0] != '/' && value[0] != '.' && value[0] != '\0')
            return al_err(err, "config", EINVAL, "skills_dir = %s: want a path", value);
        snprintf(c->skills_dir, sizeof c->skills_dir, "%s", value);
        return 0;
    }
    if (strcmp(key, "audit_key") == 0) {
        if (value[0] != '/' && value[0] != '.' && value[0] != '\0')
            return al_err(err, "config", EINVAL, "audit_key = %s: want a path", value);
        snprintf(c->audit_key, sizeof c->audit_key, "%s", value);
        return 0;
    }
    return al_err(err, "config", EINVAL, "unknown setting \"%s\"", key);
}

int al_service_config_load(al_service_config *c, const char *path, al_error *err) {
    _cleanup_fclose_ FILE *f = fopen(path, "re");
    if (!f)
        return al_err(err, "config", errno, "open %s: %m", path);
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line + strspn(line, " \t");
        if (*p == '#' || *p == '\n' || *p == '\0')
            continue;
        char *eq = strchr(p, '=');
        if (!eq)
            return al_err(err, "config", EINVAL, "%s:%d: want key = value", path, lineno);
        char *k_end = eq;
        while (k_end > p && (k_end[-1] == ' ' || k_end[-1] == '\t'))
            k_end--;
        *k_end = '\0';
        char *v = eq + 1 + strspn(eq + 1, " \t");
        v[strcspn(v, "\r\n")] = '\0';
        for (char *e = v + strlen(v); e > v && (e[-1] == ' ' || e[-1] == '\t');)
            *--e = '\0';
        int r = al_service_config_set(c, p, v, err);
        if (r < 0)
            return r;
    }
    /* a store smaller than one layer would lose each layer after its run */
    if (c->package_layers_max_mb < c->package_layer_max_mb)
        return al_err(err, "config", EINVAL, "%s: package_layers_max_mb = %d is less than one layer "
                      "(package_layer_max_mb = %d)", path, c->package_layers_max_mb, c->package_layer_max_mb);
    return 0;
}

