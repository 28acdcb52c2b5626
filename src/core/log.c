/*
 * The service's log: one JSON object a line on stderr, and the run.end
 * line that every end of a run writes. Below every other file of the core.
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service.h"
#include "service_int.h"

/* Whether stderr is the journal's stream: systemd names its device and
 * inode in JOURNAL_STREAM (a child that inherited the variable but writes
 * elsewhere is not). */
static bool journal;
static pthread_once_t journal_once = PTHREAD_ONCE_INIT;
static void journal_check(void) {
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    journal = js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
              (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void al_service_log(al_service *s, al_log_level level, const char *event, json_t *fields) {
    /* one JSON object per line on stderr: journald and log shippers take it
     * as is; to the journal each line starts with its syslog priority
     * ("<3>"), which journald takes off and keeps as the entry's PRIORITY
     * (`journalctl -p warning` finds warnings and errors) */
    static const char *const names[_AL_LOG_MAX] = { [AL_LOG_INFO] = "info", [AL_LOG_WARN] = "warn",
                                                    [AL_LOG_ERROR] = "error" };
    static const char *const priority[_AL_LOG_MAX] = { [AL_LOG_INFO] = "<6>", [AL_LOG_WARN] = "<4>",
                                                       [AL_LOG_ERROR] = "<3>" };
    pthread_once(&journal_once, journal_check);
    char now[40];
    al_store_now(now, sizeof now);
    if (!fields)
        fields = json_object();
    json_object_set_new(fields, "time", json_string(now));
    json_object_set_new(fields, "event", json_string(event));
    /* a level out of range is a bug of the caller: said as the worst, not dropped */
    json_object_set_new(fields, "level", json_string(level < _AL_LOG_MAX ? names[level] : "error"));
    char *line = json_dumps(fields, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(fields);
    if (line) {
        fprintf(stderr, "%s%s\n", journal ? priority[level < _AL_LOG_MAX ? level : AL_LOG_ERROR] : "", line);
        free(line);
    }
    (void)s;
}

void al_service_log_run_end(al_service *s, const al_store_run *run, al_run_state state, const char *err_code,
                            json_t *result) {
    json_t *doc = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s?, s:O?, s:O?, s:O?}", "run_id", run->id,
                            "workspace_id", run->workspace_id, "person_id", run->person_id, "language", run->language,
                            "driver", s->driver->name, "state", al_run_state_name(state), "error", err_code,
                            "exit_code", json_object_get(result, "exit_code"), "signal",
                            json_object_get(result, "signal"), "wall_ms", json_object_get(result, "wall_ms"));
    /* a run in error is airlock's own failure (or policy's, which its code
     * names): worth a look */
    al_service_log(s, state == AL_RUN_ERROR ? AL_LOG_WARN : AL_LOG_INFO, "run.end", doc);
}

void al_service_log_started(al_service *s) {
    const al_service_config *c = &s->cfg;
    al_service_log(s, AL_LOG_INFO, "service.start",
                   json_pack("{s:s, s:i, s:s, s:s, s:s, s:s}", "listen", c->listen_host, "port", c->port, "state",
                             c->state_dir, "driver", c->driver, "store", al_store_backend_name(s->store), "node",
                             s->node_id));
}
