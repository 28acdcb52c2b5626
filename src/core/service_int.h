/* Inside the core: what the service is. Only src/core includes this;
 * everything above reads the service through functions. */
#pragma once

#include "service.h"

struct al_service {
    al_service_config cfg;
    al_store *store;
    const al_driver_ops *driver;
    char self_exe[PATH_MAX];
    int state_lock_fd;            /* the embedded store's state directory, held (flock) while served */
    char blobs_dir[PATH_MAX + 8], runs_dir[PATH_MAX + 8];
    /* the install box's network ("packages:" and package_registries),
     * checked at start against the index and registry (drivers/install.h) */
    char pkg_network[sizeof ((al_service_config *)0)->package_registries + 16];

    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t sched_cond;    /* queue or capacity changed */
    /* bumped with a broadcast of sched_cond when a run may have been
     * queued (queue_gen) or a slot freed (slot_gen), here or on another
     * node: the scheduler claims again when one moved that could change
     * its last claim's answer (and each second in any case) */
    uint64_t queue_gen, slot_gen;
    pthread_cond_t events_cond;   /* a run got a new event or ended */
    uint64_t event_gen;           /* bumped with every broadcast of events_cond */
    /* A run's followers wait on their run's bucket only, so one run's output
     * wakes the followers of about 1/AL_EVENT_BUCKETS of the others, not
     * every follower of every tenant. wake_gen: al_service_wake_all. */
#define AL_EVENT_BUCKETS 256
    struct {
        uint64_t gen;
        pthread_cond_t cond;
    } ev_buckets[AL_EVENT_BUCKETS];
    uint64_t wake_gen;
    /* activity.c: the node's one look at the store for every open
     * GET /v1/events stream (made with the first one) */
    struct al_activity_hub *activity;
    active_run *active;           /* linked list */
    int active_count;
    bool draining;                /* a stop began: no new claim, running runs finish */
    bool stopping;
    pthread_t scheduler;

    /* cluster.c: this node among those on the store */
    char node_id[40];
    char store_target[PATH_MAX + 1024];
    bool multi_node;              /* the store is shared (PostgreSQL): tell and watch the others */
    bool declared_dead;           /* another node declared this one dead (or its lease ran out) */
    bool cluster_running;
    pthread_t lease_thread, watch_thread;
    struct al_store_watch *watch;
    al_store *lease_store;        /* a connection of the lease's own: never queued behind the others' lock waits */
    uint64_t next_reap_ms;        /* the scheduler's next look for dead nodes */

    /* metrics */
    uint64_t runs_started, runs_finished;
    uint64_t layers_removed;      /* package layers collected (retention.c) */
    uint64_t duration_buckets[12]; /* histogram of run wall time */
    double duration_sum;

    json_t *skills_bundled;       /* [{manifest, digest}], read-only after start */
    /* skills.c: stored bundles change (upload, delete, collection) under
     * skills_mu, so a collection never removes a bundle that an upload is
     * about to record or a run is about to use */
    pthread_mutex_t skills_mu;
    /* session_box.c: the E2B session boxes this node holds (the list under
     * mu; session_mu serialises their starts) */
    pthread_mutex_t session_mu;
    struct al_session_box *sessions;
    uint64_t session_gen;
    json_t *skills_pins;          /* {digest: count}: runs being created from a bundle */
    bool skills_gc_pending;       /* a deleted bundle waits for its live runs to end */

    /* holds.c: long-held requests per person (under mu) */
    struct person_holds *holds;
    /* health.c: the cached answer of /healthz (under health_mu) */
    pthread_mutex_t health_mu;
    char *health_text;
    uint64_t health_at_ms;        /* al_now_ms() of its probe */
    bool health_probing;
    struct al_checkpointer *checkpointer; /* checkpointer.c: the audit heads' signer */
};
