/* Deciding approvals (approvals.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"
#include "../store/approvals.h"
#include "../store/runs.h"

typedef struct al_service al_service;

/* An approver's decision; -EEXIST decided already (or expired,
 * withdrawn), -ESTALE hash differs, -EPERM the requester deciding their own */
int al_service_decide(al_service *s, const al_store_run *run, const char *person_id, bool approve, const char *hash,
                      const char *reason, al_error *err);
void al_service_expire_approvals(al_service *s);
/* Close run ID's open approval with DECISION and move the run out of
 * pending_approval (to queued, or ended in TO) in one transaction;
 * 1 won, 0 something else decided first. */
int al_service_close_approval(al_service *s, const char *id, al_approval_decision decision, const char *by,
                              const char *reason, const char *not_after, al_run_state to, const char *ecode,
                              const char *emsg, al_error *err);
/* A pending run withdrawn by PERSON_ID: 1 canceled, 0 it was decided first. */
int al_service_withdraw(al_service *s, const char *id, const char *person_id, al_error *err);
