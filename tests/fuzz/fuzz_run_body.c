/*
 * Fuzz target for the body of POST /v1/runs read into a run spec
 * (src/api/run_body.c) and checked (src/core/run_spec.c): all of it is the
 * caller's. The bytes are read as http.c reads a body (json_loadb with
 * JSON_REJECT_DUPLICATES, within body_max; and with JSON_ALLOW_NUL, which
 * http.c does not pass, so that the spec's own refusal of a NUL in a name
 * or in base64 is exercised too), then read and checked with fixed bounds,
 * and what the check promises al_run_create is checked: an accepted spec
 * is one that may be written to disk and the store as it stands (a
 * language of the table, code within its size and without NUL, plain
 * unique file names whose bytes are what the base64 said, limits within
 * their ranges); a refusal is a 400 or 413 with a message and a code; the
 * same body always gets the same answer; and an accepted body's hash is
 * the same when its keys come in another order.
 */
#include <jansson.h>
#include <nettle/base64.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "api/run_body.h"
#include "core/run_spec.h"
#include "proxy/policy.h"
#include "util/json_keys.h"

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
                                     "unknown field" };
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

/* T holds exactly the bytes of the JSON string V */
static bool same_text(const al_run_text *t, json_t *v) {
    return json_is_string(v) && t->s && t->len == json_string_length(v) &&
           memcmp(t->s, json_string_value(v), t->len) == 0;
}

static void check_accepted(json_t *body, const al_run_spec *r) {
    FUZZ_CHECK(r->lang < _AL_RUN_LANG_MAX && strcmp(r->language.s, al_run_languages[r->lang]) == 0,
               "language outside the table");
    FUZZ_CHECK(same_text(&r->language, json_object_get(body, "language")), "language %s is not the one sent",
               r->language.s);
    FUZZ_CHECK(r->code.len > 0 && r->code.len <= bounds.code_max && !fuzz_has_nul(r->code.s, r->code.len),
               "code of %zu bytes accepted", r->code.len);
    FUZZ_CHECK(same_text(&r->code, json_object_get(body, "code")), "code is not the one sent");
    FUZZ_CHECK(!r->thread_id.s || al_valid_thread_id(r->thread_id.s), "thread_id %s accepted", r->thread_id.s);
    FUZZ_CHECK(!!r->network.s == !!r->net, "network given without its policy");
    FUZZ_CHECK(!r->description.s || (r->description.len <= AL_RUN_DESCRIPTION_MAX &&
                                     strlen(r->description.s) == r->description.len),
               "description too long");
    FUZZ_CHECK(!r->stdin_text.s || r->stdin_text.len <= AL_RUN_STDIN_MAX, "stdin too long");
    json_t *sv = json_object_get(body, "stdin");
    FUZZ_CHECK(json_is_string(sv) ? same_text(&r->stdin_text, sv) : !r->stdin_text.s, "stdin is not the one sent");
    json_t *av = json_object_get(body, "args");
    FUZZ_CHECK(r->has_args == (av && !json_is_null(av)), "args given or not");
    FUZZ_CHECK(r->n_args <= AL_RUN_ARGS_MAX && r->n_args == json_array_size(av), "%zu args", r->n_args);
    for (size_t i = 0; i < r->n_args; i++) {
        FUZZ_CHECK(r->args[i].len <= AL_RUN_ARG_MAX && !fuzz_has_nul(r->args[i].s, r->args[i].len),
                   "args[%zu] accepted", i);
        FUZZ_CHECK(same_text(&r->args[i], json_array_get(av, i)), "args[%zu] is not the one sent", i);
    }
    json_t *arts = json_object_get(body, "artifacts");
    FUZZ_CHECK(r->n_artifacts <= AL_RUN_ARTIFACT_REFS_MAX && r->n_artifacts == json_array_size(arts),
               "%zu artifacts", r->n_artifacts);
    for (size_t i = 0; i < r->n_artifacts; i++) {
        json_t *a = json_array_get(arts, i);
        FUZZ_CHECK(json_is_string(a) ? same_text(&r->artifacts[i], a) : !r->artifacts[i].s,
                   "artifacts[%zu] is not the one sent", i);
    }
    FUZZ_CHECK(r->n_files == json_array_size(json_object_get(body, "files")) && r->n_files <= bounds.files_max,
               "%zu files of %zu", r->n_files, json_array_size(json_object_get(body, "files")));
    for (size_t i = 0; i < r->n_files; i++) {
        const al_run_file *f = &r->files[i];
        FUZZ_CHECK(f->name.s && al_run_valid_file_name(f->name.s, f->name.len) && !strchr(f->name.s, '/'),
                   "files[%zu] name %s", i, f->name.s);
        FUZZ_CHECK(!al_run_reserved_file_name(f->name.s), "reserved name %s accepted", f->name.s);
        for (size_t k = 0; k < i; k++)
            FUZZ_CHECK(strcmp(f->name.s, r->files[k].name.s) != 0, "two files named %s", f->name.s);
        json_t *jf = json_array_get(json_object_get(body, "files"), i);
        FUZZ_CHECK(same_text(&f->name, json_object_get(jf, "name")), "files[%zu] name is not the one sent", i);
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
    FUZZ_CHECK(r->limits.timeout_s >= 1 && r->limits.memory_bytes >= (16 << 20) && r->limits.cpu_millis >= 10 &&
                   r->limits.pids >= 8,
               "limits recorded below their minimum");
}

static void check_same(const al_run_spec *a, const al_run_spec *b) {
    FUZZ_CHECK(a->lang == b->lang && a->code.len == b->code.len && memcmp(a->code.s, b->code.s, a->code.len) == 0 &&
                   a->n_files == b->n_files && !a->thread_id.s == !b->thread_id.s && !a->image.s == !b->image.s &&
                   a->stdin_text.len == b->stdin_text.len,
               "a second read made another spec");
    for (size_t i = 0; i < a->n_files; i++)
        FUZZ_CHECK(a->files[i].len == b->files[i].len && memcmp(a->files[i].data, b->files[i].data, a->files[i].len) == 0,
                   "files[%zu] decoded twice to different bytes", i);
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
        FUZZ_CHECK(a->limit[i].has == b->limit[i].has && a->limit[i].value == b->limit[i].value, "limits differ");
}

/* Read and check BODY into *SP: the status, MSG and *CODE. */
static al_status read_checked(json_t *body, al_run_spec *sp, char *msg, size_t len, const char **code, bool *parsed) {
    al_status st = al_run_body_parse(body, sp, msg, len, code);
    *parsed = st == AL_STATUS_OK;
    if (st == AL_STATUS_OK)
        st = al_run_spec_check(sp, &bounds, msg, len, code);
    return st;
}

static void spec_hash(const al_run_spec *sp, char out[65]) {
    al_run_staged st;
    FUZZ_CHECK(al_run_staged_of_spec(sp, &st) == 0, "out of memory");
    al_run_spec_hash(sp, &st, out);
    al_run_staged_free(&st);
    FUZZ_CHECK(strlen(out) == 64, "no hash");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > BODY_MAX) /* http.c answers 413 before it reads one */
        return 0;
    json_error_t jerr;
    json_t *body = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!body)
        return 0;
    al_run_spec r, r2;
    char msg[600], msg2[600];
    const char *code = NULL, *code2 = NULL;
    bool parsed, parsed2;
    al_status st = read_checked(body, &r, msg, sizeof msg, &code, &parsed);
    al_status st2 = read_checked(body, &r2, msg2, sizeof msg2, &code2, &parsed2);
    FUZZ_CHECK(st == st2 && strcmp(msg, msg2) == 0, "read twice: %u (%s), then %u (%s)", (unsigned)st, msg,
               (unsigned)st2, msg2);
    if (st == AL_STATUS_OK) {
        FUZZ_CHECK(code == NULL && msg[0] == '\0', "accepted with a refusal's message %s", msg);
        check_accepted(body, &r);
        check_same(&r, &r2);
        /* strict fields: an accepted body holds none the reader drops */
        FUZZ_CHECK(!al_json_unknown_key(body, al_run_field_names, _AL_RUN_F_MAX), "unknown field %s accepted",
                   al_json_unknown_key(body, al_run_field_names, _AL_RUN_F_MAX));
        n_ok++;
        bool limits = false;
        for (size_t i = 0; i < _AL_LIMIT_MAX; i++)
            limits |= r.limit[i].has;
        n_ok_deep += r.n_files > 0 && limits;
        /* the same body with its keys in another order: the same hash */
        char h[65], h2[65];
        spec_hash(&r, h);
        char *sorted = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII);
        json_t *again = sorted ? json_loads(sorted, JSON_ALLOW_NUL, &jerr) : NULL;
        FUZZ_CHECK(again, "the body does not read back: %s", jerr.text);
        al_run_spec r3;
        bool parsed3;
        FUZZ_CHECK(read_checked(again, &r3, msg2, sizeof msg2, &code2, &parsed3) == AL_STATUS_OK,
                   "the same body in another order is refused: %s", msg2);
        spec_hash(&r3, h2);
        FUZZ_CHECK(strcmp(h, h2) == 0, "the same body in another order hashed to another value");
        al_run_spec_free(&r3);
        json_decref(again);
        free(sorted);
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
        /* a body refused as it was read leaves nothing to free */
        if (!parsed)
            FUZZ_CHECK(r.files == NULL && r.net == NULL && r.n_files == 0 && r.code.s == NULL, "a refusal left a spec");
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
            if (strncmp(msg, kinds[i], strlen(kinds[i])) == 0) {
                n_kind[i]++;
                break;
            }
    }
    al_run_spec_free(&r);
    al_run_spec_free(&r2);
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
