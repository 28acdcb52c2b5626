/* The API server's REST calls (api.h). */
#include "api.h"

#include <string.h>

#include "cluster.h"

/* the token of a cluster shared by many handles: read and replaced under
 * one lock (the driver's runs are threads) */
static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
/* an error answer's body kept for its Status message */
#define ERROR_BODY_MAX (64u << 10)

int al_kube_status_errno(long st) {
    switch (st) {
    case 400:
    case 422:
        return EINVAL;
    case 401:
        return EACCES;
    case 403:
        return EPERM;
    case 404:
        return ENOENT;
    case 409:
        return EEXIST;
    case 410:
        return ESTALE;
    case 429:
        return EAGAIN;
    default:
        return EIO;
    }
}

int al_kube_api_open(al_kube_api *a, al_kube_cluster *c, al_error *err) {
    *a = (al_kube_api){ .cluster = c };
    if (!(a->curl = curl_easy_init()))
        return al_err(err, "kubernetes", ENOMEM, "cannot start libcurl");
    return 0;
}

void al_kube_api_close(al_kube_api *a) {
    if (a->curl)
        curl_easy_cleanup(a->curl);
    a->curl = NULL;
}

/* "Authorization: Bearer T" for C's token, read again from its file first
 * (REREAD: even when the last read was this call's) */
static char *auth_header(al_kube_cluster *c, al_error *err) {
    pthread_mutex_lock(&token_lock);
    al_error e = { 0 };
    /* a file that cannot be read now keeps the token read before: the call
     * goes on with it, and a 401 says the rest */
    if (c->token_file[0])
        al_kube_token_reread(c, &e);
    char *h = NULL;
    if (c->token && asprintf(&h, "Authorization: Bearer %s", c->token) < 0)
        h = NULL;
    pthread_mutex_unlock(&token_lock);
    if (c->token && !h)
        al_err(err, "kubernetes", ENOMEM, "out of memory");
    return h;
}

typedef struct xfer {
    al_kube_api *a;
    const al_kube_stream *s;
    al_buf keep;                  /* a JSON answer, or an error's body */
    uint64_t got;
    bool over, stopped, ended;
} xfer;

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    xfer *x = ud;
    size_t len = size * n;
    long st = 0;
    curl_easy_getinfo(x->a->curl, CURLINFO_RESPONSE_CODE, &st);
    if (!x->s || st < 200 || st > 299)
        return al_buf_write(p, 1, len, &x->keep) == len ? len : 0;
    x->got += len;
    if (x->got > x->s->max_bytes) {
        x->over = true;
        return 0;
    }
    int r = x->s->write(p, len, x->s->ud);
    if (r == 1)
        x->ended = true;
    else if (r)
        x->stopped = true;
    return r ? 0 : len;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    xfer *x = ud;
    if (x->s && x->s->progress && x->s->progress(x->s->ud))
        return x->stopped = true, 1;
    if (x->a->stop && x->a->stop(x->a->stop_ud))
        return x->stopped = true, 1;
    return 0;
}

static void tls(al_kube_api *a) {
    CURL *c = a->curl;
    const al_kube_cluster *k = a->cluster;
    if (k->ca_pem) {
        struct curl_blob b = { .data = k->ca_pem, .len = strlen(k->ca_pem), .flags = CURL_BLOB_COPY };
        curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b);
    }
    if (k->cert_pem && k->key_pem) {
        struct curl_blob cb = { .data = k->cert_pem, .len = strlen(k->cert_pem), .flags = CURL_BLOB_COPY };
        struct curl_blob kb = { .data = k->key_pem, .len = strlen(k->key_pem), .flags = CURL_BLOB_COPY };
        curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cb);
        curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
        curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &kb);
        curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
    }
    /* only a loopback server (cluster.c refuses it for any other) */
    if (k->insecure) {
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

/* one request: 0 with *STATUS, or -errno when no answer came */
static int perform(al_kube_api *a, const char *method, const char *path, const char *body, uint64_t timeout_ms,
                   xfer *x, long *status, const char *step, al_error *err) {
    CURL *c = a->curl;
    *status = 0;
    uint64_t ms = timeout_ms;
    if (a->deadline_ms) {
        uint64_t now = al_now_ms();
        if (now >= a->deadline_ms)
            return al_err(err, step, ETIMEDOUT, "Kubernetes: out of time before %s %.200s", method, path);
        if (!ms || a->deadline_ms - now < ms)
            ms = a->deadline_ms - now;
    }
    _cleanup_free_ char *url = NULL, *auth = auth_header(a->cluster, err);
    if ((a->cluster->token && !auth) || asprintf(&url, "%s%s", a->cluster->server, path) < 0)
        return al_err(err, step, ENOMEM, "out of memory");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    /* the API server answers where it is asked: a redirect would carry
     * the token elsewhere */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    tls(a);
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (h && auth)
        h = curl_slist_append(h, auth);
    if (h && body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    if (h)
        h = curl_slist_append(h, "Expect:");
    if (!h)
        return al_err(err, step, ENOMEM, "out of memory");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    CURLcode cc = curl_easy_perform(c);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(h);
    if (auth)
        explicit_bzero(auth, strlen(auth));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && x->ended))
        return 0;
    if (x->over)
        return al_err(err, step, E2BIG, "Kubernetes: the answer to %s %.200s is over %llu bytes", method, path,
                      (unsigned long long)(x->s ? x->s->max_bytes : AL_KUBE_ANSWER_MAX));
    if (x->keep.over)
        return al_err(err, step, E2BIG, "Kubernetes: the answer to %s %.200s is over %zu bytes", method, path,
                      x->keep.max);
    if (x->stopped || cc == CURLE_ABORTED_BY_CALLBACK)
        return al_err(err, step, ECANCELED, "Kubernetes: %s %.200s stopped", method, path);
    return al_err(err, step, cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : cc == CURLE_COULDNT_CONNECT ? ECONNREFUSED
                  : EIO, "Kubernetes: %s %s%.200s: %s", method, a->cluster->server, path,
                  ebuf[0] ? ebuf : curl_easy_strerror(cc));
}

/* a non-2xx answer's Status said in ERR: -errno */
static int status_error(const xfer *x, long st, const char *method, const char *path, const char *step,
                        al_error *err) {
    json_t *doc = x->keep.len ? json_loadb(x->keep.buf, x->keep.len, 0, NULL) : NULL;
    const char *msg = json_string_value(json_object_get(doc, "message"));
    const char *reason = json_string_value(json_object_get(doc, "reason"));
    int e = al_kube_status_errno(st);
    al_err(err, step, e, "Kubernetes: %s %.200s: %ld%s%s%s %.300s", method, path, st, reason ? " " : "",
           reason ? reason : "", msg || x->keep.len ? ":" : "", msg ? msg : x->keep.len ? x->keep.buf : "");
    json_decref(doc);
    return -e;
}

/* METHOD PATH, once more after a 401 with the token read again */
static int exchange(al_kube_api *a, const char *method, const char *path, const char *body, uint64_t timeout_ms,
                    const al_kube_stream *s, xfer *x, long *st, const char *step, al_error *err) {
    for (int attempt = 0;; attempt++) {
        free(x->keep.buf);
        *x = (xfer){ .a = a, .s = s, .keep = { .max = s ? ERROR_BODY_MAX : AL_KUBE_ANSWER_MAX } };
        int r = perform(a, method, path, body, timeout_ms, x, st, step, err);
        if (r < 0 || *st != 401 || attempt == 1 || !a->cluster->token_file[0])
            return r;
    }
}

int al_kube_call(al_kube_api *a, const char *method, const char *path, json_t *body, uint64_t timeout_ms,
                 json_t **ret, long *status, const char *step, al_error *err) {
    *ret = NULL;
    if (status)
        *status = 0;
    _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        return al_err(err, step, ENOMEM, "out of memory");
    xfer x = { 0 };
    long st = 0;
    int r = exchange(a, method, path, text, timeout_ms ? timeout_ms : 30000, NULL, &x, &st, step, err);
    if (status)
        *status = st;
    if (r == 0 && (st < 200 || st > 299))
        r = status_error(&x, st, method, path, step, err);
    if (r == 0 && x.keep.len && !(*ret = json_loadb(x.keep.buf, x.keep.len, 0, NULL)))
        r = al_err(err, step, EPROTO, "Kubernetes: %s %.200s: the answer is not JSON", method, path);
    free(x.keep.buf);
    return r;
}

int al_kube_stream_get(al_kube_api *a, const al_kube_stream *s, long *status, const char *step, al_error *err) {
    if (status)
        *status = 0;
    xfer x = { 0 };
    long st = 0;
    int r = exchange(a, "GET", s->path, NULL, s->timeout_ms, s, &x, &st, step, err);
    if (status)
        *status = st;
    if (r == 0 && (st < 200 || st > 299))
        r = status_error(&x, st, "GET", s->path, step, err);
    free(x.keep.buf);
    return r;
}
