/*
 * The remote boxes: one run in a sandbox of a cloud service (E2B, Daytona)
 * over its HTTP API, with the same configuration and result as the native
 * box (box/box.h), so nothing above the driver knows which ran. The
 * sandbox is made for the run and deleted after it, on every path; it is
 * tagged with the run ("airlock": TAG in its metadata or labels) so a
 * service that died mid-run has its leftovers removed at its next start
 * (al_remote_sweep). Mechanism only: never logs, never exits.
 */
#pragma once

#include <stdbool.h>

#include "../box/box.h"

typedef enum al_remote_kind { AL_REMOTE_E2B, AL_REMOTE_DAYTONA, _AL_REMOTE_KIND_MAX } al_remote_kind;

const char *al_remote_kind_name(al_remote_kind k);
/* "e2b", "daytona"; -EINVAL for anything else */
int al_remote_kind_from_name(const char *name, al_remote_kind *ret);

#define AL_REMOTE_URL_MAX 512
#define AL_REMOTE_KEY_MAX 512

typedef struct al_remote_opts {
    al_remote_kind kind;
    const char *api_url;          /* e2b: https://api.e2b.app; daytona: https://app.daytona.io/api */
    const char *sandbox_url;      /* e2b: envd of every sandbox (E2B_SANDBOX_URL); NULL: https://49983-<id>.<domain> */
    const char *api_key;          /* the service's secret: sent, never shown */
    const char *template_name;    /* e2b: the template; daytona: the target (NULL: the service's default) */
    const char *tag;              /* "<node>/<run>", kept in the sandbox's metadata (e2b) or labels (daytona) */
    /* the run's network, as the cloud can hold it: INTERNET everything;
     * else only HOSTS (none: no egress at all) */
    bool internet;
    const char *const *hosts;
    size_t n_hosts;
} al_remote_opts;

/* Run CFG (its argv: the interpreter, the script in /work, the arguments;
 * files, inputs, stdin, limits, output callback, cancel fd, out_dirfd) in
 * a sandbox of O's service, as al_box_run does: 0 when the script ran
 * (whatever it did: RES->reason), else -errno with the step in RES->error. */
int al_remote_run(const al_remote_opts *o, const al_box_config *cfg, al_box_result *res);

/* Delete O's service's sandboxes whose tag begins with PREFIX (a dead
 * service's runs') but not with KEEP (this service's own): how many, or
 * -errno with why in ERR. */
int al_remote_sweep(const al_remote_opts *o, const char *prefix, const char *keep, al_error *err);

/* What the driver of KIND can say of a remote sandbox's controls (nothing
 * of them is seen from here: unconfirmed, or not enforced, each said). */
void al_remote_controls(al_remote_kind kind, al_controls *c);
/* The network badge of a run with O's network (what the cloud filters). */
void al_remote_network_control(const al_remote_opts *o, al_control *c);
