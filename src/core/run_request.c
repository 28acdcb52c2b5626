/*
 * A run request's body read into a typed record (run_request.h): the
 * checks of POST /v1/runs that need no store, taken out of al_run_create
 * so that they can be fuzzed alone (Piston's execute body is translated
 * into ours in src/api/piston.c). Every refusal says what was wanted; none
 * logs.
 */
#include "run_request.h"

#include <errno.h>
#include <nettle/base64.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

const char *const al_run_languages[_AL_RUN_LANG_MAX] = { "python", "node", "bash" };
const char *const al_run_limit_names[_AL_LIMIT_MAX] = { "timeout_s", "memory_mb", "cpus", "pids" };

/* what the box's /work holds besides the request's files */
static const char *const reserved_names[] = { "main.py", "main.js", "main.sh", "documents" };

bool al_valid_thread_id(const char *t) {
    size_t n = strlen(t);
    if (n == 0 || n > 64)
        return false;
    for (const char *c = t; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '_' || *c == '-'))
            return false;
    return strcmp(t, ".") != 0 && strcmp(t, "..") != 0;
}

bool al_run_valid_file_name(const char *n, size_t len) {
    /* a NUL would cut the name where the file is made: "a\0b" and "a\0c"
     * would be one file, and neither the name that was sent */
    return len > 0 && len <= AL_RUN_FILE_NAME_MAX && strlen(n) == len && !strchr(n, '/') && strcmp(n, ".") != 0 &&
           strcmp(n, "..") != 0;
}

bool al_run_reserved_file_name(const char *n) {
    for (size_t k = 0; k < ELEMENTSOF(reserved_names); k++)
        if (strcmp(n, reserved_names[k]) == 0)
            return true;
    return false;
}

/* IN (N bytes, no NUL) decoded into a new buffer of *RET_LEN bytes (with
 * one spare byte, so that an empty file is not a NULL). */
static int decode_base64(const char *in, size_t n, uint8_t **ret, size_t *ret_len) {
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(n) + 1);
    if (!out)
        return -ENOMEM;
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t len = BASE64_DECODE_LENGTH(n);
    if (!base64_decode_update(&ctx, &len, out, n, in) || !base64_decode_final(&ctx)) {
        free(out);
        return -EINVAL;
    }
    *ret = out;
    *ret_len = len;
    return 0;
}

static al_status refuse(char *msg, size_t msglen, const char **code, al_status status, const char *c, const char *fmt,
                        ...) _printf_(6, 7);
static al_status refuse(char *msg, size_t msglen, const char **code, al_status status, const char *c, const char *fmt,
                        ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    *code = c;
    return status;
}

/* A value the request gave: present and not null. */
static bool given(const json_t *v) { return v && !json_is_null(v); }

void al_run_request_free(al_run_request *r) {
    if (!r)
        return;
    for (size_t i = 0; r->files && i < r->n_files; i++)
        free(r->files[i].data);
    free(r->files);
    free(r->net);
    *r = (al_run_request){ 0 };
}

al_status al_run_request_parse(json_t *body, const al_run_bounds *b, al_run_request *ret, char *msg, size_t msglen,
                               const char **code) {
    static char none[1];
    if (!msg || msglen == 0) {
        msg = none;
        msglen = sizeof none;
    }
    msg[0] = '\0';
    *code = NULL;
    *ret = (al_run_request){ 0 };
    al_run_request r = { 0 };
/* the message first: its arguments may point into R (the policy's error) */
#define REFUSE(...)                                                                                                   \
    do {                                                                                                              \
        al_status status_ = refuse(msg, msglen, code, __VA_ARGS__);                                                    \
        al_run_request_free(&r);                                                                                      \
        return status_;                                                                                               \
    } while (0)
    if (!json_is_object(body))
        REFUSE(AL_STATUS_INVALID, "bad_request", "the body must be a JSON object");
    json_t *lang = json_object_get(body, "language"), *cv = json_object_get(body, "code");
    json_t *thread = json_object_get(body, "thread_id"), *files = json_object_get(body, "files");
    json_t *arts = json_object_get(body, "artifacts"), *net = json_object_get(body, "network");
    json_t *lim = json_object_get(body, "limits"), *desc = json_object_get(body, "description");
    json_t *img = json_object_get(body, "image");
    json_t *args = json_object_get(body, "args"), *stdin_text = json_object_get(body, "stdin");
    if (given(args)) {
        size_t k;
        json_t *av;
        bool ok = json_is_array(args) && json_array_size(args) <= AL_RUN_ARGS_MAX;
        json_array_foreach(args, k, av) ok = ok && json_is_string(av) && json_string_length(av) <= AL_RUN_ARG_MAX &&
                                         !memchr(json_string_value(av), 0, json_string_length(av));
        if (!ok)
            REFUSE(AL_STATUS_INVALID, "bad_request", "args must be at most 256 strings of at most 4096 bytes, without NUL");
        r.args = args;
    }
    if (given(stdin_text)) {
        if (!json_is_string(stdin_text) || json_string_length(stdin_text) > AL_RUN_STDIN_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "stdin must be a string of at most 1 MiB");
        r.stdin_text = json_string_value(stdin_text);
        r.stdin_len = json_string_length(stdin_text);
    }
    if (given(img)) {
        /* its shape only: the caller resolves the alias or digest */
        if (!json_is_string(img) || strlen(json_string_value(img)) != json_string_length(img))
            REFUSE(AL_STATUS_INVALID, "bad_request", "image: want an alias or sha256 digest");
        r.image = json_string_value(img);
    }
    const char *language = json_string_value(lang);
    r.lang = _AL_RUN_LANG_MAX;
    for (size_t i = 0; language && i < _AL_RUN_LANG_MAX; i++)
        if (strcmp(language, al_run_languages[i]) == 0 && strlen(language) == json_string_length(lang))
            r.lang = (al_run_lang)i;
    if (r.lang == _AL_RUN_LANG_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", "language must be one of python, node, bash");
    r.language = al_run_languages[r.lang];
    if (!json_is_string(cv) || json_string_length(cv) == 0)
        REFUSE(AL_STATUS_INVALID, "bad_request", "code must be a non-empty string");
    r.code = json_string_value(cv);
    r.code_len = json_string_length(cv);
    if (r.code_len > b->code_max)
        REFUSE(AL_STATUS_TOO_LARGE, "payload_too_large", "code must be at most %llu bytes, without NUL", (unsigned long long)b->code_max);
    if (memchr(r.code, 0, r.code_len))
        REFUSE(AL_STATUS_INVALID, "bad_request", "code must be at most %llu bytes, without NUL", (unsigned long long)b->code_max);
    if (given(thread)) {
        if (!json_is_string(thread) || strlen(json_string_value(thread)) != json_string_length(thread) ||
            !al_valid_thread_id(json_string_value(thread)))
            REFUSE(AL_STATUS_INVALID, "bad_request", "thread_id must be 1-64 characters of A-Z a-z 0-9 . _ -");
        r.thread_id = json_string_value(thread);
    }
    /* the policy's syntax now, so that a bad one is refused before the
     * rest; whether the workspace allows it is the caller's to ask */
    if (given(net)) {
        if (!json_is_string(net) || strlen(json_string_value(net)) != json_string_length(net))
            REFUSE(AL_STATUS_INVALID, "bad_request", "network must be a policy string (offline, packages, internet, "
                                       "hosts:a.example,b.example, hosts+packages:a.example)");
        r.network = json_string_value(net);
        r.net = malloc(sizeof *r.net);
        al_error nerr = { 0 };
        if (!r.net || al_net_policy_parse(r.network, r.net, &nerr) < 0)
            REFUSE(AL_STATUS_INVALID, "bad_request", "network: %s", r.net ? nerr.msg : "out of memory");
    }
    if (given(desc)) {
        if (!json_is_string(desc) || json_string_length(desc) > AL_RUN_DESCRIPTION_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "description must be a string of at most %d bytes", AL_RUN_DESCRIPTION_MAX);
        r.description = json_string_value(desc);
    }
    if (given(files) && (!json_is_array(files) || json_array_size(files) > b->files_max))
        REFUSE(AL_STATUS_INVALID, "bad_request", "files must be an array of at most %llu entries", (unsigned long long)b->files_max);
    if (given(arts)) {
        if (!json_is_array(arts) || json_array_size(arts) > AL_RUN_ARTIFACT_REFS_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "artifacts must be an array of at most %d artifact ids", AL_RUN_ARTIFACT_REFS_MAX);
        r.artifacts = arts;
    }
    if (given(lim) && !json_is_object(lim))
        REFUSE(AL_STATUS_INVALID, "bad_request", "limits must be an object");
    const char *key;
    json_t *val;
    json_object_foreach(lim, key, val) {
        bool known = false;
        for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
            known |= strcmp(key, al_run_limit_names[i]) == 0;
        if (!known)
            REFUSE(AL_STATUS_INVALID, "bad_request", "unknown limit \"%s\" (timeout_s, memory_mb, cpus, pids)", key);
    }
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++) {
        json_t *x = json_object_get(lim, al_run_limit_names[i]);
        r.limit[i].value = b->limit[i].def > b->limit[i].max ? b->limit[i].max : b->limit[i].def;
        if (given(x)) {
            /* a NaN is no number from min to max: both tests are false */
            double d = json_number_value(x);
            if (!json_is_number(x) || !(d >= b->limit[i].min && d <= b->limit[i].max))
                REFUSE(AL_STATUS_INVALID, "bad_request", "limits.%s must be a number from %g to %g", al_run_limit_names[i],
                       b->limit[i].min, b->limit[i].max);
            r.limit[i].has = true;
            r.limit[i].value = d;
        }
    }
    /* files: decoded now so a bad one is refused before anything is made */
    size_t nf = json_array_size(files);
    r.files = calloc(nf + 1, sizeof *r.files);
    if (!r.files)
        REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory");
    for (size_t i = 0; i < nf; i++) {
        json_t *f = json_array_get(files, i), *nv = json_object_get(f, "name"), *bv = json_object_get(f, "content_base64");
        const char *name = json_string_value(nv);
        if (!json_is_object(f) || !name || !al_run_valid_file_name(name, json_string_length(nv)) ||
            al_run_reserved_file_name(name))
            REFUSE(AL_STATUS_INVALID, "bad_request", "files[%zu].name must be a plain file name (no /, not . or .., not %s)", i,
                   "main.py, main.js, main.sh or documents");
        const char *b64 = json_string_value(bv);
        /* a NUL would end the text nettle reads, and the rest be ignored */
        if (!b64 || strlen(b64) != json_string_length(bv) ||
            decode_base64(b64, json_string_length(bv), &r.files[i].data, &r.files[i].len) < 0)
            REFUSE(AL_STATUS_INVALID, "bad_request", "files[%zu].content_base64 is not valid base64", i);
        r.files[i].name = name;
        r.n_files = i + 1;
        for (size_t k = 0; k < i; k++)
            if (strcmp(name, r.files[k].name) == 0)
                REFUSE(AL_STATUS_INVALID, "bad_request", "two files are named \"%s\"", name);
    }
#undef REFUSE
    *ret = r;
    return AL_STATUS_OK;
}
