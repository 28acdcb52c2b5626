/* A sandbox's runs, as E2B's surfaces make and end them (e2b_run.h). */
#include "e2b_run.h"

#include <errno.h>
#include <nettle/base64.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/packages.h"
#include "../core/views.h"

/* FROM's variables (WHO: "envVars", "envs") into TO, checked. */
static int env_add(json_t *to, json_t *from, const char *who, char *why, size_t n) {
    if (!from || json_is_null(from))
        return 0;
    if (!json_is_object(from)) {
        snprintf(why, n, "%s must be an object of strings", who);
        return -EINVAL;
    }
    const char *k;
    json_t *v;
    json_object_foreach(from, k, v) {
        /* the core's one rule, as a sandbox's envVars were checked at create */
        const char *bad = al_sandbox_env_problem(k);
        if (bad) {
            snprintf(why, n, "%s: \"%.64s\" %s", who, k, bad);
            return -EINVAL;
        }
        if (!json_is_string(v) || json_string_length(v) > AL_E2B_ENV_VALUE_MAX ||
            memchr(json_string_value(v), 0, json_string_length(v))) {
            snprintf(why, n, "%s: %s must be a string of at most %u bytes, without NUL", who, k, AL_E2B_ENV_VALUE_MAX);
            return -EINVAL;
        }
        json_object_set(to, k, v);
        if (json_object_size(to) > AL_E2B_ENVS_MAX) {
            snprintf(why, n, "at most %d environment variables (the sandbox's and the command's together)",
                     AL_E2B_ENVS_MAX);
            return -EINVAL;
        }
    }
    return 0;
}

int al_e2b_env(const al_sandbox *sb, json_t *envs, json_t **ret, char *why, size_t n) {
    json_t *env = json_object();
    *ret = NULL;
    if (!env)
        return -ENOMEM;
    int r = env_add(env, sb->env_vars, "the sandbox's envVars", why, n);
    if (r == 0)
        r = env_add(env, envs, "envs", why, n);
    if (r < 0) {
        json_decref(env);
        return r;
    }
    /* last: what every sandbox's box says of itself (E2B's envd sets the same) */
    json_object_set_new(env, "HOME", json_string("/work"));
    json_object_set_new(env, "E2B_SANDBOX", json_string("true"));
    json_object_set_new(env, "E2B_SANDBOX_ID", json_string(sb->id));
    if (sb->template_id[0])
        json_object_set_new(env, "E2B_TEMPLATE_ID", json_string(sb->template_id));
    *ret = env;
    return 0;
}

/* S single-quoted for bash onto F (a quote as '\'') */
static void quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (const char *p = s; *p; p++)
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    fputc('\'', f);
}

char *al_e2b_bash_prelude(json_t *env, const char *dir) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v) {
        /* names were checked: [A-Za-z_][A-Za-z0-9_]* */
        fprintf(f, "export %s=", k);
        quote(f, json_string_value(v));
        fputc('\n', f);
    }
    fputs("cd -- ", f);
    quote(f, dir);
    fputs(" || exit 1\n", f);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

int al_e2b_box_dir(const char *cwd, char *buf, size_t n, char *why, size_t wn) {
    if (!cwd || !*cwd) {
        snprintf(buf, n, "/work");
        return 0;
    }
    al_sandbox_root root;
    char rel[1024];
    al_error err = { 0 };
    if (al_sandbox_path(cwd, &root, rel, sizeof rel, &err) < 0) {
        snprintf(why, wn, "cwd: %s", err.msg);
        return -EINVAL;
    }
    int w = snprintf(buf, n, "%s%s%s", root == AL_SANDBOX_OUT ? "/out" : "/work", rel[0] ? "/" : "", rel);
    return w < 0 || (size_t)w >= n ? -ENAMETOOLONG : 0;
}

/* The Connect code of the core's refusal ST. */
static al_connect_code code_of(al_status st) {
    switch (st) {
    case AL_STATUS_INVALID:
    case AL_STATUS_TOO_LARGE:
        return AL_CONNECT_INVALID_ARGUMENT;
    case AL_STATUS_FORBIDDEN:
        return AL_CONNECT_PERMISSION_DENIED;
    case AL_STATUS_NOT_FOUND:
    case AL_STATUS_GONE:
        return AL_CONNECT_NOT_FOUND;
    case AL_STATUS_PAYMENT_REQUIRED:
    case AL_STATUS_BUSY:
    case AL_STATUS_QUOTA:
        return AL_CONNECT_RESOURCE_EXHAUSTED;
    case AL_STATUS_CONFLICT:
        return AL_CONNECT_FAILED_PRECONDITION;
    case AL_STATUS_UNAVAILABLE:
        return AL_CONNECT_UNAVAILABLE;
    default:
        return AL_CONNECT_INTERNAL;
    }
}

int al_e2b_run_start(al_service *s, const al_principal *p, const al_sandbox *sb, const char *lang, const char *code,
                     size_t len, const char *description, double timeout_s, char run_id[40], al_connect_code *ret_code,
                     char *msg, size_t msglen) {
    al_run_spec sp = { 0 };
    run_id[0] = '\0';
    /* the sandbox's own: its image and network (bounded by the workspace
     * when it was made, and checked again by the core now), its thread
     * (its /out becomes artifacts there), its working directory */
    int r = al_run_text_set(&sp.language, lang, strlen(lang));
    if (r == 0)
        r = al_run_text_set(&sp.code, code, len);
    if (r == 0)
        r = al_run_text_set(&sp.sandbox, sb->id, strlen(sb->id));
    if (r == 0 && sb->thread_id[0])
        r = al_run_text_set(&sp.thread_id, sb->thread_id, strlen(sb->thread_id));
    if (r == 0 && sb->image[0])
        r = al_run_text_set(&sp.image, sb->image, strlen(sb->image));
    if (r == 0 && sb->network[0])
        r = al_run_text_set(&sp.network, sb->network, strlen(sb->network));
    if (r == 0 && description)
        r = al_run_text_set(&sp.description, description, strlen(description));
    /* checked at create: a sandbox's own metadata reads as it did then */
    const char *pcode = NULL;
    if (r == 0 && al_packages_of_metadata(sb->metadata, &sp, msg, msglen, &pcode) != AL_STATUS_OK) {
        al_run_spec_free(&sp);
        *ret_code = AL_CONNECT_INVALID_ARGUMENT;
        return -EINVAL;
    }
    if (r < 0) {
        al_run_spec_free(&sp);
        *ret_code = AL_CONNECT_INTERNAL;
        snprintf(msg, msglen, "out of memory");
        return -ENOMEM;
    }
    al_run_extra ex = { .via = "e2b", .timeout_within_s = timeout_s };
    json_t *doc = NULL;
    al_status st = al_run_create(s, p, &sp, &ex, &doc);
    al_run_spec_free(&sp);
    const char *id = json_string_value(json_object_get(doc, "id"));
    if ((st == AL_STATUS_CREATED || st == AL_STATUS_OK) && id) {
        snprintf(run_id, 40, "%s", id);
        json_decref(doc);
        return 0;
    }
    json_t *e = json_object_get(doc, "error");
    snprintf(msg, msglen, "%s", json_string_value(json_object_get(e, "message")) ?: "the run could not be made");
    *ret_code = code_of(st);
    json_decref(doc);
    return -EPERM;
}

uint32_t al_e2b_pid(const char *run_id) {
    /* FNV-1a: a pid from the run's id, above the numbers a real envd's
     * first processes get */
    uint32_t h = 2166136261u;
    for (const char *c = run_id; *c; c++)
        h = (h ^ (uint8_t)*c) * 16777619u;
    return 1000 + h % (0x7fffffffu - 1000);
}

void al_e2b_end_of(al_service *s, const al_principal *p, const char *run_id, al_e2b_end *ret, json_t **ret_result) {
    *ret = (al_e2b_end){ .exit_code = -1 };
    snprintf(ret->status, sizeof ret->status, "error");
    if (ret_result)
        *ret_result = NULL;
    al_view_run *run = al_view_run_load(s, p, run_id);
    if (!run) {
        ret->ended = true;
        snprintf(ret->error, sizeof ret->error, "the command's run %s is gone", run_id);
        return;
    }
    json_t *res = run->result ? json_loads(run->result, 0, NULL) : NULL;
    json_t *xc = json_object_get(res, "exit_code");
    const char *msg = run->error_message && run->error_message[0] ? run->error_message : NULL;
    ret->ended = true;
    switch (run->state) {
    case AL_RUN_SUCCEEDED:
    case AL_RUN_FAILED:
        /* a box that ended by a signal of its own has no exit code */
        ret->exit_code = json_is_integer(xc) ? (int)json_integer_value(xc) : -1;
        ret->exited = json_is_integer(xc);
        snprintf(ret->status, sizeof ret->status, ret->exited ? "exit status %d" : "signal: killed", ret->exit_code);
        /* as envd's end says a command that failed (Go's ExitError): the
         * SDK's CommandExitError shows it as its message */
        if (!ret->exited || ret->exit_code != 0)
            snprintf(ret->error, sizeof ret->error, "%s", ret->status);
        /* the sandbox's packages did not install: the command never ran,
         * and its error says why and what to tell (its output is empty) */
        const char *why = al_packages_install_failure(res);
        if (why)
            snprintf(ret->error, sizeof ret->error,
                     "the sandbox's packages could not be installed: %.400s. " AL_PACKAGES_FAILED_TELL, why);
        break;
    case AL_RUN_TIMED_OUT:
    case AL_RUN_KILLED:
    case AL_RUN_CANCELED:
        /* as upstream envd says a killed process ended (Go's ProcessState) */
        snprintf(ret->status, sizeof ret->status, "signal: killed");
        snprintf(ret->error, sizeof ret->error, "%s",
                 run->state == AL_RUN_TIMED_OUT ? "the command ran past its run's timeout and was killed"
                 : run->state == AL_RUN_KILLED  ? (msg ? msg : "the command was killed (a limit of its box)")
                                                : "the command was canceled");
        break;
    case AL_RUN_DENIED:
        snprintf(ret->status, sizeof ret->status, "denied");
        snprintf(ret->error, sizeof ret->error, "denied by an approver%s%s", msg ? ": " : "", msg ? msg : "");
        break;
    case AL_RUN_ERROR:
        snprintf(ret->error, sizeof ret->error, "the command could not run: %s", msg ? msg : run->error_code);
        break;
    default:
        ret->ended = false;
        break;
    }
    if (ret_result)
        *ret_result = res;
    else
        json_decref(res);
    al_view_run_free(run);
}

/* A stream that is only its end-stream frame: an error before any event
 * (Connect's streams carry their errors there, with status 200). */
enum MHD_Result al_e2b_stream_error(struct MHD_Connection *c, al_connect_code code, const char *msg) {
    char *f = NULL;
    size_t n = 0;
    if (al_connect_end_stream(code, msg, &f, &n) < 0)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, f, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(f);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/connect+json");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result al_e2b_stream_reply(struct MHD_Connection *c, const char *type, MHD_ContentReaderCallback read,
                                    void *cls, MHD_ContentReaderFreeCallback done) {
    /* small blocks: a frame goes out as it is made (output is live) */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read, cls, done);
    if (!r) {
        done(cls);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

bool al_e2b_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd pf = { .fd = ci->connect_fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

char *al_e2b_base64(const void *data, size_t len) {
    char *b = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!b)
        return NULL;
    base64_encode_raw(b, len, data);
    b[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
    return b;
}

char *al_e2b_command_line(const char *cmd, json_t *args) {
    size_t n = json_array_size(args);
    const char *last = n ? json_string_value(json_array_get(args, n - 1)) : NULL;
    const char *a0 = n ? json_string_value(json_array_get(args, 0)) : NULL;
    bool bash = strcmp(cmd, "/bin/bash") == 0 || strcmp(cmd, "bash") == 0 || strcmp(cmd, "/bin/sh") == 0;
    /* what commands.run sends: bash -l -c CMD (a login shell's profile
     * aside, CMD is what the box's bash runs) */
    if (bash && last && ((n == 2 && strcmp(a0, "-c") == 0) ||
                         (n == 3 && strcmp(a0, "-l") == 0 &&
                          strcmp(json_string_value(json_array_get(args, 1)) ?: "", "-c") == 0)))
        return strdup(last);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    quote(f, cmd);
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        const char *a = json_string_value(json_array_get(args, i));
        ok = ok && a;
        fputc(' ', f);
        quote(f, a ? a : "");
    }
    fputc('\n', f);
    if (fclose(f) != 0 || !ok) {
        free(text);
        return NULL;
    }
    return text;
}
