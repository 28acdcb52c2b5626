/*
 * Fuzz target for the body of POST /v1/runs (src/core/run_request.c):
 * all of it is the caller's. The bytes are read as http.c reads a body
 * (json_loadb with JSON_REJECT_DUPLICATES, within body_max; and with
 * JSON_ALLOW_NUL, which http.c does not pass, so that the parser's own
 * refusal of a NUL in a name or in base64 is exercised too), then parsed
 * with fixed bounds, and what the parser promises al_run_create is
 * checked: an accepted request is one that may be written to disk and the
 * store as it stands (a language of the table, code within its size and
 * without NUL, plain unique file names whose bytes are what the base64
 * said, limits within their ranges); a refusal is a 400 or 413 with a
 * message and a code; and the same body always gets the same answer.
 */
#include <jansson.h>
#include <nettle/base64.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "proxy/policy.h"
#include "core/run_request.h"

/* http.c's default body_max and the configuration's defaults */
#define BODY_MAX (8u << 20)
static const al_run_bounds bounds = {
    /* small, so that a mutation reaches the 413 */
    .code_max = 4096,
    .files_max = 64,
    .limit = {
        [AL_LIMIT_TIMEOUT_S] = { 30, 1, 300 },
        [AL_LIMIT_MEMORY_MB] = { 512, 16, 4096 },
        [AL_LIMIT_CPUS] = { 1, 0.01, 4 },
        /* a default above its maximum is cut to the maximum */
        [AL_LIMIT_PIDS] = { 256, 8, 128 },
    },
};

/* what the corpus reached (fuzz_replay_check) */
static long n_ok, n_ok_deep, n_413;
static const char *const kinds[] = { "args", "stdin", "image", "language", "code", "thread_id", "network",
                                     "description", "files must", "files[", "two files", "artifacts", "limits",
                                     "unknown limit" };
static long n_kind[ELEMENTSOF(kinds)];

static int is_b64_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* DATA (LEN bytes) is what B64 decodes to: its canonical encoding is B64
 * without the white space nettle skips, but for the unused low bits of the
 * last character before the padding, which a decoder drops. */
static void check_base64(const char *b64, const uint8_t *data, size_t len) {
    size_t n = strlen(b64);
    char *s = malloc(n + 1), *e = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    FUZZ_CHECK(s && e, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_b64_space(b64[i]))
            s[k++] = b64[i];
    s[k] = '\0';
    base64_encode_raw(e, len, data);
    size_t el = BASE64_ENCODE_RAW_LENGTH(len);
    e[el] = '\0';
    FUZZ_CHECK(k == el, "content_base64 of %zu characters decoded to %zu bytes", k, len);
    size_t last = el;
    while (last > 0 && e[last - 1] == '=')
        last--;
    for (size_t i = 0; i < el; i++)
        FUZZ_CHECK(e[i] == s[i] || i + 1 == last, "decoded bytes re-encode to %s, not %s", e, s);
    free(s);
    free(e);
}

static void check_accepted(json_t *body, const al_run_request *r) {
    FUZZ_CHECK(r->lang < _AL_RUN_LANG_MAX && r->language == al_run_languages[r->lang], "language outside the table");
    json_t *lv = json_object_get(body, "language");
    FUZZ_CHECK(json_is_string(lv) && json_string_length(lv) == strlen(r->language) &&
                   strcmp(json_string_value(lv), r->language) == 0,
               "language %s is not the one sent", r->language);
    json_t *cv = json_object_get(body, "code");
    FUZZ_CHECK(r->code_len > 0 && r->code_len <= bounds.code_max && !fuzz_has_nul(r->code, r->code_len),
               "code of %zu bytes accepted", r->code_len);
    FUZZ_CHECK(r->code == json_string_value(cv) && r->code_len == json_string_length(cv), "code is not the one sent");
    FUZZ_CHECK(!r->thread_id || al_valid_thread_id(r->thread_id), "thread_id %s accepted", r->thread_id);
    FUZZ_CHECK(!!r->network == !!r->net, "network given without its policy");
    FUZZ_CHECK(!r->description || strlen(r->description) <= AL_RUN_DESCRIPTION_MAX, "description too long");
    FUZZ_CHECK(r->stdin_len <= AL_RUN_STDIN_MAX && (r->stdin_text || r->stdin_len == 0), "stdin too long");
    FUZZ_CHECK(!r->args || (json_is_array(r->args) && json_array_size(r->args) <= AL_RUN_ARGS_MAX), "args");
    for (size_t i = 0; i < json_array_size(r->args); i++) {
        json_t *a = json_array_get(r->args, i);
        FUZZ_CHECK(json_is_string(a) && json_string_length(a) <= AL_RUN_ARG_MAX &&
                       !fuzz_has_nul(json_string_value(a), json_string_length(a)),
                   "args[%zu] accepted", i);
    }
    FUZZ_CHECK(json_array_size(r->artifacts) <= AL_RUN_ARTIFACT_REFS_MAX, "too many artifacts");
    FUZZ_CHECK(r->n_files == json_array_size(json_object_get(body, "files")) && r->n_files <= bounds.files_max,
               "%zu files of %zu", r->n_files, json_array_size(json_object_get(body, "files")));
    for (size_t i = 0; i < r->n_files; i++) {
        const al_run_file *f = &r->files[i];
        FUZZ_CHECK(f->name && al_run_valid_file_name(f->name, strlen(f->name)) && !strchr(f->name, '/'),
                   "files[%zu] name %s", i, f->name);
        FUZZ_CHECK(!al_run_reserved_file_name(f->name), "reserved name %s accepted", f->name);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(strcmp(f->name, r->files[k].name) != 0, "two files named %s", f->name);
        json_t *jf = json_array_get(json_object_get(body, "files"), i);
        json_t *jn = json_object_get(jf, "name");
        FUZZ_CHECK(json_string_length(jn) == strlen(f->name) && strcmp(json_string_value(jn), f->name) == 0,
                   "files[%zu] name is not the one sent", i);
        FUZZ_CHECK(f->data != NULL, "files[%zu] without a buffer", i);
        check_base64(json_string_value(json_object_get(jf, "content_base64")), f->data, f->len);
    }
    json_t *lim = json_object_get(body, "limits");
    const char *key;
    json_t *val;
    json_object_foreach(lim, key, val) {
        bool known = false;
        for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
            known |= strcmp(key, al_run_limit_names[i]) == 0;
        FUZZ_CHECK(known, "unknown limit %s accepted", key);
    }
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++) {
        double v = r->limit[i].value;
        json_t *x = json_object_get(lim, al_run_limit_names[i]);
        FUZZ_CHECK(r->limit[i].has == (x && !json_is_null(x)), "limits.%s given or not", al_run_limit_names[i]);
        FUZZ_CHECK(v >= bounds.limit[i].min && v <= bounds.limit[i].max, "limits.%s = %g out of range",
                   al_run_limit_names[i], v);
        if (r->limit[i].has)
            FUZZ_CHECK(v == json_number_value(x), "limits.%s is not the one sent", al_run_limit_names[i]);
    }
}

static void check_same(const al_run_request *a, const al_run_request *b) {
    FUZZ_CHECK(a->lang == b->lang && a->code == b->code && a->code_len == b->code_len && a->n_files == b->n_files &&
                   a->thread_id == b->thread_id && a->image == b->image && a->stdin_len == b->stdin_len,
               "a second parse read another request");
    for (size_t i = 0; i < a->n_files; i++)
        FUZZ_CHECK(a->files[i].len == b->files[i].len && memcmp(a->files[i].data, b->files[i].data, a->files[i].len) == 0,
                   "files[%zu] decoded twice to different bytes", i);
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
        FUZZ_CHECK(a->limit[i].has == b->limit[i].has && a->limit[i].value == b->limit[i].value, "limits differ");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > BODY_MAX) /* http.c answers 413 before it reads one */
        return 0;
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!body)
        return 0;
    al_run_request r, r2;
    char msg[600], msg2[600];
    const char *code = NULL, *code2 = NULL;
    al_status st = al_run_request_parse(body, &bounds, &r, msg, sizeof msg, &code);
    al_status st2 = al_run_request_parse(body, &bounds, &r2, msg2, sizeof msg2, &code2);
    FUZZ_CHECK(st == st2 && strcmp(msg, msg2) == 0, "parsed twice: %u (%s), then %u (%s)", (unsigned)st, msg,
               (unsigned)st2, msg2);
    if (st == AL_STATUS_OK) {
        FUZZ_CHECK(code == NULL && msg[0] == '\0', "accepted with a refusal's message %s", msg);
        check_accepted(body, &r);
        check_same(&r, &r2);
        n_ok++;
        bool limits = false;
        for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
            limits |= r.limit[i].has;
        n_ok_deep += r.n_files > 0 && limits;
    } else {
        FUZZ_CHECK(st == AL_STATUS_INVALID || st == AL_STATUS_TOO_LARGE, "refused with status %u", (unsigned)st);
        FUZZ_CHECK(msg[0] && code && code2 && strcmp(code, code2) == 0, "refusal without a message or code");
        /* a network refusal is the policy's own error (it was once read
         * from freed memory, and said "out of memory") */
        if (strncmp(msg, "network: ", 9) == 0) {
            static al_net_policy np;
            al_error ne = { 0 };
            FUZZ_CHECK(al_net_policy_parse(json_string_value(json_object_get(body, "network")), &np, &ne) < 0 &&
                           strcmp(msg + 9, ne.msg) == 0,
                       "the network refusal \"%s\" is not the policy's own error \"%s\"", msg, ne.msg);
        }
        FUZZ_CHECK((st == AL_STATUS_TOO_LARGE) == (strcmp(code, "payload_too_large") == 0) &&
                       (st == AL_STATUS_TOO_LARGE || strcmp(code, "bad_request") == 0),
                   "status %u with code %s", (unsigned)st, code);
        if (st == AL_STATUS_TOO_LARGE) {
            json_t *cv = json_object_get(body, "code");
            FUZZ_CHECK(json_string_length(cv) > bounds.code_max, "413 for code of %zu bytes", json_string_length(cv));
            n_413++;
        }
        /* a refusal leaves nothing to free */
        FUZZ_CHECK(r.files == NULL && r.net == NULL && r.n_files == 0, "a refusal left a record");
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
            if (strncmp(msg, kinds[i], strlen(kinds[i])) == 0) {
                n_kind[i]++;
                break;
            }
    }
    al_run_request_free(&r);
    al_run_request_free(&r2);
    json_decref(body);
    return 0;
}

int fuzz_replay_check(void) {
    int bad = 0;
    if (!n_ok || !n_ok_deep || !n_413) {
        fprintf(stderr, "run-body: %ld accepted, %ld with files and limits, %ld 413: the corpus misses one\n", n_ok,
                n_ok_deep, n_413);
        bad = 1;
    }
    for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
        if (!n_kind[i]) {
            fprintf(stderr, "run-body: no refusal of %s in the corpus\n", kinds[i]);
            bad = 1;
        }
    return bad;
}
