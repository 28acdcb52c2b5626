/* The native driver: each run is `airlock helper`, a fresh single-threaded
 * process that reads its job on stdin, runs the box, and writes events as
 * JSON lines on stdout. The service itself never clones a box. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../box/box.h"
#include "../box/doctor.h"
#include "driver.h"

static json_t *native_capabilities(void) {
    al_doctor_item items[AL_DOCTOR_MAX];
    size_t n = al_doctor(items);
    json_t *o = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(o, items[i].name, json_pack("{s:s, s:s}", "level", al_level_name(items[i].level),
                                                        "detail", items[i].detail));
    return o;
}

static int native_probe(al_error *err) {
    al_doctor_item items[AL_DOCTOR_MAX];
    size_t n = al_doctor(items);
    for (size_t i = 0; i < n; i++)
        if (strcmp(items[i].name, "user namespace") == 0 && items[i].level == AL_LEVEL_NOT_ENFORCED)
            return al_err(err, "driver", ENOTSUP, "native driver: %s", items[i].detail);
    return 0;
}

/* Start SELF_EXE helper with JOB: the native driver's and the docker
 * driver's (whose helper is airlock-server's) one way to run a job. */
int al_driver_helper_start(const char *self_exe, const char *job, al_driver_run *ret, al_error *err) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return al_err(err, "driver", errno, "pipe: %m");
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return al_err(err, "driver", errno, "pipe: %m");
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        return al_err(err, "driver", e, "fork helper: %s", strerror(e));
    }
    if (pid == 0) {
        /* async-signal-safe only: we were forked from a threaded process */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(125);
        dup2(in[0], 0);
        dup2(out[1], 1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *argv[] = { (char *)self_exe, "helper", NULL };
        execv(self_exe, argv);
        _exit(125);
    }
    close(in[0]);
    close(out[1]);
    /* The job is one line (code and paths, never file contents). The pipe
     * then stays open: if this process dies, even by SIGKILL, the helper
     * sees its end and kills its box, cleanly. (PDEATHSIG alone is not
     * enough: the helper's setfsuid() while staging files clears it.) */
    int r = al_write_all(in[1], job, strlen(job));
    if (r == 0)
        r = al_write_all(in[1], "\n", 1);
    if (r < 0) {
        close(in[1]);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(out[0]);
        return al_err(err, "driver", r, "send the job to the helper: %s", strerror(-r));
    }
    ret->pid = pid;
    ret->events_fd = out[0];
    ret->job_fd = in[1];
    return 0;
}

static int native_start(const char *self_exe, const char *job, al_driver_run *ret, al_error *err) {
    return al_driver_helper_start(self_exe, job, ret, err);
}

int al_driver_helper_cancel(al_driver_run *r) {
    /* the helper turns SIGTERM into a clean kill of the box */
    return r->pid > 0 && kill(r->pid, SIGTERM) < 0 ? -errno : 0;
}

int al_driver_helper_wait(al_driver_run *r) {
    int st = 0;
    if (r->pid > 0) {
        while (waitpid(r->pid, &st, 0) < 0 && errno == EINTR)
            ;
        r->pid = -1;
    }
    if (r->events_fd >= 0) {
        close(r->events_fd);
        r->events_fd = -1;
    }
    if (r->job_fd >= 0) {
        close(r->job_fd);
        r->job_fd = -1;
    }
    return st;
}

const al_driver_ops al_driver_native = {
    .name = "native",
    .capabilities = native_capabilities,
    .probe = native_probe,
    .start = native_start,
    .cancel = al_driver_helper_cancel,
    .wait = al_driver_helper_wait,
    .sweep = al_box_sweep_stale,
};
