/* HTTP for the remote drivers (http.h). */
#include "http.h"

#include <string.h>


int al_http_open(al_http *h, const char *what, const char *const *headers, al_error *err) {
    *h = (al_http){ 0 };
    snprintf(h->what, sizeof h->what, "%s", what);
    if (!(h->curl = curl_easy_init()))
        return al_err(err, "remote", ENOMEM, "%s: cannot start libcurl", what);
    for (size_t i = 0; headers && headers[i]; i++) {
        struct curl_slist *n = curl_slist_append(h->headers, headers[i]);
        if (!n) {
            al_http_close(h);
            return al_err(err, "remote", ENOMEM, "out of memory");
        }
        h->headers = n;
    }
    return 0;
}

void al_http_close(al_http *h) {
    if (h->curl)
        curl_easy_cleanup(h->curl);
    curl_slist_free_all(h->headers);
    h->curl = NULL;
    h->headers = NULL;
}

typedef struct progress_ctx {
    al_http_progress_fn fn;
    void *ud;
} progress_ctx;

static int on_progress(void *p, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    progress_ctx *pc = p;
    return pc->fn ? pc->fn(pc->ud) : 0;
}

int al_http_call(al_http *h, const al_http_req *req, long *status, al_buf *body, const char *step, al_error *err) {
    CURL *c = h->curl;
    *status = 0;
    uint64_t ms = req->timeout_ms ? req->timeout_ms : 60000;
    if (h->deadline_ms) {
        uint64_t now = al_now_ms();
        if (now >= h->deadline_ms)
            return al_err(err, step, ETIMEDOUT, "%s: out of time before %s %s", h->what, req->method, req->url);
        if (h->deadline_ms - now < ms)
            ms = h->deadline_ms - now;
    }
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, req->url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 15000L);
    /* the services answer where they are asked: a redirect could carry
     * the key elsewhere */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    progress_ctx pc = req->progress ? (progress_ctx){ req->progress, req->userdata }
                                    : (progress_ctx){ h->stop, h->stop_ud };
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pc);
    char ebuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
    struct curl_slist *hdr = NULL;
    for (struct curl_slist *s = h->headers; s; s = s->next)
        hdr = curl_slist_append(hdr, s->data);
    for (size_t i = 0; req->headers && req->headers[i]; i++)
        hdr = curl_slist_append(hdr, req->headers[i]);
    hdr = curl_slist_append(hdr, "Expect:");
    char ct[128];
    if (req->body) {
        snprintf(ct, sizeof ct, "Content-Type: %s", req->content_type ? req->content_type : "application/json");
        hdr = curl_slist_append(hdr, ct);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    } else if (req->mime) {
        curl_easy_setopt(c, CURLOPT_MIMEPOST, req->mime);
    } else if (strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (!hdr)
        return al_err(err, step, ENOMEM, "out of memory");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    al_buf keep = { .max = AL_REMOTE_ANSWER_MAX };
    if (req->write) {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, req->write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, req->userdata);
    } else {
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, al_buf_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &keep);
    }
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    if (cc != CURLE_OK) {
        free(keep.buf);
        if (cc == CURLE_ABORTED_BY_CALLBACK || (cc == CURLE_WRITE_ERROR && req->write))
            return al_err(err, step, ECANCELED, "%s: %s %s stopped", h->what, req->method, req->url);
        if (keep.over)
            return al_err(err, step, E2BIG, "%s: the answer to %s %s is over %u bytes", h->what, req->method,
                          req->url, AL_REMOTE_ANSWER_MAX);
        return al_err(err, step, cc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO, "%s: %s %s: %s", h->what,
                      req->method, req->url, ebuf[0] ? ebuf : curl_easy_strerror(cc));
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (body)
        *body = keep;
    else
        free(keep.buf);
    return 0;
}

int al_http_json(al_http *h, const char *method, const char *url, json_t *send, const char *const *headers,
                 uint64_t timeout_ms, json_t **ret, long *status, const char *step, al_error *err) {
    *ret = NULL;
    _cleanup_free_ char *text = send ? json_dumps(send, JSON_COMPACT) : NULL;
    if (send && !text)
        return al_err(err, step, ENOMEM, "out of memory");
    al_http_req req = { .method = method, .url = url, .body = text, .body_len = text ? strlen(text) : 0,
                        .headers = headers, .timeout_ms = timeout_ms };
    long st = 0;
    al_buf b = { 0 };
    int r = al_http_call(h, &req, &st, &b, step, err);
    if (status)
        *status = st;
    if (r < 0)
        return r;
    json_t *doc = b.len ? json_loadb(b.buf, b.len, 0, NULL) : NULL;
    if (st < 200 || st > 299) {
        const char *msg = json_string_value(json_object_get(doc, "message"));
        al_err(err, step, st == 404 ? ENOENT : EIO, "%s: %s %s: HTTP %ld%s%.300s", h->what, method, url, st,
               msg || b.len ? ": " : "", msg ? msg : b.len ? b.buf : "");
        json_decref(doc);
        free(b.buf);
        return st == 404 ? -ENOENT : -EIO;
    }
    if (b.len && !doc) {
        free(b.buf);
        return al_err(err, step, EPROTO, "%s: %s %s: the answer is not JSON", h->what, method, url);
    }
    free(b.buf);
    *ret = doc;
    return 0;
}

typedef struct dl_ctx {
    al_http *h;
    al_http_write_fn w;
    void *wud;
    bool refused;
} dl_ctx;

/* the body goes on only under a 200: an error page is not a file's bytes */
static size_t dl_write(char *p, size_t size, size_t n, void *ud) {
    dl_ctx *d = ud;
    long st = 0;
    curl_easy_getinfo(d->h->curl, CURLINFO_RESPONSE_CODE, &st);
    if (st != 200) {
        d->refused = true;
        return 0;
    }
    return d->w(p, size, n, d->wud);
}

int al_http_download(al_http *h, const char *url, const char *const *headers, al_http_write_fn w, void *wud,
                     const char *step, al_error *err) {
    dl_ctx d = { h, w, wud, false };
    al_http_req req = { .method = "GET", .url = url, .timeout_ms = 300000, .write = dl_write, .userdata = &d,
                        .headers = headers };
    long st = 0;
    int r = al_http_call(h, &req, &st, NULL, step, err);
    if (d.refused || (r == 0 && st != 200))
        return al_err(err, step, EIO, "HTTP %ld", st);
    return r;
}

int al_http_delete(al_http *h, const char *url, const char *step) {
    h->deadline_ms = 0;
    h->stop = NULL;
    int r = -EIO;
    for (int i = 0; i < 2 && r < 0; i++) {
        json_t *ans = NULL;
        long st = 0;
        al_error e = { 0 };
        r = al_http_json(h, "DELETE", url, NULL, NULL, 30000, &ans, &st, step, &e);
        if (st == 404)
            r = 0;
        json_decref(ans);
    }
    return r;
}

char *al_http_escape(al_http *h, const char *s) {
    char *q = curl_easy_escape(h->curl, s, 0);
    char *r = q ? strdup(q) : NULL;
    curl_free(q);
    return r;
}
