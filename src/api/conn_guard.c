/* The connection guard (conn_guard.h). */
#include "conn_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "../util/util.h"

typedef struct conn {
    struct conn *prev, *next; /* the guard's list, oldest first */
    al_guard *g;
    int fd;
    uint64_t since_ms; /* when it began to wait for its request */
    bool receiving;    /* its request is not yet in */
    bool authed;       /* a request on it had a valid key */
    bool cut;          /* closed by the guard (shutdown sent) */
} conn;

struct al_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watch;
    bool stop;
    conn *head, *tail;
    unsigned others;         /* connections without a valid key yet */
    unsigned others_max;     /* max_connections less the reserve */
    uint64_t timeout_ms;
    unsigned long long late, evicted;
};

/* Close C's connection from outside its thread: its next read or wait
 * ends, and libmicrohttpd closes it. Under g->mu, so that C is still
 * registered (the notice of its close comes before its fd is closed). */
static void cut(conn *c) {
    if (c->cut)
        return;
    c->cut = true;
    shutdown(c->fd, SHUT_RDWR);
}

static void *watch(void *arg) {
    al_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        uint64_t now = al_now_ms();
        for (conn *c = g->head; c; c = c->next)
            if (c->receiving && !c->cut && now - c->since_ms >= g->timeout_ms) {
                cut(c);
                g->late++;
            }
        /* checked each quarter second: a deadline is kept within that */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 250 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &until);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int al_guard_new(int max_connections, int reserved, int request_timeout_s, al_guard **ret) {
    al_guard *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    if (reserved < 0)
        reserved = max_connections / 4;
    /* one slot at least is everyone's: a key is only known on a request */
    if (reserved >= max_connections)
        reserved = max_connections - 1;
    g->others_max = (unsigned)(max_connections - reserved);
    g->timeout_ms = (uint64_t)request_timeout_s * 1000;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    int r = pthread_create(&g->watch, NULL, watch, g);
    if (r != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return -r;
    }
    *ret = g;
    return 0;
}

void al_guard_free(al_guard *g) {
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->watch, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void started(al_guard *g, struct MHD_Connection *mc, void **socket_context) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn *c = ci ? calloc(1, sizeof *c) : NULL;
    if (!c)
        return; /* unguarded: libmicrohttpd's own limits still hold */
    *c = (conn){ .g = g, .fd = ci->connect_fd, .since_ms = al_now_ms(), .receiving = true };
    pthread_mutex_lock(&g->mu);
    /* past the share of the unauthenticated, the oldest of them still
     * waiting for its request makes room: an attacker's trickle is older
     * than a real client's request, which is in within milliseconds */
    if (g->others >= g->others_max)
        for (conn *o = g->head; o; o = o->next)
            if (!o->authed && o->receiving && !o->cut) {
                cut(o);
                g->evicted++;
                break;
            }
    c->prev = g->tail;
    if (g->tail)
        g->tail->next = c;
    else
        g->head = c;
    g->tail = c;
    g->others++;
    pthread_mutex_unlock(&g->mu);
    *socket_context = c;
}

static void closed(al_guard *g, conn *c) {
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        g->tail = c->prev;
    if (!c->authed)
        g->others--;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void al_guard_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe) {
    al_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        started(g, mc, socket_context);
    else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context)
        closed(g, *socket_context);
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED)
        *socket_context = NULL;
}

static conn *of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void al_guard_answering(struct MHD_Connection *mc) {
    conn *c = of(mc);
    if (!c)
        return;
    pthread_mutex_lock(&c->g->mu);
    c->receiving = false;
    pthread_mutex_unlock(&c->g->mu);
}

void al_guard_authenticated(struct MHD_Connection *mc) {
    conn *c = of(mc);
    if (!c)
        return;
    pthread_mutex_lock(&c->g->mu);
    if (!c->authed)
        c->g->others--;
    c->authed = true;
    pthread_mutex_unlock(&c->g->mu);
}

void al_guard_request_done(struct MHD_Connection *mc) {
    conn *c = of(mc);
    if (!c)
        return;
    pthread_mutex_lock(&c->g->mu);
    c->receiving = true;
    c->since_ms = al_now_ms();
    pthread_mutex_unlock(&c->g->mu);
}

void al_guard_counts(al_guard *g, unsigned long long *ret_late, unsigned long long *ret_evicted) {
    pthread_mutex_lock(&g->mu);
    *ret_late = g->late;
    *ret_evicted = g->evicted;
    pthread_mutex_unlock(&g->mu);
}
