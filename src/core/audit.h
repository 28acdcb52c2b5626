/* The audit trail: one hash chain per workspace. Each event's hash covers
 * its own fields and its predecessor's hash, so changing, removing or
 * reordering any event breaks every link after it. */
#pragma once

#include <jansson.h>

#include "../store/store.h"

/* Append an event (steals DATA); PERSON_ID and RUN_ID may be NULL. */
int al_audit_append(al_store *s, const char *org_id, const char *ws_id, const char *kind, const char *person_id,
                    const char *run_id, json_t *data, al_error *err);
/* A chain's head: its newest event's seq and hash. Written and read as
 * WORKSPACE:SEQ:HASH, the form `airlock admin audit verify` prints. */
#define AL_AUDIT_WS_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-" /* of a workspace id */
typedef struct al_audit_head {
    char workspace_id[40];
    int64_t seq;
    char hash[65];
} al_audit_head;
int al_audit_head_parse(const char *text, al_audit_head *ret, al_error *err);

/* Check every chain, and that each of the N_EXPECT heads EXPECT (printed
 * or signed earlier) is still in its chain, with the same hash: a chain
 * that was cut back, or rewritten from some event on, is shorter or
 * differs there, though its links may all hold. 0: all intact; 1: broken
 * or not holding an expected head, RET_REPORT (one entry per workspace,
 * with its head) saying where and why; -errno on failure. */
int al_audit_verify(al_store *s, const al_audit_head *expect, size_t n_expect, json_t **ret_report, al_error *err);

/* One workspace's chain checked (GET /v1/audit/verify), at most MAX
 * events of it (a page at a time, never the whole chain in memory), and
 * that it holds EXPECT (a head signed earlier; NULL: none). */
typedef struct al_audit_check {
    int64_t events;               /* events read */
    bool intact;                  /* every link read holds, and EXPECT is in the chain */
    bool complete;                /* the whole chain was read (not cut at MAX) */
    int64_t first_bad_seq;        /* when not intact: the first event that breaks it */
    char why[300];
    al_audit_head head;           /* the last event verified */
} al_audit_check;
int al_audit_verify_chain(al_store *s, const char *ws_id, const al_audit_head *expect, int64_t max,
                          al_audit_check *ret, al_error *err);
