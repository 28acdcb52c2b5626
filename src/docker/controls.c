/* What the docker driver enforces, control by control, per runtime. Not
 * the native box's boundary: runc shares this kernel with no user
 * namespace of the run's own; gVisor puts a user-space kernel between the
 * script and this one. The badges say which and how. */
#include "docker.h"

#include <string.h>

static void set(al_control *c, al_level l, const char *detail) {
    c->level = l;
    snprintf(c->detail, sizeof c->detail, "%s", detail);
}

void al_docker_controls(al_docker_runtime rt, al_controls *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->cgroup_version, sizeof c->cgroup_version, "v1");
    bool gv = rt == AL_DOCKER_RUNSC;
    if (gv)
        set(&c->userns, AL_LEVEL_BOUNDARY,
            "gVisor (runsc, ptrace platform): the script's system calls are served by gVisor's Sentry, a "
            "user-space kernel, not by this host's kernel; the box runs as a uid of the run's own, never root");
    else
        set(&c->userns, AL_LEVEL_APPLIED,
            "no user namespace of the run's own (Docker without userns-remap): the script shares this host's "
            "kernel as host uid of the run's own, never root and never the shared nobody; a kernel bug is a "
            "host escape, as for any runc container");
    if (gv)
        set(&c->seccomp, AL_LEVEL_NOT_ENFORCED,
            "this runsc (2022-12) ignores the OCI seccomp profile: airlock's policy is not loaded; the Sentry "
            "filters its own system calls to this host");
    else
        set(&c->seccomp, AL_LEVEL_APPLIED,
            "airlock's own allow-list (the native box's policy, rendered as Docker's JSON profile), loaded by "
            "runc; ioctl TIOCSTI and TIOCLINUX refused on the low 32 bits of the command, as natively (the "
            "profile allows every other command by masked compares)");
    set(&c->no_new_privs, AL_LEVEL_BOUNDARY, "SecurityOpt no-new-privileges:true");
    if (gv)
        set(&c->network, AL_LEVEL_BOUNDARY,
            "NetworkMode none and runsc --network=none: loopback only, in gVisor's own network stack; network "
            "policies other than offline are refused under this runtime");
    else
        set(&c->network, AL_LEVEL_BOUNDARY,
            "NetworkMode none: a network namespace with loopback only; a network policy adds one listener on its "
            "loopback, served by airlock's egress proxy from outside");
    set(&c->memory, gv ? AL_LEVEL_APPLIED : AL_LEVEL_BOUNDARY,
        gv ? "Memory = MemorySwap on the sandbox's cgroup: gVisor's own memory counts too, and an out-of-memory "
             "kill may be reported as an exit rather than as OOMKilled"
           : "Memory = MemorySwap (cgroup v1, through Docker)");
    if (gv)
        set(&c->pids, AL_LEVEL_APPLIED,
            "PidsLimit on the sandbox's host cgroup, raised by 256 for gVisor's own threads: its ptrace platform "
            "takes a host process per address space, so the script's processes count; at the cap the sandbox "
            "ends whole and /out is lost (reason pids); gap: threads of one process take no host process of "
            "their own and gVisor caps none, so PidsLimit does not bound them (the memory cap does)");
    else
        set(&c->pids, AL_LEVEL_BOUNDARY, "PidsLimit (the container's pids cgroup)");
    set(&c->cpu, AL_LEVEL_BOUNDARY, "NanoCpus (CFS bandwidth, through Docker)");
    set(&c->tmpfs, gv ? AL_LEVEL_APPLIED : AL_LEVEL_BOUNDARY,
        gv ? "/work, /out and /tmp are tmpfs with size caps (gVisor drops nr_inodes: no inode cap), and /dev/shm "
             "one more of the same size; the root is ReadonlyRootfs; no host mount of airlock's (Docker's own "
             "/etc/hosts, /etc/hostname, /etc/resolv.conf and docker-init are bind mounts that name its data root)"
           : "/work, /out and /tmp are tmpfs with size and inode caps, and /dev/shm one more of the same size with "
             "no inode cap (Docker's ShmSize); the root is ReadonlyRootfs; no host mount of airlock's (Docker's "
             "own /etc/hosts, /etc/hostname, /etc/resolv.conf and docker-init are bind mounts that name its data "
             "root)");
    if (gv)
        set(&c->caps, AL_LEVEL_BOUNDARY,
            "CapDrop ALL, a non-root uid, no device of the host's: /dev is gVisor's own tmpfs with only null, "
            "zero, full, random, urandom, tty, ptmx and pts, shm, and gVisor's own fuse and net/tun, all served "
            "by its Sentry; gap: this gVisor lets mknod make a device node in its tmpfs without CAP_MKNOD, and "
            "such a node opens only a device of gVisor's own (others are ENXIO), never one of this host's");
    else
        set(&c->caps, AL_LEVEL_BOUNDARY,
            "CapDrop ALL, a non-root uid, no device of the host's: /dev is Docker's tmpfs (without nodev) with "
            "only null, zero, full, random, urandom, tty, ptmx and pts, shm and mqueue, the devices cgroup "
            "letting it open no other");
}

static json_t *control(const al_control *c) {
    return json_pack("{s:s, s:s}", "level", al_level_name(c->level), "detail", c->detail);
}

json_t *al_docker_capabilities(const char *socket, al_docker_runtime rt) {
    al_controls c;
    al_docker_controls(rt, &c);
    json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "isolation", control(&c.userns),
                          "seccomp", control(&c.seccomp), "no_new_privs", control(&c.no_new_privs), "network",
                          control(&c.network), "memory", control(&c.memory), "pids", control(&c.pids), "cpu",
                          control(&c.cpu), "tmpfs", control(&c.tmpfs), "capabilities", control(&c.caps));
    json_object_set_new(o, "socket", json_pack("{s:s, s:s}", "level", "applied", "detail",
                                               "the Docker socket is root on this host: airlock is its only "
                                               "client and never passes it into a box"));
    al_error err = { 0 };
    if (al_docker_probe(socket, rt, &err) < 0)
        json_object_set_new(o, "daemon", json_pack("{s:s, s:s}", "level", "not-enforced", "detail", err.msg));
    else
        json_object_set_new(o, "daemon", json_pack("{s:s, s:s}", "level", "boundary", "detail", err.msg));
    return o;
}

int al_docker_probe(const char *socket, al_docker_runtime rt, al_error *err) {
    char sock[108];
    al_engine e;
    int r = al_engine_socket_path(socket, sock, sizeof sock, err);
    if (r < 0 || (r = al_engine_open(&e, sock, err)) < 0)
        return r;
    json_t *info = NULL;
    int st = al_engine_call(&e, "GET", "/info", NULL, &info, err);
    if (st != 200) {
        json_decref(info);
        al_engine_close(&e);
        return st < 0 ? st : al_err(err, "docker", EIO, "GET /info answered %d", st);
    }
    json_t *rts = json_object_get(info, "Runtimes");
    const char *cgd = json_string_value(json_object_get(info, "CgroupDriver"));
    const char *cgv = json_string_value(json_object_get(info, "CgroupVersion"));
    if (!json_object_get(rts, al_docker_runtime_name(rt)))
        r = al_err(err, "docker", ENOTSUP, "the daemon at %s has no runtime \"%s\" (dockerd --add-runtime or "
                   "daemon.json \"runtimes\")", sock, al_docker_runtime_name(rt));
    else if (cgd && strcmp(cgd, "cgroupfs") != 0)
        r = al_err(err, "docker", ENOTSUP, "the daemon uses the %s cgroup driver; airlock reads the container's "
                   "cgroup v1 files and needs cgroupfs", cgd);
    else if (cgv && strcmp(cgv, "1") != 0)
        r = al_err(err, "docker", ENOTSUP, "the daemon is on cgroup v%s; the docker driver is built for v1 here", cgv);
    else
        snprintf(err->msg, sizeof err->msg, "Docker %s (API %s) at %s, runtime %s, cgroup driver %s", e.daemon,
                 e.version, sock, al_docker_runtime_name(rt), cgd ? cgd : "?");
    json_decref(info);
    al_engine_close(&e);
    return r;
}
