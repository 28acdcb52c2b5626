/* Piston's answers: its runtimes listing and its shape of a finished run
 * (the handler that serves them is in http.c, the translation of its
 * request in piston.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

json_t *al_piston_result(json_t *run, const char *language, const char *version) {
    json_t *r = json_object_get(run, "result");
    const char *o = json_string_value(json_object_get(r, "stdout")), *e = json_string_value(json_object_get(r, "stderr"));
    json_t *err = json_object_get(run, "error");
    if (!r || json_is_null(r)) /* airlock's own failure: say why where a person looks */
        e = json_string_value(json_object_get(err, "message"));
    json_t *sig = json_object_get(r, "signal");
    char signame[16] = "";
    if (json_is_integer(sig))
        snprintf(signame, sizeof signame, "SIG%s", sigabbrev_np((int)json_integer_value(sig)) ?: "UNKNOWN");
    json_t *code = json_object_get(r, "exit_code");
    json_t *doc = json_pack("{s:s, s:s, s:{s:s, s:s, s:s+, s:O, s:o}, s:s, s:s}", "language", language, "version",
                            version, "run", "stdout", o ? o : "", "stderr", e ? e : "", "output", o ? o : "", e ? e : "",
                            "code", code ? code : json_null(), "signal", signame[0] ? json_string(signame) : json_null(),
                            "airlock_run_id", json_string_value(json_object_get(run, "id")) ?: "", "airlock_state",
                            json_string_value(json_object_get(run, "state")) ?: "");
    json_decref(run);
    return doc;
}

