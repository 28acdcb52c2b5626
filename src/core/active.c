/*
 * The runs this node holds (s->active): whether one is here, its cancel,
 * and how many are at work. The runners add and remove them (runner.c).
 */
#include <string.h>

#include "runner.h"
#include "service.h"
#include "service_int.h"

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
