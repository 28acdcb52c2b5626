/* MCP's resumable tools/call streams (below), for the transport (mcp.c). */
#include <string.h>

#include "mcp_internal.h"
#include "reply.h"
#include "../util/util.h"

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
void al_mcp_rstream_drop(al_mcp *m, rstream *rs) {
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
void al_mcp_rstreams_end_session(al_mcp *m, const char *sid) {
    for (rstream *rs = m->streams, *n; rs; rs = n) {
        n = rs->next;
        if (strcmp(rs->session, sid) == 0 && !rs->reading)
            al_mcp_rstream_drop(m, rs);
    }
}

/* Forget parked streams past their time; make room for one more stream of
 * session SID (when given) by forgetting its own oldest parked one, never
 * another session's. Under m->mu. */
void al_mcp_rstreams_reap(al_mcp *m, const char *sid) {
    uint64_t now = al_now_ms();
    int own = 0;
    rstream *own_oldest = NULL;
    for (rstream *rs = m->streams, *n; rs; rs = n) {
        n = rs->next;
        if (!rs->reading && now - rs->parked_ms > PARKED_MS) {
            al_mcp_rstream_drop(m, rs);
            continue;
        }
        bool mine = sid && strcmp(rs->session, sid) == 0;
        own += mine;
        if (mine && !rs->reading && (!own_oldest || rs->parked_ms < own_oldest->parked_ms))
            own_oldest = rs;
    }
    if (sid && own >= STREAMS_PER_SESSION_MAX && own_oldest)
        al_mcp_rstream_drop(m, own_oldest);
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
        al_mcp_rstream_drop(m, oldest);
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
            al_mcp_rstream_drop(m, parked);
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
        al_mcp_rstream_drop(m, r->rs);
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
    return al_reply_event_stream(c, stream_read, r, stream_free);
}

/* Follow call K of request ID to its end, as one JSON answer or an event
 * stream; it holds in-flight SLOT (given up here, or with the stream). */
enum MHD_Result al_mcp_follow(al_mcp *m, const session *sess, const al_principal *p, struct MHD_Connection *c,
                              al_mcp_call *k, json_t *id, bool sse, bool send_output, int slot) {
    al_mcp_inflight_set_run(m, slot, al_mcp_call_run_id(k));
    if (!sse) {
        /* plain JSON: wait here for the end, sending nothing before it */
        json_t *result = NULL;
        while (!result) {
            json_t *notes = json_array();
            al_mcp_call_step(k, KEEPALIVE_S, false, notes, &result);
            json_decref(notes);
        }
        al_mcp_inflight_del(m, slot);
        al_mcp_call_free(k);
        return al_mcp_send_json(c, 200, al_mcp_rpc_result(id, result), NULL);
    }
    rstream *rs = calloc(1, sizeof *rs);
    reader *r = calloc(1, sizeof *r);
    if (!rs || !r) {
        free(rs);
        free(r);
        al_mcp_inflight_del(m, slot);
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
    al_mcp_rstreams_reap(m, sess->id);
    rs->no = al_mcp_session_next_stream(m, sess->id);
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
enum MHD_Result al_mcp_resume(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *last) {
    const char *sid = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
    session sess;
    if (!sid)
        return al_mcp_send_error(c, 400, NULL, -32000, "Bad Request: the Mcp-Session-Id header is required");
    if (!al_mcp_session_get(m, sid, p, &sess))
        return al_mcp_send_error(c, 404, NULL, -32001, "Session not found: it ended, never existed, or lives on another airlock node (sessions stay on the node that made them); initialize again");
    unsigned long long no = 0, seq = 0;
    int used = 0;
    if (strlen(last) > 41 || sscanf(last, "%llu-%llu%n", &no, &seq, &used) != 2 || (size_t)used != strlen(last) ||
        last[0] == '-' || last[0] == '+' || strchr(last, ' '))
        return al_mcp_send_error(c, 400, NULL, -32000, "Bad Request: Last-Event-ID %.64s is not an event id of this server",
                          last);
    pthread_mutex_lock(&m->mu);
    al_mcp_rstreams_reap(m, NULL);
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
        return al_mcp_send_error(c, 400, NULL, -32000, "Bad Request: Last-Event-ID %.64s is past the stream's last event",
                          last);
    }
    if (!rs || rs->reading) {
        bool busy = rs && rs->reading;
        if (rs)
            rs->superseded = false;
        pthread_mutex_unlock(&m->mu);
        if (busy)
            return al_mcp_send_error(c, 409, NULL, -32000, "Conflict: another connection still reads the stream of event %.64s",
                              last);
        return al_mcp_send_error(c, 410, NULL, -32000,
                          "Gone: the stream of event %.64s is no longer kept (its response was delivered, it waited "
                          "unread for more than %llu minutes, or newer streams of the session pushed it out); a "
                          "run's record stays at GET /v1/runs/{id}",
                          last, PARKED_MS / 60000);
    }
    if (al_mcp_inflight_attached(m, p->person_id) >= CALLS_PER_PERSON_MAX) {
        pthread_mutex_unlock(&m->mu);
        return al_mcp_send_error(c, 429, NULL, -32000,
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
