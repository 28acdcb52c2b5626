/* The Idempotency-Key of a creating POST (idempotency.c; docs/api.md). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/store.h"

typedef struct al_service al_service;

#define AL_IDEM_KEY_MAX 255
#define AL_IDEM_TTL_S (24 * 3600)     /* how long a key is kept: at least a day */
typedef struct al_idem {
    char key[AL_IDEM_KEY_MAX + 1];    /* "": the request had none */
    char hash[65];                    /* sha256 of the request's route and canonical body */
    bool replayed;                    /* out: answered with what an earlier request created */
} al_idem;
/* Bind KEY (a header's value; NULL: none) to the request SCOPE ("POST
 * /v1/runs") with the bytes BODY. 0 no key, 1 a key, -EINVAL a bad key. */
int al_idem_init(al_idem *ret, const char *key, const char *scope, const void *body, size_t len, al_error *err);
/* The same, over the canonical JSON (sorted keys, compact) of BODY. */
int al_idem_init_json(al_idem *ret, const char *key, const char *scope, json_t *body, al_error *err);
/* What K of P created: 1 and RET_ID when K was used for this same request
 * (KIND "run" or "skill"), 0 never (or expired), -EEXIST for another request. */
int al_idem_lookup(al_store *st, const al_principal *p, const al_idem *k, const char *kind, char ret_id[40],
                   al_error *err);
/* In the caller's transaction, with what it creates: K of P made RESOURCE_ID.
 * -EEXIST: the key is taken (a concurrent request got there first). */
int al_idem_record(al_store *st, const al_principal *p, const al_idem *k, const char *kind, const char *resource_id,
                   al_error *err);
/* Forget K of P again, if it still names RESOURCE_ID (what it made was
 * undone before anything ran: a retry is a new attempt). */
int al_idem_forget(al_store *st, const al_principal *p, const al_idem *k, const char *resource_id, al_error *err);
/* Forget the keys past their time; how many, or -errno. */
int al_idem_sweep(al_store *st, al_error *err);
