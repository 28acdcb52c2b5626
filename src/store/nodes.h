/*
 * Many nodes on one database (store/nodes.c): each `airlock serve` joins
 * with a lease it renews; the others declare a node whose lease ran out
 * dead, once. The queue is the runs table: a node claims the next queued
 * run, fairly across people, under the per-person caps of every node
 * together. Notifications tell the other nodes that something changed
 * (a run's events, a cancel, a run queued) so that followers are live.
 */
#pragma once

#include "store.h"

/* ---- leases */
int al_store_node_join(al_store *s, const char *id, const char *host, int64_t pid, const char *now, const char *lease_until,
                       al_error *err);
/* 1 renewed until LEASE_UNTIL; 0 when another node declared this one dead
 * (it must not run anything more: its runs were ended and refunded). */
int al_store_node_renew(al_store *s, const char *id, const char *lease_until, al_error *err);
/* Left cleanly at NOW (its lease ends with it); the runs it claimed and
 * did not start go back to the queue. */
int al_store_node_leave(al_store *s, const char *id, const char *now, al_error *err);
/* Declare dead, for SELF, every other node whose lease ended before NOW
 * and that did not leave: how many (at most MAX ids into RET_IDS), each
 * exactly once however many nodes reap at the same time. A dead node's
 * claimed, not yet started runs go back to the queue in the same step. */
int al_store_nodes_reap(al_store *s, const char *self, const char *now, char (*ret_ids)[40], int max, al_error *err);
/* The live nodes (not left, not declared dead) on HOST other than SELF:
 * their ids and pids (at most MAX). */
int al_store_nodes_on_host(al_store *s, const char *host, const char *self, char (*ret_ids)[40], int64_t *ret_pids,
                           int max, al_error *err);
/* End node ID's lease now (it is known to be gone): the next reap declares it dead. */
int al_store_node_expire(al_store *s, const char *id, al_error *err);
/* Forget the nodes that left or died before BEFORE: how many. */
int al_store_nodes_forget(al_store *s, const char *before, al_error *err);
/* Runs node NODE_ID holds in provisioning or running (at most MAX); NULL:
 * such runs no node holds. */
int al_store_node_runs(al_store *s, const char *node_id, char (*ret_ids)[40], int max, al_error *err);
/* Nodes whose lease holds at NOW. */
int al_store_nodes_alive(al_store *s, const char *now, al_error *err);

/* ---- the shared queue */
typedef struct al_store_claim {
    char run_id[40], person_id[40], org_id[40];
    int cap;
    /* what else waited as it was claimed (or none was): another eligible
     * run (MORE), or only runs of people at their cap (BLOCKED: a slot
     * freed anywhere may make one eligible), or nothing (neither) */
    bool more, blocked;
} al_store_claim;
/* Claim for NODE_ID the next queued run: among the people under their cap
 * (runs claimed or active on every node count), the one with the fewest
 * active, and that person's oldest. 1 with *RET, 0 when none is eligible
 * (RET->blocked says whether any waits). */
int al_store_claim_run(al_store *s, const char *node_id, al_store_claim *ret, al_error *err);
/* Runs queued (claimed or not, not started) on every node: all, or one
 * person's (PERSON_ID) or organisation's (ORG_ID); EXCEPT (may be NULL)
 * not counted. */
int al_store_queued_count(al_store *s, const char *person_id, const char *org_id, const char *except, al_error *err);

/* Admit run RUN_ID (queued, held by NODE_ID, the node that made or approved it) to the shared
 * queue under CAP, if the queue of every node has room: fewer than
 * QUEUE_MAX runs queued; and with PERSON_ID set, fewer than PER_PERSON of
 * the person's (PERSON_EXTRA more waiting elsewhere) and PER_ORG of
 * ORG_ID's. 1 admitted, 0 not queued any more; -EAGAIN the queue is full,
 * -EDQUOT the person's share, -EUSERS the organisation's (*RET counts). */
typedef struct al_store_queue_limits {
    const char *node_id; /* the node that holds the run until it is admitted */
    int queue_max;
    const char *person_id, *org_id; /* NULL: the global cap only */
    int person_extra, per_person, per_org;
} al_store_queue_limits;
typedef struct al_store_queue_counts {
    int all, person, org;
} al_store_queue_counts;
int al_store_queue_admit(al_store *s, const char *run_id, int64_t cap, const al_store_queue_limits *lim,
                         al_store_queue_counts *ret, al_error *err);
/* The same counts in one read (no admission): all runs queued, PERSON_ID's
 * and ORG_ID's of them (NULL: 0), EXCEPT not counted. */
int al_store_queue_counts_of(al_store *s, const char *person_id, const char *org_id, const char *except,
                             al_store_queue_counts *ret, al_error *err);

/* ---- notifications between nodes. CHANNEL is one of AL_NOTIFY_*;
 * PAYLOAD a run id (or ""). Sent at the end of the unit of work they are
 * in (at once outside one); free on SQLite, where there is one node. */
#define AL_NOTIFY_EVENTS "airlock_events" /* a run got an event or ended */
#define AL_NOTIFY_CANCEL "airlock_cancel" /* a cancel of a run was asked */
#define AL_NOTIFY_QUEUE "airlock_queue"   /* a run was queued */
int al_store_notify(al_store *s, const char *channel, const char *payload, al_error *err);

/* A watcher: its own connection, LISTENing on every AL_NOTIFY_* channel.
 * -EOPNOTSUPP on SQLite. */
typedef struct al_store_watch al_store_watch;
int al_store_watch_open(const char *target, al_store_watch **ret, al_error *err);
/* What S's own connections send is not returned by W (0, as a timeout):
 * the node that sent it told itself already. A notification carries the
 * session that sent it (on PostgreSQL its backend's pid, unique among the
 * server's live sessions); so a pooler between the nodes and the server
 * must keep a client's session its own (PgBouncer: pool_mode = session). */
void al_store_watch_skip_own(al_store_watch *w, al_store *s);
/* The next notification within TIMEOUT_MS: 1 with its channel and payload,
 * 0 on timeout, 2 after a reconnect (some may have been missed: treat
 * everything as changed), -errno. */
int al_store_watch_next(al_store_watch *w, int timeout_ms, char *channel, size_t channel_len, char *payload,
                        size_t payload_len, al_error *err);
void al_store_watch_close(al_store_watch *w);
