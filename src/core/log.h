/* The service's log (log.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"
#include "../store/runs.h"

typedef struct al_service al_service;

/* A structured log line (JSON) on stderr, with its LEVEL; steals FIELDS.
 * info: what happened as it should (a start, a run's end, a client that
 * left); warn: something an operator may want to look at but that the
 * service has handled (a run ended in error, a limit reached); error: the
 * service could not do what it should (a write that failed, a node fenced). */
typedef enum { AL_LOG_INFO, AL_LOG_WARN, AL_LOG_ERROR, _AL_LOG_MAX } al_log_level;
void al_service_log(al_service *s, al_log_level level, const char *event, json_t *fields);
/* The run.end line of RUN, ended in STATE (ERR_CODE, NULL for none) with
 * the box's RESULT (NULL when it never reached one: denied, expired,
 * canceled or refused while it waited): who ran what where, and how it
 * ended, so an operator answers "whose run failed, in what, on which
 * driver" from this line alone. Every end of a run writes one. */
/* "service.start": where S listens, its state, driver, store and node
 * (said once its HTTP listens). */
void al_service_log_started(al_service *s);
void al_service_log_run_end(al_service *s, const al_store_run *run, al_run_state state, const char *err_code,
                            json_t *result);
