/* REST: a run's events as Server-Sent Events (GET /v1/runs/{id}/events),
 * through the core's follower (core/follow.h). One thread per connection,
 * so the stream blocks waiting for the next event. */
#include <poll.h>
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "status.h"
#include "../core/console_auth.h"
#include "../core/follow.h"
#include "../core/views.h"

#define SSE_KEEPALIVE_S 15
#define SSE_EVENTS_PER_READ 64
#define SSE_SESSION_CHECK_MS 5000

typedef struct sse {
    al_service *s;
    struct MHD_Connection *c;
    al_follow f;
    char person_id[40];
    char *buf;
    size_t len, pos;
    bool ended;
    bool held; /* one of the person's followers_per_person */
    al_sse_session ses; /* ends soon after its session, not when its run does */
} sse;

void al_sse_session_init(al_sse_session *ss, const al_route_ctx *x) {
    memset(ss, 0, sizeof *ss);
    if (x->rq->via_session)
        snprintf(ss->id, sizeof ss->id, "%s", x->rq->ses.id);
    ss->checked_ms = al_now_ms();
}

bool al_sse_session_lives(al_service *s, al_sse_session *ss) {
    /* the store asked at most every few seconds; a store that fails ends it */
    if (!ss->id[0] || al_now_ms() - ss->checked_ms < SSE_SESSION_CHECK_MS)
        return true;
    al_error err = { 0 };
    ss->checked_ms = al_now_ms();
    return al_session_live(s, ss->id, &err) > 0;
}

bool al_sse_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pf = { .fd = ci->connect_fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* EVS as the stream's text into E's buffer; false out of memory. */
static bool sse_format(sse *e, const al_follow_event *evs, size_t nev) {
    size_t cap = 0;
    for (size_t i = 0; i < nev; i++)
        cap += strlen(evs[i].data) + 96;
    e->buf = malloc(cap + 1);
    if (!e->buf)
        return false;
    for (size_t i = 0; i < nev; i++) {
        /* data is one line of compact JSON: no newline can split it */
        e->len += (size_t)snprintf(e->buf + e->len, cap + 1 - e->len, "id: %lld\nevent: %s\ndata: %s\n\n",
                                   (long long)evs[i].seq, evs[i].type, evs[i].data);
        if (strcmp(evs[i].type, "result") == 0)
            e->ended = true;
    }
    return true;
}

/* Fill E's buffer with what comes next: events, or a keepalive; <0 the
 * stream's end (MHD_CONTENT_READER_END_*). */
static ssize_t sse_fill(void *cls) {
    sse *e = cls;
    if (e->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    al_error err = { 0 };
    /* wait in steps of a second: a follower who has gone gives its slot
     * (and its share of the person's followers) back within one, not at
     * the next keepalive */
    for (int waited = 0;; waited++) {
        if (!al_sse_session_lives(e->s, &e->ses))
            return MHD_CONTENT_READER_END_OF_STREAM;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        al_follow_event *evs = NULL;
        size_t nev = 0;
        al_follow_news news = al_follow_next(&e->f, SSE_EVENTS_PER_READ, &until, &evs, &nev, &err);
        if (news == AL_FOLLOW_EVENTS) {
            bool ok = sse_format(e, evs, nev);
            al_follow_events_free(evs, nev);
            return ok ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (news == AL_FOLLOW_FAILED) {
            /* libmicrohttpd says only that the stream failed: the why is here */
            al_service_log(e->s, AL_LOG_ERROR, "http.stream_failed",
                           json_pack("{s:s, s:s}", "run_id", e->f.run_id, "error", err.msg));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* the client left: the stream ends as any other does (an error
         * here would be logged as the service's own) */
        if (news == AL_FOLLOW_DONE || news == AL_FOLLOW_STOPPING || al_sse_peer_gone(e->c))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (waited + 1 >= SSE_KEEPALIVE_S) {
            /* a comment keeps proxies and clients from timing out */
            e->buf = strdup(": keepalive\n\n");
            e->len = e->buf ? strlen(e->buf) : 0;
            return 0;
        }
    }
}

static ssize_t sse_next(sse *e, char *out, size_t max) {
    return al_reply_drain(&e->buf, &e->len, &e->pos, sse_fill, e, out, max);
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

enum MHD_Result al_sse_run_events(al_route_ctx *x) {
    al_service *s = x->s;
    struct MHD_Connection *c = x->c;
    const char *id = x->arg[0];
    al_view_run *row = al_view_run_load(s, x->p, id);
    if (!row)
        return al_reply_error(c, 404, "not_found", "no run %s", id);
    bool expired = row->expired_at[0];
    al_view_run_free(row);
    if (expired) { /* its events are gone: said as GET /v1/runs/{id} says it */
        json_t *doc = NULL;
        al_status st = al_run_view(s, x->p, id, &doc);
        return al_reply_json(c, al_status_http(st), doc);
    }
    /* each follower holds a connection and a thread for as long as it likes */
    if (!al_service_hold(s, x->p->person_id, AL_HOLD_FOLLOW))
        return al_reply_too_many(c, "event streams", al_view_config(s)->followers_per_person, "followers_per_person");
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        al_service_unhold(s, x->p->person_id, AL_HOLD_FOLLOW);
        return MHD_NO;
    }
    e->s = s;
    e->c = c;
    e->held = true;
    snprintf(e->person_id, sizeof e->person_id, "%s", x->p->person_id);
    al_sse_session_init(&e->ses, x);
    const char *last = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
    uint64_t l;
    al_follow_init(&e->f, s, id, last && al_parse_u64(last, &l) == 0 && l < INT64_MAX ? (int64_t)l : 0);
    return al_reply_event_stream(c, sse_read, e, sse_free);
}
