/*
 * The network policy of one run, shared by `airlock run` and `airlock
 * helper`: the box's environment, the egress proxy started on the box's
 * listener, and the run's egress log and enforcement badge.
 */
#include <string.h>

#include "box_net.h"

/* The environment every box gets, and nothing else. */
char *const al_box_env[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/tmp",
    "TMPDIR=/tmp",
    "LANG=C.UTF-8",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "MPLCONFIGDIR=/tmp/.matplotlib",
    NULL,
};

#define PROXY_PORT 3128
#define PROXY_URL "http://127.0.0.1:3128"

int al_box_net_init(al_box_net *n, const char *spec, al_error *err) {
    memset(n, 0, sizeof *n);
    int r = al_net_policy_parse(spec, &n->policy, err);
    if (r < 0)
        return r;
    al_net_policy_format(&n->policy, n->spec, sizeof n->spec);
    /* the box's environment: the common part, then where the proxy is */
    size_t k = 0;
    for (; al_box_env[k] && k < AL_BOX_NET_ENV_MAX - 16; k++)
        n->env[k] = al_box_env[k];
    snprintf(n->env_policy, sizeof n->env_policy, "AIRLOCK_NETWORK=%s", n->spec);
    n->env[k++] = n->env_policy;
    /* offline, nothing can succeed: pip's five retries would make an agent
     * wait 8 s for the same answer; one retry prints why (no name resolves)
     * and ends in about a second */
    if (n->policy.mode == AL_NET_OFFLINE)
        n->env[k++] = "PIP_RETRIES=1";
    if (n->policy.mode != AL_NET_OFFLINE) {
        /* curl, python (urllib, requests, pip) and npm read these; node's
         * own http and fetch do not (docs/cli.md) */
        static char *const proxy_env[] = {
            "HTTP_PROXY=" PROXY_URL, "HTTPS_PROXY=" PROXY_URL, "http_proxy=" PROXY_URL,
            "https_proxy=" PROXY_URL, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
            "npm_config_proxy=" PROXY_URL, "npm_config_https_proxy=" PROXY_URL,
        };
        for (size_t i = 0; i < ELEMENTSOF(proxy_env); i++)
            n->env[k++] = proxy_env[i];
    }
    n->env[k] = NULL;
    return 0;
}

uint16_t al_box_net_listen_port(const al_box_net *n) { return n->policy.mode == AL_NET_OFFLINE ? 0 : PROXY_PORT; }

int al_box_net_on_listener(int fd, uid_t uid, gid_t gid, void *userdata, al_error *err) {
    al_box_net *n = userdata;
    return al_proxy_start(&n->policy, fd, uid, gid, &n->proxy, err);
}

static al_level level_of(const char *name) {
    for (int l = 0; l < _AL_LEVEL_MAX; l++)
        if (strcmp(al_level_name((al_level)l), name) == 0)
            return (al_level)l;
    return AL_LEVEL_NOT_ENFORCED;
}

json_t *al_box_net_finish(al_box_net *n, al_box_result *res) {
    size_t dropped = 0;
    json_t *log = n->proxy ? al_proxy_stop(n->proxy, &dropped) : json_array();
    n->proxy = NULL;
    /* a box that never got its proxy has no route at all: it was offline */
    al_net_badge b = al_net_policy_badge(&n->policy);
    res->controls.network.level = level_of(b.level);
    snprintf(res->controls.network.detail, sizeof res->controls.network.detail, "%s", b.detail);
    return json_pack("{s:s, s:s, s:o, s:I}", "policy", n->spec, "mode", al_net_mode_name(n->policy.mode), "egress",
                     log ? log : json_array(), "egress_dropped", (json_int_t)dropped);
}
