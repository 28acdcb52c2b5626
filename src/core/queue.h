/* The run queue (queue.c): its admission and bounds, what queued runs hold of
 * an organisation's credits and disk, and the cancel of a run wherever it is. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

/* Queue a run. SHARE: hold it to the person's and organisation's share of
 * the queue (a new run; not one an approver let through, nor one queued
 * before a restart). -EAGAIN the queue is full, -EDQUOT the person's share
 * is, -EUSERS the organisation's, -EIO the store failed; ERR (may be NULL)
 * says which. */
int al_service_enqueue(al_service *s, const char *run_id, const char *person_id, const char *org_id, int cap, bool share,
                       al_error *err);
/* Whether a new run of PERSON_ID in ORG_ID would find room (as above, and
 * counting PENDING runs of the person that wait for an approval). */
int al_service_queue_room(al_service *s, const char *person_id, const char *org_id, int pending, al_error *err);
/* 1 when it was queued or running and is now being canceled; 0 if ended.
 * A run active on another node is asked there. */
int al_service_cancel(al_service *s, const char *run_id);
/* The cap a run of a workspace whose concurrency is WORKSPACE_CAP runs under. */
int al_service_queue_cap(al_service *s, int workspace_cap);
int al_service_person_queued(al_service *s, const char *person_id);
/* The credits of ORG_ID that its queued runs (charged when they start, which
 * is soon) do not hold already; what they hold in *RET_RESERVED. A run that
 * waits for an approval holds none: it may wait for days, or be denied. */
int64_t al_credits_unreserved(al_service *s, const char *org_id, int64_t *ret_reserved);
/* What al_artifacts_org_usage and al_runs_pending_input_bytes answer when
 * the store cannot say: more than any quota (fail closed), and small
 * enough that adding three of them cannot overflow. */
#define AL_USAGE_UNKNOWN (INT64_MAX / 4)
/* Bytes the inputs of ORG_ID's runs that have not ended hold on disk. */
int64_t al_runs_pending_input_bytes(al_service *s, const char *org_id);
