/*
 * The reads the API makes, as typed records from the core: the API calls
 * these and never the store, never takes the service's lock and never
 * reads the service's fields (docs/architecture.md). Each answers what one
 * surface renders; the rendering (JSON, Prometheus text) is the API's.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "audit.h"
#include "service.h"
#include "../store/audit.h"
#include "../store/governance.h"
#include "../store/runs.h"
#include "../store/tenants.h"

/* ------------------------------------------------------------------ service */

/* The configuration the service runs with (read-only once it is open). */
const al_service_config *al_view_config(const al_service *s);
/* Whether the service is stopping (a follower stops with it). */
bool al_view_stopping(al_service *s);
/* Who KEY is: 1 and *RET, 0 no such key, <0 the store failed. */
int al_view_authenticate(al_service *s, const char *key, al_principal *ret, al_error *err);

/* The driver's own facts: its name, what it enforces (a new reference)
 * when BADGES, and what it keeps made ahead of need (NULL: nothing). */
typedef struct al_view_driver {
    const char *name;
    json_t *badges, *pool;
} al_view_driver;
void al_view_driver_get(al_service *s, bool badges, al_view_driver *ret);
void al_view_driver_done(al_view_driver *d);

/* ------------------------------------------------------------------- runs */

/* The store's run records as the core hands them on (the API reads their
 * fields, never the store): the run's own document is al_run_json's. */
typedef al_store_run al_view_run;             /* one run, its documents too */
typedef al_store_run_brief al_view_run_brief; /* a listing's entry */

/* Run ID of P's workspace (NULL: none), al_view_run_free. */
al_view_run *al_view_run_load(al_service *s, const al_principal *p, const char *id);
void al_view_run_free(al_view_run *r);
/* P's workspace's runs newest first: of STATE (_AL_RUN_STATE_INVALID:
 * any) and THREAD (NULL: any), numbered below BEFORE, at most LIMIT. */
int al_view_runs_page(al_service *s, const al_principal *p, al_run_state state, const char *thread, int64_t before,
                      int64_t limit, al_view_run_brief **ret, size_t *ret_n, al_error *err);
void al_view_run_briefs_free(al_view_run_brief *b, size_t n);
/* The same with every filter GET /v1/runs takes: of PERSON_ID, asked
 * through VIA (one of al_run_via_valid's names) and by API key KEY_ID too,
 * each NULL for any. */
typedef struct al_view_run_query {
    al_run_state state;
    const char *thread_id, *person_id, *via, *key_id;
    int64_t before, limit;
} al_view_run_query;
int al_view_runs_find(al_service *s, const al_principal *p, const al_view_run_query *q, al_view_run_brief **ret,
                      size_t *ret_n, al_error *err);
/* Whether VIA names an interface a run can come through (rest, mcp,
 * piston, e2b). */
bool al_run_via_valid(const char *via);

/* ---------------------------------------------------- people and threads */

typedef al_store_person al_view_person;
typedef al_store_thread al_view_thread;
/* The most people a workspace lists at once (GET /v1/persons). */
#define AL_VIEW_PERSONS_MAX 1000
/* P's workspace's people, in the order they were made. */
int al_view_persons(al_service *s, const al_principal *p, al_view_person **ret, size_t *ret_n, al_error *err);
void al_view_persons_free(al_view_person *v, size_t n);
/* P's workspace's threads, the one with the newest run first, below
 * BEFORE (a cursor; INT64_MAX from the start), at most LIMIT (free()),
 * found among the AL_VIEW_THREADS_SCAN runs below BEFORE: a page costs
 * that much whatever the workspace's history (a page of a workspace of
 * 100,000 runs grouped them all: 320 ms). *RET_MORE: the cursor to read on
 * from when the window ended before LIMIT threads were found, else 0. */
#define AL_VIEW_THREADS_SCAN 10000
int al_view_threads(al_service *s, const al_principal *p, int64_t before, int64_t limit, al_view_thread **ret,
                    size_t *ret_n, int64_t *ret_more, al_error *err);

/* -------------------------------------------------------------- artifacts */

/* Artifact ID of WS_ID as its document (NULL: none). */
json_t *al_view_artifact(al_service *s, const char *ws_id, const char *id);
/* The artifacts of THREAD (RUN: of that run only, NULL any; ALL: every
 * version, else the newest of each path), at most MAX (0: the store's
 * cap), as documents. NULL and ERR on failure. */
json_t *al_view_thread_artifacts(al_service *s, const char *ws_id, const char *thread, const char *run, bool all,
                                 size_t max, al_error *err);
/* The newest LIMIT artifacts of WS_ID, as documents. */
json_t *al_view_artifacts_recent(al_service *s, const char *ws_id, size_t limit, al_error *err);

/* ---------------------------------------------------------------- usage */

typedef al_store_ledger_entry al_view_ledger_entry;
typedef al_store_count al_view_count;

/* One day of a workspace's runs (UTC). */
#define AL_USAGE_DAYS 30
#define AL_USAGE_DAY_LANGUAGES 16 /* languages told apart a day; the rest are counted as "other" */
typedef enum al_run_via { AL_VIA_REST, AL_VIA_MCP, AL_VIA_PISTON, AL_VIA_E2B, _AL_VIA_MAX } al_run_via;
const char *al_run_via_name(al_run_via v);
typedef struct al_view_usage_day {
    char date[12];                /* YYYY-MM-DD */
    int64_t runs;
    int64_t by_state[_AL_RUN_STATE_MAX];
    al_view_count by_language[AL_USAGE_DAY_LANGUAGES + 1];
    size_t nlanguage;
    int64_t by_via[_AL_VIA_MAX];
    int64_t credits;
} al_view_usage_day;

typedef struct al_view_usage {
    int64_t balance;
    al_view_usage_day days[AL_USAGE_DAYS]; /* the oldest first, today last */
    al_view_ledger_entry *ledger; /* the last written first */
    size_t nledger;
    int64_t by_state[_AL_RUN_STATE_MAX];
    al_view_count *by_language;
    size_t nlanguage;
} al_view_usage;

/* P's workspace's runs and ledger in [FROM, TO) (either NULL: unbounded),
 * at most LIMIT ledger entries, and its organisation's balance. */
int al_view_usage_get(al_service *s, const al_principal *p, const char *from, const char *to, int64_t limit,
                      al_view_usage *ret, al_error *err);
void al_view_usage_done(al_view_usage *u);

/* ------------------------------------------------------------------ audit */

typedef al_store_audit_event al_view_audit_event;
typedef al_store_audit_events al_view_audit_events;

typedef struct al_view_audit_filter {
    const char *kind, *person_id, *run_id, *from, *to; /* NULL: any */
    int64_t before_seq, limit;
} al_view_audit_filter;
int al_view_audit_list(al_service *s, const al_principal *p, const al_view_audit_filter *f, al_view_audit_events *ret,
                       al_error *err);
void al_view_audit_done(al_view_audit_events *l);
/* P's workspace's chain checked (al_audit_verify_chain, at most MAX
 * events) against the head this service signed last (*RET_SIGNED, in
 * *RET_LAST; false: none signed yet). */
int al_view_audit_verify(al_service *s, const al_principal *p, int64_t max, al_audit_check *ret, bool *ret_signed,
                         al_audit_head *ret_last, al_error *err);

/* -------------------------------------------------------------- settings */

/* WS_ID's effective settings with what this service enforces (badges,
 * service limits, each network mode's level on this driver). */
json_t *al_view_settings(al_service *s, const char *ws_id, al_error *err);

/* --------------------------------------------------------------- figures */

typedef struct al_view_figures {
    const char *store_backend;
    al_store_stats store;
    int queued, boxes_alive;
    uint64_t runs_started, runs_finished;
    uint64_t layers_removed;
    uint64_t duration_buckets[12];
    double duration_sum;
} al_view_figures;
/* The service's counters, as /metrics shows them. */
void al_view_figures_get(al_service *s, al_view_figures *ret);
/* Every run by state (for /metrics). */
int al_view_runs_by_state(al_service *s, int64_t ret[_AL_RUN_STATE_MAX], al_error *err);

/* ----------------------------------------------------------------- folders */

/* P's workspace's connected folders (core/folders.h): {folders: [{name,
 * glob, created_at}, ...]}, each with its host path too when WITH_PATH
 * (an admin asks). NULL with ERR on a store error. */
json_t *al_view_folders(al_service *s, const al_principal *p, bool with_path, al_error *err);
/* A directory's entries of folder NAME of P's workspace (al_folder_entries):
 * NULL with ERR (ERR->err ENOENT: no such folder or directory; EINVAL: a
 * path that breaks a rule, a link, a mount point; else the cause). */
json_t *al_view_folder_entries(al_service *s, const al_principal *p, const char *name, const char *sub,
                               al_error *err);
