/*
 * Approval requests (store/approvals.c): the card a run waits behind, the
 * hash it binds, and the one decision that closes it.
 */
#pragma once

#include "store.h"

/* A request's decision; AL_DECISION_NONE while it is open. */
typedef enum al_approval_decision {
    AL_DECISION_NONE,
    AL_DECISION_APPROVED,
    AL_DECISION_DENIED,
    AL_DECISION_EXPIRED,
    AL_DECISION_CANCELED,
    _AL_DECISION_MAX,
    _AL_DECISION_INVALID = -1,
} al_approval_decision;

/* The stored name ("approved", ...); NULL for AL_DECISION_NONE. */
const char *al_approval_decision_name(al_approval_decision d);
/* _AL_DECISION_INVALID for a name that is none; NULL is AL_DECISION_NONE. */
al_approval_decision al_approval_decision_from_name(const char *name);

/* An approval_requests row. Times are the store's RFC 3339 text;
 * decided_by and decided_at are "" while open (and decided_by stays "" for
 * an expiry, which no one decides). */
typedef struct al_store_approval {
    char id[40], run_id[40], org_id[40], workspace_id[40];
    char hash[65];
    char *card;                   /* JSON text: what the approver is shown */
    char requested_at[40], expires_at[40];
    al_approval_decision decision;
    char decided_by[40], decided_at[40];
    char *reason;                 /* NULL while open */
} al_store_approval;

/* A record's owned parts (card, reason) of one the store returned. */
void al_store_approval_done(al_store_approval *a);

/* Record A's request (open: its decision fields are not read). */
int al_store_approval_insert(al_store *s, const al_store_approval *a, al_error *err);
/* Run RUN_ID's request in *RET (al_store_approval_done); -ENOENT none. */
int al_store_approval_get(al_store *s, const char *run_id, al_store_approval *ret, al_error *err);
/* Close RUN_ID's open request with DECISION by BY (NULL: no one) at NOW,
 * with REASON; with NOT_AFTER, only if it expires after that. 1 closed, 0
 * it was not open (or had expired). */
int al_store_approval_decide(al_store *s, const char *run_id, al_approval_decision decision, const char *by,
                             const char *now, const char *reason, const char *not_after, al_error *err);
