/*
 * HTTP: libmicrohttpd glue, authentication, routing and the handlers of
 * docs/api.md. One thread per connection, so an event stream may block
 * waiting for the next event; connections are capped.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <microhttpd.h>
#include <nettle/base64.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "../core/audit.h"
#include "../core/checkpoint.h"
#include "conn_guard.h"
#include "http.h"
#include "http_log.h"
#include "mcp.h"
#include "metrics.h"
#include "openapi.h"
#include "operator.h"
#include "piston.h"
#include "query.h"
#include "run_body.h"
#include "status.h"
#include "../core/service.h"
#include "../core/skills.h"
#include "../store/artifacts.h"
#include "../store/audit.h"
#include "../store/governance.h"
#include "../util/json_keys.h"

#define LIST_MAX 200
#define SSE_KEEPALIVE_S 15


struct al_http {
    struct MHD_Daemon *d;
    al_service *s;
    al_mcp *mcp;
    al_operator op; /* who may read the service-wide figures */
    al_guard *guard; /* slow clients: a request's deadline, the reserve */
    al_metrics_cache metrics;
};

typedef struct request {
    char *body;
    size_t len;
    bool too_large;
    bool answered;
    bool authed;       /* P is who asks: authenticated on the headers */
    bool over_budget;  /* P's bodies being received were at their maximum */
    uint64_t reserved; /* bytes of P's body budget this request holds */
    al_principal p;
    /* for the access log (access_log = true), taken as the request came */
    uint64_t t0_ms;
    char method[16];
    char route[96];
} request;

/* --------------------------------------------------------------- replies */

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, json_t *doc) {
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!s) {
        /* a document that could not be built still gets an answer, not a
         * dropped connection */
        status = 500;
        s = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"the answer could not be built\"}}");
        if (!s)
            return MHD_NO;
    }
    size_t n = strlen(s);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *code, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the message may quote what a client sent, cut at a byte count */
    al_utf8_fix(msg);
    return reply_json(c, status, json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", msg));
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *type, char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* TEXT lives as long as the process: answered without a copy (it is asked
 * for without a key) */
static enum MHD_Result reply_static(struct MHD_Connection *c, const char *type, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* A status and document from a connection-free part (runs, skills); a 429
 * says when to come back. */
static enum MHD_Result reply_doc(struct MHD_Connection *c, unsigned status, json_t *doc) {
    if (!doc || status < 200 || status > 599) {
        json_decref(doc);
        return reply_error(c, 500, "internal", "no answer was made (status %u)", status);
    }
    if (status != 429)
        return reply_json(c, status, doc);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Retry-After", "5");
    enum MHD_Result ret = MHD_queue_response(c, 429, r);
    MHD_destroy_response(r);
    return ret;
}

/* ----------------------------------------------------------- idempotency */

/* The request's Idempotency-Key (docs/api.md), bound to SCOPE and the
 * request's body: JSON (hashed in canonical form) or else the bytes RAW.
 * False, with a 400 queued in *RET, when it is malformed or sent twice. */
static bool idem_header(struct MHD_Connection *c, const char *scope, json_t *json, const void *raw, size_t len,
                        al_idem *k, enum MHD_Result *ret) {
    al_error err = { 0 };
    if (al_idem_from_request(c, scope, json, raw, len, k, &err) < 0) {
        *ret = reply_error(c, 400, "bad_request", "%s", err.msg);
        return false;
    }
    return true;
}

/* reply_doc, saying that the answer is what an earlier request with the
 * same Idempotency-Key made */
static enum MHD_Result reply_doc_idem(struct MHD_Connection *c, unsigned status, json_t *doc, const al_idem *k) {
    if (!k->replayed || !doc || status < 200 || status > 299)
        return reply_doc(c, status, doc);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "Idempotent-Replayed", "true");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A person holds their maximum of long-held requests (WHAT): 429, come back
 * when one has ended. */
static enum MHD_Result reply_too_many(struct MHD_Connection *c, const char *what, int max, const char *key) {
    char msg[300];
    snprintf(msg, sizeof msg, "you have %d %s under way already, the most one person may (%s); retry when one has ended",
             max, what, key);
    return reply_doc(c, 429, json_pack("{s:{s:s, s:s}}", "error", "code", "too_many_requests", "message", msg));
}

/* ---------------------------------------------------------------- routes */

/* Whether every query parameter of C is one of ALLOWED (query.h); else a
 * 400 naming it, queued in *RET. */
static bool query_ok(struct MHD_Connection *c, const char *const *allowed, size_t n, enum MHD_Result *ret) {
    char msg[400];
    if (al_query_check(c, allowed, n, msg, sizeof msg))
        return true;
    *ret = reply_error(c, 400, "bad_request", "%s", msg);
    return false;
}

/* ?wait and ?timeout_s of a run's POST into X (WAIT: Piston's, which
 * always waits); false (and a 400 queued in *RET) when either is
 * malformed. They say how to answer, not what to make: a retry may wait on
 * the run its first attempt made. */
static bool wait_params(struct MHD_Connection *c, bool wait_always, al_run_extra *x, enum MHD_Result *ret) {
    static const char *const q[] = { "wait", "timeout_s" };
    if (!query_ok(c, q, ELEMENTSOF(q), ret))
        return false;
    const char *wait = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "wait");
    const char *ts = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "timeout_s");
    x->wait = wait_always || (wait && (strcmp(wait, "true") == 0 || strcmp(wait, "1") == 0));
    if (wait && !x->wait && strcmp(wait, "false") != 0 && strcmp(wait, "0") != 0) {
        *ret = reply_error(c, 400, "bad_request", "wait must be true or false");
        return false;
    }
    if (ts && (al_parse_u64(ts, &x->wait_secs) < 0 || x->wait_secs < 1 || x->wait_secs > 3600)) {
        *ret = reply_error(c, 400, "bad_request", "timeout_s must be a whole number of seconds from 1 to 3600");
        return false;
    }
    return true;
}

/* Run SP for P, asked for as X says, and the answer: the run, or with
 * PISTON ({language, version}) Piston's shape of it. IDEM: the
 * Idempotency-Key bound to the request as it was sent. */
static enum MHD_Result start_run(al_service *s, struct MHD_Connection *c, const al_principal *p, al_run_spec *sp,
                                 al_run_extra *x, const char *const *piston, al_idem *idem) {
    /* a wait holds a connection (and a thread) until the run ends */
    if (x->wait && !al_service_hold(s, p->person_id, AL_HOLD_WAIT))
        return reply_too_many(c, "waits", s->cfg.waits_per_person, "waits_per_person");
    json_t *doc = NULL;
    x->idem = idem;
    unsigned status = al_status_http(al_run_create(s, p, sp, x, &doc));
    if (x->wait)
        al_service_unhold(s, p->person_id, AL_HOLD_WAIT);
    return reply_doc_idem(c, status, status == 200 && piston ? al_piston_result(doc, piston[0], piston[1]) : doc, idem);
}

/* POST /v1/runs: its body read into a run spec (run_body.c). */
static enum MHD_Result create_run(al_service *s, struct MHD_Connection *c, const al_principal *p, request *rq) {
    json_error_t jerr;
    json_t *body = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(body)) {
        json_decref(body);
        return reply_error(c, 400, "bad_request", "the body must be a JSON object: %s", jerr.text);
    }
    al_idem idem;
    al_run_extra x = { .via = "rest" };
    enum MHD_Result bad;
    if (!idem_header(c, "POST /v1/runs", body, NULL, 0, &idem, &bad) || !wait_params(c, false, &x, &bad)) {
        json_decref(body);
        return bad;
    }
    al_run_spec sp;
    char msg[600];
    const char *code = NULL;
    al_status st = al_run_body_parse(body, &sp, msg, sizeof msg, &code);
    json_decref(body);
    if (st != AL_STATUS_OK)
        return reply_error(c, al_status_http(st), code, "%s", msg);
    enum MHD_Result ret = start_run(s, c, p, &sp, &x, NULL, &idem);
    al_run_spec_free(&sp);
    return ret;
}

/* ?limit=N&cursor=C of a listing newest first; false (and a 400 queued)
 * when either is malformed. */
static bool page_params(struct MHD_Connection *c, uint64_t max, uint64_t *limit, uint64_t *cursor, enum MHD_Result *ret) {
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *cur = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cursor");
    *cursor = INT64_MAX;
    if (lim && (al_parse_u64(lim, limit) < 0 || *limit < 1 || *limit > max)) {
        *ret = reply_error(c, 400, "bad_request", "limit must be from 1 to %llu", (unsigned long long)max);
        return false;
    }
    if (cur && (al_parse_u64(cur, cursor) < 0 || *cursor > INT64_MAX)) {
        *ret = reply_error(c, 400, "bad_request", "bad cursor");
        return false;
    }
    return true;
}

static enum MHD_Result list_runs(al_service *s, struct MHD_Connection *c, const al_principal *p) {
    al_error err = { 0 };
    const char *state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
    const char *thread = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "thread_id");
    uint64_t limit = 50, cursor;
    enum MHD_Result bad;
    static const char *const q[] = { "state", "thread_id", "limit", "cursor" };
    if (!query_ok(c, q, ELEMENTSOF(q), &bad) || !page_params(c, LIST_MAX, &limit, &cursor, &bad))
        return bad;
    al_run_state want = state ? al_run_state_from_name(state) : _AL_RUN_STATE_INVALID;
    if (state && want == _AL_RUN_STATE_INVALID)
        return reply_error(c, 400, "bad_request", "state must be one of pending_approval, queued, provisioning, running, "
                                                  "succeeded, failed, timed_out, killed, canceled, error, denied");
    if (thread && !al_valid_thread_id(thread))
        return reply_error(c, 400, "bad_request", AL_RUN_RULE_THREAD_ID);
    /* summaries only: a page of full runs held 20 MiB per run in the daemon */
    al_store_run_filter f = { .ws_id = p->workspace_id, .state = want, .thread_id = thread,
                              .before_seq = (int64_t)cursor, .limit = (int64_t)limit + 1 };
    al_store_run_brief *runs = NULL;
    size_t nruns = 0;
    if (al_store_run_list(s->store, &f, &runs, &nruns, &err) < 0)
        return reply_error(c, 500, "internal", "%s", err.msg);
    json_t *out = json_array(), *next = json_null();
    for (size_t i = 0; i < nruns && i < limit; i++)
        json_array_append_new(out, al_run_summary_json(&runs[i]));
    if (nruns > limit) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)runs[limit - 1].run.seq);
        next = json_string(buf);
    }
    al_store_run_briefs_free(runs, nruns);
    return reply_json(c, 200, json_pack("{s:o, s:o}", "runs", out, "next_cursor", next));
}

/* ------------------------------------------------------------------- SSE */

typedef struct sse {
    al_service *s;
    struct MHD_Connection *c;
    char run_id[40], person_id[40];
    int64_t last;
    char *buf;
    size_t len, pos;
    bool ended;
    bool held;         /* one of the person's followers_per_person */
} sse;

/* Whether the client of C has closed its side (or the connection broke). */
static bool peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pf = { .fd = ci->connect_fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static ssize_t sse_next(sse *e, char *out, size_t max) {
    al_error err = { 0 };
    while (e->pos >= e->len) {
        if (e->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        free(e->buf);
        e->buf = NULL;
        e->len = e->pos = 0;
        uint64_t gen = al_service_run_event_gen(e->s, e->run_id);
        al_store_event *evs = NULL;
        size_t nev = 0;
        if (al_run_events_after(e->s, e->run_id, e->last, 64, &evs, &nev, &err) < 0) {
            /* libmicrohttpd says only that the stream failed: the why is here */
            al_service_log(e->s, AL_LOG_ERROR, "http.stream_failed",
                           json_pack("{s:s, s:s}", "run_id", e->run_id, "error", err.msg));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (nev == 0) {
            al_store_events_free(evs, nev);
            /* a client that already has the result (Last-Event-ID past it)
             * has nothing more coming */
            if (al_store_event_result_by(e->s->store, e->run_id, e->last, &err) > 0)
                return MHD_CONTENT_READER_END_OF_STREAM;
            /* expired while it was followed: its events (the result too)
             * were swept, and nothing more will come */
            if (al_run_events_gone(e->s, e->run_id))
                return MHD_CONTENT_READER_END_OF_STREAM;
            /* wait in steps of a second: a follower who has gone gives its
             * slot (and its share of the person's followers) back within one,
             * not at the next keepalive */
            for (int waited = 0;; waited++) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += 1;
                if (al_service_wait_run_event(e->s, e->run_id, gen, &until))
                    break;
                pthread_mutex_lock(&e->s->mu);
                bool stopping = e->s->stopping;
                pthread_mutex_unlock(&e->s->mu);
                if (stopping)
                    return MHD_CONTENT_READER_END_OF_STREAM;
                /* the client left: the stream ends as any other does (an
                 * error here would be logged as the service's own) */
                if (peer_gone(e->c))
                    return MHD_CONTENT_READER_END_OF_STREAM;
                if (waited + 1 >= SSE_KEEPALIVE_S) {
                    /* a comment keeps proxies and clients from timing out */
                    e->buf = strdup(": keepalive\n\n");
                    e->len = e->buf ? strlen(e->buf) : 0;
                    break;
                }
            }
            continue;
        }
        size_t cap = 0;
        for (size_t i = 0; i < nev; i++)
            cap += strlen(evs[i].data) + 96;
        e->buf = malloc(cap + 1);
        if (!e->buf) {
            al_store_events_free(evs, nev);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        for (size_t i = 0; i < nev; i++) {
            const char *type = evs[i].type;
            e->last = evs[i].seq;
            /* data is one line of compact JSON: no newline can split it */
            e->len += (size_t)snprintf(e->buf + e->len, cap + 1 - e->len, "id: %lld\nevent: %s\ndata: %s\n\n",
                                       (long long)e->last, type, evs[i].data);
            if (strcmp(type, "result") == 0)
                e->ended = true;
        }
        al_store_events_free(evs, nev);
    }
    size_t n = e->len - e->pos < max ? e->len - e->pos : max;
    memcpy(out, e->buf + e->pos, n);
    e->pos += n;
    return (ssize_t)n;
}

/* The follower's place is given back as the stream ends, before its client
 * sees the end (so it may follow the next at once), else when it is freed. */
static void sse_unhold(sse *e) {
    if (e->held)
        al_service_unhold(e->s, e->person_id, AL_HOLD_FOLLOW);
    e->held = false;
}

static ssize_t sse_read(void *cls, uint64_t off, char *out, size_t max) {
    sse *e = cls;
    ssize_t n = sse_next(e, out, max);
    if (n < 0)
        sse_unhold(e);
    return n;
}

static void sse_free(void *cls) {
    sse *e = cls;
    sse_unhold(e);
    free(e->buf);
    free(e);
}

static enum MHD_Result run_events(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *id) {
    al_store_run *row = al_run_load(s, p, id);
    if (!row)
        return reply_error(c, 404, "not_found", "no run %s", id);
    bool expired = row->expired_at[0];
    al_store_run_free(row);
    if (expired) { /* its events are gone: said as GET /v1/runs/{id} says it */
        json_t *doc = NULL;
        al_status st = al_run_view(s, p, id, &doc);
        return reply_json(c, al_status_http(st), doc);
    }
    /* each follower holds a connection and a thread for as long as it likes */
    if (!al_service_hold(s, p->person_id, AL_HOLD_FOLLOW))
        return reply_too_many(c, "event streams", s->cfg.followers_per_person, "followers_per_person");
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        al_service_unhold(s, p->person_id, AL_HOLD_FOLLOW);
        return MHD_NO;
    }
    e->s = s;
    e->c = c;
    e->held = true;
    snprintf(e->run_id, sizeof e->run_id, "%s", id);
    snprintf(e->person_id, sizeof e->person_id, "%s", p->person_id);
    const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    uint64_t l;
    if (last && al_parse_u64(last, &l) == 0 && l < INT64_MAX)
        e->last = (int64_t)l;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, e, sse_free);
    if (!r) {
        sse_free(e);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* ------------------------------------------------------------- artifacts */

static enum MHD_Result artifact(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *id,
                                bool content) {
    al_error err = { 0 };
    al_store_artifact rec;
    json_t *a = NULL;
    if (al_store_artifact_get(s->store, p->workspace_id, id, &rec, &err) == 0) {
        a = al_artifact_json(&rec);
        al_store_artifact_done(&rec);
    }
    if (!a)
        return reply_error(c, 404, "not_found", "no artifact %s", id);
    if (!content)
        return reply_json(c, 200, a);
    int fd = al_blob_open(s, json_string_value(json_object_get(a, "sha256")),
                          json_integer_value(json_object_get(a, "size")));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        json_decref(a);
        return reply_error(c, 500, "internal", "the artifact's content is missing from the store");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    MHD_add_response_header(r, "Content-Type", json_string_value(json_object_get(a, "content_type")));
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    /* never rendered inline by a browser: it is the box's output */
    MHD_add_response_header(r, "Content-Disposition", "attachment");
    MHD_add_response_header(r, "Content-Security-Policy", "sandbox");
    json_decref(a);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result thread_artifacts(al_service *s, struct MHD_Connection *c, const al_principal *p,
                                        const char *thread) {
    al_error err = { 0 };
    if (!al_valid_thread_id(thread))
        return reply_error(c, 400, "bad_request", "bad thread id");
    static const char *const q[] = { "all" };
    enum MHD_Result bad;
    if (!query_ok(c, q, ELEMENTSOF(q), &bad))
        return bad;
    const char *all = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "all");
    bool every = all && (strcmp(all, "true") == 0 || strcmp(all, "1") == 0);
    char key[128];
    al_store_artifacts l;
    if (al_artifacts_thread_key(thread, NULL, key, sizeof key) < 0 ||
        al_store_artifacts_of_thread(s->store, p->workspace_id, key, NULL, every, 0, &l, &err) < 0)
        return reply_error(c, 500, "internal", "%s", err.msg);
    json_t *rows = al_artifacts_json(&l);
    al_store_artifacts_free(&l);
    return reply_json(c, 200, json_pack("{s:o}", "artifacts", rows));
}

/* ------------------------------------------------------------ operations */

static enum MHD_Result metrics(al_http *h, struct MHD_Connection *c) {
    unsigned long long late, evicted;
    al_guard_counts(h->guard, &late, &evicted);
    char *t = al_metrics_text(&h->metrics, h->s, late, evicted);
    return t ? reply_text(c, 200, "text/plain; version=0.0.4", t) : MHD_NO;
}


/* GET /operator/status: the driver's badges with the pool's live state
 * (every shape of run, its hits and misses), which /v1/settings keeps from
 * tenants. */
static enum MHD_Result operator_status(al_service *s, struct MHD_Connection *c) {
    json_t *pool = s->driver->pool ? s->driver->pool() : NULL;
    return reply_json(c, 200, json_pack("{s:s, s:o, s:o}", "driver", s->driver->name, "badges",
                                        s->driver->capabilities(), "pool", pool ? pool : json_null()));
}

/* ------------------------------------------------------------ governance */

/* An optional JSON object body: none at all reads as {}, but a body cut at
 * the cap (too_large, nothing kept) is never read as empty: the caller
 * answers 413 first. NULL: malformed (400). */
static json_t *body_object(request *rq) {
    if (rq->too_large)
        return NULL;
    if (!rq->body || rq->len == 0)
        return json_object();
    return json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, NULL);
}

static bool may_approve(const al_principal *p) {
    return strcmp(p->role, "admin") == 0 || strcmp(p->role, "approver") == 0;
}

static enum MHD_Result decide(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *id,
                              bool approve, request *rq) {
    al_store_run *row = al_run_load(s, p, id);
    if (!row)
        return reply_error(c, 404, "not_found", "no run %s", id);
    if (!may_approve(p)) {
        al_store_run_free(row);
        return reply_error(c, 403, "forbidden", "only admins and approvers may decide approvals");
    }
    /* a body past the cap was not kept: reading it as {} would skip the
     * hash the approver sent */
    if (rq->too_large) {
        al_store_run_free(row);
        return reply_error(c, 413, "payload_too_large", "the body is larger than %llu bytes",
                           (unsigned long long)s->cfg.body_max);
    }
    json_t *b = body_object(rq);
    if (!json_is_object(b)) {
        json_decref(b);
        al_store_run_free(row);
        return reply_error(c, 400, "bad_request", "the body must be a JSON object ({hash, reason})");
    }
    static const char *const keys[] = { "hash", "reason" };
    char msg[300];
    if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys), msg, sizeof msg)) {
        json_decref(b);
        al_store_run_free(row);
        return reply_error(c, 400, "bad_request", "%s", msg);
    }
    json_t *hash = json_object_get(b, "hash"), *reason = json_object_get(b, "reason");
    if ((hash && !json_is_string(hash) && !json_is_null(hash)) || (reason && !json_is_string(reason) && !json_is_null(reason)) ||
        (json_is_string(reason) && json_string_length(reason) > 2000)) {
        json_decref(b);
        al_store_run_free(row);
        return reply_error(c, 400, "bad_request", "hash and reason must be strings (reason at most 2000 bytes)");
    }
    al_error err = { 0 };
    int r = al_service_decide(s, row, p->person_id, approve, json_string_value(hash), json_string_value(reason), &err);
    json_decref(b);
    al_store_run_free(row);
    if (r == -EPERM)
        return reply_error(c, 403, "separation_of_duties", "%s", err.msg);
    if (r == -ENOENT)
        return reply_error(c, 409, "conflict", "%s", err.msg);
    if (r == -EEXIST || r == -ESTALE)
        return reply_error(c, 409, "conflict", "%s", err.msg);
    if (r < 0)
        return reply_error(c, 500, strcmp(err.step, "audit") == 0 ? "audit_failed" : "internal", "%s", err.msg);
    row = al_run_load(s, p, id);
    enum MHD_Result ret = reply_json(c, 200, row ? al_run_json(s, row) : NULL);
    al_store_run_free(row);
    return ret;
}

static json_t *settings_json(al_service *s, const char *ws_id, al_error *err) {
    json_t *eff = al_settings_load(s, ws_id, err);
    if (!eff)
        return NULL;
    /* the pool's state is every tenant's run shapes with live hit and
     * miss counts: the operator's (/operator/status), not a tenant's */
    json_t *badges = s->driver->capabilities();
    json_object_del(json_object_get(badges, "pool"), "state");
    json_object_set_new(eff, "badges", badges);
    json_object_set_new(eff, "service", json_pack("{s:s, s:i, s:i, s:i, s:i}", "driver", s->driver->name, "per_person",
                                                  s->cfg.per_person, "max_concurrent", s->cfg.max_concurrent, "queue_max",
                                                  s->cfg.queue_max, "max_timeout_s", s->cfg.max_timeout_s));
    json_t *modes = json_object();
    for (int m = 0; m < _AL_NET_MODE_MAX; m++) {
        al_net_badge b = al_net_mode_badge((al_net_mode)m);
        /* the box's network namespace and the egress proxy's listener in
         * it: the native box and a runc container; gVisor keeps offline */
        bool docker = strcmp(s->driver->name, "docker") == 0;
        bool gvisor = docker && strcmp(s->cfg.engine_runtime, "runsc") == 0;
        bool held = strcmp(s->driver->name, "native") == 0 || (docker && (!gvisor || m == AL_NET_OFFLINE));
        json_object_set_new(modes, al_net_mode_name((al_net_mode)m),
                            json_pack("{s:s, s:s}", "level", held ? b.level : "not-enforced", "detail",
                                      held ? b.detail
                                           : gvisor ? "refused under gVisor here (runsc --network=none)"
                                                    : "no runs execute on this service's driver"));
    }
    json_object_set_new(eff, "network_modes", modes);
    return eff;
}

/* GET /v1/settings, and the answer of PUT: 503 when they cannot be read */
static enum MHD_Result settings_reply(al_service *s, struct MHD_Connection *c, const char *ws_id) {
    al_error err = { 0 };
    json_t *doc = settings_json(s, ws_id, &err);
    if (!doc)
        return reply_error(c, 503, "settings_unavailable", "%s", err.msg);
    return reply_json(c, 200, doc);
}

static enum MHD_Result put_settings(al_service *s, struct MHD_Connection *c, const al_principal *p, request *rq) {
    if (strcmp(p->role, "admin") != 0)
        return reply_error(c, 403, "forbidden", "only admins may change settings");
    if (rq->too_large)
        return reply_error(c, 413, "payload_too_large", "the body is too large");
    json_error_t jerr;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(b)) {
        json_decref(b);
        return reply_error(c, 400, "bad_request", "the body must be a JSON object: %s", jerr.text);
    }
    al_error err = { 0 };
    json_t *eff = NULL;
    /* unreadable settings: al_settings_put below refuses to write over them */
    al_error lerr = { 0 };
    json_t *before = al_settings_load(s, p->workspace_id, &lerr);
    bool self_before = json_is_true(json_object_get(before, "allow_self_approval"));
    json_decref(before);
    int r = al_settings_put(s, p->workspace_id, b, &eff, &err);
    if (r < 0) {
        json_decref(b);
        return reply_error(c, r == -EINVAL ? 400 : r == -EPERM ? 403 : 500,
                           r == -EINVAL ? "bad_request" : r == -EPERM ? "forbidden" : "internal", "%s", err.msg);
    }
    bool self_after = json_is_true(json_object_get(eff, "allow_self_approval"));
    json_decref(eff);
    /* which settings changed (names only: secrets' values never reach the trail) */
    json_t *keys = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) json_array_append_new(keys, json_string(k));
    json_decref(b);
    r = al_workspace_audit(s, p, "settings.changed", json_pack("{s:s, s:o}", "by", p->person_id, "keys", keys), &err);
    /* relaxing (or restoring) separation of duties is its own event */
    if (r >= 0 && self_before != self_after)
        r = al_workspace_audit(s, p, "settings.self_approval_changed",
                               json_pack("{s:s, s:b, s:b}", "by", p->person_id, "from", self_before, "to", self_after),
                               &err);
    if (r < 0) {
        return reply_error(c, 500, "audit_failed", "the settings were changed but their audit event could not be "
                           "written: %s", err.msg);
    }
    return settings_reply(s, c, p->workspace_id);
}

/* The caller's workspace's entries of its organisation's ledger, the last
 * written first, as /v1/usage shows them. */
static json_t *ledger_rows(al_service *s, const al_principal *p, const char *from, const char *to, int64_t limit,
                           al_error *err) {
    al_store_ledger_filter f = { .org_id = p->org_id, .workspace_id = p->workspace_id, .from = from, .to = to,
                                 .limit = limit };
    al_store_ledger_entry *v;
    size_t n;
    if (al_store_ledger_list(s->store, &f, &v, &n, err) < 0)
        return NULL;
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++)
        json_array_append_new(rows, json_pack("{s:s, s:s, s:I, s:s?, s:I, s:s}", "id", v[i].id, "kind",
                                              al_ledger_kind_name(v[i].kind), "amount", (json_int_t)v[i].amount,
                                              "run_id", v[i].run_id[0] ? v[i].run_id : NULL, "balance_after",
                                              (json_int_t)v[i].balance_after, "created_at", v[i].created_at));
    free(v);
    if (!rows)
        al_err(err, "usage", ENOMEM, "out of memory");
    return rows;
}

static enum MHD_Result usage(al_service *s, struct MHD_Connection *c, const al_principal *p) {
    al_error err = { 0 };
    const char *from = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to");
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    uint64_t limit = 100;
    static const char *const q[] = { "from", "to", "limit" };
    enum MHD_Result bad;
    if (!query_ok(c, q, ELEMENTSOF(q), &bad))
        return bad;
    if (lim && (al_parse_u64(lim, &limit) < 0 || limit < 1 || limit > 1000))
        return reply_error(c, 400, "bad_request", "limit must be from 1 to 1000");
    if ((from && !al_rfc3339_valid(from)) || (to && !al_rfc3339_valid(to)))
        return reply_error(c, 400, "bad_request", "from and to are RFC 3339 UTC times (2026-01-31T12:00:00Z)");
    /* the caller's workspace's charges and refunds, and the organisation's
     * grants (which explain its balance): never another workspace's runs */
    json_t *ledger = ledger_rows(s, p, from, to, (int64_t)limit, &err);
    int64_t by_state[_AL_RUN_STATE_MAX];
    al_store_count *by_lang = NULL;
    size_t nlang = 0;
    bool ok = ledger && al_store_runs_by_state(s->store, p->workspace_id, from, to, by_state, &err) == 0 &&
              al_store_runs_by_language(s->store, p->workspace_id, from, to, &by_lang, &nlang, &err) == 0;
    if (!ok) {
        json_decref(ledger);
        free(by_lang);
        return reply_error(c, 500, "internal", "%s", err.msg);
    }
    json_t *st = json_object(), *lg = json_object();
    for (size_t i = 0; i < al_run_states_by_name_n; i++)
        if (by_state[al_run_states_by_name[i]] > 0)
            json_object_set_new(st, al_run_state_name(al_run_states_by_name[i]), json_integer(by_state[al_run_states_by_name[i]]));
    for (size_t i = 0; i < nlang; i++)
        json_object_set_new(lg, by_lang[i].key, json_integer(by_lang[i].n));
    free(by_lang);
    return reply_json(c, 200, json_pack("{s:I, s:o, s:{s:o, s:o}}", "balance", (json_int_t)al_credits_balance(s, p->org_id),
                                        "ledger", ledger, "runs", "by_state", st, "by_language", lg));
}

static json_t *audit_rows(al_service *s, const al_principal *p, const char *kind, const char *person, const char *run,
                          const char *from, const char *to, int64_t cursor, int64_t limit, al_error *err) {
    al_store_audit_filter f = { .workspace_id = p->workspace_id, .kind = kind, .person_id = person, .run_id = run,
                                .from = from, .to = to, .before_seq = cursor, .limit = limit };
    al_store_audit_events evs;
    if (al_store_audit_list(s->store, &f, &evs, err) < 0)
        return NULL;
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < evs.n; i++) {
        const al_store_audit_event *e = &evs.v[i];
        json_t *d = json_loads(e->data, 0, NULL);
        json_array_append_new(rows, json_pack("{s:I, s:s, s:s?, s:s?, s:o, s:s, s:s, s:s}", "seq", (json_int_t)e->seq,
                                              "kind", e->kind, "person_id", e->has_person_id ? e->person_id : NULL,
                                              "run_id", e->has_run_id ? e->run_id : NULL, "data", d ? d : json_object(),
                                              "created_at", e->created_at, "prev_hash", e->prev_hash, "hash", e->hash));
    }
    al_store_audit_events_free(&evs);
    if (!rows)
        al_err(err, "audit", ENOMEM, "out of memory");
    return rows;
}

static enum MHD_Result audit(al_service *s, struct MHD_Connection *c, const al_principal *p) {
    al_error err = { 0 };
    const char *kind = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "kind");
    const char *person = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "person_id");
    const char *run = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run_id");
    const char *from = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to");
    uint64_t limit = 100, cursor;
    enum MHD_Result bad;
    static const char *const q[] = { "kind", "person_id", "run_id", "from", "to", "limit", "cursor" };
    if (!query_ok(c, q, ELEMENTSOF(q), &bad) || !page_params(c, 1000, &limit, &cursor, &bad))
        return bad;
    if ((from && !al_rfc3339_valid(from)) || (to && !al_rfc3339_valid(to)))
        return reply_error(c, 400, "bad_request", "from and to are RFC 3339 UTC times (2026-01-31T12:00:00Z)");
    json_t *rows = audit_rows(s, p, kind, person, run, from, to, (int64_t)cursor, (int64_t)limit + 1, &err);
    if (!rows)
        return reply_error(c, 500, "internal", "%s", err.msg);
    json_t *next = json_null();
    if (json_array_size(rows) > limit) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(json_object_get(json_array_get(rows, limit - 1), "seq")));
        next = json_string(b);
        json_array_remove(rows, limit);
    }
    return reply_json(c, 200, json_pack("{s:o, s:o}", "events", rows, "next_cursor", next));
}

/* GET /v1/audit/checkpoint: the workspace's head, signed now, for a copy
 * kept outside the store (checkpoint.h). */
static enum MHD_Result audit_checkpoint(al_service *s, struct MHD_Connection *c, const al_principal *p) {
    if (strcmp(p->role, "admin") != 0)
        return reply_error(c, 403, "forbidden", "only admins may take the audit trail's checkpoints");
    al_error err = { 0 };
    char *text = NULL, v[AL_CHECKPOINT_VERIFIER_MAX];
    al_audit_head h;
    int r = al_checkpointer_sign_now(s, p->workspace_id, &text, &h, &err);
    if (r == -ENOENT || r == -ESTALE)
        return reply_error(c, r == -ENOENT ? 404 : 409, r == -ENOENT ? "not_found" : "conflict", "%s", err.msg);
    if (r < 0)
        return reply_error(c, 500, "internal", "%s", err.msg);
    al_checkpointer_verifier(s, v);
    json_t *doc = json_pack("{s:s, s:I, s:s, s:s, s:s}", "workspace_id", h.workspace_id, "seq", (json_int_t)h.seq,
                            "hash", h.hash, "checkpoint", text, "verifier_key", v);
    free(text);
    return reply_json(c, 200, doc);
}
/* V, or JSON's null where there is nothing (for json_pack's O) */
static json_t *or_null(json_t *v) { return v ? v : json_null(); }

static enum MHD_Result trace(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *id) {
    al_error err = { 0 };
    al_store_run *row = al_run_load(s, p, id);
    if (!row)
        return reply_error(c, 404, "not_found", "no run %s", id);
    if (row->expired_at[0]) { /* its input and output are gone: 410 and the summary */
        al_store_run_free(row);
        json_t *doc = NULL;
        al_status st = al_run_view(s, p, id, &doc);
        return reply_json(c, al_status_http(st), doc);
    }
    json_t *rj = al_run_json(s, row);
    json_t *decisions = audit_rows(s, p, NULL, NULL, id, NULL, NULL, INT64_MAX, 1000, &err);
    if (decisions) {
        /* oldest first reads as a story */
        json_t *rev = json_array();
        for (size_t i = json_array_size(decisions); i > 0; i--)
            json_array_append(rev, json_array_get(decisions, i - 1));
        json_decref(decisions);
        decisions = rev;
    }
    json_t *inputs = al_json_text(row->inputs);
    /* a run that never reached its box (denied, expired, refused at
     * provisioning) has a null result: what is known is answered, and
     * what is not is null, never a 500 */
    json_t *result = json_is_object(json_object_get(rj, "result")) ? json_object_get(rj, "result") : NULL;
    json_t *in_arts = json_object_get(inputs, "artifacts");
    json_t *doc = json_pack("{s:O, s:{s:s?, s:s?, s:s?, s:O, s:o}, s:{s:O, s:O, s:O, s:O, s:O}, s:o, s:{s:O, s:O, s:O, s:O}}",
                            "run", rj ? rj : json_null(),
                            "input", "language", row->language, "code", row->code,
                            "network", row->network, "limits", or_null(json_object_get(rj, "limits")),
                            "artifacts", json_is_array(in_arts) ? json_incref(in_arts) : json_array(),
                            "output", "stdout", or_null(json_object_get(result, "stdout")),
                            "stderr", or_null(json_object_get(result, "stderr")),
                            "exit_code", or_null(json_object_get(result, "exit_code")),
                            "artifacts", or_null(json_object_get(rj, "artifacts")),
                            "redactions", or_null(json_object_get(rj, "redactions")),
                            "decisions", decisions ? decisions : json_array(),
                            "timing", "created_at", or_null(json_object_get(rj, "created_at")), "started_at",
                            or_null(json_object_get(rj, "started_at")), "finished_at",
                            or_null(json_object_get(rj, "finished_at")),
                            "wall_ms", or_null(json_object_get(result, "wall_ms")));
    /* output is bytes: the exact ones too, where the text is not them */
    static const char *const exact[] = { "stdout_base64", "stderr_base64" };
    for (size_t i = 0; doc && result && i < ELEMENTSOF(exact); i++)
        if (json_is_string(json_object_get(result, exact[i])))
            json_object_set(json_object_get(doc, "output"), exact[i], json_object_get(result, exact[i]));
    json_decref(inputs);
    json_decref(rj);
    al_store_run_free(row);
    return doc ? reply_json(c, 200, doc) : reply_error(c, 500, "internal", "cannot build the trace");
}

/* GET /v1/runs/{id}/inputs/{stdin|N}: the bytes of one input of a run of
 * this workspace (an approval card's inputs[].url), while the run holds
 * them (until it ends). */
static enum MHD_Result run_input(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *id,
                                 const char *which) {
    al_store_run *row = al_run_load(s, p, id);
    if (!row)
        return reply_error(c, 404, "not_found", "no run %s", id);
    bool ended = al_run_state_ended(row->state);
    al_store_run_free(row);
    al_error err = { 0 };
    int fd = -1;
    uint64_t size = 0;
    char *name = NULL;
    int r = ended ? -ENOENT : al_run_input_open(s, id, which, &fd, &size, &name, &err);
    if (r == -ENOENT)
        return ended ? reply_error(c, 410, "gone", "run %s has ended: its inputs are not kept", id)
                     : reply_error(c, 404, "not_found", "%s", err.msg);
    if (r < 0)
        return reply_error(c, 500, "internal", "%s", err.msg);
    free(name);
    struct MHD_Response *resp = MHD_create_response_from_fd64(size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "Content-Disposition", "attachment");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---------------------------------------------------------------- piston */

/* Piston's public API (GET /api/v2/runtimes, POST /api/v2/execute), served
 * under /piston/<api key>/ so a Piston client works by changing its base URL
 * (Piston itself has no authentication). docs/api.md says what differs. */

static enum MHD_Result piston(al_service *s, struct MHD_Connection *c, const char *what, bool get, bool post,
                              request *rq) {
    /* the key in the URL was checked on the headers (admit) */
    if (!rq->authed)
        return reply_error(c, 401, "unauthorized", "a valid API key is required in the URL: /piston/KEY/api/v2/...");
    const al_principal p = rq->p;
    if (strcmp(what, "runtimes") == 0 && get)
        return reply_json(c, 200, al_piston_runtimes());
    if (strcmp(what, "execute") != 0 || !post)
        return reply_error(c, 404, "not_found", "Piston's API here is GET /api/v2/runtimes and POST /api/v2/execute");
    if (rq->too_large)
        return reply_error(c, 413, "payload_too_large", "the body is too large");
    json_error_t jerr;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(b)) {
        json_decref(b);
        return reply_error(c, 400, "bad_request", "the body must be a JSON object: %s", jerr.text);
    }
    /* the key binds the request as Piston's client sent it */
    al_idem idem;
    enum MHD_Result bad;
    if (!idem_header(c, "POST /piston/api/v2/execute", b, NULL, 0, &idem, &bad)) {
        json_decref(b);
        return bad;
    }
    /* the translation is pure (piston.c, fuzzed alone); the spec it
     * makes goes through al_run_create like any other */
    al_run_spec sp;
    char tmsg[300];
    al_status tst = al_piston_translate(b, &sp, tmsg, sizeof tmsg);
    json_decref(b);
    if (tst != AL_STATUS_OK)
        return reply_error(c, al_status_http(tst), tst == AL_STATUS_INVALID ? "bad_request" : "internal", "%s", tmsg);
    const char *ours = sp.language.s;
    /* answered with the runtime that ran, as Piston names it */
    json_t *rts = al_piston_runtimes();
    char pl[32] = "", pv[64] = "";
    size_t k;
    json_t *r;
    json_array_foreach(rts, k, r) {
        const char *l = json_string_value(json_object_get(r, "language"));
        if ((strcmp(ours, "node") == 0 && strcmp(l, "javascript") == 0) || strcmp(ours, l) == 0) {
            snprintf(pl, sizeof pl, "%s", l);
            snprintf(pv, sizeof pv, "%s", json_string_value(json_object_get(r, "version")));
        }
    }
    json_decref(rts);
    const char *answer[2] = { pl, pv };
    al_run_extra x = { .via = "piston" };
    enum MHD_Result ret;
    if (wait_params(c, true, &x, &ret))
        ret = start_run(s, c, &p, &sp, &x, answer, &idem);
    al_run_spec_free(&sp);
    return ret;
}

/* ---------------------------------------------------------------- skills */

/* POST /v1/skills/{name}/run and .../test: {entrypoint, args, thread_id,
 * limits, digest (test only)}. */
static enum MHD_Result skill_start(al_service *s, struct MHD_Connection *c, const al_principal *p, const char *name,
                                   bool test, request *rq) {
    if (rq->too_large)
        return reply_error(c, 413, "payload_too_large", "the body is larger than %llu bytes",
                           (unsigned long long)s->cfg.body_max);
    json_error_t jerr;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(b)) {
        json_decref(b);
        return reply_error(c, 400, "bad_request", "the body must be a JSON object {entrypoint, args, thread_id}: %s",
                           jerr.text);
    }
    /* digest last: only the test bench picks a version */
    static const char *const keys[] = { "entrypoint", "args", "thread_id", "limits", "network", "digest" };
    char kmsg[300];
    if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys) - (test ? 0 : 1), kmsg, sizeof kmsg)) {
        json_decref(b);
        return reply_error(c, 400, "bad_request", "%s", kmsg);
    }
    json_t *ep = json_object_get(b, "entrypoint"), *thread = json_object_get(b, "thread_id");
    json_t *dg = json_object_get(b, "digest"), *lim = json_object_get(b, "limits"), *net = json_object_get(b, "network");
    if (!json_is_string(ep) || (thread && !json_is_null(thread) && (!json_is_string(thread) ||
                                                                     !al_valid_thread_id(json_string_value(thread)))) ||
        (dg && !json_is_string(dg)) || (lim && !json_is_null(lim) && !json_is_object(lim)) ||
        (net && !json_is_null(net) && !json_is_string(net))) {
        json_decref(b);
        return reply_error(c, 400, "bad_request", "want entrypoint (a string), args (an object), thread_id "
                                                  "([A-Za-z0-9._-]{1,64}), limits (an object), network (a policy string)");
    }
    static const char *const q[] = { "wait" };
    enum MHD_Result qbad;
    if (!query_ok(c, q, ELEMENTSOF(q), &qbad)) {
        json_decref(b);
        return qbad;
    }
    const char *wait = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "wait");
    bool want_wait = test || (wait && (strcmp(wait, "true") == 0 || strcmp(wait, "1") == 0));
    char scope[160];
    snprintf(scope, sizeof scope, "POST /v1/skills/%s/%s", name, test ? "test" : "run");
    al_idem idem;
    enum MHD_Result bad;
    if (!idem_header(c, scope, b, NULL, 0, &idem, &bad)) {
        json_decref(b);
        return bad;
    }
    /* the limits as a run's body has them (their ranges are the run's check) */
    al_run_limit_req limits[_AL_LIMIT_MAX] = { 0 };
    char lmsg[300];
    const char *lcode = NULL;
    al_status lst = al_run_body_limits(lim, limits, lmsg, sizeof lmsg, &lcode);
    if (lst != AL_STATUS_OK) {
        json_decref(b);
        return reply_error(c, al_status_http(lst), lcode, "%s", lmsg);
    }
    if (want_wait && !al_service_hold(s, p->person_id, AL_HOLD_WAIT)) {
        json_decref(b);
        return reply_too_many(c, "waits", s->cfg.waits_per_person, "waits_per_person");
    }
    json_t *doc = NULL;
    al_skill_opts o = { .digest = json_string_value(dg), .limits = limits, .network = json_string_value(net),
                        .via = "rest", .wait = want_wait, .mode = test ? AL_SKILL_TEST : AL_SKILL_RUN, .idem = &idem };
    unsigned st = al_status_http(al_skill_run(s, p, name, json_string_value(ep), json_object_get(b, "args"),
                                              json_string_value(thread), &o, &doc));
    if (want_wait)
        al_service_unhold(s, p->person_id, AL_HOLD_WAIT);
    json_decref(b);
    return reply_doc_idem(c, st, doc, &idem);
}

static enum MHD_Result skills_route(al_service *s, struct MHD_Connection *c, const al_principal *p, char seg[6][128],
                                    int n, bool get, bool post, bool del, request *rq) {
    json_t *doc = NULL;
    unsigned st;
    if (n == 2 && post) {
        if (rq->too_large)
            return reply_error(c, 413, "payload_too_large", "the bundle is larger than %llu bytes",
                               (unsigned long long)s->cfg.body_max);
        al_idem idem;
        enum MHD_Result bad;
        /* the key binds the bundle's bytes as sent */
        if (!idem_header(c, "POST /v1/skills", NULL, rq->body, rq->len, &idem, &bad))
            return bad;
        st = al_status_http(al_skills_upload(s, p, rq->body, rq->len, &idem, &doc));
        return reply_doc_idem(c, st, doc, &idem);
    }
    if (n == 2 && get) {
        st = al_status_http(al_skills_list(s, p, &doc));
        return reply_doc(c, st, doc);
    }
    if (n == 2)
        return reply_error(c, 405, "method_not_allowed", "use GET or POST");
    if (!al_skill_name_valid(seg[2]))
        return reply_error(c, 404, "not_found", "no such skill: names are 1-64 characters of a-z 0-9 -");
    if (n == 3 && get) {
        st = al_status_http(al_skills_get(s, p, seg[2], &doc));
        return reply_doc(c, st, doc);
    }
    if ((n == 3 || (n == 5 && strcmp(seg[3], "versions") == 0)) && del) {
        st = al_status_http(al_skills_delete(s, p, seg[2], n == 5 ? seg[4] : NULL, &doc));
        return reply_doc(c, st, doc);
    }
    if (n == 5 && strcmp(seg[3], "versions") == 0)
        return reply_error(c, 405, "method_not_allowed", "use DELETE");
    if (n == 4 && post && (strcmp(seg[3], "run") == 0 || strcmp(seg[3], "test") == 0))
        return skill_start(s, c, p, seg[2], seg[3][0] == 't', rq);
    if (n == 4 && post && strcmp(seg[3], "promote") == 0) {
        /* a body cut at the cap must not read as empty (promote the newest) */
        if (rq->too_large)
            return reply_error(c, 413, "payload_too_large", "the body is too large");
        json_t *b = body_object(rq);
        json_t *dg = json_object_get(b, "digest");
        static const char *const keys[] = { "digest" };
        char kmsg[300];
        if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys), kmsg, sizeof kmsg)) {
            json_decref(b);
            return reply_error(c, 400, "bad_request", "%s", kmsg);
        }
        if (!json_is_object(b) || (dg && !json_is_string(dg))) {
            json_decref(b);
            return reply_error(c, 400, "bad_request", "the body is empty or {\"digest\": \"sha256:...\"}");
        }
        st = al_status_http(al_skills_promote(s, p, seg[2], json_string_value(dg), &doc));
        json_decref(b);
        return reply_doc(c, st, doc);
    }
    if (n == 3 || (n == 4 && (strcmp(seg[3], "run") == 0 || strcmp(seg[3], "test") == 0 || strcmp(seg[3], "promote") == 0)))
        return reply_error(c, 405, "method_not_allowed", n == 3 ? "use GET or DELETE" : "use POST");
    return reply_error(c, 404, "not_found", "no such path");
}

/* ---------------------------------------------------------------- router */

static int split(const char *url, char parts[6][128]) {
    int n = 0;
    for (const char *p = url; *p && n < 6;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        size_t l = strcspn(p, "/");
        if (l >= 128)
            return -1;
        memcpy(parts[n], p, l);
        parts[n][l] = '\0';
        n++;
        p += l;
    }
    return n;
}

/* 401; MCP clients look for the scheme in WWW-Authenticate (RFC 6750) */
static enum MHD_Result reply_unauthorized(struct MHD_Connection *c, bool mcp) {
    if (!mcp)
        return reply_error(c, 401, "unauthorized", "a valid API key is required (Authorization: Bearer KEY)");
    char *m = strdup("{\"error\":{\"code\":\"unauthorized\",\"message\":\"a valid API key is required "
                     "(Authorization: Bearer KEY)\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(m ? strlen(m) : 0, m, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(m);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"airlock\"");
    enum MHD_Result ret = MHD_queue_response(c, 401, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result route(al_http *h, struct MHD_Connection *c, const char *url, const char *method, request *rq) {
    al_service *s = h->s;
    char seg[6][128];
    int n = split(url, seg);
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    if (n < 0)
        return reply_error(c, 404, "not_found", "no such path");
    if (n == 1 && !get && (strcmp(seg[0], "healthz") == 0 || strcmp(seg[0], "metrics") == 0 ||
                           strcmp(seg[0], "openapi.json") == 0))
        return reply_error(c, 405, "method_not_allowed", "use GET");
    if (n == 1 && strcmp(seg[0], "healthz") == 0 && get) {
        char *text = al_service_health(s);
        return text ? reply_text(c, 200, "application/json", text) : MHD_NO;
    }
    bool op_route = (n == 1 && strcmp(seg[0], "metrics") == 0) || (n == 2 && strcmp(seg[0], "operator") == 0);
    if (op_route && !al_operator_allowed(&h->op, c))
        return reply_error(c, 403, "operator_only", "service-wide figures are the operator's: ask from a loopback "
                           "address or with the operator token (operator_access, docs/operations.md)");
    if (n == 1 && strcmp(seg[0], "metrics") == 0 && get)
        return metrics(h, c);
    if (n == 2 && strcmp(seg[0], "operator") == 0 && strcmp(seg[1], "status") == 0)
        return get ? operator_status(s, c) : reply_error(c, 405, "method_not_allowed", "use GET");
    if (n == 1 && strcmp(seg[0], "openapi.json") == 0 && get)
        return reply_static(c, "application/json", al_openapi[0].text);
    if (n == 5 && strcmp(seg[0], "piston") == 0 && strcmp(seg[2], "api") == 0 && strcmp(seg[3], "v2") == 0)
        return piston(s, c, seg[4], get, post, rq);
    bool mcp = n == 1 && strcmp(seg[0], "mcp") == 0;
    if (!mcp && (n == 0 || strcmp(seg[0], "v1") != 0))
        return reply_error(c, 404, "not_found", "no such path");

    /* authenticated on the headers, before the body was read (admit) */
    if (!rq->authed)
        return reply_unauthorized(c, mcp);
    const al_principal p = rq->p;
    if (mcp)
        return al_mcp_handle(h->mcp, s, c, &p, method, rq->body, rq->len, rq->too_large);

    if (n == 2 && strcmp(seg[1], "runs") == 0) {
        if (post)
            return rq->too_large ? reply_error(c, 413, "payload_too_large", "the body is larger than %llu bytes",
                                               (unsigned long long)s->cfg.body_max)
                                 : create_run(s, c, &p, rq);
        if (get)
            return list_runs(s, c, &p);
        return reply_error(c, 405, "method_not_allowed", "use GET or POST");
    }
    if (n >= 3 && strcmp(seg[1], "runs") == 0) {
        if (n == 3 && get) {
            json_t *doc = NULL;
            al_status st = al_run_view(s, &p, seg[2], &doc);
            return reply_json(c, al_status_http(st), doc);
        }
        if (n == 4 && strcmp(seg[3], "events") == 0 && get)
            return run_events(s, c, &p, seg[2]);
        if (n == 4 && strcmp(seg[3], "trace") == 0 && get)
            return trace(s, c, &p, seg[2]);
        if (n == 5 && strcmp(seg[3], "inputs") == 0 && get)
            return run_input(s, c, &p, seg[2], seg[4]);
        if (n == 4 && (strcmp(seg[3], "approve") == 0 || strcmp(seg[3], "deny") == 0) && post)
            return decide(s, c, &p, seg[2], seg[3][0] == 'a', rq);
        if (n == 4 && strcmp(seg[3], "cancel") == 0 && post) {
            /* it takes no fields: a reason sent with it would be dropped */
            json_t *b = body_object(rq);
            char kmsg[300] = "a cancel takes no body (or {})";
            bool ok = json_is_object(b) && al_json_keys_check(b, "the body", NULL, 0, kmsg, sizeof kmsg);
            json_decref(b);
            if (!ok)
                return reply_error(c, 400, "bad_request", "%s", kmsg);
            int r = al_run_cancel(s, &p, seg[2]);
            if (r == -ENOENT)
                return reply_error(c, 404, "not_found", "no run %s", seg[2]);
            if (r == 0)
                return reply_error(c, 409, "conflict", "run %s has already ended", seg[2]);
            al_store_run *row = al_run_load(s, &p, seg[2]);
            enum MHD_Result ret = reply_json(c, 202, row ? al_run_json(s, row) : NULL);
            al_store_run_free(row);
            return ret;
        }
        return reply_error(c, n <= 4 ? 405 : 404, n <= 4 ? "method_not_allowed" : "not_found", "no such route");
    }
    if (n >= 2 && strcmp(seg[1], "skills") == 0)
        return skills_route(s, c, &p, seg, n, get, post, strcmp(method, "DELETE") == 0, rq);
    if (n == 2 && strcmp(seg[1], "settings") == 0 && (strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0))
        return put_settings(s, c, &p, rq);
    if (n == 3 && strcmp(seg[1], "audit") == 0 && strcmp(seg[2], "checkpoint") == 0)
        return get ? audit_checkpoint(s, c, &p) : reply_error(c, 405, "method_not_allowed", "use GET");
    bool known = (n == 4 && strcmp(seg[1], "threads") == 0 && strcmp(seg[3], "artifacts") == 0) ||
                 (n == 3 && strcmp(seg[1], "artifacts") == 0) ||
                 (n == 4 && strcmp(seg[1], "artifacts") == 0 && strcmp(seg[3], "content") == 0) ||
                 (n == 2 && strcmp(seg[1], "settings") == 0) || (n == 2 && strcmp(seg[1], "usage") == 0) ||
                 (n == 2 && strcmp(seg[1], "audit") == 0);
    if (known && !get)
        return reply_error(c, 405, "method_not_allowed", "use GET");
    if (n == 4 && strcmp(seg[1], "threads") == 0 && strcmp(seg[3], "artifacts") == 0)
        return thread_artifacts(s, c, &p, seg[2]);
    if (n == 3 && strcmp(seg[1], "artifacts") == 0)
        return artifact(s, c, &p, seg[2], false);
    if (n == 4 && strcmp(seg[1], "artifacts") == 0 && strcmp(seg[3], "content") == 0)
        return artifact(s, c, &p, seg[2], true);
    if (n == 2 && strcmp(seg[1], "settings") == 0)
        return settings_reply(s, c, p.workspace_id);
    if (n == 2 && strcmp(seg[1], "usage") == 0)
        return usage(s, c, &p);
    if (n == 2 && strcmp(seg[1], "audit") == 0)
        return audit(s, c, &p);
    return reply_error(c, 404, "not_found", "no such path");
}

static enum MHD_Result reply_too_many_bodies(al_service *s, struct MHD_Connection *c) {
    char msg[300];
    snprintf(msg, sizeof msg, "your requests' bodies being received come to %llu MiB already, the most one person "
             "may (body_mb_per_person); retry when one has been answered",
             (unsigned long long)(s->cfg.body_bytes_per_person >> 20));
    return reply_doc(c, 429, json_pack("{s:{s:s, s:s}}", "error", "code", "too_many_requests", "message", msg));
}

/* The first call, on the headers alone, before libmicrohttpd reads a byte of
 * the body: who asks is known here, so a request without a valid key (and
 * one that needs no key, if it comes with a body: it needs none) is
 * answered now and its body is never taken in. Answering now makes
 * libmicrohttpd close the connection instead of reading what follows. */
static enum MHD_Result admit(al_http *h, struct MHD_Connection *c, const char *url, const char *method, request *rq) {
    al_service *s = h->s;
    char seg[6][128];
    int n = split(url, seg);
    bool piston = n == 5 && strcmp(seg[0], "piston") == 0 && strcmp(seg[2], "api") == 0 && strcmp(seg[3], "v2") == 0;
    bool mcp = n == 1 && strcmp(seg[0], "mcp") == 0;
    bool v1 = n > 0 && strcmp(seg[0], "v1") == 0;
    if (!piston && !mcp && !v1) {
        /* an answer queued now closes the connection after it: only when
         * there is a body to refuse (else it keeps alive) */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if ((!cl || strcmp(cl, "0") == 0) &&
            !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            return MHD_YES;
        rq->answered = true;
        return route(h, c, url, method, rq);
    }
    const char *key = NULL;
    if (piston) {
        key = seg[1];
    } else {
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        key = auth && strncmp(auth, "Bearer ", 7) == 0 ? auth + 7 : NULL;
    }
    al_error err = { 0 };
    int a = key ? al_store_authenticate(s->store, key, &rq->p, &err) : 0;
    if (a <= 0) {
        rq->answered = true;
        if (a < 0)
            return reply_error(c, 500, "internal", "%s", err.msg);
        if (piston)
            return reply_error(c, 401, "unauthorized", "a valid API key is required in the URL: /piston/KEY/api/v2/...");
        return reply_unauthorized(c, mcp);
    }
    rq->authed = true;
    al_guard_authenticated(c);
    /* the body it declares is taken from the person's budget up front, so
     * that one more is refused on its headers, unread */
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    uint64_t len;
    if (cl && al_parse_u64(cl, &len) == 0 && len > 0 && len <= s->cfg.body_max) {
        if (!al_service_hold_bytes(s, rq->p.person_id, len)) {
            rq->answered = true;
            return reply_too_many_bodies(s, c);
        }
        rq->reserved = len;
    }
    return MHD_YES;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    al_http *h = cls;
    al_service *s = h->s;
    request *rq = *con_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        *con_cls = rq;
        rq->t0_ms = al_now_ms();
        /* a method is a token; whatever else a client sends there is not logged as sent */
        for (size_t i = 0; method[i] && i + 1 < sizeof rq->method; i++)
            rq->method[i] = method[i] >= 'A' && method[i] <= 'Z' ? method[i] : '?';
        al_http_route_pattern(url, rq->route, sizeof rq->route);
        enum MHD_Result ret = admit(h, c, url, method, rq);
        if (rq->answered)
            al_guard_answering(c);
        return ret;
    }
    if (*upload_size && rq->answered) {
        /* answered on the headers (admit): the body is nobody's */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        /* bytes past what the headers declared (a chunked body) come from
         * the person's budget too; past it we keep nothing and answer 429 */
        uint64_t want = rq->len + *upload_size;
        if (!rq->too_large && !rq->over_budget && rq->authed && want <= s->cfg.body_max && want > rq->reserved) {
            if (al_service_hold_bytes(s, rq->p.person_id, want - rq->reserved))
                rq->reserved = want;
            else
                rq->over_budget = true;
        }
        /* bodies are capped: past the cap we keep nothing and answer 413 */
        if (!rq->too_large && !rq->over_budget && rq->len + *upload_size <= s->cfg.body_max) {
            char *nb = realloc(rq->body, rq->len + *upload_size + 1);
            if (!nb)
                return MHD_NO;
            rq->body = nb;
            memcpy(rq->body + rq->len, upload, *upload_size);
            rq->len += *upload_size;
            rq->body[rq->len] = '\0';
        } else {
            rq->too_large = true;
            free(rq->body);
            rq->body = NULL;
            rq->len = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->answered)
        return MHD_YES;
    rq->answered = true;
    al_guard_answering(c);
    if (rq->over_budget)
        return reply_too_many_bodies(s, c);
    enum MHD_Result ret = route(h, c, url, method, rq);
    /* answered (or streaming): the body is no longer needed */
    free(rq->body);
    rq->body = NULL;
    rq->len = 0;
    if (rq->reserved)
        al_service_unhold_bytes(s, rq->p.person_id, rq->reserved);
    rq->reserved = 0;
    return ret;
}

/* One line per request (access_log = true): its method, route pattern,
 * status (0: none was sent), time and person, and how it ended. */
static void access_log(al_service *s, struct MHD_Connection *c, const request *rq,
                       enum MHD_RequestTerminationCode toe) {
    static const char *const ends[] = {
        [MHD_REQUEST_TERMINATED_COMPLETED_OK] = "completed", [MHD_REQUEST_TERMINATED_WITH_ERROR] = "error",
        [MHD_REQUEST_TERMINATED_TIMEOUT_REACHED] = "timeout", [MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN] = "shutdown",
        [MHD_REQUEST_TERMINATED_READ_ERROR] = "client_gone", [MHD_REQUEST_TERMINATED_CLIENT_ABORT] = "client_gone",
    };
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
    al_service_log(s, AL_LOG_INFO, "http.access",
                   json_pack("{s:s, s:s, s:i, s:I, s:s?, s:s}", "method", rq->method, "route", rq->route, "status",
                             ci ? (int)ci->http_status : 0, "ms", (json_int_t)(al_now_ms() - rq->t0_ms), "person_id",
                             rq->authed ? rq->p.person_id : NULL, "end",
                             (size_t)toe < sizeof ends / sizeof *ends && ends[toe] ? ends[toe] : "error"));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    al_http *h = cls;
    request *rq = *con_cls;
    al_guard_request_done(c);
    if (rq) {
        if (h->s->cfg.access_log)
            access_log(h->s, c, rq, toe);
        if (rq->reserved)
            al_service_unhold_bytes(h->s, rq->p.person_id, rq->reserved);
        free(rq->body);
        free(rq);
    }
    *con_cls = NULL;
}

/* Make TEXT (NUL-terminated, in place) safe to log: whatever a client put in
 * a URL or a header may be a secret (the key of a Piston URL; a query
 * string), and libmicrohttpd's messages quote the URL. So the segment after
 * "/piston/", query strings and anything shaped like an API key (al_...)
 * become "[redacted]". */
static void redact(char *text, size_t cap) {
    static const char mark[] = "[redacted]";
    char out[1024];
    size_t o = 0;
    /* one step writes at most 8 + sizeof mark bytes */
    for (const char *p = text; *p && o + 8 + sizeof mark < sizeof out;) {
        size_t skip = 0;
        if (strncmp(p, "/piston/", 8) == 0) {
            memcpy(out + o, p, 8);
            o += 8;
            p += 8;
            /* the router skips empty segments: so does this */
            p += strspn(p, "/");
            skip = strcspn(p, "/?#' \"`\t\r\n");
        } else if (*p == '?') {
            out[o++] = *p++;
            skip = strcspn(p, "#' \"`\t\r\n");
        } else if (strncmp(p, "al_", 3) == 0 && (p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                                                               (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9')))) {
            skip = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
            if (skip < 8) /* a word, not a key */
                skip = 0;
        }
        if (skip) {
            memcpy(out + o, mark, sizeof mark - 1);
            o += sizeof mark - 1;
            p += skip;
            continue;
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
    snprintf(text, cap, "%s", out);
}

/* libmicrohttpd's own messages, as our log lines (and redacted: they quote
 * URLs). */
static void mhd_log(void *cls, const char *fmt, va_list ap) _printf_(2, 0);
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    al_service *s = cls;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    redact(msg, sizeof msg);
    const char *event = NULL;
    al_log_level level = al_http_mhd_level(msg, &event);
    al_service_log(s, level, event, json_pack("{s:s}", "message", msg));
}

int al_http_start(al_service *s, al_http **ret, al_error *err) {
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->cfg.port) };
    if (inet_pton(AF_INET, s->cfg.listen_host, &sa.sin_addr) != 1)
        return al_err(err, "listen", EINVAL, "listen address %s is not an IPv4 address", s->cfg.listen_host);
    al_http *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->s = s;
    int r = al_operator_init(&h->op, &s->cfg, err);
    if (r < 0) {
        free(h);
        return r;
    }
    if ((r = al_guard_new(s->cfg.max_connections, s->cfg.connections_reserved, s->cfg.request_timeout_s,
                          &h->guard)) < 0) {
        free(h);
        return al_err(err, "listen", -r, "cannot start the connection guard");
    }
    al_metrics_cache_init(&h->metrics);
    if (al_mcp_new(&h->mcp) < 0) {
        al_guard_free(h->guard);
        al_metrics_cache_destroy(&h->metrics);
        free(h);
        return -ENOMEM;
    }
    /* an inherited listening socket (listen_fd), else one bound here: alone
     * on its address (SO_REUSEADDR only, libmicrohttpd's default) unless
     * the operator shares the port (listen_shared: SO_REUSEPORT, which lets
     * another service take part of this one's connections) */
    struct MHD_OptionItem where[] = {
        s->cfg.listen_fd >= 0 ? (struct MHD_OptionItem){ MHD_OPTION_LISTEN_SOCKET, s->cfg.listen_fd, NULL }
                              : (struct MHD_OptionItem){ MHD_OPTION_SOCK_ADDR, 0, &sa },
        s->cfg.listen_shared && s->cfg.listen_fd < 0
            ? (struct MHD_OptionItem){ MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL }
            : (struct MHD_OptionItem){ MHD_OPTION_END, 0, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    /* the logger first: libmicrohttpd reads its options in order, and what
     * it says of the options before the logger would go to its own (it
     * warned of that, through ours, at every start) */
    h->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            (uint16_t)s->cfg.port, NULL, NULL, handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                            MHD_OPTION_ARRAY, where, MHD_OPTION_NOTIFY_COMPLETED, completed, h,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.connections_per_address,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.connection_timeout_s,
                            MHD_OPTION_NOTIFY_CONNECTION, al_guard_notify, h->guard, MHD_OPTION_END);
    if (!h->d) {
        al_guard_free(h->guard);
        al_mcp_free(h->mcp);
        al_metrics_cache_destroy(&h->metrics);
        free(h);
        return al_err(err, "listen", EADDRINUSE,
                      "cannot listen on %s:%d: another program listens there, or the address is not this host's "
                      "(to share one port between services on purpose: listen_shared = true on each)",
                      s->cfg.listen_host, s->cfg.port);
    }
    *ret = h;
    return 0;
}

void al_http_stop(al_http *h) {
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    al_guard_free(h->guard);
    al_mcp_free(h->mcp);
    al_metrics_cache_destroy(&h->metrics);
    free(h);
}
