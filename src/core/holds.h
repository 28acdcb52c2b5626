/* What one person holds of the daemon at once (holds.c). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

/* Long-held requests of one person: event-stream followers and requests
 * waiting for a run's end. al_service_hold takes one (false: the person
 * holds their maximum of KIND already); al_service_unhold gives it back. */
typedef enum { AL_HOLD_FOLLOW, AL_HOLD_WAIT, AL_HOLD_ACTIVITY, AL_HOLD_AUDIT, _AL_HOLD_MAX } al_hold;
/* A person's workspace activity streams at once (GET /v1/events): a page
 * open in a few tabs, not one per run */
#define AL_ACTIVITY_STREAMS_PER_PERSON 8
/* A person's audit verifications and exports at once (GET /v1/audit/verify,
 * ?format=ndjson): each reads up to 200,000 events (and an export holds a
 * connection and a thread while its client reads), so that one member
 * cannot set the node to re-hash the chain or hold its threads many times
 * over; the console runs one of each */
#define AL_AUDIT_READS_PER_PERSON 2
bool al_service_hold(al_service *s, const char *person_id, al_hold kind);
void al_service_unhold(al_service *s, const char *person_id, al_hold kind);
/* The same for the bytes of request bodies being received (N more). */
bool al_service_hold_bytes(al_service *s, const char *person_id, uint64_t n);
void al_service_unhold_bytes(al_service *s, const char *person_id, uint64_t n);
