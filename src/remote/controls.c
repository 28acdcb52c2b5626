/* What a remote driver can say of its sandboxes (remote.h): nothing of
 * them is seen from this host, and neither cloud was reached from where
 * these drivers were written and tested (docs/operations.md), so nothing
 * is claimed beyond what the service documents, and that is unconfirmed. */
#include "remote.h"

#include <string.h>

static void set(al_control *c, al_level l, const char *detail) {
    c->level = l;
    snprintf(c->detail, sizeof c->detail, "%s", detail);
}

void al_remote_controls(al_remote_kind kind, al_controls *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->cgroup_version, sizeof c->cgroup_version, "none");
    bool e2b = kind == AL_REMOTE_E2B;
    set(&c->userns, AL_LEVEL_UNCONFIRMED,
        e2b ? "isolation is E2B's: each run in a sandbox of its own (a Firecracker microVM, as E2B documents), made "
              "for the run and deleted after it; not checked against the real service from here"
            : "isolation is Daytona's: each run in a sandbox of its own, made for the run and deleted after it; not "
              "checked against the real service from here");
    const char *remote = "the remote sandbox's own, not airlock's: not seen from here";
    set(&c->seccomp, AL_LEVEL_UNCONFIRMED, remote);
    set(&c->no_new_privs, AL_LEVEL_UNCONFIRMED, remote);
    set(&c->caps, AL_LEVEL_UNCONFIRMED,
        e2b ? "the script runs as root inside its E2B sandbox (its VM's root, for /work and /out at /)" : remote);
    set(&c->memory, AL_LEVEL_NOT_ENFORCED, "the sandbox's size is its template's: the run's memory limit is not passed");
    set(&c->pids, AL_LEVEL_NOT_ENFORCED, "not passed to the remote sandbox");
    set(&c->cpu, AL_LEVEL_NOT_ENFORCED, "the sandbox's size is its template's: the run's CPU limit is not passed");
    set(&c->tmpfs, AL_LEVEL_NOT_ENFORCED, "the sandbox's disk is its template's; /out is collected under airlock's caps");
    set(&c->network, AL_LEVEL_UNCONFIRMED, "see the run's network badge");
}

void al_remote_network_control(const al_remote_opts *o, al_control *c) {
    if (o->kind == AL_REMOTE_DAYTONA) {
        if (o->internet)
            set(c, AL_LEVEL_NOT_ENFORCED, "the internet: Daytona's sandbox has its own network, unfiltered");
        else
            set(c, AL_LEVEL_UNCONFIRMED,
                "offline: Daytona's networkBlockAll, as Daytona documents it; not checked from here");
        return;
    }
    if (o->internet)
        set(c, AL_LEVEL_NOT_ENFORCED, "the internet: allowInternetAccess, E2B's sandbox unfiltered");
    else if (o->n_hosts)
        set(c, AL_LEVEL_UNCONFIRMED,
            "E2B's egress filter (network.allowOut with denyOut 0.0.0.0/0): a name is matched on the HTTP Host of "
            "port 80 and the TLS SNI of port 443, other ports by address only; airlock's egress proxy is not in "
            "the path, so no egress log; not checked from here");
    else
        set(c, AL_LEVEL_UNCONFIRMED, "offline: allowInternetAccess false, as E2B documents it; not checked from here");
}
