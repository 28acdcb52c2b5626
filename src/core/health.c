/* The answer of GET /healthz: the driver's probe, cached. */
#include <string.h>

#include "service.h"
#include "service_int.h"

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
