/*
 * airlock mcp: the MCP tools of a running service over stdio, for the
 * `command` entry of a local agent's MCP configuration. Each line on stdin
 * is one JSON-RPC message; it is sent to the service's /mcp (Streamable
 * HTTP) and whatever comes back, notifications of an SSE answer included,
 * is written to stdout as lines as it arrives. stdout carries only
 * protocol; what this program has to say goes to stderr.
 *
 * Requests are forwarded concurrently (a long code_execution does not hold
 * up a ping), except initialize, which is waited for: it makes the session
 * every later request names.
 *
 * An event stream that breaks before its answer (the network between here
 * and the service failed) is resumed as the transport provides: GET /mcp
 * with Last-Event-ID, a few times, so the client sees each event once and
 * gets its answer.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "cli.h"

#define LINE_MAX_BYTES (8u << 20)   /* the service's own body cap */
#define IN_FLIGHT_MAX 32
#define RESPONSE_MAX (64u << 20)
#define RESUME_TRIES 5              /* 0.5 s, 1 s, 1.5 s... apart */

typedef struct bridge {
    char url[2048];
    char auth[600];
    pthread_mutex_t mu;           /* guards the fields below and stdout */
    pthread_cond_t cond;
    char session[128];
    char version[32];
    int in_flight;
} bridge;

typedef struct exchange {
    bridge *b;
    char *line;
    json_t *id;                   /* NULL for a notification */
    bool initialize;
    /* the answer */
    bool sse;
    char session[128];
    char *body;
    size_t len;
    char *event;                  /* SSE: the data lines of the event being read */
    size_t event_len;
    char *partial;                /* SSE: a line not yet ended */
    size_t partial_len;
    char last_id[72];             /* SSE: the id of the last whole event */
    char event_id[72];            /* SSE: the id of the event being read */
    bool emitted;                 /* wrote a response for this request */
} exchange;

static void emit(bridge *b, const char *text, size_t len) {
    /* one message per line: compact JSON has no raw newline */
    pthread_mutex_lock(&b->mu);
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&b->mu);
}

static void emit_json(bridge *b, json_t *doc) {
    char *t = json_dumps(doc, JSON_COMPACT);
    if (t)
        emit(b, t, strlen(t));
    free(t);
}

static void emit_error(exchange *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit_error(exchange *x, const char *fmt, ...) {
    if (!x->id || x->emitted)
        return;
    char msg[800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *doc = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", x->id, "error", "code", -32000,
                            "message", msg);
    emit_json(x->b, doc);
    json_decref(doc);
    x->emitted = true;
}

/* A JSON-RPC message from the service: remember what initialize settled. */
static void deliver(exchange *x, const char *text, size_t len) {
    json_t *doc = json_loadb(text, len, 0, NULL);
    if (!doc) {
        fprintf(stderr, "airlock mcp: the service sent something that is not JSON; dropped\n");
        return;
    }
    if (x->id && json_equal(json_object_get(doc, "id"), x->id) &&
        (json_object_get(doc, "result") || json_object_get(doc, "error")))
        x->emitted = true;
    if (x->initialize) {
        const char *v = json_string_value(json_object_get(json_object_get(doc, "result"), "protocolVersion"));
        pthread_mutex_lock(&x->b->mu);
        if (v)
            snprintf(x->b->version, sizeof x->b->version, "%s", v);
        if (x->session[0])
            snprintf(x->b->session, sizeof x->b->session, "%s", x->session);
        pthread_mutex_unlock(&x->b->mu);
    }
    emit_json(x->b, doc);
    json_decref(doc);
}

static size_t on_header(char *buf, size_t size, size_t n, void *cls) {
    exchange *x = cls;
    size_t len = size * n;
    if (len > 13 && strncasecmp(buf, "content-type:", 13) == 0)
        x->sse = memmem(buf, len, "text/event-stream", 17) != NULL;
    if (len > 15 && strncasecmp(buf, "mcp-session-id:", 15) == 0) {
        const char *v = buf + 15;
        size_t vl = len - 15;
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        snprintf(x->session, sizeof x->session, "%.*s", (int)vl, v);
    }
    return len;
}

static bool grow(char **buf, size_t *len, const char *add, size_t n) {
    if (*len + n > RESPONSE_MAX)
        return false;
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb)
        return false;
    memcpy(nb + *len, add, n);
    *len += n;
    nb[*len] = '\0';
    *buf = nb;
    return true;
}

/* One line of an event stream (without its end of line). */
static void sse_line(exchange *x, const char *l, size_t n) {
    if (n == 0) {
        if (x->event_len)
            deliver(x, x->event, x->event_len);
        /* an id counts once its event is whole (and delivered) */
        if (x->event_id[0])
            memcpy(x->last_id, x->event_id, sizeof x->last_id);
        x->event_id[0] = '\0';
        free(x->event);
        x->event = NULL;
        x->event_len = 0;
        return;
    }
    if (n >= 3 && strncmp(l, "id:", 3) == 0) {
        const char *v = l + 3;
        size_t vl = n - 3;
        if (vl && *v == ' ')
            v++, vl--;
        if (vl < sizeof x->event_id)
            snprintf(x->event_id, sizeof x->event_id, "%.*s", (int)vl, v);
        return;
    }
    if (n >= 5 && strncmp(l, "data:", 5) == 0) {
        const char *v = l + 5;
        size_t vl = n - 5;
        if (vl && *v == ' ')
            v++, vl--;
        if (x->event_len)
            grow(&x->event, &x->event_len, "\n", 1);
        grow(&x->event, &x->event_len, v, vl);
    }
    /* event:, retry: and comments carry nothing a stdio client needs */
}

static size_t on_body(char *buf, size_t size, size_t n, void *cls) {
    exchange *x = cls;
    size_t len = size * n;
    if (!x->sse)
        return grow(&x->body, &x->len, buf, len) ? len : 0;
    /* SSE: pass each event on as it completes, so progress arrives live */
    if (!grow(&x->partial, &x->partial_len, buf, len))
        return 0;
    size_t start = 0;
    for (size_t i = 0; i < x->partial_len; i++) {
        if (x->partial[i] != '\n')
            continue;
        size_t end = i;
        if (end > start && x->partial[end - 1] == '\r')
            end--;
        sse_line(x, x->partial + start, end - start);
        start = i + 1;
    }
    memmove(x->partial, x->partial + start, x->partial_len - start);
    x->partial_len -= start;
    return len;
}

/* One HTTP exchange of X: its POST, or (LAST_ID) a GET resuming its stream. */
static CURLcode perform(exchange *x, const char *last_id, long *ret_status) {
    bridge *b = x->b;
    CURL *h = curl_easy_init();
    if (!h)
        return CURLE_FAILED_INIT;
    char session[160] = "", version[64] = "", last[100] = "";
    pthread_mutex_lock(&b->mu);
    if (b->session[0] && !x->initialize)
        snprintf(session, sizeof session, "Mcp-Session-Id: %s", b->session);
    if (b->version[0] && !x->initialize)
        snprintf(version, sizeof version, "MCP-Protocol-Version: %s", b->version);
    pthread_mutex_unlock(&b->mu);
    struct curl_slist *hdrs = NULL;
    if (last_id) {
        snprintf(last, sizeof last, "Last-Event-ID: %s", last_id);
        hdrs = curl_slist_append(hdrs, "Accept: text/event-stream");
        hdrs = curl_slist_append(hdrs, last);
    } else {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        hdrs = curl_slist_append(hdrs, "Accept: application/json, text/event-stream");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, x->line);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(x->line));
    }
    hdrs = curl_slist_append(hdrs, b->auth);
    if (session[0])
        hdrs = curl_slist_append(hdrs, session);
    if (version[0])
        hdrs = curl_slist_append(hdrs, version);
    curl_easy_setopt(h, CURLOPT_URL, b->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(h);
    *ret_status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, ret_status);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return rc;
}

/* Forget a broken answer's partial state before the next exchange. */
static void reset_answer(exchange *x) {
    x->sse = false;
    free(x->body);
    free(x->event);
    free(x->partial);
    x->body = x->event = x->partial = NULL;
    x->len = x->event_len = x->partial_len = 0;
    x->event_id[0] = '\0';
}

static void forward(exchange *x) {
    bridge *b = x->b;
    long status = 0;
    CURLcode rc = perform(x, NULL, &status);
    bool resumed = false;
    /* a stream that broke before its answer: resume it after its last id */
    for (int i = 1; i <= RESUME_TRIES && x->sse && !x->emitted && x->id && x->last_id[0] &&
                    (rc != CURLE_OK || status == 200);
         i++) {
        if (rc != CURLE_OK)
            fprintf(stderr, "airlock mcp: the stream of a request broke (%s); resuming after event %s\n",
                    curl_easy_strerror(rc), x->last_id);
        struct timespec ts = { .tv_sec = i / 2, .tv_nsec = (i % 2) * 500000000L };
        nanosleep(&ts, NULL);
        char last[72];
        memcpy(last, x->last_id, sizeof last);
        reset_answer(x);
        resumed = true;
        rc = perform(x, last, &status);
        if (rc == CURLE_OK && status != 200)
            break; /* the service said why it cannot (410 gone, 404 session): below */
    }
    if (rc != CURLE_OK) {
        emit_error(x, "airlock mcp: cannot reach the service at %s: %s", b->url, curl_easy_strerror(rc));
    } else if (x->sse) {
        if (x->partial_len)
            sse_line(x, x->partial, x->partial_len);
        sse_line(x, "", 0); /* an event the stream ended without a blank line after */
        if (!x->emitted)
            emit_error(x, "airlock mcp: the service's stream ended without an answer");
    } else if (x->len) {
        json_t *doc = json_loadb(x->body, x->len, 0, NULL);
        if (doc && json_object_get(doc, "jsonrpc") && (!resumed || !json_is_null(json_object_get(doc, "id")))) {
            deliver(x, x->body, x->len);
        } else {
            /* not JSON-RPC for this request (401 from the key check, a
             * resume refused): tell the client why */
            const char *m = json_string_value(json_object_get(json_object_get(doc, "error"), "message"));
            emit_error(x, "airlock mcp: HTTP %ld from %s: %s", status, b->url, m ? m : "(no JSON-RPC answer)");
        }
        json_decref(doc);
    } else if (x->id) {
        emit_error(x, "airlock mcp: HTTP %ld from %s with no answer", status, b->url);
    }
}

static void exchange_free(exchange *x) {
    free(x->line);
    json_decref(x->id);
    free(x->body);
    free(x->event);
    free(x->partial);
    free(x);
}

static void *worker(void *arg) {
    exchange *x = arg;
    bridge *b = x->b;
    forward(x);
    exchange_free(x);
    pthread_mutex_lock(&b->mu);
    b->in_flight--;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static void end_session(bridge *b) {
    if (!b->session[0])
        return;
    CURL *h = curl_easy_init();
    if (!h)
        return;
    char session[160];
    snprintf(session, sizeof session, "Mcp-Session-Id: %s", b->session);
    struct curl_slist *hdrs = curl_slist_append(NULL, b->auth);
    hdrs = curl_slist_append(hdrs, session);
    curl_easy_setopt(h, CURLOPT_URL, b->url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    curl_easy_perform(h);
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
}

static volatile sig_atomic_t terminated;

static void on_term(int sig) { terminated = sig; }

static int usage(FILE *f) {
    fprintf(f, "usage: airlock mcp [--url URL] [--key KEY]\n"
               "       airlock mcp --local [--state DIR]\n\n"
               "MCP over stdio (one JSON-RPC message per line), forwarded to the service's /mcp.\n"
               "  --url URL    the service (default $AIRLOCK_URL, else http://127.0.0.1:8080)\n"
               "  --key KEY    an API key (default $AIRLOCK_API_KEY)\n"
               "  --local      no service to set up: start a private one on this machine\n"
               "  --state DIR  its state (default $AIRLOCK_STATE/mcp-local, else /var/lib/airlock/mcp-local)\n");
    return f == stdout ? 0 : 125;
}

/* End the private service of --local, if any, and wait for it. */
static void stop_local(pid_t pid) {
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* One message LINE (N bytes) of the client: to the service, on a worker
 * thread of its own (initialize on this one: nothing else goes before its
 * session); false when out of memory. */
static bool dispatch(bridge *b, char *line, ssize_t n) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    if (n == 0)
        return true;
    if ((size_t)n > LINE_MAX_BYTES) {
        fprintf(stderr, "airlock mcp: a message of %zd bytes is over the %u MiB cap; dropped\n", n, LINE_MAX_BYTES >> 20);
        json_t *e = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code", -32600, "message",
                              "Invalid Request: the message is too large");
        emit_json(b, e);
        json_decref(e);
        return true;
    }
    exchange *x = calloc(1, sizeof *x);
    if (!x || !(x->line = strdup(line))) {
        free(x);
        fprintf(stderr, "airlock mcp: out of memory\n");
        return false;
    }
    x->b = b;
    /* a message we cannot parse still goes to the service, which
     * answers it with the right JSON-RPC error */
    json_t *msg = json_loads(line, 0, NULL);
    json_t *id = json_object_get(msg, "id");
    if (id && json_object_get(msg, "method"))
        x->id = json_incref(id);
    x->initialize = json_is_string(json_object_get(msg, "method")) &&
                    strcmp(json_string_value(json_object_get(msg, "method")), "initialize") == 0;
    json_decref(msg);
    pthread_mutex_lock(&b->mu);
    while (b->in_flight >= IN_FLIGHT_MAX)
        pthread_cond_wait(&b->cond, &b->mu);
    b->in_flight++;
    pthread_mutex_unlock(&b->mu);
    if (x->initialize) {
        worker(x);
        return true;
    }
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* workers (and curl's resolver threads) block the signals, so they
     * reach this thread and interrupt its getline */
    sigset_t all, old;
    sigemptyset(&all);
    sigaddset(&all, SIGTERM);
    sigaddset(&all, SIGINT);
    sigaddset(&all, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int pr = pthread_create(&t, &attr, worker, x);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pr != 0)
        worker(x);
    pthread_attr_destroy(&attr);
    return true;
}

int cli_mcp(int argc, char **argv) {
    const char *url = getenv("AIRLOCK_URL"), *key = getenv("AIRLOCK_API_KEY"), *state = NULL;
    bool local = false, given = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
            url = argv[++i];
            given = true;
        } else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc) {
            key = argv[++i];
            given = true;
        } else if (strcmp(argv[i], "--local") == 0)
            local = true;
        else if (strcmp(argv[i], "--state") == 0 && i + 1 < argc)
            state = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return usage(stdout);
        else
            return usage(stderr);
    }
    if ((local && given) || (state && !local)) {
        fprintf(stderr, "airlock mcp: --local (with --state) or --url and --key, not both\n");
        return 125;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) {
        fprintf(stderr, "airlock mcp: cannot start libcurl\n");
        return 1;
    }
    static char local_url[64], local_key[128], local_state[PATH_MAX];
    pid_t server = -1;
    int lock = -1;
    if (local) {
        if (!state) {
            const char *base = getenv("AIRLOCK_STATE");
            snprintf(local_state, sizeof local_state, "%s/mcp-local", base && *base ? base : "/var/lib/airlock");
            state = local_state;
        }
        int r = cli_mcp_local(state, local_url, sizeof local_url, local_key, sizeof local_key, &server, &lock);
        if (r != 0)
            return r;
        url = local_url;
        key = local_key;
    }
    if (!url || !*url)
        url = "http://127.0.0.1:8080";
    if (!key || !*key) {
        fprintf(stderr, "airlock mcp: an API key is needed: --key KEY or AIRLOCK_API_KEY\n");
        return 125;
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        fprintf(stderr, "airlock mcp: --url must be an http:// or https:// URL\n");
        return 125;
    }
    static bridge b;
    size_t ul = strlen(url);
    while (ul && url[ul - 1] == '/')
        ul--;
    if (ul + 8 >= sizeof b.url || strlen(key) + 32 >= sizeof b.auth) {
        fprintf(stderr, "airlock mcp: the URL or key is too long\n");
        return 125;
    }
    /* the service's /mcp, however the URL was given */
    snprintf(b.url, sizeof b.url, "%.*s%s", (int)ul, url, ul >= 4 && strncmp(url + ul - 4, "/mcp", 4) == 0 ? "" : "/mcp");
    snprintf(b.auth, sizeof b.auth, "Authorization: Bearer %s", key);
    pthread_mutex_init(&b.mu, NULL);
    pthread_cond_init(&b.cond, NULL);
    /* a client stopping us (SIGTERM after closing stdin, as the SDK's stdio
     * transport does) still gets its session ended: getline is interrupted
     * (no SA_RESTART) and we leave without waiting for calls under way */
    struct sigaction sa = { .sa_handler = on_term };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (!terminated && (n = getline(&line, &cap, stdin)) >= 0) {
        if (!dispatch(&b, line, n))
            break;
    }
    free(line);
    if (terminated) {
        /* the session is only set by initialize, which this thread waited for */
        end_session(&b);
        stop_local(server);
        fprintf(stderr, "airlock mcp: stopped by signal %d\n", (int)terminated);
        /* calls under way are abandoned: their runs end on their own */
        _exit(0);
    }
    /* stdin closed: the client is done; let what is under way finish */
    pthread_mutex_lock(&b.mu);
    while (b.in_flight > 0)
        pthread_cond_wait(&b.cond, &b.mu);
    pthread_mutex_unlock(&b.mu);
    end_session(&b);
    stop_local(server);
    if (lock >= 0)
        close(lock);
    curl_global_cleanup();
    return 0;
}
