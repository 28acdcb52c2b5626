/*
 * Tenants as the service and `airlock admin` read them (store/tenants.c):
 * a workspace's operator-set maxima, and the listings of organisations,
 * workspaces, people and keys. They are created, and keys checked, in the
 * backend itself (store.h).
 */
#pragma once

#include "store.h"

/* A workspaces row without its name. A maximum that is not a whole number
 * in the store reads as 0, which every caller refuses as a bound. */
typedef struct al_store_workspace {
    char id[40], org_id[40];
    int64_t max_timeout_s, max_memory_mb, max_cpus_milli, max_pids;
    bool has_price;               /* false: the service's default price */
    int64_t price_per_run;        /* the operator's (airlock admin price set) */
    char created_at[40];
} al_store_workspace;

/* Workspace ID in *RET; -ENOENT when there is none. */
int al_store_workspace_get(al_store *s, const char *id, al_store_workspace *ret, al_error *err);

typedef enum al_tenant_kind {
    AL_TENANT_ORG,
    AL_TENANT_WORKSPACE,
    AL_TENANT_PERSON,
    AL_TENANT_KEY,
    _AL_TENANT_KIND_MAX,
} al_tenant_kind;

/* One entry of a listing. */
typedef struct al_store_tenant {
    char id[40];
    char parent_id[40];           /* a workspace's org, a person's workspace, a key's person; "" for an org */
    const char *name;             /* NULL for a key; valid during the callback only */
    char key_prefix[16];          /* a key's first characters, to recognise it by */
    char created_at[40];
    char revoked_at[40];          /* a key's, "" while it is valid */
} al_store_tenant;

/* Call EACH with every tenant of KIND, the oldest first; stops at and
 * returns its first negative answer. */
int al_store_tenants_each(al_store *s, al_tenant_kind kind, int (*each)(const al_store_tenant *t, void *userdata),
                          void *userdata, al_error *err);
/* How many API keys exist, revoked or not. */
int al_store_keys_count(al_store *s, int64_t *ret, al_error *err);
/* The oldest person named NAME / the oldest workspace: 1 with its id in
 * RET_ID (40 bytes), 0 when there is none. */
int al_store_person_named(al_store *s, const char *name, char *ret_id, al_error *err);
int al_store_first_workspace(al_store *s, char *ret_id, al_error *err);

/* A person as a workspace's list shows them (GET /v1/persons). */
typedef struct al_store_person {
    char id[40];
    char *name;                   /* owned */
    char role[16];
} al_store_person;
/* WS_ID's people in the order they were made, at most LIMIT, in *RET
 * (al_store_people_free). */
int al_store_people_list(al_store *s, const char *ws_id, int64_t limit, al_store_person **ret, size_t *ret_n,
                         al_error *err);
void al_store_people_free(al_store_person *p, size_t n);
