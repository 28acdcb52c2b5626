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
    /* the service's package_installs (thread: true) and
     * package_install_scripts (box: true): the workspaces' defaults; a
     * workspace may set scripts to refuse, and box only where the service's is */
    bool package_installs, package_scripts;
} al_settings_bounds;

/* Credits a run costs where the operator set no price (airlock admin price) */
#define AL_PRICE_PER_RUN_DEFAULT 2
/* run_retention_s: how long an ended run keeps its code, output and events */
#define AL_RUN_RETENTION_DEFAULT_S (30 * 86400)
#define AL_RUN_RETENTION_MAX_S (3650 * 86400)
/* sandbox_max_timeout_s: the longest an E2B sandbox may live (create's,
 * setTimeout's and connect's timeout), up to a day (E2B Pro's) */
#define AL_SANDBOX_TIMEOUT_DEFAULT_MAX_S 3600
#define AL_SANDBOX_TIMEOUT_CEILING_S 86400

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

/* ------------------------------------------------------------- typed */

/* When a run waits for an approver (settings approval_policy). */
typedef enum al_approval_policy {
    AL_APPROVAL_NEVER,
    AL_APPROVAL_ALWAYS,
    AL_APPROVAL_HIGH_RISK,        /* runs that reach the network beyond the package registries */
    _AL_APPROVAL_POLICY_MAX,
    _AL_APPROVAL_POLICY_INVALID = -1,
} al_approval_policy;
const char *al_approval_policy_name(al_approval_policy p);
al_approval_policy al_approval_policy_from_name(const char *name);

/* The tools a workspace's allow-list (settings tools) may hold. */
typedef enum al_tool {
    AL_TOOL_CODE_EXECUTION,
    AL_TOOL_RUN_SKILL_SCRIPT,
    _AL_TOOL_MAX,
    _AL_TOOL_INVALID = -1,
} al_tool;
#define AL_TOOL_BIT(t) (1u << (unsigned)(t))
const char *al_tool_name(al_tool t);
al_tool al_tool_from_name(const char *name);

/* A workspace's effective settings as the core acts on them, parsed once
 * from their document (what al_settings_sane accepts); the document is
 * the API's, and the checkers of its lists (network_allowed,
 * network_hosts: al_settings_network_check; dlp_patterns: al_dlp_new)
 * read them from DOC. */
typedef struct al_settings {
    bool disabled;                /* driver "disabled": no run is made or started */
    const char *network;          /* the default policy of runs that name none (DOC's) */
    double timeout_s, max_timeout_s, memory_mb, cpus;
    int concurrency;              /* boxes at once, one person */
    al_approval_policy approval_policy;
    bool allow_self_approval;
    int64_t approval_ttl_s;
    int64_t run_retention_s;      /* 0 when it is not a whole number: nothing swept */
    int64_t sandbox_max_timeout_s; /* an E2B sandbox's longest timeout */
    int64_t price_per_run;
    unsigned tools;               /* AL_TOOL_BIT of each tool on the allow-list */
    bool package_installs;        /* package_installs thread (else off) */
    bool package_scripts;         /* package_install_scripts box (else refuse) */
    json_t *doc;                  /* the document, held */
} al_settings;

/* EFF (a sane effective document) as RET, which takes a reference of it:
 * 0, or -EBADMSG with ERR for one that is not sane. */
int al_settings_parse(json_t *eff, al_settings *ret, al_error *err);
void al_settings_done(al_settings *st);
/* Whether ST's allow-list holds TOOL (its name; unknown names are not on it). */
bool al_settings_tool_allowed(const al_settings *st, const char *tool);
