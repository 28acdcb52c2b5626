/*
 * The daemon's core: configuration, a run's events and followers, the
 * holds per person, the queue's admission and cancel, recovery after a
 * crash, and the service's start and stop. The scheduler and the runners
 * are in runner.c.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner.h"
#include "service.h"
#include "skills.h"
#include "../image/image.h"
#include "../store/audit.h"
#include "checkpoint.h"
#include "../store/nodes.h"


/* ---------------------------------------------------------------- events */

static unsigned bucket_of(const char *run_id) {
    /* FNV-1a: run ids are random, any spread will do */
    uint32_t h = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)run_id; c && *c; c++)
        h = (h ^ *c) * 16777619u;
    return h % AL_EVENT_BUCKETS;
}

/* RUN_ID got an event or ended: its followers wake (and those of the old
 * API, waiting on everything). */
void al_service_wake_run(al_service *s, const char *run_id) {
    unsigned b = bucket_of(run_id);
    pthread_mutex_lock(&s->mu);
    s->event_gen++;
    pthread_cond_broadcast(&s->events_cond);
    s->ev_buckets[b].gen++;
    pthread_cond_broadcast(&s->ev_buckets[b].cond);
    pthread_mutex_unlock(&s->mu);
}


void al_service_cancel_all(al_service *s) {
    pthread_mutex_lock(&s->mu);
    for (active_run *a = s->active; a; a = a->next) {
        /* airlock's own doing (a fenced node): a run not yet started stays
         * queued for the others, never ended "canceled" */
        a->stop_requested = true;
        if (a->dr.pid > 0)
            s->driver->cancel(&a->dr);
    }
    pthread_mutex_unlock(&s->mu);
}

void al_service_wake_all(al_service *s) {
    pthread_mutex_lock(&s->mu);
    s->event_gen++;
    s->wake_gen++;
    pthread_cond_broadcast(&s->events_cond);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_broadcast(&s->ev_buckets[i].cond);
    pthread_mutex_unlock(&s->mu);
}

uint64_t al_service_run_event_gen(al_service *s, const char *run_id) {
    unsigned b = bucket_of(run_id);
    pthread_mutex_lock(&s->mu);
    /* both only grow: the sum changes when either does */
    uint64_t g = s->ev_buckets[b].gen + s->wake_gen;
    pthread_mutex_unlock(&s->mu);
    return g;
}

bool al_service_wait_run_event(al_service *s, const char *run_id, uint64_t gen, const struct timespec *until) {
    unsigned b = bucket_of(run_id);
    bool got = true;
    pthread_mutex_lock(&s->mu);
    while (s->ev_buckets[b].gen + s->wake_gen == gen && !s->stopping) {
        if (pthread_cond_timedwait(&s->ev_buckets[b].cond, &s->mu, until) == ETIMEDOUT) {
            got = s->ev_buckets[b].gen + s->wake_gen != gen;
            break;
        }
    }
    if (s->stopping)
        got = false;
    pthread_mutex_unlock(&s->mu);
    return got;
}

int64_t al_service_append_event(al_service *s, const char *run_id, const char *type, json_t *data) {
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!text) {
        /* an event whose document could not be built is lost: said, not silent */
        al_service_log(s, AL_LOG_ERROR, "event.failed", json_pack("{s:s, s:s, s:s}", "run_id", run_id, "type", type, "error",
                                                    "the event's document could not be built"));
        return -EINVAL;
    }
    al_error err = { 0 };
    int r = al_store_event_append(s->store, run_id, type, text, &err);
    free(text);
    al_service_wake_run(s, run_id);
    /* the followers on other nodes are told by the store itself (on
     * PostgreSQL a trigger NOTIFYs each new event at its commit) */
    return r;
}

/* Events of RUN_ID appended together, in order (TYPES[i] with DATA[i],
 * whose references it takes), its followers woken once: what a run's end
 * says (its artifacts, its state, its result) is one statement. */
void al_service_append_events(al_service *s, const char *run_id, size_t n, const char *const *types, json_t **data) {
    const char **kept_types = calloc(n ? n : 1, sizeof *kept_types);
    char **texts = calloc(n ? n : 1, sizeof *texts);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char *text = data[i] && texts ? json_dumps(data[i], JSON_COMPACT) : NULL;
        json_decref(data[i]);
        if (!text) {
            al_service_log(s, AL_LOG_ERROR, "event.failed", json_pack("{s:s, s:s, s:s}", "run_id", run_id, "type", types[i], "error",
                                                        "the event's document could not be built"));
            continue;
        }
        kept_types[k] = types[i];
        texts[k++] = text;
    }
    al_error err = { 0 };
    if (kept_types && texts && k)
        al_store_events_append(s->store, run_id, k, kept_types, (const char *const *)texts, &err);
    for (size_t i = 0; i < k; i++)
        free(texts[i]);
    free(texts);
    free(kept_types);
    al_service_wake_run(s, run_id);
}

json_t *al_service_result_ref(void) {
    return json_pack("{s:s}", "ref", "run");
}

void al_service_result_event(al_service *s, const char *run_id) {
    al_service_append_event(s, run_id, "result", al_service_result_ref());
}

void al_service_state_event(al_service *s, const char *run_id, const char *state) {
    al_service_append_event(s, run_id, "state", json_pack("{s:s}", "state", state));
}

/* ---------------------------------------------------------- person holds */

/* A person's long-held requests and the bytes of their bodies being
 * received; a node exists only while it holds any, so there are never more
 * than the service's connections. */
struct person_holds {
    struct person_holds *next;
    char person_id[40];
    int n[_AL_HOLD_MAX];
    uint64_t bytes;
};

/* PERSON_ID's node, made when MAKE (NULL: none, or no memory). Under mu. */
static struct person_holds *holds_of(al_service *s, const char *person_id, bool make) {
    struct person_holds *h = s->holds;
    while (h && strcmp(h->person_id, person_id) != 0)
        h = h->next;
    if (!h && make && (h = calloc(1, sizeof *h))) {
        snprintf(h->person_id, sizeof h->person_id, "%s", person_id);
        h->next = s->holds;
        s->holds = h;
    }
    return h;
}

/* Forget PERSON_ID's node once it holds nothing. Under mu. */
static void holds_tidy(al_service *s, const char *person_id) {
    for (struct person_holds **pp = &s->holds; *pp; pp = &(*pp)->next) {
        struct person_holds *h = *pp;
        if (strcmp(h->person_id, person_id) != 0)
            continue;
        bool any = h->bytes > 0;
        for (int k = 0; k < _AL_HOLD_MAX; k++)
            any |= h->n[k] > 0;
        if (!any) {
            *pp = h->next;
            free(h);
        }
        return;
    }
}

bool al_service_hold(al_service *s, const char *person_id, al_hold kind) {
    int max = kind == AL_HOLD_FOLLOW ? s->cfg.followers_per_person : s->cfg.waits_per_person;
    pthread_mutex_lock(&s->mu);
    struct person_holds *h = holds_of(s, person_id, true);
    bool ok = h && h->n[kind] < max;
    if (ok)
        h->n[kind]++;
    else
        holds_tidy(s, person_id);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void al_service_unhold(al_service *s, const char *person_id, al_hold kind) {
    pthread_mutex_lock(&s->mu);
    struct person_holds *h = holds_of(s, person_id, false);
    if (h && h->n[kind] > 0)
        h->n[kind]--;
    holds_tidy(s, person_id);
    pthread_mutex_unlock(&s->mu);
}

bool al_service_hold_bytes(al_service *s, const char *person_id, uint64_t n) {
    pthread_mutex_lock(&s->mu);
    struct person_holds *h = holds_of(s, person_id, true);
    bool ok = h && n <= s->cfg.body_bytes_per_person && h->bytes <= s->cfg.body_bytes_per_person - n;
    if (ok)
        h->bytes += n;
    else
        holds_tidy(s, person_id);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

void al_service_unhold_bytes(al_service *s, const char *person_id, uint64_t n) {
    pthread_mutex_lock(&s->mu);
    struct person_holds *h = holds_of(s, person_id, false);
    if (h)
        h->bytes -= n < h->bytes ? n : h->bytes;
    holds_tidy(s, person_id);
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- health */

/* The driver's probe clones namespaced children (al_doctor): run for every
 * unauthenticated /healthz it was a way to make the host fork without
 * limit. So its answer is kept and re-probed at most every AL_HEALTH_PROBE_S,
 * by one caller at a time; the others answer the last one meanwhile. */
static char *health_probe(al_service *s) {
    al_error e = { 0 };
    int ok = s->driver->probe(&e);
    char now[40];
    al_store_now(now, sizeof now);
    /* /healthz asks for no key: what a pool holds (each shape's image and
     * limits, the daemon's last error) is for GET /v1/settings only */
    json_t *badges = s->driver->capabilities();
    json_object_del(json_object_get(badges, "pool"), "state");
    /* nor the service's max_concurrent, which the inotify badge weighs */
    json_object_del(badges, "inotify budget");
    json_t *doc = json_pack("{s:s, s:s, s:o, s:s*, s:s, s:{s:s, s:s}}", "status", ok == 0 ? "ok" : "degraded", "driver",
                            s->driver->name, "badges", badges, "reason", ok == 0 ? NULL : e.msg,
                            "probed_at", now, "node", "id", s->node_id, "store", al_store_backend_name(s->store));
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return text;
}

char *al_service_health(al_service *s) {
    pthread_mutex_lock(&s->health_mu);
    uint64_t now = al_now_ms();
    bool stale = !s->health_text || now - s->health_at_ms >= (uint64_t)AL_HEALTH_PROBE_S * 1000;
    if (stale && !s->health_probing) {
        s->health_probing = true;
        pthread_mutex_unlock(&s->health_mu);
        char *text = health_probe(s);
        pthread_mutex_lock(&s->health_mu);
        s->health_probing = false;
        if (text) {
            free(s->health_text);
            s->health_text = text;
        }
        /* a failed attempt waits its turn too: no retry storm */
        s->health_at_ms = al_now_ms();
    }
    char *out = s->health_text ? strdup(s->health_text) : NULL;
    pthread_mutex_unlock(&s->health_mu);
    return out;
}

/* Whether stderr is the journal's stream: systemd names its device and
 * inode in JOURNAL_STREAM (a child that inherited the variable but writes
 * elsewhere is not). */
static bool journal;
static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static void journal_check(void) {
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
              (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void al_service_log(al_service *s, al_log_level level, const char *event, json_t *fields) {
    /* one JSON object per line on stderr: journald and log shippers take it
     * as is; to the journal each line starts with its syslog priority
     * ("<3>"), which journald takes off and keeps as the entry's PRIORITY
     * (`journalctl -p warning` finds warnings and errors) */
    static const char *const names[_AL_LOG_MAX] = { [AL_LOG_INFO] = "info", [AL_LOG_WARN] = "warn",
                                                    [AL_LOG_ERROR] = "error" };
    static const char *const priority[_AL_LOG_MAX] = { [AL_LOG_INFO] = "<6>", [AL_LOG_WARN] = "<4>",
                                                       [AL_LOG_ERROR] = "<3>" };
    pthread_once(&journal_once, journal_check);
    char now[40];
    al_store_now(now, sizeof now);
    if (!fields)
        fields = json_object();
    json_object_set_new(fields, "time", json_string(now));
    json_object_set_new(fields, "event", json_string(event));
    /* a level out of range is a bug of the caller: said as the worst, not dropped */
    json_object_set_new(fields, "level", json_string(level < _AL_LOG_MAX ? names[level] : "error"));
    char *line = json_dumps(fields, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(fields);
    if (line) {
        fprintf(stderr, "%s%s\n", journal ? priority[level < _AL_LOG_MAX ? level : AL_LOG_ERROR] : "", line);
        free(line);
    }
    (void)s;
}

void al_service_log_run_end(al_service *s, const al_store_run *run, al_run_state state, const char *err_code,
                            json_t *result) {
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:O?, s:O?, s:O?}", "run_id", run->id,
                            "workspace_id", run->workspace_id, "person_id", run->person_id, "language", run->language,
                            "driver", s->driver->name, "state", al_run_state_name(state), "error", err_code,
                            "exit_code", json_object_get(result, "exit_code"), "signal",
                            json_object_get(result, "signal"), "wall_ms", json_object_get(result, "wall_ms"));
    /* a run in error is airlock's own failure (or policy's, which its code
     * names): worth a look */
    al_service_log(s, state == AL_RUN_ERROR ? AL_LOG_WARN : AL_LOG_INFO, "run.end", doc);
}

/* ---------------------------------------------------------------- queue */

/* Say why a run found no room (al_store_queue_admit's answer R, C). */
static int no_room(al_service *s, int r, const al_store_queue_counts *c, const char *what, char *msg, size_t msg_len) {
    char scratch[8];
    if (!msg) {
        msg = scratch;
        msg_len = sizeof scratch;
    }
    if (r == -EDQUOT)
        snprintf(msg, msg_len,
                 "you have %d runs waiting (queued or for approval), the most one person may have "
                 "(queue_per_person = %d); retry when some have started",
                 c->person, s->cfg.queue_per_person);
    else if (r == -EUSERS)
        snprintf(msg, msg_len,
                 "your organisation has %d runs queued, the most one organisation may have (queue_per_org = %d); "
                 "retry when some have started",
                 c->org, s->cfg.queue_per_org);
    else if (r == -EAGAIN)
        snprintf(msg, msg_len, "the run queue is full (%d runs, queue_max); retry later", s->cfg.queue_max);
    else
        snprintf(msg, msg_len, "the run queue cannot be read: %s", what);
    /* the store's own failure is airlock's, not a full queue: the caller
     * ends the run as an error and answers 503, not 429 */
    return r == -EDQUOT || r == -EUSERS || r == -EAGAIN ? r : -EIO;
}

static al_store_queue_limits limits_for(al_service *s, const char *person_id, const char *org_id, int extra, bool share) {
    return (al_store_queue_limits){ .node_id = s->node_id, .queue_max = s->cfg.queue_max,
                                    .person_id = share ? person_id : NULL,
                                    .org_id = share ? org_id : NULL, .person_extra = extra,
                                    .per_person = s->cfg.queue_per_person, .per_org = s->cfg.queue_per_org };
}

int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, char *msg,
                          size_t msg_len) {
    /* the same counts as an admission, without one: an early answer for a
     * run not recorded yet (its admission decides, under the lock) */
    al_error err = { 0 };
    al_store_queue_counts c = { 0 };
    if (al_store_queue_counts_of(s->store, person_id, org_id, NULL, &c, &err) < 0)
        return no_room(s, -EIO, &c, err.msg, msg, msg_len);
    c.person += pending;
    if (c.all >= s->cfg.queue_max)
        return no_room(s, -EAGAIN, &c, NULL, msg, msg_len);
    if (c.person >= s->cfg.queue_per_person)
        return no_room(s, -EDQUOT, &c, NULL, msg, msg_len);
    if (org_id && c.org >= s->cfg.queue_per_org)
        return no_room(s, -EUSERS, &c, NULL, msg, msg_len);
    return 0;
}

int al_service_queue_cap(al_service *s, int workspace_cap) {
    return workspace_cap > 0 && workspace_cap < s->cfg.per_person ? workspace_cap : s->cfg.per_person;
}

int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       char *msg, size_t msg_len) {
    al_error err = { 0 };
    al_store_queue_counts c;
    al_store_queue_limits lim = limits_for(s, person_id, org_id, 0, share);
    int r = al_store_queue_admit(s->store, run_id, al_service_queue_cap(s, cap), &lim, &c, &err);
    if (r < 0)
        return no_room(s, r, &c, err.msg, msg, msg_len);
    /* any node may claim it now */
    al_cluster_notify(s, AL_NOTIFY_QUEUE, run_id);
    pthread_mutex_lock(&s->mu);
    s->queue_gen++;
    pthread_cond_broadcast(&s->sched_cond);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int al_service_person_queued(al_service *s, const char *person_id) {
    al_error err = { 0 };
    int n = al_store_queued_count(s->store, person_id, NULL, NULL, &err);
    return n < 0 ? 0 : n;
}

/* RUN_ID ended (STATE) while it was queued: its inputs go, its state and
 * result events say so. */
static void ended_unqueued(al_service *s, const char *run_id, al_run_state state) {
    al_service_drop_inputs(s, run_id);
    al_service_state_event(s, run_id, al_run_state_name(state));
    al_service_result_event(s, run_id);
    /* read again for its run.end line alone: who, what, why (a run that
     * never ran ends rarely: one read is cheap) */
    al_error err = { 0 };
    _cleanup_run_ al_store_run *run = NULL;
    if (al_store_run_get(s->store, run_id, NULL, &run, &err) == 0)
        al_service_log_run_end(s, run, run->state, run->error_code[0] ? run->error_code : NULL, NULL);
    al_skills_run_ended(s);
}

int al_service_finish_canceled_queued(al_service *s, const char *run_id) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    int n = al_store_run_end(s->store, run_id, AL_RUN_BIT(AL_RUN_QUEUED), AL_RUN_CANCELED, "canceled",
                             "canceled before it started", now, &err);
    if (n > 0)
        ended_unqueued(s, run_id, AL_RUN_CANCELED);
    return n;
}

void al_service_drop_inputs(al_service *s, const char *run_id) {
    char dir[PATH_MAX + 64];
    if (!run_id || !run_id[0] || strchr(run_id, '/') || run_id[0] == '.')
        return;
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, run_id);
    al_rm_rf(dir);
}

void al_service_end_unqueued(al_service *s, const char *run_id, const char *code, const char *why) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    /* refused, not canceled: no one asked for it to end (and nothing was
     * charged: it never left the queue) */
    if (al_store_run_end(s->store, run_id, AL_RUN_BIT(AL_RUN_QUEUED), AL_RUN_ERROR, code,
                         why && *why ? why : "the run queue was full", now, &err) > 0)
        ended_unqueued(s, run_id, AL_RUN_ERROR);
}

int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved) {
    al_error err = { 0 };
    int64_t held = 0;
    if (al_store_runs_queued_price(s->store, org_id, &held, &err) < 0)
        held = 0;
    *ret_reserved = held;
    return al_credits_balance(s, org_id) - held;
}

int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id) {
    al_error err = { 0 };
    int64_t b = 0;
    /* a failed read counts as full: fail closed */
    if (al_store_runs_input_bytes(s->store, org_id,
                                  AL_RUN_BIT(AL_RUN_PENDING_APPROVAL) | AL_RUN_BIT(AL_RUN_QUEUED) |
                                      AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING),
                                  &b, &err) < 0)
        b = AL_USAGE_UNKNOWN;
    return b;
}

bool al_service_is_active(al_service *s, const char *run_id) {
    pthread_mutex_lock(&s->mu);
    bool found = false;
    for (active_run *a = s->active; a && !found; a = a->next)
        found = strcmp(a->run_id, run_id) == 0;
    pthread_mutex_unlock(&s->mu);
    return found;
}

bool al_service_cancel_local(al_service *s, const char *run_id) {
    pthread_mutex_lock(&s->mu);
    for (active_run *a = s->active; a; a = a->next) {
        if (strcmp(a->run_id, run_id) == 0) {
            a->cancel_requested = true;
            if (a->dr.pid > 0)
                s->driver->cancel(&a->dr);
            pthread_mutex_unlock(&s->mu);
            return true;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return false;
}

int al_service_cancel(al_service *s, const char *run_id) {
    if (al_service_cancel_local(s, run_id))
        return 1;
    /* Queued (claimed by some node or not): the store's state decides; a
     * run moved from queued to canceled here is never charged or started
     * (the move to provisioning is conditional on queued). */
    if (al_service_finish_canceled_queued(s, run_id) > 0)
        return 1;
    /* Active on another node: asked there (its watcher is told; its
     * runner reads the request after its box starts, in case the telling
     * came first). */
    al_error err = { 0 };
    if (al_store_run_cancel_request(s->store, run_id, &err) > 0) {
        al_cluster_notify(s, AL_NOTIFY_CANCEL, run_id);
        return 1;
    }
    return 0;
}

/* -------------------------------------------------------------- recovery */

/* A run the service lost ended in error (its row says so already): its
 * result event, its tool.call audit, and its inputs gone. */
static void lost_said(al_service *s, const char *id) {
    al_error err = { 0 };
    _cleanup_run_ al_store_run *run = NULL;
    if (al_store_run_get(s->store, id, NULL, &run, &err) == 0) {
        al_service_result_event(s, id);
        al_service_log_run_end(s, run, run->state, "lost", NULL);
        /* one tool.call per run: the runner records its own before the
         * run's end is written, so a service killed between the two left
         * one already (what ran, said by the runner that saw it); a
         * second would count the run twice */
        al_store_audit_filter f = { .workspace_id = run->workspace_id, .kind = "tool.call", .run_id = id,
                                    .before_seq = INT64_MAX, .limit = 1 };
        al_store_audit_events had = { 0 };
        int listed = al_store_audit_list(s->store, &f, &had, &err);
        bool recorded = listed == 0 && had.n > 0;
        al_store_audit_events_free(&had);
        if (!recorded)
            al_governance_audit(s, run, "tool.call", NULL,
                    json_pack("{s:s, s:s, s:s}", "invocation_id", id, "state", "error", "error", "lost"));
    }
    char dir[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, id);
    al_rm_rf(dir);
}

void al_service_lose_run(al_service *s, const char *id, const char *why) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    unsigned active = AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING);
    /* once: whichever node gets here first ends it, the others find it ended */
    if (al_store_run_end(s->store, id, active, AL_RUN_ERROR, "lost", why, now, &err) <= 0)
        return;
    al_service_state_event(s, id, "error");
    al_store_run_refund(s->store, id, now, &err); /* airlock's own failure: not charged */
    al_service_log(s, AL_LOG_WARN, "run.lost", json_pack("{s:s, s:s}", "run_id", id, "why", why));
    lost_said(s, id);
}

static void recover(al_service *s) {
    al_error err = { 0 };
    char now[40];
    al_store_now(now, sizeof now);
    al_store_run_ref *refs = NULL;
    size_t n = 0;
    /* Runs that were being provisioned or running on a node that is gone:
     * their helpers died with it (PDEATHSIG), and their boxes with those.
     * On SQLite there is one node, so every node before this one is gone;
     * on a shared store, those whose lease ran out (al_cluster_reap; the
     * lease thread reaps the rest when theirs does). */
    al_cluster_reap(s, !s->multi_node);
    char ids[256][40];
    int k;
    /* and active runs no node holds (recorded before nodes were); on
     * SQLite's one node, every run still active is one the last stopped
     * without ending (whatever node it names) */
    if (!s->multi_node) {
        unsigned act = AL_RUN_BIT(AL_RUN_PROVISIONING) | AL_RUN_BIT(AL_RUN_RUNNING);
        if (al_store_run_refs(s->store, act, &refs, &n, &err) < 0)
            n = 0;
        for (size_t i = 0; i < n; i++)
            al_service_lose_run(s, refs[i].id, "the service stopped while this run was active");
        free(refs);
        refs = NULL;
    }
    for (int pass = 0; pass < 64 && (k = al_store_node_runs(s->store, NULL, ids, 256, &err)) > 0; pass++)
        for (int i = 0; i < k; i++)
            al_service_lose_run(s, ids[i], "the service stopped while this run was active");
    /* A run that ended in error is refunded after its end is written: one
     * a node died in between (or whose refund failed) is refunded now,
     * whatever other nodes do: the store refunds a charge once. */
    if (al_store_run_refs_unrefunded(s->store, &refs, &n, &err) < 0)
        n = 0;
    for (size_t i = 0; i < n; i++)
        if (al_store_run_refund(s->store, refs[i].id, now, &err) < 0)
            al_service_log(s, AL_LOG_ERROR, "credits.refund_failed", json_pack("{s:s, s:s}", "run_id", refs[i].id, "error", err.msg));
    free(refs);
    refs = NULL;
    /* What follows assumes no other node is at work on the store: a run
     * another node is creating has its files before its row, and waits
     * for an approval before its request is recorded. */
    if (s->multi_node && al_store_nodes_alive(s->store, now, &err) != 1) {
        s->driver->sweep();
        return;
    }
    /* A run waits for an approval only with its request recorded: one the
     * service died between the two (or failed to record) would wait for a
     * decision no one can make. It never ran, so nothing was charged. */
    if (al_store_run_refs_unrequested(s->store, &refs, &n, &err) < 0)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = refs[i].id;
        if (al_store_run_end(s->store, id, AL_RUN_BIT(AL_RUN_PENDING_APPROVAL), AL_RUN_ERROR, "lost",
                             "the service stopped before this run's approval was requested", now, &err) <= 0)
            continue;
        al_service_state_event(s, id, "error");
        al_service_log(s, AL_LOG_WARN, "run.lost", json_pack("{s:s, s:s}", "run_id", id, "why", "no approval request"));
        lost_said(s, id);
    }
    free(refs);
    /* Boxes' cgroups whose uid nobody holds any more are leftovers. */
    s->driver->sweep();
    /* Queued runs never started wait in the store for any node; those the
     * nodes that are gone had claimed were given back above. */
    /* A run's inline files are stored before its row is written: a crash
     * in between left files that belong to no run (and no quota). Nothing
     * runs yet, so whatever has no row is such a leftover. */
    DIR *d = opendir(s->runs_dir);
    struct dirent *de;
    json_int_t orphaned = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        al_run_state st;
        if (al_store_run_state(s->store, de->d_name, &st, &err) == -ENOENT) {
            char dir[PATH_MAX + 300];
            snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, de->d_name);
            al_rm_rf(dir);
            orphaned++;
        }
    }
    if (d)
        closedir(d);
    if (orphaned)
        al_service_log(s, AL_LOG_INFO, "run.inputs_orphaned", json_pack("{s:I}", "removed", orphaned));
    /* Inputs of runs that will not reach a box any more (ended while the
     * service was down, or left by a crash between a run's end and their
     * removal) are leftovers; only runs that wait keep theirs. */
    DIR *ld = opendir(s->runs_dir);
    struct dirent *le;
    while (ld && (le = readdir(ld))) {
        if (le->d_name[0] == '.')
            continue;
        al_run_state st;
        int r = al_store_run_state(s->store, le->d_name, &st, &err);
        if (r == -ENOENT || (r == 0 && st != AL_RUN_QUEUED && st != AL_RUN_PENDING_APPROVAL))
            al_service_drop_inputs(s, le->d_name);
    }
    if (ld)
        closedir(ld);
}

/* ------------------------------------------------------------------ main */

static int make_dir(const char *p, al_error *err) {
    if (mkdir(p, 0700) < 0 && errno != EEXIST)
        return al_err(err, "state", errno, "mkdir %s: %m", p);
    return 0;
}

/* On the embedded store a state directory has one live service: two
 * would each take the other for a node whose lease ran out and fence it.
 * The lock is the kernel's (flock), so a killed service leaves none; the
 * file names its holder for the refusal. */
static int hold_state_dir(al_service *s, al_error *err) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/serve.lock", s->cfg.state_dir);
    _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return al_err(err, "state", errno, "open %s: %m", path);
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno != EWOULDBLOCK)
            return al_err(err, "state", errno, "lock %s: %m", path);
        char pid[24] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? strcspn(pid, "\n") : 0] = '\0';
        return al_err(err, "state", EBUSY,
                      "the state directory %s is already served by pid %s: one state directory has one live "
                      "service (stop that one, or give this one its own --state)",
                      s->cfg.state_dir, pid[0] ? pid : "(unknown)");
    }
    char pid[24];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        return al_err(err, "state", errno, "write %s: %m", path);
    s->state_lock_fd = TAKE_FD(fd);
    return 0;
}

int al_service_open(const al_service_config *cfg, al_service **ret, al_error *err) {
    *ret = NULL;
    al_service *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    s->state_lock_fd = -1;
    int r = 0;
    s->driver = al_driver_by_name(cfg->driver);
    if (!s->driver) {
        free(s);
        return al_err(err, "config", EINVAL, "unknown driver %s", cfg->driver);
    }
    if ((s->driver == &al_driver_docker &&
         al_driver_docker_configure(cfg->docker_socket, cfg->engine_runtime, cfg->docker_pool, err) < 0) ||
        (s->driver == &al_driver_native && al_driver_native_configure(cfg->max_concurrent, cfg->warm_pool, (uint64_t)cfg->warm_pool_memory_mb << 20,
                                                                  cfg->warm_preload, cfg->warm_fork, err) < 0)) {
        free(s);
        return -EINVAL;
    }
    /* each run's helper is the lean `airlock` beside us: it loads no HTTP,
     * TLS or SQLite library, so a box starts sooner */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        free(s);
        return al_err(err, "service", errno, "readlink /proc/self/exe: %m");
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    snprintf(s->self_exe, sizeof s->self_exe, "%.*s/airlock", slash ? (int)(slash - self) : 1, slash ? self : ".");
    if (access(s->self_exe, X_OK) != 0)
        snprintf(s->self_exe, sizeof s->self_exe, "%s", self); /* airlock-server has helper too */
    snprintf(s->blobs_dir, sizeof s->blobs_dir, "%s/blobs", cfg->state_dir);
    snprintf(s->runs_dir, sizeof s->runs_dir, "%s/runs", cfg->state_dir);
    char db[PATH_MAX + 1024];
    if ((r = make_dir(cfg->state_dir, err)) < 0 || (r = al_store_locate(cfg->store, cfg->state_dir, db, sizeof db, err)) < 0 ||
        (al_store_is_embedded(db) && (r = hold_state_dir(s, err)) < 0) || (r = make_dir(s->blobs_dir, err)) < 0 ||
        (r = make_dir(s->runs_dir, err)) < 0 || (r = al_store_open(db, &s->store, err)) < 0) {
        if (s->state_lock_fd >= 0)
            close(s->state_lock_fd);
        free(s);
        return r;
    }
    snprintf(s->store_target, sizeof s->store_target, "%s", db);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->sched_cond, NULL);
    pthread_cond_init(&s->events_cond, NULL);
    pthread_mutex_init(&s->health_mu, NULL);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_init(&s->ev_buckets[i].cond, NULL);

    /* From here threads start (the cluster's, the scheduler): a failure
     * leaves them to the process's exit, which follows (serve.c). */
    char skills[PATH_MAX + 32];
    if (cfg->skills_dir[0]) {
        snprintf(skills, sizeof skills, "%s", cfg->skills_dir);
    } else {
        /* the repository's skills/ beside a build tree (build/airlock), else
         * the installed copy */
        snprintf(skills, sizeof skills, "%.*s/../skills", slash ? (int)(slash - self) : 1, slash ? self : ".");
        if (access(skills, F_OK) != 0)
            snprintf(skills, sizeof skills, "%s", AIRLOCK_SKILLS_DIR);
    }
    if ((r = al_skills_init(s, skills, err)) < 0)
        return r;
    /* an install that copied the binaries alone has no skills: said now,
     * with where it looked, rather than found out by an agent's 404 */
    if (json_array_size(s->skills_bundled) == 0)
        al_service_log(s, AL_LOG_WARN, "skills.none", json_pack("{s:s, s:s}", "looked", skills, "why",
                                                   access(skills, F_OK) == 0 ? "no skill.json in any of its directories"
                                                                             : "the directory does not exist (skills_dir)"));
    char images[PATH_MAX];
    al_service_images_dir(&s->cfg, images, sizeof images);
    json_t *il = al_image_list(images);
    if (json_array_size(il) == 0)
        al_service_log(s, AL_LOG_WARN, "images.none", json_pack("{s:s, s:s}", "looked", images, "why",
                                                   "runs may name no image but host (images setting; airlock image "
                                                   "build)"));
    json_decref(il);
    /* a node among those on the store, then what the gone ones left */
    if ((r = al_cluster_start(s, err)) < 0)
        return r;
    recover(s);
    al_error verr = { 0 };
    int bad = al_blobs_verify_once(s, &verr);
    if (bad < 0)
        al_service_log(s, AL_LOG_ERROR, "blobs.verify_failed", json_pack("{s:s}", "error", verr.msg));
    else if (bad > 0)
        al_service_log(s, AL_LOG_WARN, "blobs.removed", json_pack("{s:i, s:s}", "count", bad, "why",
                                                     "content other than its sha256 (stored before verification)"));
    /* bundles left by a crash between a delete and its collection, and
     * those of the runs recover() just ended */
    al_skills_gc(s, NULL, err);
    if ((r = al_checkpointer_start(s, err)) < 0)
        return r;
    if (pthread_create(&s->scheduler, NULL, al_service_scheduler_main, s) != 0)
        return al_err(err, "service", EAGAIN, "start the scheduler");
    /* the first /healthz is answered from a probe made before we listen */
    free(al_service_health(s));
    *ret = s;
    return 0;
}

void al_service_drain(al_service *s) {
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    pthread_mutex_unlock(&s->mu);
}

int al_service_active_count(al_service *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->active_count;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int al_service_running_count(al_service *s) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (active_run *a = s->active; a; a = a->next)
        n += !a->settled;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void al_service_stop(al_service *s) {
    /* Stop taking runs, end the active ones (their boxes are killed and
     * cleaned up; the runner ends each as airlock's own failure), wait for
     * their runners, keep queued runs queued for the next start. */
    pthread_mutex_lock(&s->mu);
    s->draining = s->stopping = true;
    for (active_run *a = s->active; a; a = a->next) {
        a->stop_requested = true;
        if (a->dr.pid > 0)
            s->driver->cancel(&a->dr);
    }
    pthread_cond_broadcast(&s->sched_cond);
    pthread_cond_broadcast(&s->events_cond);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_broadcast(&s->ev_buckets[i].cond);
    while (s->active_count > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&s->sched_cond, &s->mu, &ts);
        pthread_cond_broadcast(&s->events_cond);
        for (int i = 0; i < AL_EVENT_BUCKETS; i++)
            pthread_cond_broadcast(&s->ev_buckets[i].cond);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->scheduler, NULL);
    /* no run is left: what the driver keeps for the next ones goes */
    if (s->driver->stop)
        s->driver->stop();
}

int al_service_close(al_service *s, al_error *err) {
    if (!s)
        return 0;
    /* the heads as the last runs left them, signed while the store is open */
    al_checkpointer_stop(s);
    /* leaves the store: what it claimed and did not start waits for others */
    al_cluster_stop(s);
    bool fenced = s->declared_dead;
    al_store_close(s->store);
    /* every thread is gone: what is left is ours alone to free (so that a
     * LeakSanitizer build reports only real leaks) */
    al_skills_free(s);
    free(s->health_text);
    while (s->holds) {
        struct person_holds *h = s->holds;
        s->holds = h->next;
        free(h);
    }
    pthread_mutex_destroy(&s->health_mu);
    pthread_cond_destroy(&s->sched_cond);
    pthread_cond_destroy(&s->events_cond);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_destroy(&s->ev_buckets[i].cond);
    pthread_mutex_destroy(&s->mu);
    if (s->state_lock_fd >= 0)
        close(s->state_lock_fd);
    free(s);
    if (fenced)
        return al_err(err, "service", ESTALE, "this service stopped: another service on the same store declared it "
                                              "dead, or it could not renew its lease (the log's node.fenced says "
                                              "which); its runs were ended as lost. Start it again: it joins as a new "
                                              "node");
    return 0;
}
