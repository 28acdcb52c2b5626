#pragma once

#include "../proxy/proxy.h"

#define CLI_NET_ENV_MAX 40

typedef struct cli_net {
    al_net_policy policy;
    char spec[AL_NET_MAX_HOSTS * AL_NET_NAME_MAX];
    char env_policy[sizeof(((al_net_policy *)0)->hosts) + 64];
    char *env[CLI_NET_ENV_MAX];
    al_proxy *proxy;
} cli_net;

/* Parse SPEC (NULL: offline) and build the box's environment in n->env. */
int cli_net_init(cli_net *n, const char *spec, al_error *err);
/* The box config's listen_port: 0 when offline (no listener, no proxy). */
uint16_t cli_net_listen_port(const cli_net *n);
/* The box config's on_listener; USERDATA is the cli_net. */
int cli_net_on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err);
/* Stop the proxy; set the result's network control to the mode's badge;
 * return {policy, mode, egress: [...], egress_dropped}. */
json_t *cli_net_finish(cli_net *n, al_box_result *res);
