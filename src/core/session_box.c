/* The E2B session box, held by this node (session_box.h). */
#include "session_box.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "helper_events.h"
#include "run_job.h"
#include "sandbox.h"
#include "sandbox_run.h"
#include "sandbox_session.h"
#include "service_int.h"
#include "session_agent.h"

/* the longest event line of the helper (a 64 KiB chunk in base64) */
#define EVENT_LINE_MAX (256u << 10)
/* what a session box may print over its life before it is ended: its
 * calls' lines are relayed as they come, this bounds the helper's copy */
#define SESSION_OUTPUT_MAX (64u << 20)
/* how often the keeper looks for its sandbox's end and for "stop", and
 * says it holds the box (DIR/holder's time) */
#define WATCH_MS 300
/* a holder file older than this is a node's that died */
#define HOLDER_STALE_S AL_SESSION_HOLDER_STALE_S

typedef struct al_session_box {
    char id[32];
    uint64_t gen;
    al_service *s;
    al_driver_run dr;
    pthread_t thread;
    bool dead;                    /* its helper exited (under mu: no more cancel) */
    bool ended;                   /* and its files flowed back (under mu) */
    bool cancel_sent;
    char why[300];
    char dir[PATH_MAX];           /* STATE/sandboxes/ID/session */
    /* the start, made by the keeper thread (a helper dies with the thread
     * that started it): its job, and its outcome for al_session_box_ensure */
    al_job *job;
    bool start_done;
    int start_rc;
    al_error start_err;
    pthread_cond_t start_cond;
    struct al_session_box *next;
} al_session_box;

static int session_dir(al_service *s, const char *id, char *buf, size_t n) {
    return snprintf(buf, n, "%s/sandboxes/%s/session", s->cfg.state_dir, id) < (int)n ? 0 : -ENAMETOOLONG;
}

int al_session_box_ask_end(al_service *s, const char *id) {
    char d[PATH_MAX], p[PATH_MAX + 16];
    if (session_dir(s, id, d, sizeof d) < 0)
        return -ENAMETOOLONG;
    snprintf(p, sizeof p, "%s/stop", d);
    int fd = open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;   /* no session there */
    close(fd);
    return 0;
}

/* Why a box ended, from the helper's result (NULL: none). */
static void ended_why(const json_t *result, const char *relay_err, char *why, size_t n) {
    const char *reason = json_string_value(json_object_get(result, "reason"));
    if (relay_err && relay_err[0])
        snprintf(why, n, "it broke its channel's rules (%s)", relay_err);
    else if (!reason)
        snprintf(why, n, "its helper ended without a result");
    else if (strcmp(reason, "memory") == 0)
        snprintf(why, n, "it ran out of memory (the workspace's memory limit)");
    else if (strcmp(reason, "pids") == 0)
        snprintf(why, n, "it reached the workspace's process limit");
    else if (strcmp(reason, "timeout") == 0)
        snprintf(why, n, "it reached its lifetime (the workspace's sandbox_max_timeout_s)");
    else if (strcmp(reason, "canceled") == 0)
        snprintf(why, n, "it was ended (its sandbox was killed, ended or paused, or the service stopped)");
    else if (strcmp(reason, "output_limit") == 0)
        snprintf(why, n, "its calls printed more than %u MiB over its life", SESSION_OUTPUT_MAX >> 20);
    else
        snprintf(why, n, "its agent exited (%s)", reason);
}

/* The box's /work and /out, collected into DIR/run/{work,out}, in place of
 * the sandbox's home/ and out/ (when collected whole). */
static void flow_back(al_session_box *b, json_t *result) {
    if (!json_is_true(json_object_get(json_object_get(result, "box"), "work_collected")))
        return;
    char run[PATH_MAX + 8];
    snprintf(run, sizeof run, "%s/run", b->dir);
    al_error err = { 0 };
    if (al_sandbox_flow_back_dir(b->s, b->id, run, &err) < 0)
        al_service_log(b->s, AL_LOG_WARN, "sandbox.session_flow_back_failed",
                       json_pack("{s:s, s:s}", "sandbox", b->id, "error", err.msg));
}

/* Whether the box is asked to end: its sandbox gone, or "stop" there. */
static bool asked_to_end(al_session_box *b) {
    char p[PATH_MAX + 16];
    struct stat st;
    snprintf(p, sizeof p, "%s/stop", b->dir);
    if (lstat(p, &st) == 0)
        return true;
    snprintf(p, sizeof p, "%s/../home", b->dir);
    return lstat(p, &st) < 0;
}

/* One helper event line: its stdout relayed (a relay error ends the box). */
static void event(al_session_box *b, al_session_relay *r, const char *line, size_t n, json_t **result,
                  al_error *rerr) {
    al_helper_event he;
    al_helper_event_kind k = al_helper_event_parse(line, n, &he);
    if (k == AL_HELPER_EVENT_STDOUT && he.data && !rerr->msg[0] &&
        al_session_relay_feed(r, he.data, he.len, rerr) < 0 && !b->cancel_sent) {
        b->s->driver->cancel(&b->dr);
        b->cancel_sent = true;
    }
    if (k == AL_HELPER_EVENT_RESULT) {
        json_decref(*result);
        *result = json_incref(he.value);
    }
    al_helper_event_clear(&he);
}

static void *keeper(void *p) {
    al_session_box *b = p;
    al_service *s = b->s;
    al_error serr = { 0 };
    int rc = s->driver->start(s->self_exe, b->job, &b->dr, &serr);
    if (rc < 0 && !serr.msg[0])
        al_err(&serr, "session", -rc, "the session box did not start: %s", strerror(-rc));
    pthread_mutex_lock(&s->mu);
    b->start_rc = rc;
    b->start_err = serr;
    b->start_done = true;
    pthread_cond_broadcast(&b->start_cond);
    pthread_mutex_unlock(&s->mu);
    if (rc < 0)
        return NULL;
    char cd[PATH_MAX + 8];
    snprintf(cd, sizeof cd, "%s/box", b->dir);
    _cleanup_close_ int chan = open(cd, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    al_session_relay r;
    al_session_relay_init(&r, chan);
    al_error rerr = { 0 };
    json_t *result = NULL;
    char *buf = malloc(EVENT_LINE_MAX);
    size_t len = 0;
    while (buf) {
        struct pollfd pf = { .fd = b->dr.events_fd, .events = POLLIN };
        int pr = poll(&pf, 1, WATCH_MS);
        char hp[PATH_MAX + 16];
        snprintf(hp, sizeof hp, "%s/holder", b->dir);
        utimensat(AT_FDCWD, hp, NULL, AT_SYMLINK_NOFOLLOW);
        if (!b->cancel_sent && asked_to_end(b)) {
            s->driver->cancel(&b->dr);
            b->cancel_sent = true;
        }
        if (pr <= 0)
            continue;
        ssize_t got = read(b->dr.events_fd, buf + len, EVENT_LINE_MAX - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
        char *at = buf, *nl;
        while ((nl = memchr(at, '\n', len - (size_t)(at - buf)))) {
            event(b, &r, at, (size_t)(nl - at) + 1, &result, &rerr);
            at = nl + 1;
        }
        len -= (size_t)(at - buf);
        memmove(buf, at, len);
        if (len == EVENT_LINE_MAX) {   /* no helper writes such a line: dropped, the box ended */
            if (!b->cancel_sent)
                s->driver->cancel(&b->dr);
            b->cancel_sent = true;
            len = 0;
        }
    }
    bool nomem = !buf;
    free(buf);
    if (nomem) {
        s->driver->cancel(&b->dr);
        /* drained unread, so the helper is never stuck writing */
        char sink[4096];
        while (read(b->dr.events_fd, sink, sizeof sink) > 0)
            ;
    }
    close(b->dr.events_fd);
    pthread_mutex_lock(&s->mu);
    b->dead = true;
    pthread_mutex_unlock(&s->mu);
    s->driver->wait(&b->dr);
    al_session_relay_clear(&r);
    char why[300];
    ended_why(result, rerr.msg, why, sizeof why);
    flow_back(b, result);
    json_decref(result);
    char run[PATH_MAX + 8];
    snprintf(run, sizeof run, "%s/run", b->dir);
    al_rm_rf(run);
    /* its files are back: the files API is the sandbox's again */
    snprintf(run, sizeof run, "%s/holder", b->dir);
    unlink(run);
    al_service_log(s, AL_LOG_INFO, "sandbox.session_ended", json_pack("{s:s, s:s}", "sandbox", b->id, "why", why));
    pthread_mutex_lock(&s->mu);
    snprintf(b->why, sizeof b->why, "%s", why);
    b->ended = true;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The channel made afresh: DIR/box, bound read-only at /skill in the box
 * (the agent; req/, the requests; out/, the relay's, 0700: not the box's
 * to read), and DIR/run (the box's job: its collected /work and /out). */
static int make_channel(al_service *s, const char *dir, al_error *err) {
    /* a session box another node holds (its holder file fresh) is not
     * this node's to replace: the call is refused, said */
    char hp[PATH_MAX + 16], other[64] = "";
    snprintf(hp, sizeof hp, "%s/holder", dir);
    struct stat st;
    _cleanup_close_ int hfd = open(hp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (hfd >= 0 && fstat(hfd, &st) == 0 && S_ISREG(st.st_mode) && time(NULL) - st.st_mtime < HOLDER_STALE_S) {
        ssize_t n = read(hfd, other, sizeof other - 1);
        other[n > 0 ? n : 0] = '\0';
        if (strcmp(other, s->node_id) != 0)
            return al_err(err, "session", EBUSY, "the sandbox's session box is held by node %s: a call claimed by "
                          "another node is refused (this one is %s)", other, s->node_id);
    }
    al_rm_rf(dir);
    char p[PATH_MAX + 32];
    static const struct { const char *rel; mode_t mode; } dirs[] = {
        { "", 0755 }, { "/box", 0755 }, { "/box/req", 0755 }, { "/box/out", 0700 }, { "/run", 0700 },
    };
    for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
        snprintf(p, sizeof p, "%s%s", dir, dirs[i].rel);
        if (mkdir(p, dirs[i].mode) < 0 || chmod(p, dirs[i].mode) < 0)
            return al_err(err, "session", errno, "mkdir %s: %m", p);
    }
    snprintf(p, sizeof p, "%s/holder", dir);
    _cleanup_close_ int h = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (h < 0 || al_write_all(h, s->node_id, strlen(s->node_id)) < 0)
        return al_err(err, "session", errno ? errno : EIO, "cannot write %s: %m", p);
    snprintf(p, sizeof p, "%s/box/agent.py", dir);
    _cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || al_write_all(fd, al_session_agent[0].text, strlen(al_session_agent[0].text)) < 0 ||
        fchmod(fd, 0644) < 0)
        return al_err(err, "session", errno ? errno : EIO, "cannot write %s: %m", p);
    return 0;
}

/* The box's job: RUN's (image, network, limits, the sandbox's home as
 * /work), its process the agent, its life the workspace's longest
 * sandbox, its output the lifetime cap. */
static int box_job(al_service *s, const al_store_run *run, const char *dir, al_job *job, al_error *err) {
    char rd[PATH_MAX + 8], box[PATH_MAX + 8];
    snprintf(rd, sizeof rd, "%s/run", dir);
    snprintf(box, sizeof box, "%s/box", dir);
    json_t *skipped = NULL;
    int r = al_run_job_build(s, run, rd, job, &skipped, err);
    json_decref(skipped);
    if (r < 0)
        return r;
    al_settings st;
    if ((r = al_settings_get(s, run->workspace_id, &st, err)) < 0)
        return r;
    job->limits.wall_ms = (uint64_t)st.sandbox_max_timeout_s * 1000;
    al_settings_done(&st);
    job->limits.output_bytes = SESSION_OUTPUT_MAX;
    job->lang = al_lang_by_name("python");
    if (!job->lang || al_job_set(&job->code, "") < 0 || al_job_set(&job->skill_dir, box) < 0 ||
        al_job_set(&job->script, "/skill/agent.py") < 0 || al_job_set(&job->stdin_path, NULL) < 0)
        return al_err(err, "session", ENOMEM, "out of memory");
    job->has_args = false;
    return 0;
}

/* The live box of ID, every ended box (of any sandbox) joined and freed
 * first: their files are back before a new one stages them, and no ended
 * keeper waits long to be joined. How ID's last box ended, if it did, in
 * PREV (N bytes; "" none). Called with session_mu held. */
static al_session_box *held(al_service *s, const char *id, char *prev, size_t n) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        al_session_box **pp = &s->sessions, *b = NULL, *live = NULL;
        for (; *pp; pp = &(*pp)->next) {
            if ((*pp)->ended) {
                b = *pp;
                break;
            }
            if (strcmp((*pp)->id, id) == 0)
                live = *pp;
        }
        if (!b) {
            pthread_mutex_unlock(&s->mu);
            return live;
        }
        *pp = b->next;
        if (strcmp(b->id, id) == 0)
            snprintf(prev, n, "%s", b->why);
        pthread_mutex_unlock(&s->mu);
        pthread_join(b->thread, NULL);
        pthread_cond_destroy(&b->start_cond);
        free(b);
    }
}

int al_session_box_ensure(al_service *s, const al_store_run *run, const char *id, uint64_t *gen, char *prev,
                          size_t prev_n, al_error *err) {
    pthread_mutex_lock(&s->session_mu);
    prev[0] = '\0';
    al_session_box *b = held(s, id, prev, prev_n);
    /* asked to end (a pause, then a resume): its end waited for, so the
     * call gets a new box holding the files the old one flowed back */
    for (int i = 0; b && asked_to_end(b) && i < 200; i++) {
        al_session_box_end(s, id);
        nanosleep(&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
        b = held(s, id, prev, prev_n);
    }
    int r = 0;
    if (b) {
        prev[0] = '\0';
        *gen = b->gen;
        goto out;
    }
    if (!(b = calloc(1, sizeof *b))) {
        r = al_err(err, "session", ENOMEM, "out of memory");
        goto out;
    }
    b->s = s;
    snprintf(b->id, sizeof b->id, "%s", id);
    al_job job;
    al_job_init(&job);
    if (session_dir(s, id, b->dir, sizeof b->dir) < 0)
        r = al_err(err, "session", ENAMETOOLONG, "the state directory's path is too long");
    if (r == 0)
        r = make_channel(s, b->dir, err);
    if (r == 0)
        r = box_job(s, run, b->dir, &job, err);
    b->dr = (al_driver_run){ .pid = -1, .events_fd = -1, .job_fd = -1 };
    b->job = &job;
    pthread_cond_init(&b->start_cond, NULL);
    if (r == 0 && pthread_create(&b->thread, NULL, keeper, b) != 0)
        r = al_err(err, "session", EAGAIN, "no thread to hold the session box");
    else if (r == 0) {
        pthread_mutex_lock(&s->mu);
        while (!b->start_done)
            pthread_cond_wait(&b->start_cond, &s->mu);
        r = b->start_rc;
        if (r < 0)
            *err = b->start_err;
        pthread_mutex_unlock(&s->mu);
        if (r < 0)
            pthread_join(b->thread, NULL);
    }
    al_job_free(&job);
    b->job = NULL;
    if (r < 0) {
        pthread_cond_destroy(&b->start_cond);
        free(b);
        goto out;
    }
    pthread_mutex_lock(&s->mu);
    b->gen = *gen = ++s->session_gen;
    b->next = s->sessions;
    s->sessions = b;
    pthread_mutex_unlock(&s->mu);
out:
    pthread_mutex_unlock(&s->session_mu);
    return r;
}

int al_session_box_alive(al_service *s, const char *id, uint64_t gen, char *why, size_t n) {
    pthread_mutex_lock(&s->mu);
    int alive = 0;
    snprintf(why, n, "it is no longer held by this node");
    for (al_session_box *b = s->sessions; b; b = b->next)
        if (strcmp(b->id, id) == 0 && b->gen == gen) {
            alive = !b->ended;
            if (b->ended)
                snprintf(why, n, "%s", b->why);
        }
    pthread_mutex_unlock(&s->mu);
    return alive;
}

void al_session_box_end(al_service *s, const char *id) {
    pthread_mutex_lock(&s->mu);
    for (al_session_box *b = s->sessions; b; b = b->next)
        if (strcmp(b->id, id) == 0 && !b->dead && b->dr.pid > 0)
            s->driver->cancel(&b->dr);
    pthread_mutex_unlock(&s->mu);
}

void al_session_box_stop_all(al_service *s) {
    pthread_mutex_lock(&s->session_mu);
    pthread_mutex_lock(&s->mu);
    for (al_session_box *b = s->sessions; b; b = b->next)
        if (!b->dead && b->dr.pid > 0)
            s->driver->cancel(&b->dr);
    al_session_box *l = s->sessions;
    s->sessions = NULL;
    pthread_mutex_unlock(&s->mu);
    while (l) {
        al_session_box *next = l->next;
        pthread_join(l->thread, NULL);
        pthread_cond_destroy(&l->start_cond);
        free(l);
        l = next;
    }
    pthread_mutex_unlock(&s->session_mu);
}
