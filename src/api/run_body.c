/*
 * REST's run body read into a run spec (run_body.h): the JSON's types;
 * the values are the spec's to check (core/run_spec.c).
 */
#include "run_body.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../util/json_keys.h"
#include "../util/util.h"

const char *const al_run_field_names[_AL_RUN_F_MAX] = {
    [AL_RUN_F_ARGS] = "args",           [AL_RUN_F_STDIN] = "stdin",         [AL_RUN_F_IMAGE] = "image",
    [AL_RUN_F_LANGUAGE] = "language",   [AL_RUN_F_CODE] = "code",           [AL_RUN_F_THREAD_ID] = "thread_id",
    [AL_RUN_F_NETWORK] = "network",     [AL_RUN_F_DESCRIPTION] = "description", [AL_RUN_F_FILES] = "files",
    [AL_RUN_F_ARTIFACTS] = "artifacts", [AL_RUN_F_LIMITS] = "limits",     [AL_RUN_F_FOLDERS] = "folders",
    [AL_RUN_F_PACKAGES] = "packages",
};

/* What a field of the wrong type is told: the rule of its values, which a
 * value that breaks it hears from the spec's check in the same words. */
static const char *const wrong_type[_AL_RUN_F_MAX] = {
    [AL_RUN_F_ARGS] = AL_RUN_RULE_ARGS,
    [AL_RUN_F_STDIN] = AL_RUN_RULE_STDIN,
    [AL_RUN_F_IMAGE] = AL_RUN_RULE_IMAGE,
    [AL_RUN_F_LANGUAGE] = AL_RUN_RULE_LANGUAGE,
    [AL_RUN_F_CODE] = AL_RUN_RULE_CODE,
    [AL_RUN_F_THREAD_ID] = AL_RUN_RULE_THREAD_ID,
    [AL_RUN_F_NETWORK] = AL_RUN_RULE_NETWORK,
    [AL_RUN_F_DESCRIPTION] = AL_RUN_RULE_DESCRIPTION,
    [AL_RUN_F_FILES] = "files must be an array of {name, content_base64} objects",
    [AL_RUN_F_ARTIFACTS] = AL_RUN_RULE_ARTIFACTS,
    [AL_RUN_F_LIMITS] = "limits must be an object",
    [AL_RUN_F_FOLDERS] = AL_RUN_RULE_FOLDERS,
    [AL_RUN_F_PACKAGES] = AL_RUN_RULE_PACKAGES,
};

#define REFUSE(...) return al_run_refuse(msg, msglen, code, __VA_ARGS__)
#define OOM() REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory")

al_status al_run_body_limits(json_t *v, al_run_limit_req ret[_AL_LIMIT_MAX], char *msg, size_t msglen,
                             const char **code) {
    if (!v || json_is_null(v))
        return AL_STATUS_OK;
    if (!json_is_object(v))
        REFUSE(AL_STATUS_INVALID, "bad_request", "%s", wrong_type[AL_RUN_F_LIMITS]);
    if (!al_json_keys_check(v, "limits", al_run_limit_names, _AL_LIMIT_MAX, msg, msglen)) {
        *code = "bad_request";
        return AL_STATUS_INVALID;
    }
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++) {
        json_t *x = json_object_get(v, al_run_limit_names[i]);
        if (!x || json_is_null(x))
            continue;
        /* one that is no number is a NaN, which no range holds: the check
         * says what the range is */
        ret[i] = (al_run_limit_req){ .has = true, .value = json_is_number(x) ? json_number_value(x) : NAN };
    }
    return AL_STATUS_OK;
}

/* The entries of files[] */
static al_status read_files(al_run_spec *sp, json_t *files, char *msg, size_t msglen, const char **code) {
    size_t i;
    json_t *f;
    static const char *const keys[] = { "name", "content_base64" };
    json_array_foreach(files, i, f) {
        json_t *nv = json_object_get(f, "name"), *bv = json_object_get(f, "content_base64");
        if (!json_is_object(f) || !json_is_string(nv))
            REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_FILE_NAME, i);
        char where[32];
        snprintf(where, sizeof where, "files[%zu]", i);
        if (!al_json_keys_check(f, where, keys, ELEMENTSOF(keys), msg, msglen)) {
            *code = "bad_request";
            return AL_STATUS_INVALID;
        }
        int r = json_is_string(bv) ? al_run_spec_add_file_base64(sp, json_string_value(nv), json_string_length(nv),
                                                                 json_string_value(bv), json_string_length(bv))
                                   : -EINVAL;
        if (r == -ENOMEM)
            OOM();
        if (r < 0)
            REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_FILE_BASE64, i);
    }
    return AL_STATUS_OK;
}

al_status al_run_body_field(al_run_spec *sp, al_run_field f, json_t *v, char *msg, size_t msglen, const char **code) {
    if (!v || json_is_null(v))
        return AL_STATUS_OK;
    al_run_text *text = NULL;
    switch (f) {
    case AL_RUN_F_STDIN:
        text = &sp->stdin_text;
        break;
    case AL_RUN_F_IMAGE:
        text = &sp->image;
        break;
    case AL_RUN_F_LANGUAGE:
        text = &sp->language;
        break;
    case AL_RUN_F_CODE:
        text = &sp->code;
        break;
    case AL_RUN_F_THREAD_ID:
        text = &sp->thread_id;
        break;
    case AL_RUN_F_NETWORK:
        text = &sp->network;
        break;
    case AL_RUN_F_DESCRIPTION:
        text = &sp->description;
        break;
    case AL_RUN_F_ARGS: {
        size_t k;
        json_t *a;
        /* a list longer than the most it may hold is not copied */
        bool ok = json_is_array(v) && json_array_size(v) <= AL_RUN_ARGS_MAX;
        json_array_foreach(v, k, a) ok = ok && json_is_string(a);
        if (!ok)
            REFUSE(AL_STATUS_INVALID, "bad_request", "%s", wrong_type[f]);
        sp->has_args = true;
        json_array_foreach(v, k, a) if (al_run_spec_add_arg(sp, json_string_value(a), json_string_length(a)) < 0) OOM();
        return AL_STATUS_OK;
    }
    case AL_RUN_F_FILES:
        if (!json_is_array(v))
            REFUSE(AL_STATUS_INVALID, "bad_request", "%s", wrong_type[f]);
        return read_files(sp, v, msg, msglen, code);
    case AL_RUN_F_ARTIFACTS: {
        if (!json_is_array(v) || json_array_size(v) > AL_RUN_ARTIFACT_REFS_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "%s", wrong_type[f]);
        size_t k;
        json_t *a;
        /* an entry that is no string names no artifact: the core answers
         * as for an unknown id */
        json_array_foreach(v, k, a) if (al_run_spec_add_artifact(sp, json_string_value(a), json_string_length(a)) < 0)
            OOM();
        return AL_STATUS_OK;
    }
    case AL_RUN_F_LIMITS:
        return al_run_body_limits(v, sp->limit, msg, msglen, code);
    case AL_RUN_F_FOLDERS:
        return al_run_spec_folders_of(sp, v, msg, msglen, code);
    case AL_RUN_F_PACKAGES:
        return al_run_spec_packages_of(sp, v, msg, msglen, code);
    case _AL_RUN_F_MAX:
        break;
    }
    if (!text)
        OOM(); /* no such field: not reached */
    if (!json_is_string(v))
        REFUSE(AL_STATUS_INVALID, "bad_request", "%s", wrong_type[f]);
    if (al_run_text_set(text, json_string_value(v), json_string_length(v)) < 0)
        OOM();
    return AL_STATUS_OK;
}

#undef OOM
#undef REFUSE

al_status al_run_body_parse(json_t *body, al_run_spec *ret, char *msg, size_t msglen, const char **code) {
    static char none[1];
    if (!msg || msglen == 0) {
        msg = none;
        msglen = sizeof none;
    }
    msg[0] = '\0';
    *code = NULL;
    *ret = (al_run_spec){ 0 };
    if (!json_is_object(body))
        return al_run_refuse(msg, msglen, code, AL_STATUS_INVALID, "bad_request", "the body must be a JSON object");
    /* a field no reader takes is refused, not dropped (json_keys.h) */
    if (!al_json_keys_check(body, "the body", al_run_field_names, _AL_RUN_F_MAX, msg, msglen)) {
        *code = "bad_request";
        return AL_STATUS_INVALID;
    }
    al_run_spec sp = { 0 };
    for (size_t f = 0; f < _AL_RUN_F_MAX; f++) {
        al_status st = al_run_body_field(&sp, (al_run_field)f, json_object_get(body, al_run_field_names[f]), msg,
                                         msglen, code);
        if (st != AL_STATUS_OK) {
            al_run_spec_free(&sp);
            return st;
        }
    }
    *ret = sp;
    return AL_STATUS_OK;
}
