/* The scheduler: the thread that claims queued runs as the caps allow and
 * starts a runner for each (runner.c), and does the service's periodic
 * chores between claims (approvals that ran out, the cluster's tick,
 * Idempotency-Keys past their day, runs past their retention). */
#include <string.h>
#include <time.h>

#include "console_auth.h"
#include "runner.h"
#include "sandbox.h"
#include "service.h"
#include "service_int.h"
#include "../store/nodes.h"

/* What the scheduler's last claim said waits in the queue. */
typedef enum sched_rest {
    REST_UNKNOWN, /* not asked yet, or the claim failed */
    REST_MORE,    /* another eligible run */
    REST_BLOCKED, /* only runs of people at their cap */
    REST_NONE,    /* nothing */
} sched_rest;

void *al_service_scheduler_main(void *p) {
    al_service *s = p;
    uint64_t next_expiry = 0, next_idem_sweep = 0, next_run_sweep = 0, last_claim_ms = 0, seen_queue = 0, seen_slot = 0;
    sched_rest rest = REST_UNKNOWN;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        bool started = false;
        /* Fair share across every node on the store: the next slot goes to
         * the eligible person (under their cap, counting their runs on all
         * nodes) with the fewest runs active, and within a person FIFO
         * (al_store_claim_run). A person with many queued runs cannot hold
         * back another's. A claim is asked again only when its last answer
         * may have changed: a run queued (here or elsewhere), or a slot
         * freed while only people at their cap waited; and once a second,
         * whatever no one was told of (a node that left gives its claimed
         * runs back without a word). */
        while (!s->draining && !s->declared_dead && s->active_count < s->cfg.max_concurrent) {
            uint64_t now_ms = al_now_ms();
            bool ask = rest == REST_UNKNOWN || rest == REST_MORE || s->queue_gen != seen_queue ||
                       (rest == REST_BLOCKED && s->slot_gen != seen_slot) || now_ms - last_claim_ms >= 1000;
            if (!ask)
                break;
            uint64_t queue_gen = s->queue_gen, slot_gen = s->slot_gen;
            active_run *a = calloc(1, sizeof *a);
            if (!a)
                break;
            pthread_mutex_unlock(&s->mu);
            al_store_claim c;
            al_error cerr = { 0 };
            int got = al_store_claim_run(s->store, s->node_id, &c, &cerr);
            /* test builds: widen the window between a claim and its runner,
             * so that a test can stop the service inside it */
            if (got > 0)
                al_test_pause("AIRLOCK_TEST_CLAIM_PAUSE_MS");
            pthread_mutex_lock(&s->mu);
            /* what moved while it was asked is news still */
            last_claim_ms = now_ms;
            seen_queue = queue_gen;
            seen_slot = slot_gen;
            rest = got < 0 ? REST_UNKNOWN : c.more ? REST_MORE : c.blocked ? REST_BLOCKED : REST_NONE;
            if (got <= 0) {
                if (got < 0)
                    al_service_log(s, AL_LOG_ERROR, "queue.claim_failed", json_pack("{s:s}", "error", cerr.msg));
                free(a);
                break;
            }
            /* A stop that came while the store was asked has already seen
             * no run active and is about to free the service: a runner
             * started now would outlive it (ASan saw one read the freed
             * service at shutdown). The claim stays queued, and the node's
             * leave gives it back (al_cluster_stop), as it does a run
             * given back while stopping; a node declared dead has its
             * claims taken by the others. */
            if (s->draining || s->declared_dead) {
                free(a);
                break;
            }
            memcpy(a->run_id, c.run_id, sizeof a->run_id);
            memcpy(a->person_id, c.person_id, sizeof a->person_id);
            memcpy(a->org_id, c.org_id, sizeof a->org_id);
            a->cap = c.cap;
            a->dr = (al_driver_run){ .pid = -1, .events_fd = -1, .job_fd = -1 };
            a->next = s->active;
            s->active = a;
            s->active_count++;
            s->runs_started++;
            if (al_runner_start(s, a) != 0) {
                /* back to the queue, for this node or another, later */
                s->active = a->next;
                s->active_count--;
                rest = REST_UNKNOWN;
                pthread_mutex_unlock(&s->mu);
                al_store_run_release(s->store, c.run_id, s->node_id, c.cap, &cerr);
                pthread_mutex_lock(&s->mu);
                free(a);
                break;
            }
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
            /* E2B sandboxes past their end (one node a second: the store's claim) */
            al_sandbox_sweep(s);
            pthread_mutex_lock(&s->mu);
        }
        /* dead nodes, and cancels asked of this node's runs elsewhere */
        pthread_mutex_unlock(&s->mu);
        al_cluster_tick(s);
        pthread_mutex_lock(&s->mu);
        /* Idempotency-Keys past their day (at start, then each minute) */
        if (now_ms >= next_idem_sweep) {
            next_idem_sweep = now_ms + 60000;
            pthread_mutex_unlock(&s->mu);
            al_error ierr = { 0 };
            if (al_idem_sweep(s->store, &ierr) < 0)
                al_service_log(s, AL_LOG_WARN, "idempotency.sweep_failed", json_pack("{s:s}", "error", ierr.msg));
            /* and the console's login links and sessions a day past their end */
            ierr = (al_error){ 0 };
            if (al_signin_sweep(s, &ierr) < 0)
                al_service_log(s, AL_LOG_WARN, "signin.sweep_failed", json_pack("{s:s}", "error", ierr.msg));
            pthread_mutex_lock(&s->mu);
        }
        /* runs past their retention (the store says which node sweeps) */
        if (now_ms >= next_run_sweep) {
            next_run_sweep = now_ms + (uint64_t)s->cfg.run_sweep_s * 1000;
            pthread_mutex_unlock(&s->mu);
            al_retention_sweep(s);
            pthread_mutex_lock(&s->mu);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
