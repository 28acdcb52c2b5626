/*
 * Fuzz target for Piston's POST /api/v2/execute body, read into a run spec
 * (al_piston_translate, src/api/piston.c) and then checked as any run spec
 * is. What must hold: the language is mapped by Piston's alias table and
 * nothing else; files[0].content becomes the code, byte for byte; every
 * other file keeps its name (NULs and all) and its exact bytes; stdin and
 * args pass as they are; run_timeout (ms) is kept in milliseconds (rounded
 * up to a whole one), checked as its seconds rounded up, and
 * run_memory_limit (bytes) rounded down to MiB, and no other limit is set; and
 * al_run_spec_check answers it (a run, or a refusal that says why).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "api/piston.h"
#include "core/run_spec.h"

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

/* T holds exactly the bytes of the JSON string V */
static bool same_text(const al_run_text *t, const uint8_t *data, size_t len, json_t *v) {
    return json_is_string(v) && (t ? t->s != NULL : data != NULL) && (t ? t->len : len) == json_string_length(v) &&
           memcmp(t ? (const void *)t->s : (const void *)data, json_string_value(v), json_string_length(v)) == 0;
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
    al_run_spec sp;
    char msg[300];
    msg[0] = '\0';
    al_status st = al_piston_translate(pb, &sp, msg, sizeof msg);
    const char *ours = expected_language(json_object_get(pb, "language"));
    json_t *pfiles = json_object_get(pb, "files");
    if (st != AL_STATUS_OK) {
        FUZZ_CHECK(st == AL_STATUS_INVALID || (st == AL_STATUS_INTERNAL && strcmp(msg, "out of memory") == 0),
                   "refused with %u (%s)", (unsigned)st, msg);
        FUZZ_CHECK(msg[0] && !sp.code.s && !sp.files, "a refusal without a message, or with a spec");
        n_refused++;
        json_decref(pb);
        return 0;
    }
    n_translated++;
    FUZZ_CHECK(ours && sp.language.s && strcmp(sp.language.s, ours) == 0, "language %s became %s",
               json_string_value(json_object_get(pb, "language")), sp.language.s);
    FUZZ_CHECK(json_array_size(pfiles) >= 1, "translated without files[0]");
    FUZZ_CHECK(same_text(&sp.code, NULL, 0, json_object_get(json_array_get(pfiles, 0), "content")),
               "files[0].content is not the code");
    FUZZ_CHECK(sp.n_files + 1 == json_array_size(pfiles), "%zu files of %zu", sp.n_files, json_array_size(pfiles));
    for (size_t i = 0; i < sp.n_files; i++) {
        json_t *pf = json_array_get(pfiles, i + 1);
        FUZZ_CHECK(same_text(&sp.files[i].name, NULL, 0, json_object_get(pf, "name")), "files[%zu] renamed", i + 1);
        FUZZ_CHECK(same_text(NULL, sp.files[i].data, sp.files[i].len, json_object_get(pf, "content")),
                   "files[%zu]: content changed in translation", i + 1);
    }
    json_t *sv = json_object_get(pb, "stdin"), *av = json_object_get(pb, "args");
    FUZZ_CHECK(json_is_string(sv) ? same_text(&sp.stdin_text, NULL, 0, sv) : !sp.stdin_text.s, "stdin changed");
    FUZZ_CHECK(json_is_array(av) ? sp.has_args && sp.n_args == json_array_size(av) : !sp.has_args, "args changed");
    for (size_t i = 0; i < sp.n_args; i++)
        FUZZ_CHECK(same_text(&sp.args[i], NULL, 0, json_array_get(av, i)), "args[%zu] changed", i);
    FUZZ_CHECK(!sp.limit[AL_LIMIT_CPUS].has && !sp.limit[AL_LIMIT_PIDS].has, "limits beyond timeout_s and memory_mb");
    json_t *rt = json_object_get(pb, "run_timeout"), *rm = json_object_get(pb, "run_memory_limit");
    const al_run_limit_req *t = &sp.limit[AL_LIMIT_TIMEOUT_S], *m = &sp.limit[AL_LIMIT_MEMORY_MB];
    /* the timeout stays in milliseconds (the check makes its seconds) */
    FUZZ_CHECK(!t->has, "timeout_s set by the translation");
    if (json_is_number(rt) && json_number_value(rt) > 0) {
        double ms = json_number_value(rt), got = (double)sp.timeout_ms;
        /* rounded up: never shorter than asked, less than a millisecond
         * longer (or held at the cap, far above any maximum) */
        FUZZ_CHECK(got >= 1 && (got >= ms || got >= 1e12) && got - 1 < ms, "run_timeout %g ms became %g ms", ms, got);
    } else {
        FUZZ_CHECK(sp.timeout_ms == 0, "timeout_ms without a positive run_timeout");
    }
    if (json_is_number(rm) && json_number_value(rm) > 0) {
        double bytes = json_number_value(rm);
        FUZZ_CHECK(m->has && m->value == (double)(int64_t)m->value, "run_memory_limit %g gave no whole memory_mb", bytes);
        double mb = m->value;
        FUZZ_CHECK(mb >= 0 && mb * 1048576 <= bytes && ((mb + 1) * 1048576 > bytes || mb >= 1e12 - 1),
                   "run_memory_limit %g bytes became %g MiB", bytes, mb);
    } else {
        FUZZ_CHECK(!m->has, "memory_mb without a positive run_memory_limit");
    }
    /* and as a run spec it is taken or refused, with a reason */
    char pmsg[600];
    const char *code = NULL;
    al_status pst = al_run_spec_check(&sp, &bounds, pmsg, sizeof pmsg, &code);
    if (pst == AL_STATUS_OK) {
        n_parsed++;
        /* boxed at the milliseconds asked, bounded by their seconds rounded up */
        FUZZ_CHECK(sp.timeout_ms ? sp.limits.timeout_ms == sp.timeout_ms &&
                                       sp.limits.timeout_s == (sp.timeout_ms + 999) / 1000
                                 : sp.limits.timeout_ms == sp.limits.timeout_s * 1000,
                   "timeout %lld ms checked as %lld s, %lld ms", (long long)sp.timeout_ms,
                   (long long)sp.limits.timeout_s, (long long)sp.limits.timeout_ms);
        FUZZ_CHECK(sp.lang < _AL_RUN_LANG_MAX && strcmp(al_run_languages[sp.lang], ours) == 0, "checked as %s, not %s",
                   al_run_languages[sp.lang], ours);
        for (size_t i = 0; i < sp.n_files; i++)
            FUZZ_CHECK(al_run_valid_file_name(sp.files[i].name.s, sp.files[i].name.len) &&
                           !al_run_reserved_file_name(sp.files[i].name.s),
                       "files[%zu] named %s accepted", i + 1, sp.files[i].name.s);
        n_parsed_deep += sp.n_files > 0 && (sp.timeout_ms || m->has);
    } else {
        FUZZ_CHECK((pst == AL_STATUS_INVALID || pst == AL_STATUS_TOO_LARGE) && pmsg[0] && code, "check refused with %u (%s)",
                   (unsigned)pst, pmsg);
        n_parse_refused++;
    }
    al_run_spec_free(&sp);
    json_decref(pb);
    return 0;
}

int fuzz_replay_check(void) {
    if (n_translated && n_refused && n_parsed && n_parsed_deep && n_parse_refused)
        return 0;
    fprintf(stderr,
            "piston-body: %ld translated, %ld refused, %ld checked, %ld with files and limits, %ld refused by the "
            "check: the corpus misses one\n",
            n_translated, n_refused, n_parsed, n_parsed_deep, n_parse_refused);
    return 1;
}
