/* A sandbox's run in its session box (run_session.h). */
#include "run_session.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sandbox_run.h"
#include "sandbox_session.h"
#include "service_int.h"
#include "session_box.h"

/* what a call's result keeps of each stream (its events have it all) */
#define KEEP_MAX (1u << 20)
/* how long past its own timeout the service waits for a call's end */
#define GRACE_MS 5000
#define POLL_MS 40

bool al_run_session_wanted(al_service *s, const al_settings *st, const al_store_run *run, char *id, size_t n) {
    return s->driver == &al_driver_native && json_is_true(json_object_get(st->doc, "e2b_session_box")) &&
           al_sandbox_run_of(run, id, n);
}

typedef struct call {
    al_run_session_out_fn out;
    void *ud;
    char *keep[2];
    size_t len[2], total[2];
} call;

static int chunk(void *ud, const al_helper_event *ev) {
    call *c = ud;
    int i = ev->kind == AL_HELPER_EVENT_STDOUT ? 0 : 1;
    if (!ev->data || !ev->len)
        return 0;
    c->out(c->ud, i, ev->data, ev->len);
    c->total[i] += ev->len;
    size_t room = KEEP_MAX - c->len[i], n = ev->len < room ? ev->len : room;
    if (n) {
        char *p = realloc(c->keep[i], c->len[i] + n + 1);
        if (!p)
            return -ENOMEM;
        memcpy(p + c->len[i], ev->data, n);
        c->len[i] += n;
        p[c->len[i]] = '\0';
        c->keep[i] = p;
    }
    return 0;
}

/* The request of RUN: its code as it was approved, in the box's /work. */
static json_t *request(const al_store_run *run, uint64_t *timeout_ms) {
    const char *kind = strcmp(run->language, "python") == 0 ? "python"
                       : strcmp(run->language, "bash") == 0 ? "bash"
                       : strcmp(run->language, "node") == 0 ? "node" : NULL;
    json_t *lim = run->limits ? json_loads(run->limits, 0, NULL) : NULL;
    json_t *ms = json_object_get(lim, "timeout_ms"), *sec = json_object_get(lim, "timeout_s");
    *timeout_ms = json_is_integer(ms) && json_integer_value(ms) > 0 ? (uint64_t)json_integer_value(ms)
                  : json_is_integer(sec) && json_integer_value(sec) > 0 ? (uint64_t)json_integer_value(sec) * 1000
                                                                         : 30000;
    json_decref(lim);
    if (!kind)
        return NULL;
    return json_pack("{s:s, s:s, s:s, s:{}, s:s, s:I}", "id", run->id, "kind", kind, "code", run->code, "env",
                     "cwd", "/work", "timeout_ms", (json_int_t)*timeout_ms);
}

static json_t *text_of(char *s) {
    return json_string(s ? al_utf8_fix(s) : "");
}

static json_t *result(call *c, const char *id, const char *reason, int exit_code) {
    json_t *res = json_pack("{s:s, s:o, s:o, s:o, s:b, s:b, s:I, s:I, s:[], s:[], s:{s:b, s:s, s:s}}", "reason",
                            reason, "exit_code", exit_code >= 0 ? json_integer(exit_code) : json_null(), "stdout",
                            text_of(c->keep[0]), "stderr", text_of(c->keep[1]), "stdout_truncated",
                            c->total[0] > c->len[0], "stderr_truncated", c->total[1] > c->len[1], "stdout_bytes",
                            (json_int_t)c->total[0], "stderr_bytes", (json_int_t)c->total[1], "artifacts", "skipped",
                            "box", "session", 1, "driver", "native", "sandbox", id);
    return res;
}

/* Whether A was asked to end: 1 canceled, 2 the service stops, 0 not. */
static int asked(al_service *s, active_run *a) {
    pthread_mutex_lock(&s->mu);
    int r = a->cancel_requested ? 1 : a->stop_requested ? 2 : 0;
    pthread_mutex_unlock(&s->mu);
    return r;
}

json_t *al_run_session_call(al_service *s, active_run *a, const al_store_run *run, const char *id,
                            al_run_session_out_fn out, void *ud, al_error *err) {
    uint64_t timeout_ms = 0, gen = 0;
    char prev[300];
    json_t *req = request(run, &timeout_ms);
    if (!req) {
        al_err(err, "session", EINVAL, "a session box runs python, bash and node, not %s", run->language);
        return NULL;
    }
    int r = al_session_box_ensure(s, run, id, &gen, prev, sizeof prev, err);
    char chan_path[PATH_MAX];
    if (r == 0 && snprintf(chan_path, sizeof chan_path, "%s/sandboxes/%s/session/box", s->cfg.state_dir, id) >=
                      (int)sizeof chan_path)
        r = al_err(err, "session", ENAMETOOLONG, "the state directory's path is too long");
    _cleanup_close_ int chan = r == 0 ? open(chan_path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (r == 0 && chan < 0)
        r = al_err(err, "session", errno, "the session box's channel cannot be opened: %m");
    if (r == 0)
        r = al_session_submit(chan, run->id, req, err);
    json_decref(req);
    if (r < 0)
        return NULL;
    call c = { .out = out, .ud = ud };
    if (prev[0]) {
        /* a new box in place of one that ended: the call says what is gone */
        char note[512];
        int n = snprintf(note, sizeof note, "airlock: a new session box was started for this sandbox (the previous one "
                         "ended: %s); variables and processes of earlier calls are gone, files are kept\n", prev);
        al_helper_event ev = { .kind = AL_HELPER_EVENT_STDERR, .data = note,
                               .len = n < (int)sizeof note ? (size_t)n : sizeof note - 1 };
        chunk(&c, &ev);
    }
    uint64_t off = 0, deadline = al_now_ms() + timeout_ms + GRACE_MS;
    bool cancel_sent = false;
    json_t *res = NULL;
    char why[300];
    for (;;) {
        al_session_end end;
        int e = al_session_end_read(chan, run->id, &end, err);
        /* what the box wrote before its end, all of it */
        if (e >= 0 && (r = al_session_follow(chan, run->id, &off, chunk, &c, err)) < 0)
            break;
        if (e < 0)
            break;
        if (e == 1) {
            int why_asked = asked(s, a);
            res = result(&c, id, why_asked ? "canceled" : end.timed_out ? "timeout" : "exited",
                         end.timed_out ? -1 : end.exit_code);
            /* the call could not complete (its interpreter died, ...): an
             * error, in the agent's words (judge ends the run so) */
            if (!why_asked && !end.timed_out && end.error[0]) {
                json_object_set_new(res, "reason", json_string("session_error"));
                json_object_set_new(res, "error", json_pack("{s:s, s:s}", "step", "session", "message", end.error));
            }
            break;
        }
        if (!al_session_box_alive(s, id, gen, why, sizeof why)) {
            al_err(err, "session", EPIPE, "the sandbox's session box ended during this call: %s. Its processes and "
                   "variables are gone, its files were kept; the next call starts a new session box", why);
            break;
        }
        if (!cancel_sent && (asked(s, a) || al_now_ms() > deadline)) {
            /* the call's process group, not the box: killed by the agent */
            al_error cerr = { 0 };
            al_session_cancel(chan, run->id, &cerr);
            cancel_sent = true;
            deadline = al_now_ms() + GRACE_MS;
        } else if (cancel_sent && al_now_ms() > deadline) {
            res = result(&c, id, asked(s, a) ? "canceled" : "timeout", -1);
            break;
        }
        nanosleep(&(struct timespec){ .tv_nsec = POLL_MS * 1000000L }, NULL);
    }
    /* the channel keeps only running calls (a late line of this one is
     * dropped by the relay) */
    al_session_forget(chan, run->id);
    free(c.keep[0]);
    free(c.keep[1]);
    return res;
}
