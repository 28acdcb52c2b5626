/*
 * A run's network policy as a remote driver's cloud can hold it (its
 * sandbox has its own network: airlock's egress proxy is not in its path):
 * the internet, or a list of host names (an allow-list's, and the package
 * registries' where the policy has them), or nothing. Used by the helper
 * (drivers/helper_main.c) and `airlock run --driver e2b|daytona`.
 */
#pragma once

#include "../proxy/policy.h"
#include "../remote/remote.h"

#define AL_REMOTE_HOSTS_MAX (2 * AL_NET_MAX_HOSTS)

/* P's network into O (its internet, hosts and n_hosts); HOSTS: room for
 * AL_REMOTE_HOSTS_MAX names, which point into P. */
void al_driver_remote_net(const al_net_policy *p, al_remote_opts *o, const char **hosts);
/* Whether O's kind of cloud can hold network mode MODE; when not, *WHY. */
bool al_driver_remote_net_held(al_remote_kind kind, al_net_mode mode, const char **why);
