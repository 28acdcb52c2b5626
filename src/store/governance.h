/*
 * A workspace's settings and price, and an organisation's credits: its
 * balance and the ledger that explains it (store/governance.c). The
 * settings are JSON documents the service parses; the store keeps them as
 * text.
 */
#pragma once

#include "store.h"

/* ---- settings */

/* What a workspace's settings are made of: the operator's price beside
 * the workspace_settings row its admins wrote. */
typedef struct al_store_settings {
    bool has_price;               /* false: the service's default price */
    int64_t price_per_run;
    bool has_row;                 /* the workspace's admins have written settings */
    char *settings;               /* JSON text (NULL: the row holds no text) */
    char *secrets;                /* JSON text: write-only, values never shown */
} al_store_settings;

void al_store_settings_done(al_store_settings *st);
/* WS_ID's settings in *RET (al_store_settings_done): 0, -ENOENT when there
 * is no such workspace (*RET then holds nothing). */
int al_store_settings_get(al_store *s, const char *ws_id, al_store_settings *ret, al_error *err);
/* Write WS_ID's settings and secrets (JSON text) at NOW, over what it had. */
int al_store_settings_put(al_store *s, const char *ws_id, const char *settings, const char *secrets, const char *now,
                          al_error *err);

/* ---- prices: the operator's, out of the settings a workspace writes */

/* WS_ID's price per run becomes PRICE; -ENOENT no such workspace. */
int al_store_price_set(al_store *s, const char *ws_id, int64_t price, al_error *err);

/* ---- credits */

/* ORG_ID's balance; -ENOENT no such organisation. */
int al_store_credit_balance(al_store *s, const char *org_id, int64_t *ret, al_error *err);

typedef enum al_ledger_kind {
    AL_LEDGER_GRANT,              /* an operator's grant (or take-back) */
    AL_LEDGER_CHARGE,             /* a run's price, when it is provisioned */
    AL_LEDGER_REFUND,             /* a charge given back: airlock's own failure */
    _AL_LEDGER_KIND_MAX,
    _AL_LEDGER_KIND_INVALID = -1,
} al_ledger_kind;

const char *al_ledger_kind_name(al_ledger_kind k);

/* A ledger row; workspace_id and run_id are "" for NULL (a grant is the
 * organisation's, and no run's). */
typedef struct al_store_ledger_entry {
    int64_t seq;                  /* the order of writing */
    char id[40], org_id[40], workspace_id[40], run_id[40];
    al_ledger_kind kind;
    int64_t amount;               /* signed: a charge is negative */
    int64_t balance_after;
    char created_at[40];
} al_store_ledger_entry;

/* Which of an organisation's entries: NULL is any. */
typedef struct al_store_ledger_filter {
    const char *org_id;
    /* the entries of this workspace's runs and the organisation's grants
     * (which explain its balance), never another workspace's runs */
    const char *workspace_id;
    const char *from, *to;        /* created in [FROM, TO) */
    int64_t limit;
} al_store_ledger_filter;
/* The entries F names, the last written first, in *RET (free()). */
int al_store_ledger_list(al_store *s, const al_store_ledger_filter *f, al_store_ledger_entry **ret, size_t *ret_n,
                         al_error *err);
