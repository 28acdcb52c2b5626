/* The Docker box: see docker.h. One run:
 *   image (loaded once) -> two uids of the run's own (holder, script) ->
 *   create + start the holder container -> stage /work (+ the image's /tmp
 *   seed) through a tar exec -> the script as an exec, streamed, under the
 *   wall clock and the output caps -> every process of the script's uid
 *   killed -> /out read back through a tar exec -> the container removed.
 */
#include "docker.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>

#include "../box/cgroup.h"
#include "../box/collect.h"
#include "../box/stage.h"
#include "../box/uidpool.h"
#include "seccomp_docker.h"

#define LABEL_BOX "dev.airlock.box"
#define LABEL_UID "dev.airlock.uid"
/* after a kill, how long until the script's processes must be gone */
#define KILL_GRACE_MS 5000
#define PIDS_TICK_MS 250
#define PIDS_STREAK 4
/* host threads gVisor's sandbox (Sentry, gofer) takes beyond the script's */
#define RUNSC_PIDS_OVERHEAD 256
/* this close to that cap when it died: it died of the cap */
#define RUNSC_PIDS_NEAR 64
/* this close to its memory cap when it died: it died of the cap */
#define MEM_NEAR (8u << 20)
/* after the script's main process ended, how long its output may drain */
#define DRAIN_MS 1000
/* how long the holder outlives the wall clock, at most */
#define HOLD_MARGIN_S 300
/* bytes a tar of /out may take beyond its files: a header and padding per
 * entry, and the end blocks */
#define TAR_PER_ENTRY 1536

static const char *const runtime_names[_AL_DOCKER_RUNTIME_MAX] = { "runc", "runsc" };
const char *al_docker_runtime_name(al_docker_runtime r) { return r < _AL_DOCKER_RUNTIME_MAX ? runtime_names[r] : "?"; }
int al_docker_runtime_from_name(const char *name, al_docker_runtime *ret) {
    for (int i = 0; i < _AL_DOCKER_RUNTIME_MAX; i++)
        if (strcmp(name, runtime_names[i]) == 0) {
            *ret = (al_docker_runtime)i;
            return 0;
        }
    return -EINVAL;
}

char *al_docker_seccomp_profile(al_error *err) {
    char *s = strdup(al_seccomp_docker_json);
    if (!s)
        al_err(err, "seccomp", ENOMEM, "out of memory");
    return s;
}

typedef struct dbox {
    const al_docker_opts *o;
    const al_box_config *cfg;
    al_box_result *res;
    al_engine e;
    bool engine_open;
    char id[80];                  /* the container */
    uid_t holder, uid;
    int holder_lock, uid_lock;
    pid_t init_pid;
    char cg_pids[512], cg_mem[512], cg_cpu[512]; /* its cgroup dirs on this host ("" unknown) */
    char scratch[64];             /* our tmpfs: stage and collect */
    bool scratch_mounted, unshared;
    uint64_t pids_hits_seen, pids_current_seen; /* the host cgroup's, last read */
    uint64_t mem_peak_seen, oom_seen;
    int rootfd;                   /* runc: the container's root, through its init (O_PATH) */
    int init_fd;                  /* pidfd of the container's init */
    bool killed_whole;            /* airlock killed the container: /out is lost */
    bool own;                     /* made here, so removed here (a held one is its owner's) */
    bool inside_clean;            /* gVisor: a kill from inside found none of the script's left */
    uint64_t hold_s;              /* how long its holder lives */
    char tar_err[512];            /* the last tar's stderr, its first 511 bytes */
} dbox;

/* ---- the container's cgroup, read from this host ---- */

/* DIR of controller CTRL for PID from /proc/PID/cgroup (v1 lines
 * "N:ctrl[,ctrl]:/path"). */
static void cgroup_dir(pid_t pid, const char *ctrl, const char *mount, char *ret, size_t len) {
    ret[0] = '\0';
    char p[64], line[1024];
    snprintf(p, sizeof p, "/proc/%d/cgroup", (int)pid);
    _cleanup_fclose_ FILE *f = fopen(p, "re");
    while (f && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b)
            continue;
        *b = '\0';
        bool match = false;
        for (char *t = strtok(a + 1, ","); t; t = strtok(NULL, ","))
            match |= strcmp(t, ctrl) == 0;
        if (!match)
            continue;
        b[1 + strcspn(b + 1, "\n")] = '\0';
        if (strstr(b + 1, ".."))
            return;
        snprintf(ret, len, "/sys/fs/cgroup/%s%s", mount, b + 1);
        return;
    }
}

/* ---- processes of the script's uid ---- */

static bool proc_uid_is(pid_t pid, uid_t uid) {
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/status", (int)pid);
    _cleanup_fclose_ FILE *f = fopen(p, "re");
    unsigned r = 0, e = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2)
            return r == uid || e == uid;
    return false;
}

/* SIGKILL every process of the container's cgroup that runs as the
 * script's uid (the holder, another uid, lives on so /out can be read);
 * by pidfd, so a pid reused meanwhile is not hit. Returns how many were
 * alive. Only where the script's processes are this host's (runc). */
static int kill_script_procs(dbox *b) {
    if (!b->cg_pids[0])
        return -ENOENT;
    char p[600];
    snprintf(p, sizeof p, "%s/cgroup.procs", b->cg_pids);
    _cleanup_fclose_ FILE *f = fopen(p, "re");
    if (!f)
        return -errno;
    int n = 0, pid;
    while (fscanf(f, "%d", &pid) == 1) {
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
            continue;
        if (proc_uid_is(pid, b->uid)) {
            syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
            n++;
        }
        close(fd);
    }
    return n;
}

/* gVisor's processes are not this host's: they are killed from inside, as
 * the script's uid, until none is left (kill -1 spares the caller). The
 * loop ends with 0 only when kill -1 finds no process of the uid left to
 * signal: then none is alive, and none can start again (only the script's
 * processes are of its uid). Any other end (a survivor that killed this
 * shell, the bound, a timeout) is a failure: the caller then kills the
 * container whole rather than read an /out that something the script left
 * could still change. */
static char *kill_argv[] = { "sh", "-c",
                             "i=0; while kill -9 -1 2>/dev/null; do i=$((i+1)); [ $i -lt 100000 ] || exit 3; done; exit 0",
                             NULL };

static void kill_container(dbox *b);

/* ---- container calls ---- */

static int call_ok(dbox *b, const char *method, const char *path, json_t *body, json_t **ret, al_error *err) {
    int st = al_engine_call(&b->e, method, path, body, ret, err);
    json_decref(body);
    if (st >= 0 && st < 300)
        return st;
    /* a refusal's body is not the answer: the caller gets none to free */
    if (ret) {
        json_decref(*ret);
        *ret = NULL;
    }
    return st < 0 ? st : -EIO; /* ERR says what Docker said */
}

static json_t *tmpfs_opts(const al_box_limits *l, uid_t uid, const char *mode) {
    char o[200];
    /* exec, as the native box's scratch (Docker's default is noexec) */
    snprintf(o, sizeof o, "rw,exec,nosuid,nodev,size=%llu,nr_inodes=%llu,mode=%s,uid=%u,gid=%u",
             (unsigned long long)l->tmpfs_bytes, (unsigned long long)l->tmpfs_inodes, mode, uid, uid);
    return json_string(o);
}

/* no_new_privs and airlock's seccomp profile, as HostConfig.SecurityOpt. */
static json_t *security_opts(al_error *err) {
    _cleanup_free_ char *seccomp = al_docker_seccomp_profile(err);
    char *sec = NULL;
    if (!seccomp || asprintf(&sec, "seccomp=%s", seccomp) < 0)
        return NULL;
    json_t *o = json_pack("[s, s]", "no-new-privileges:true", sec);
    free(sec);
    return o;
}

/* /work, /out and /tmp: the run's own scratch, as HostConfig.Tmpfs. */
static json_t *scratch_mounts(const al_box_limits *l, uid_t uid) {
    return json_pack("{s:o, s:o, s:o}", "/work", tmpfs_opts(l, uid, "0700"), "/out", tmpfs_opts(l, uid, "0700"), "/tmp",
                     tmpfs_opts(l, uid, "0700"));
}

/* Docker's default masked paths, and every entry of /proc that is not a
 * process's (the native box mounts proc with subset=pid, which has none of
 * them: no sys, kcore, keys, key-users, timer_list, sched_debug...), and
 * /sys whole (the native box has no /sys). Links (self, mounts, net) are
 * left: masking one would mask what it points to. */
static json_t *masked_paths(void) {
    static const char *const always[] = { "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys",
                                          "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                                          "/proc/sched_debug", "/proc/scsi", "/sys" };
    json_t *a = json_array();
    for (size_t i = 0; i < ELEMENTSOF(always); i++)
        json_array_append_new(a, json_string(always[i]));
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || strspn(e->d_name, "0123456789") == strlen(e->d_name) ||
            e->d_type == DT_LNK)
            continue;
        char p[300];
        snprintf(p, sizeof p, "/proc/%s", e->d_name);
        bool dup = false;
        for (size_t i = 0; i < ELEMENTSOF(always); i++)
            dup |= strcmp(always[i], p) == 0;
        if (!dup)
            json_array_append_new(a, json_string(p));
    }
    if (d)
        closedir(d);
    return a;
}

/* The body of POST /containers/create for B's container of IMAGE_ID: every
 * setting that makes it the run's box. same_box() holds a container made
 * ahead of need to it. */
static json_t *create_body(dbox *b, const char *image_id, al_error *err) {
    const al_box_limits *l = &b->cfg->limits;
    char user[40], uidl[16], hold[24];
    snprintf(user, sizeof user, "%u:%u", b->holder, b->holder);
    /* the holder ends on its own past the run's wall clock and a margin for
     * staging and collection: a helper that dies (even by SIGKILL) leaves
     * no script running for long, the kernel ends the container with it */
    snprintf(hold, sizeof hold, "%llu", (unsigned long long)b->hold_s);
    snprintf(uidl, sizeof uidl, "%u", b->uid);
    json_t *secopt = security_opts(err);
    if (!secopt)
        return NULL;
    json_t *tmpfs = scratch_mounts(l, b->uid);
    json_t *hc = json_pack(
        "{s:s, s:b, s:[s], s:o, s:o, s:I, s:I, s:I, s:I, s:b, s:b, s:b, s:[{s:s, s:I, s:I}, {s:s, s:I, s:I}, "
        "{s:s, s:I, s:I}], s:I, s:s, s:s}",
        "NetworkMode", "none", "ReadonlyRootfs", 1, "CapDrop", "ALL", "SecurityOpt", secopt, "Tmpfs", tmpfs,
        "Memory", (json_int_t)l->memory_bytes, "MemorySwap", (json_int_t)l->memory_bytes, "NanoCpus",
        (json_int_t)(l->cpu_millis * 1000000ULL), "PidsLimit", (json_int_t)l->pids, "Init", 1, "AutoRemove", 0,
        "Privileged", 0, "Ulimits", "Name", "nofile", "Soft", (json_int_t)l->nofile, "Hard", (json_int_t)l->nofile,
        /* as the native box: no core dump, and no file larger than a tmpfs */
        "Name", "core", "Soft", (json_int_t)0, "Hard", (json_int_t)0, "Name", "fsize", "Soft",
        (json_int_t)l->tmpfs_bytes, "Hard", (json_int_t)l->tmpfs_bytes,
        "ShmSize", (json_int_t)l->tmpfs_bytes, "IpcMode", "private", "CgroupnsMode", "private");
    json_object_set_new(hc, "MaskedPaths", masked_paths());
    if (b->o->runtime == AL_DOCKER_RUNSC) {
        json_object_set_new(hc, "Runtime", json_string("runsc"));
        /* the host's pids cgroup holds gVisor's own threads, not the
         * script's processes: its cap is theirs plus the script's */
        json_object_set_new(hc, "PidsLimit", json_integer((json_int_t)(l->pids + RUNSC_PIDS_OVERHEAD)));
    }
    /* the holder: tini (Init) and a sleep, as the holder's uid; the script
     * runs beside it as execs of another uid */
    json_t *body = json_pack("{s:s, s:[s, s], s:s, s:s, s:b, s:b, s:b, s:b, s:[s], s:{s:s, s:s}, s:o}",
                             "Image", image_id, "Cmd", "sleep", hold, "User", user, "WorkingDir", "/",
                             "Tty", 0, "OpenStdin", 0, "AttachStdout", 0, "NetworkDisabled", 1, "Env",
                             "PATH=/usr/local/bin:/usr/bin:/bin", "Labels", LABEL_BOX, "1", LABEL_UID, uidl,
                             "HostConfig", hc);
    if (!body)
        al_err(err, "docker", ENOMEM, "out of memory");
    return body;
}

static int create(dbox *b, const char *image_id, al_error *err) {
    char name[64];
    snprintf(name, sizeof name, "airlock-box-%u", b->uid);
    json_t *body = create_body(b, image_id, err);
    if (!body)
        return -ENOMEM;
    char path[200];
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    json_t *ans = NULL;
    int r = al_engine_call(&b->e, "POST", path, body, &ans, err);
    if (r == 409) {
        /* a container of this uid left by an airlock that died: the uid is
         * ours now, so what holds it is stale */
        json_decref(ans);
        ans = NULL;
        memset(err, 0, sizeof *err);
        char del[200];
        snprintf(del, sizeof del, "/containers/%s?force=1&v=1", name);
        al_engine_call(&b->e, "DELETE", del, NULL, NULL, err);
        memset(err, 0, sizeof *err);
        r = al_engine_call(&b->e, "POST", path, body, &ans, err);
    }
    json_decref(body);
    const char *id = json_string_value(json_object_get(ans, "Id"));
    if (r == 201 && id && strlen(id) < sizeof b->id && strspn(id, "0123456789abcdef") == strlen(id))
    {
        snprintf(b->id, sizeof b->id, "%s", id);
        b->own = true;
    }
    else if (r >= 0)
        r = al_err(err, "docker", EIO, "create the container: %s", err->msg[0] ? err->msg : "no id answered");
    json_decref(ans);
    return r < 0 ? r : 0;
}

/* Memory in the container's tmpfs is charged to its cgroup but to no
 * process: without this, the kernel's OOM killer could pick the holder
 * (tini, sleep) and end the container, /out with it. */
static void protect_holder(dbox *b) {
    char p[80], kids[256];
    pid_t pids[2] = { b->init_pid, 0 };
    snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)b->init_pid, (int)b->init_pid);
    _cleanup_close_ int cf = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = cf >= 0 ? read(cf, kids, sizeof kids - 1) : -1;
    if (n > 0) {
        kids[n] = '\0';
        pids[1] = (pid_t)atoi(kids);
    }
    for (int i = 0; i < 2; i++) {
        if (pids[i] <= 0)
            continue;
        snprintf(p, sizeof p, "/proc/%d/oom_score_adj", (int)pids[i]);
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0 && write(fd, "-1000", 5) < 0) {
            /* best effort: the script's run does not depend on it */
        }
    }
}

/* A held container is used for a run only if the daemon's record of it
 * (not the service's word) shows it made as this run's own would be: every
 * setting create_body() makes, the image, no exec ever run in it, and the
 * defaults create() relies on for what it does not set (no capability
 * added, no group, no host namespace, no sysctl, no volume or device). */
static int same_box(dbox *b, json_t *ins, al_error *err) {
    const al_docker_held *h = b->o->held;
    json_t *want = create_body(b, h->image_id, err);
    if (!want)
        return -ENOMEM;
    json_t *hc = json_object_get(ins, "HostConfig"), *cc = json_object_get(ins, "Config");
    json_t *whc = json_object_get(want, "HostConfig");
    const char *why = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(whc, key, v) {
        if (!json_equal(v, json_object_get(hc, key)) && !why)
            why = key;
    }
    /* runc is the daemon's default: no "Runtime" asked, "runc" recorded */
    const char *rt = json_string_value(json_object_get(hc, "Runtime"));
    if (!why && (!rt || strcmp(rt, al_docker_runtime_name(b->o->runtime)) != 0))
        why = "Runtime";
    static const char *const cfg_keys[] = { "User", "WorkingDir", "Env", "Tty", "OpenStdin", "NetworkDisabled" };
    for (size_t i = 0; !why && i < ELEMENTSOF(cfg_keys); i++)
        if (!json_equal(json_object_get(want, cfg_keys[i]), json_object_get(cc, cfg_keys[i])))
            why = cfg_keys[i];
    /* its holder: a sleep of the pool's length, not the run's */
    json_t *cmd = json_object_get(cc, "Cmd");
    const char *c0 = json_string_value(json_array_get(cmd, 0)), *c1 = json_string_value(json_array_get(cmd, 1));
    if (!why && (json_array_size(cmd) != 2 || !c0 || strcmp(c0, "sleep") != 0 || !c1 || !*c1 ||
                 strspn(c1, "0123456789") != strlen(c1)))
        why = "Cmd";
    /* its labels: ours, and the image's digest, which it inherits */
    json_t *labels = json_object_get(cc, "Labels");
    json_object_foreach(json_object_get(want, "Labels"), key, v) {
        if (!why && !json_equal(v, json_object_get(labels, key)))
            why = "Labels";
    }
    const char *ld = json_string_value(json_object_get(labels, "dev.airlock.digest"));
    const char *digest = b->o->image_digest ? b->o->image_digest : "";
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    if (!why && (!ld || strcmp(ld, digest) != 0))
        why = "the image's digest label";
    const char *img = json_string_value(json_object_get(ins, "Image"));
    if (!why && (!img || strcmp(img, h->image_id) != 0))
        why = "Image";
    /* no script (no exec at all) has run in it */
    if (!why && json_array_size(json_object_get(ins, "ExecIDs")) > 0)
        why = "ExecIDs";
    /* what create() leaves to the daemon's defaults is still the default */
    static const char *const empty[] = { "CapAdd", "GroupAdd", "Sysctls", "VolumesFrom", "DeviceCgroupRules",
                                         "Binds", "Mounts", "Devices", "Links", "ExtraHosts", "Dns", "DnsOptions",
                                         "DnsSearch", "DeviceRequests" };
    for (size_t i = 0; !why && i < ELEMENTSOF(empty); i++) {
        json_t *x = json_object_get(hc, empty[i]);
        if (x && !json_is_null(x) && !((json_is_array(x) && json_array_size(x) == 0) ||
                                       (json_is_object(x) && json_object_size(x) == 0)))
            why = empty[i];
    }
    static const char *const blank[] = { "PidMode", "UTSMode", "UsernsMode", "CgroupParent", "Cgroup", "VolumeDriver" };
    for (size_t i = 0; !why && i < ELEMENTSOF(blank); i++) {
        const char *x = json_string_value(json_object_get(hc, blank[i]));
        if (x && *x)
            why = blank[i];
    }
    if (!why && json_is_true(json_object_get(hc, "OomKillDisable")))
        why = "OomKillDisable";
    if (!why && json_is_true(json_object_get(hc, "PublishAllPorts")))
        why = "PublishAllPorts";
    /* (WHY may be a key of WANT's: said before WANT goes) */
    int r = why ? al_err(err, "docker", ESTALE, "the held container %.12s was not made as this run's own (%s differs)",
                         b->id, why)
                : 0;
    json_decref(want);
    return r;
}

/* The running container B->id: its init's pid (by pidfd), its cgroup dirs,
 * its holder kept from the OOM killer. SAME: check it was made as this
 * run's own (a held one). */
static int inspect_init(dbox *b, bool same, al_error *err) {
    char path[200];
    json_t *ins = NULL;
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    int r = call_ok(b, "GET", path, NULL, &ins, err);
    if (r < 0)
        return r;
    json_t *state = json_object_get(ins, "State");
    b->init_pid = (pid_t)json_integer_value(json_object_get(state, "Pid"));
    bool running = json_is_true(json_object_get(state, "Running"));
    r = same ? same_box(b, ins, err) : 0;
    json_decref(ins);
    if (r < 0)
        return r;
    if (!running || b->init_pid <= 0)
        return al_err(err, "docker", EIO, "the container %.12s is not running", b->id);
    b->res->init_pid = b->init_pid;
    cgroup_dir(b->init_pid, "pids", "pids", b->cg_pids, sizeof b->cg_pids);
    cgroup_dir(b->init_pid, "memory", "memory", b->cg_mem, sizeof b->cg_mem);
    cgroup_dir(b->init_pid, "cpuacct", "cpuacct", b->cg_cpu, sizeof b->cg_cpu);
    snprintf(b->res->cgroup_path, sizeof b->res->cgroup_path, "%s", b->cg_mem);
    /* the pid inspect named is the container's init only if its cgroup is
     * the container's: a pid reused meanwhile would be another process */
    if (!b->cg_pids[0] || !strstr(b->cg_pids, b->id) || !strstr(b->cg_mem, b->id))
        return al_err(err, "docker", ESRCH, "the container's init %d is not in its cgroup (cgroup v1, cgroupfs "
                      "driver needed)", (int)b->init_pid);
    b->init_fd = (int)syscall(SYS_pidfd_open, b->init_pid, 0);
    if (b->init_fd < 0)
        return al_err(err, "docker", errno, "pidfd_open the container's init: %m");
    protect_holder(b);
    return 0;
}

static int start_and_inspect(dbox *b, al_error *err) {
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/start", b->id);
    int r = call_ok(b, "POST", path, NULL, NULL, err);
    if (r < 0)
        return al_err(err, "docker", -r, "start the container");
    return inspect_init(b, false, err);
}

/* Create an exec of ARGV as the script's uid; RET_ID gets its id. */
static int exec_create(dbox *b, char *const *argv, char *const *envp, const char *cwd, bool in, char ret_id[80],
                       al_error *err) {
    json_t *cmd = json_array(), *env = json_array();
    for (size_t i = 0; argv[i]; i++)
        json_array_append_new(cmd, json_string(argv[i]));
    for (size_t i = 0; envp && envp[i]; i++)
        json_array_append_new(env, json_string(envp[i]));
    char user[40];
    snprintf(user, sizeof user, "%u:%u", b->uid, b->uid);
    json_t *body = json_pack("{s:o, s:o, s:s, s:s, s:b, s:b, s:b, s:b, s:b}", "Cmd", cmd, "Env", env, "User", user,
                             "WorkingDir", cwd, "AttachStdin", in, "AttachStdout", 1, "AttachStderr", 1, "Tty", 0,
                             "Privileged", 0);
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/exec", b->id);
    json_t *ans = NULL;
    int r = call_ok(b, "POST", path, body, &ans, err);
    const char *id = json_string_value(json_object_get(ans, "Id"));
    if (r >= 0 && id && strlen(id) < 80 && strspn(id, "0123456789abcdef") == strlen(id))
        snprintf(ret_id, 80, "%s", id);
    else if (r >= 0)
        r = al_err(err, "docker", EIO, "the exec was given no id");
    json_decref(ans);
    return r < 0 ? r : 0;
}

/* The exit code of exec ID once it has ended (-1 when unknown). */
static int exec_exit(dbox *b, const char *id, al_error *err) {
    char path[200];
    snprintf(path, sizeof path, "/exec/%s/json", id);
    for (int i = 0; i < 200; i++) {
        json_t *ans = NULL;
        if (call_ok(b, "GET", path, NULL, &ans, err) < 0)
            return -1;
        bool running = json_is_true(json_object_get(ans, "Running"));
        int code = (int)json_integer_value(json_object_get(ans, "ExitCode"));
        json_decref(ans);
        if (!running)
            return code;
        struct timespec ts = { 0, 10 * 1000000L };
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* ---- an exec's streams ---- */

typedef struct sink {
    /* the script's: capped, live */
    const al_box_config *cfg;
    char *buf[2];
    size_t len[2], cap;
    uint64_t total[2];
    bool truncated[2], over;
    /* a tar's: stdout into FD up to MAX bytes */
    int fd;
    uint64_t max, written;
    bool too_big;
    char err_text[512];
    size_t err_len;
} sink;

static void on_script_data(int stream, const char *buf, size_t len, void *ud) {
    sink *s = ud;
    int i = stream == 1 ? 0 : 1;
    s->total[i] += len;
    size_t room = s->cap - s->len[i], keep = len < room ? len : room;
    if (keep) {
        memcpy(s->buf[i] + s->len[i], buf, keep);
        s->len[i] += keep;
        if (s->cfg->on_output)
            s->cfg->on_output(i ? AL_STREAM_STDERR : AL_STREAM_STDOUT, buf, keep, s->cfg->userdata);
    }
    if (keep < len) {
        s->truncated[i] = true;
        s->over = true;
    }
}

static void on_tar_data(int stream, const char *buf, size_t len, void *ud) {
    sink *s = ud;
    if (stream == 2) {
        size_t k = len < sizeof s->err_text - 1 - s->err_len ? len : sizeof s->err_text - 1 - s->err_len;
        memcpy(s->err_text + s->err_len, buf, k);
        s->err_len += k;
        s->err_text[s->err_len] = '\0';
        return;
    }
    if (s->fd < 0 || s->too_big)
        return;
    if (s->written + len > s->max) {
        s->too_big = true;
        return;
    }
    if (al_write_all(s->fd, buf, len) == 0)
        s->written += len;
}

/* Run exec ID to its end with IN_FD's bytes as its stdin (-1: none), its
 * output to SINK through ON_DATA. For the script: DEADLINE (ms, 0 none),
 * CANCEL_FD and the caps, with *KILL_REASON set when it was stopped. */
/* Under gVisor the script's processes are killed from inside, by an exec
 * (kill_argv) that runs while the script's stream is still read: a killed
 * process whose output the daemon is still copying is not reaped until
 * that output is read, and the kill loop would see it alive until then. */
typedef struct inside_kill {
    bool running;
    bool after_end;               /* begun once the script's main process was seen to end */
    char id[80];
    al_engine_stream st;
    sink s;
} inside_kill;

static void kill_begin(dbox *b, inside_kill *k, bool after_end) {
    if (b->o->runtime != AL_DOCKER_RUNSC) {
        kill_script_procs(b);
        return;
    }
    if (k->running)
        return;
    al_error e = { 0 };
    k->s = (sink){ .fd = -1 };
    if (exec_create(b, kill_argv, NULL, "/", false, k->id, &e) < 0 || al_engine_exec_start(&b->e, k->id, &k->st, &e) < 0) {
        kill_container(b); /* and /out with it: the result says so */
        return;
    }
    al_engine_stream_close_stdin(&k->st);
    k->running = true;
    k->after_end = after_end;
}

/* The kill exec ended (its stream did): none of the script's is left, or
 * the container is killed whole. */
static void kill_end(dbox *b, inside_kill *k) {
    al_engine_stream_close(&k->st);
    k->running = false;
    al_error e = { 0 };
    /* none left is final only once the main process had ended: a kill
     * begun before (a timeout, or a script not yet seen to start) may
     * have run before a late process of it, and the last kill runs too */
    if (exec_exit(b, k->id, &e) != 0)
        kill_container(b);
    else if (k->after_end)
        b->inside_clean = true;
}

/* What is left of a kill exec after the script's stream ended: read to
 * its end, for KILL_GRACE_MS at most. */
static void kill_finish(dbox *b, inside_kill *k) {
    uint64_t until = al_now_ms() + KILL_GRACE_MS;
    while (k->running && !k->st.eof && al_now_ms() < until) {
        struct pollfd p = { .fd = k->st.fd, .events = POLLIN };
        uint64_t now = al_now_ms();
        if (poll(&p, 1, until > now ? (int)(until - now) : 0) > 0 && al_engine_stream_read(&k->st, on_tar_data, &k->s) < 0)
            break;
    }
    if (!k->running)
        return;
    if (k->st.eof) {
        kill_end(b, k);
        return;
    }
    al_engine_stream_close(&k->st);
    k->running = false;
    kill_container(b);
}

/* Under gVisor the host cgroup holds the sandbox's own processes (the
 * ptrace platform's, one per address space): at its cap the sandbox dies
 * whole, and its cgroup with it, so what it last showed is kept to say why. */
static void watch_sandbox(dbox *b) {
    uint64_t v = 0;
    if (al_cgroup_read_u64(b->cg_pids, "pids.current", &v) == 0)
        b->pids_current_seen = v;
    if (al_cgroup_read_key(b->cg_pids, "pids.events", "max", &v) == 0 && v > b->pids_hits_seen)
        b->pids_hits_seen = v;
    uint64_t peak = 0;
    if (b->cg_mem[0] && al_cgroup_read_u64(b->cg_mem, "memory.max_usage_in_bytes", &peak) == 0 &&
        peak > b->mem_peak_seen)
        b->mem_peak_seen = peak;
    if (b->cg_mem[0])
        al_cgroup_read_key(b->cg_mem, "memory.oom_control", "oom_kill", &b->oom_seen);
}

static int exec_pump(dbox *b, const char *id, int in_fd, void (*on_data)(int, const char *, size_t, void *), sink *s,
                     uint64_t deadline, int cancel_fd, al_reason *kill_reason, al_error *err) {
    inside_kill ik = { 0 };
    al_engine_stream st;
    int r = al_engine_exec_start(&b->e, id, &st, err);
    if (r < 0)
        return r;
    /* the script's main process, by pidfd on the exec's host pid (runc's
     * process, or runsc's exec that waits for it): when it ends, whatever
     * it left behind is killed, as the native box's pid namespace does,
     * rather than holding the streams open */
    _cleanup_close_ int main_fd = -1;
    if (kill_reason) {
        char path[200];
        snprintf(path, sizeof path, "/exec/%s/json", id);
        for (int i = 0; main_fd < 0 && i < 100; i++) {
            json_t *ans = NULL;
            al_error ie = { 0 };
            if (call_ok(b, "GET", path, NULL, &ans, &ie) < 0)
                break;
            int pid = (int)json_integer_value(json_object_get(ans, "Pid"));
            bool running = json_is_true(json_object_get(ans, "Running"));
            json_decref(ans);
            if (pid > 0)
                main_fd = (int)syscall(SYS_pidfd_open, pid, 0);
            if (main_fd >= 0 || (!running && pid > 0))
                break;
            struct timespec ts = { 0, 2 * 1000000L };
            nanosleep(&ts, NULL);
        }
    }
    /* ended before it could be watched (its pid gone, or inspect already
     * says so): it is done, and what it left is killed now */
    bool main_done = false;
    uint64_t drain_until = 0;
    if (kill_reason && main_fd < 0) {
        main_done = true;
        drain_until = al_now_ms() + DRAIN_MS;
        kill_begin(b, &ik, false);
    }
    char inbuf[65536];
    size_t in_len = 0, in_off = 0;
    bool in_open = in_fd >= 0, killed = false;
    if (!in_open)
        al_engine_stream_close_stdin(&st);
    uint64_t kill_deadline = 0, next_tick = al_now_ms() + PIDS_TICK_MS, pids_hits = 0;
    int pids_streak = 0;
    while (!st.eof) {
        uint64_t now = al_now_ms();
        /* the main process is gone and its leftovers were killed: what they
         * wrote drains, but a stream the daemon holds open (a sandbox that
         * died whole) is not waited for */
        if (main_done && now >= drain_until)
            break;
        al_reason why = AL_REASON_EXITED;
        if (!killed && deadline && now >= deadline)
            why = AL_REASON_TIMEOUT;
        if (!killed && s->over)
            why = AL_REASON_OUTPUT_LIMIT;
        if (!killed && kill_reason && b->cg_pids[0] && b->o->runtime == AL_DOCKER_RUNSC && now >= next_tick) {
            watch_sandbox(b);
            next_tick = now + PIDS_TICK_MS;
        }
        if (!killed && kill_reason && b->cg_pids[0] && b->o->runtime == AL_DOCKER_RUNC && now >= next_tick) {
            /* a fork bomb holds the pids cap: killed as "pids", as native */
            uint64_t cur = 0, max_hits = 0;
            al_cgroup_read_u64(b->cg_pids, "pids.current", &cur);
            al_cgroup_read_key(b->cg_pids, "pids.events", "max", &max_hits);
            /* at the cap, tick after tick, after a refused fork: a fork
             * bomb (the native box's rule) */
            bool full = max_hits > 0 && cur + 2 >= b->cfg->limits.pids;
            pids_streak = full || max_hits > pids_hits ? pids_streak + 1 : 0;
            pids_hits = max_hits;
            if (pids_streak >= PIDS_STREAK)
                why = AL_REASON_PIDS;
            next_tick = now + PIDS_TICK_MS;
        }
        if (why == AL_REASON_TIMEOUT && !kill_reason) {
            /* one of airlock's own execs (tar, kill) that does not end */
            r = al_err(err, "docker", ETIMEDOUT, "an exec of airlock's in the box did not end in time");
            break;
        }
        if (why != AL_REASON_EXITED && kill_reason) {
            *kill_reason = why;
            killed = true;
            kill_deadline = now + KILL_GRACE_MS;
            kill_begin(b, &ik, false);
        }
        if (killed && now >= kill_deadline) {
            r = al_err(err, "kill", ETIMEDOUT, "the script's processes did not die within %d ms of SIGKILL",
                       KILL_GRACE_MS);
            break;
        }
        if (in_open && in_off == in_len) {
            ssize_t k = read(in_fd, inbuf, sizeof inbuf);
            if (k <= 0) {
                in_open = false;
                al_engine_stream_close_stdin(&st);
            } else {
                in_len = (size_t)k;
                in_off = 0;
            }
        }
        struct pollfd p[4] = { { .fd = st.fd, .events = POLLIN | (in_open ? POLLOUT : 0) },
                               { .fd = main_done ? -1 : main_fd, .events = POLLIN },
                               { .fd = killed ? -1 : cancel_fd, .events = POLLIN },
                               { .fd = ik.running ? ik.st.fd : -1, .events = POLLIN } };
        nfds_t np = 4;
        uint64_t until = main_done ? drain_until : killed ? kill_deadline : deadline ? deadline : now + 1000;
        if (kill_reason && b->cg_pids[0] && !killed && !main_done && next_tick < until)
            until = next_tick;
        int k = poll(p, np, until > now ? (int)(until - now) : 0);
        if (k < 0 && errno != EINTR) {
            r = al_err(err, "supervise", errno, "poll: %m");
            break;
        }
        if (k <= 0)
            continue;
        if (p[1].revents) {
            /* the main process ended: nothing of it may outlive it. A
             * sandbox that died at its cap ends it so, and its cgroup goes
             * soon after: read now what it shows, not at the next tick */
            if (!main_done && kill_reason && b->cg_pids[0] && b->o->runtime == AL_DOCKER_RUNSC)
                watch_sandbox(b);
            main_done = true;
            drain_until = al_now_ms() + DRAIN_MS;
            if (!killed)
                kill_begin(b, &ik, true);
        }
        if (p[2].revents) {
            if (kill_reason)
                *kill_reason = AL_REASON_CANCELED;
            killed = true;
            kill_deadline = al_now_ms() + KILL_GRACE_MS;
            kill_begin(b, &ik, false);
        }
        if (p[0].revents & POLLOUT && in_open && in_off < in_len) {
            ssize_t w = al_engine_stream_write(&st, inbuf + in_off, in_len - in_off);
            if (w < 0) {
                in_open = false; /* the process closed its stdin */
            } else {
                in_off += (size_t)w;
            }
        }
        if (p[3].revents && ik.running) {
            if (al_engine_stream_read(&ik.st, on_tar_data, &ik.s) < 0 || ik.st.eof)
                kill_end(b, &ik);
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            int q = al_engine_stream_read(&st, on_data, s);
            if (q < 0) {
                r = al_err(err, "docker", -q, "the exec's stream: %s", strerror(-q));
                break;
            }
        }
    }
    al_engine_stream_close(&st);
    if (ik.running)
        kill_finish(b, &ik);
    /* output past the cap is output_limit even when the script ended
     * before it could be stopped, as on the native box */
    if (r == 0 && kill_reason && s->over && *kill_reason == AL_REASON_EXITED)
        *kill_reason = AL_REASON_OUTPUT_LIMIT;
    return r;
}

/* Run ARGV as the script's uid to its end, stdin from IN_FD, stdout to
 * OUT_FD (at most MAX bytes). Returns its exit code, or -errno. */
static int exec_tar(dbox *b, char *const *argv, int in_fd, int out_fd, uint64_t max, bool *too_big, al_error *err) {
    char id[80];
    int r = exec_create(b, argv, NULL, "/", in_fd >= 0, id, err);
    if (r < 0)
        return r;
    sink s = { .fd = out_fd, .max = max };
    r = exec_pump(b, id, in_fd, on_tar_data, &s, al_now_ms() + 120000, -1, NULL, err);
    if (r < 0)
        return r;
    if (too_big)
        *too_big = s.too_big;
    snprintf(b->tar_err, sizeof b->tar_err, "%s", s.err_text);
    int code = exec_exit(b, id, err);
    if (code != 0)
        return al_err(err, "docker", EIO, "%s in the box exited %d: %.300s", argv[0], code, s.err_text);
    return 0;
}

/* ---- our scratch tmpfs: staging and collection ---- */

static int scratch_mount(dbox *b, uint64_t bytes, al_error *err) {
    /* in a mount namespace of this process's own, so it is gone with us
     * whatever way we die */
    if (!b->unshared && unshare(CLONE_NEWNS) < 0)
        return al_err(err, "scratch", errno, "unshare(CLONE_NEWNS): %m");
    if (!b->unshared && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return al_err(err, "scratch", errno, "make mounts private: %m");
    b->unshared = true;
    snprintf(b->scratch, sizeof b->scratch, "/tmp/airlock-docker-XXXXXX");
    if (!mkdtemp(b->scratch)) {
        b->scratch[0] = '\0';
        return al_err(err, "scratch", errno, "mkdtemp: %m");
    }
    char opts[120];
    snprintf(opts, sizeof opts, "size=%llu,nr_inodes=%llu,mode=0700", (unsigned long long)bytes,
             (unsigned long long)(b->cfg->limits.tmpfs_inodes * 2 + b->cfg->limits.stage_files + 64));
    if (mount("airlock-docker", b->scratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
        return al_err(err, "scratch", errno, "mount a tmpfs: %m");
    b->scratch_mounted = true;
    return 0;
}

static void scratch_unmount(dbox *b) {
    if (b->scratch_mounted)
        umount2(b->scratch, MNT_DETACH);
    if (b->scratch[0])
        rmdir(b->scratch);
    b->scratch_mounted = false;
    b->scratch[0] = '\0';
}

/* A subdirectory of the scratch, owned by OWNER. */
static int scratch_dir(dbox *b, const char *name, uid_t owner, al_error *err) {
    char p[200];
    snprintf(p, sizeof p, "%s/%s", b->scratch, name);
    if (mkdir(p, 0700) < 0 || chown(p, owner, owner) < 0)
        return al_err(err, "scratch", errno, "mkdir %s: %m", p);
    int fd = open(p, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    return fd < 0 ? al_err(err, "scratch", errno, "open %s: %m", p) : fd;
}

/* Write the tree at DIR (ours: regular files, directories) as a tar into a
 * memfd, with paths under PREFIX and owned by UID. */
static int pack(const char *dir, uid_t uid, al_error *err) {
    int mfd = memfd_create("airlock-stage", MFD_CLOEXEC);
    if (mfd < 0)
        return al_err(err, "stage", errno, "memfd_create: %m");
    struct archive *disk = archive_read_disk_new(), *w = archive_write_new();
    int r = 0;
    _cleanup_close_ int cwd = -1;
    if (!disk || !w) {
        r = al_err(err, "stage", ENOMEM, "libarchive");
        goto out;
    }
    archive_read_disk_set_symlink_physical(disk);
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS | ARCHIVE_READDISK_NO_XATTR |
                                             ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS);
    archive_write_set_format_pax_restricted(w);
    /* relative names: the tar holds work/... and tmp/... */
    cwd = open(".", O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (cwd < 0 || chdir(dir) < 0) {
        r = al_err(err, "stage", errno, "chdir: %m");
        goto out;
    }
    if (archive_write_open_fd(w, mfd) != ARCHIVE_OK || archive_read_disk_open(disk, ".") != ARCHIVE_OK) {
        r = al_err(err, "stage", EIO, "libarchive: %s", archive_error_string(w) ?: archive_error_string(disk));
        goto out;
    }
    for (;;) {
        struct archive_entry *ent = archive_entry_new();
        int k = archive_read_next_header2(disk, ent);
        if (k == ARCHIVE_EOF) {
            archive_entry_free(ent);
            break;
        }
        if (k != ARCHIVE_OK) {
            archive_entry_free(ent);
            r = al_err(err, "stage", EIO, "read the stage: %s", archive_error_string(disk));
            break;
        }
        archive_read_disk_descend(disk);
        const char *pn = archive_entry_pathname(ent);
        if (strcmp(pn, ".") == 0) {
            archive_entry_free(ent);
            continue;
        }
        archive_entry_set_uid(ent, uid);
        archive_entry_set_gid(ent, uid);
        archive_entry_set_uname(ent, NULL);
        archive_entry_set_gname(ent, NULL);
        if (archive_write_header(w, ent) != ARCHIVE_OK) {
            r = al_err(err, "stage", EIO, "write the stage: %s", archive_error_string(w));
            archive_entry_free(ent);
            break;
        }
        if (archive_entry_filetype(ent) == AE_IFREG) {
            _cleanup_close_ int fd = open(archive_entry_sourcepath(ent) ?: pn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            char buf[65536];
            ssize_t n;
            while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
                archive_write_data(w, buf, (size_t)n);
        }
        archive_entry_free(ent);
    }
    if (archive_write_close(w) != ARCHIVE_OK && r == 0)
        r = al_err(err, "stage", EIO, "finish the stage: %s", archive_error_string(w));
out:
    if (cwd >= 0 && fchdir(cwd) < 0 && r == 0)
        r = al_err(err, "stage", errno, "fchdir: %m");
    if (disk)
        archive_read_free(disk);
    if (w)
        archive_write_free(w);
    if (r < 0) {
        close(mfd);
        return r;
    }
    lseek(mfd, 0, SEEK_SET);
    return mfd;
}

/* Under runc the container's tmpfs mounts are this host's: its root is
 * reached through its init's /proc/PID/root, by pidfd (the pid cannot have
 * been reused while the process it names is alive), and /work, /out, /tmp
 * are opened beneath it with no link followed and checked to be tmpfs. The
 * native box's staging and collection then apply as they are, with the
 * script's uid's file rights. (gVisor's mounts live in its Sentry: there
 * the tar streams below are the way.) */
static int open_root(dbox *b, al_error *err) {
    int pidfd = b->init_fd;
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/root", (int)b->init_pid);
    int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return al_err(err, "docker", errno, "open the container's root: %m");
    struct pollfd pf = { .fd = pidfd, .events = POLLIN };
    if (poll(&pf, 1, 0) != 0) {
        close(fd);
        return al_err(err, "docker", ESRCH, "the container's init ended while its root was opened");
    }
    b->rootfd = fd;
    return 0;
}

static int open_scratch(dbox *b, const char *name, al_error *err) {
    struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
    int fd = (int)syscall(SYS_openat2, b->rootfd, name, &how, sizeof how);
    if (fd < 0)
        return al_err(err, "docker", errno, "open the container's /%s: %m", name);
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
        close(fd);
        return al_err(err, "docker", EXDEV, "the container's /%s is not its tmpfs", name);
    }
    return fd;
}

/* The run's files and inputs into the directory OPEN_DIR gives for "work",
 * and the image's /tmp seed into the one for "tmp", with the native box's
 * staging rules and the script's uid's file rights: the container's own
 * tmpfs (runc) or our scratch, packed afterwards (gVisor). */
static int stage_into(dbox *b, int (*open_dir)(dbox *, const char *, al_error *), al_error *err) {
    const al_box_config *cfg = b->cfg;
    _cleanup_close_ int workfd = open_dir(b, "work", err);
    if (workfd < 0)
        return workfd;
    al_stage st = { .workfd = workfd, .uid = b->uid, .gid = b->uid, .max_files = cfg->limits.stage_files,
                    .max_bytes = cfg->limits.stage_bytes, .max_depth = cfg->limits.max_depth };
    int r = 0;
    for (size_t i = 0; r == 0 && i < cfg->n_files; i++)
        r = al_stage_data(&st, cfg->files[i].name, cfg->files[i].data, cfg->files[i].len, cfg->files[i].mode, err);
    for (size_t i = 0; r == 0 && i < cfg->n_inputs; i++)
        r = al_stage_path(&st, cfg->inputs[i], err);
    const al_runtime *rt = cfg->runtime;
    if (r == 0 && rt->tmp_seed && rt->tmp_seed_root) {
        _cleanup_close_ int tmpfd = open_dir(b, "tmp", err);
        if (tmpfd < 0)
            return tmpfd;
        al_stage ts = st;
        ts.workfd = tmpfd;
        ts.files = ts.bytes = 0;
        ts.max_bytes = cfg->limits.tmpfs_bytes;
        ts.max_files = cfg->limits.tmpfs_inodes;
        r = al_stage_beneath_as(&ts, rt->tmp_seed_root, rt->tmp_seed, rt->tmp_seed_name, err);
    }
    return r;
}

/* The native box's collection caps for this run, reading as UID. */
static al_collect_limits collect_limits(const dbox *b, uid_t uid) {
    const al_box_limits *l = &b->cfg->limits;
    return (al_collect_limits){
        .max_files = l->max_artifacts, .max_file_bytes = l->max_artifact_bytes,
        .max_total_bytes = l->max_artifacts_total, .max_depth = l->max_depth,
        .max_entries = l->max_artifacts * 10 + 1000, .uid = uid, .gid = uid,
    };
}

static int collect_direct(dbox *b, al_error *err) {
    _cleanup_close_ int outfd = open_scratch(b, "out", err);
    if (outfd < 0)
        return outfd;
    al_collect_limits cl = collect_limits(b, b->uid);
    return al_collect(outfd, b->cfg->out_dirfd, &cl, b->res, err);
}

static int scratch_box_dir(dbox *b, const char *name, al_error *err) { return scratch_dir(b, name, b->uid, err); }

static int stage(dbox *b, al_error *err) {
    int r = stage_into(b, scratch_box_dir, err);
    if (r < 0)
        return r;
    _cleanup_close_ int tar = pack(b->scratch, b->uid, err);
    if (tar < 0)
        return tar;
    char *argv[] = { "tar", "-x", "-f", "-", "-C", "/", "--no-same-owner", "--no-overwrite-dir", NULL };
    r = exec_tar(b, argv, tar, -1, 0, NULL, err);
    /* the staged copies are in the box now: their memory goes */
    scratch_unmount(b);
    return r;
}

/* ---- collection: /out through tar, onto our tmpfs, then al_collect ---- */

/* Make the directories of REL (a path from the tar) beneath DIRFD and
 * return an fd of its parent, with its last component in *LEAF. */
static int open_parent(int dirfd, char *rel, const char **leaf, unsigned max_depth) {
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    unsigned depth = 0;
    char *save = NULL, *part = strtok_r(rel, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        if (!next) {
            *leaf = part;
            return cur;
        }
        if (strcmp(part, ".") == 0) {
            part = next;
            continue;
        }
        if (strcmp(part, "..") == 0 || ++depth > max_depth + 1) {
            close(cur);
            return -EINVAL;
        }
        mkdirat(cur, part, 0700);
        int fd = al_openat_beneath(cur, part, O_DIRECTORY | O_RDONLY, 0);
        close(cur);
        if (fd < 0)
            return fd;
        cur = fd;
        part = next;
    }
    close(cur);
    return -EINVAL;
}


static int unpack(dbox *b, int tarfd, int outfd, al_error *err) {
    const al_box_limits *l = &b->cfg->limits;
    struct archive *a = archive_read_new();
    if (!a)
        return al_err(err, "collect", ENOMEM, "libarchive");
    archive_read_support_format_tar(a);
    int r = 0;
    if (archive_read_open_fd(a, tarfd, 65536) != ARCHIVE_OK) {
        r = al_err(err, "collect", EIO, "read /out's tar: %s", archive_error_string(a));
        archive_read_free(a);
        return r;
    }
    uint64_t entries = 0, max_entries = l->max_artifacts * 10 + 1000;
    struct archive_entry *ent;
    while (r == 0 && archive_read_next_header(a, &ent) == ARCHIVE_OK) {
        const char *pn = archive_entry_pathname(ent);
        if (!pn)
            continue;
        if (++entries > max_entries) {
            r = al_collect_add_skip(b->res, pn, "entry limit reached: the rest of /out was not examined");
            break;
        }
        char rel[4096];
        snprintf(rel, sizeof rel, "%s", pn);
        size_t n = strlen(rel);
        while (n > 1 && rel[n - 1] == '/')
            rel[--n] = '\0';
        if (strcmp(rel, ".") == 0 || strcmp(rel, "./") == 0)
            continue;
        const char *leaf = NULL;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", rel);
        int pfd = open_parent(outfd, tmp, &leaf, (unsigned)l->max_depth);
        const char *shown = strncmp(rel, "./", 2) == 0 ? rel + 2 : rel;
        if (pfd < 0) {
            /* past the depth cap (or not a path beneath /out): collect
             * names the directory at the cap, as it does for the native box */
            continue;
        }
        mode_t type = archive_entry_filetype(ent);
        if (type == AE_IFDIR) {
            mkdirat(pfd, leaf, 0700);
        } else if (type == AE_IFREG && !archive_entry_hardlink(ent)) {
            int fd = al_openat_beneath(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL, 0600);
            /* past the per-file cap is enough for collect to skip it */
            uint64_t left = l->max_artifact_bytes + 1;
            char buf[65536];
            la_ssize_t k = 0;
            while (fd >= 0 && left && (k = archive_read_data(a, buf, sizeof buf < left ? sizeof buf : left)) > 0) {
                if (al_write_all(fd, buf, (size_t)k) < 0)
                    break;
                left -= (uint64_t)k;
            }
            if (fd >= 0)
                close(fd);
            /* a file the stream ended inside (the tar cut at its bound) is
             * not an artifact: what there is of it is not what /out held */
            if (fd >= 0 && k < 0) {
                unlinkat(pfd, leaf, 0);
                r = al_collect_add_skip(b->res, shown, "cut off: /out's tar exceeded its bound");
            }
        } else if (archive_entry_hardlink(ent)) {
            /* another name of a file already extracted */
            char tgt[4096];
            snprintf(tgt, sizeof tgt, "%s", archive_entry_hardlink(ent));
            int src = al_openat_beneath(outfd, strncmp(tgt, "./", 2) == 0 ? tgt + 2 : tgt, O_PATH, 0);
            if (src >= 0) {
                if (linkat(src, "", pfd, leaf, AT_EMPTY_PATH) < 0)
                    r = al_collect_add_skip(b->res, shown, "a hard link that could not be read back");
                close(src);
            }
        } else if (type == AE_IFLNK) {
            /* made as what it was, so collect names it as native does */
            if (symlinkat(archive_entry_symlink(ent) ?: "", pfd, leaf) < 0)
                r = al_collect_add_skip(b->res, shown, "symbolic link (not followed)");
        } else if (type == AE_IFIFO) {
            mknodat(pfd, leaf, S_IFIFO | 0600, 0);
        } else {
            r = al_collect_add_skip(b->res, shown, "not a regular file");
        }
        close(pfd);
    }
    archive_read_free(a);
    return r;
}

/* What tar --ignore-failed-read left out ("tar: ./P: Warning: Cannot open:
 * Permission denied", a file the script made unreadable) is a skip, as the
 * native box's collection names it, never a silent loss. Past what its
 * kept stderr holds, "." says more may be left out. */
static void tar_unreadable(dbox *b) {
    bool full = strlen(b->tar_err) >= sizeof b->tar_err - 1;
    char *save = NULL;
    for (char *l = strtok_r(b->tar_err, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *end = strstr(l, ": Cannot open: ");
        if (strncmp(l, "tar: ", 5) != 0 || !end)
            continue;
        *end = '\0';
        /* --ignore-failed-read says it as a warning */
        size_t n = strlen(l);
        if (n >= 5 + 9 && strcmp(l + n - 9, ": Warning") == 0)
            l[n - 9] = '\0';
        const char *p = strncmp(l + 5, "./", 2) == 0 ? l + 7 : l + 5;
        char why[160];
        snprintf(why, sizeof why, "unreadable: %s", end + strlen(": Cannot open: "));
        al_collect_add_skip(b->res, p, why);
    }
    if (full)
        al_collect_add_skip(b->res, ".", "the box's tar could not read more of /out than it could name");
}

static int collect(dbox *b, al_error *err) {
    const al_box_limits *l = &b->cfg->limits;
    int r = scratch_mount(b, l->tmpfs_bytes + (4u << 20), err);
    if (r < 0)
        return r;
    _cleanup_close_ int outfd = scratch_dir(b, "out", 0, err);
    if (outfd < 0)
        return outfd;
    _cleanup_close_ int mfd = memfd_create("airlock-out", MFD_CLOEXEC);
    if (mfd < 0)
        return al_err(err, "collect", errno, "memfd_create: %m");
    uint64_t max = l->tmpfs_bytes + l->tmpfs_inodes * TAR_PER_ENTRY + (1u << 20);
    bool too_big = false;
    /* everything under /out, as tar finds it; no link followed (tar's default) */
    /* a file the script made unreadable (mode 000) is left out, not a
     * failure: collect would not read it on the native box either */
    char *targv[] = { "tar", "-c", "-f", "-", "--ignore-failed-read", "-C", "/out", ".", NULL };
    al_error terr = { 0 };
    r = exec_tar(b, targv, -1, mfd, max, &too_big, &terr);
    if (r == -EIO) {
        /* tar itself failed on what the script left in /out: whatever the
         * script can cause is the run's outcome, never airlock's error */
        return al_collect_add_skip(b->res, ".", "/out could not be read whole: the box's tar failed");
    }
    if (r < 0) {
        *err = terr;
        return r;
    }
    if (too_big)
        al_collect_add_skip(b->res, ".", "/out's tar exceeded its bound: the rest of /out was not examined");
    tar_unreadable(b);
    lseek(mfd, 0, SEEK_SET);
    if ((r = unpack(b, mfd, outfd, err)) < 0)
        return r;
    /* extracted by us as root: read as root, beneath our own tmpfs */
    al_collect_limits cl = collect_limits(b, 0);
    return al_collect(outfd, b->cfg->out_dirfd, &cl, b->res, err);
}

/* ---- the network listener, in the container's network namespace ---- */

static int listener(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    if (b->o->runtime == AL_DOCKER_RUNSC)
        return al_err(err, "network", ENOTSUP,
                      "network policies other than offline are not available under gVisor here (runsc "
                      "--network=none: its own network stack, which no listener outside can reach)");
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/ns/net", (int)b->init_pid);
    _cleanup_close_ int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    _cleanup_close_ int ns = open(p, O_RDONLY | O_CLOEXEC);
    if (self < 0 || ns < 0)
        return al_err(err, "network", errno, "open the container's network namespace: %m");
    if (setns(ns, CLONE_NEWNET) < 0)
        return al_err(err, "network", errno, "enter the container's network namespace: %m");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int e = errno;
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(cfg->listen_port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    /* back to ours before anything else: the proxy connects from here */
    if (setns(self, CLONE_NEWNET) < 0) {
        if (fd >= 0)
            close(fd);
        return al_err(err, "network", errno, "return to our network namespace: %m");
    }
    if (fd < 0)
        return al_err(err, "network", e, "listen on 127.0.0.1:%u in the container: %s", cfg->listen_port,
                      strerror(e));
    int r = cfg->on_listener ? cfg->on_listener(fd, b->uid, b->uid, cfg->userdata, err)
                             : al_err(err, "listener", EINVAL, "a listener without a server");
    close(fd);
    return r;
}

/* ---- the run ---- */

static void kill_container(dbox *b) {
    b->killed_whole = true;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill", b->id);
    al_engine_call(&b->e, "POST", path, NULL, NULL, &e);
}

static void remove_container(dbox *b) {
    if (!b->own || !b->id[0] || !b->engine_open)
        return;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", b->id);
    al_engine_call(&b->e, "DELETE", path, NULL, NULL, &e);
}

/* The kill exec (kill_argv) run to its end: 0 when none of the script's is
 * left. */
static int kill_inside(dbox *b) {
    char **argv = kill_argv;
    al_error e = { 0 };
    char id[80];
    int r = exec_create(b, argv, NULL, "/", false, id, &e);
    if (r == 0) {
        sink s = { .fd = -1 };
        r = exec_pump(b, id, -1, on_tar_data, &s, al_now_ms() + KILL_GRACE_MS, -1, NULL, &e);
    }
    if (r == 0 && exec_exit(b, id, &e) != 0)
        r = -EBUSY;
    return r;
}

static void read_stats(dbox *b) {
    uint64_t v = 0;
    if (b->cg_cpu[0] && al_cgroup_read_u64(b->cg_cpu, "cpuacct.usage", &v) == 0)
        b->res->cpu_ms = v / 1000000;
    if (b->cg_mem[0] && al_cgroup_read_u64(b->cg_mem, "memory.max_usage_in_bytes", &v) == 0)
        b->res->peak_memory_bytes = v;
}

/* Did the script's processes meet the container's pids cap? Under gVisor
 * the host cgroup holds the sandbox's own processes (one per address space
 * on the ptrace platform) and the cgroup may be gone with a sandbox that
 * died at the cap, so what the run last saw of it counts too. */
static bool pids_cap_hit(dbox *b) {
    uint64_t hits = b->pids_hits_seen;
    if (b->cg_pids[0])
        al_cgroup_read_key(b->cg_pids, "pids.events", "max", &hits);
    return hits > 0 || b->pids_hits_seen > 0;
}

static bool oom_killed(dbox *b) {
    uint64_t v = 0;
    if (b->cg_mem[0] && al_cgroup_read_key(b->cg_mem, "memory.oom_control", "oom_kill", &v) == 0 && v > 0)
        return true;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    json_t *ins = NULL;
    bool oom = false;
    if (call_ok(b, "GET", path, NULL, &ins, &e) >= 0)
        oom = json_is_true(json_object_get(json_object_get(ins, "State"), "OOMKilled"));
    json_decref(ins);
    return oom;
}

static bool container_running(dbox *b) {
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    json_t *ins = NULL;
    bool up = call_ok(b, "GET", path, NULL, &ins, &e) >= 0 &&
              json_is_true(json_object_get(json_object_get(ins, "State"), "Running"));
    json_decref(ins);
    return up;
}

/* The container the owner made ahead of need (o->held) as this run's:
 * only if its holder outlives the run and the daemon says it was made for
 * this run's limits and uids. Its owner removes it, never this run. */
static int use_held(dbox *b, al_error *err) {
    const al_docker_held *h = b->o->held;
    if ((uint64_t)h->hold_until_s < (uint64_t)time(NULL) + b->cfg->limits.wall_ms / 1000 + HOLD_MARGIN_S)
        return al_err(err, "docker", ESTALE, "the held container's holder ends before this run could");
    if (!h->id[0] || strspn(h->id, "0123456789abcdef") != strlen(h->id) || !h->holder || !h->uid)
        return al_err(err, "docker", EINVAL, "the held container is not named");
    snprintf(b->id, sizeof b->id, "%s", h->id);
    snprintf(b->res->engine_image, sizeof b->res->engine_image, "%s", h->image_id);
    b->holder = h->holder;
    b->uid = h->uid;
    int r = inspect_init(b, true, err);
    if (r == 0)
        b->res->pooled = true;
    return r;
}

static int run(dbox *b, al_error *err) {
    const al_box_config *cfg = b->cfg;
    al_box_result *res = b->res;
    if (!cfg->runtime || !cfg->runtime->digest || !b->o->image_dir)
        return al_err(err, "docker", EINVAL, "the docker driver runs on an image (--image default), not the host's /usr");
    const char *digest = cfg->runtime->digest;
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    char sock[108];
    int r = al_engine_socket_path(b->o->socket, sock, sizeof sock, err);
    if (r < 0 || (r = al_engine_open(&b->e, sock, err)) < 0)
        return r;
    b->engine_open = true;
    /* a container made ahead of need, when it is still fit for this run;
     * else (it died idle, say) one of its own, as if there were no pool */
    if (b->o->held && use_held(b, err) < 0) {
        memset(err, 0, sizeof *err);
        b->id[0] = '\0';
        b->holder = b->uid = 0;
        res->pooled = false;
    }
    if (!res->pooled) {
        if ((r = al_docker_image(&b->e, b->o->image_dir, digest, res->engine_image, err)) < 0)
            return r;
        if ((r = al_uid_acquire(&b->holder, &b->holder_lock, err)) < 0 ||
            (r = al_uid_acquire(&b->uid, &b->uid_lock, err)) < 0)
            return r;
    }
    res->controls.host_uid = b->uid;
    res->controls.host_uid_unique = true;
    /* gVisor's stage: /work's inputs and the image's /tmp seed, packed */
    if (b->o->runtime == AL_DOCKER_RUNSC &&
        (r = scratch_mount(b, cfg->limits.stage_bytes + cfg->limits.tmpfs_bytes + (4u << 20), err)) < 0)
        return r;
    b->hold_s = cfg->limits.wall_ms / 1000 + HOLD_MARGIN_S;
    if (!res->pooled && ((r = create(b, res->engine_image, err)) < 0 || (r = start_and_inspect(b, err)) < 0))
        return r;
    if (cfg->listen_port && (r = listener(b, err)) < 0)
        return r;
    bool direct = b->o->runtime == AL_DOCKER_RUNC;
    if (direct && (r = open_root(b, err)) < 0)
        return r;
    if ((r = direct ? stage_into(b, open_scratch, err) : stage(b, err)) < 0)
        return r;

    char id[80];
    /* stdin only when the run has one: without, the exec's is /dev/null */
    if ((r = exec_create(b, cfg->argv, cfg->envp, "/work", cfg->stdin_fd >= 0, id, err)) < 0)
        return r;
    sink s = { .cfg = cfg, .cap = cfg->limits.output_bytes };
    for (int i = 0; i < 2; i++)
        if (!(s.buf[i] = malloc(s.cap + 1))) {
            free(s.buf[0]);
            return -ENOMEM;
        }
    if (cfg->on_started)
        cfg->on_started(cfg->userdata);
    uint64_t start = al_now_ms();
    al_reason reason = AL_REASON_EXITED;
    r = exec_pump(b, id, cfg->stdin_fd, on_script_data, &s, start + cfg->limits.wall_ms,
                  cfg->cancel_fd, &reason, err);
    res->wall_ms = al_now_ms() - start;
    for (int i = 0; i < 2; i++) {
        s.buf[i][s.len[i]] = '\0';
        res->out[i] = s.buf[i];
        res->out_len[i] = s.len[i];
        res->out_total[i] = s.total[i];
        res->out_truncated[i] = s.truncated[i];
    }
    if (r < 0)
        return r;
    if (!container_running(b)) {
        /* the container died whole (gVisor's sandbox over its memory cap is
         * killed by this host's kernel): /out went with it */
        read_stats(b);
        /* the script's own end, when the daemon still knows it */
        al_error xe = { 0 };
        int xc = exec_exit(b, id, &xe);
        res->exit_code = xc >= 0 && xc <= 128 ? xc : -1;
        res->signal = xc >= 0 && xc <= 128 ? 0 : SIGKILL;
        if (res->peak_memory_bytes < b->mem_peak_seen)
            res->peak_memory_bytes = b->mem_peak_seen;
        /* its cgroup may be gone with it: what it last showed says why */
        if (oom_killed(b) || b->oom_seen > 0 || b->mem_peak_seen + MEM_NEAR >= cfg->limits.memory_bytes) {
            res->reason = AL_REASON_MEMORY;
            return al_collect_add_skip(res, ".", "the box was killed whole (out of memory): /out could not be read");
        }
        if (pids_cap_hit(b) || b->pids_current_seen + RUNSC_PIDS_NEAR >= cfg->limits.pids + RUNSC_PIDS_OVERHEAD) {
            /* gVisor's ptrace platform takes a host process per address
             * space: at the cap, its sandbox cannot go on */
            res->reason = AL_REASON_PIDS;
            return al_collect_add_skip(res, ".", "the box was killed whole (process limit): /out could not be read");
        }
        if (reason != AL_REASON_EXITED || b->killed_whole) {
            /* stopped by airlock, whole, when its processes would not die:
             * the run's own reason stands (never airlock's error) */
            res->reason = reason;
            return al_collect_add_skip(res, ".", "processes the script left would not die: the box was killed "
                                                 "whole and /out could not be read");
        }
        return al_err(err, "docker", EIO, "the container died while the script ran");
    }
    int code = exec_exit(b, id, err);
    /* Docker says a process killed by signal N exited 128+N */
    if (code > 128 && code <= 128 + 64) {
        res->exit_code = -1;
        res->signal = code - 128;
    } else {
        res->exit_code = code;
        res->signal = 0;
    }
    res->reason = reason;
    /* nothing of the script may still run when /out is read */
    if (b->o->runtime == AL_DOCKER_RUNC) {
        uint64_t until = al_now_ms() + KILL_GRACE_MS;
        int alive;
        while ((alive = kill_script_procs(b)) != 0) {
            /* unreadable: nothing says none is left, so /out is not read */
            if (alive < 0)
                return al_err(err, "kill", -alive, "cannot list the container's processes in %s", b->cg_pids);
            if (al_now_ms() > until)
                return al_err(err, "kill", ETIMEDOUT, "processes of the script are still alive in %s", b->cg_pids);
            struct timespec ts = { 0, 5 * 1000000L };
            nanosleep(&ts, NULL);
        }
    } else if (!b->inside_clean && kill_inside(b) != 0) {
        /* (a kill from inside that found none of the script's left is
         * final: only the script's processes run as its uid) something
         * the script left would not die: /out is not read. A sandbox that
         * hit its process cap dies so, though the daemon may still show
         * it running for a moment: that is the run's pids limit */
        kill_container(b);
        read_stats(b);
        if (res->reason == AL_REASON_EXITED && pids_cap_hit(b))
            res->reason = AL_REASON_PIDS;
        return al_collect_add_skip(res, ".", "processes the script left would not die: the box was killed whole "
                                             "and /out could not be read");
    }
    read_stats(b);
    if (res->reason == AL_REASON_EXITED && oom_killed(b))
        res->reason = AL_REASON_MEMORY;
    else if (res->reason == AL_REASON_EXITED && pids_cap_hit(b))
        res->reason = AL_REASON_PIDS;
    /* hashed, and copied when the caller gave a directory for them */
    return direct ? collect_direct(b, err) : collect(b, err);
}

int al_docker_run(const al_docker_opts *o, const al_box_config *cfg, al_box_result *res) {
    memset(res, 0, sizeof *res);
    res->exit_code = -1;
    res->reason = AL_REASON_ERROR;
    snprintf(res->driver, sizeof res->driver, "docker");
    snprintf(res->engine_runtime, sizeof res->engine_runtime, "%s", al_docker_runtime_name(o->runtime));
    al_docker_controls(o->runtime, &res->controls);
    dbox b = { .o = o, .cfg = cfg, .res = res, .holder_lock = -1, .uid_lock = -1, .rootfd = -1, .init_fd = -1 };
    int r = run(&b, &res->error);
    if (b.rootfd >= 0)
        close(b.rootfd);
    if (b.init_fd >= 0)
        close(b.init_fd);
    remove_container(&b);
    scratch_unmount(&b);
    if (b.engine_open)
        al_engine_close(&b.e);
    if (b.uid_lock >= 0)
        close(b.uid_lock);
    if (b.holder_lock >= 0)
        close(b.holder_lock);
    if (r < 0)
        res->reason = AL_REASON_ERROR;
    return r;
}

int al_docker_hold(const al_docker_opts *o, const al_box_limits *l, uint64_t idle_s, al_docker_held *ret,
                   al_error *err) {
    memset(ret, 0, sizeof *ret);
    ret->holder_lock = ret->uid_lock = -1;
    const char *digest = o->image_digest;
    if (!o->image_dir || !digest)
        return al_err(err, "docker", EINVAL, "a held container is of an image");
    if (strncmp(digest, "sha256:", 7) == 0)
        digest += 7;
    al_box_config cfg = { .limits = *l, .stdin_fd = -1, .cancel_fd = -1, .out_dirfd = -1 };
    al_box_result res = { 0 };
    dbox b = { .o = o, .cfg = &cfg, .res = &res, .holder_lock = -1, .uid_lock = -1, .rootfd = -1, .init_fd = -1 };
    /* its holder lives as long as it may wait, and then as a run's would */
    b.hold_s = idle_s + l->wall_ms / 1000 + HOLD_MARGIN_S;
    char sock[108];
    int r = al_engine_socket_path(o->socket, sock, sizeof sock, err);
    if (r < 0 || (r = al_engine_open(&b.e, sock, err)) < 0)
        return r;
    b.engine_open = true;
    int64_t t0 = (int64_t)time(NULL);
    /* only an image the daemon holds already: the first run of an image
     * loads it (in its helper, a process of its own) */
    if ((r = al_docker_image_loaded(&b.e, digest, ret->image_id, err)) == 0 &&
        (r = al_uid_acquire(&b.holder, &b.holder_lock, err)) == 0 && (r = al_uid_acquire(&b.uid, &b.uid_lock, err)) == 0 &&
        (r = create(&b, ret->image_id, err)) == 0)
        r = start_and_inspect(&b, err);
    if (b.init_fd >= 0)
        close(b.init_fd);
    if (r < 0) {
        remove_container(&b);
        al_engine_close(&b.e);
        if (b.uid_lock >= 0)
            close(b.uid_lock);
        if (b.holder_lock >= 0)
            close(b.holder_lock);
        return r;
    }
    al_engine_close(&b.e);
    snprintf(ret->id, sizeof ret->id, "%s", b.id);
    ret->holder = b.holder;
    ret->uid = b.uid;
    ret->holder_lock = b.holder_lock;
    ret->uid_lock = b.uid_lock;
    ret->hold_until_s = t0 + (int64_t)b.hold_s;
    return 0;
}

bool al_docker_held_alive(const char *socket, const al_docker_held *h) {
    char sock[108], path[200];
    al_error err = { 0 };
    al_engine e;
    if (!h->id[0] || al_engine_socket_path(socket, sock, sizeof sock, &err) < 0 || al_engine_open(&e, sock, &err) < 0)
        return false;
    snprintf(path, sizeof path, "/containers/%s/json", h->id);
    json_t *ins = NULL;
    bool up = al_engine_call(&e, "GET", path, NULL, &ins, &err) == 200 &&
              json_is_true(json_object_get(json_object_get(ins, "State"), "Running"));
    json_decref(ins);
    al_engine_close(&e);
    return up;
}

bool al_docker_release(const char *socket, al_docker_held *h) {
    char sock[108];
    al_error err = { 0 };
    al_engine e;
    int st = -1;
    if (!h->id[0])
        st = 204;
    else if (al_engine_socket_path(socket, sock, sizeof sock, &err) == 0 && al_engine_open(&e, sock, &err) == 0) {
        char path[200];
        snprintf(path, sizeof path, "/containers/%s?force=1&v=1", h->id);
        st = al_engine_call(&e, "DELETE", path, NULL, NULL, &err);
        al_engine_close(&e);
    }
    /* its uids go back only once it is gone (204, or 404: gone already) */
    if (st != 204 && st != 404)
        return false;
    if (h->uid_lock >= 0)
        close(h->uid_lock);
    if (h->holder_lock >= 0)
        close(h->holder_lock);
    h->uid_lock = h->holder_lock = -1;
    h->id[0] = '\0';
    return true;
}

void al_docker_sweep(const char *socket) {
    char sock[108];
    al_error err = { 0 };
    al_engine e;
    if (al_engine_socket_path(socket, sock, sizeof sock, &err) < 0 || al_engine_open(&e, sock, &err) < 0)
        return;
    json_t *list = NULL;
    if (al_engine_call(&e, "GET", "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22" LABEL_BOX "%22%5D%7D",
                       NULL, &list, &err) == 200) {
        size_t i;
        json_t *c;
        json_array_foreach(list, i, c) {
            const char *id = json_string_value(json_object_get(c, "Id"));
            const char *u = json_string_value(json_object_get(json_object_get(c, "Labels"), LABEL_UID));
            unsigned uid = 0;
            if (!id || !u || sscanf(u, "%u", &uid) != 1 || strspn(id, "0123456789abcdef") != strlen(id))
                continue;
            if (!al_uid_is_free((uid_t)uid))
                continue;
            char path[200];
            snprintf(path, sizeof path, "/containers/%s?force=1&v=1", id);
            al_engine_call(&e, "DELETE", path, NULL, NULL, &err);
        }
    }
    json_decref(list);
    al_engine_close(&e);
}
