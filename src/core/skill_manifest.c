/*
 * Skill bundles, the pure part: the manifest (skill.json), the paths of a
 * bundle's files, the subset of JSON Schema an entrypoint's arguments are
 * declared in, and the validation of arguments against it. No I/O here, so
 * all of it is unit-tested (tests/unit/test_skills.c) and fuzzable.
 */
#include <string.h>

#include "skills.h"
#include "../util/json_keys.h"

#define DESCRIPTION_MAX 2048
#define VERSION_MAX 32
#define SCHEMA_DEPTH_MAX 8
#define SCHEMA_PROPERTIES_MAX 64
#define ENUM_MAX 256

static bool name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

bool al_skill_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > AL_SKILL_NAME_MAX || name[0] == '-' || name[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(name[i]))
            return false;
    return true;
}

/* Entrypoint names are what a model types: letters, digits, _ and -. */
static bool entrypoint_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > AL_SKILL_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool version_valid(const char *v) {
    size_t n = v ? strlen(v) : 0;
    if (n == 0 || n > VERSION_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '+'))
            return false;
    }
    return true;
}

int al_skill_path_check(const char *path, unsigned *ret_depth, al_error *err) {
    size_t n = strlen(path);
    if (n == 0)
        return al_err(err, "skill", EINVAL, "an empty file name");
    if (n > AL_SKILL_PATH_MAX)
        return al_err(err, "skill", ENAMETOOLONG, "a file name longer than %d bytes", AL_SKILL_PATH_MAX);
    if (path[0] == '/')
        return al_err(err, "skill", EINVAL, "\"%.200s\": absolute paths are not allowed in a skill", path);
    unsigned depth = 0;
    for (const char *c = path; *c;) {
        size_t l = strcspn(c, "/");
        if (l == 0)
            return al_err(err, "skill", EINVAL, "\"%.200s\": empty path component", path);
        if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
            return al_err(err, "skill", EINVAL, "\"%.200s\": \".\" and \"..\" are not allowed in a skill's paths", path);
        for (size_t i = 0; i < l; i++)
            if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f || c[i] == '\\')
                return al_err(err, "skill", EINVAL, "\"%.200s\": control characters and backslashes are not allowed",
                              path);
        depth++;
        c += l;
        if (*c == '/') {
            c++;
            if (!*c)
                break; /* a directory entry "a/b/" */
        }
    }
    if (depth > AL_SKILL_DEPTH_MAX)
        return al_err(err, "skill", ELOOP, "\"%.200s\" is deeper than %d levels", path, AL_SKILL_DEPTH_MAX);
    if (ret_depth)
        *ret_depth = depth;
    return 0;
}

/* ---------------------------------------------------------------- schema */

static const char *const schema_types[] = { "object", "string", "integer", "number", "boolean", "array" };

static bool is_schema_type(const char *t) {
    for (size_t i = 0; t && i < ELEMENTSOF(schema_types); i++)
        if (strcmp(t, schema_types[i]) == 0)
            return true;
    return false;
}

/* 2.0 is an integer to JSON Schema; within 2^53 a double is exact */
static bool whole(double d) { return d > -9007199254740992.0 && d < 9007199254740992.0 && d == (double)(int64_t)d; }

static bool type_matches(const char *type, json_t *v) {
    if (strcmp(type, "object") == 0)
        return json_is_object(v);
    if (strcmp(type, "string") == 0)
        return json_is_string(v);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(v) || (json_is_real(v) && whole(json_real_value(v)));
    if (strcmp(type, "number") == 0)
        return json_is_number(v);
    if (strcmp(type, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(type, "array") == 0)
        return json_is_array(v);
    return false;
}

static bool non_negative_int(json_t *v) { return json_is_integer(v) && json_integer_value(v) >= 0; }

static int check_schema_at(json_t *sc, const char *where, unsigned depth, al_error *err) {
    if (depth > SCHEMA_DEPTH_MAX)
        return al_err(err, "schema", ELOOP, "%s: schemas may nest at most %d levels", where, SCHEMA_DEPTH_MAX);
    if (!json_is_object(sc))
        return al_err(err, "schema", EINVAL, "%s: a schema must be an object", where);
    const char *type = json_string_value(json_object_get(sc, "type"));
    if (!is_schema_type(type))
        return al_err(err, "schema", EINVAL,
                      "%s: \"type\" must be one of object, string, integer, number, boolean, array", where);
    const char *key;
    json_t *v;
    json_object_foreach(sc, key, v) {
        if (strcmp(key, "type") == 0)
            continue;
        if (strcmp(key, "description") == 0 || strcmp(key, "title") == 0) {
            if (!json_is_string(v) || json_string_length(v) > DESCRIPTION_MAX)
                return al_err(err, "schema", EINVAL, "%s: \"%s\" must be a string of at most %d bytes", where, key,
                              DESCRIPTION_MAX);
        } else if (strcmp(key, "default") == 0 || strcmp(key, "examples") == 0) {
            /* documentation for the model; never applied */
        } else if (strcmp(key, "enum") == 0) {
            if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > ENUM_MAX)
                return al_err(err, "schema", EINVAL, "%s: \"enum\" must be an array of 1 to %d values", where, ENUM_MAX);
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) if (!type_matches(type, e)) return al_err(
                err, "schema", EINVAL, "%s: enum value %zu is not of type %s", where, i, type);
        } else if (strcmp(key, "minimum") == 0 || strcmp(key, "maximum") == 0) {
            if (strcmp(type, "integer") != 0 && strcmp(type, "number") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"%s\" applies to integer and number only", where, key);
            if (!json_is_number(v))
                return al_err(err, "schema", EINVAL, "%s: \"%s\" must be a number", where, key);
        } else if (strcmp(key, "maxLength") == 0 || strcmp(key, "minLength") == 0) {
            if (strcmp(type, "string") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"%s\" applies to strings only", where, key);
            if (!non_negative_int(v))
                return al_err(err, "schema", EINVAL, "%s: \"%s\" must be a non-negative integer", where, key);
        } else if (strcmp(key, "maxItems") == 0 || strcmp(key, "minItems") == 0) {
            if (strcmp(type, "array") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"%s\" applies to arrays only", where, key);
            if (!non_negative_int(v))
                return al_err(err, "schema", EINVAL, "%s: \"%s\" must be a non-negative integer", where, key);
        } else if (strcmp(key, "items") == 0) {
            if (strcmp(type, "array") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"items\" applies to arrays only", where);
            char sub[300];
            snprintf(sub, sizeof sub, "%s.items", where);
            int r = check_schema_at(v, sub, depth + 1, err);
            if (r < 0)
                return r;
        } else if (strcmp(key, "properties") == 0) {
            if (strcmp(type, "object") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"properties\" applies to objects only", where);
            if (!json_is_object(v) || json_object_size(v) > SCHEMA_PROPERTIES_MAX)
                return al_err(err, "schema", EINVAL, "%s: \"properties\" must be an object of at most %d entries",
                              where, SCHEMA_PROPERTIES_MAX);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                if (strlen(pk) == 0 || strlen(pk) > AL_SKILL_NAME_MAX)
                    return al_err(err, "schema", EINVAL, "%s: property names must be 1 to %d bytes", where,
                                  AL_SKILL_NAME_MAX);
                char sub[300];
                snprintf(sub, sizeof sub, "%s.%s", where, pk);
                int r = check_schema_at(pv, sub, depth + 1, err);
                if (r < 0)
                    return r;
            }
        } else if (strcmp(key, "required") == 0) {
            if (strcmp(type, "object") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"required\" applies to objects only", where);
            if (!json_is_array(v))
                return al_err(err, "schema", EINVAL, "%s: \"required\" must be an array of property names", where);
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                if (!json_is_string(e) || !json_object_get(json_object_get(sc, "properties"), json_string_value(e)))
                    return al_err(err, "schema", EINVAL, "%s: required[%zu] names no declared property", where, i);
            }
        } else if (strcmp(key, "additionalProperties") == 0) {
            if (strcmp(type, "object") != 0)
                return al_err(err, "schema", EINVAL, "%s: \"additionalProperties\" applies to objects only", where);
            if (!json_is_boolean(v))
                return al_err(err, "schema", EINVAL, "%s: \"additionalProperties\" must be true or false", where);
        } else {
            /* refusing what we would not enforce: an author must not
             * believe a constraint holds when it is silently ignored */
            return al_err(err, "schema", ENOTSUP,
                          "%s: unsupported schema keyword \"%.64s\" (supported: type, properties, required, "
                          "additionalProperties, enum, minimum, maximum, minLength, maxLength, items, minItems, "
                          "maxItems, description, title, default, examples)",
                          where, key);
        }
    }
    return 0;
}

int al_skill_schema_check(json_t *schema, al_error *err) {
    if (!json_is_object(schema) || !json_is_string(json_object_get(schema, "type")) ||
        strcmp(json_string_value(json_object_get(schema, "type")), "object") != 0)
        return al_err(err, "schema", EINVAL, "input_schema: the top level must be {\"type\": \"object\", ...}");
    return check_schema_at(schema, "input_schema", 0, err);
}

static int validate_at(json_t *sc, json_t *v, const char *where, unsigned depth, al_error *err) {
    const char *type = json_string_value(json_object_get(sc, "type"));
    if (depth > SCHEMA_DEPTH_MAX + 1)
        return al_err(err, "args", ELOOP, "%s: nested too deeply", where);
    if (!type || !type_matches(type, v))
        return al_err(err, "args", EINVAL, "%s: must be %s %s", where,
                      type && (type[0] == 'a' || type[0] == 'i' || type[0] == 'o') ? "an" : "a", type ? type : "?");
    json_t *en = json_object_get(sc, "enum");
    if (en) {
        bool found = false;
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) found |= json_equal(e, v) || (json_is_number(e) && json_is_number(v) &&
                                                                   json_number_value(e) == json_number_value(v));
        if (!found) {
            char *allowed = json_dumps(en, JSON_COMPACT | JSON_ENCODE_ANY);
            int r = al_err(err, "args", EINVAL, "%s: must be one of %.300s", where, allowed ? allowed : "the enum");
            free(allowed);
            return r;
        }
    }
    if (json_is_number(v)) {
        json_t *mn = json_object_get(sc, "minimum"), *mx = json_object_get(sc, "maximum");
        if (mn && json_number_value(v) < json_number_value(mn))
            return al_err(err, "args", ERANGE, "%s: must be at least %g", where, json_number_value(mn));
        if (mx && json_number_value(v) > json_number_value(mx))
            return al_err(err, "args", ERANGE, "%s: must be at most %g", where, json_number_value(mx));
    }
    if (json_is_string(v)) {
        /* lengths in characters, as JSON Schema counts them */
        size_t chars = 0;
        for (const unsigned char *c = (const unsigned char *)json_string_value(v); *c; c++)
            chars += (*c & 0xC0) != 0x80;
        json_t *mn = json_object_get(sc, "minLength"), *mx = json_object_get(sc, "maxLength");
        if (mx && chars > (size_t)json_integer_value(mx))
            return al_err(err, "args", ERANGE, "%s: must be at most %lld characters", where,
                          (long long)json_integer_value(mx));
        if (mn && chars < (size_t)json_integer_value(mn))
            return al_err(err, "args", ERANGE, "%s: must be at least %lld characters", where,
                          (long long)json_integer_value(mn));
    }
    if (json_is_array(v)) {
        json_t *mn = json_object_get(sc, "minItems"), *mx = json_object_get(sc, "maxItems");
        if (mx && json_array_size(v) > (size_t)json_integer_value(mx))
            return al_err(err, "args", ERANGE, "%s: must have at most %lld items", where,
                          (long long)json_integer_value(mx));
        if (mn && json_array_size(v) < (size_t)json_integer_value(mn))
            return al_err(err, "args", ERANGE, "%s: must have at least %lld items", where,
                          (long long)json_integer_value(mn));
        json_t *items = json_object_get(sc, "items");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (!items)
                break;
            char sub[300];
            snprintf(sub, sizeof sub, "%s[%zu]", where, i);
            int r = validate_at(items, e, sub, depth + 1, err);
            if (r < 0)
                return r;
        }
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(sc, "properties");
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(sc, "required"), i, e) {
            if (!json_object_get(v, json_string_value(e)))
                return al_err(err, "args", EINVAL, "%s.%s: is required", where, json_string_value(e));
        }
        bool closed = json_is_false(json_object_get(sc, "additionalProperties"));
        const char *k;
        json_t *pv;
        json_object_foreach(v, k, pv) {
            json_t *psc = json_object_get(props, k);
            if (!psc) {
                if (closed)
                    return al_err(err, "args", EINVAL, "%s: unknown property \"%.64s\" (additionalProperties is false)",
                                  where, k);
                continue;
            }
            char sub[300];
            snprintf(sub, sizeof sub, "%s.%.64s", where, k);
            int r = validate_at(psc, pv, sub, depth + 1, err);
            if (r < 0)
                return r;
        }
    }
    return 0;
}

int al_skill_args_validate(json_t *schema, json_t *args, al_error *err) {
    if (!json_is_object(args))
        return al_err(err, "args", EINVAL, "args: must be a JSON object");
    char *text = json_dumps(args, JSON_COMPACT);
    size_t n = text ? strlen(text) : 0;
    free(text);
    if (n > AL_SKILL_ARGS_MAX)
        return al_err(err, "args", E2BIG, "args: larger than %d bytes as JSON", AL_SKILL_ARGS_MAX);
    return validate_at(schema, args, "args", 0, err);
}

/* -------------------------------------------------------------- manifest */

static int str_field(json_t *o, const char *key, size_t max, bool required, const char *where, al_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v && !required)
        return 0;
    if (!json_is_string(v) || json_string_length(v) > max || (required && json_string_length(v) == 0))
        return al_err(err, "skill", EINVAL, "%s: \"%s\" must be a%s string of at most %zu bytes", where, key,
                      required ? " non-empty" : "", max);
    return 0;
}

static int only_keys(json_t *o, const char *const *keys, size_t n, const char *where, al_error *err) {
    const char *k = al_json_unknown_key(o, keys, n);
    return k ? al_err(err, "skill", EINVAL, "%s: unknown field \"%.64s\"", where, k) : 0;
}

int al_skill_manifest_parse(const char *text, size_t len, json_t **ret, al_error *err) {
    if (len > AL_SKILL_MANIFEST_MAX)
        return al_err(err, "skill", EFBIG, "skill.json is larger than %d bytes", AL_SKILL_MANIFEST_MAX);
    json_error_t jerr;
    json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!m)
        return al_err(err, "skill", EINVAL, "skill.json is not JSON: %s (line %d)", jerr.text, jerr.line);
    static const char *const top[] = { "name", "version", "description", "image", "entrypoints" };
    static const char *const ep_keys[] = { "name", "language", "script", "description", "input_schema", "timeout_s" };
    int r = 0;
    if (!json_is_object(m)) {
        r = al_err(err, "skill", EINVAL, "skill.json must be an object");
        goto out;
    }
    if ((r = only_keys(m, top, ELEMENTSOF(top), "skill.json", err)) < 0)
        goto out;
    const char *name = json_string_value(json_object_get(m, "name"));
    if (!al_skill_name_valid(name)) {
        r = al_err(err, "skill", EINVAL,
                   "skill.json: \"name\" must be 1 to %d characters of a-z, 0-9 and -, not starting or ending with -",
                   AL_SKILL_NAME_MAX);
        goto out;
    }
    if (!version_valid(json_string_value(json_object_get(m, "version")))) {
        r = al_err(err, "skill", EINVAL, "skill.json: \"version\" must be 1 to %d characters of A-Z a-z 0-9 . - +",
                   VERSION_MAX);
        goto out;
    }
    if ((r = str_field(m, "description", DESCRIPTION_MAX, true, "skill.json", err)) < 0)
        goto out;
    json_t *img = json_object_get(m, "image");
    if (img && (!json_is_string(img) || json_string_length(img) == 0 || json_string_length(img) > 80)) {
        r = al_err(err, "skill", EINVAL, "skill.json: \"image\" must be \"host\", an image alias or a sha256 digest");
        goto out;
    }
    json_t *eps = json_object_get(m, "entrypoints");
    if (!json_is_array(eps) || json_array_size(eps) == 0 || json_array_size(eps) > AL_SKILL_ENTRYPOINTS_MAX) {
        r = al_err(err, "skill", EINVAL, "skill.json: \"entrypoints\" must be an array of 1 to %d entrypoints",
                   AL_SKILL_ENTRYPOINTS_MAX);
        goto out;
    }
    size_t i;
    json_t *ep;
    json_array_foreach(eps, i, ep) {
        char where[64];
        snprintf(where, sizeof where, "entrypoints[%zu]", i);
        if (!json_is_object(ep)) {
            r = al_err(err, "skill", EINVAL, "%s must be an object", where);
            goto out;
        }
        if ((r = only_keys(ep, ep_keys, ELEMENTSOF(ep_keys), where, err)) < 0)
            goto out;
        const char *epn = json_string_value(json_object_get(ep, "name"));
        if (!entrypoint_name_valid(epn)) {
            r = al_err(err, "skill", EINVAL, "%s: \"name\" must be 1 to %d characters of A-Z a-z 0-9 _ -", where,
                       AL_SKILL_NAME_MAX);
            goto out;
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(epn, json_string_value(json_object_get(json_array_get(eps, k), "name"))) == 0) {
                r = al_err(err, "skill", EINVAL, "two entrypoints are named \"%s\"", epn);
                goto out;
            }
        const char *lang = json_string_value(json_object_get(ep, "language"));
        if (!lang || (strcmp(lang, "python") != 0 && strcmp(lang, "node") != 0 && strcmp(lang, "bash") != 0)) {
            r = al_err(err, "skill", EINVAL, "%s: \"language\" must be python, node or bash", where);
            goto out;
        }
        const char *script = json_string_value(json_object_get(ep, "script"));
        if (!script) {
            r = al_err(err, "skill", EINVAL, "%s: \"script\" must name a file of the skill", where);
            goto out;
        }
        if ((r = al_skill_path_check(script, NULL, err)) < 0)
            goto out;
        if ((r = str_field(ep, "description", DESCRIPTION_MAX, true, where, err)) < 0)
            goto out;
        json_t *ts = json_object_get(ep, "timeout_s");
        if (ts && (!json_is_integer(ts) || json_integer_value(ts) < 1 || json_integer_value(ts) > 3600)) {
            r = al_err(err, "skill", EINVAL, "%s: \"timeout_s\" must be a whole number of seconds from 1 to 3600", where);
            goto out;
        }
        json_t *sc = json_object_get(ep, "input_schema");
        if (!sc) {
            r = al_err(err, "skill", EINVAL, "%s: \"input_schema\" is required (at least {\"type\": \"object\"})", where);
            goto out;
        }
        al_error serr = { 0 };
        if ((r = al_skill_schema_check(sc, &serr)) < 0) {
            r = al_err(err, "skill", serr.err, "%s: %s", where, serr.msg);
            goto out;
        }
    }
    *ret = TAKE_PTR(m);
out:
    json_decref(m);
    return r;
}

json_t *al_skill_entrypoint(json_t *manifest, const char *name) {
    size_t i;
    json_t *ep;
    json_array_foreach(json_object_get(manifest, "entrypoints"), i, ep) {
        if (name && strcmp(json_string_value(json_object_get(ep, "name")), name) == 0)
            return ep;
    }
    return NULL;
}
