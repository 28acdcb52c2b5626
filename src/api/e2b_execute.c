/*
 * The code interpreter's API (@e2b/code-interpreter, port 49999) over
 * airlock's runs: POST /execute runs one cell as one ordinary run in the
 * sandbox's working directory (a fresh box each time: the interpreter's
 * state is NOT kept between cells, only the files in /home/user) and
 * answers NDJSON lines as the upstream server does: stdout and stderr
 * with their text and a timestamp, result (text, png, is_main_result),
 * error (name, value, traceback as one string), number_of_executions,
 * end_of_execution.
 *
 * A cell runs under a small driver (src/api/e2b_cells/: python.py,
 * node.js) that execs it, takes a trailing expression's value as the
 * result (IPython's way), saves the matplotlib figures left open or shown
 * as PNG results, and reports an exception as the error. Results leave
 * the box on its stdout as lines that start with a mark made for this call
 * alone: the run's output caps and DLP cover them as they cover what the
 * cell prints, and nothing else carries them out. The mark is no secret
 * from the cell (it could print a result of its own making, which is its
 * own to make).
 *
 * Contexts are labels: POST /contexts answers {id, language, cwd} with the
 * language as the id; no state is held for one, so DELETE and restart
 * have nothing to do, and a cell given a context runs in its language.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../core/dlp.h"
#include "../core/follow.h"
#include "e2b.h"
#include "e2b_cells.h"
#include "e2b_run.h"
#include "handlers.h"
#include "reply.h"
#include "route.h"

#define EXEC_EVENTS_PER_READ 64
#define EXEC_KEEPALIVE_MS 15000
#define EXEC_LINE_MAX (4u << 20)     /* stdout held for its line's end at most: then shown as it is */
#define EXEC_MARK_LEN 24
#define EXEC_TIMEOUT_S 60            /* @e2b/code-interpreter's DEFAULT_TIMEOUT_MS */

/* The languages a cell may be in, and the run's language and driver. */
static const struct {
    const char *name, *run_lang, *driver;
} langs[] = {
    { "python", "python", "python.py" },
    { "javascript", "node", "node.js" },
    { "js", "node", "node.js" },
    { "bash", "bash", NULL },
};

static int lang_index(const char *name) {
    if (!name || !*name)
        return 0;
    for (size_t i = 0; i < ELEMENTSOF(langs); i++)
        if (strcmp(name, langs[i].name) == 0)
            return (int)i;
    return -1;
}

static const char *driver_text(const char *file) {
    for (size_t i = 0; i < ELEMENTSOF(al_e2b_cells); i++)
        if (strcmp(al_e2b_cells[i].name, file) == 0)
            return al_e2b_cells[i].text;
    return NULL;
}

/* ------------------------------------------------------------- the stream */

typedef struct exec_stream {
    al_service *s;
    struct MHD_Connection *c;
    al_principal p;
    al_follow f;
    char run_id[40];
    char mark[EXEC_MARK_LEN + 1];
    char *line;                   /* stdout not yet ended by a newline */
    size_t line_len;
    char *buf;                    /* NDJSON made, not yet all sent */
    size_t len, pos;
    bool errored, ended;
    uint64_t last_ms;
} exec_stream;

static bool push(exec_stream *e, json_t *doc) {
    char *t = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!t)
        return false;
    size_t n = strlen(t);
    char *nb = realloc(e->buf, e->len + n + 1);
    if (!nb) {
        free(t);
        return false;
    }
    memcpy(nb + e->len, t, n);
    nb[e->len + n] = '\n';
    free(t);
    e->buf = nb;
    e->len += n + 1;
    e->last_ms = al_now_ms();
    return true;
}

/* LEN bytes of output as JSON text: a NUL or a byte that is no UTF-8 shown
 * as U+FFFD's stand-in ('?'), so the line is always valid JSON. */
static json_t *text_of(const char *b, size_t len) {
    char *t = malloc(len + 1);
    if (!t)
        return NULL;
    for (size_t i = 0; i < len; i++)
        t[i] = b[i] ? b[i] : '?';
    t[len] = '\0';
    al_utf8_fix(t);
    json_t *j = json_string(t);
    free(t);
    return j;
}

static bool push_log(exec_stream *e, const char *type, const char *b, size_t len) {
    if (!len)
        return true;
    char ts[40];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t w = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + w, sizeof ts - w, ".%06ldZ", now.tv_nsec / 1000);
    json_t *text = text_of(b, len);
    return text && push(e, json_pack("{s:s, s:o, s:s}", "type", type, "text", text, "timestamp", ts));
}

/* A result or error the driver printed after the mark (JSON), passed on
 * with the fields the SDK reads and nothing else. */
static bool push_marked(exec_stream *e, const char *json, size_t len) {
    json_t *d = json_loadb(json, len, 0, NULL);
    const char *type = json_string_value(json_object_get(d, "type"));
    static const char *const result_keys[] = { "text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex",
                                               "json", "javascript", "is_main_result" };
    static const char *const error_keys[] = { "name", "value", "traceback" };
    const char *const *keys = NULL;
    size_t nk = 0;
    if (type && strcmp(type, "result") == 0) {
        keys = result_keys;
        nk = ELEMENTSOF(result_keys);
    } else if (type && strcmp(type, "error") == 0) {
        keys = error_keys;
        nk = ELEMENTSOF(error_keys);
        e->errored = true;
    }
    if (!keys) {
        json_decref(d);
        return push_log(e, "stdout", json, len); /* no result of ours: shown as printed */
    }
    json_t *out = json_pack("{s:s}", "type", type);
    for (size_t i = 0; out && i < nk; i++) {
        json_t *v = json_object_get(d, keys[i]);
        if (v)
            json_object_set(out, keys[i], v);
    }
    json_decref(d);
    return push(e, out);
}

/* The complete lines held: a line holding the mark is the cell's output up
 * to it and a result after it; any other, output. ALL: the rest too (the
 * run has ended). */
static bool drain_lines(exec_stream *e, bool all) {
    size_t start = 0;
    bool ok = true;
    while (ok && start < e->line_len) {
        char *nl = memchr(e->line + start, '\n', e->line_len - start);
        if (!nl && !all && e->line_len - start < EXEC_LINE_MAX)
            break;
        size_t end = nl ? (size_t)(nl - e->line) + 1 : e->line_len;
        char *m = memmem(e->line + start, end - start, e->mark, EXEC_MARK_LEN);
        if (m) {
            ok = push_log(e, "stdout", e->line + start, (size_t)(m - (e->line + start)));
            size_t at = (size_t)(m - e->line) + EXEC_MARK_LEN;
            ok = ok && push_marked(e, e->line + at, end - at - (nl ? 1 : 0));
        } else {
            ok = push_log(e, "stdout", e->line + start, end - start);
        }
        start = end;
    }
    /* nothing held yet (a cell that printed nothing): e->line is NULL */
    if (start)
        memmove(e->line, e->line + start, e->line_len - start);
    e->line_len -= start;
    return ok;
}

static bool take_output(exec_stream *e, const al_follow_event *ev) {
    json_t *d = json_loads(ev->data, 0, NULL);
    size_t len = 0;
    char *bytes = d ? al_output_get(d, "data", &len) : NULL;
    json_decref(d);
    if (!bytes)
        return true;
    bool ok;
    if (strcmp(ev->type, "stderr") == 0) {
        ok = push_log(e, "stderr", bytes, len);
    } else {
        char *nl = realloc(e->line, e->line_len + len + 1);
        ok = nl != NULL;
        if (ok) {
            e->line = nl;
            memcpy(e->line + e->line_len, bytes, len);
            e->line_len += len;
            ok = drain_lines(e, false);
        }
    }
    free(bytes);
    return ok;
}

/* The run's end: what is left of its output, an error when the cell did
 * not end on its own, the counts and the end. */
static bool push_end(exec_stream *e) {
    bool ok = drain_lines(e, true);
    al_e2b_end end;
    al_e2b_end_of(e->s, &e->p, e->run_id, &end, NULL);
    if (ok && !e->errored && (end.error[0] || end.exit_code != 0)) {
        const char *name = strcmp(end.status, "signal: killed") == 0 ? "TimeoutError" : "ExecutionError";
        char value[700];
        snprintf(value, sizeof value, "%s", end.error[0] ? end.error : end.status);
        ok = push(e, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", name, "value", value, "traceback",
                               value));
    }
    ok = ok && push(e, json_pack("{s:s, s:i}", "type", "number_of_executions", "execution_count", 1));
    ok = ok && push(e, json_pack("{s:s}", "type", "end_of_execution"));
    e->ended = true;
    return ok;
}

static ssize_t exec_fill(void *cls) {
    exec_stream *e = cls;
    if (e->ended) {
        if (e->f.s) /* its follower's place, given back as the stream ends */
            al_service_unhold(e->s, e->p.person_id, AL_HOLD_FOLLOW);
        e->f.s = NULL;
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    al_error err = { 0 };
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        al_follow_event *evs = NULL;
        size_t nev = 0;
        al_follow_news news = al_follow_next(&e->f, EXEC_EVENTS_PER_READ, &until, &evs, &nev, &err);
        if (news == AL_FOLLOW_EVENTS) {
            bool ok = true;
            for (size_t i = 0; ok && i < nev && !e->ended; i++) {
                if (strcmp(evs[i].type, "stdout") == 0 || strcmp(evs[i].type, "stderr") == 0)
                    ok = take_output(e, &evs[i]);
                else if (strcmp(evs[i].type, "result") == 0)
                    ok = push_end(e);
            }
            al_follow_events_free(evs, nev);
            if (!ok)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            if (e->len > e->pos)
                return 0;
            continue;
        }
        if (news == AL_FOLLOW_DONE)
            return push_end(e) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        if (news == AL_FOLLOW_FAILED || news == AL_FOLLOW_STOPPING) {
            const char *why = news == AL_FOLLOW_STOPPING ? "the service is stopping" : err.msg;
            e->ended = true;
            return push(e, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", "ServiceError", "value", why,
                                     "traceback", why))
                       ? 0
                       : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        /* the client left: the cell's run goes on to its end, as any run */
        if (al_e2b_peer_gone(e->c))
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (al_now_ms() - e->last_ms >= EXEC_KEEPALIVE_MS)
            return push(e, json_pack("{s:s}", "type", "keepalive")) ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static ssize_t exec_read(void *cls, uint64_t off, char *out, size_t max) {
    (void)off;
    exec_stream *e = cls;
    return al_reply_drain(&e->buf, &e->len, &e->pos, exec_fill, e, out, max);
}

static void exec_free(void *cls) {
    exec_stream *e = cls;
    if (e->f.s)
        al_service_unhold(e->s, e->p.person_id, AL_HOLD_FOLLOW);
    free(e->line);
    free(e->buf);
    free(e);
}

/* ---------------------------------------------------------------- execute */

/* CELL as comment lines (each after COMMENT) onto F: what an approver
 * reads of the cell on its card and what the run's record shows. A line
 * break the language would see inside a comment (a CR; in JavaScript
 * U+2028 and U+2029) is shown escaped, so no part of the copy is code. */
static void cell_comment(FILE *f, const char *comment, const char *cell, bool js) {
    fprintf(f, "%s the cell, as sent (it runs from _AIRLOCK below, decoded: this copy is for reading)\n%s ", comment,
            comment);
    for (const char *p = cell; *p; p++) {
        if (*p == '\n')
            fprintf(f, "\n%s ", comment);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (js && (unsigned char)p[0] == 0xe2 && (unsigned char)p[1] == 0x80 &&
                 ((unsigned char)p[2] == 0xa8 || (unsigned char)p[2] == 0xa9)) {
            fputs((unsigned char)p[2] == 0xa8 ? "\\u2028" : "\\u2029", f);
            p += 2;
        } else
            fputc(*p, f);
    }
    fprintf(f, "\n%s (end of the cell)\n", comment);
}

/* The run's code: the cell as comments (for reading), then the driver of
 * language L with the cell, its environment and the mark above it (as
 * base64 of JSON: no quoting to get wrong), which is what runs. */
static char *cell_code(int l, const char *cell, json_t *env, const char *mark) {
    if (!langs[l].driver)
        return NULL;
    bool js = strcmp(langs[l].run_lang, "node") == 0;
    json_t *a = json_pack("{s:s, s:O, s:s}", "cell", cell, "env", env, "mark", mark);
    char *j = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    char *b64 = j ? al_e2b_base64(j, strlen(j)) : NULL;
    free(j);
    const char *drv = driver_text(langs[l].driver);
    char *code = NULL;
    size_t len = 0;
    FILE *f = b64 && drv ? open_memstream(&code, &len) : NULL;
    if (f) {
        cell_comment(f, js ? "//" : "#", cell, js);
        fprintf(f, "%s_AIRLOCK = \"%s\"\n%s", js ? "const " : "", b64, drv);
        if (fclose(f) != 0) {
            free(code);
            code = NULL;
        }
    }
    free(b64);
    return code;
}

enum MHD_Result al_e2b_execute(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    if (x->rq->too_large)
        return al_e2b_reply_error(c, 413, "the request is larger than the service takes");
    json_t *body = al_req_body_object(x->rq);
    json_t *code = json_object_get(body, "code"), *lang = json_object_get(body, "language");
    json_t *ctx = json_object_get(body, "context_id");
    if (!json_is_string(code) || (lang && !json_is_null(lang) && !json_is_string(lang)) ||
        (ctx && !json_is_null(ctx) && !json_is_string(ctx))) {
        json_decref(body);
        return al_e2b_reply_error(c, 400, "the body must be {code: a string, language?, context_id?, env_vars?}");
    }
    /* a context is its language (POST /contexts) */
    const char *ln = json_string_value(ctx) ? json_string_value(ctx) : json_string_value(lang);
    int l = lang_index(ln);
    if (l < 0) {
        json_decref(body);
        return json_string_value(ctx) ? al_e2b_reply_error(c, 404, "context %.64s not found", ln)
                                      : al_e2b_reply_error(c, 400, "language %.64s: airlock runs python, javascript "
                                                           "and bash cells", ln);
    }
    char why[700];
    json_t *env = NULL;
    if (al_e2b_env(x->sb, json_object_get(body, "env_vars"), &env, why, sizeof why) < 0) {
        json_decref(body);
        return al_e2b_reply_error(c, 400, "%s", why);
    }
    uint8_t rnd[EXEC_MARK_LEN / 2];
    char mark[EXEC_MARK_LEN + 1];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        json_decref(body);
        json_decref(env);
        return al_e2b_reply_error(c, 500, "no randomness for the cell's mark");
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(mark + 2 * i, 3, "%02x", rnd[i]);
    char *run_code = NULL;
    if (langs[l].driver) {
        run_code = cell_code(l, json_string_value(code), env, mark);
    } else {
        char *prelude = al_e2b_bash_prelude(env, "/work");
        if (prelude && asprintf(&run_code, "%s%s\n", prelude, json_string_value(code)) < 0)
            run_code = NULL;
        free(prelude);
    }
    json_decref(env);
    json_decref(body);
    if (!run_code)
        return al_e2b_reply_error(c, 500, "out of memory");
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_FOLLOW)) {
        free(run_code);
        return al_e2b_reply_error(c, 429, "the person follows their most runs at once (followers_per_person)");
    }
    char run_id[40];
    al_connect_code cc;
    /* the SDK's own default wait for a cell (its timeoutMs is not sent) */
    int r = al_e2b_run_start(x->s, x->p, x->sb, langs[l].run_lang, run_code, strlen(run_code), "e2b: runCode",
                             EXEC_TIMEOUT_S, run_id, &cc, why, sizeof why);
    free(run_code);
    if (r < 0) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_FOLLOW);
        return al_e2b_reply_error(c, (unsigned)al_connect_code_http(cc), "%s", why);
    }
    exec_stream *e = calloc(1, sizeof *e);
    if (!e) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_FOLLOW);
        return MHD_NO;
    }
    e->s = x->s;
    e->c = c;
    e->p = *x->p;
    e->last_ms = al_now_ms();
    snprintf(e->run_id, sizeof e->run_id, "%s", run_id);
    memcpy(e->mark, mark, sizeof e->mark);
    al_follow_init(&e->f, x->s, run_id, 0);
    return al_e2b_stream_reply(c, "application/x-ndjson", exec_read, e, exec_free);
}

/* --------------------------------------------------------------- contexts */

static json_t *context_json(int l, const char *cwd) {
    return json_pack("{s:s, s:s, s:s}", "id", langs[l].name, "language", langs[l].name, "cwd",
                     cwd && *cwd ? cwd : "/home/user");
}

enum MHD_Result al_e2b_contexts_create(al_route_ctx *x) {
    json_t *body = al_req_body_object(x->rq);
    json_t *lang = json_object_get(body, "language"), *cwd = json_object_get(body, "cwd");
    int l = json_is_string(lang) || !lang || json_is_null(lang) ? lang_index(json_string_value(lang)) : -1;
    if (!body || l < 0 || (cwd && !json_is_null(cwd) && !json_is_string(cwd))) {
        json_decref(body);
        return al_e2b_reply_error(x->c, 400, "a context is {language: python, javascript or bash, cwd?}");
    }
    /* the cells of a context run in /home/user whatever its cwd: a cell
     * that wants another directory changes to it */
    json_t *doc = context_json(l, "/home/user");
    json_decref(body);
    return al_reply_json(x->c, 200, doc);
}

enum MHD_Result al_e2b_contexts_list(al_route_ctx *x) {
    json_t *list = json_array();
    for (size_t i = 0; i < ELEMENTSOF(langs); i++)
        if (strcmp(langs[i].name, "js") != 0)
            json_array_append_new(list, context_json((int)i, NULL));
    return al_reply_json(x->c, 200, list);
}

/* DELETE and restart: a context holds nothing; a name that is none is 404 */
enum MHD_Result al_e2b_contexts_delete(al_route_ctx *x) {
    if (lang_index(x->arg[0]) < 0)
        return al_e2b_reply_error(x->c, 404, "context %.64s not found", x->arg[0]);
    return al_reply_empty(x->c, 204, NULL, NULL);
}

enum MHD_Result al_e2b_contexts_restart(al_route_ctx *x) { return al_e2b_contexts_delete(x); }
