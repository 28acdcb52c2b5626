/*
 * The egress proxy of one box: a process of its own, outside the box's
 * network namespace, serving a listener that was created inside it. It
 * speaks CONNECT and absolute-form HTTP, decides on the authority before
 * any lookup (policy.c), resolves the name itself, refuses every address in
 * the deny set, connects to the address it checked, and logs each
 * connection. The process runs as the box's host uid, with no capability
 * and no_new_privs, and dies with its parent.
 */
#pragma once

#include <jansson.h>
#include <sys/types.h>

#include "../util/util.h"
#include "policy.h"

typedef struct al_proxy al_proxy;

/* Start serving LISTEN_FD (a listening TCP socket in the box's network
 * namespace) under POLICY. The caller must be single-threaded: this forks. */
int al_proxy_start(const al_net_policy *policy, int listen_fd, uid_t uid, gid_t gid, al_proxy **ret,
                   al_error *err);

/*
 * Stop the proxy (open connections are closed and logged) and return the
 * egress log: a JSON array of {time, host, port, address, decision, reason,
 * bytes_up, bytes_down, duration_ms} in the order connections ended, and
 * the number of records dropped beyond the log's cap. Frees PX.
 */
json_t *al_proxy_stop(al_proxy *px, size_t *ret_dropped);

/* Serve in this process until STOP_FD hangs up; log lines go to LOG_FD.
 * For al_proxy_start's child, and the fuzz and unit tests. */
int al_proxy_serve(const al_net_policy *policy, int listen_fd, int log_fd, int stop_fd);
