/*
 * The network policy of one run (box_net.c), shared by `airlock run` and
 * `airlock helper`: the box's environment, the egress proxy started on
 * the box's listener, and the run's egress log and enforcement badge.
 */
#pragma once

#include <jansson.h>

#include "../box/box.h"

#include "../proxy/proxy.h"

#define AL_BOX_NET_ENV_MAX 40

/* The environment every box gets, and nothing else. */
extern char *const al_box_env[];

typedef struct al_box_net {
    al_net_policy policy;
    char spec[AL_NET_MAX_HOSTS * AL_NET_NAME_MAX];
    char env_policy[sizeof(((al_net_policy *)0)->hosts) + 64];
    char *env[AL_BOX_NET_ENV_MAX];
    al_proxy *proxy;
} al_box_net;

/* Parse SPEC (NULL: offline) and build the box's environment in n->env. */
int al_box_net_init(al_box_net *n, const char *spec, al_error *err);
/* The box config's listen_port: 0 when offline (no listener, no proxy). */
uint16_t al_box_net_listen_port(const al_box_net *n);
/* The box config's on_listener; USERDATA is the al_box_net. */
int al_box_net_on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err);
/* Stop the proxy; set the result's network control to the mode's badge;
 * return {policy, mode, egress: [...], egress_dropped}. */
json_t *al_box_net_finish(al_box_net *n, al_box_result *res);
