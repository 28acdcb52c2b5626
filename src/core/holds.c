/*
 * Long-held requests per person (event-stream followers, requests that
 * wait for a run's end) and the bytes of their bodies being received:
 * what one person may hold of the daemon at once.
 */
#include <string.h>

#include "runner.h"
#include "service.h"
#include "service_int.h"

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
    int max = kind == AL_HOLD_FOLLOW     ? s->cfg.followers_per_person
              : kind == AL_HOLD_ACTIVITY ? AL_ACTIVITY_STREAMS_PER_PERSON
              : kind == AL_HOLD_AUDIT    ? AL_AUDIT_READS_PER_PERSON
                                         : s->cfg.waits_per_person;
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

void al_service_holds_free(al_service *s) {
    while (s->holds) {
        struct person_holds *h = s->holds;
        s->holds = h->next;
        free(h);
    }
}
