/*
 * The audit trail's rows (store/audit.c): one hash chain per workspace,
 * numbered from 1. The store numbers an event and links it to the chain's
 * head; what its hash covers is the service's (service/audit.c), which
 * seals each event as the store appends it.
 */
#pragma once

#include "store.h"

/* The prev_hash of a chain's first event. */
#define AL_AUDIT_GENESIS "0000000000000000000000000000000000000000000000000000000000000000"

/* An audit_events row. person_id and run_id are absent (NULL in the store)
 * unless has_person_id / has_run_id: the hash tells NULL from any text. */
typedef struct al_store_audit_event {
    char workspace_id[40];
    int64_t seq;
    char org_id[40];
    char kind[64];
    bool has_person_id, has_run_id;
    char person_id[40], run_id[40];
    char *data;                   /* JSON text, as written */
    char created_at[40];
    char prev_hash[65], hash[65];
} al_store_audit_event;

typedef struct al_store_audit_events {
    al_store_audit_event *v;
    size_t n;
} al_store_audit_events;

void al_store_audit_events_free(al_store_audit_events *l);

/* Fills EV->hash once the store has set EV's seq and prev_hash. */
typedef int (*al_store_audit_seal_fn)(al_store_audit_event *ev, void *userdata, al_error *err);

/* Append EV (every field but seq, prev_hash and hash) to the chain of
 * EV->workspace_id (in the caller's transaction if there is one): the
 * chain's head is read, EV is numbered after it and linked to its hash,
 * SEAL fills EV->hash (again, if another writer took the number first:
 * then the head is read again), and the row is written. Concurrent
 * writers, on any node, make one chain. */
int al_store_audit_append(al_store *s, al_store_audit_event *ev, al_store_audit_seal_fn seal, void *userdata,
                          al_error *err);

/* Call EACH with every workspace that has events, in order of its id; then
 * CHAIN with each event of a workspace's chain in order of seq. An event
 * whose row does not fit the record comes with MALFORMED set (its seq, and
 * whatever else could be read): a tampered row is reported, not skipped.
 * Stops at and returns a callback's first negative answer. */
typedef int (*al_store_audit_ws_fn)(const char *workspace_id, void *userdata);
int al_store_audit_workspaces(al_store *s, al_store_audit_ws_fn each, void *userdata, al_error *err);
typedef int (*al_store_audit_event_fn)(const al_store_audit_event *ev, bool malformed, void *userdata);
int al_store_audit_chain(al_store *s, const char *workspace_id, al_store_audit_event_fn each, void *userdata,
                         al_error *err);
/* The same for at most LIMIT events numbered after AFTER: how many were
 * read (fewer than LIMIT: the chain's end), or a negative answer. */
int al_store_audit_chain_page(al_store *s, const char *workspace_id, int64_t after, int64_t limit,
                              al_store_audit_event_fn each, void *userdata, al_error *err);

/* Which of a workspace's events a listing shows: NULL is any. */
typedef struct al_store_audit_filter {
    const char *workspace_id;
    const char *kind, *person_id, *run_id;
    const char *from, *to;        /* created in [FROM, TO) */
    int64_t before_seq;           /* seq < this */
    int64_t limit;
} al_store_audit_filter;
/* The events F names, newest first, in *RET (al_store_audit_events_free). */
int al_store_audit_list(al_store *s, const al_store_audit_filter *f, al_store_audit_events *ret, al_error *err);

/* The head (newest event) of each workspace's chain, or of WORKSPACE_ID's
 * alone when it is not NULL, in order of workspace: EACH with its seq and
 * hash (read, not verified). Stops at EACH's first negative answer. */
typedef int (*al_store_audit_head_fn)(const char *workspace_id, int64_t seq, const char *hash, void *userdata);
int al_store_audit_heads(al_store *s, const char *workspace_id, al_store_audit_head_fn each, void *userdata,
                         al_error *err);
/* The hash stored for event SEQ of WORKSPACE_ID's chain in RET_HASH;
 * -ENOENT when there is no such event. */
int al_store_audit_hash_at(al_store *s, const char *workspace_id, int64_t seq, char ret_hash[65], al_error *err);
