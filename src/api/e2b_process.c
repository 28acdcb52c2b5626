/*
 * E2B's process.Process (envd's Connect service) over airlock's runs: each
 * command is one ordinary run (language bash) in the sandbox's working
 * directory, with its image, network, environment and thread; governance,
 * credits, the queue, approval and audit (via "e2b") are the core's, as
 * for any run.
 *
 *   Start      server stream: start{pid} at once (the SDK's handshake
 *              timer waits for it), the run's output live as data{stdout|
 *              stderr}, end{exitCode, exited, status, error?}, then the
 *              end-stream frame; keepalives in silence (a run awaiting
 *              approval included); Connect-Timeout-Ms is the command's
 *              deadline: past it the run is canceled and the stream ends
 *              with deadline_exceeded (the SDK's TimeoutError)
 *   Connect    the same stream for a live pid, its output from the start
 *   SendSignal SIGKILL or SIGTERM cancels the run
 *   List       the sandbox's commands not yet ended
 *   the rest   unimplemented: a command's input is what its code holds,
 *              there is no stdin stream
 *
 * A pid is a number made from the run's id (al_e2b_pid): the runs of the
 * sandbox's thread are looked up by it, on whichever node the call lands.
 * A command's config {cmd, args, cwd, tag} is kept in its run's
 * description (shown to an approver too); its envs are not (they may hold
 * secrets) and List shows none.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/dlp.h"
#include "../core/follow.h"
#include "../core/views.h"
#include "connect.h"
#include "e2b.h"
#include "e2b_run.h"
#include "handlers.h"
#include "reply.h"
#include "route.h"

#define PROC_MSG_MAX (2u << 20)      /* a Start request: code_max's 1 MiB and its envs, with room */
#define PROC_EVENTS_PER_READ 64
#define PROC_KEEPALIVE_DEFAULT_S 50
#define PROC_LIST_MAX 100            /* the newest runs of a sandbox looked through for its live ones */
#define DESC_PREFIX "e2b: "

/* ------------------------------------------------------------------ unary */

static enum MHD_Result unary_error(struct MHD_Connection *c, al_connect_code code, const char *fmt, ...)
    _printf_(3, 4);
static enum MHD_Result unary_error(struct MHD_Connection *c, al_connect_code code, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_utf8_fix(msg);
    return al_reply_json(c, (unsigned)al_connect_code_http(code), al_connect_error(code, msg));
}

/* A unary call's JSON body (an object), else NULL and the error queued. */
static json_t *unary_body(al_route_ctx *x, enum MHD_Result *ret) {
    json_t *b = NULL;
    if (x->rq->too_large)
        *ret = unary_error(x->c, AL_CONNECT_RESOURCE_EXHAUSTED, "the request is larger than the service takes");
    else if (!(b = al_req_body_object(x->rq)))
        *ret = unary_error(x->c, AL_CONNECT_INVALID_ARGUMENT, "the request must be a JSON object");
    return b;
}

/* The sandbox's runs not yet ended, newest first, in *RET (its count
 * returned; -errno). */
static int live_runs(al_route_ctx *x, al_view_run_brief **ret, size_t *ret_n) {
    al_error err = { 0 };
    al_view_run_brief *b = NULL;
    size_t n = 0;
    *ret = NULL;
    *ret_n = 0;
    if (al_view_runs_page(x->s, x->p, _AL_RUN_STATE_INVALID, x->sb->thread_id, INT64_MAX, PROC_LIST_MAX, &b, &n, &err) < 0)
        return -EIO;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (al_run_state_ended(b[i].run.state))
            continue;
        if (k != i) {
            al_view_run_brief t = b[k];
            b[k] = b[i];
            b[i] = t;
        }
        k++;
    }
    *ret = b;
    *ret_n = n;
    return (int)k;
}

/* The config kept in a run's description (DESC_PREFIX + JSON), or {}. */
static json_t *config_of(const char *desc) {
    json_t *c = desc && strncmp(desc, DESC_PREFIX, strlen(DESC_PREFIX)) == 0
                    ? json_loads(desc + strlen(DESC_PREFIX), 0, NULL)
                    : NULL;
    return json_is_object(c) ? c : (json_decref(c), json_object());
}

/* The run of the selector {pid} or {tag} of BODY's "process", into RUN_ID:
 * 0, -ENOENT, -EINVAL (no selector), -EIO. */
static int find_run(al_route_ctx *x, json_t *body, char run_id[40], uint32_t *ret_pid) {
    json_t *sel = json_object_get(body, "process");
    json_t *pid = json_object_get(sel, "pid"), *tag = json_object_get(sel, "tag");
    uint64_t want = 0;
    /* int64 and uint32 fields come as numbers or as strings (protobuf's JSON) */
    if (json_is_integer(pid) && json_integer_value(pid) >= 0)
        want = (uint64_t)json_integer_value(pid);
    else if (json_is_string(pid) && al_parse_u64(json_string_value(pid), &want) < 0)
        return -EINVAL;
    else if (!pid && !json_is_string(tag))
        return -EINVAL;
    al_view_run_brief *b = NULL;
    size_t n = 0;
    int live = live_runs(x, &b, &n);
    int r = live < 0 ? live : -ENOENT;
    for (int i = 0; r == -ENOENT && i < live; i++) {
        bool hit = false;
        if (pid)
            hit = al_e2b_pid(b[i].run.id) == want;
        else {
            json_t *cfg = config_of(b[i].run.description);
            const char *t = json_string_value(json_object_get(cfg, "tag"));
            hit = t && strcmp(t, json_string_value(tag)) == 0;
            json_decref(cfg);
        }
        if (hit) {
            snprintf(run_id, 40, "%s", b[i].run.id);
            *ret_pid = al_e2b_pid(b[i].run.id);
            r = 0;
        }
    }
    al_view_run_briefs_free(b, n);
    return r;
}

static enum MHD_Result send_signal(al_route_ctx *x) {
    enum MHD_Result ret;
    json_t *body = unary_body(x, &ret);
    if (!body)
        return ret;
    json_t *sig = json_object_get(body, "signal");
    const char *name = json_string_value(sig);
    /* enums come as names or numbers: SIGNAL_SIGKILL = 9, SIGNAL_SIGTERM = 15 */
    bool known = (name && (strcmp(name, "SIGNAL_SIGKILL") == 0 || strcmp(name, "SIGNAL_SIGTERM") == 0)) ||
                 (json_is_integer(sig) && (json_integer_value(sig) == 9 || json_integer_value(sig) == 15));
    char run_id[40];
    uint32_t pid = 0;
    int r = known ? find_run(x, body, run_id, &pid) : -EINVAL;
    json_decref(body);
    if (!known)
        return unary_error(x->c, AL_CONNECT_INVALID_ARGUMENT, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    if (r == -EINVAL)
        return unary_error(x->c, AL_CONNECT_INVALID_ARGUMENT, "process must name a pid or a tag");
    if (r == -ENOENT)
        return unary_error(x->c, AL_CONNECT_NOT_FOUND, "no running process of that pid or tag in this sandbox");
    if (r < 0)
        return unary_error(x->c, AL_CONNECT_UNAVAILABLE, "the sandbox's commands cannot be read now");
    /* SIGTERM and SIGKILL alike: the box is killed whole (a box has no
     * grace period a signal could ask for) */
    r = al_run_cancel(x->s, x->p, run_id);
    if (r < 0)
        return unary_error(x->c, AL_CONNECT_NOT_FOUND, "process %u is gone", pid);
    return al_reply_json(x->c, 200, json_object());
}

static enum MHD_Result list(al_route_ctx *x) {
    enum MHD_Result ret;
    json_t *body = unary_body(x, &ret);
    if (!body)
        return ret;
    json_decref(body);
    al_view_run_brief *b = NULL;
    size_t n = 0;
    int live = live_runs(x, &b, &n);
    if (live < 0)
        return unary_error(x->c, AL_CONNECT_UNAVAILABLE, "the sandbox's commands cannot be read now");
    json_t *procs = json_array();
    for (int i = 0; i < live; i++) {
        json_t *cfg = config_of(b[i].run.description);
        json_t *tag = json_incref(json_object_get(cfg, "tag"));
        json_object_del(cfg, "tag");
        if (!json_object_get(cfg, "args"))
            json_object_set_new(cfg, "args", json_array());
        json_object_set_new(cfg, "envs", json_object());
        json_t *p = json_pack("{s:I, s:o}", "pid", (json_int_t)al_e2b_pid(b[i].run.id), "config", cfg);
        if (json_is_string(tag))
            json_object_set(p, "tag", tag);
        json_decref(tag);
        json_array_append_new(procs, p);
    }
    al_view_run_briefs_free(b, n);
    return al_reply_json(x->c, 200, json_pack("{s:o}", "processes", procs));
}

/* ----------------------------------------------------------------- stream */

typedef struct proc_stream {
    al_service *s;
    struct MHD_Connection *c;
    al_principal p;
    al_follow f;
    char run_id[40];
    uint32_t pid;
    char *buf;                    /* frames made, not yet all sent */
    size_t len, pos;
    bool started, ended;          /* start sent; the end-stream frame made */
    bool held;                    /* one of the person's followers_per_person */
    uint64_t deadline_ms;         /* 0: none */
    uint64_t keepalive_ms, last_ms;
} proc_stream;

/* MSG (taken) as a frame after what the buffer holds; false out of memory. */
static bool push(proc_stream *ps, unsigned flags, json_t *msg) {
    char *f = NULL;
    size_t n = 0;
    int r = msg ? al_connect_encode(flags, msg, &f, &n) : -ENOMEM;
    json_decref(msg);
    if (r < 0)
        return false;
    char *nb = realloc(ps->buf, ps->len + n);
    if (!nb) {
        free(f);
        return false;
    }
    memcpy(nb + ps->len, f, n);
    free(f);
    ps->buf = nb;
    ps->len += n;
    ps->last_ms = al_now_ms();
    return true;
}

static bool push_event(proc_stream *ps, json_t *event) {
    return push(ps, 0, event ? json_pack("{s:o}", "event", event) : NULL);
}

/* The end-stream frame: CODE < 0 a clean end. */
static bool push_end_stream(proc_stream *ps, int code, const char *msg) {
    char *f = NULL;
    size_t n = 0;
    ps->ended = true;
    if (al_connect_end_stream(code, msg, &f, &n) < 0)
        return false;
    char *nb = realloc(ps->buf, ps->len + n);
    if (!nb) {
        free(f);
        return false;
    }
    memcpy(nb + ps->len, f, n);
    free(f);
    ps->buf = nb;
    ps->len += n;
    return true;
}

/* The run's end event and the clean end of the stream. */
static bool push_end(proc_stream *ps) {
    al_e2b_end e;
    al_e2b_end_of(ps->s, &ps->p, ps->run_id, &e, NULL);
    json_t *end = json_pack("{s:i, s:b, s:s}", "exitCode", e.exit_code, "exited", e.exited, "status", e.status);
    if (end && e.error[0])
        json_object_set_new(end, "error", json_string(e.error));
    return push_event(ps, end ? json_pack("{s:o}", "end", end) : NULL) && push_end_stream(ps, -1, NULL);
}

/* An output event EV as a data event. */
static bool push_output(proc_stream *ps, const al_follow_event *ev) {
    json_t *d = json_loads(ev->data, 0, NULL);
    size_t len = 0;
    char *bytes = d ? al_output_get(d, "data", &len) : NULL;
    json_decref(d);
    if (!bytes)
        return true; /* nothing the stream can show (an event without its bytes) */
    char *b64 = len ? al_e2b_base64(bytes, len) : NULL;
    free(bytes);
    if (len && !b64)
        return false;
    if (!len)
        return true;
    json_t *data = json_pack("{s:s}", ev->type, b64);
    free(b64);
    return push_event(ps, data ? json_pack("{s:o}", "data", data) : NULL);
}

/* What comes next into the buffer: events, a keepalive, the end; <0 the
 * stream's end (MHD_CONTENT_READER_END_*). */
static ssize_t proc_fill(void *cls) {
    proc_stream *ps = cls;
    if (ps->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (!ps->started) {
        ps->started = true;
        return push_event(ps, json_pack("{s:{s:I}}", "start", "pid", (json_int_t)ps->pid)) ? 0
                                                                                         : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    al_error err = { 0 };
    for (;;) {
        uint64_t now = al_now_ms();
        if (ps->deadline_ms && now >= ps->deadline_ms) {
            /* as envd: the deadline ends the process; the run is canceled
             * (withdrawn if it still awaits approval) */
            al_run_cancel(ps->s, &ps->p, ps->run_id);
            return push_end_stream(ps, AL_CONNECT_DEADLINE_EXCEEDED,
                                   "the command ran past its timeout (timeoutMs) and was killed")
                       ? 0
                       : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* wait in steps of a second at most: a client gone, a deadline or
         * a keepalive due is seen within one */
        uint64_t step = 1000;
        if (ps->deadline_ms && ps->deadline_ms - now < step)
            step = ps->deadline_ms - now;
        /* and no later than the keepalive is due: a wait of a whole step
         * that woke a little before it (a step as long as the interval)
         * put the keepalive off by a step, at twice its interval */
        uint64_t due = ps->last_ms + ps->keepalive_ms;
        if (due > now && due - now < step)
            step = due - now;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(step / 1000);
        until.tv_nsec += (long)(step % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        al_follow_event *evs = NULL;
        size_t nev = 0;
        al_follow_news news = al_follow_next(&ps->f, PROC_EVENTS_PER_READ, &until, &evs, &nev, &err);
        if (news == AL_FOLLOW_EVENTS) {
            bool ok = true;
            for (size_t i = 0; ok && i < nev && !ps->ended; i++) {
                if (strcmp(evs[i].type, "stdout") == 0 || strcmp(evs[i].type, "stderr") == 0)
                    ok = push_output(ps, &evs[i]);
                else if (strcmp(evs[i].type, "result") == 0)
                    ok = push_end(ps);
            }
            al_follow_events_free(evs, nev);
            if (!ok)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            if (ps->len > ps->pos)
                return 0;
            continue;
        }
        if (news == AL_FOLLOW_FAILED)
            return push_end_stream(ps, AL_CONNECT_UNAVAILABLE, err.msg) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        if (news == AL_FOLLOW_DONE)
            return push_end(ps) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        if (news == AL_FOLLOW_STOPPING)
            return push_end_stream(ps, AL_CONNECT_UNAVAILABLE, "the service is stopping") ? 0
                                                                                           : MHD_CONTENT_READER_END_WITH_ERROR;
        /* the client left: the command goes on (a background command is
         * one whose client does not wait), as its own run */
        if (al_e2b_peer_gone(ps->c))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (al_now_ms() - ps->last_ms >= ps->keepalive_ms)
            return push_event(ps, json_pack("{s:{}}", "keepalive")) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void proc_unhold(proc_stream *ps) {
    if (ps->held)
        al_service_unhold(ps->s, ps->p.person_id, AL_HOLD_FOLLOW);
    ps->held = false;
}

static ssize_t proc_read(void *cls, uint64_t off, char *out, size_t max) {
    (void)off;
    proc_stream *ps = cls;
    ssize_t r = al_reply_drain(&ps->buf, &ps->len, &ps->pos, proc_fill, ps, out, max);
    if (r < 0)
        proc_unhold(ps);
    return r;
}

static void proc_free(void *cls) {
    proc_stream *ps = cls;
    proc_unhold(ps);
    free(ps->buf);
    free(ps);
}

/* A header's whole number, or DEF when absent or malformed. */
static uint64_t header_u64(struct MHD_Connection *c, const char *name, uint64_t def) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    uint64_t n;
    return v && strlen(v) <= 12 && al_parse_u64(v, &n) == 0 ? n : def;
}

/* Follow RUN_ID (its pid PID) for the client of X. */
static enum MHD_Result follow(al_route_ctx *x, const char *run_id, uint32_t pid) {
    proc_stream *ps = calloc(1, sizeof *ps);
    if (!ps) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_FOLLOW);
        return MHD_NO;
    }
    ps->s = x->s;
    ps->c = x->c;
    ps->p = *x->p;
    ps->held = true;
    ps->pid = pid;
    snprintf(ps->run_id, sizeof ps->run_id, "%s", run_id);
    uint64_t timeout = header_u64(x->c, "Connect-Timeout-Ms", 0);
    ps->deadline_ms = timeout ? al_now_ms() + timeout : 0;
    uint64_t ka = header_u64(x->c, "Keepalive-Ping-Interval", PROC_KEEPALIVE_DEFAULT_S);
    ps->keepalive_ms = (ka < 1 ? 1 : ka > 300 ? 300 : ka) * 1000;
    ps->last_ms = al_now_ms();
    al_follow_init(&ps->f, x->s, run_id, 0);
    return al_e2b_stream_reply(x->c, "application/connect+json", proc_read, ps, proc_free);
}

/* The request's one envelope, else NULL and the stream's error queued. */
static json_t *stream_request(al_route_ctx *x, enum MHD_Result *ret) {
    if (x->rq->too_large) {
        *ret = al_e2b_stream_error(x->c, AL_CONNECT_RESOURCE_EXHAUSTED, "the request is larger than the service takes");
        return NULL;
    }
    json_t *m = NULL;
    const char *why = NULL;
    int r = al_connect_decode(x->rq->body, x->rq->len, PROC_MSG_MAX, &m, &why);
    if (r < 0)
        *ret = al_e2b_stream_error(x->c, r == -E2BIG ? AL_CONNECT_RESOURCE_EXHAUSTED : AL_CONNECT_INVALID_ARGUMENT, why);
    return m;
}

/* The description of a command: its config as List gives it back,
 * without its args when they would not fit (the code holds them). */
static char *describe(json_t *proc, json_t *tag) {
    json_t *cfg = json_pack("{s:O?, s:O?, s:O?}", "cmd", json_object_get(proc, "cmd"), "args",
                            json_object_get(proc, "args"), "cwd", json_object_get(proc, "cwd"));
    if (cfg && json_is_string(tag))
        json_object_set(cfg, "tag", tag);
    char *text = cfg ? json_dumps(cfg, JSON_COMPACT) : NULL;
    if (text && strlen(text) + strlen(DESC_PREFIX) > AL_RUN_DESCRIPTION_MAX) {
        free(text);
        json_object_del(cfg, "args");
        text = json_dumps(cfg, JSON_COMPACT);
        if (text && strlen(text) + strlen(DESC_PREFIX) > AL_RUN_DESCRIPTION_MAX)
            text[AL_RUN_DESCRIPTION_MAX - strlen(DESC_PREFIX) - 1] = '\0';
    }
    json_decref(cfg);
    char *d = NULL;
    if (text && asprintf(&d, DESC_PREFIX "%s", text) < 0)
        d = NULL;
    free(text);
    if (d)
        al_utf8_fix(d);
    return d;
}

/* START's process {cmd, args, envs, cwd} as the bash code of its run, or
 * NULL and why in WHY. */
static char *command_code(const al_sandbox *sb, json_t *proc, char *why, size_t wn) {
    json_t *cmd = json_object_get(proc, "cmd"), *args = json_object_get(proc, "args");
    json_t *cwd = json_object_get(proc, "cwd");
    if (!json_is_string(cmd) || !json_string_length(cmd) || (args && !json_is_array(args)) ||
        (cwd && !json_is_null(cwd) && !json_is_string(cwd))) {
        snprintf(why, wn, "process must be {cmd: a string, args: strings, envs: an object, cwd: a path}");
        return NULL;
    }
    char dir[1100];
    json_t *env = NULL;
    if (al_e2b_box_dir(json_string_value(cwd), dir, sizeof dir, why, wn) < 0 ||
        al_e2b_env(sb, json_object_get(proc, "envs"), &env, why, wn) < 0)
        return NULL;
    char *line = al_e2b_command_line(json_string_value(cmd), args);
    char *prelude = al_e2b_bash_prelude(env, dir);
    json_decref(env);
    char *code = NULL;
    if (!line || !prelude || asprintf(&code, "%s%s\n", prelude, line) < 0) {
        snprintf(why, wn, "args must be strings");
        code = NULL;
    }
    free(line);
    free(prelude);
    return code;
}

static enum MHD_Result start(al_route_ctx *x) {
    enum MHD_Result ret;
    json_t *m = stream_request(x, &ret);
    if (!m)
        return ret;
    json_t *proc = json_object_get(m, "process");
    char why[700];
    json_t *pty = json_object_get(m, "pty");
    if (json_is_true(json_object_get(m, "stdin")) || (pty && !json_is_null(pty))) {
        json_decref(m);
        return al_e2b_stream_error(x->c, AL_CONNECT_UNIMPLEMENTED,
                            "a command of an airlock sandbox takes no stdin stream and no pty: its input is what "
                            "its command line gives it, at start");
    }
    char *code = json_is_object(proc) ? command_code(x->sb, proc, why, sizeof why) : NULL;
    if (!json_is_object(proc))
        snprintf(why, sizeof why, "process must be {cmd, args, envs, cwd}");
    char *desc = code ? describe(proc, json_object_get(m, "tag")) : NULL;
    json_decref(m);
    if (!code) {
        free(desc);
        return al_e2b_stream_error(x->c, AL_CONNECT_INVALID_ARGUMENT, why);
    }
    /* its follower is held before the run is made: a run nobody could
     * follow is not started */
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_FOLLOW)) {
        free(code);
        free(desc);
        return al_e2b_stream_error(x->c, AL_CONNECT_RESOURCE_EXHAUSTED,
                            "the person follows their most runs at once (followers_per_person)");
    }
    char run_id[40];
    al_connect_code cc;
    /* the run's own timeout a second past the stream's deadline, so that
     * the deadline ends it as envd's does (deadline_exceeded); without
     * one (timeoutMs 0) the longest the workspace allows */
    uint64_t ms = header_u64(x->c, "Connect-Timeout-Ms", 0);
    double timeout = ms ? (double)((ms + 999) / 1000 + 1) : INFINITY;
    int r = al_e2b_run_start(x->s, x->p, x->sb, "bash", code, strlen(code), desc, timeout, run_id, &cc, why,
                             sizeof why);
    free(code);
    free(desc);
    if (r < 0) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_FOLLOW);
        return al_e2b_stream_error(x->c, cc, why);
    }
    return follow(x, run_id, al_e2b_pid(run_id));
}

static enum MHD_Result reconnect(al_route_ctx *x) {
    enum MHD_Result ret;
    json_t *m = stream_request(x, &ret);
    if (!m)
        return ret;
    char run_id[40];
    uint32_t pid = 0;
    int r = find_run(x, m, run_id, &pid);
    json_decref(m);
    if (r == -EINVAL)
        return al_e2b_stream_error(x->c, AL_CONNECT_INVALID_ARGUMENT, "process must name a pid or a tag");
    if (r == -ENOENT)
        return al_e2b_stream_error(x->c, AL_CONNECT_NOT_FOUND, "no running process of that pid or tag in this sandbox");
    if (r < 0)
        return al_e2b_stream_error(x->c, AL_CONNECT_UNAVAILABLE, "the sandbox's commands cannot be read now");
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_FOLLOW))
        return al_e2b_stream_error(x->c, AL_CONNECT_RESOURCE_EXHAUSTED,
                            "the person follows their most runs at once (followers_per_person)");
    return follow(x, run_id, pid);
}

enum MHD_Result al_e2b_process(al_route_ctx *x) {
    const char *method = x->arg[0];
    if (strcmp(method, "Start") == 0)
        return start(x);
    if (strcmp(method, "Connect") == 0)
        return reconnect(x);
    if (strcmp(method, "SendSignal") == 0)
        return send_signal(x);
    if (strcmp(method, "List") == 0)
        return list(x);
    if (strcmp(method, "SendInput") == 0 || strcmp(method, "CloseStdin") == 0 || strcmp(method, "StreamInput") == 0 ||
        strcmp(method, "Update") == 0) {
        const char *why = "a command of an airlock sandbox has no stdin stream and no pty: its input is given at "
                          "start only (its command line, files in /home/user)";
        return strcmp(method, "StreamInput") == 0 ? al_e2b_stream_error(x->c, AL_CONNECT_UNIMPLEMENTED, why)
                                                  : unary_error(x->c, AL_CONNECT_UNIMPLEMENTED, "%s", why);
    }
    return unary_error(x->c, AL_CONNECT_UNIMPLEMENTED, "process.Process has no method %s", method);
}
