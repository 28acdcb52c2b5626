/*
 * The daemon's core: configuration, the scheduler (per-person cap, global
 * cap, a bounded FIFO queue in which no person's runs starve another's),
 * the runner (one thread per active run, talking to its driver), the end of
 * a run (state, artifacts, events), and recovery after a crash.
 */
#include <dirent.h>
#include <nettle/sha2.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../box/box.h"
#include "../util/hash.h"
#include "../image/image.h"
#include "audit.h"
#include "dlp.h"
#include "helper_events.h"
#include "service.h"
#include "skills.h"
#include "../store/approvals.h"
#include "../store/internal.h" /* SQL, until it moves into src/store (issue 12) */

struct active_run {
    active_run *next;
    char run_id[40], person_id[40], org_id[40];
    int cap;
    al_driver_run dr;
    bool cancel_requested;
};

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
static void wake_run(al_service *s, const char *run_id) {
    unsigned b = bucket_of(run_id);
    pthread_mutex_lock(&s->mu);
    s->event_gen++;
    pthread_cond_broadcast(&s->events_cond);
    s->ev_buckets[b].gen++;
    pthread_cond_broadcast(&s->ev_buckets[b].cond);
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
        al_service_log(s, "event.failed", json_pack("{s:s, s:s, s:s}", "run_id", run_id, "type", type, "error",
                                                    "the event's document could not be built"));
        return -EINVAL;
    }
    al_error err = { 0 };
    /* one statement: the next number is taken atomically */
    int r = al_store_exec(s->store, &err,
                          "INSERT INTO run_events (run_id, seq, type, data) "
                          "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM run_events WHERE run_id = ?",
                          "ssss", run_id, type, text, run_id);
    free(text);
    wake_run(s, run_id);
    return r;
}

static void state_event(al_service *s, const char *run_id, const char *state) {
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
    json_t *doc = json_pack("{s:s, s:s, s:o, s:s*, s:s}", "status", ok == 0 ? "ok" : "degraded", "driver",
                            s->driver->name, "badges", s->driver->capabilities(), "reason", ok == 0 ? NULL : e.msg,
                            "probed_at", now);
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

/* ---------------------------------------------------------------- queue */

/* With s->mu held: 0 when a run of PERSON_ID in ORG_ID has room (EXTRA more
 * of the person's runs wait elsewhere), else as al_service_enqueue. */
static int room_locked(al_service *s, const char *person_id, const char *org_id, int extra, bool share, char *msg,
                       size_t msg_len) {
    char scratch[8];
    if (!msg) {
        msg = scratch;
        msg_len = sizeof scratch;
    }
    if (s->queue_len >= s->cfg.queue_max) {
        snprintf(msg, msg_len, "the run queue is full (%d runs, queue_max); retry later", s->cfg.queue_max);
        return -EAGAIN;
    }
    if (!share)
        return 0;
    int mine = extra, ours = 0;
    for (int i = 0; i < s->queue_len; i++) {
        mine += strcmp(s->queue[i].person_id, person_id) == 0;
        ours += org_id && strcmp(s->queue[i].org_id, org_id) == 0;
    }
    if (mine >= s->cfg.queue_per_person) {
        snprintf(msg, msg_len,
                 "you have %d runs waiting (queued or for approval), the most one person may have "
                 "(queue_per_person = %d); retry when some have started",
                 mine, s->cfg.queue_per_person);
        return -EDQUOT;
    }
    if (ours >= s->cfg.queue_per_org) {
        snprintf(msg, msg_len,
                 "your organisation has %d runs queued, the most one organisation may have (queue_per_org = %d); "
                 "retry when some have started",
                 ours, s->cfg.queue_per_org);
        return -EUSERS;
    }
    return 0;
}

int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, char *msg,
                          size_t msg_len) {
    pthread_mutex_lock(&s->mu);
    int r = room_locked(s, person_id, org_id, pending, true, msg, msg_len);
    pthread_mutex_unlock(&s->mu);
    return r;
}

int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       char *msg, size_t msg_len) {
    pthread_mutex_lock(&s->mu);
    int r = room_locked(s, person_id, org_id, 0, share, msg, msg_len);
    if (r < 0) {
        pthread_mutex_unlock(&s->mu);
        return r;
    }
    queued_run *q = &s->queue[s->queue_len++];
    snprintf(q->run_id, sizeof q->run_id, "%s", run_id);
    snprintf(q->person_id, sizeof q->person_id, "%s", person_id);
    snprintf(q->org_id, sizeof q->org_id, "%s", org_id ? org_id : "");
    q->cap = cap > 0 && cap < s->cfg.per_person ? cap : s->cfg.per_person;
    pthread_cond_broadcast(&s->sched_cond);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int al_service_person_queued(al_service *s, const char *person_id) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (int i = 0; i < s->queue_len; i++)
        n += strcmp(s->queue[i].person_id, person_id) == 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int finish_canceled_queued(al_service *s, const char *run_id) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    int n = al_store_exec(s->store, &err,
                          "UPDATE runs SET state = 'canceled', finished_at = ?, error_code = 'canceled', "
                          "error_message = 'canceled before it started' WHERE id = ? AND state = 'queued'",
                          "ss", now, run_id);
    if (n > 0) {
        al_service_drop_inputs(s, run_id);
        state_event(s, run_id, "canceled");
        json_t *rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", run_id);
        if (rows && json_array_size(rows))
            al_service_append_event(s, run_id, "result", al_run_json(s, json_array_get(rows, 0)));
        json_decref(rows);
        al_skills_run_ended(s);
    }
    return n;
}

void al_service_drop_inputs(al_service *s, const char *run_id) {
    char dir[PATH_MAX + 64];
    if (!run_id || !run_id[0] || strchr(run_id, '/') || run_id[0] == '.')
        return;
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, run_id);
    al_rm_rf(dir);
}

void al_service_end_unqueued(al_service *s, const char *run_id, const char *why) {
    char now[40];
    al_store_now(now, sizeof now);
    al_error err = { 0 };
    int n = al_store_exec(s->store, &err,
                          "UPDATE runs SET state = 'canceled', finished_at = ?, error_code = 'queue_full', "
                          "error_message = ? WHERE id = ? AND state = 'queued'",
                          "sss", now, why && *why ? why : "the run queue was full", run_id);
    if (n > 0) {
        al_service_drop_inputs(s, run_id);
        state_event(s, run_id, "canceled");
        json_t *rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", run_id);
        if (rows && json_array_size(rows))
            al_service_append_event(s, run_id, "result", al_run_json(s, json_array_get(rows, 0)));
        json_decref(rows);
        al_skills_run_ended(s);
    }
}

int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s->store, &err,
                                  "SELECT COALESCE(SUM(price), 0) AS held FROM runs WHERE org_id = ? AND state = 'queued'",
                                  "s", org_id);
    int64_t held = rows ? (int64_t)json_integer_value(json_object_get(json_array_get(rows, 0), "held")) : 0;
    json_decref(rows);
    *ret_reserved = held;
    return al_credits_balance(s, org_id) - held;
}

int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s->store, &err,
                                  "SELECT COALESCE(SUM(input_bytes), 0) AS b FROM runs WHERE org_id = ? "
                                  "AND state IN ('pending_approval', 'queued', 'provisioning', 'running')",
                                  "s", org_id);
    /* a failed read counts as full: fail closed */
    int64_t b = rows ? (int64_t)json_integer_value(json_object_get(json_array_get(rows, 0), "b")) : AL_USAGE_UNKNOWN;
    json_decref(rows);
    return b;
}

int al_service_cancel(al_service *s, const char *run_id) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->queue_len; i++) {
        if (strcmp(s->queue[i].run_id, run_id) == 0) {
            memmove(&s->queue[i], &s->queue[i + 1], (size_t)(s->queue_len - i - 1) * sizeof *s->queue);
            s->queue_len--;
            pthread_mutex_unlock(&s->mu);
            finish_canceled_queued(s, run_id);
            return 1;
        }
    }
    for (active_run *a = s->active; a; a = a->next) {
        if (strcmp(a->run_id, run_id) == 0) {
            a->cancel_requested = true;
            if (a->dr.pid > 0)
                s->driver->cancel(&a->dr);
            pthread_mutex_unlock(&s->mu);
            return 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    /* Queued in the store but not (yet) in the queue: just approved, its
     * enqueue still to come. The store's state decides: a run moved from
     * queued to canceled here is never charged or started (the runner's
     * move to provisioning is conditional on queued). */
    return finish_canceled_queued(s, run_id) > 0 ? 1 : 0;
}

/* ---------------------------------------------------------------- runner */

static const char *state_of(json_t *result) {
    const char *reason = json_string_value(json_object_get(result, "reason"));
    if (!reason)
        return "error";
    if (strcmp(reason, "exited") == 0) {
        json_t *code = json_object_get(result, "exit_code");
        return json_is_integer(code) && json_integer_value(code) == 0 ? "succeeded" : "failed";
    }
    if (strcmp(reason, "timeout") == 0)
        return "timed_out";
    if (strcmp(reason, "memory") == 0 || strcmp(reason, "pids") == 0 || strcmp(reason, "output_limit") == 0)
        return "killed";
    if (strcmp(reason, "canceled") == 0)
        return "canceled";
    return "error";
}

static json_t *job_for(al_service *s, json_t *run, const char *dir, al_error *err) {
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        al_err(err, "stage", errno, "mkdir %s: %m", dir);
        return NULL;
    }
    json_t *limits = json_loads(json_string_value(json_object_get(run, "limits")), 0, NULL);
    if (!limits)
        limits = json_object();
    json_t *inputs = json_array();
    char in_dir[PATH_MAX + 64], docs[PATH_MAX + 64], out[PATH_MAX + 64];
    snprintf(in_dir, sizeof in_dir, "%s/in", dir);
    snprintf(docs, sizeof docs, "%s/documents", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    DIR *d = opendir(in_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (de->d_name[0] != '.' || (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)) {
                char p[PATH_MAX + 320];
                snprintf(p, sizeof p, "%s/%s", in_dir, de->d_name);
                json_array_append_new(inputs, json_string(p));
            }
        closedir(d);
    }
    json_t *arts = json_loads(json_string_value(json_object_get(run, "inputs")), 0, NULL);
    /* what of the thread cannot be staged is listed, and the run starts; a
     * run whose documents were pinned at request time (its approval card
     * names them) gets exactly those versions, not the thread's latest */
    json_t *docs_skipped = json_array();
    json_t *pinned = json_object_get(arts, "documents");
    json_t *pinned_ids = json_is_array(pinned) ? json_array() : NULL;
    size_t pi;
    json_t *pd;
    json_array_foreach(pinned, pi, pd) json_array_append(pinned_ids, json_object_get(pd, "id"));
    int r = al_artifacts_stage(s, json_string_value(json_object_get(run, "workspace_id")),
                               pinned_ids ? NULL : json_string_value(json_object_get(run, "thread_id")),
                               pinned_ids ? pinned_ids : json_object_get(arts, "artifacts"), docs, docs_skipped, err);
    json_decref(pinned_ids);
    json_decref(arts);
    if (r < 0) {
        json_decref(docs_skipped);
        json_decref(limits);
        json_decref(inputs);
        return NULL;
    }
    if (r > 0)
        json_array_append_new(inputs, json_string(docs));
    if (mkdir(out, 0700) < 0 && errno != EEXIST) {
        al_err(err, "stage", errno, "mkdir %s: %m", out);
        json_decref(docs_skipped);
        json_decref(limits);
        json_decref(inputs);
        return NULL;
    }
    json_t *job = json_pack("{s:O, s:O, s:o, s:s, s:o, s:O}", "language", json_object_get(run, "language"), "code",
                            json_object_get(run, "code"), "inputs", inputs, "out_dir", out, "limits", limits,
                            "network", json_object_get(run, "network"));
    /* the helper ignores it; the run's result gets it */
    json_object_set_new(job, "documents_skipped", docs_skipped);
    json_t *ins = json_loads(json_string_value(json_object_get(run, "inputs")), 0, NULL);
    if (json_is_array(json_object_get(ins, "args")))
        json_object_set(job, "args", json_object_get(ins, "args"));
    json_t *skill = json_object_get(ins, "skill");
    if (skill) {
        /* the bundle, read-only at /skill; the entrypoint runs from there
         * with the path of its arguments (staged as /work/args.json) */
        char sdir[PATH_MAX + 80], script[512];
        if (al_skills_dir(s, json_string_value(json_object_get(skill, "digest")), sdir, sizeof sdir) < 0 ||
            access(sdir, F_OK) != 0) {
            al_err(err, "skill", ENOENT, "the skill's bundle %s is not in the store",
                   json_string_value(json_object_get(skill, "digest")));
            json_decref(ins);
            json_decref(job);
            return NULL;
        }
        snprintf(script, sizeof script, "/skill/%s", json_string_value(json_object_get(skill, "script")));
        json_object_set_new(job, "skill_dir", json_string(sdir));
        json_object_set_new(job, "script", json_string(script));
        json_object_set_new(job, "args", json_pack("[s]", "/work/args.json"));
    }
    json_decref(ins);
    char stdin_path[PATH_MAX + 64];
    snprintf(stdin_path, sizeof stdin_path, "%s/stdin", dir);
    if (access(stdin_path, F_OK) == 0)
        json_object_set_new(job, "stdin_path", json_string(stdin_path));
    const char *image = json_string_value(json_object_get(run, "image"));
    if (image) {
        /* resolved again now: an image removed since the run was accepted
         * is a provisioning failure, not a broken box */
        char images[PATH_MAX + 16], idir[PATH_MAX + 64], digest[65];
        snprintf(images, sizeof images, "%s/images", s->cfg.state_dir);
        if (al_image_resolve(images, image, idir, sizeof idir, digest, err) < 0) {
            json_decref(job);
            return NULL;
        }
        json_object_set_new(job, "image_dir", json_string(idir));
        json_object_set_new(job, "image_digest", json_string(digest));
    }
    return job;
}

typedef struct runner_arg {
    al_service *s;
    active_run *a;
} runner_arg;

/* The result's output as the agent will see it: redacted, and the count.
 * Output is bytes (NULs, bytes that are not UTF-8): redacted as bytes, and
 * shown as al_output_set does. */
static int redact_result(al_dlp *dlp, json_t *result) {
    int count = 0;
    static const char *const keys[] = { "stdout", "stderr" };
    for (size_t i = 0; dlp && json_is_object(result) && i < 2; i++) {
        size_t len = 0, n = 0;
        char *bytes = al_output_get(result, keys[i], &len);
        if (!bytes)
            continue;
        char *red = al_dlp_redact(dlp, bytes, len, &count, &n);
        free(bytes);
        if (!red || al_output_set(result, keys[i], red, n) < 0) {
            /* not shown unredacted, whatever failed */
            json_object_set_new(result, keys[i], json_string(""));
            char k[32];
            snprintf(k, sizeof k, "%s_base64", keys[i]);
            json_object_del(result, k);
        }
        free(red);
    }
    return count;
}

/* An output event of the run's stream: redacted bytes, shown as al_output_set does. */
static void output_event(al_service *s, const char *run_id, const char *type, const char *bytes, size_t len) {
    json_t *o = json_object();
    if (o && al_output_set(o, "data", bytes, len) == 0)
        al_service_append_event(s, run_id, type, o);
    else
        json_decref(o);
}

/* A run's output events: one per piece the redactor releases while they are
 * few; past OUTPUT_EVENTS_MAX, pieces are joined up to OUTPUT_PIECE bytes
 * (or OUTPUT_HOLD_MS of output), so that whatever a run prints, its stored
 * events and its followers' wake-ups stay bounded (a line per write used to
 * be an event each: a million for a run that printed a million lines). */
#define OUTPUT_EVENTS_MAX 1000
#define OUTPUT_PIECE (64 * 1024)
#define OUTPUT_HOLD_MS 250

typedef struct output_pace {
    int events;
    struct {
        char *buf;
        size_t len;
        uint64_t since;
    } b[2];
} output_pace;

static void pace_flush(al_service *s, const char *run_id, output_pace *op, int i) {
    if (op->b[i].len == 0)
        return;
    output_event(s, run_id, i ? "stderr" : "stdout", op->b[i].buf, op->b[i].len);
    op->events++;
    op->b[i].len = 0;
}

static void pace_output(al_service *s, const char *run_id, output_pace *op, int i, const char *bytes, size_t n) {
    if (op->events < OUTPUT_EVENTS_MAX && op->b[i].len == 0) {
        output_event(s, run_id, i ? "stderr" : "stdout", bytes, n);
        op->events++;
        return;
    }
    char *nb = realloc(op->b[i].buf, op->b[i].len + n);
    if (!nb) {
        pace_flush(s, run_id, op, i);
        output_event(s, run_id, i ? "stderr" : "stdout", bytes, n);
        return;
    }
    op->b[i].buf = nb;
    if (op->b[i].len == 0)
        op->b[i].since = al_now_ms();
    memcpy(op->b[i].buf + op->b[i].len, bytes, n);
    op->b[i].len += n;
    if (op->b[i].len >= OUTPUT_PIECE || al_now_ms() - op->b[i].since >= OUTPUT_HOLD_MS)
        pace_flush(s, run_id, op, i);
}

static void end_run(al_service *s, json_t *run, const char *state, json_t *result, const char *err_code,
                    const char *err_msg, const char *dir, al_dlp *dlp, int64_t duration_ms) {
    const char *run_id = json_string_value(json_object_get(run, "id"));
    al_error err = { 0 };
    /* nothing unredacted is stored where the agent can read it */
    int redactions = redact_result(dlp, result);
    json_t *published = NULL, *previews = NULL, *skipped = json_array();
    if (result) {
        json_t *sk = json_object_get(result, "skipped");
        json_array_extend(skipped, sk ? sk : json_array());
        char out[PATH_MAX + 64];
        snprintf(out, sizeof out, "%s/out", dir);
        if (al_artifacts_ingest(s, run, out, result, &published, &previews, skipped, &err) < 0 && !err_code) {
            state = "error";
            err_code = "artifacts";
            err_msg = err.msg;
        }
    }
    char now[40];
    al_store_now(now, sizeof now);
    /* recorded before the run is seen to end, so whoever sees the end
     * finds the record */
    /* what ran: the code and every input, hashed as an approval binds
     * them (the same value as the card's hash where there was one); null
     * when the inputs cannot be read back, never the code's alone */
    char input_hash[65] = "";
    al_error merr = { 0 };
    json_t *manifest = al_approval_manifest(s, run, &merr);
    if (manifest)
        al_approval_hash(run, manifest, input_hash);
    json_decref(manifest);
    char preview[513] = "";
    if (result) {
        const char *o = json_string_value(json_object_get(result, "stdout"));
        const char *e = json_string_value(json_object_get(result, "stderr"));
        snprintf(preview, sizeof preview, "%s%s", o ? o : "", e ? e : "");
        /* cut on a character: a script that prints a multi-byte character
         * across byte 512 must not make its own tool.call event unbuildable */
        al_utf8_fix(preview);
    }
    json_t *exit_code = result ? json_object_get(result, "exit_code") : NULL;
    json_t *ins = json_loads(json_string_value(json_object_get(run, "inputs")), 0, NULL);
    json_t *skill = json_object_get(ins, "skill");
    /* what the egress log says, in brief; the log itself is in the result */
    json_int_t egress_conns = 0, egress_bytes = 0, egress_denied = 0;
    size_t ei;
    json_t *ev;
    json_array_foreach(json_object_get(json_object_get(result, "network"), "egress"), ei, ev) {
        egress_conns++;
        egress_denied += strcmp(json_string_value(json_object_get(ev, "decision")) ?: "", "allowed") != 0;
        egress_bytes += json_integer_value(json_object_get(ev, "bytes_up")) +
                        json_integer_value(json_object_get(ev, "bytes_down"));
    }
    al_governance_audit(s, run, "tool.call", NULL,
                        json_pack("{s:s, s:s, s:s, s:s?, s:O, s:s, s:s, s:I, s:O, s:s, s:{s:I, s:I, s:I}, s:s, s:i}",
                                  "tool", skill ? "run_skill_script" : "code_execution", "via",
                                  json_string_value(json_object_get(ins, "via")) ?: "rest", "invocation_id", run_id,
                                  "input_sha256", input_hash[0] ? input_hash : NULL,
                                  "exit_code", exit_code ? exit_code : json_null(), "output_preview", preview,
                                  "language", json_string_value(json_object_get(run, "language")), "duration_ms",
                                  (json_int_t)duration_ms, "network", json_object_get(run, "network"),
                                  "image_digest", json_is_string(json_object_get(run, "image"))
                                                      ? json_string_value(json_object_get(run, "image")) : "host",
                                  "egress", "connections", egress_conns, "denied", egress_denied, "bytes", egress_bytes, "state", state,
                                  "redactions", redactions));
    json_decref(ins);
    al_store_exec(s->store, &err,
                  "INSERT OR REPLACE INTO analytics (run_id, org_id, workspace_id, language, state, exit_code, duration_ms, "
                  "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                  "sssssiis", run_id, json_string_value(json_object_get(run, "org_id")),
                  json_string_value(json_object_get(run, "workspace_id")), json_string_value(json_object_get(run, "language")),
                  state, (int64_t)(json_is_integer(exit_code) ? json_integer_value(exit_code) : -1), duration_ms, now);
    char *res_text = result ? json_dumps(result, JSON_COMPACT) : NULL;
    char *prev_text = previews ? json_dumps(previews, JSON_COMPACT) : NULL;
    char *skip_text = json_dumps(skipped, JSON_COMPACT);
    al_store_exec(s->store, &err,
                  "UPDATE runs SET state = ?, result = ?, previews = ?, skipped = ?, error_code = ?, "
                  "error_message = ?, finished_at = ?, redactions = ? WHERE id = ?",
                  "sSSSSSsis", state, res_text, prev_text, skip_text, err_code, err_msg, now, (int64_t)redactions, run_id);
    if (strcmp(state, "error") == 0)
        al_credits_refund(s, run_id, &err); /* airlock's own failure is not charged */
    free(res_text);
    free(prev_text);
    free(skip_text);
    for (size_t i = 0; published && i < json_array_size(published); i++)
        al_service_append_event(s, run_id, "artifact", json_incref(json_array_get(published, i)));
    json_decref(published);
    json_decref(previews);
    json_decref(skipped);
    state_event(s, run_id, state);
    json_t *rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", run_id);
    if (rows && json_array_size(rows))
        al_service_append_event(s, run_id, "result", al_run_json(s, json_array_get(rows, 0)));
    json_decref(rows);
    al_service_log(s, "run.end", json_pack("{s:s, s:s, s:s, s:s?, s:O?}", "run_id", run_id, "workspace_id",
                                          json_string_value(json_object_get(run, "workspace_id")), "state", state,
                                          "error", err_code, "wall_ms", result ? json_object_get(result, "wall_ms") : NULL));
    al_skills_run_ended(s);
}

void al_service_log(al_service *s, const char *event, json_t *fields) {
    /* one JSON object per line on stderr: journald and log shippers take it as is */
    char now[40];
    al_store_now(now, sizeof now);
    if (!fields)
        fields = json_object();
    json_object_set_new(fields, "time", json_string(now));
    json_object_set_new(fields, "event", json_string(event));
    char *line = json_dumps(fields, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(fields);
    if (line) {
        fprintf(stderr, "%s\n", line);
        free(line);
    }
    (void)s;
}

/* Why the tools RUN (a runs row) needs are no longer on the allow-list of
 * SETTINGS, or NULL: a skill's run needs run_skill_script, the test bench
 * code_execution too, any other run code_execution. */
static const char *tool_withdrawn(json_t *settings, json_t *run) {
    json_t *ins = al_row_json(run, "inputs");
    json_t *sk = json_object_get(ins, "skill");
    bool skill = json_is_object(sk);
    bool bench = skill && strcmp(json_string_value(json_object_get(sk, "mode")) ?: "", "test") == 0;
    json_decref(ins);
    bool code = false, skills = false;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(settings, "tools"), i, v) {
        code |= strcmp(json_string_value(v) ?: "", "code_execution") == 0;
        skills |= strcmp(json_string_value(v) ?: "", "run_skill_script") == 0;
    }
    if (skill && !skills)
        return "run_skill_script was taken off this workspace's tool allow-list before the run started";
    if ((!skill || bench) && !code)
        return "code_execution was taken off this workspace's tool allow-list before the run started";
    return NULL;
}

static void *runner_main(void *p) {
    runner_arg *ra = p;
    al_service *s = ra->s;
    active_run *a = ra->a;
    free(ra);
    al_error err = { 0 };
    char dir[PATH_MAX + 64], now[40];
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, a->run_id);
    al_store_now(now, sizeof now);
    json_t *result = NULL, *run = NULL, *job = NULL;
    const char *final = "error", *ecode = NULL, *emsg = NULL;
    char emsg_buf[600] = "";
    uint64_t t0 = al_now_ms();

    al_dlp *dlp = NULL;
    al_dlp_stream streams[2] = { { 0 }, { 0 } };
    output_pace pace = { 0 };
    json_t *rows = NULL;
    /* A workspace whose driver was switched off while this run waited:
     * it does not start (and is not charged). */
    json_t *pre = al_store_query(s->store, &err,
                                 "SELECT workspace_id, network, inputs FROM runs WHERE id = ? AND state = 'queued'", "s",
                                 a->run_id);
    if (pre && json_array_size(pre)) {
        al_error serr = { 0 };
        json_t *p0 = json_array_get(pre, 0);
        json_t *st = al_settings_load(s, json_string_value(json_object_get(p0, "workspace_id")), &serr);
        const char *why = NULL;
        if (!st) {
            /* settings that cannot be read do not start a run (fail closed) */
            ecode = "settings_unavailable";
            why = serr.msg;
        } else if (strcmp(json_string_value(json_object_get(st, "driver")) ?: "", "disabled") == 0) {
            ecode = "driver_disabled";
            why = "code execution was disabled for this workspace before the run started";
        } else if ((why = tool_withdrawn(st, p0))) {
            ecode = "tool_not_allowed";
        } else {
            /* the network it asked for, against the settings of now: a host
             * an admin took off network_hosts while the run waited (for a
             * slot or an approval) is not reached */
            al_net_policy *np = malloc(sizeof *np);
            if (!np || al_net_policy_parse(json_string_value(json_object_get(p0, "network")), np, &serr) < 0 ||
                al_settings_network_check(st, np, &serr) < 0) {
                ecode = "network_not_allowed";
                why = np ? serr.msg : "out of memory";
            }
            free(np);
        }
        if (why)
            snprintf(emsg_buf, sizeof emsg_buf, "%s", why);
        json_decref(st);
        if (ecode) {
            json_decref(pre);
            rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", a->run_id);
            run = rows && json_array_size(rows) ? json_incref(json_array_get(rows, 0)) : NULL;
            json_decref(rows);
            if (!run)
                goto done;
            emsg = emsg_buf;
            goto finish;
        }
    }
    json_decref(pre);
    /* canceled between the queue and here: it never starts */
    pthread_mutex_lock(&s->mu);
    bool canceled_early = a->cancel_requested;
    pthread_mutex_unlock(&s->mu);
    if (canceled_early && finish_canceled_queued(s, a->run_id) > 0)
        goto done;
    /* queued -> provisioning and the charge, in one transaction, unless it
     * was canceled in between */
    int n = al_credits_charge(s, a->run_id, &err);
    rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", a->run_id);
    run = rows && json_array_size(rows) ? json_incref(json_array_get(rows, 0)) : NULL;
    json_decref(rows);
    if (n == 0 || !run)
        goto done;
    if (n < 0) {
        ecode = n == -ENOSPC ? "payment_required" : "provisioning";
        snprintf(emsg_buf, sizeof emsg_buf, "%s", n == -ENOSPC ? "the organisation's credits do not cover this run"
                                                                : err.msg);
        emsg = emsg_buf;
        goto finish;
    }
    state_event(s, a->run_id, "provisioning");
    {
        /* no box starts without its workspace's DLP patterns: settings
         * that cannot be read, or patterns that do not compile, end it */
        al_error serr = { 0 };
        json_t *st = al_settings_load(s, json_string_value(json_object_get(run, "workspace_id")), &serr);
        int dr = st ? al_dlp_new(json_object_get(st, "dlp_patterns"), &dlp, &serr) : -EIO;
        json_decref(st);
        if (dr < 0) {
            dlp = NULL;
            ecode = st ? "dlp" : "settings_unavailable";
            snprintf(emsg_buf, sizeof emsg_buf, "%s", serr.msg);
            emsg = emsg_buf;
            goto finish;
        }
        for (int i = 0; i < 2; i++)
            streams[i].dlp = dlp;
    }
    /* an approved run runs exactly what was approved: the code and every
     * input, read again now (files and stdin as stored, the pinned
     * documents as the store has them), hashed as the card was. A store
     * that cannot say whether there was an approval refuses. */
    al_store_approval appr;
    al_error aerr = { 0 }; /* none is no error: most runs have no approval */
    int ar = al_store_approval_get(s->store, a->run_id, &appr, &aerr);
    if (ar < 0 && ar != -ENOENT) {
        ecode = "approval";
        emsg = "cannot read the run's approval";
        goto finish;
    }
    if (ar == 0) {
        al_store_approval_done(&appr);
        char h[65] = "";
        json_t *manifest = al_approval_manifest(s, run, &err);
        if (manifest)
            al_approval_hash(run, manifest, h);
        /* and the documents' bytes are the versions named */
        if (manifest && al_approval_verify_documents(s, manifest, &err) < 0)
            h[0] = '\0';
        json_decref(manifest);
        if (!h[0] || appr.decision != AL_DECISION_APPROVED || strcmp(h, appr.hash) != 0) {
            ecode = "approval";
            emsg = "the run differs from what was approved (its code or inputs changed)";
            goto finish;
        }
    }

    job = job_for(s, run, dir, &err);
    if (!job) {
        ecode = "provisioning";
        snprintf(emsg_buf, sizeof emsg_buf, "%s", err.msg);
        emsg = emsg_buf;
        goto finish;
    }
    char *job_text = json_dumps(job, JSON_COMPACT);
    al_driver_run dr = { .pid = -1, .events_fd = -1, .job_fd = -1 };
    int r = job_text ? s->driver->start(s->self_exe, job_text, &dr, &err) : -ENOMEM;
    free(job_text);
    if (r < 0) {
        ecode = "provisioning";
        snprintf(emsg_buf, sizeof emsg_buf, "%s", err.msg[0] ? err.msg : strerror(-r));
        emsg = emsg_buf;
        goto finish;
    }
    pthread_mutex_lock(&s->mu);
    a->dr = dr;
    bool cancel = a->cancel_requested;
    pthread_mutex_unlock(&s->mu);
    if (cancel)
        s->driver->cancel(&a->dr);

    FILE *ev = fdopen(dr.events_fd, "r");
    char *line = NULL;
    size_t cap = 0;
    json_t *helper_error = NULL;
    ssize_t ln;
    while (ev && (ln = getline(&line, &cap, ev)) > 0) {
        al_helper_event he;
        switch (al_helper_event_parse(line, (size_t)ln, &he)) {
        case AL_HELPER_EVENT_STARTED:
            al_store_exec(s->store, &err, "UPDATE runs SET state = 'running' WHERE id = ? AND state = 'provisioning'", "s",
                          a->run_id);
            state_event(s, a->run_id, "running");
            break;
        case AL_HELPER_EVENT_STDOUT:
        case AL_HELPER_EVENT_STDERR: {
            /* bytes, held back to the end of their line, then redacted */
            int i = he.kind == AL_HELPER_EVENT_STDOUT ? 0 : 1;
            size_t rn = 0;
            char *red = he.data ? al_dlp_stream_feed(&streams[i], he.data, he.len, &rn) : NULL;
            if (red)
                pace_output(s, a->run_id, &pace, i, red, rn);
            free(red);
            break;
        }
        case AL_HELPER_EVENT_RESULT:
            json_decref(result);
            result = json_incref(he.value);
            break;
        case AL_HELPER_EVENT_ERROR:
            json_decref(helper_error);
            helper_error = json_incref(he.value);
            break;
        default:
            break;
        }
        al_helper_event_clear(&he);
    }
    free(line);
    pthread_mutex_lock(&s->mu);
    a->dr.pid = -1;
    pthread_mutex_unlock(&s->mu);
    if (ev) {
        fclose(ev);
        dr.events_fd = -1;
    }
    int st = s->driver->wait(&dr);
    for (int i = 0; i < 2; i++) {
        size_t rn = 0;
        char *red = streams[i].dlp ? al_dlp_stream_flush(&streams[i], &rn) : NULL;
        if (red && rn)
            pace_output(s, a->run_id, &pace, i, red, rn);
        free(red);
        pace_flush(s, a->run_id, &pace, i);
    }
    if (result) {
        final = state_of(result);
        json_t *ds = json_object_get(job, "documents_skipped"), *rs = json_object_get(result, "skipped");
        if (json_array_size(ds) && json_is_array(rs))
            json_array_extend(rs, ds);
        else if (json_array_size(ds))
            json_object_set(result, "skipped", ds);
        json_t *e = json_object_get(result, "error");
        if (strcmp(final, "error") == 0 && e) {
            ecode = "box";
            snprintf(emsg_buf, sizeof emsg_buf, "step %s: %s", json_string_value(json_object_get(e, "step")),
                     json_string_value(json_object_get(e, "message")));
            emsg = emsg_buf;
        }
    } else {
        ecode = "helper";
        snprintf(emsg_buf, sizeof emsg_buf, "the run's helper ended without a result (%s %d)%s%s",
                 WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                 helper_error ? ": " : "", helper_error ? json_string_value(json_object_get(helper_error, "message")) : "");
        emsg = emsg_buf;
    }
    json_decref(helper_error);
finish:
    end_run(s, run, final, result, ecode, emsg, dir, dlp, (int64_t)(al_now_ms() - t0));
done:
    for (int i = 0; i < 2; i++) {
        free(streams[i].pending);
        free(pace.b[i].buf);
    }
    al_dlp_free(dlp);
    al_rm_rf(dir);
    json_decref(result);
    json_decref(job);
    json_decref(run);
    pthread_mutex_lock(&s->mu);
    for (active_run **pp = &s->active; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    s->active_count--;
    s->runs_finished++;
    double secs = (double)(al_now_ms() - t0) / 1000.0;
    static const double bounds[12] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 1e18 };
    for (int i = 0; i < 12; i++)
        if (secs <= bounds[i])
            s->duration_buckets[i]++;
    s->duration_sum += secs;
    pthread_cond_broadcast(&s->sched_cond);
    pthread_mutex_unlock(&s->mu);
    wake_run(s, a->run_id);
    free(a);
    return NULL;
}

static int person_active(al_service *s, const char *person_id) {
    int n = 0;
    for (active_run *a = s->active; a; a = a->next)
        n += strcmp(a->person_id, person_id) == 0;
    return n;
}

static void *scheduler_main(void *p) {
    al_service *s = p;
    uint64_t next_expiry = 0, next_idem_sweep = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        bool started = false;
        /* Fair share: the next slot goes to the eligible person (under the
         * per-person cap) with the fewest runs active, and within a person
         * FIFO. A person with many queued runs cannot hold back another's. */
        for (;;) {
            if (s->active_count >= s->cfg.max_concurrent)
                break;
            int best = -1, best_active = 0;
            for (int k = 0; k < s->queue_len; k++) {
                int n = person_active(s, s->queue[k].person_id);
                if (n >= s->queue[k].cap)
                    continue;
                if (best < 0 || n < best_active) {
                    best = k;
                    best_active = n;
                }
            }
            if (best < 0)
                break;
            int i = best;
            active_run *a = calloc(1, sizeof *a);
            runner_arg *ra = calloc(1, sizeof *ra);
            if (!a || !ra) {
                free(a);
                free(ra);
                break;
            }
            memcpy(a->run_id, s->queue[i].run_id, sizeof a->run_id);
            memcpy(a->person_id, s->queue[i].person_id, sizeof a->person_id);
            memcpy(a->org_id, s->queue[i].org_id, sizeof a->org_id);
            a->cap = s->queue[i].cap;
            a->dr = (al_driver_run){ .pid = -1, .events_fd = -1, .job_fd = -1 };
            memmove(&s->queue[i], &s->queue[i + 1], (size_t)(s->queue_len - i - 1) * sizeof *s->queue);
            s->queue_len--;
            a->next = s->active;
            s->active = a;
            s->active_count++;
            s->runs_started++;
            ra->s = s;
            ra->a = a;
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &attr, runner_main, ra) != 0) {
                /* put it back at the head and try later */
                s->active = a->next;
                s->active_count--;
                memmove(&s->queue[1], &s->queue[0], (size_t)s->queue_len * sizeof *s->queue);
                memcpy(s->queue[0].run_id, a->run_id, sizeof a->run_id);
                memcpy(s->queue[0].person_id, a->person_id, sizeof a->person_id);
                memcpy(s->queue[0].org_id, a->org_id, sizeof a->org_id);
                s->queue[0].cap = a->cap;
                s->queue_len++;
                free(a);
                free(ra);
                pthread_attr_destroy(&attr);
                break;
            }
            pthread_attr_destroy(&attr);
            started = true;
        }
        if (!started) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&s->sched_cond, &s->mu, &until);
        }
        /* approvals that ran out of time end as denied (outside the lock:
         * it appends events, which takes it) */
        uint64_t now_ms = al_now_ms();
        if (now_ms >= next_expiry) {
            next_expiry = now_ms + 1000;
            pthread_mutex_unlock(&s->mu);
            al_service_expire_approvals(s);
            pthread_mutex_lock(&s->mu);
        }
        /* Idempotency-Keys past their day (at start, then each minute) */
        if (now_ms >= next_idem_sweep) {
            next_idem_sweep = now_ms + 60000;
            pthread_mutex_unlock(&s->mu);
            al_error ierr = { 0 };
            if (al_idem_sweep(s->store, &ierr) < 0)
                al_service_log(s, "idempotency.sweep_failed", json_pack("{s:s}", "error", ierr.msg));
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* -------------------------------------------------------------- recovery */

/* A run the service lost ended in error (its row says so already): its
 * result event, its tool.call audit, and its inputs gone. */
static void lost_said(al_service *s, const char *id) {
    al_error err = { 0 };
    json_t *rows = al_store_query(s->store, &err, "SELECT * FROM runs WHERE id = ?", "s", id);
    if (rows && json_array_size(rows)) {
        al_service_append_event(s, id, "result", al_run_json(s, json_array_get(rows, 0)));
        al_governance_audit(s, json_array_get(rows, 0), "tool.call", NULL,
                json_pack("{s:s, s:s, s:s}", "invocation_id", id, "state", "error", "error", "lost"));
    }
    json_decref(rows);
    char dir[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, id);
    al_rm_rf(dir);
}

static void recover(al_service *s) {
    al_error err = { 0 };
    char now[40];
    al_store_now(now, sizeof now);
    /* Runs that were being provisioned or running when the service died:
     * their helpers died with it (PDEATHSIG), and their boxes with those. */
    json_t *lost = al_store_query(s->store, &err, "SELECT * FROM runs WHERE state IN ('provisioning', 'running')", NULL);
    for (size_t i = 0; lost && i < json_array_size(lost); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(lost, i), "id"));
        al_store_exec(s->store, &err,
                      "UPDATE runs SET state = 'error', error_code = 'lost', "
                      "error_message = 'the service stopped while this run was active', finished_at = ? WHERE id = ?",
                      "ss", now, id);
        state_event(s, id, "error");
        al_credits_refund(s, id, &err); /* airlock's own failure: not charged */
        al_service_log(s, "run.lost", json_pack("{s:s}", "run_id", id));
        lost_said(s, id);
    }
    json_decref(lost);
    /* A run waits for an approval only with its request recorded: one the
     * service died between the two (or failed to record) would wait for a
     * decision no one can make. It never ran, so nothing was charged. */
    json_t *orphans = al_store_query(s->store, &err,
                                     "SELECT id FROM runs r WHERE state = 'pending_approval' AND NOT EXISTS "
                                     "(SELECT 1 FROM approval_requests a WHERE a.run_id = r.id)", NULL);
    for (size_t i = 0; orphans && i < json_array_size(orphans); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(orphans, i), "id"));
        if (al_store_exec(s->store, &err,
                          "UPDATE runs SET state = 'error', error_code = 'lost', error_message = ?, finished_at = ? "
                          "WHERE id = ? AND state = 'pending_approval'",
                          "sss", "the service stopped before this run's approval was requested", now, id) <= 0)
            continue;
        state_event(s, id, "error");
        al_service_log(s, "run.lost", json_pack("{s:s, s:s}", "run_id", id, "why", "no approval request"));
        lost_said(s, id);
    }
    json_decref(orphans);
    /* A run that ended in error is refunded after its end is written: one
     * the service died in between (or whose refund failed) is refunded
     * now. al_credits_refund refunds a charge once, however often asked. */
    json_t *unpaid = al_store_query(s->store, &err,
                                    "SELECT r.id FROM runs r JOIN ledger c ON c.run_id = r.id AND c.kind = 'charge' "
                                    "WHERE r.state = 'error' AND NOT EXISTS "
                                    "(SELECT 1 FROM ledger f WHERE f.run_id = r.id AND f.kind = 'refund')", NULL);
    for (size_t i = 0; unpaid && i < json_array_size(unpaid); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(unpaid, i), "id"));
        if (al_credits_refund(s, id, &err) < 0)
            al_service_log(s, "credits.refund_failed", json_pack("{s:s, s:s}", "run_id", id, "error", err.msg));
    }
    json_decref(unpaid);
    /* Boxes' cgroups whose uid nobody holds any more are leftovers. */
    al_box_sweep_stale();
    /* Queued runs never started: they wait again, in their order. */
    json_t *queued = al_store_query(s->store, &err,
                                    "SELECT id, person_id, org_id, workspace_id FROM runs WHERE state = 'queued' ORDER BY seq", NULL);
    for (size_t i = 0; queued && i < json_array_size(queued); i++) {
        json_t *r = json_array_get(queued, i);
        al_error serr = { 0 };
        json_t *st = al_settings_load(s, json_string_value(json_object_get(r, "workspace_id")), &serr);
        int cap = st ? (int)json_number_value(json_object_get(st, "concurrency")) : 1; /* see al_service_decide */
        json_decref(st);
        /* accepted before the restart: held to the global cap only */
        if (al_service_enqueue(s, json_string_value(json_object_get(r, "id")),
                               json_string_value(json_object_get(r, "person_id")),
                               json_string_value(json_object_get(r, "org_id")), cap, false, NULL, 0) < 0)
            finish_canceled_queued(s, json_string_value(json_object_get(r, "id")));
    }
    json_decref(queued);
    /* A run's inline files are stored before its row is written: a crash
     * in between left files that belong to no run (and no quota). Nothing
     * runs yet, so whatever has no row is such a leftover. */
    DIR *d = opendir(s->runs_dir);
    struct dirent *de;
    json_int_t orphaned = 0;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        json_t *row = al_store_query(s->store, &err, "SELECT id FROM runs WHERE id = ?", "s", de->d_name);
        if (row && json_array_size(row) == 0) {
            char dir[PATH_MAX + 300];
            snprintf(dir, sizeof dir, "%s/%s", s->runs_dir, de->d_name);
            al_rm_rf(dir);
            orphaned++;
        }
        json_decref(row);
    }
    if (d)
        closedir(d);
    if (orphaned)
        al_service_log(s, "run.inputs_orphaned", json_pack("{s:I}", "removed", orphaned));
    /* Inputs of runs that will not reach a box any more (ended while the
     * service was down, or left by a crash between a run's end and their
     * removal) are leftovers; only runs that wait keep theirs. */
    DIR *ld = opendir(s->runs_dir);
    struct dirent *le;
    while (ld && (le = readdir(ld))) {
        if (le->d_name[0] == '.')
            continue;
        json_t *st = al_store_query(s->store, &err,
                                    "SELECT 1 FROM runs WHERE id = ? AND state IN ('queued', 'pending_approval')", "s",
                                    le->d_name);
        if (st && json_array_size(st) == 0)
            al_service_drop_inputs(s, le->d_name);
        json_decref(st);
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

int al_service_run(al_service_config *cfg, al_error *err) {
    al_service *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->cfg = *cfg;
    int r = 0;
    s->driver = al_driver_by_name(cfg->driver);
    if (!s->driver)
        return al_err(err, "config", EINVAL, "unknown driver %s", cfg->driver);
    /* each run's helper is the lean `airlock` beside us: it loads no HTTP,
     * TLS or SQLite library, so a box starts sooner */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return al_err(err, "service", errno, "readlink /proc/self/exe: %m");
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    snprintf(s->self_exe, sizeof s->self_exe, "%.*s/airlock", slash ? (int)(slash - self) : 1, slash ? self : ".");
    if (access(s->self_exe, X_OK) != 0)
        snprintf(s->self_exe, sizeof s->self_exe, "%s", self); /* airlock-server has helper too */
    if ((r = make_dir(cfg->state_dir, err)) < 0)
        return r;
    snprintf(s->blobs_dir, sizeof s->blobs_dir, "%s/blobs", cfg->state_dir);
    snprintf(s->runs_dir, sizeof s->runs_dir, "%s/runs", cfg->state_dir);
    if ((r = make_dir(s->blobs_dir, err)) < 0 || (r = make_dir(s->runs_dir, err)) < 0)
        return r;
    char db[PATH_MAX + 16];
    snprintf(db, sizeof db, "%s/airlock.db", cfg->state_dir);
    if ((r = al_store_open(db, &s->store, err)) < 0)
        return r;
    s->queue = calloc((size_t)cfg->queue_max, sizeof *s->queue);
    if (!s->queue)
        return -ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->sched_cond, NULL);
    pthread_cond_init(&s->events_cond, NULL);
    pthread_mutex_init(&s->health_mu, NULL);
    for (int i = 0; i < AL_EVENT_BUCKETS; i++)
        pthread_cond_init(&s->ev_buckets[i].cond, NULL);

    /* Block the signals we wait for before any thread starts, so every
     * thread inherits the mask and only sigwait below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

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
    recover(s);
    al_error verr = { 0 };
    int bad = al_blobs_verify_once(s, &verr);
    if (bad < 0)
        al_service_log(s, "blobs.verify_failed", json_pack("{s:s}", "error", verr.msg));
    else if (bad > 0)
        al_service_log(s, "blobs.removed", json_pack("{s:i, s:s}", "count", bad, "why",
                                                     "content other than its sha256 (stored before verification)"));
    /* bundles left by a crash between a delete and its collection, and
     * those of the runs recover() just ended */
    al_skills_gc(s, NULL, err);
    if (pthread_create(&s->scheduler, NULL, scheduler_main, s) != 0)
        return al_err(err, "service", EAGAIN, "start the scheduler");
    /* the first /healthz is answered from a probe made before we listen */
    free(al_service_health(s));
    al_http *http = NULL;
    if ((r = al_http_start(s, &http, err)) < 0)
        return r;
    al_service_log(s, "service.start", json_pack("{s:s, s:i, s:s, s:s}", "listen", cfg->listen_host, "port", cfg->port,
                                                 "state", cfg->state_dir, "driver", cfg->driver));

    int sig = 0;
    sigwait(&sigs, &sig);
    al_service_log(s, "service.stop", json_pack("{s:i}", "signal", sig));
    /* Graceful: stop taking runs, cancel the active ones (their boxes are
     * killed and cleaned up), wait for their runners, keep queued runs
     * queued for the next start. */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (active_run *a = s->active; a; a = a->next) {
        a->cancel_requested = true;
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
    al_http_stop(http);
    al_store_close(s->store);
    /* every thread is gone: what is left is ours alone to free (so that a
     * LeakSanitizer build reports only real leaks) */
    al_skills_free(s);
    free(s->queue);
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
    free(s);
    return 0;
}
