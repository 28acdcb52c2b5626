/* Runs as the API asks for them (runs.c, run_events.c, retention.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"
#include "../store/runs.h"
#include "idempotency.h"
#include "run_spec.h"
#include "status.h"

typedef struct al_service al_service;

/* How a run is asked for, besides what it is (its al_run_spec). */
typedef struct al_run_extra {
    const char *tool;             /* the allow-listed tool it is; NULL: "code_execution" */
    bool wait;                    /* answer when the run has ended */
    uint64_t wait_secs;           /* 0: the run's timeout + 30 s */
    const char *via;              /* the interface: "rest" (NULL), "piston", "mcp"; audited */
    al_idem *idem;                /* the request's Idempotency-Key, or NULL */
    /* > 0: the run's timeout when the spec asks for none, brought within
     * the workspace's bounds (not refused by them): a deadline the caller's
     * client holds anyway (E2B's timeoutMs; INFINITY: its longest) */
    double timeout_within_s;
} al_run_extra;

/* Create a run of SP (built by whichever interface asked: REST, Piston,
 * MCP, a skill) for P: the spec's check against the workspace's bounds,
 * the tool allow-list, image and network policy (SP is resolved in place),
 * approval, credits, queue and audit. Returns the status (CREATED, or OK
 * when X->wait and it has ended) and the document to answer (the run
 * object, or {"error": ...}); *RET_DOC is always set. X may be NULL. */
al_status al_run_create(al_service *s, const al_principal *p, al_run_spec *sp, const al_run_extra *x, json_t **ret_doc);
/* When X's Idempotency-Key was used by an earlier request of P: true, and
 * the status and document of the answer (the run it made, waited on with
 * X->wait; CONFLICT for another request). false: go on and create. */
bool al_run_replay(al_service *s, const al_principal *p, const al_run_extra *x, al_status *ret_status,
                   json_t **ret_doc);
/* Cancel run ID of P's workspace: withdrawn while it waits for approval,
 * taken off the queue, or killed. 1 done, 0 it had ended, -ENOENT no such run. */
int al_run_cancel(al_service *s, const al_principal *p, const char *id);
/* The runs past their workspace's run_retention_s lose their code, output
 * and events (retention.c), if this node claims the sweep that is due: how
 * many, or -errno. */
int al_retention_sweep(al_service *s);
/* This node's package layers collected (package_layer_retention_days,
 * package_layers_max_mb): how many were removed, or -errno. */
int al_layers_collect(al_service *s);
json_t *al_run_json(al_service *s, const al_store_run *run);
/* Up to LIMIT events of RUN_ID after AFTER, as its stream carried them
 * (run_events.c: an output event whose bytes the result holds, and the
 * result event, read back from the run), in *RET (al_store_events_free). */
int al_run_events_after(al_service *s, const char *run_id, int64_t after, int64_t limit, al_store_event **ret,
                        size_t *ret_n, al_error *err);
/* Whether RUN_ID's events will never come (the run expired under its
 * workspace's retention, or is not there): its followers end. */
bool al_run_events_gone(al_service *s, const char *run_id);
/* A run list's entry */
json_t *al_run_summary_json(const al_store_run_brief *b);
/* What a list shows of RESULT (the box's result) without loading it: its
 * small fields, kept beside it (al_store_run.result_summary); NULL when
 * RESULT is not an object. */
json_t *al_run_result_summary(json_t *result);
/* A state that does not change again (a thread id's syntax,
 * al_valid_thread_id, is in run_spec.h) */
bool al_run_state_terminal(const char *state);
/* The run ID of P's workspace (al_store_run_free), or NULL: other
 * workspaces' runs do not exist for P. */
al_store_run *al_run_load(al_service *s, const al_principal *p, const char *id);
/* Run ID of P as GET /v1/runs/{id} shows it, in *RET_DOC: OK and the run;
 * GONE (past its retention) and what was kept of it ({"error", "run": its
 * summary}); NOT_FOUND. */
al_status al_run_view(al_service *s, const al_principal *p, const char *id, json_t **ret_doc);
