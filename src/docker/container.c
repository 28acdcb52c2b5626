/* The Docker box: see docker.h. One run:
 *   image (loaded once) -> two uids of the run's own (holder, script) ->
 *   create + start the holder container -> stage /work (+ the image's /tmp
 *   seed) through a tar exec -> the script as an exec, streamed, under the
 *   wall clock and the output caps -> every process of the script's uid
 *   killed -> /out read back through a tar exec -> the container removed.
 * Here: the container and its execs (the script's supervised to its end,
 * tar's, the kill's); the run's steps are run.c's, the files in and out of
 * it tar_io.c's, the containers made ahead of need held.c's (what they
 * share: container_int.h).
 */
#include "container_int.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>

#include "../box/cgroup.h"
#include "../box/collect.h"
#include "../box/uidpool.h"
#include "seccomp_docker.h"

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
int al_docker_kill_script_procs(dbox *b) {
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

/* ---- container calls ---- */

int al_docker_call_ok(dbox *b, const char *method, const char *path, json_t *body, json_t **ret, al_error *err) {
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

/* A skill's bundle at /skill, as the native box has it: bound read-only
 * (not recursively: the store's directory holds no mount), as
 * HostConfig.Mounts. Nothing of it is copied, and nothing runs to put it
 * there. Docker's API has no nosuid or nodev for it: the store holds only
 * regular files and directories (modes normalised), and the script has
 * no_new_privs and no capability. */
static json_t *skill_mount(const char *dir) {
    return json_pack("[{s:s, s:s, s:s, s:b, s:{s:s, s:b}}]", "Type", "bind", "Source", dir, "Target", "/skill",
                     "ReadOnly", 1, "BindOptions", "Propagation", "rprivate", "NonRecursive", 1);
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
 * setting that makes it the run's box. al_docker_same_box() holds a
 * container made ahead of need to it. */
json_t *al_docker_create_body(dbox *b, const char *image_id, al_error *err) {
    const al_box_limits *l = &b->cfg->limits;
    char user[40], uidl[16], hold[24];
    snprintf(user, sizeof user, "%u:%u", b->holder, b->holder);
    /* the holder ends on its own past the run's wall clock and a margin for
     * staging and collection, the kernel ending the container with it: the
     * backstop for a run whose keeper (keeper.c), which kills and removes
     * the container once the run has ended, was killed too */
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
    if (b->o->skill_dir)
        json_object_set_new(hc, "Mounts", skill_mount(b->o->skill_dir));
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

int al_docker_create(dbox *b, const char *image_id, al_error *err) {
    char name[64];
    snprintf(name, sizeof name, "airlock-box-%u", b->uid);
    json_t *body = al_docker_create_body(b, image_id, err);
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


/* The running container B->id: its init's pid (by pidfd), its cgroup dirs,
 * its holder kept from the OOM killer. CHECK: the caller's check of the
 * daemon's record first (a held one's: made as this run's own would be). */
int al_docker_inspect_init(dbox *b, int (*check)(dbox *b, json_t *ins, al_error *err), al_error *err) {
    char path[200];
    json_t *ins = NULL;
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    int r = al_docker_call_ok(b, "GET", path, NULL, &ins, err);
    if (r < 0)
        return r;
    json_t *state = json_object_get(ins, "State");
    b->init_pid = (pid_t)json_integer_value(json_object_get(state, "Pid"));
    bool running = json_is_true(json_object_get(state, "Running"));
    r = check ? check(b, ins, err) : 0;
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

int al_docker_start_and_inspect(dbox *b, al_error *err) {
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/start", b->id);
    int r = al_docker_call_ok(b, "POST", path, NULL, NULL, err);
    if (r < 0)
        return al_err(err, "docker", -r, "start the container");
    return al_docker_inspect_init(b, NULL, err);
}

/* Create an exec of ARGV as the script's uid; RET_ID gets its id. */
int al_docker_exec_create(dbox *b, char *const *argv, char *const *envp, const char *cwd, bool in, char ret_id[80],
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
    int r = al_docker_call_ok(b, "POST", path, body, &ans, err);
    const char *id = json_string_value(json_object_get(ans, "Id"));
    if (r >= 0 && id && strlen(id) < 80 && strspn(id, "0123456789abcdef") == strlen(id))
        snprintf(ret_id, 80, "%s", id);
    else if (r >= 0)
        r = al_err(err, "docker", EIO, "the exec was given no id");
    json_decref(ans);
    return r < 0 ? r : 0;
}

/* The exit code of exec ID once it has ended (-1 when unknown). */
int al_docker_exec_exit(dbox *b, const char *id, al_error *err) {
    char path[200];
    snprintf(path, sizeof path, "/exec/%s/json", id);
    for (int i = 0; i < 200; i++) {
        json_t *ans = NULL;
        if (al_docker_call_ok(b, "GET", path, NULL, &ans, err) < 0)
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


void al_docker_on_script_data(int stream, const char *buf, size_t len, void *ud) {
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

/* A kill of the script's processes, begun to end by UNTIL (its grace):
 * from here until /out is read, each call to the daemon ends by then (or
 * by the engine's floor), so one that stops answering does not hold the
 * run; its own reason stands or, where nothing could be killed without
 * the daemon, it fails saying so (unanswered) */
static void kill_begin(dbox *b, inside_kill *k, bool after_end, uint64_t until) {
    b->e.until_ms = until;
    if (b->o->runtime != AL_DOCKER_RUNSC) {
        al_docker_kill_script_procs(b);
        return;
    }
    if (k->running)
        return;
    al_error e = { 0 };
    k->s = (sink){ .fd = -1 };
    if (al_docker_exec_create(b, kill_argv, NULL, "/", false, k->id, &e) < 0 || al_engine_exec_start(&b->e, k->id, &k->st, &e) < 0) {
        al_docker_kill_container(b); /* and /out with it: the result says so */
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
    if (al_docker_exec_exit(b, k->id, &e) != 0)
        al_docker_kill_container(b);
    else if (k->after_end)
        b->inside_clean = true;
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

/* What is left of a kill exec after the script's stream ended: read to
 * its end, until UNTIL (the grace of the kill that stopped the script, so
 * a run ends by its deadline and that grace), a drain's time at least. A
 * sandbox that died whole meanwhile (gVisor's, at its pids cap) leaves
 * nothing to kill, and its kill exec may not end before the daemon
 * notices: the container is asked each tick (what its cgroup shows kept
 * first, for the reason) and, once the daemon says it is down, not waited
 * on. A daemon that cannot be asked is not taken for "down". */
static void kill_finish(dbox *b, inside_kill *k, uint64_t until) {
    uint64_t now = al_now_ms(), tick = now;
    if (until < now + DRAIN_MS)
        until = now + DRAIN_MS;
    while (k->running && !k->st.eof) {
        if (now >= tick) {
            if (b->cg_pids[0])
                watch_sandbox(b);
            if (al_docker_container_state(b) == 0) {
                al_engine_stream_close(&k->st);
                k->running = false;
                al_docker_kill_container(b); /* gone already: the result says /out went with it */
                return;
            }
            tick = now + PIDS_TICK_MS;
        }
        uint64_t next = tick < until ? tick : until;
        struct pollfd p = { .fd = k->st.fd, .events = POLLIN };
        if (poll(&p, 1, next > now ? (int)(next - now) : 0) > 0 && al_engine_stream_read(&k->st, on_tar_data, &k->s) < 0)
            break;
        now = al_now_ms();
        if (now >= until)
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
    al_docker_kill_container(b);
}

/* The script's main process, by pidfd (*RET_FD) on the exec ID's host pid
 * (runc's process, or runsc's exec that waits for it), once the daemon has
 * started it: or *RET_GONE, it ended before it could be watched (or the
 * daemon cannot say), or *RET_CANCELED, CANCEL_FD came first. */
static void watch_main(dbox *b, const char *id, uint64_t deadline, int cancel_fd, int *ret_fd, bool *ret_gone,
                       bool *ret_canceled) {
    int main_fd = -1;
    char path[200];
    snprintf(path, sizeof path, "/exec/%s/json", id);
    uint64_t late_until = 0;
#ifdef AIRLOCK_TEST_HOOKS
    /* test builds: a daemon slow to start the exec (runsc's exec on a
     * loaded host), its answers "not started yet" for this long */
    const char *late = getenv("AIRLOCK_TEST_EXEC_START_LATE_MS");
    if (late)
        late_until = al_now_ms() + strtoull(late, NULL, 10);
#endif
    /* Docker answers the exec's start (the stream above) before
     * containerd has started its process: no pid and no exit code yet.
     * runsc's exec takes hundreds of ms to start it, more on a loaded
     * host, so "not started yet" is waited for, up to the run's wall
     * clock (after which the loop below times it out). It is not an
     * end: taken for one, the script was killed as it began, with no
     * reason of its own (exited, SIGKILL: "failed"), and a cancel that
     * came after the kill was lost. A cancel meanwhile is taken at
     * once (below): a kill inside before the process is there would
     * miss it, and a daemon that never starts it would hold the cancel
     * for the run's whole wall clock. */
    uint64_t start_until = deadline ? deadline : al_now_ms() + EXEC_START_MS;
    int nap_ms = 2;
    /* and a daemon that stops answering meanwhile holds it no longer
     * than a kill at the deadline would */
    b->e.until_ms = start_until + KILL_GRACE_MS;
    while (main_fd < 0) {
        json_t *ans = NULL;
        al_error ie = { 0 };
        if (al_docker_call_ok(b, "GET", path, NULL, &ans, &ie) < 0) {
            *ret_gone = true;
            break;
        }
        int pid = (int)json_integer_value(json_object_get(ans, "Pid"));
        bool running = json_is_true(json_object_get(ans, "Running"));
        /* the daemon sets the exit code once the exec has ended, or
         * failed to start: null until then */
        bool ended = !running && json_is_integer(json_object_get(ans, "ExitCode"));
        json_decref(ans);
        if (late_until && al_now_ms() < late_until) {
            pid = 0;
            running = ended = false;
        }
        if (pid > 0)
            main_fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (main_fd < 0 && (ended || (!running && pid > 0))) {
            *ret_gone = true;
            break;
        }
        if (main_fd >= 0 || al_now_ms() >= start_until)
            break;
        struct pollfd cp = { .fd = cancel_fd, .events = POLLIN };
        if (poll(&cp, 1, nap_ms) > 0) {
            *ret_canceled = true;
            break;
        }
        if (nap_ms < 16)
            nap_ms *= 2;
    }
    b->e.until_ms = 0;
    *ret_fd = main_fd;
}

/* The pids cap watched from outside, tick after tick. */
typedef struct pids_watch {
    uint64_t next_tick, hits;
    int streak;
} pids_watch;

/* What ends the exec at NOW, of a run (WATCH) or one of airlock's own
 * execs: its wall clock (DEADLINE), its output cap (S), a fork bomb at
 * the pids cap; EXITED: nothing. */
static al_reason due_reason(dbox *b, const sink *s, bool watch, uint64_t deadline, uint64_t now, pids_watch *pw) {
    al_reason why = AL_REASON_EXITED;
    if (deadline && now >= deadline)
        why = AL_REASON_TIMEOUT;
    if (s->over)
        why = AL_REASON_OUTPUT_LIMIT;
    if (watch && b->cg_pids[0] && b->o->runtime == AL_DOCKER_RUNSC && now >= pw->next_tick) {
        watch_sandbox(b);
        pw->next_tick = now + PIDS_TICK_MS;
    }
    if (watch && b->cg_pids[0] && b->o->runtime == AL_DOCKER_RUNC && now >= pw->next_tick) {
        /* a fork bomb holds the pids cap: killed as "pids", as native */
        uint64_t cur = 0, max_hits = 0;
        al_cgroup_read_u64(b->cg_pids, "pids.current", &cur);
        al_cgroup_read_key(b->cg_pids, "pids.events", "max", &max_hits);
        /* at the cap, tick after tick, after a refused fork: a fork
         * bomb (the native box's rule) */
        bool full = max_hits > 0 && cur + 2 >= b->cfg->limits.pids;
        pw->streak = full || max_hits > pw->hits ? pw->streak + 1 : 0;
        pw->hits = max_hits;
        if (pw->streak >= PIDS_STREAK)
            why = AL_REASON_PIDS;
        pw->next_tick = now + PIDS_TICK_MS;
    }
    return why;
}

int al_docker_exec_pump(dbox *b, const char *id, int in_fd, void (*on_data)(int, const char *, size_t, void *), sink *s,
                     uint64_t deadline, int cancel_fd, al_reason *kill_reason, al_error *err) {
    inside_kill ik = { 0 };
    al_engine_stream st;
    int r = al_engine_exec_start(&b->e, id, &st, err);
    if (r < 0)
        return r;
    _cleanup_close_ int main_fd = -1;
    bool main_gone = false, canceled_unstarted = false;
    /* the script's main process, by pidfd: when it ends, whatever it left
     * behind is killed, as the native box's pid namespace does, rather
     * than holding the streams open */
    if (kill_reason)
        watch_main(b, id, deadline, cancel_fd, &main_fd, &main_gone, &canceled_unstarted);
    /* ended before it could be watched (its pid gone, or inspect already
     * says so): it is done, and what it left is killed now */
    bool main_done = false;
    uint64_t drain_until = 0;
    if (kill_reason && main_gone) {
        main_done = true;
        kill_begin(b, &ik, false, al_now_ms() + KILL_GRACE_MS);
        /* after the kill's calls, which may take a while */
        drain_until = al_now_ms() + DRAIN_MS;
    }
    char inbuf[65536];
    size_t in_len = 0, in_off = 0;
    bool in_open = in_fd >= 0, killed = false;
    if (!in_open)
        al_engine_stream_close_stdin(&st);
    uint64_t kill_deadline = 0;
    pids_watch pw = { .next_tick = al_now_ms() + PIDS_TICK_MS };
    if (canceled_unstarted) {
        /* canceled before the daemon started the script's process: the
         * container goes whole, and whatever of the script starts now
         * with it. The script has run nothing, or next to nothing: /out
         * is not read, and the result says so */
        *kill_reason = AL_REASON_CANCELED;
        killed = main_done = true;
        kill_deadline = drain_until = al_now_ms() + DRAIN_MS;
        b->e.until_ms = kill_deadline;
        al_docker_kill_container(b);
    }
    while (!st.eof) {
        uint64_t now = al_now_ms();
        /* the main process is gone and its leftovers were killed: what they
         * wrote drains, but a stream the daemon holds open (a sandbox that
         * died whole) is not waited for */
        if (main_done && now >= drain_until)
            break;
        al_reason why = killed ? AL_REASON_EXITED : due_reason(b, s, kill_reason != NULL, deadline, now, &pw);
        if (why == AL_REASON_TIMEOUT && !kill_reason) {
            /* one of airlock's own execs (tar, kill) that does not end */
            r = al_err(err, "docker", ETIMEDOUT, "an exec of airlock's in the box did not end in time");
            break;
        }
        if (why != AL_REASON_EXITED && kill_reason) {
            *kill_reason = why;
            killed = true;
            kill_deadline = now + KILL_GRACE_MS;
            kill_begin(b, &ik, false, kill_deadline);
            /* its calls to the daemon take time (their grace's, at most) */
            now = al_now_ms();
        }
        if (killed && now >= kill_deadline) {
            if (b->e.stuck)
                r = al_err(err, "docker", ETIMEDOUT, "the Docker daemon did not answer within the kill's grace (%d ms)",
                           KILL_GRACE_MS);
            else
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
        if (kill_reason && b->cg_pids[0] && !killed && !main_done && pw.next_tick < until)
            until = pw.next_tick;
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
            if (!killed)
                kill_begin(b, &ik, true, al_now_ms() + KILL_GRACE_MS);
            drain_until = al_now_ms() + DRAIN_MS;
        }
        if (p[2].revents) {
            if (kill_reason)
                *kill_reason = AL_REASON_CANCELED;
            killed = true;
            kill_deadline = al_now_ms() + KILL_GRACE_MS;
            kill_begin(b, &ik, false, kill_deadline);
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
        kill_finish(b, &ik, killed ? kill_deadline : al_now_ms() + KILL_GRACE_MS);
    /* kept: once the daemon says the exec ended, it says how (exit_status) */
    if (kill_reason && main_fd >= 0 && b->main_fd < 0) {
        b->main_fd = main_fd;
        main_fd = -1;
    }
    /* output past the cap is output_limit even when the script ended
     * before it could be stopped, as on the native box */
    if (r == 0 && kill_reason && s->over && *kill_reason == AL_REASON_EXITED)
        *kill_reason = AL_REASON_OUTPUT_LIMIT;
    return r;
}

/* Run ARGV as the script's uid to its end, stdin from IN_FD, stdout to
 * OUT_FD (at most MAX bytes). Returns its exit code, or -errno. */
int al_docker_exec_tar(dbox *b, char *const *argv, int in_fd, int out_fd, uint64_t max, bool *too_big, al_error *err) {
    char id[80];
    int r = al_docker_exec_create(b, argv, NULL, "/", in_fd >= 0, id, err);
    if (r < 0)
        return r;
    sink s = { .fd = out_fd, .max = max };
    r = al_docker_exec_pump(b, id, in_fd, on_tar_data, &s, al_now_ms() + 120000, -1, NULL, err);
    if (r < 0)
        return r;
    if (too_big)
        *too_big = s.too_big;
    snprintf(b->tar_err, sizeof b->tar_err, "%s", s.err_text);
    int code = al_docker_exec_exit(b, id, err);
    if (code != 0)
        return al_err(err, "docker", EIO, "%s in the box exited %d: %.300s", argv[0], code, s.err_text);
    return 0;
}


/* ---- the run ---- */

void al_docker_kill_container(dbox *b) {
    b->killed_whole = true;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/kill", b->id);
    /* Docker answers a kill once the container has stopped (it waits up
     * to 10 s and 2 s more): a healthy daemon's late answer, never used,
     * does not make it stuck. One that is stuck shows it in the next call */
    bool was = b->e.stuck;
    if (al_engine_call(&b->e, "POST", path, NULL, NULL, &e) == -ETIMEDOUT)
        b->e.stuck = was;
}

void al_docker_remove_container(dbox *b) {
    if (!b->own || !b->id[0] || !b->engine_open)
        return;
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", b->id);
    al_engine_call(&b->e, "DELETE", path, NULL, NULL, &e);
}

/* The kill exec (kill_argv) run to its end: 0 when none of the script's is
 * left. */
int al_docker_kill_inside(dbox *b) {
    char **argv = kill_argv;
    al_error e = { 0 };
    char id[80];
    int r = al_docker_exec_create(b, argv, NULL, "/", false, id, &e);
    if (r == 0) {
        sink s = { .fd = -1 };
        r = al_docker_exec_pump(b, id, -1, on_tar_data, &s, al_now_ms() + KILL_GRACE_MS, -1, NULL, &e);
    }
    if (r == 0 && al_docker_exec_exit(b, id, &e) != 0)
        r = -EBUSY;
    return r;
}

/* 1 when the daemon says the container runs, 0 when it says it does not,
 * -errno when it could not be asked */
int al_docker_container_state(dbox *b) {
    al_error e = { 0 };
    char path[200];
    snprintf(path, sizeof path, "/containers/%s/json", b->id);
    json_t *ins = NULL;
    int r = al_docker_call_ok(b, "GET", path, NULL, &ins, &e);
    if (r >= 0)
        r = json_is_true(json_object_get(json_object_get(ins, "State"), "Running")) ? 1 : 0;
    json_decref(ins);
    return r;
}

bool al_docker_container_running(dbox *b) { return al_docker_container_state(b) == 1; }
