/*
 * Runs in the store: their rows, their events, their analytics row, and
 * the credits a run is charged and refunded (store/runs.c). Records in
 * and out; the columns that hold JSON documents (limits, inputs, result,
 * ...) are the JSON text as stored: the service parses them.
 */
#pragma once

#include "store.h"

/* A run's state; a closed set, named in the store as al_run_state_name. */
typedef enum al_run_state {
    AL_RUN_PENDING_APPROVAL,
    AL_RUN_QUEUED,
    AL_RUN_PROVISIONING,
    AL_RUN_RUNNING,
    AL_RUN_SUCCEEDED,
    AL_RUN_FAILED,
    AL_RUN_TIMED_OUT,
    AL_RUN_KILLED,
    AL_RUN_CANCELED,
    AL_RUN_ERROR,
    AL_RUN_DENIED,
    _AL_RUN_STATE_MAX,
    _AL_RUN_STATE_INVALID = -1,
} al_run_state;

/* A set of states, for the calls that move a run only from some. */
#define AL_RUN_BIT(st) (1u << (unsigned)(st))

const char *al_run_state_name(al_run_state st);
/* _AL_RUN_STATE_INVALID for a name that is none (or NULL). */
al_run_state al_run_state_from_name(const char *name);
/* Whether ST does not change again. */
bool al_run_state_ended(al_run_state st);
/* Whether a run in FROM may move to TO (the state machine, written once;
 * every call below that moves a run asks it):
 *   pending_approval -> queued (approved), denied (denied, or its card
 *                       expired), canceled (withdrawn), error (lost, or
 *                       its card could not be made)
 *   queued           -> provisioning (claimed and charged), canceled, error
 *   provisioning     -> running, or any end but denied
 *   running          -> any end but denied
 * and an ended run moves no more. Pure. */
bool al_run_transition_ok(al_run_state from, al_run_state to);

/* A runs row. Times are the store's RFC 3339 text, "" for NULL; so are
 * thread_id and error_code. The char * columns are NULL for NULL. */
typedef struct al_store_run {
    int64_t seq;
    char id[40], org_id[40], workspace_id[40], person_id[40];
    char thread_id[72];
    char language[16];
    char *code;
    char *description;
    char *network;                /* the policy's text */
    char *limits;                 /* JSON */
    char *inputs;                 /* JSON: artifacts, args, skill, via, documents */
    al_run_state state;
    char *result;                 /* JSON: the box's result */
    char *previews;               /* JSON */
    char *skipped;                /* JSON */
    char error_code[32];
    char *error_message;
    char created_at[40], started_at[40], finished_at[40];
    int64_t price;
    int64_t redactions;
    char image[80];               /* "" the host's runtime, else "sha256:<hex>" */
    int64_t input_bytes;
    /* what a list shows without loading the documents above (011) */
    char *result_summary;         /* JSON: the result's small fields, NULL while there is none */
    int64_t preview_count, skipped_count;
    char *skill_name, *skill_version, *skill_digest;
    char node_id[40];             /* the node that claimed it, or that holds a new run until it is admitted ("" none) */
    int64_t cap;                  /* the person's concurrency cap it was queued under */
    /* when the retention sweep dropped its output and events ("" not) */
    char expired_at[40];
    /* al_store_run_finish: the bytes its events hold, beside the documents
     * the finish writes, for the organisation's storage count */
    int64_t stored_bytes;
    /* who asked and how (021): the interface ("rest", "mcp", "piston",
     * "e2b"); read back with the person's name and role (NULL / "" when
     * the person is gone) and the credits its ledger rows say it was
     * charged (charges less refunds); CHANGED_AT: when it was made or
     * last changed state */
    char via[16];
    char *person_name;
    char person_role[16];
    int64_t credits;
    char changed_at[40];
    /* the API key that asked (023; "" none: a console session, or a run
     * made before), read back with its name (NULL when none) */
    char key_id[40];
    char *key_name;
} al_store_run;

/* Free a run the store returned (NULL is fine). A record the caller built
 * itself (to insert, or to finish a run) points at the caller's strings and
 * is not freed with this. */
void al_store_run_free(al_store_run *r);
static inline void al_store_run_freep(al_store_run **r) {
    al_store_run_free(*r);
}
#define _cleanup_run_ _cleanup_(al_store_run_freep)

/* A run's identity and owners: what a list of runs to act on carries. */
typedef struct al_store_run_ref {
    int64_t seq;
    char id[40], org_id[40], workspace_id[40], person_id[40];
} al_store_run_ref;

/* Record R (its id, owners, request columns, state, created_at, price,
 * image, input_bytes, skill_name/version, via, key_id), in the caller's transaction if
 * there is one. */
int al_store_run_insert(al_store *s, const al_store_run *r, al_error *err);
/* Run ID (of workspace WS_ID, unless NULL) in *RET (al_store_run_free);
 * -ENOENT when there is none. */
int al_store_run_get(al_store *s, const char *id, const char *ws_id, al_store_run **ret, al_error *err);
/* The state of run ID alone (no document is loaded); -ENOENT none. */
int al_store_run_state(al_store *s, const char *id, al_run_state *ret, al_error *err);
/* Run ID moves from FROM to TO (nothing else changes): 1 moved, 0 it was
 * not in FROM; -EINVAL a move al_run_transition_ok refuses. */
int al_store_run_move(al_store *s, const char *id, al_run_state from, al_run_state to, al_error *err);
/* Run ID ends in TO with ECODE/EMSG (may be NULL) at FINISHED_AT, if it is
 * in one of the states FROM_MASK (AL_RUN_BIT): 1 ended, 0 it was not;
 * -EINVAL when a state of FROM_MASK may not move to TO. */
int al_store_run_end(al_store *s, const char *id, unsigned from_mask, al_run_state to, const char *ecode,
                     const char *emsg, const char *finished_at, al_error *err);
/* The end of run R->id as the box left it: state, result, previews,
 * skipped, error_code/message, finished_at, redactions, result_summary,
 * preview_count and skipped_count of R; from whichever of queued,
 * provisioning and running may move to R->state. */
int al_store_run_finish(al_store *s, const al_store_run *r, al_error *err);
/* (al_store_run_finish: 1 written, 0 when the run had ended meanwhile, e.g.
 * declared lost when its node was declared dead.) */
/* A queued run NODE_ID holds (claimed, not started) goes back to the
 * shared queue under CAP: 1, or 0 when it is not queued and held by
 * NODE_ID any more. */
int al_store_run_release(al_store *s, const char *id, const char *node_id, int64_t cap, al_error *err);
/* Ask the node that runs run ID to cancel it: 1 asked, 0 not active. */
int al_store_run_cancel_request(al_store *s, const char *id, al_error *err);
/* 1 when a cancel of run ID was asked (al_store_run_cancel_request). */
int al_store_run_cancel_requested(al_store *s, const char *id, al_error *err);

/* The provision charge, atomic: run ID moves from queued to provisioning
 * (started_at NOW), its organisation's balance pays its price and the
 * ledger says so, all or nothing. 1 charged, 0 it was not queued (canceled,
 * started elsewhere), -ENOSPC the balance does not cover it. */
int al_store_run_charge(al_store *s, const char *id, const char *node_id, const char *now, al_error *err);
/* Run ID, waiting for an approval, is approved: queued, held by NODE_ID
 * (the node that approved it) until that node admits it to the queue. */
int al_store_run_approved(al_store *s, const char *id, const char *node_id, al_error *err);
/* Run IDs of NODE_ID that are active and whose cancel was asked (at most MAX). */
int al_store_node_cancels(al_store *s, const char *node_id, char (*ret_ids)[40], int max, al_error *err);
/* Give run ID's charge back, once however often asked: 1 refunded, 0
 * nothing to refund (never charged, or refunded already). */
int al_store_run_refund(al_store *s, const char *id, const char *now, al_error *err);

/* The runs in one of the states MASK, oldest first, in *RET (free()). */
int al_store_run_refs(al_store *s, unsigned mask, al_store_run_ref **ret, size_t *ret_n, al_error *err);
/* Runs that wait for an approval with no request recorded for it. */
int al_store_run_refs_unrequested(al_store *s, al_store_run_ref **ret, size_t *ret_n, al_error *err);
/* Runs that ended in error with a charge and no refund. */
int al_store_run_refs_unrefunded(al_store *s, al_store_run_ref **ret, size_t *ret_n, al_error *err);
/* Runs whose approval is open and expired at NOW. */
int al_store_run_refs_approval_due(al_store *s, const char *now, al_store_run_ref **ret, size_t *ret_n,
                                   al_error *err);

/* Sums over ORG_ID's runs: the prices of the queued ones; the input_bytes
 * of those in MASK. */
int al_store_runs_queued_price(al_store *s, const char *org_id, int64_t *ret, al_error *err);
int al_store_runs_input_bytes(al_store *s, const char *org_id, unsigned mask, int64_t *ret, al_error *err);
/* How many runs of PERSON_ID are in state ST. */
int al_store_runs_count_of(al_store *s, const char *person_id, al_run_state st, int64_t *ret, al_error *err);
/* Runs by state: of workspace WS_ID (NULL: every run), created in [FROM,
 * TO) (either NULL: unbounded). */
int al_store_runs_by_state(al_store *s, const char *ws_id, const char *from, const char *to,
                           int64_t ret[_AL_RUN_STATE_MAX], al_error *err);
typedef struct al_store_count {
    char key[32];
    int64_t n;
} al_store_count;
/* Runs of WS_ID by language, as above, in *RET (free()). */
int al_store_runs_by_language(al_store *s, const char *ws_id, const char *from, const char *to, al_store_count **ret,
                              size_t *ret_n, al_error *err);

/* A list's entry: a run without its documents (code, inputs, result,
 * previews, skipped are NULL), with what the list shows beside it. */
typedef struct al_store_run_brief {
    al_store_run run;
    int64_t artifact_count;
    bool has_approval;
    char approval_id[40], approval_hash[72], approval_decision[16], approval_expires_at[40];
} al_store_run_brief;
typedef struct al_store_run_filter {
    const char *ws_id;
    al_run_state state;           /* _AL_RUN_STATE_INVALID: any */
    const char *thread_id;        /* NULL: any */
    const char *person_id;        /* NULL: any */
    const char *via;              /* NULL: any */
    const char *key_id;           /* NULL: any */
    int64_t before_seq;           /* seq < this */
    int64_t limit;
} al_store_run_filter;
/* WS_ID's runs newest first, as F says, in *RET (al_store_run_briefs_free). */
int al_store_run_list(al_store *s, const al_store_run_filter *f, al_store_run_brief **ret, size_t *ret_n,
                      al_error *err);
void al_store_run_briefs_free(al_store_run_brief *b, size_t n);
/* Free what entry B holds (not B itself). */
void al_store_run_brief_clear(al_store_run_brief *b);
/* WS_ID's runs made or moved at SINCE or later (changed_at), oldest change
 * first, at most LIMIT, as list entries (al_store_run_briefs_free): what
 * the workspace's activity stream reads on each look. */
int al_store_run_changes(al_store *s, const char *ws_id, const char *since, int64_t limit, al_store_run_brief **ret,
                         size_t *ret_n, al_error *err);
/* Every workspace's runs made or moved after (AT, SEQ) in (changed_at, seq)
 * order (SEQ -1: at AT or later), at most LIMIT, as list entries: the one
 * look a node takes for all its activity streams at once (index
 * runs_changed_all). */
int al_store_run_changes_all(al_store *s, const char *at, int64_t seq, int64_t limit, al_store_run_brief **ret,
                             size_t *ret_n, al_error *err);

/* ---- usage by day (GET /v1/usage's days) */
typedef struct al_store_day_count {
    char day[12];                 /* YYYY-MM-DD (UTC, the store's times' first ten characters) */
    al_run_state state;
    char language[16];
    char via[16];
    int64_t n;
} al_store_day_count;
/* WS_ID's runs made at SINCE or later, counted by day, state, language and
 * interface, in *RET (free()); index runs_ws_created. */
int al_store_runs_by_day(al_store *s, const char *ws_id, const char *since, al_store_day_count **ret, size_t *ret_n,
                         al_error *err);
typedef struct al_store_day_credits {
    char day[12];
    int64_t credits;              /* charged less refunded */
} al_store_day_credits;
/* WS_ID's ledger charges and refunds made at SINCE or later, summed by day;
 * index ledger_ws_created. */
int al_store_credits_by_day(al_store *s, const char *ws_id, const char *since, al_store_day_credits **ret,
                            size_t *ret_n, al_error *err);

/* ---- threads: a workspace's threads as its runs name them */
typedef struct al_store_thread {
    char id[72];
    int64_t runs;                 /* its runs */
    int64_t artifacts;            /* its files (the newest version of each path) */
    char last_run_at[40];         /* its newest run's creation */
    int64_t last_seq;             /* its newest run's number: the listing's order and cursor */
} al_store_thread;
/* WS_ID's threads, the one with the newest run first, whose newest run is
 * numbered below BEFORE, at most LIMIT, in *RET (free()), found among the
 * SCAN runs below BEFORE (index runs_ws; each found thread's runs counted
 * by runs_ws_thread): a page's cost is bounded whatever the workspace's
 * history. *RET_MORE: where to read on when those SCAN runs were not all
 * the workspace's below BEFORE (the lowest one read), else 0. */
int al_store_threads_list(al_store *s, const char *ws_id, int64_t before, int64_t limit, int64_t scan,
                          al_store_thread **ret, size_t *ret_n, int64_t *ret_more, al_error *err);

/* ---- run_events: everything a run's stream carried, numbered from 1 */
typedef struct al_store_event {
    int64_t seq;
    char type[16];
    char *data;                   /* JSON; "" an output event whose bytes the result holds */
    /* an output event: where its bytes sit in its stream (offset, length);
     * -1 for other events */
    int64_t out_at, out_len;
} al_store_event;
/* Append an event of run RUN_ID with the next number. */
int al_store_event_append(al_store *s, const char *run_id, const char *type, const char *data, al_error *err);
/* The same for an output event ("stdout", "stderr") whose LEN bytes sit at
 * AT in its stream. */
int al_store_output_event_append(al_store *s, const char *run_id, const char *type, const char *data, int64_t at,
                                 int64_t len, al_error *err);
/* Drop the data of RUN_ID's output events of TYPE (their bytes are the
 * run's result's: read back from there); their numbers and places stay. */
int al_store_events_drop_output(al_store *s, const char *run_id, const char *type, al_error *err);
/* Append N events of RUN_ID (TYPES[i], DATAS[i]) with the next numbers, in
 * order: one statement for up to eight. */
int al_store_events_append(al_store *s, const char *run_id, size_t n, const char *const *types, const char *const *datas,
                           al_error *err);
/* Up to LIMIT events of RUN_ID after AFTER, in order, in *RET
 * (al_store_events_free). */
int al_store_events_after(al_store *s, const char *run_id, int64_t after, int64_t limit, al_store_event **ret,
                          size_t *ret_n, al_error *err);
void al_store_events_free(al_store_event *ev, size_t n);
/* 1 when RUN_ID's result event is numbered UPTO or less, 0 when not. */
int al_store_event_result_by(al_store *s, const char *run_id, int64_t upto, al_error *err);

/* ---- retention: a run's output and events go, its summary stays */
/* Claim sweep NAME for NODE_ID if it is due at NOW, moving it to NEXT_AT:
 * 1 claimed (this node sweeps), 0 not due or another node claimed it. */
int al_store_sweep_claim(al_store *s, const char *name, const char *node_id, const char *now, const char *next_at,
                         al_error *err);
/* The ids of up to MAX workspaces after AFTER ("" from the first), in order: how many. */
int al_store_workspace_ids(al_store *s, const char *after, char (*ret_ids)[40], int max, al_error *err);
/* Up to MAX ended runs of WS_ID that finished before BEFORE and still hold
 * their output, oldest first: how many. */
int al_store_runs_expirable(al_store *s, const char *ws_id, const char *before, char (*ret_ids)[40], int max,
                            al_error *err);
/* Drop run ID's code, inputs, result, previews, skips and events, and its
 * bytes from its organisation's count; its row says EXPIRED_AT = NOW. 1
 * done, 0 it was expired already. */
int al_store_run_expire(al_store *s, const char *id, const char *now, al_error *err);

/* ---- analytics: one row a run that ended */
typedef struct al_store_analytics {
    char run_id[40], org_id[40], workspace_id[40];
    char language[16];
    al_run_state state;
    int64_t exit_code;            /* -1: none */
    int64_t duration_ms;
    char created_at[40];
} al_store_analytics;
/* Record A (a run's row again replaces it). */
int al_store_analytics_put(al_store *s, const al_store_analytics *a, al_error *err);
