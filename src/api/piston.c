/*
 * Piston's POST /api/v2/execute body translated into ours (the body of
 * POST /v1/runs), which then goes through the core like any other
 * (al_run_request_parse, al_run_create). Pure (no store, no log), so that a
 * fuzzer can drive it alone (tests/fuzz/fuzz_piston_body.c).
 */
#include "piston.h"

#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static json_int_t per_unit_up(double d, double unit) {
    double q = d / unit;
    if (!(q < 1e12))
        return (json_int_t)1e12;
    json_int_t n = (json_int_t)q;
    return (double)n < q ? n + 1 : n;
}

al_status al_piston_translate(json_t *b, json_t **ret, char *msg, size_t msglen) {
    *ret = NULL;
    if (!json_is_object(b)) {
        snprintf(msg, msglen, "the body must be a JSON object");
        return AL_STATUS_INVALID;
    }
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
    /* our run: files[0] is the script; the others go to /work by name */
    json_t *body = json_pack("{s:s, s:O, s:[]}", "language", ours, "code",
                             json_object_get(json_array_get(files, 0), "content"), "files");
    if (!body)
        goto oom;
    for (size_t i = 1; i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        json_t *name = json_object_get(f, "name"), *cv = json_object_get(f, "content");
        size_t n = json_string_length(cv);
        _cleanup_free_ char *b64 = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
        if (!b64)
            goto oom;
        base64_encode_raw(b64, n, (const uint8_t *)json_string_value(cv));
        b64[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
        /* the name as a JSON string, NULs and all: "s" would cut it at the
         * first, and a name that al_run_request_parse refuses would become
         * one it takes */
        json_t *e = json_pack("{s:O, s:s}", "name", name, "content_base64", b64);
        if (!e || json_array_append_new(json_object_get(body, "files"), e) < 0)
            goto oom;
    }
    if (json_is_string(stdin_v))
        json_object_set(body, "stdin", stdin_v);
    if (json_is_array(args_v))
        json_object_set(body, "args", args_v);
    json_t *limits = json_object();
    if (!limits || json_object_set_new(body, "limits", limits) < 0)
        goto oom;
    /* Piston's milliseconds are rounded up: 1 ms is a second, not none */
    if (json_is_number(rt) && json_number_value(rt) > 0)
        json_object_set_new(limits, "timeout_s", json_integer(per_unit_up(json_number_value(rt), 1000)));
    if (json_is_number(rm) && json_number_value(rm) > 0) {
        json_int_t mb = per_unit_up(json_number_value(rm), 1048576);
        /* Piston's bytes rounded down to MiB, as it always was */
        if ((double)mb * 1048576 > json_number_value(rm))
            mb--;
        json_object_set_new(limits, "memory_mb", json_integer(mb));
    }
    *ret = body;
    return AL_STATUS_OK;
oom:
    json_decref(body);
    snprintf(msg, msglen, "out of memory");
    return AL_STATUS_INTERNAL;
}
