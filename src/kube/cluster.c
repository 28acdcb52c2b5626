/* Where the API server is and who we are to it (kube.h,
 * al_kube_cluster_load): a kubeconfig's current context, read with
 * libyaml as kubectl reads it (relative paths from the kubeconfig's own
 * directory, *-data fields base64), or the pod's service account. We never
 * run another program: exec and auth-provider plugins are refused, said
 * so. Every file read is bounded. */
#include "cluster.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "b64.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define PEM_MAX (1u << 20)
#define TOKEN_MAX (64u << 10)

void al_kube_cluster_free(al_kube_cluster *c) {
    free(c->token);
    free(c->ca_pem);
    free(c->cert_pem);
    if (c->key_pem) {
        explicit_bzero(c->key_pem, strlen(c->key_pem));
        free(c->key_pem);
    }
    c->token = c->ca_pem = c->cert_pem = c->key_pem = NULL;
}

/* a token as read from its file: trailing whitespace is not part of it */
static int token_text(char *t, al_error *err) {
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == '\r' || t[n - 1] == ' ' || t[n - 1] == '\t'))
        t[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] > 0x7e)
            return al_err(err, "kubeconfig", EINVAL, "the bearer token holds a character a header cannot carry");
    if (!n)
        return al_err(err, "kubeconfig", EINVAL, "the bearer token is empty");
    return 0;
}

int al_kube_token_reread(al_kube_cluster *c, al_error *err) {
    if (!c->token_file[0])
        return 0;
    char *t = NULL;
    int r = al_read_regular(AT_FDCWD, c->token_file, TOKEN_MAX, false, &t, NULL);
    if (r < 0)
        return al_err(err, "kubeconfig", -r, "read the token file %s: %s", c->token_file,
                      r == -EFBIG ? "over 64 KiB" : r == -EINVAL ? "not a regular file" : strerror(-r));
    if ((r = token_text(t, err)) < 0) {
        free(t);
        return r;
    }
    free(c->token);
    c->token = t;
    return 0;
}

/* a namespace's name: a DNS-1123 label */
bool al_kube_valid_namespace(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < 64 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n && s[0] != '-' &&
           s[n - 1] != '-';
}

/* whether URL's host is this machine's loopback (127.0.0.0/8, ::1, localhost) */
bool al_kube_loopback_url(const char *url) {
    const char *h = strstr(url, "://");
    if (!h)
        return false;
    h += 3;
    size_t n = strcspn(h, "/?#");
    char host[256];
    if (n >= sizeof host)
        return false;
    memcpy(host, h, n);
    host[n] = '\0';
    if (strchr(host, '@'))
        return false;
    if (host[0] == '[')
        return strncmp(host, "[::1]", 5) == 0 && (host[5] == '\0' || host[5] == ':');
    char *colon = strchr(host, ':');
    if (colon)
        *colon = '\0';
    if (strcmp(host, "localhost") == 0)
        return true;
    unsigned a, b, c, d;
    char extra;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

static int set_server(al_kube_cluster *c, const char *server, al_error *err) {
    size_t n = strlen(server);
    while (n && server[n - 1] == '/')
        n--;
    if (n >= sizeof c->server)
        return al_err(err, "kubeconfig", ENAMETOOLONG, "the cluster's server is over %zu bytes", sizeof c->server);
    bool https = strncmp(server, "https://", 8) == 0, http = strncmp(server, "http://", 7) == 0;
    size_t host = https ? 8 : 7;
    /* a host after the scheme (a path may follow: a proxy's prefix), no
     * user in it, no query or fragment to be glued to our paths */
    if ((!https && !http) || n <= host || server[host] == '/' || server[host] == ':' ||
        memchr(server + host, '@', n - host) || memchr(server, '?', n) || memchr(server, '#', n))
        return al_err(err, "kubeconfig", EINVAL, "the cluster's server \"%.200s\" is not an https://HOST[:PORT] URL",
                      server);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)server[i] <= 0x20 || (unsigned char)server[i] >= 0x7f)
            return al_err(err, "kubeconfig", EINVAL, "the cluster's server holds a space or a control character");
    memcpy(c->server, server, n);
    c->server[n] = '\0';
    /* a token in clear text goes nowhere but this machine */
    if (http && !al_kube_loopback_url(c->server))
        return al_err(err, "kubeconfig", EINVAL, "the cluster's server %.200s is plain http:// and not loopback: "
                      "refused (credentials would cross the network in clear)", c->server);
    return 0;
}

/* ---- the kubeconfig's YAML */

typedef struct kc {
    yaml_document_t doc;
    char dir[4096];               /* the kubeconfig's directory: relative paths are from it */
    bool files;                   /* false (the fuzz target): a file named is refused, not read */
} kc;

static yaml_node_t *get(kc *k, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(&k->doc, p->key);
        if (kn && kn->type == YAML_SCALAR_NODE && strlen((char *)kn->data.scalar.value) == kn->data.scalar.length &&
            strcmp((char *)kn->data.scalar.value, key) == 0)
            return yaml_document_get_node(&k->doc, p->value);
    }
    return NULL;
}

/* MAP[KEY] as a string: NULL when absent, or not a scalar (ERR said so) */
static const char *str(kc *k, yaml_node_t *map, const char *key, const char *where, al_error *err) {
    yaml_node_t *n = get(k, map, key);
    if (!n)
        return NULL;
    if (n->type != YAML_SCALAR_NODE || strlen((char *)n->data.scalar.value) != n->data.scalar.length) {
        al_err(err, "kubeconfig", EINVAL, "%s.%s is not a string", where, key);
        return NULL;
    }
    return (const char *)n->data.scalar.value;
}

/* LIST's entry {name: NAME, FIELD: {...}}: its FIELD, or NULL */
static yaml_node_t *named(kc *k, const char *list, const char *field, const char *name, al_error *err) {
    yaml_node_t *root = yaml_document_get_root_node(&k->doc);
    yaml_node_t *seq = get(k, root, list);
    if (seq && seq->type == YAML_SEQUENCE_NODE)
        for (yaml_node_item_t *i = seq->data.sequence.items.start; i < seq->data.sequence.items.top; i++) {
            yaml_node_t *e = yaml_document_get_node(&k->doc, *i);
            const char *nm = str(k, e, "name", list, err);
            if (nm && strcmp(nm, name) == 0) {
                yaml_node_t *f = get(k, e, field);
                if (!f || f->type != YAML_MAPPING_NODE)
                    al_err(err, "kubeconfig", EINVAL, "%s \"%.100s\" has no %s", list, name, field);
                return f && f->type == YAML_MAPPING_NODE ? f : NULL;
            }
        }
    al_err(err, "kubeconfig", ENOENT, "no %.20s named \"%.100s\" (the current context names it)", field, name);
    return NULL;
}

/* a PEM or a token: FIELD-data (base64) or FIELD (a file, relative to the
 * kubeconfig's directory) of MAP into *RET (NULL: neither given) */
static int blob(kc *k, yaml_node_t *map, const char *field, const char *where, char **ret, al_error *err) {
    char dk[64];
    snprintf(dk, sizeof dk, "%s-data", field);
    const char *data = str(k, map, dk, where, err), *file = str(k, map, field, where, err);
    if (err->err)
        return -err->err;
    if (data && *data) {
        size_t n = 0;
        if (strlen(data) > PEM_MAX * 2 || !(*ret = al_kube_b64_decode(data, &n)))
            return al_err(err, "kubeconfig", EINVAL, "%s.%s is not base64 (or over 2 MiB)", where, dk);
        if (strlen(*ret) != n || !n)
            return al_err(err, "kubeconfig", EINVAL, "%s.%s is empty or holds a NUL: not a PEM", where, dk);
        return 0;
    }
    if (!file || !*file)
        return 0;
    if (!k->files)
        return al_err(err, "kubeconfig", EPERM, "%s.%s names a file, which this reader does not open", where, field);
    char path[8192];
    /* a path cut short names another file: refused, never read */
    int r = file[0] == '/' || !k->dir[0] ? snprintf(path, sizeof path, "%s", file)
                                         : snprintf(path, sizeof path, "%s/%s", k->dir, file);
    if (r < 0 || (size_t)r >= sizeof path)
        return al_err(err, "kubeconfig", ENAMETOOLONG, "%s.%s: the path is over %zu bytes: give a shorter one",
                      where, field, sizeof path - 1);
    r = al_read_regular(AT_FDCWD, path, PEM_MAX, false, ret, NULL);
    if (r < 0)
        return al_err(err, "kubeconfig", -r, "%s.%s: read %.300s: %s", where, field, path,
                      r == -EFBIG ? "over 1 MiB" : r == -EINVAL ? "not a regular file" : strerror(-r));
    return 0;
}

static int load_cluster(kc *k, yaml_node_t *cl, al_kube_cluster *c, al_error *err) {
    const char *server = str(k, cl, "server", "cluster", err);
    if (err->err)
        return -err->err;
    if (!server)
        return al_err(err, "kubeconfig", EINVAL, "the current context's cluster has no server");
    int r = set_server(c, server, err);
    if (r < 0)
        return r;
    const char *insecure = str(k, cl, "insecure-skip-tls-verify", "cluster", err);
    if (err->err)
        return -err->err;
    if (insecure && strcmp(insecure, "true") == 0) {
        if (!al_kube_loopback_url(c->server))
            return al_err(err, "kubeconfig", EPERM, "insecure-skip-tls-verify is refused for %.200s: only a "
                          "loopback server may go unverified (give its CA in certificate-authority-data)", c->server);
        c->insecure = true;
    }
    if ((r = blob(k, cl, "certificate-authority", "cluster", &c->ca_pem, err)) < 0)
        return r;
    return 0;
}

static int load_user(kc *k, yaml_node_t *u, al_kube_cluster *c, al_error *err) {
    if (get(k, u, "exec") || get(k, u, "auth-provider"))
        return al_err(err, "kubeconfig", ENOTSUP, "the current user authenticates with an %s plugin: airlock never "
                      "runs another program for credentials; give it a token, a tokenFile or a client "
                      "certificate (e.g. a service account's token)", get(k, u, "exec") ? "exec" : "auth-provider");
    if (get(k, u, "username") || get(k, u, "password"))
        return al_err(err, "kubeconfig", ENOTSUP, "the current user has a username and password (basic auth, "
                      "gone from Kubernetes since 1.19): give a token or a client certificate");
    const char *token = str(k, u, "token", "user", err), *tf = str(k, u, "tokenFile", "user", err);
    if (err->err)
        return -err->err;
    int r;
    if (token && *token) {
        if (!(c->token = strdup(token)))
            return al_err(err, "kubeconfig", ENOMEM, "out of memory");
        if ((r = token_text(c->token, err)) < 0)
            return r;
    } else if (tf && *tf) {
        if (!k->files)
            return al_err(err, "kubeconfig", EPERM, "user.tokenFile names a file, which this reader does not open");
        if (tf[0] == '/' || !k->dir[0])
            r = snprintf(c->token_file, sizeof c->token_file, "%s", tf);
        else
            r = snprintf(c->token_file, sizeof c->token_file, "%s/%s", k->dir, tf);
        if (r < 0 || (size_t)r >= sizeof c->token_file)
            return al_err(err, "kubeconfig", ENAMETOOLONG, "user.tokenFile's path is too long");
        if ((r = al_kube_token_reread(c, err)) < 0)
            return r;
    }
    if ((r = blob(k, u, "client-certificate", "user", &c->cert_pem, err)) < 0 ||
        (r = blob(k, u, "client-key", "user", &c->key_pem, err)) < 0)
        return r;
    if (!c->cert_pem != !c->key_pem)
        return al_err(err, "kubeconfig", EINVAL, "the current user has a client certificate without its key, or a "
                      "key without its certificate");
    if (!c->token && !c->cert_pem)
        return al_err(err, "kubeconfig", EINVAL, "the current user has no credentials airlock can use (token, "
                      "tokenFile, or client-certificate and client-key)");
    return 0;
}

static int load_doc(kc *k, const char *ns, al_kube_cluster *c, al_error *err) {
    yaml_node_t *root = yaml_document_get_root_node(&k->doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return al_err(err, "kubeconfig", EINVAL, "not a kubeconfig (its top is not a mapping)");
    const char *cur = str(k, root, "current-context", "kubeconfig", err);
    if (err->err)
        return -err->err;
    if (!cur || !*cur)
        return al_err(err, "kubeconfig", EINVAL, "no current-context (kubectl config use-context NAME)");
    yaml_node_t *ctx = named(k, "contexts", "context", cur, err);
    if (!ctx)
        return -err->err;
    const char *cn = str(k, ctx, "cluster", "context", err), *un = str(k, ctx, "user", "context", err);
    const char *cns = str(k, ctx, "namespace", "context", err);
    if (err->err)
        return -err->err;
    if (!cn || !un)
        return al_err(err, "kubeconfig", EINVAL, "context \"%.100s\" names no cluster or no user", cur);
    yaml_node_t *cl = named(k, "clusters", "cluster", cn, err);
    yaml_node_t *u = cl ? named(k, "users", "user", un, err) : NULL;
    if (!u)
        return -err->err;
    int r = load_cluster(k, cl, c, err);
    if (r < 0 || (r = load_user(k, u, c, err)) < 0)
        return r;
    const char *n = ns && *ns ? ns : cns && *cns ? cns : "default";
    if (!al_kube_valid_namespace(n))
        return al_err(err, "kubeconfig", EINVAL, "namespace \"%.100s\" is not a DNS-1123 label", n);
    snprintf(c->namespace_, sizeof c->namespace_, "%s", n);
    return 0;
}

int al_kube_cluster_parse(const char *text, size_t len, const char *dir, bool files, const char *namespace_,
                          al_kube_cluster *ret, al_error *err) {
    *ret = (al_kube_cluster){ 0 };
    if (len > AL_KUBE_CONFIG_MAX)
        return al_err(err, "kubeconfig", EFBIG, "the kubeconfig is over 1 MiB");
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return al_err(err, "kubeconfig", ENOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    kc *k = calloc(1, sizeof *k);
    if (!k) {
        yaml_parser_delete(&p);
        return al_err(err, "kubeconfig", ENOMEM, "out of memory");
    }
    k->files = files;
    int r = snprintf(k->dir, sizeof k->dir, "%s", dir ? dir : "");
    if (r < 0 || (size_t)r >= sizeof k->dir) {
        /* relative paths would be read from a cut, other directory */
        yaml_parser_delete(&p);
        free(k);
        return al_err(err, "kubeconfig", ENAMETOOLONG, "the kubeconfig's directory is over %zu bytes: move it",
                      sizeof k->dir - 1);
    }
    if (!yaml_parser_load(&p, &k->doc)) {
        r = al_err(err, "kubeconfig", EINVAL, "not YAML: %.200s at line %zu", p.problem ? p.problem : "error",
                   p.problem_mark.line + 1);
    } else {
        r = load_doc(k, namespace_, ret, err);
        yaml_document_delete(&k->doc);
    }
    yaml_parser_delete(&p);
    free(k);
    if (r < 0)
        al_kube_cluster_free(ret);
    return r;
}

/* the service account's files (the test-hooks build alone may be told
 * another directory: AIRLOCK_TEST_KUBE_SA_DIR) */
static const char *sa_dir(void) {
#ifdef AIRLOCK_TEST_HOOKS
    const char *d = getenv("AIRLOCK_TEST_KUBE_SA_DIR");
    if (d && *d)
        return d;
#endif
    return SA_DIR;
}

static int in_cluster(const char *ns, al_kube_cluster *c, al_error *err) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port)
        return al_err(err, "kubeconfig", ENOENT, "no kubeconfig given (airlock serve: kubeconfig = PATH, "
                      "--kubeconfig or AIRLOCK_KUBECONFIG; airlock run and smoke: --kubeconfig, AIRLOCK_KUBECONFIG "
                      "or KUBECONFIG), and not in a pod (KUBERNETES_SERVICE_HOST is unset)");
    char url[AL_KUBE_URL_MAX];
    /* a URL cut short (its port, most likely) would be another server */
    int r = snprintf(url, sizeof url, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
    if (r < 0 || (size_t)r >= sizeof url)
        return al_err(err, "kubeconfig", ENAMETOOLONG, "KUBERNETES_SERVICE_HOST and _PORT make a URL over %zu "
                      "bytes: check the pod's environment", sizeof url - 1);
    r = set_server(c, url, err);
    if (r < 0)
        return r;
    const char *dir = sa_dir();
    char path[4096];
    snprintf(c->token_file, sizeof c->token_file, "%s/token", dir);
    if ((r = al_kube_token_reread(c, err)) < 0)
        return r;
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    if ((r = al_read_regular(AT_FDCWD, path, PEM_MAX, false, &c->ca_pem, NULL)) < 0)
        return al_err(err, "kubeconfig", -r, "read %s: %s", path, strerror(-r));
    _cleanup_free_ char *sans = NULL;
    snprintf(path, sizeof path, "%s/namespace", dir);
    /* absent: "default", as client-go falls back; present but unreadable
     * (or over 256 bytes) is refused, never read as "default": the pods
     * would go to another namespace than the service account's */
    if (!(ns && *ns) && (r = al_read_regular(AT_FDCWD, path, 256, false, &sans, NULL)) == 0)
        sans[strcspn(sans, "\r\n")] = '\0';
    else if (!(ns && *ns) && r != -ENOENT)
        return al_err(err, "kubeconfig", -r, "read %s: %s (give the namespace: kubernetes_namespace or --namespace)",
                      path, r == -EFBIG ? "over 256 bytes" : strerror(-r));
    const char *n = ns && *ns ? ns : sans && *sans ? sans : "default";
    if (!al_kube_valid_namespace(n))
        return al_err(err, "kubeconfig", EINVAL, "namespace \"%.100s\" is not a DNS-1123 label", n);
    snprintf(c->namespace_, sizeof c->namespace_, "%s", n);
    return 0;
}

int al_kube_cluster_load(const char *kubeconfig, const char *namespace_, al_kube_cluster *ret, al_error *err) {
    *ret = (al_kube_cluster){ 0 };
    if (!kubeconfig || !*kubeconfig) {
        int r = in_cluster(namespace_, ret, err);
        if (r < 0)
            al_kube_cluster_free(ret);
        return r;
    }
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = al_read_regular(AT_FDCWD, kubeconfig, AL_KUBE_CONFIG_MAX, false, &text, &len);
    if (r < 0)
        return al_err(err, "kubeconfig", -r, "read %s: %s", kubeconfig,
                      r == -EFBIG ? "over 1 MiB" : r == -EINVAL ? "not a regular file" : strerror(-r));
    char dir[4096];
    if (strlen(kubeconfig) >= sizeof dir)
        return al_err(err, "kubeconfig", ENAMETOOLONG, "the kubeconfig's path is over %zu bytes: give a shorter one",
                      sizeof dir - 1);
    snprintf(dir, sizeof dir, "%s", kubeconfig);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    return al_kube_cluster_parse(text, len, dir, true, namespace_, ret, err);
}
