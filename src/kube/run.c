/* One run in a pod of its own (kube.h's al_kube_run): its Secret and Pod
 * made (fieldValidation=Strict), the pod watched until main starts, main's
 * log followed to its end (the run's output), the pod watched until main's
 * end is known, collect's log followed to its end (/out), then the pod and
 * the Secret deleted, on every path. The wall clock is ours: at it the pod
 * is deleted with a grace of 2 s (its sidecar then writes /out as the
 * script left it). Every answer of the API server is hostile data with a
 * bound; a transient failure (a cut, a 5xx, a 410) is retried within a
 * budget, never forever. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../box/collect.h"
#include "../box/untar.h"
#include "api.h"
#include "kube_int.h"

/* how long a failing API server is retried before the run is an error */
#define RETRY_BUDGET_MS 15000
#define RETRY_SLEEP_MS 500
/* how long collect's log may take once main has ended */
#define COLLECT_MS 60000
/* a JSON call's own bound */
#define CALL_MS 15000

typedef struct krun {
    const al_kube_opts *o;
    const al_box_config *cfg;
    al_box_result *res;
    char base[AL_KUBE_NAME_MAX + 64];   /* /api/v1/namespaces/NS */
    al_kube_pod_state st;
    bool need_get;                      /* the watch's resourceVersion is stale: GET first */
    bool started, canceled, timed_out, over;
    bool deleted;                       /* this run asked for the pod's deletion */
    uint64_t created_ms, started_ms, ended_ms, unsched_since_ms;
    uint64_t wall_deadline_ms;          /* 0 until main has started */
    uint64_t pending_deadline_ms;       /* a pod that never starts */
    uint64_t collect_deadline_ms;
    uint64_t fail_since_ms;             /* the first of consecutive transient failures, or 0 */
    uint64_t skip, got;                 /* a log followed again: bytes already had */
    al_kube_watch w;
    al_kube_out out;
} krun;

static const char *status_message(const json_t *doc) {
    const char *m = json_string_value(json_object_get(doc, "message"));
    return m ? m : "";
}

static int call(krun *k, const char *method, const char *path, json_t *body, long *code, json_t **doc,
                al_error *err) {
    return al_kube_call(k->o->cluster, method, path, body, CALL_MS, code, doc, err);
}

static bool cancel_ready(const al_box_config *cfg) {
    if (cfg->cancel_fd < 0)
        return false;
    struct pollfd p = { .fd = cfg->cancel_fd, .events = POLLIN };
    return poll(&p, 1, 0) > 0;
}

/* the run must stop what it waits on: canceled, or past the wall clock */
static bool must_stop(krun *k) {
    if (!k->canceled && cancel_ready(k->cfg))
        k->canceled = true;
    if (!k->timed_out && k->wall_deadline_ms && al_now_ms() >= k->wall_deadline_ms)
        k->timed_out = true;
    return k->canceled || k->timed_out;
}

/* a pause between tries that a cancel cuts short */
static void pause_ms(krun *k, int ms) {
    struct pollfd p = { .fd = k->cfg->cancel_fd, .events = POLLIN };
    poll(&p, k->cfg->cancel_fd >= 0 ? 1 : 0, ms);
}

/* one more transient failure (WHY): 0 to try again after a pause, else
 * the error, once they have lasted RETRY_BUDGET_MS */
static int transient(krun *k, const char *what, const char *why, al_error *err) {
    uint64_t now = al_now_ms();
    if (!k->fail_since_ms)
        k->fail_since_ms = now;
    if (now - k->fail_since_ms >= RETRY_BUDGET_MS)
        return al_err(err, "provisioning", EIO, "the Kubernetes API server failed for %d s (%s): %.300s (check that "
                      "it is up and reachable from airlock: airlock smoke --driver kubernetes)",
                      RETRY_BUDGET_MS / 1000, what, why);
    pause_ms(k, RETRY_SLEEP_MS);
    return 0;
}

static void api_ok(krun *k) { k->fail_since_ms = 0; }

/* ---- the watch ---- */

/* the pod's state is one the run goes on from */
typedef bool (*enough_fn)(krun *k);

static void note_state(krun *k) {
    uint64_t now = al_now_ms();
    /* a pod being deleted that this run did not delete: main's end then is
     * the deletion's (SIGTERM), not the script's */
    if (k->st.deleting && !k->deleted && k->st.phase != AL_KPOD_DEADLINE) {
        k->st.phase = AL_KPOD_GONE;
        snprintf(k->st.why, sizeof k->st.why, "the pod was deleted by someone else");
    }
    if (k->st.phase == AL_KPOD_UNSCHEDULABLE) {
        if (!k->unsched_since_ms)
            k->unsched_since_ms = now;
    } else {
        k->unsched_since_ms = 0;
    }
    if ((k->st.phase == AL_KPOD_RUNNING || k->st.phase == AL_KPOD_DONE) && !k->started) {
        k->started = true;
        k->started_ms = now;
        k->wall_deadline_ms = now + k->cfg->limits.wall_ms;
        if (k->cfg->on_started)
            k->cfg->on_started(k->cfg->userdata);
    }
}

static bool unsched_expired(krun *k) {
    unsigned s = k->o->schedule_timeout_s ? k->o->schedule_timeout_s : 60;
    return k->st.phase == AL_KPOD_UNSCHEDULABLE && k->unsched_since_ms &&
           al_now_ms() - k->unsched_since_ms >= (uint64_t)s * 1000;
}

static bool terminal(krun *k) {
    al_kube_phase p = k->st.phase;
    return p == AL_KPOD_DONE || p == AL_KPOD_DEADLINE || p == AL_KPOD_BROKEN || p == AL_KPOD_GONE ||
           p == AL_KPOD_FAILED || unsched_expired(k);
}

static bool started_or_ended(krun *k) { return k->st.phase == AL_KPOD_RUNNING || terminal(k); }

static bool pending_expired(krun *k) { return !k->started && al_now_ms() >= k->pending_deadline_ms; }

typedef struct wctx {
    krun *k;
    enough_fn enough;
    bool expired, deleted;
    unsigned events;                    /* events this watch delivered */
} wctx;

static int on_event(al_kube_event ev, const al_kube_pod_state *st, void *ud) {
    wctx *c = ud;
    krun *k = c->k;
    c->events++;
    char rv[sizeof k->st.rv];
    snprintf(rv, sizeof rv, "%s", st->rv);
    switch (ev) {
    case AL_KEV_POD:
        k->st = *st;
        break;
    case AL_KEV_DELETED:
        c->deleted = true;
        /* main's end, if the pod had it when it went, is the run's end */
        if ((st->phase != AL_KPOD_DONE && st->phase != AL_KPOD_DEADLINE) || (!k->deleted && st->deleting)) {
            k->st.phase = AL_KPOD_GONE;
            snprintf(k->st.why, sizeof k->st.why, "the pod was deleted by someone else");
        } else {
            k->st = *st;
        }
        break;
    case AL_KEV_BOOKMARK:
        break;
    case AL_KEV_EXPIRED:
    case AL_KEV_ERROR:
        /* a watch that cannot go on from here: GET the pod again */
        c->expired = true;
        return 1;
    }
    snprintf(k->st.rv, sizeof k->st.rv, "%s", rv);
    note_state(k);
    return c->enough(k) || c->deleted ? 1 : 0;
}

static int watch_data(const char *buf, size_t len, void *ud) {
    wctx *c = ud;
    int r = al_kube_watch_feed(&c->k->w, buf, len);
    return r;
}

static bool watch_stop(void *ud) {
    wctx *c = ud;
    return must_stop(c->k) || unsched_expired(c->k) || pending_expired(c->k);
}

/* GET the pod: its state and resourceVersion (a 404: gone) */
static int get_pod(krun *k, al_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/pods/%s", k->base, k->o->run_id);
    long code = 0;
    json_t *doc = NULL;
    al_error e = { 0 };
    int r = call(k, "GET", path, NULL, &code, &doc, &e);
    if (r < 0 || code >= 500 || code == 429) {
        json_decref(doc);
        return transient(k, "GET the pod", r < 0 ? e.msg : status_message(doc), err) < 0 ? -EIO : 1;
    }
    api_ok(k);
    if (code == 404) {
        k->st.phase = AL_KPOD_GONE;
        snprintf(k->st.why, sizeof k->st.why, "the pod was deleted by someone else");
    } else if (code == 200) {
        al_kube_pod_classify(doc, &k->st);
        k->need_get = false;
        note_state(k);
    } else {
        r = al_err(err, "provisioning", EIO, "GET the pod: %ld: %.300s", code, status_message(doc));
    }
    json_decref(doc);
    return r < 0 ? r : 0;
}

/* Watch the pod until ENOUGH (or a stop: the caller reads the flags). */
static int watch_until(krun *k, enough_fn enough, al_error *err) {
    for (;;) {
        if (enough(k) || must_stop(k) || pending_expired(k))
            return 0;
        if (k->need_get || !k->st.rv[0]) {
            int r = get_pod(k, err);
            if (r < 0)
                return r;
            if (r > 0)
                continue;
            if (enough(k))
                return 0;
        }
        char path[1024];
        snprintf(path, sizeof path,
                 "%s/pods?watch=1&fieldSelector=metadata.name%%3D%s&resourceVersion=%s&allowWatchBookmarks=true"
                 "&timeoutSeconds=60",
                 k->base, k->o->run_id, k->st.rv);
        wctx c = { .k = k, .enough = enough };
        k->w.on_event = on_event;
        k->w.ud = &c;
        k->w.len = 0;
        al_kube_stream_ops ops = { .data = watch_data, .stop = watch_stop, .ud = &c };
        long code = 0;
        json_t *status = NULL;
        al_error e = { 0 };
        uint64_t began = al_now_ms();
        int r = al_kube_stream(k->o->cluster, path, &ops, &code, &status, &e);
        const char *msg = r < 0 ? e.msg : status_message(status);
        char why[320];
        snprintf(why, sizeof why, "%.300s", msg);
        json_decref(status);
        if (r < 0 || code >= 500 || code == 429) {
            /* a cut stream may have left half a line */
            k->need_get = true;
            if (transient(k, "watch the pod", why, err) < 0)
                return -EIO;
            continue;
        }
        if (code == 410 || c.expired) {
            k->need_get = true;
            continue;
        }
        if (code >= 400)
            return al_err(err, "provisioning", EIO, "watch the pod: %ld: %s", code, why);
        api_ok(k);
        if (k->w.why[0] && !c.expired && !enough(k) && !c.deleted) {
            /* a line that was not an event: the stream is not to be
             * trusted from there; GET and watch again */
            k->w.why[0] = '\0';
            k->need_get = true;
            if (transient(k, "watch the pod", "a line that is not an event", err) < 0)
                return -EIO;
        }
        /* a watch that ended (its timeout, or the server's): watch again,
         * but one that ended at once and empty (a broken server, or a proxy
         * in between that cuts every watch) not in a tight loop of
         * handshakes against the API server */
        if (!c.events && al_now_ms() - began < 1000)
            pause_ms(k, RETRY_SLEEP_MS);
    }
}

/* ---- the logs ---- */

typedef struct lctx {
    krun *k;
    int (*sink)(krun *k, const char *buf, size_t len);
    bool collect;
} lctx;

static int log_data(const char *buf, size_t len, void *ud) {
    lctx *c = ud;
    krun *k = c->k;
    /* a log followed again starts at its beginning: what was had is skipped */
    if (k->got < k->skip) {
        size_t drop = k->skip - k->got < len ? (size_t)(k->skip - k->got) : len;
        k->got += drop;
        buf += drop;
        len -= drop;
    }
    k->got += len;
    return len ? c->sink(k, buf, len) : 0;
}

static bool log_stop(void *ud) {
    lctx *c = ud;
    krun *k = c->k;
    if (c->collect)
        return (k->canceled || cancel_ready(k->cfg) ? (k->canceled = true) : false) ||
               al_now_ms() >= k->collect_deadline_ms;
    return must_stop(k);
}

static int main_sink(krun *k, const char *buf, size_t len) {
    /* the API serves stdout and stderr merged (no split streams without an
     * alpha gate): both are stdout here, and the driver's badge says so */
    if (al_box_result_output(k->cfg, k->res, AL_STREAM_STDOUT, buf, len)) {
        k->over = true;
        return 1;
    }
    return 0;
}

static int collect_sink(krun *k, const char *buf, size_t len) {
    int r = al_kube_out_feed(&k->out, buf, len);
    if (r < 0) {
        /* ours (the memfd), not the script's: an error, never a cut */
        k->out.state = AL_KOUT_FAILED;
        snprintf(k->out.why, sizeof k->out.why, "writing /out's tar: %s", strerror(-r));
        return 1;
    }
    /* (after the end line the log is read to its end, which comes as the
     * sidecar exits: tar's messages may come after it) */
    return k->out.state == AL_KOUT_FAILED || k->out.over;
}

static bool waiting_to_start(long code, const char *msg) {
    return code == 400 && (strstr(msg, "is waiting to start") || strstr(msg, "PodInitializing") ||
                           strstr(msg, "ContainerCreating"));
}

/* Follow CONTAINER's log to its end (or a stop), its bytes to SINK; a cut
 * is followed again from where it was. 1: the pod is gone. */
static int follow(krun *k, const char *container, uint64_t limit, int (*sink)(krun *, const char *, size_t),
                  al_error *err) {
    char path[768];
    int n = snprintf(path, sizeof path, "%s/pods/%s/log?container=%s&follow=true", k->base, k->o->run_id, container);
    if (limit)
        snprintf(path + n, sizeof path - (size_t)n, "&limitBytes=%llu", (unsigned long long)limit);
    lctx c = { .k = k, .sink = sink, .collect = strcmp(container, "collect") == 0 };
    k->skip = k->got = 0;
    for (;;) {
        if (log_stop(&c))
            return 0;
        al_kube_stream_ops ops = { .data = log_data, .stop = log_stop, .ud = &c };
        long code = 0;
        json_t *status = NULL;
        al_error e = { 0 };
        k->skip = k->got;
        k->got = 0;
        int r = al_kube_stream(k->o->cluster, path, &ops, &code, &status, &e);
        char why[320];
        snprintf(why, sizeof why, "%.300s", r < 0 ? e.msg : status_message(status));
        json_decref(status);
        if (r == 0 && code >= 200 && code < 300) {
            api_ok(k);
            return 0;
        }
        if (r == 0 && waiting_to_start(code, why)) {
            api_ok(k);
            pause_ms(k, 200);
            continue;
        }
        if (r == 0 && code == 404)
            return 1;
        if (r < 0 || code >= 500 || code == 429) {
            if (transient(k, c.collect ? "follow collect's log" : "follow main's log", why, err) < 0)
                return -EIO;
            continue;
        }
        return al_err(err, c.collect ? "collect" : "provisioning", EIO, "the %s container's log: %ld: %s",
                      container, code, why);
    }
}

/* ---- make, delete ---- */

static int create(krun *k, const char *kind, json_t *obj, al_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s?fieldValidation=Strict", k->base, kind);
    for (;;) {
        long code = 0;
        json_t *doc = NULL;
        al_error e = { 0 };
        int r = call(k, "POST", path, obj, &code, &doc, &e);
        if (r == 0 && code == 201) {
            if (strcmp(kind, "pods") == 0)
                al_kube_pod_classify(doc, &k->st);
            json_decref(doc);
            api_ok(k);
            return 0;
        }
        char why[320];
        snprintf(why, sizeof why, "%.300s", r < 0 ? e.msg : status_message(doc));
        json_decref(doc);
        /* a 5xx may have made it: a 409 on the next try is ours then */
        if (r == 0 && code == 409 && k->fail_since_ms)
            return 0;
        if (r < 0 || code >= 500 || code == 429) {
            if (transient(k, kind, why, err) < 0)
                return -EIO;
            continue;
        }
        /* what to do, for the answers an operator can fix */
        const char *hint = code == 401 ? " (check the kubeconfig's credentials: the token may have expired)"
                         : code == 403 ? " (check the Role bound to airlock's credentials in this namespace "
                                         "(docs/kubernetes.md), and the namespace's Pod Security level)"
                         : code == 404 ? " (check that the namespace exists: kubernetes_namespace or --namespace)"
                         : "";
        return al_err(err, "provisioning", code == 401 || code == 403 ? EACCES : EIO,
                      "create the run's %s: the API server answered %ld: %s%s",
                      strcmp(kind, "pods") == 0 ? "Pod" : "Secret", code, why, hint);
    }
}

/* DELETE KIND/NAME with a grace of GRACE s: 0 when it is gone or going */
static int delete_one(const al_kube_opts *o, const char *base, const char *kind, const char *name, int grace,
                      al_error *err) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", base, kind, name);
    json_t *body = json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
                             "gracePeriodSeconds", grace, "propagationPolicy", "Background");
    int r = -EIO;
    for (int tries = 0; tries < 5 && r < 0; tries++) {
        long code = 0;
        json_t *doc = NULL;
        al_error e = { 0 };
        int c = al_kube_call(o->cluster, "DELETE", path, body, CALL_MS, &code, &doc, &e);
        if (c == 0 && (code == 200 || code == 202 || code == 404))
            r = 0;
        else if (c == 0 && code < 500 && code != 429) {
            r = al_err(err, "cleanup", EIO, "delete %s %s: %ld: %.200s", kind, name, code, status_message(doc));
            json_decref(doc);
            break;
        } else {
            al_err(err, "cleanup", EIO, "delete %s %s: %.200s", kind, name, c < 0 ? e.msg : status_message(doc));
            usleep(300 * 1000);
        }
        json_decref(doc);
    }
    json_decref(body);
    return r;
}

/* ---- the run ---- */

/* the result, from how the pod ended */
static int end_mapping(krun *k, al_error *err) {
    al_box_result *res = k->res;
    if (k->canceled) {
        res->reason = AL_REASON_CANCELED;
        return 0;
    }
    if (k->timed_out) {
        res->reason = AL_REASON_TIMEOUT;
        res->signal = SIGKILL;
        return 0;
    }
    if (k->over) {
        res->reason = AL_REASON_OUTPUT_LIMIT;
        res->signal = SIGKILL;
        return 0;
    }
    switch (k->st.phase) {
    case AL_KPOD_DONE:
        if (k->st.oom) {
            res->reason = AL_REASON_MEMORY;
            res->signal = SIGKILL;
        } else if (k->st.exit_code > 128 && k->st.exit_code < 128 + 65) {
            res->reason = AL_REASON_EXITED;
            res->signal = k->st.exit_code - 128;
        } else {
            res->reason = AL_REASON_EXITED;
            res->exit_code = k->st.exit_code;
        }
        return 0;
    case AL_KPOD_DEADLINE:
        if (k->started) {
            res->reason = AL_REASON_TIMEOUT;
            res->signal = SIGKILL;
            return 0;
        }
        return al_err(err, "provisioning", ETIMEDOUT, "the pod's deadline passed before main started: %s",
                      k->st.why);
    case AL_KPOD_UNSCHEDULABLE:
        return al_err(err, "provisioning", EAGAIN, "%s (for %u s)", k->st.why,
                      k->o->schedule_timeout_s ? k->o->schedule_timeout_s : 60);
    case AL_KPOD_BROKEN:
        return al_err(err, "provisioning", EIO, "the pod cannot start: %s", k->st.why);
    case AL_KPOD_GONE:
        return al_err(err, "provisioning", ESRCH, "the pod was deleted by someone else");
    case AL_KPOD_FAILED:
        return al_err(err, "provisioning", EIO, "%s", k->st.why);
    default:
        return al_err(err, "provisioning", ETIMEDOUT, "the pod did not start within %llu s",
                      (unsigned long long)((k->pending_deadline_ms - k->created_ms) / 1000));
    }
}

/* What the sidecar's tar could not read of /out, as skips (the native
 * box's collection names an unreadable file so): "tar: ./P: Cannot open:
 * WHY" is P, the others say more may be left out. */
static void tar_skips(const al_kube_out *o, al_box_result *res) {
    bool named = false;
    for (int i = 0; i < o->n_tar_msgs; i++)
        named |= al_untar_unreadable(o->tar_msgs[i], res);
    if (!named || o->n_tar_msgs >= (int)(sizeof o->tar_msgs / sizeof *o->tar_msgs)) {
        char why[96];
        snprintf(why, sizeof why, "the collect sidecar's tar (status %d) could not read all of /out", o->tar_status);
        al_collect_add_skip(res, ".", why);
    }
}

/* collect's log, decoded, then unpacked into the out dir */
static int collect_out(krun *k, al_error *err) {
    _cleanup_close_ int fd = memfd_create("airlock-kube-out", MFD_CLOEXEC);
    if (fd < 0)
        return al_err(err, "collect", errno, "memfd_create: %m");
    uint64_t t = k->cfg->limits.tmpfs_bytes;
    al_kube_out_init(&k->out, fd, t / 3 * 4 + 4 + (64u << 10));
    k->collect_deadline_ms = al_now_ms() + COLLECT_MS;
    int r = follow(k, "collect", 0, collect_sink, err);
    if (r < 0)
        return r;
    if (r == 1)
        return al_err(err, "collect", ESRCH, "the pod was gone before its collect sidecar's log was read");
    if (k->canceled)
        return 0;
    if (k->out.state == AL_KOUT_FAILED)
        return al_err(err, "collect", EIO, "%s", k->out.why);
    if (k->out.state == AL_KOUT_BEFORE)
        return al_err(err, "collect", EIO, "the collect sidecar's log ended without its end line (no tar began)");
    /* A tar that began and was cut (at its bound, or before its end line:
     * the kubelet gives the sidecar the pod's 2 s grace once main has
     * ended, then SIGKILL) is the script's /out being too big or too slow
     * to read (a sparse file is both, at no cost to the script): the run's
     * own outcome, its /out cut and said so, never airlock's error (which
     * is refunded). */
    const char *cut = k->out.over ? "/out's tar exceeded its bound: the rest of /out was not examined"
                    : k->out.state != AL_KOUT_DONE
                        ? "the collect sidecar's tar was cut before its end (it did not finish within the pod's "
                          "grace after main ended): the rest of /out was not examined"
                        : NULL;
    r = al_kube_collect(k->cfg, fd, cut, k->res, err);
    /* (COLLECT's end line carries base64's status, not tar's: tar's own
     * messages are what says it left something out) */
    if (r == 0 && (k->out.tar_status != 0 || k->out.n_tar_msgs))
        tar_skips(&k->out, k->res);
    return r;
}

/* main's log, then its end; at a stop, the pod deleted (its sidecar
 * writes /out then) */
static int run_pod(krun *k, al_error *err) {
    int r = watch_until(k, started_or_ended, err);
    if (r < 0 || !k->started)
        return r;
    uint64_t lim = k->cfg->limits.output_bytes * 2 + 1;
    r = follow(k, "main", lim, main_sink, err);
    if (r < 0)
        return r;
    if (r == 1) {
        /* its log is gone with it */
        k->st.phase = AL_KPOD_GONE;
        r = 0;
    }
    if (r == 0 && !k->over && !must_stop(k))
        r = watch_until(k, terminal, err);
    if (r < 0)
        return r;
    k->ended_ms = al_now_ms();
    if (k->over || must_stop(k)) {
        k->deleted = true;
        if ((r = delete_one(k->o, k->base, "pods", k->o->run_id, k->canceled ? 0 : 2, err)) < 0)
            return r;
        if (k->canceled)
            return 0;
    }
    if (k->st.phase == AL_KPOD_GONE)
        return 0;
    if (k->cfg->out_dirfd >= 0)
        r = collect_out(k, err);
    return r;
}

int al_kube_run(const al_kube_opts *o, const al_box_config *cfg, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    snprintf(res->driver, sizeof res->driver, "kubernetes");
    al_kube_controls(o, false, &res->controls);
    al_error err = { 0 };
    json_t *secret = NULL, *pod = NULL, *netpol = NULL;
    krun k = { .o = o, .cfg = cfg, .res = res };
    int r = 0;
    if (!o->cluster || !o->run_id || !o->image_ref)
        r = al_err(&err, "provisioning", EINVAL, "a Kubernetes run needs a cluster, a name and an image");
    if (r == 0)
        r = al_kube_objects(o, cfg, &secret, &pod, &netpol, &err);
    snprintf(k.base, sizeof k.base, "/api/v1/namespaces/%s", o->cluster ? o->cluster->namespace_ : "");
    bool made_secret = false, made_pod = false;
    if (r == 0 && (r = create(&k, "secrets", secret, &err)) == 0)
        made_secret = true;
    if (r == 0 && (r = create(&k, "pods", pod, &err)) == 0) {
        made_pod = true;
        unsigned s = o->schedule_timeout_s ? o->schedule_timeout_s : 60;
        k.created_ms = al_now_ms();
        k.pending_deadline_ms = k.created_ms + (uint64_t)s * 1000 + cfg->limits.wall_ms + 30000;
        k.need_get = !k.st.rv[0];
        r = run_pod(&k, &err);
    }
    if (r == 0)
        r = end_mapping(&k, &err);
    if (k.started)
        res->wall_ms = (k.ended_ms ? k.ended_ms : al_now_ms()) - k.started_ms;
    /* on every path, whatever happened above: the logs were read to their
     * end first (the pod is what holds them) */
    al_error cerr = { 0 };
    if (made_pod)
        delete_one(o, k.base, "pods", o->run_id, 0, &cerr);
    if (made_secret)
        delete_one(o, k.base, "secrets", o->run_id, 0, &cerr);
    al_kube_watch_free(&k.w);
    json_decref(secret);
    json_decref(pod);
    json_decref(netpol);
    if (r < 0 && k.canceled) {
        res->reason = AL_REASON_CANCELED;
        return 0;
    }
    if (r < 0) {
        res->reason = AL_REASON_ERROR;
        res->error = err;
    }
    return r < 0 ? r : 0;
}
