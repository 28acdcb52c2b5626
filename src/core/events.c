/*
 * A run's events and its followers: the append of events (a run's stream,
 * in the store), and the wake-ups of whoever follows a run here; the
 * other nodes hear of them from the store (al_cluster_notify). The lowest
 * floor of the core with the log (log.c): what every other file of it
 * tells, it tells through here.
 */
#include <string.h>

#include "../store/nodes.h"
#include "runner.h"
#include "service.h"
#include "service_int.h"

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

void al_cluster_notify(al_service *s, const char *channel, const char *run_id) {
    if (!s->multi_node)
        return;
    al_error err = { 0 };
    if (al_store_notify(s->store, channel, run_id, &err) < 0)
        al_service_log(s, AL_LOG_WARN, "node.notify_failed", json_pack("{s:s, s:s}", "channel", channel, "error", err.msg));
}
