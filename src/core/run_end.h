/* The end of a run, one function for every terminal path: a runner's end
 * of the box's run, a queued run canceled or refused, a pending run denied,
 * expired or withdrawn, a run lost with its node, a run whose record could
 * not be completed. Each path writes the run's terminal state its own way
 * (a conditional move, the runner's finish, an approval's transaction);
 * what follows the write is the same for all and is here, so that no path
 * skips a step. al_run_ended and al_run_end_from are the core's own; the
 * three above them its callers' too. */
#pragma once

#include <jansson.h>

#include "../store/runs.h"

typedef struct al_service al_service;

/* Run ID, active on a node that is gone, ends in error (lost) and is
 * refunded, once however many nodes try. */
void al_service_lose_run(al_service *s, const char *id, const char *why);
/* A run recorded as queued that did not get into the queue: it ends as an
 * error CODE (queue_full, store; WHY says why), never as canceled, which
 * only its requester does, and its inputs are removed. */
void al_service_end_unqueued(al_service *s, const char *run_id, const char *code, const char *why);
/* Remove the inputs of a run that will not reach a box (canceled, denied,
 * expired): they are on disk only for a box to stage. */
void al_service_drop_inputs(al_service *s, const char *run_id);

/* How run RUN_ID ended, and what its transition said already. */
typedef struct al_run_end {
    al_run_state state;
    const char *error_code;       /* NULL: none */
    json_t *result;               /* the box's result (borrowed); NULL: it never reached one */
    json_t *published;            /* the artifacts it published (borrowed), or NULL */
    bool state_said;              /* its state event went with the transition (an approval's close) */
    bool charged;                 /* it was charged: an end in error (airlock's own failure) refunds it */
    bool audit_lost;              /* its tool.call, unless its runner recorded one before it was lost */
    bool freed_slot;              /* it held a slot no runner is left to free (lost): the schedulers are told */
} al_run_end;

/* Every step that follows a run's terminal write, in order: the refund
 * (HOW->charged and an error), the events (its artifacts, its state unless
 * said, its result), the run.end log line, the tool.call audit of a lost
 * run, its inputs removed, the skill bundles its end releases, and the
 * schedulers told of a freed slot. RUN is the run as read (NULL when it
 * cannot be: the events, inputs and bundles are still done). */
void al_run_ended(al_service *s, const char *run_id, const al_store_run *run, const al_run_end *how);
/* The same for a run ended by a conditional move (al_store_run_end) from
 * one of FROM (AL_RUN_BIT) to STATE with CODE and WHY: read again for its
 * log line. 1 this call ended it, 0 it had moved on, -errno. */
int al_run_end_from(al_service *s, const char *run_id, unsigned from, al_run_state state, const char *code,
                    const char *why, const al_run_end *how);
