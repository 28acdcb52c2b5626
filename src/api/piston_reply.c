/* Piston's answers: its runtimes listing and its shape of a finished run
 * (the handler that serves them is in http.c, the translation of its
 * request in piston.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "piston.h"

static const char *version_of(const char *const argv[]) {
    int pipefd[2];
    static char out[3][64];
    static int which = 0;
    char *buf = out[which++ % 3];
    buf[0] = '\0';
    if (pipe2(pipefd, O_CLOEXEC) < 0)
        return buf;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        /* its complaints are not the service's log lines (a JSON object each) */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pipefd[1]);
    /* to its end: a read cut short (a signal) closed the pipe under it */
    size_t n = 0;
    while (pid > 0 && n < 63) {
        ssize_t r = read(pipefd[0], buf + n, 63 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(pipefd[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    buf[n] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

json_t *al_piston_runtimes(void) {
    static json_t *cached;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (!cached) {
        static const char *const py[] = { "/usr/bin/python3", "-c", "import platform; print(platform.python_version())", NULL };
        static const char *const node[] = { "/usr/bin/node", "-p", "process.versions.node", NULL };
        static const char *const sh[] = { "/bin/bash", "-c", "echo ${BASH_VERSION%%(*}", NULL };
        cached = json_pack("[{s:s, s:s, s:[s, s, s]}, {s:s, s:s, s:[s, s, s]}, {s:s, s:s, s:[s]}]",
                           "language", "python", "version", version_of(py), "aliases", "py", "py3", "python3",
                           "language", "javascript", "version", version_of(node), "aliases", "node", "js", "node-javascript",
                           "language", "bash", "version", version_of(sh), "aliases", "sh");
    }
    pthread_mutex_unlock(&mu);
    return json_incref(cached);
}

/* GET /api/v2/packages: what runs here, as Piston lists its packages
 * (each installed: airlock installs none through this API). */
json_t *al_piston_packages(void) {
    json_t *rts = al_piston_runtimes(), *out = json_array(), *r;
    size_t i;
    json_array_foreach(rts, i, r)
        json_array_append_new(out, json_pack("{s:O, s:O, s:b}", "language", json_object_get(r, "language"),
                                             "language_version", json_object_get(r, "version"), "installed", 1));
    json_decref(rts);
    return out;
}

/* Piston's status of a run's end (isolate's codes, and its own OL and EL:
 * its api/src/job.js) and its words for it into MSG; NULL for a run that
 * exited 0, which Piston answers with status and message null. */
static const char *status_of(json_t *run, json_t *r, char *msg, size_t msglen) {
    const char *reason = json_string_value(json_object_get(r, "reason"));
    json_t *sig = json_object_get(r, "signal"), *code = json_object_get(r, "exit_code");
    if (!reason) {
        /* no end of a box: airlock's own failure, a denial, or a run that
         * has not ended (waiting for its approval) */
        const char *why = json_string_value(json_object_get(json_object_get(run, "error"), "message"));
        const char *state = json_string_value(json_object_get(run, "state")) ?: "unknown";
        if (why)
            snprintf(msg, msglen, "internal error: %s", why);
        else
            snprintf(msg, msglen, "the run has not ended: it is %s (airlock_run_id names it)", state);
        return "XX";
    }
    if (strcmp(reason, "timeout") == 0) {
        snprintf(msg, msglen, "Time limit exceeded (wall clock)");
        return "TO";
    }
    if (strcmp(reason, "output_limit") == 0) {
        bool out = json_is_true(json_object_get(r, "stdout_truncated"));
        snprintf(msg, msglen, out ? "stdout length exceeded" : "stderr length exceeded");
        return out ? "OL" : "EL";
    }
    if (strcmp(reason, "error") == 0) {
        const char *why = json_string_value(json_object_get(json_object_get(r, "error"), "message"))
                              ?: json_string_value(json_object_get(json_object_get(run, "error"), "message"));
        snprintf(msg, msglen, "internal error: %s", why ? why : "the box failed");
        return "XX";
    }
    /* killed for its memory or processes, or canceled: a fatal signal to
     * Piston (isolate says SG of an OOM kill), with airlock's reason */
    if (strcmp(reason, "exited") != 0 || json_is_integer(sig)) {
        int n = json_is_integer(sig) ? (int)json_integer_value(sig) : SIGKILL;
        if (strcmp(reason, "exited") == 0)
            snprintf(msg, msglen, "Caught fatal signal %d", n);
        else
            snprintf(msg, msglen, "Caught fatal signal %d (%s)", n,
                     strcmp(reason, "memory") == 0 ? "memory limit exceeded"
                     : strcmp(reason, "pids") == 0 ? "process limit exceeded"
                     : strcmp(reason, "canceled") == 0 ? "canceled" : reason);
        return "SG";
    }
    if (json_is_integer(code) && json_integer_value(code) != 0) {
        snprintf(msg, msglen, "Exited with error status %lld", (long long)json_integer_value(code));
        return "RE";
    }
    return NULL;
}

/* A figure of the box's end (ms, bytes) as Piston's integer; null when
 * there is none. */
static json_t *figure(json_t *r, const char *key) {
    json_t *v = json_object_get(r, key);
    return json_is_integer(v) ? json_integer(json_integer_value(v)) : json_null();
}

json_t *al_piston_result(json_t *run, const char *language, const char *version) {
    json_t *r = json_object_get(run, "result");
    if (!json_is_object(r))
        r = NULL;
    const char *o = json_string_value(json_object_get(r, "stdout")), *e = json_string_value(json_object_get(r, "stderr"));
    json_t *err = json_object_get(run, "error");
    if (!r) /* airlock's own failure: say why where a person looks */
        e = json_string_value(json_object_get(err, "message"));
    char msg[300];
    const char *status = status_of(run, r, msg, sizeof msg);
    /* a run killed for its time or output is SIGKILL to Piston, whatever
     * signal the box recorded (it kills with SIGKILL) */
    json_t *sig = json_object_get(r, "signal");
    char signame[16] = "";
    if (json_is_integer(sig))
        snprintf(signame, sizeof signame, "SIG%s", sigabbrev_np((int)json_integer_value(sig)) ?: "UNKNOWN");
    else if (status && (strcmp(status, "TO") == 0 || strcmp(status, "OL") == 0 || strcmp(status, "EL") == 0 ||
                        strcmp(status, "SG") == 0))
        snprintf(signame, sizeof signame, "SIGKILL");
    json_t *code = json_object_get(r, "exit_code");
    json_t *doc = json_pack("{s:s, s:s, s:{s:s, s:s, s:s+, s:O, s:o, s:o, s:o, s:o, s:o, s:o}, s:s, s:s}", "language",
                            language, "version", version, "run", "stdout", o ? o : "", "stderr", e ? e : "", "output",
                            o ? o : "", e ? e : "", "code", code ? code : json_null(), "signal",
                            signame[0] ? json_string(signame) : json_null(), "status",
                            status ? json_string(status) : json_null(), "message",
                            status ? json_string(msg) : json_null(), "cpu_time", figure(r, "cpu_ms"), "wall_time",
                            figure(r, "wall_ms"), "memory", figure(r, "peak_memory_bytes"), "airlock_run_id",
                            json_string_value(json_object_get(run, "id")) ?: "", "airlock_state",
                            json_string_value(json_object_get(run, "state")) ?: "");
    json_decref(run);
    return doc;
}
