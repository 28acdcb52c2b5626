/*
 * Fuzz target for Piston's POST /api/v2/execute body, translated into ours
 * (al_piston_translate, src/api/piston.c) and then parsed as any
 * run request is. What must hold: the language is mapped by Piston's alias
 * table and nothing else; files[0].content becomes the code, byte for
 * byte; every other file keeps its name (NULs and all) and its exact bytes
 * in content_base64; stdin and args pass as they are; run_timeout (ms) is
 * rounded up to whole seconds and run_memory_limit (bytes) down to MiB;
 * the body survives the JSON text http.c hands to the run path; and
 * al_run_request_parse answers it (a request, or a refusal that says why).
 */
#include <jansson.h>
#include <nettle/base64.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "api/piston.h"
#include "core/run_request.h"

#define BODY_MAX (8u << 20)
static const al_run_bounds bounds = {
    /* small, so that a mutation reaches the 413 */
    .code_max = 4096,
    .files_max = 64,
    .limit = {
        [AL_LIMIT_TIMEOUT_S] = { 30, 1, 300 },
        [AL_LIMIT_MEMORY_MB] = { 512, 16, 4096 },
        [AL_LIMIT_CPUS] = { 1, 0.01, 4 },
        [AL_LIMIT_PIDS] = { 256, 8, 512 },
    },
};

/* Piston's names as the documentation of the API gives them, kept here
 * apart from the table under test, so that a change of either is seen */
static const struct {
    const char *alias, *ours;
} expect[] = {
    { "python", "python" }, { "python3", "python" }, { "py", "python" }, { "py3", "python" },
    { "javascript", "node" }, { "js", "node" }, { "node", "node" }, { "node-javascript", "node" },
    { "bash", "bash" }, { "sh", "bash" },
};

static long n_translated, n_refused, n_parsed, n_parsed_deep, n_parse_refused;

static const char *expected_language(json_t *lv) {
    const char *l = json_string_value(lv);
    if (!l || strlen(l) != json_string_length(lv))
        return NULL;
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
        if (strcmp(l, expect[i].alias) == 0)
            return expect[i].ours;
    return NULL;
}

/* content_base64 decodes to exactly the bytes of CONTENT */
static void check_content(json_t *b64v, json_t *content, size_t i) {
    const char *b64 = json_string_value(b64v);
    FUZZ_CHECK(b64, "files[%zu] without content_base64", i);
    size_t n = json_string_length(b64v);
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(n) + 1);
    FUZZ_CHECK(out, "out of memory");
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t len = BASE64_DECODE_LENGTH(n);
    FUZZ_CHECK(base64_decode_update(&ctx, &len, out, n, b64) && base64_decode_final(&ctx),
               "files[%zu]: the translation made invalid base64", i);
    FUZZ_CHECK(len == json_string_length(content) && memcmp(out, json_string_value(content), len) == 0,
               "files[%zu]: content changed in translation", i);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > BODY_MAX)
        return 0;
    json_error_t jerr;
    json_t *pb = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!json_is_object(pb)) { /* http.c answers 400 before translating */
        json_decref(pb);
        return 0;
    }
    json_t *body = NULL;
    char msg[300];
    msg[0] = '\0';
    al_status st = al_piston_translate(pb, &body, msg, sizeof msg);
    const char *ours = expected_language(json_object_get(pb, "language"));
    json_t *pfiles = json_object_get(pb, "files");
    if (st != AL_STATUS_OK) {
        FUZZ_CHECK(st == AL_STATUS_INVALID || (st == AL_STATUS_INTERNAL && strcmp(msg, "out of memory") == 0),
                   "refused with %u (%s)", (unsigned)st, msg);
        FUZZ_CHECK(msg[0] && !body, "a refusal without a message, or with a body");
        n_refused++;
        json_decref(pb);
        return 0;
    }
    n_translated++;
    FUZZ_CHECK(json_is_object(body), "translated to no object");
    FUZZ_CHECK(ours && strcmp(json_string_value(json_object_get(body, "language")), ours) == 0,
               "language %s became %s", json_string_value(json_object_get(pb, "language")),
               json_string_value(json_object_get(body, "language")));
    FUZZ_CHECK(json_array_size(pfiles) >= 1, "translated without files[0]");
    FUZZ_CHECK(json_equal(json_object_get(body, "code"), json_object_get(json_array_get(pfiles, 0), "content")),
               "files[0].content is not the code");
    json_t *files = json_object_get(body, "files");
    FUZZ_CHECK(json_array_size(files) + 1 == json_array_size(pfiles), "%zu files of %zu", json_array_size(files),
               json_array_size(pfiles));
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i), *pf = json_array_get(pfiles, i + 1);
        FUZZ_CHECK(json_equal(json_object_get(f, "name"), json_object_get(pf, "name")), "files[%zu] renamed", i + 1);
        check_content(json_object_get(f, "content_base64"), json_object_get(pf, "content"), i + 1);
    }
    json_t *sv = json_object_get(pb, "stdin"), *av = json_object_get(pb, "args");
    FUZZ_CHECK(json_is_string(sv) ? json_equal(sv, json_object_get(body, "stdin")) : !json_object_get(body, "stdin"),
               "stdin changed");
    FUZZ_CHECK(json_is_array(av) ? json_equal(av, json_object_get(body, "args")) : !json_object_get(body, "args"),
               "args changed");
    json_t *lim = json_object_get(body, "limits"), *rt = json_object_get(pb, "run_timeout"),
           *rm = json_object_get(pb, "run_memory_limit");
    FUZZ_CHECK(json_is_object(lim), "no limits object");
    json_t *t = json_object_get(lim, "timeout_s"), *m = json_object_get(lim, "memory_mb");
    if (json_is_number(rt) && json_number_value(rt) > 0) {
        double ms = json_number_value(rt);
        FUZZ_CHECK(json_is_integer(t), "run_timeout %g gave no timeout_s", ms);
        double s = (double)json_integer_value(t);
        /* rounded up: never shorter than asked, less than a second longer
         * (or held at the cap, far above any maximum) */
        FUZZ_CHECK(s >= 1 && (s * 1000 >= ms || s >= 1e12) && (s - 1) * 1000 < ms, "run_timeout %g ms became %g s", ms,
                   s);
    } else {
        FUZZ_CHECK(!t, "timeout_s without a positive run_timeout");
    }
    if (json_is_number(rm) && json_number_value(rm) > 0) {
        double bytes = json_number_value(rm);
        FUZZ_CHECK(json_is_integer(m), "run_memory_limit %g gave no memory_mb", bytes);
        double mb = (double)json_integer_value(m);
        FUZZ_CHECK(mb >= 0 && mb * 1048576 <= bytes && ((mb + 1) * 1048576 > bytes || mb >= 1e12 - 1),
                   "run_memory_limit %g bytes became %g MiB", bytes, mb);
    } else {
        FUZZ_CHECK(!m, "memory_mb without a positive run_memory_limit");
    }
    FUZZ_CHECK(json_object_size(lim) == (size_t)(t != NULL) + (size_t)(m != NULL), "limits beyond timeout_s and memory_mb");
    /* http.c hands the run path the body as JSON text: it must read back */
    char *text = json_dumps(body, JSON_COMPACT);
    FUZZ_CHECK(text, "the translated body cannot be written as JSON");
    json_t *again = json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    FUZZ_CHECK(again && json_equal(again, body), "the translated body does not read back: %s", jerr.text);
    free(text);
    /* and as a run request it is taken or refused, with a reason */
    al_run_request r;
    char pmsg[600];
    const char *code = NULL;
    al_status pst = al_run_request_parse(again, &bounds, &r, pmsg, sizeof pmsg, &code);
    if (pst == AL_STATUS_OK) {
        n_parsed++;
        json_t *c0 = json_object_get(json_array_get(pfiles, 0), "content");
        FUZZ_CHECK(r.code_len == json_string_length(c0) && memcmp(r.code, json_string_value(c0), r.code_len) == 0,
                   "the code parsed is not files[0].content");
        FUZZ_CHECK(strcmp(r.language, ours) == 0, "parsed as %s, not %s", r.language, ours);
        FUZZ_CHECK(r.n_files + 1 == json_array_size(pfiles), "parsed %zu files", r.n_files);
        for (size_t i = 0; i < r.n_files; i++) {
            json_t *pc = json_object_get(json_array_get(pfiles, i + 1), "content");
            FUZZ_CHECK(r.files[i].len == json_string_length(pc) &&
                           memcmp(r.files[i].data, json_string_value(pc), r.files[i].len) == 0,
                       "files[%zu] parsed to other bytes", i + 1);
        }
        n_parsed_deep += r.n_files > 0 && (r.limit[AL_LIMIT_TIMEOUT_S].has || r.limit[AL_LIMIT_MEMORY_MB].has);
        al_run_request_free(&r);
    } else {
        FUZZ_CHECK((pst == AL_STATUS_INVALID || pst == AL_STATUS_TOO_LARGE) && pmsg[0] && code, "parse refused with %u (%s)",
                   (unsigned)pst, pmsg);
        n_parse_refused++;
    }
    json_decref(again);
    json_decref(body);
    json_decref(pb);
    return 0;
}

int fuzz_replay_check(void) {
    if (n_translated && n_refused && n_parsed && n_parsed_deep && n_parse_refused)
        return 0;
    fprintf(stderr,
            "piston-body: %ld translated, %ld refused, %ld parsed, %ld with files and limits, %ld refused by the "
            "parser: the corpus misses one\n",
            n_translated, n_refused, n_parsed, n_parsed_deep, n_parse_refused);
    return 1;
}
