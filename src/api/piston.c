/*
 * Piston's POST /api/v2/execute body read into a run spec, which then
 * goes through the core like any other (al_run_spec_check, al_run_create).
 * Pure (no store, no log), so that a fuzzer can drive it alone
 * (tests/fuzz/fuzz_piston_body.c).
 */
#include "piston.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_body.h"
#include "../util/json_keys.h"
#include "../util/util.h"

const al_piston_alias al_piston_aliases[] = {
    { "python", "python" }, { "python3", "python" }, { "py", "python" }, { "py3", "python" },
    { "javascript", "node" }, { "js", "node" }, { "node", "node" }, { "node-javascript", "node" },
    { "bash", "bash" }, { "sh", "bash" },
};
const size_t al_piston_n_aliases = ELEMENTSOF(al_piston_aliases);

/* D (a positive number) divided by UNIT and rounded up, held below a
 * bound far above any maximum: a huge one is refused by the limit's range
 * check (as it is), never an overflow of the conversion. */
static double per_unit_up(double d, double unit) {
    double q = d / unit;
    if (!(q < 1e12))
        return 1e12;
    int64_t n = (int64_t)q;
    return (double)n < q ? (double)(n + 1) : (double)n;
}

/* Piston's documented fields of an execute (its README), which its
 * clients send (piston-client sends every one but the cpu times, with
 * -1 for a limit not set) */
static const char *const piston_keys[] = { "language",         "version",         "files",
                                           "stdin",            "args",            "compile_timeout",
                                           "run_timeout",      "compile_cpu_time", "run_cpu_time",
                                           "compile_memory_limit", "run_memory_limit" };
static const char *const piston_file_keys[] = { "name", "content", "encoding" };

/* Whether N, a limit of Piston's that airlock does not apply, asks for
 * nothing: absent, null, or Piston's -1 (and 0) for "no limit". */
static bool not_asked(json_t *n) {
    return !n || json_is_null(n) || (json_is_number(n) && json_number_value(n) <= 0);
}

/* Strict fields (json_keys.h): a field outside Piston's, a file's field
 * outside {name, content, encoding}, an encoding other than utf8 (the
 * content is taken as text: base64 or hex would run their encoded form),
 * and a cpu-time limit airlock cannot apply are refused, named. */
static bool piston_fields_ok(json_t *b, char *msg, size_t msglen) {
    if (!al_json_keys_check(b, "the body", piston_keys, ELEMENTSOF(piston_keys), msg, msglen))
        return false;
    json_t *files = json_object_get(b, "files"), *f;
    size_t i;
    json_array_foreach(files, i, f) {
        char where[32];
        snprintf(where, sizeof where, "files[%zu]", i);
        if (!al_json_keys_check(f, where, piston_file_keys, ELEMENTSOF(piston_file_keys), msg, msglen))
            return false;
        json_t *enc = json_object_get(f, "encoding");
        if (enc && !json_is_null(enc) && !(json_is_string(enc) && (strcmp(json_string_value(enc), "utf8") == 0 ||
                                                                     strcmp(json_string_value(enc), "utf-8") == 0))) {
            snprintf(msg, msglen, "files[%zu].encoding: only utf8 is taken here (the content is the file's text)", i);
            return false;
        }
    }
    /* the compile stage's fields ask nothing of a run (nothing is
     * compiled); a cpu-time limit of the run would, and is not applied */
    if (!not_asked(json_object_get(b, "run_cpu_time"))) {
        snprintf(msg, msglen, "run_cpu_time is not applied here: bound the run with run_timeout (ms)");
        return false;
    }
    return true;
}

al_status al_piston_translate(json_t *b, al_run_spec *ret, char *msg, size_t msglen) {
    *ret = (al_run_spec){ 0 };
    if (!json_is_object(b)) {
        snprintf(msg, msglen, "the body must be a JSON object");
        return AL_STATUS_INVALID;
    }
    if (!piston_fields_ok(b, msg, msglen))
        return AL_STATUS_INVALID;
    json_t *lv = json_object_get(b, "language");
    const char *lang = json_string_value(lv), *ours = NULL;
    for (size_t i = 0; lang && strlen(lang) == json_string_length(lv) && i < al_piston_n_aliases; i++)
        if (strcmp(lang, al_piston_aliases[i].alias) == 0)
            ours = al_piston_aliases[i].ours;
    json_t *files = json_object_get(b, "files");
    if (!ours || !json_is_array(files) || json_array_size(files) < 1 ||
        !json_is_string(json_object_get(json_array_get(files, 0), "content"))) {
        snprintf(msg, msglen, "want language (python, javascript, bash) and files[0].content");
        return AL_STATUS_INVALID;
    }
    /* a field of the wrong type, or a file without a name or content, is
     * refused: silently dropped, it would run something other than what
     * was sent (and shown to an approver) */
    json_t *stdin_v = json_object_get(b, "stdin"), *args_v = json_object_get(b, "args");
    json_t *rt = json_object_get(b, "run_timeout"), *rm = json_object_get(b, "run_memory_limit");
    bool shape_ok = (!stdin_v || json_is_null(stdin_v) || json_is_string(stdin_v)) &&
                    (!args_v || json_is_null(args_v) || json_is_array(args_v)) &&
                    (!rt || json_is_null(rt) || json_is_number(rt)) && (!rm || json_is_null(rm) || json_is_number(rm));
    for (size_t i = 1; shape_ok && i < json_array_size(files); i++)
        shape_ok = json_is_string(json_object_get(json_array_get(files, i), "name")) &&
                   json_is_string(json_object_get(json_array_get(files, i), "content"));
    if (!shape_ok) {
        snprintf(msg, msglen, "want files[] of {name, content} strings (files[0] the script), "
                              "stdin a string, args an array, run_timeout and run_memory_limit numbers");
        return AL_STATUS_INVALID;
    }
    /* our run: files[0] is the script; the others go to /work by name,
     * byte for byte (a name's NULs too: the spec's check refuses it, where
     * a C string would have cut it to a name it takes) */
    al_run_spec sp = { 0 };
    json_t *code = json_object_get(json_array_get(files, 0), "content");
    bool ok = al_run_text_set(&sp.language, ours, strlen(ours)) == 0 &&
              al_run_text_set(&sp.code, json_string_value(code), json_string_length(code)) == 0;
    for (size_t i = 1; ok && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        json_t *name = json_object_get(f, "name"), *cv = json_object_get(f, "content");
        ok = al_run_spec_add_file(&sp, json_string_value(name), json_string_length(name), json_string_value(cv),
                                  json_string_length(cv)) == 0;
    }
    if (!ok)
        goto oom;
    /* stdin and args as REST reads them */
    const char *rcode = NULL;
    al_status st = al_run_body_field(&sp, AL_RUN_F_STDIN, stdin_v, msg, msglen, &rcode);
    if (st == AL_STATUS_OK)
        st = al_run_body_field(&sp, AL_RUN_F_ARGS, args_v, msg, msglen, &rcode);
    if (st != AL_STATUS_OK) {
        al_run_spec_free(&sp);
        return st;
    }
    /* Piston's milliseconds, to the box's timer (a fraction of one rounded
     * up: 0.5 is 1 ms, not none); the check holds them to the workspace's
     * bounds in seconds */
    if (json_is_number(rt) && json_number_value(rt) > 0)
        sp.timeout_ms = (int64_t)per_unit_up(json_number_value(rt), 1);
    if (json_is_number(rm) && json_number_value(rm) > 0) {
        double mb = per_unit_up(json_number_value(rm), 1048576);
        /* Piston's bytes rounded down to MiB, as it always was */
        if (mb * 1048576 > json_number_value(rm))
            mb--;
        sp.limit[AL_LIMIT_MEMORY_MB] = (al_run_limit_req){ true, mb };
    }
    *ret = sp;
    return AL_STATUS_OK;
oom:
    al_run_spec_free(&sp);
    snprintf(msg, msglen, "out of memory");
    return AL_STATUS_INTERNAL;
}
