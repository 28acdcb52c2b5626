/* The audit trail: one hash chain per workspace. Each event's hash covers
 * its own fields and its predecessor's hash, so changing, removing or
 * reordering any event breaks every link after it. */
#pragma once

#include <jansson.h>

#include "../store/store.h"

/* Append an event (steals DATA); PERSON_ID and RUN_ID may be NULL. */
int al_audit_append(al_store *s, const char *org_id, const char *ws_id, const char *kind, const char *person_id,
                    const char *run_id, json_t *data, al_error *err);
/* Check every chain. 0: all intact; 1: broken, with RET_REPORT naming the
 * first broken link of each broken workspace; -errno on failure. */
int al_audit_verify(al_store *s, json_t **ret_report, al_error *err);
