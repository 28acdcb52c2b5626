/*
 * A workspace's settings as rules (settings.c): pure, no store, no HTTP.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "../proxy/policy.h"
#include "../util/util.h"

/* What bounds a workspace's settings: the service's own configuration and
 * the operator's maxima and price for the workspace. */
typedef struct al_settings_bounds {
    const char *driver;           /* the service's driver (native, disabled) */
    int max_timeout_s;            /* the service's ceiling */
    int per_person;               /* the service's boxes at once, one person */
    double max_memory_mb, max_cpus; /* the workspace's maxima */
    bool has_price;               /* the operator set a price (else the default) */
    json_int_t price;
} al_settings_bounds;

/* Credits a run costs where the operator set no price (airlock admin price) */
#define AL_PRICE_PER_RUN_DEFAULT 2
/* run_retention_s: how long an ended run keeps its code, output and events */
#define AL_RUN_RETENTION_DEFAULT_S (30 * 86400)
#define AL_RUN_RETENTION_MAX_S (3650 * 86400)

/* The settings of a workspace that set nothing. */
json_t *al_settings_defaults(const al_settings_bounds *b);
/* Whether every setting the service acts on has the shape a PUT checks. */
bool al_settings_sane(json_t *eff);
/* Whether ALLOWED (a settings network_allowed list) holds MODE. */
bool al_network_mode_allowed(json_t *allowed, al_net_mode mode);
/* Whether the parsed policy NP is within the workspace SETTINGS: its mode
 * in network_allowed (hosts+packages needs packages as well) and, in hosts
 * mode, every host in network_hosts (a request narrows, never widens).
 * 0, or -EPERM with ERR naming the setting. */
int al_settings_network_check(json_t *settings, const al_net_policy *np, al_error *err);
/* What of BODY, a PUT /v1/settings, needs nothing but BODY: an object,
 * and its network_hosts (made canonical in place). Callers make it before
 * they read the store, so such a fault is a 400 whatever the store holds;
 * al_settings_apply makes it again (it is idempotent). */
int al_settings_body_check(json_t *body, al_error *err);
/*
 * Apply BODY, a PUT /v1/settings, over CUR (what the workspace set) and SEC
 * (its secrets), in place. 0 when every key is valid and the result holds
 * together (the default network still one a run could ask for); else a
 * negative errno with ERR, and CUR and SEC may be half changed: the caller
 * writes them only on 0. BODY's network_hosts is made canonical in place.
 */
int al_settings_apply(const al_settings_bounds *b, json_t *cur, json_t *sec, json_t *body, al_error *err);
