/* REST: the workspace's activity as Server-Sent Events (GET /v1/events):
 * "event: run" with the run's list entry each time a run of the caller's
 * workspace is made or changes state, on any node (core/activity.h says
 * how it hears and what a stream costs). It starts from now: a page lists
 * GET /v1/runs first and applies these by run id (each is the whole entry,
 * so applying one twice changes nothing). */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/activity.h"
#include "../core/holds.h"
#include "../core/runs.h"

#define KEEPALIVE_S 15

typedef struct stream {
    al_service *s;
    struct MHD_Connection *c;
    al_activity a;
    char person_id[40];
    char *buf;
    size_t len, pos;
    bool held;
    al_sse_session ses;
} stream;

/* Fill T's buffer with what comes next (runs, or a keepalive); <0 the
 * stream's end. */
static ssize_t fill(void *cls) {
    stream *t = cls;
    al_error err = { 0 };
    /* a second at a time: a client who has gone gives its place back
     * within one */
    for (int waited = 0;; waited++) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        al_follow_news news = al_activity_next(&t->a, &until, &t->buf, &t->len, &err);
        if (news == AL_FOLLOW_EVENTS)
            return 0;
        if (news == AL_FOLLOW_FAILED) {
            al_service_log(t->s, AL_LOG_ERROR, "http.stream_failed",
                           json_pack("{s:s, s:s}", "stream", "activity", "error", err.msg));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* a session's stream ends soon after its session does (signed
         * out, expired, its person gone), not when the client leaves */
        if (news == AL_FOLLOW_STOPPING || al_sse_peer_gone(t->c) || !al_sse_session_lives(t->s, &t->ses))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (waited + 1 >= KEEPALIVE_S) {
            /* a comment keeps proxies and clients from timing out */
            t->buf = strdup(": keepalive\n\n");
            t->len = t->buf ? strlen(t->buf) : 0;
            return t->buf ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void unhold(stream *t) {
    if (t->held)
        al_service_unhold(t->s, t->person_id, AL_HOLD_ACTIVITY);
    t->held = false;
}

static ssize_t stream_read(void *cls, uint64_t off, char *out, size_t max) {
    (void)off;
    stream *t = cls;
    ssize_t r = al_reply_drain(&t->buf, &t->len, &t->pos, fill, t, out, max);
    if (r < 0)
        unhold(t);
    return r;
}

static void stream_free(void *cls) {
    stream *t = cls;
    unhold(t);
    al_activity_done(&t->a);
    free(t->buf);
    free(t);
}

enum MHD_Result al_rest_events(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    /* each stream holds a connection and a thread while it is open */
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_ACTIVITY))
        return al_reply_too_many(x->c, "activity streams", AL_ACTIVITY_STREAMS_PER_PERSON, "GET /v1/events");
    stream *t = calloc(1, sizeof *t);
    if (!t) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_ACTIVITY);
        return MHD_NO;
    }
    t->s = x->s;
    t->c = x->c;
    t->held = true;
    snprintf(t->person_id, sizeof t->person_id, "%s", x->p->person_id);
    al_sse_session_init(&t->ses, x);
    if (al_activity_init(&t->a, x->s, x->p) < 0) {
        stream_free(t);
        return MHD_NO;
    }
    /* the stream opens with a comment at once, so a client knows it is
     * listening before the first run changes */
    t->buf = strdup(": listening\n\n");
    t->len = t->buf ? strlen(t->buf) : 0;
    return al_reply_event_stream(x->c, stream_read, t, stream_free);
}
