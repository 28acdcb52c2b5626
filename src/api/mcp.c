/*
 * MCP over the Streamable HTTP transport: each POST /mcp carries one
 * JSON-RPC 2.0 message. A request is answered with one JSON response, or,
 * for a tools/call that started a run and a client that accepts
 * text/event-stream, with an SSE stream of notifications (progress, live
 * output, approval waits) that ends with the response. Sessions (the
 * Mcp-Session-Id header) are made by initialize, bound to the person whose
 * key made them, kept in memory (a restart ends them: clients then get 404
 * and initialize again, as the specification says), and ended by DELETE.
 * There is no server-initiated stream: GET answers 405, unless it carries
 * Last-Event-ID, which resumes a tools/call stream (below). A client's
 * notifications/cancelled for a tools/call under way cancels its run.
 */
#include <string.h>
#include <sys/random.h>

#include "http.h"
#include "mcp.h"
#include "mcp_tools.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

#define SESSIONS_MAX 4096
#define SESSIONS_PER_PERSON_MAX 64
#define SESSION_IDLE_MS (24ull * 3600 * 1000) /* an idle session is forgotten after a day */
#define KEEPALIVE_S 15
#define INFLIGHT_MAX 1024 /* tools/call under way (followed or parked) service-wide */
/* tools/call that one person's connections follow at once (a JSON answer
 * holds its connection's thread until the run ends; so does an event
 * stream): one person cannot take every connection of the service */
#define CALLS_PER_PERSON_MAX 16

typedef struct session {
    char id[33];
    char person_id[40];
    char version[16];
    int log_level; /* index into levels: the least severe a client wants */
    uint64_t last_ms;
    uint64_t streams;  /* event streams made: the next one's number */
} session;

/* A tools/call under way, so notifications/cancelled can find it and each
 * person's calls can be counted. */
typedef struct inflight {
    char session[33]; /* empty: a free slot */
    char person[40];
    char request[72]; /* the request's id as compact JSON ("" when too long to find) */
    char run_id[40];
    bool attached;    /* a connection follows it (else its stream is parked) */
} inflight;

typedef struct rstream rstream;

struct al_mcp {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* a stream's connection let go */
    session *sessions; /* SESSIONS_MAX slots; id[0] == 0 is free */
    inflight *calls;   /* INFLIGHT_MAX slots */
    rstream *streams;  /* resumable tools/call streams (below) */
};

static void rstream_drop(al_mcp *m, rstream *rs);
static void rstreams_end_session(al_mcp *m, const char *sid);

static const char *const levels[] = { "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency" };

int al_mcp_new(al_mcp **ret) {
    al_mcp *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->sessions = calloc(SESSIONS_MAX, sizeof *m->sessions);
    m->calls = calloc(INFLIGHT_MAX, sizeof *m->calls);
    if (!m->sessions || !m->calls) {
        free(m->sessions);
        free(m->calls);
        free(m);
        return -ENOMEM;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cond, NULL);
    *ret = m;
    return 0;
}

void al_mcp_free(al_mcp *m) {
    if (!m)
        return;
    while (m->streams)
        rstream_drop(m, m->streams);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->mu);
    free(m->sessions);
    free(m->calls);
    free(m);
}

/* ------------------------------------------------------------- sessions */

/* A new session for P; false when every slot is taken by a live one. */
static bool session_new(al_mcp *m, const al_principal *p, const char *version, char ret_id[33]) {
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd)
        return false;
    for (int i = 0; i < 16; i++)
        snprintf(ret_id + 2 * i, 3, "%02x", rnd[i]);
    uint64_t now = al_now_ms();
    pthread_mutex_lock(&m->mu);
    session *slot = NULL, *oldest = NULL, *own_oldest = NULL;
    int own = 0;
    for (int i = 0; i < SESSIONS_MAX; i++) {
        session *x = &m->sessions[i];
        if (!x->id[0] || now - x->last_ms > SESSION_IDLE_MS) {
            if (!slot)
                slot = x;
            continue;
        }
        if (strcmp(x->person_id, p->person_id) == 0) {
            own++;
            if (!own_oldest || x->last_ms < own_oldest->last_ms)
                own_oldest = x;
        }
        if (!oldest || x->last_ms < oldest->last_ms)
            oldest = x;
    }
    /* a person's many sessions (a client that never says DELETE) push out
     * that person's own oldest, not other people's; a table full of live
     * sessions gives up its least recently used one (its client gets 404
     * and initializes again) rather than refusing a new client */
    if (own >= SESSIONS_PER_PERSON_MAX)
        slot = own_oldest;
    else if (!slot)
        slot = oldest;
    memset(slot, 0, sizeof *slot);
    memcpy(slot->id, ret_id, 33);
    snprintf(slot->person_id, sizeof slot->person_id, "%s", p->person_id);
    snprintf(slot->version, sizeof slot->version, "%s", version);
    slot->last_ms = now;
    pthread_mutex_unlock(&m->mu);
    return true;
}

/* Find session ID of P and copy it to RET; false when there is none (or it is another person's). */
static bool session_get(al_mcp *m, const char *id, const al_principal *p, session *ret) {
    bool found = false;
    if (strlen(id) != 32)
        return false;
    uint64_t now = al_now_ms();
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX && !found; i++) {
        session *x = &m->sessions[i];
        if (x->id[0] && strcmp(x->id, id) == 0 && strcmp(x->person_id, p->person_id) == 0 &&
            now - x->last_ms <= SESSION_IDLE_MS) {
            x->last_ms = now;
            *ret = *x;
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return found;
}

static void session_set_level(al_mcp *m, const char *id, int level) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX; i++)
        if (strcmp(m->sessions[i].id, id) == 0)
            m->sessions[i].log_level = level;
    pthread_mutex_unlock(&m->mu);
}

/* The number of session ID's next event stream (from 1). Under m->mu. */
static uint64_t session_next_stream(al_mcp *m, const char *id) {
    for (int i = 0; i < SESSIONS_MAX; i++)
        if (strcmp(m->sessions[i].id, id) == 0)
            return ++m->sessions[i].streams;
    return 0;
}

static bool session_end(al_mcp *m, const char *id, const al_principal *p) {
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < SESSIONS_MAX; i++) {
        session *x = &m->sessions[i];
        if (x->id[0] && strcmp(x->id, id) == 0 && strcmp(x->person_id, p->person_id) == 0) {
            memset(x, 0, sizeof *x);
            found = true;
        }
    }
    if (found)
        rstreams_end_session(m, id);
    pthread_mutex_unlock(&m->mu);
    return found;
}

/* ------------------------------------------------------ calls under way */

/* The number of P's calls that connections follow. Under m->mu. */
static int inflight_attached(al_mcp *m, const char *person) {
    int n = 0;
    for (int i = 0; i < INFLIGHT_MAX; i++)
        n += m->calls[i].session[0] && m->calls[i].attached && strcmp(m->calls[i].person, person) == 0;
    return n;
}

static void rstreams_reap(al_mcp *m, const char *sid);

/* A slot for request ID of session SID of PERSON, followed by this
 * connection; -EBUSY when PERSON has CALLS_PER_PERSON_MAX followed already,
 * -EAGAIN when the service has INFLIGHT_MAX under way. */
static int inflight_take(al_mcp *m, const char *sid, const char *person, json_t *id) {
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    int slot = -EAGAIN;
    pthread_mutex_lock(&m->mu);
    if (inflight_attached(m, person) >= CALLS_PER_PERSON_MAX) {
        slot = -EBUSY;
        goto out;
    }
    rstreams_reap(m, NULL); /* parked streams past their time give their slots back */
    for (int i = 0; i < INFLIGHT_MAX && slot < 0; i++) {
        inflight *x = &m->calls[i];
        if (x->session[0])
            continue;
        memset(x, 0, sizeof *x);
        snprintf(x->session, sizeof x->session, "%s", sid);
        snprintf(x->person, sizeof x->person, "%s", person);
        if (key && strlen(key) < sizeof x->request)
            snprintf(x->request, sizeof x->request, "%s", key);
        x->attached = true;
        slot = i;
    }
out:
    pthread_mutex_unlock(&m->mu);
    free(key);
    return slot;
}

static void inflight_set_run(al_mcp *m, int slot, const char *run_id) {
    pthread_mutex_lock(&m->mu);
    snprintf(m->calls[slot].run_id, sizeof m->calls[slot].run_id, "%s", run_id);
    pthread_mutex_unlock(&m->mu);
}

static void inflight_del(al_mcp *m, int slot) {
    if (slot < 0)
        return;
    pthread_mutex_lock(&m->mu);
    memset(&m->calls[slot], 0, sizeof m->calls[slot]);
    pthread_mutex_unlock(&m->mu);
}

static bool inflight_find(al_mcp *m, const char *sid, json_t *id, char ret_run_id[40]) {
    char *key = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
    bool found = false;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; key && i < INFLIGHT_MAX && !found; i++) {
        inflight *x = &m->calls[i];
        if (x->session[0] && x->request[0] && x->run_id[0] && strcmp(x->session, sid) == 0 &&
            strcmp(x->request, key) == 0) {
            memcpy(ret_run_id, x->run_id, sizeof x->run_id);
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    free(key);
    return found;
}

/* -------------------------------------------------------------- replies */

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *doc, const char *session_id) {
    char *t = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!t) {
        /* an answer that could not be built is still an answer */
        status = 500;
        t = strdup("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":\"Internal error: "
                   "the response could not be built\"}}");
        if (!t)
            return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    if (session_id)
        MHD_add_response_header(r, "Mcp-Session-Id", session_id);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* A JSON-RPC error response with HTTP STATUS. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt,
                                  ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(c, status, al_mcp_rpc_error(id, code, "%s", msg), NULL);
}

static enum MHD_Result send_empty(struct MHD_Connection *c, unsigned status, const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* ------------------------------------------------------------ streaming */

/*
 * A tools/call's event stream is resumable (the transport's "Resumability
 * and Redelivery"): every event carries an id "<stream>-<seq>" (the stream's
 * number within its session, then the event's within the stream), and the
 * events are kept in a replay buffer. A client that lost the stream sends
 * GET /mcp with its Mcp-Session-Id and Last-Event-ID, and gets the events
 * after that one, then the rest as the run goes on, ending with the
 * response. The call itself follows the run's event log in the store, so
 * a stream no one reads loses nothing: it is parked, and whoever resumes it
 * steps it on.
 *
 * Bounds: per session, the kept events (responses included) are at most
 * REPLAY_EVENTS_MAX and REPLAY_BYTES_MAX; past them the oldest notifications
 * already handed to a connection are dropped, and a resume from before
 * them is first told, by a warning notification, how many it missed and
 * where the run's full record is. A response is never cut: when the
 * notifications are not enough, the session's oldest parked stream is
 * forgotten whole (but not its only stream). Per person, at most PARKED_PER_PERSON_MAX parked streams
 * and REPLAY_BYTES_PERSON_MAX bytes in all streams are kept, past which
 * that person's oldest parked stream is forgotten (never another person's).
 * At most STREAMS_PER_SESSION_MAX streams are kept per session (its oldest
 * parked one gives way), a parked stream for PARKED_MS, and a stream whose
 * response was delivered is forgotten. Every stream holds an in-flight
 * slot, so there are at most INFLIGHT_MAX service-wide.
 */
#define REPLAY_EVENTS_MAX 512
#define REPLAY_BYTES_MAX (2u << 20)
#define REPLAY_BYTES_PERSON_MAX (16u << 20)
#define STREAMS_PER_SESSION_MAX 16
#define PARKED_PER_PERSON_MAX 32
#define PARKED_MS (10ull * 60 * 1000)
#define TAKEOVER_WAIT_S 20            /* for the old connection to let go: longer than one step */

typedef struct sse_event {
    struct sse_event *next;
    uint64_t seq;
    bool final;                       /* the JSON-RPC response */
    size_t len;
    char text[];                      /* the whole SSE event */
} sse_event;

struct rstream {
    struct rstream *next;
    char session[33];
    char person[40];
    uint64_t no;                      /* within the session */
    char run_id[40];
    int slot;                         /* in m->calls */
    al_mcp_call *k;                   /* NULL once the response is an event */
    json_t *id;
    bool send_output;
    sse_event *head, *tail;
    size_t count, bytes;
    uint64_t next_seq, handed;        /* handed: the newest event given to a connection */
    uint64_t dropped;                 /* events dropped for the bounds: seq 1..dropped at most */
    bool reading;                     /* a connection reads it */
    bool superseded;                  /* a resume waits for that connection to let go */
    uint64_t parked_ms;
};

static void event_free_all(rstream *rs) {
    for (sse_event *e = rs->head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    rs->head = rs->tail = NULL;
    rs->count = rs->bytes = 0;
}

/* Take RS out of the list and free it. Under m->mu. */
static void rstream_drop(al_mcp *m, rstream *rs) {
    for (rstream **pp = &m->streams; *pp; pp = &(*pp)->next)
        if (*pp == rs) {
            *pp = rs->next;
            break;
        }
    if (rs->slot >= 0)
        memset(&m->calls[rs->slot], 0, sizeof m->calls[rs->slot]);
    event_free_all(rs);
    al_mcp_call_free(rs->k);
    json_decref(rs->id);
    free(rs);
}

/* Session SID ended: its parked streams can no longer be resumed (read
 * ones end with their connections). Under m->mu. */
static void rstreams_end_session(al_mcp *m, const char *sid) {
    for (rstream *rs = m->streams, *n; rs; rs = n) {
        n = rs->next;
        if (strcmp(rs->session, sid) == 0 && !rs->reading)
            rstream_drop(m, rs);
    }
}

/* Forget parked streams past their time; make room for one more stream of
 * session SID (when given) by forgetting its own oldest parked one, never
 * another session's. Under m->mu. */
static void rstreams_reap(al_mcp *m, const char *sid) {
    uint64_t now = al_now_ms();
    int own = 0;
    rstream *own_oldest = NULL;
    for (rstream *rs = m->streams, *n; rs; rs = n) {
        n = rs->next;
        if (!rs->reading && now - rs->parked_ms > PARKED_MS) {
            rstream_drop(m, rs);
            continue;
        }
        bool mine = sid && strcmp(rs->session, sid) == 0;
        own += mine;
        if (mine && !rs->reading && (!own_oldest || rs->parked_ms < own_oldest->parked_ms))
            own_oldest = rs;
    }
    if (sid && own >= STREAMS_PER_SESSION_MAX && own_oldest)
        rstream_drop(m, own_oldest);
}

/* Keep PERSON within PARKED_PER_PERSON_MAX parked streams and
 * REPLAY_BYTES_PERSON_MAX kept bytes: forget that person's oldest parked
 * streams (streams connections read stay). Under m->mu. */
static void person_bound(al_mcp *m, const char *person) {
    for (;;) {
        int parked = 0;
        size_t bytes = 0;
        rstream *oldest = NULL;
        for (rstream *rs = m->streams; rs; rs = rs->next) {
            if (strcmp(rs->person, person) != 0)
                continue;
            bytes += rs->bytes;
            if (rs->reading)
                continue;
            parked++;
            if (!oldest || rs->parked_ms < oldest->parked_ms)
                oldest = rs;
        }
        if (!oldest || (parked <= PARKED_PER_PERSON_MAX && bytes <= REPLAY_BYTES_PERSON_MAX))
            return;
        rstream_drop(m, oldest);
    }
}

/* Keep the session of RS within the replay bounds: drop its streams' oldest
 * notifications that a connection has had (a connected client has them;
 * a resume from before them is told). Under m->mu. */
static void replay_bound(al_mcp *m, const char *sid) {
    for (;;) {
        size_t count = 0, bytes = 0, streams = 0;
        rstream *victim = NULL, *parked = NULL;
        for (rstream *rs = m->streams; rs; rs = rs->next) {
            if (strcmp(rs->session, sid) != 0)
                continue;
            streams++;
            count += rs->count;
            bytes += rs->bytes;
            if (!rs->reading && (!parked || rs->parked_ms < parked->parked_ms))
                parked = rs;
            sse_event *e = rs->head;
            /* the lowest seq of the stream parked longest, else any */
            if (e && !e->final && e->seq <= rs->handed &&
                (!victim || (!rs->reading && (victim->reading || rs->parked_ms < victim->parked_ms))))
                victim = rs;
        }
        if (count <= REPLAY_EVENTS_MAX && bytes <= REPLAY_BYTES_MAX)
            return;
        if (!victim) {
            /* only responses (and unread news) are left: the oldest parked
             * stream goes whole, as a response is never cut; the last
             * stream of the session stays (one large response, say with
             * images, can be resumed; the person's bound still holds) */
            if (!parked || streams <= 1)
                return;
            rstream_drop(m, parked);
            continue;
        }
        sse_event *e = victim->head;
        victim->head = e->next;
        if (!victim->head)
            victim->tail = NULL;
        victim->count--;
        victim->bytes -= e->len;
        victim->dropped = e->seq;
        free(e);
    }
}

/* Append MSG to RS as its next event. Under m->mu. */
static void event_add(al_mcp *m, rstream *rs, json_t *msg, bool final) {
    char *t = json_dumps(msg, JSON_COMPACT);
    if (!t)
        return;
    /* compact JSON has no newline, so one data line holds it */
    size_t n = strlen(t) + 96;
    sse_event *e = malloc(sizeof *e + n);
    if (e) {
        e->next = NULL;
        e->seq = ++rs->next_seq;
        e->final = final;
        e->len = (size_t)snprintf(e->text, n, "id: %llu-%llu\nevent: message\ndata: %s\n\n", (unsigned long long)rs->no,
                                  (unsigned long long)e->seq, t);
        if (rs->tail)
            rs->tail->next = e;
        else
            rs->head = e;
        rs->tail = e;
        rs->count++;
        rs->bytes += e->len;
    }
    free(t);
}

/* One connection reading a stream (the POST that started it, or a GET
 * that resumed it). */
typedef struct reader {
    al_mcp *m;
    rstream *rs;
    uint64_t sent;                    /* the newest event handed to this connection */
    char *buf;
    size_t len, pos;
    bool ended;                       /* the response is in buf */
    bool delivered;                   /* ...and was taken by the connection */
} reader;

static void buf_add(reader *r, const char *text, size_t n) {
    char *nb = realloc(r->buf, r->len + n + 1);
    if (!nb)
        return;
    r->buf = nb;
    memcpy(r->buf + r->len, text, n);
    r->len += n;
    r->buf[r->len] = '\0';
}

static ssize_t stream_read(void *cls, uint64_t off, char *out, size_t max) {
    reader *r = cls;
    al_mcp *m = r->m;
    rstream *rs = r->rs;
    while (r->pos >= r->len) {
        free(r->buf);
        r->buf = NULL;
        r->len = r->pos = 0;
        if (r->ended) {
            r->delivered = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        pthread_mutex_lock(&m->mu);
        if (rs->superseded) {
            /* a resume on another connection takes over: this one ends as
             * any stream does (its client has most likely left; an error
             * here would be logged as the service's own) */
            pthread_mutex_unlock(&m->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        for (sse_event *e = rs->head; e; e = e->next)
            if (e->seq > r->sent) {
                buf_add(r, e->text, e->len);
                r->sent = e->seq;
                r->ended |= e->final;
            }
        if (r->sent > rs->handed)
            rs->handed = r->sent;
        al_mcp_call *k = rs->k;
        pthread_mutex_unlock(&m->mu);
        if (r->len)
            break;
        if (!k) {
            /* the response is made and this client had it (a resume from
             * its id or later): the stream is over */
            r->delivered = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        /* only this connection steps the call: others wait for it to let go */
        json_t *notes = json_array(), *result = NULL;
        bool quiet = al_mcp_call_step(k, KEEPALIVE_S, rs->send_output, notes, &result);
        pthread_mutex_lock(&m->mu);
        size_t i;
        json_t *n;
        json_array_foreach(notes, i, n) event_add(m, rs, n, false);
        if (result) {
            json_t *resp = al_mcp_rpc_result(rs->id, result);
            event_add(m, rs, resp, true);
            json_decref(resp);
            rs->k = NULL;
        }
        bool added = json_array_size(notes) > 0 || result;
        replay_bound(m, rs->session);
        person_bound(m, rs->person);
        pthread_mutex_unlock(&m->mu);
        json_decref(notes);
        if (result)
            al_mcp_call_free(k);
        if (!added && quiet)
            /* a comment keeps proxies and clients from giving up on a quiet stream */
            buf_add(r, ": keepalive\n\n", 13);
    }
    size_t n = r->len - r->pos < max ? r->len - r->pos : max;
    memcpy(out, r->buf + r->pos, n);
    r->pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    reader *r = cls;
    al_mcp *m = r->m;
    pthread_mutex_lock(&m->mu);
    if (r->delivered) {
        /* the response went out: nothing is left to resume */
        rstream_drop(m, r->rs);
    } else {
        /* a client that went away does not cancel the run (the specification:
         * a disconnect is not a cancellation); its stream waits to be resumed */
        rstream *rs = r->rs;
        rs->reading = false;
        rs->superseded = false;
        rs->parked_ms = al_now_ms();
        m->calls[rs->slot].attached = false;
        /* RS may go here: the reader is done with it */
        replay_bound(m, rs->session);
        person_bound(m, rs->person);
    }
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
    free(r->buf);
    free(r);
}

static enum MHD_Result send_stream(struct MHD_Connection *c, reader *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_read, r, stream_free);
    if (!resp) {
        stream_free(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Follow call K of request ID to its end, as one JSON answer or an event
 * stream; it holds in-flight SLOT (given up here, or with the stream). */
static enum MHD_Result follow(al_mcp *m, const session *sess, const al_principal *p, struct MHD_Connection *c,
                              al_mcp_call *k, json_t *id, bool sse, bool send_output, int slot) {
    inflight_set_run(m, slot, al_mcp_call_run_id(k));
    if (!sse) {
        /* plain JSON: wait here for the end, sending nothing before it */
        json_t *result = NULL;
        while (!result) {
            json_t *notes = json_array();
            al_mcp_call_step(k, KEEPALIVE_S, false, notes, &result);
            json_decref(notes);
        }
        inflight_del(m, slot);
        al_mcp_call_free(k);
        return send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
    }
    rstream *rs = calloc(1, sizeof *rs);
    reader *r = calloc(1, sizeof *r);
    if (!rs || !r) {
        free(rs);
        free(r);
        inflight_del(m, slot);
        al_mcp_call_free(k);
        return MHD_NO;
    }
    memcpy(rs->session, sess->id, sizeof rs->session);
    snprintf(rs->person, sizeof rs->person, "%s", p->person_id);
    snprintf(rs->run_id, sizeof rs->run_id, "%s", al_mcp_call_run_id(k));
    rs->slot = slot;
    rs->k = k;
    rs->id = json_incref(id);
    rs->send_output = send_output;
    rs->reading = true;
    r->m = m;
    r->rs = rs;
    pthread_mutex_lock(&m->mu);
    rstreams_reap(m, sess->id);
    rs->no = session_next_stream(m, sess->id);
    rs->next = m->streams;
    m->streams = rs;
    pthread_mutex_unlock(&m->mu);
    /* 2025-11-25: an event with an id and no data first, so a client that
     * loses the stream before any news can still resume it (older clients
     * cannot parse an empty event: they get none) */
    if (strcmp(sess->version, "2025-11-25") >= 0) {
        char prime[64];
        int n = snprintf(prime, sizeof prime, "id: %llu-0\ndata: \n\n", (unsigned long long)rs->no);
        buf_add(r, prime, (size_t)n);
    }
    return send_stream(c, r);
}

/* Stream NO of session SID, or NULL. By number, never by a pointer kept
 * across an unlock: a stream forgotten meanwhile may have been freed, and
 * its address reused by another session's. Under m->mu. */
static rstream *stream_find(al_mcp *m, const char *sid, uint64_t no) {
    for (rstream *x = m->streams; x; x = x->next)
        if (x->no == no && strcmp(x->session, sid) == 0)
            return x;
    return NULL;
}

/* GET /mcp with Last-Event-ID: resume the stream that event belongs to. */
static enum MHD_Result resume(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *last) {
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    session sess;
    if (!sid)
        return send_error(c, 400, NULL, -32000, "Bad Request: the Mcp-Session-Id header is required");
    if (!session_get(m, sid, p, &sess))
        return send_error(c, 404, NULL, -32001, "Session not found: it ended, never existed, or lives on another airlock node (sessions stay on the node that made them); initialize again");
    unsigned long long no = 0, seq = 0;
    int used = 0;
    if (strlen(last) > 41 || sscanf(last, "%llu-%llu%n", &no, &seq, &used) != 2 || (size_t)used != strlen(last) ||
        last[0] == '-' || last[0] == '+' || strchr(last, ' '))
        return send_error(c, 400, NULL, -32000, "Bad Request: Last-Event-ID %.64s is not an event id of this server",
                          last);
    pthread_mutex_lock(&m->mu);
    rstreams_reap(m, NULL);
    rstream *rs = stream_find(m, sess.id, no);
    if (rs && rs->reading) {
        /* the old connection may not know yet that its client left: it lets
         * go at its next step, which the wake-up makes come now. Once m->mu
         * is let go, RS may be freed: only its numbers find it again. */
        rs->superseded = true;
        for (int i = 0; i < TAKEOVER_WAIT_S; i++) {
            pthread_mutex_unlock(&m->mu);
            al_service_wake_all(s);
            pthread_mutex_lock(&m->mu);
            /* it may have let go, or been delivered and forgotten, meanwhile */
            rs = stream_find(m, sess.id, no);
            if (!rs || !rs->reading)
                break;
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&m->cond, &m->mu, &until);
            rs = stream_find(m, sess.id, no);
            if (!rs || !rs->reading)
                break;
        }
    }
    if (rs && !rs->reading && seq > rs->next_seq) {
        pthread_mutex_unlock(&m->mu);
        return send_error(c, 400, NULL, -32000, "Bad Request: Last-Event-ID %.64s is past the stream's last event",
                          last);
    }
    if (!rs || rs->reading) {
        bool busy = rs && rs->reading;
        if (rs)
            rs->superseded = false;
        pthread_mutex_unlock(&m->mu);
        if (busy)
            return send_error(c, 409, NULL, -32000, "Conflict: another connection still reads the stream of event %.64s",
                              last);
        return send_error(c, 410, NULL, -32000,
                          "Gone: the stream of event %.64s is no longer kept (its response was delivered, it waited "
                          "unread for more than %llu minutes, or newer streams of the session pushed it out); a "
                          "run's record stays at GET /v1/runs/{id}",
                          last, PARKED_MS / 60000);
    }
    if (inflight_attached(m, p->person_id) >= CALLS_PER_PERSON_MAX) {
        pthread_mutex_unlock(&m->mu);
        return send_error(c, 429, NULL, -32000,
                          "Too Many Requests: at most %d tools/call of one person are followed at once (JSON "
                          "answers, event streams and their resumptions); resume when one has ended",
                          CALLS_PER_PERSON_MAX);
    }
    rs->reading = true;
    rs->superseded = false;
    rs->parked_ms = 0;
    m->calls[rs->slot].attached = true;
    /* what the client has, it will not ask for again */
    while (rs->head && rs->head->seq <= seq && !rs->head->final) {
        sse_event *e = rs->head;
        rs->head = e->next;
        if (!rs->head)
            rs->tail = NULL;
        rs->count--;
        rs->bytes -= e->len;
        free(e);
    }
    uint64_t missed = rs->dropped > seq ? rs->dropped - seq : 0;
    char run_id[40];
    memcpy(run_id, rs->run_id, sizeof run_id);
    pthread_mutex_unlock(&m->mu);
    reader *r = calloc(1, sizeof *r);
    if (!r) {
        pthread_mutex_lock(&m->mu);
        /* RS is still there: a stream marked read is never forgotten */
        rs->reading = false;
        rs->parked_ms = al_now_ms();
        m->calls[rs->slot].attached = false;
        pthread_mutex_unlock(&m->mu);
        return MHD_NO;
    }
    r->m = m;
    r->rs = rs;
    r->sent = seq;
    if (missed) {
        /* said without an id: the client's last id stays its own */
        char msg[300];
        snprintf(msg, sizeof msg,
                 "%llu earlier notifications of this call were dropped from the replay buffer (it keeps %d events "
                 "and %u bytes per session); the run's whole output is at GET /v1/runs/%s/events",
                 (unsigned long long)missed, REPLAY_EVENTS_MAX, REPLAY_BYTES_MAX, run_id);
        json_t *note = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s, s:I}}}", "jsonrpc", "2.0", "method",
                                 "notifications/message", "params", "level", "warning", "logger", "airlock", "data",
                                 "message", msg, "run_id", run_id, "missed", (json_int_t)missed);
        char *t = json_dumps(note, JSON_COMPACT);
        json_decref(note);
        if (t) {
            buf_add(r, "event: message\ndata: ", 21);
            buf_add(r, t, strlen(t));
            buf_add(r, "\n\n", 2);
            free(t);
        }
    }
    return send_stream(c, r);
}

/* ------------------------------------------------------------- requests */

static json_t *initialize_result(const char *version) {
    return json_pack(
        "{s:s, s:{s:{s:b}, s:{s:b, s:b}, s:{}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", version, "capabilities",
        "tools", "listChanged", false, "resources", "subscribe", false, "listChanged", false, "logging", "serverInfo",
        "name", "airlock", "title", "airlock: sandboxed code execution", "version", AIRLOCK_VERSION, "instructions",
        "airlock runs code in a fresh sandbox per call. Use code_execution to run Python, Node.js or Bash; "
        "give a thread to keep files between calls (what a run writes to /out/ the next finds in "
        "/work/documents/), and read them with list_artifacts and read_artifact. A workspace may "
        "require a person to approve each run: the call then waits and says so.");
}

/* The Host header's host (without port) matches ORIGIN's host. A page in a
 * browser on another origin cannot drive the server through a rebound DNS
 * name, as the transport's specification asks. */
static bool origin_ok(struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!origin || strcmp(origin, "null") == 0)
        return origin == NULL;
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    const char *o = strstr(origin, "://");
    if (!host || !o)
        return false;
    o += 3;
    size_t ol = strcspn(o, ":/"), hl = strcspn(host, ":");
    return ol == hl && strncasecmp(o, host, ol) == 0;
}

static enum MHD_Result post(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p, const char *body,
                            size_t len) {
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    if (accept && !strstr(accept, "application/json") && !strstr(accept, "text/event-stream") && !strstr(accept, "*/*"))
        return send_error(c, 406, NULL, -32000, "Not Acceptable: accept application/json and text/event-stream");
    bool sse = accept && strstr(accept, "text/event-stream");
    al_mcp_msg msg;
    json_t *perr = NULL;
    unsigned pstatus = 0;
    if (al_mcp_parse(body, len, &msg, &perr, &pstatus) < 0)
        return perr ? send_json(c, pstatus, perr, NULL) : send_empty(c, pstatus, NULL);
    enum MHD_Result ret;
    json_t *id = msg.id, *params = msg.params;
    const char *method = msg.method;
    if (msg.kind == AL_MCP_RESPONSE) {
        /* a response to a request of ours: we send none, so nothing waits for it */
        ret = send_empty(c, 202, NULL);
        goto out;
    }
    const char *hv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
    if (hv && !al_mcp_version_supported(hv)) {
        ret = send_error(c, 400, id, -32000,
                         "Bad Request: unsupported MCP-Protocol-Version %.40s (this server "
                         "speaks %s and %s)",
                         hv, AL_MCP_VERSION_LATEST, AL_MCP_VERSION_PREVIOUS);
        goto out;
    }

    if (strcmp(method, "initialize") == 0) {
        if (!id) {
            ret = send_error(c, 400, NULL, -32600, "Invalid Request: initialize is a request (it needs an id)");
            goto out;
        }
        const char *want = json_string_value(json_object_get(params, "protocolVersion"));
        if (!want) {
            ret = send_error(c, 200, id, -32602, "Invalid params: protocolVersion is required");
            goto out;
        }
        const char *version = al_mcp_negotiate(want);
        char sid[33];
        if (!session_new(m, p, version, sid)) {
            ret = send_error(c, 503, id, -32603, "cannot make a session now");
            goto out;
        }
        ret = send_json(c, 200, al_mcp_rpc_result(id, initialize_result(version)), sid);
        goto out;
    }

    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    session sess;
    if (!sid) {
        ret = send_error(c, 400, id, -32000,
                         "Bad Request: the Mcp-Session-Id header is required (send "
                         "initialize first)");
        goto out;
    }
    if (!session_get(m, sid, p, &sess)) {
        ret = send_error(c, 404, id, -32001, "Session not found: it ended, never existed, or lives on another airlock node (sessions stay on the node that made them); initialize again");
        goto out;
    }
    if (!id) {
        /* a call the client gave up on: its run is canceled, so it does not
         * go on using a box (and credits) for nobody. The call then ends
         * as canceled; its answer the client ignores. */
        char run_id[40];
        json_t *rid = json_object_get(params, "requestId");
        if (strcmp(method, "notifications/cancelled") == 0 && rid && inflight_find(m, sess.id, rid, run_id))
            al_run_cancel(s, p, run_id);
        /* notifications/initialized, roots changes and the like: nothing to answer */
        ret = send_empty(c, 202, NULL);
        goto out;
    }
    if (strcmp(method, "ping") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
    } else if (strcmp(method, "tools/list") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "tools", al_mcp_tools_list(s, p))), NULL);
    } else if (strcmp(method, "resources/list") == 0) {
        ret = send_json(c, 200, al_mcp_rpc_result(id, json_pack("{s:o}", "resources", al_mcp_resources_list(s, p))),
                        NULL);
    } else if (strcmp(method, "resources/templates/list") == 0) {
        ret = send_json(c, 200,
                        al_mcp_rpc_result(id, json_pack("{s:[{s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
                                                        "airlock://artifacts/{id}", "name", "artifact", "description",
                                                        "a file a run wrote, by its artifact id")),
                        NULL);
    } else if (strcmp(method, "resources/read") == 0) {
        const char *uri = json_string_value(json_object_get(params, "uri"));
        json_t *res = NULL;
        int r = uri ? al_mcp_resource_read(s, p, uri, &res) : -EINVAL;
        if (r == -EINVAL)
            ret = send_error(c, 200, id, -32602, "Invalid params: uri is required");
        else if (r == -ENOENT)
            ret = send_error(c, 200, id, -32002, "Resource not found: %.200s", uri);
        else if (r == -EFBIG)
            ret = send_error(c, 200, id, -32603,
                             "%.200s is too large to read over MCP; use GET "
                             "/v1/artifacts/{id}/content",
                             uri);
        else if (r < 0)
            ret = send_error(c, 200, id, -32603, "cannot read %.200s", uri);
        else
            ret = send_json(c, 200, al_mcp_rpc_result(id, res), NULL);
    } else if (strcmp(method, "logging/setLevel") == 0) {
        const char *lv = json_string_value(json_object_get(params, "level"));
        int li = -1;
        for (size_t i = 0; lv && i < ELEMENTSOF(levels); i++)
            if (strcmp(lv, levels[i]) == 0)
                li = (int)i;
        if (li < 0) {
            ret = send_error(c, 200, id, -32602,
                             "Invalid params: level must be one of debug, info, notice, "
                             "warning, error, critical, alert, emergency");
        } else {
            session_set_level(m, sess.id, li);
            ret = send_json(c, 200, al_mcp_rpc_result(id, json_object()), NULL);
        }
    } else if (strcmp(method, "tools/call") == 0) {
        const char *name = json_string_value(json_object_get(params, "name"));
        if (!name) {
            ret = send_error(c, 200, id, -32602, "Invalid params: name (the tool's) is required");
            goto out;
        }
        json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
        if (token && !json_is_string(token) && !json_is_integer(token))
            token = NULL;
        /* a retried call with its Idempotency-Key follows the run its first
         * attempt started; the key binds the tool and its arguments, not
         * the JSON-RPC id a retry renumbers */
        char scope[160];
        snprintf(scope, sizeof scope, "POST /mcp tools/call %.100s", name);
        json_t *call_args = json_object_get(params, "arguments");
        json_t *no_args = call_args ? NULL : json_object();
        al_idem idem;
        al_error ierr = { 0 };
        int ir = al_idem_from_request(c, scope, call_args ? call_args : no_args, NULL, 0, &idem, &ierr);
        json_decref(no_args);
        if (ir < 0) {
            ret = send_error(c, 400, id, -32600, "Invalid Request: %s", ierr.msg);
            goto out;
        }
        /* a slot first, so a call over the limits starts no run */
        int slot = inflight_take(m, sess.id, p->person_id, id);
        if (slot == -EBUSY) {
            ret = send_error(c, 429, id, -32000,
                             "Too Many Requests: at most %d tools/call of one person are followed at once (JSON "
                             "answers, event streams and their resumptions); wait for one to end",
                             CALLS_PER_PERSON_MAX);
            goto out;
        }
        if (slot < 0) {
            ret = send_error(c, 503, id, -32000,
                             "Service Unavailable: %d tools/call are under way on this service; try again shortly",
                             INFLIGHT_MAX);
            goto out;
        }
        al_mcp_call *k = NULL;
        json_t *result = NULL;
        if (al_mcp_tool_call(s, p, name, call_args, token, &idem, &k, &result) == -ENOENT) {
            inflight_del(m, slot);
            ret = send_error(c, 200, id, -32602, "Unknown tool: %.100s", name);
        } else if (result) {
            inflight_del(m, slot);
            ret = send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
        } else {
            ret = follow(m, &sess, p, c, k, id, sse, sess.log_level <= 1, slot);
        }
    } else {
        ret = send_error(c, 200, id, -32601, "Method not found: %.100s", method);
    }
out:
    al_mcp_msg_free(&msg);
    return ret;
}

enum MHD_Result al_mcp_handle(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *method, const char *body, size_t len, bool too_large) {
    if (!origin_ok(c))
        return send_error(c, 403, NULL, -32000, "Forbidden: the Origin header does not match the host");
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
        if (last && strcmp(method, "GET") == 0)
            return resume(m, s, c, p, last);
        /* no server-initiated stream: everything comes as answers to POSTs
         * (and their resumptions) */
        return send_empty(c, 405, "POST, DELETE");
    }
    if (strcmp(method, "DELETE") == 0) {
        const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
        if (!sid)
            return send_error(c, 400, NULL, -32000, "Bad Request: the Mcp-Session-Id header is required");
        if (!session_end(m, sid, p))
            return send_error(c, 404, NULL, -32001, "Session not found");
        return send_empty(c, 204, NULL);
    }
    if (strcmp(method, "POST") != 0)
        return send_empty(c, 405, "POST, DELETE");
    if (too_large)
        return send_error(c, 413, NULL, -32600, "Invalid Request: the message is larger than %llu bytes",
                          (unsigned long long)al_view_config(s)->body_max);
    return post(m, s, c, p, body, len);
}

/* the route table's row for /mcp: every method is MCP's to answer */
enum MHD_Result al_mcp_route(al_route_ctx *x) {
    return al_mcp_handle(x->h->mcp, x->s, x->c, x->p, x->method, x->rq->body, x->rq->len, x->rq->too_large);
}
