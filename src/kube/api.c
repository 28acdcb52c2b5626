/* The API server's HTTP calls (api.h): libcurl with the cluster's TLS (its
 * CA, or the system's; a client certificate and key, all in-memory PEM
 * blobs) and its bearer token. The token is read from its file for every
 * call, and again after a 401 (a projected service-account token rotates
 * under us): never kept in the shared cluster, so any number of threads
 * call over one const al_kube_cluster. */
#include "api.h"

#include <fcntl.h>
#include <curl/curl.h>
#include <string.h>

#include "cluster.h"

/* what a non-2xx answer of a stream may hold (a Status) */
#define STATUS_MAX (64u << 10)
#define CONNECT_MS 10000L
#define TOKEN_MAX (64u << 10)
/* a stream's stop is asked this often, bytes or not */
#define POLL_MS 200

/* "Authorization: Bearer T" into *RET (NULL: C has no token): its file
 * read now when it has one. 0, or -errno with why in ERR. */
/* a token's copy wiped before it is freed, on every path */
static void wipe_free(char **p) {
    if (*p) {
        explicit_bzero(*p, strlen(*p));
        free(*p);
    }
}

static int auth_header(const al_kube_cluster *c, char **ret, al_error *err) {
    *ret = NULL;
    __attribute__((cleanup(wipe_free))) char *fresh = NULL;
    const char *t = c->token;
    if (c->token_file[0]) {
        int r = al_read_regular(AT_FDCWD, c->token_file, TOKEN_MAX, false, &fresh, NULL);
        if (r < 0 && !t)
            return al_err(err, "kubernetes", -r, "read the token file %s: %s", c->token_file, strerror(-r));
        if (r == 0) {
            size_t n = strlen(fresh);
            /* as cluster.c's token_text trims it when it first reads it */
            while (n && (fresh[n - 1] == '\n' || fresh[n - 1] == '\r' || fresh[n - 1] == ' ' || fresh[n - 1] == '\t'))
                fresh[--n] = '\0';
            t = fresh;
        }
    }
    if (!t)
        return 0;
    for (const char *p = t; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e)
            return al_err(err, "kubernetes", EINVAL, "the bearer token (%s) holds a character a header cannot "
                          "carry: rewrite it as the API server issued it", c->token_file[0] ? c->token_file : "kubeconfig");
    if (asprintf(ret, "Authorization: Bearer %s", t) < 0) {
        *ret = NULL;
        return al_err(err, "kubernetes", ENOMEM, "out of memory");
    }
    return 0;
}

typedef struct xfer {
    CURL *curl;
    const al_kube_stream_ops *ops;     /* NULL: a JSON call, kept in KEEP */
    al_buf keep;                       /* the answer, or a stream's error body */
    bool stopped;                      /* OPS stopped it: not an error */
} xfer;

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = size * n;
    long st = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &st);
    if (!x->ops || st < 200 || st > 299)
        return al_buf_write(p, 1, len, &x->keep);
    if (x->ops->data(p, len, x->ops->ud) != 0) {
        x->stopped = true;
        return 0;
    }
    return len;
}

/* C's URL, TLS and auth on a fresh handle for METHOD PATH */
static CURL *handle(const al_kube_cluster *c, const char *method, const char *path, const char *auth,
                    const char *body, struct curl_slist **hdr, xfer *x, char *ebuf, al_error *err) {
    _cleanup_free_ char *url = NULL;
    if (asprintf(&url, "%s%s", c->server, path) < 0)
        return al_err(err, "kubernetes", ENOMEM, "out of memory"), NULL;
    CURL *h = curl_easy_init();
    if (!h)
        return al_err(err, "kubernetes", ENOMEM, "cannot start libcurl"), NULL;
    x->curl = h;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_MS);
    /* a stream (a watch, a followed log) has no total timeout and may be
     * silent for minutes: keepalive probes are what find a peer that went
     * away without a FIN (a node lost, a NAT entry dropped), within about
     * a minute, instead of waiting out the run's wall clock as if the
     * script had hung */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 15L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    /* the API server answers where it is asked: a redirect would carry the
     * token elsewhere */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    if (c->ca_pem) {
        /* the cluster's CA alone, as kubectl trusts it: not the system's
         * directory of public CAs beside it */
        struct curl_blob b = { .data = c->ca_pem, .len = strlen(c->ca_pem), .flags = CURL_BLOB_COPY };
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
        curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
    }
    if (c->cert_pem && c->key_pem) {
        struct curl_blob cb = { .data = c->cert_pem, .len = strlen(c->cert_pem), .flags = CURL_BLOB_COPY };
        struct curl_blob kb = { .data = c->key_pem, .len = strlen(c->key_pem), .flags = CURL_BLOB_COPY };
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cb);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    }
    /* a loopback server only: cluster.c refuses it for any other */
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    struct curl_slist *l = curl_slist_append(NULL, "Accept: application/json");
    if (l && auth)
        l = curl_slist_append(l, auth);
    if (l && body) {
        l = curl_slist_append(l, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    if (l)
        l = curl_slist_append(l, "Expect:");
    if (!l) {
        curl_easy_cleanup(h);
        return al_err(err, "kubernetes", ENOMEM, "out of memory"), NULL;
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
    *hdr = l;
    return h;
}

static int curl_error(CURLcode cc, const char *ebuf, const al_kube_cluster *c, const char *method, const char *path,
                      al_error *err) {
    int e = cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : cc == CURLE_COULDNT_CONNECT ? ECONNREFUSED
          : cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CONNECT_ERROR ? EPROTO : EIO;
    return al_err(err, "kubernetes", e, "Kubernetes API %s %s%.200s: %s", method, c->server, path,
                  ebuf[0] ? ebuf : curl_easy_strerror(cc));
}

/* one JSON exchange: 0 with *CODE and the answer in X->keep, or -errno */
static int call_once(const al_kube_cluster *c, const char *method, const char *path, const char *body,
                     long timeout_ms, long *code, xfer *x, al_error *err) {
    _cleanup_free_ char *auth = NULL;
    int r = auth_header(c, &auth, err);
    if (r < 0)
        return r;
    struct curl_slist *hdr = NULL;
    char ebuf[CURL_ERROR_SIZE] = "";
    CURL *h = handle(c, method, path, auth, body, &hdr, x, ebuf, err);
    if (auth)
        explicit_bzero(auth, strlen(auth));
    if (!h)
        return -err->err;
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 30000L);
    CURLcode cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    if (x->keep.over)
        return al_err(err, "kubernetes", E2BIG, "Kubernetes API %s %.200s: the answer is over %zu bytes", method,
                      path, x->keep.max);
    if (cc != CURLE_OK)
        return curl_error(cc, ebuf, c, method, path, err);
    return 0;
}

int al_kube_call(const al_kube_cluster *c, const char *method, const char *path, json_t *body, long timeout_ms,
                 long *ret_code, json_t **ret_doc, al_error *err) {
    *ret_code = 0;
    *ret_doc = NULL;
    _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        return al_err(err, "kubernetes", ENOMEM, "out of memory");
    xfer x = { 0 };
    int r = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(x.keep.buf);
        x = (xfer){ .keep = { .max = AL_KUBE_BODY_MAX } };
        r = call_once(c, method, path, text, timeout_ms, ret_code, &x, err);
        /* a 401: the token may have rotated since it was read */
        if (r < 0 || *ret_code != 401 || !c->token_file[0])
            break;
    }
    if (r == 0 && x.keep.len)
        *ret_doc = json_loadb(x.keep.buf, x.keep.len, 0, NULL);
    free(x.keep.buf);
    return r;
}

/* one streamed GET over a multi handle, OPS->stop asked every POLL_MS */
static int stream_once(const al_kube_cluster *c, const char *path, const al_kube_stream_ops *ops, long *code,
                       xfer *x, al_error *err) {
    _cleanup_free_ char *auth = NULL;
    int r = auth_header(c, &auth, err);
    if (r < 0)
        return r;
    struct curl_slist *hdr = NULL;
    char ebuf[CURL_ERROR_SIZE] = "";
    CURL *h = handle(c, "GET", path, auth, NULL, &hdr, x, ebuf, err);
    if (auth)
        explicit_bzero(auth, strlen(auth));
    if (!h)
        return -err->err;
    CURLM *m = curl_multi_init();
    if (!m || curl_multi_add_handle(m, h) != CURLM_OK) {
        if (m)
            curl_multi_cleanup(m);
        curl_easy_cleanup(h);
        curl_slist_free_all(hdr);
        return al_err(err, "kubernetes", ENOMEM, "cannot start libcurl");
    }
    CURLcode cc = CURLE_OK;
    for (int running = 1; running;) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            cc = CURLE_RECV_ERROR;
            break;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left)))
            if (msg->msg == CURLMSG_DONE)
                cc = msg->data.result;
        if (!running)
            break;
        if (ops->stop && ops->stop(ops->ud)) {
            x->stopped = true;
            break;
        }
        curl_multi_poll(m, NULL, 0, POLL_MS, NULL);
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    curl_multi_remove_handle(m, h);
    curl_multi_cleanup(m);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    if (x->stopped)
        return 0;
    if (x->keep.over)
        return al_err(err, "kubernetes", E2BIG, "Kubernetes API GET %.200s: the error answer is over %zu bytes", path,
                      x->keep.max);
    if (cc != CURLE_OK)
        return curl_error(cc, ebuf, c, "GET", path, err);
    return 0;
}

int al_kube_stream(const al_kube_cluster *c, const char *path, const al_kube_stream_ops *ops, long *ret_code,
                   json_t **ret_status, al_error *err) {
    *ret_code = 0;
    *ret_status = NULL;
    xfer x = { 0 };
    int r = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(x.keep.buf);
        x = (xfer){ .ops = ops, .keep = { .max = STATUS_MAX } };
        r = stream_once(c, path, ops, ret_code, &x, err);
        if (r < 0 || *ret_code != 401 || !c->token_file[0])
            break;
    }
    if (r == 0 && (*ret_code < 200 || *ret_code > 299) && x.keep.len)
        *ret_status = json_loadb(x.keep.buf, x.keep.len, 0, NULL);
    free(x.keep.buf);
    return r;
}
