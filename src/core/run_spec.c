/*
 * The run spec (run_spec.h): building one, the one check of its values,
 * its canonical hash, and its record in the store. Every refusal says what
 * was wanted; none logs.
 */
#include "run_spec.h"

#include <errno.h>
#include <nettle/base64.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../drivers/driver.h"
#include "../util/hash.h"
#include "../util/json_keys.h"
#include "../util/util.h"

const char *const al_run_languages[_AL_RUN_LANG_MAX] = { "python", "node", "bash" };
const char *const al_run_limit_names[_AL_LIMIT_MAX] = { "timeout_s", "memory_mb", "cpus", "pids" };
const char *const al_pkg_lang_names[_AL_PKG_LANG_MAX] = { "python", "node" };

/* what the box's /work holds besides the request's files */
static const char *const reserved_names[] = { "main.py", "main.js", "main.sh", "documents" };

bool al_valid_sandbox_id(const char *t) {
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > 31)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
            return false;
    return true;
}

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

const char *al_run_folder_name_fault(const char *p, size_t len) {
    /* a name that is not text (JSON cannot carry it, nor a card show it),
     * or one that shows as another: a newline splits an audit line, an
     * escape sequence repaints a terminal, U+202E shows "cod.exe" as
     * "exe.doc" on an approval card */
    for (size_t i = 0; i < len;) {
        uint32_t cp = 0;
        size_t k = al_utf8_decode((const unsigned char *)p + i, len - i, &cp);
        if (k == 0)
            return "is not valid UTF-8";
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0) || (cp >= 0x202a && cp <= 0x202e) ||
            (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f || cp == 0x061c)
            return "holds a control or bidirectional-override character";
        i += k;
    }
    return NULL;
}

const char *al_run_folder_path_fault(const char *p, size_t len) {
    if (!p || len == 0)
        return "is empty";
    if (len > AL_RUN_FOLDER_PATH_MAX)
        return "is longer than 1024 bytes";
    if (strlen(p) != len)
        return "holds a NUL";
    if (p[0] == '/')
        return "is absolute (a path is relative to its folder)";
    if (strcmp(p, ".") == 0)
        return NULL;
    const char *bad = al_run_folder_name_fault(p, len);
    if (bad)
        return bad;
    for (const char *c = p; *c;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        if (n == 0)
            return "has an empty component (//, or a / at its end)";
        if (n == 2 && c[0] == '.' && c[1] == '.')
            return "has a .. component";
        if (n == 1 && c[0] == '.')
            return "has a . component";
        c += n + (e ? 1 : 0);
        if (e && !*c)
            return "has an empty component (//, or a / at its end)";
    }
    return NULL;
}

bool al_run_reserved_file_name(const char *n) {
    for (size_t k = 0; k < ELEMENTSOF(reserved_names); k++)
        if (strcmp(n, reserved_names[k]) == 0)
            return true;
    return false;
}

/* ------------------------------------------------------------- packages */

bool al_pkg_spec_valid(al_pkg_lang l, const char *spec, size_t len) {
    al_error err = { 0 };
    return spec && strlen(spec) == len && al_pkg_spec_check(l, spec, &err) == 0;
}

/* ------------------------------------------------------------- building */

/* T holds a C string: given, and no NUL inside. */
static bool c_text(const al_run_text *t) { return t->s && strlen(t->s) == t->len; }

static void text_free(al_run_text *t) {
    free(t->s);
    *t = (al_run_text){ 0 };
}

/* LEN bytes of S in a new buffer, with a NUL after them. */
static char *bytes_dup(const void *s, size_t len) {
    char *c = malloc(len + 1);
    if (!c)
        return NULL;
    if (len)
        memcpy(c, s, len);
    c[len] = '\0';
    return c;
}

int al_run_text_set(al_run_text *t, const void *s, size_t len) {
    char *c = bytes_dup(s, len);
    if (!c)
        return -ENOMEM;
    free(t->s);
    *t = (al_run_text){ .s = c, .len = len };
    return 0;
}

static void skill_free(al_run_skill *k) {
    if (!k)
        return;
    free(k->name);
    free(k->version);
    free(k->digest);
    free(k->entrypoint);
    free(k->script);
    free(k->mode);
    free(k->args_json);
    free(k);
}

void al_run_spec_free(al_run_spec *sp) {
    if (!sp)
        return;
    text_free(&sp->language);
    text_free(&sp->code);
    for (size_t i = 0; i < sp->n_files; i++) {
        text_free(&sp->files[i].name);
        free(sp->files[i].data);
    }
    free(sp->files);
    text_free(&sp->stdin_text);
    for (size_t i = 0; i < sp->n_args; i++)
        text_free(&sp->args[i]);
    free(sp->args);
    for (size_t i = 0; i < sp->n_artifacts; i++)
        text_free(&sp->artifacts[i]);
    free(sp->artifacts);
    text_free(&sp->thread_id);
    for (size_t i = 0; i < sp->n_folders; i++) {
        text_free(&sp->folders[i].name);
        for (size_t k = 0; k < sp->folders[i].n_paths; k++)
            text_free(&sp->folders[i].paths[k]);
        free(sp->folders[i].paths);
    }
    free(sp->folders);
    for (size_t i = 0; i < sp->n_imports; i++) {
        free(sp->imports[i].folder);
        free(sp->imports[i].path);
    }
    free(sp->imports);
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++) {
        for (size_t i = 0; i < sp->n_packages[l]; i++)
            text_free(&sp->packages[l][i]);
        free(sp->packages[l]);
    }
    text_free(&sp->sandbox);
    text_free(&sp->image);
    text_free(&sp->network);
    text_free(&sp->description);
    skill_free(sp->skill);
    free(sp->net);
    *sp = (al_run_spec){ 0 };
}

/* One more entry of *V (N of SIZE bytes each), zeroed: its address. */
static void *grow(void *v, size_t *n, size_t size) {
    void **p = v;
    void *nv = realloc(*p, (*n + 1) * size);
    if (!nv)
        return NULL;
    *p = nv;
    void *e = (char *)nv + *n * size;
    memset(e, 0, size);
    (*n)++;
    return e;
}

/* A file named NAME holding DATA (LEN bytes, owned now) */
static int add_file_owned(al_run_spec *sp, const void *name, size_t name_len, uint8_t *data, size_t len) {
    al_run_text n = { 0 };
    if (al_run_text_set(&n, name, name_len) < 0) {
        free(data);
        return -ENOMEM;
    }
    al_run_file *f = grow(&sp->files, &sp->n_files, sizeof *f);
    if (!f) {
        text_free(&n);
        free(data);
        return -ENOMEM;
    }
    *f = (al_run_file){ .name = n, .data = data, .len = len };
    return 0;
}

int al_run_spec_add_file(al_run_spec *sp, const void *name, size_t name_len, const void *data, size_t len) {
    uint8_t *d = (uint8_t *)bytes_dup(data, len);
    return d ? add_file_owned(sp, name, name_len, d, len) : -ENOMEM;
}

int al_run_spec_add_file_base64(al_run_spec *sp, const void *name, size_t name_len, const char *b64, size_t b64_len) {
    /* a NUL would end the text nettle reads, and the rest be ignored */
    if (memchr(b64, 0, b64_len))
        return -EINVAL;
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(b64_len) + 1);
    if (!out)
        return -ENOMEM;
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    size_t len = BASE64_DECODE_LENGTH(b64_len);
    if (!base64_decode_update(&ctx, &len, out, b64_len, b64) || !base64_decode_final(&ctx)) {
        free(out);
        return -EINVAL;
    }
    out[len] = '\0';
    return add_file_owned(sp, name, name_len, out, len);
}

int al_run_spec_add_arg(al_run_spec *sp, const void *arg, size_t len) {
    al_run_text t = { 0 };
    if (al_run_text_set(&t, arg, len) < 0)
        return -ENOMEM;
    al_run_text *e = grow(&sp->args, &sp->n_args, sizeof *e);
    if (!e) {
        text_free(&t);
        return -ENOMEM;
    }
    *e = t;
    sp->has_args = true;
    return 0;
}

int al_run_spec_add_artifact(al_run_spec *sp, const char *id, size_t len) {
    al_run_text t = { 0 };
    if (id && al_run_text_set(&t, id, len) < 0)
        return -ENOMEM;
    al_run_text *e = grow(&sp->artifacts, &sp->n_artifacts, sizeof *e);
    if (!e) {
        text_free(&t);
        return -ENOMEM;
    }
    *e = t;
    return 0;
}

int al_run_spec_add_folder(al_run_spec *sp, const char *name, size_t len) {
    al_run_text t = { 0 };
    if (name && al_run_text_set(&t, name, len) < 0)
        return -ENOMEM;
    al_run_folder *e = grow(&sp->folders, &sp->n_folders, sizeof *e);
    if (!e) {
        text_free(&t);
        return -ENOMEM;
    }
    e->name = t;
    return 0;
}

int al_run_spec_add_folder_path(al_run_spec *sp, const char *path, size_t len) {
    if (!sp->n_folders)
        return -EINVAL;
    al_run_folder *f = &sp->folders[sp->n_folders - 1];
    al_run_text t = { 0 };
    if (path && al_run_text_set(&t, path, len) < 0)
        return -ENOMEM;
    al_run_text *e = grow(&f->paths, &f->n_paths, sizeof *e);
    if (!e) {
        text_free(&t);
        return -ENOMEM;
    }
    *e = t;
    return 0;
}

int al_run_spec_add_package(al_run_spec *sp, al_pkg_lang l, const void *spec, size_t len) {
    al_run_text t = { 0 };
    if (l < 0 || l >= _AL_PKG_LANG_MAX)
        return -EINVAL;
    if (al_run_text_set(&t, spec, len) < 0)
        return -ENOMEM;
    al_run_text *e = grow(&sp->packages[l], &sp->n_packages[l], sizeof *e);
    if (!e) {
        text_free(&t);
        return -ENOMEM;
    }
    *e = t;
    return 0;
}

bool al_run_spec_wants_packages(const al_run_spec *sp) {
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++)
        if (sp->n_packages[l])
            return true;
    return false;
}

int al_run_spec_set_skill(al_run_spec *sp, const al_run_skill *k) {
    al_run_skill *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    const char *const from[] = { k->name, k->version, k->digest, k->entrypoint, k->script, k->mode, k->args_json };
    char **to[] = { &c->name, &c->version, &c->digest, &c->entrypoint, &c->script, &c->mode, &c->args_json };
    for (size_t i = 0; i < ELEMENTSOF(to); i++)
        if (from[i] && !(*to[i] = strdup(from[i]))) {
            skill_free(c);
            return -ENOMEM;
        }
    skill_free(sp->skill);
    sp->skill = c;
    return 0;
}

int al_run_spec_resolve(al_run_spec *sp, const char *image_ref, const char *network) {
    return al_run_text_set(&sp->image, image_ref, strlen(image_ref)) < 0 ||
                   al_run_text_set(&sp->network, network, strlen(network)) < 0
               ? -ENOMEM
               : 0;
}

/* ---------------------------------------------------------------- check */

al_status al_run_refuse(char *msg, size_t msglen, const char **code, al_status status, const char *c, const char *fmt,
                        ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    *code = c;
    return status;
}

/* The bytes LEN bytes of TEXT take as a JSON string's contents, as jansson
 * writes them (compact, no ASCII escaping): a quote, a backslash or a
 * control character's short escape two, another control character six. */
static uint64_t json_escaped_len(const char *text, size_t len) {
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        n += c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t' ? 2
             : c < 0x20                                                                      ? 6
                                                                                             : 1;
    }
    return n;
}

/* What SP's own fields take in the job its box is handed (the helper's
 * one line of JSON, AL_JOB_MAX at most): its code and arguments escaped,
 * its network policy, each with its quotes and key. Its stdin and files
 * are staged as files (the job names their paths). */
static uint64_t job_bytes(const al_run_spec *sp) {
    uint64_t n = AL_JOB_RESERVE + json_escaped_len(sp->code.s, sp->code.len) + 16;
    for (size_t i = 0; i < sp->n_args; i++)
        n += json_escaped_len(sp->args[i].s, sp->args[i].len) + 3;
    if (sp->network.s)
        n += json_escaped_len(sp->network.s, sp->network.len) + 16;
    /* a thread's set can hold the most of both lists: counted whole, so a
     * later run of the thread cannot be made too large for its job by them */
    if (al_run_spec_wants_packages(sp))
        n += (uint64_t)_AL_PKG_LANG_MAX * AL_RUN_PACKAGES_MAX * (AL_RUN_PACKAGE_SPEC_MAX + 3);
    return n;
}

#define REFUSE(...) return al_run_refuse(msg, msglen, code, __VA_ARGS__)
/* The folders' imports as asked: counts, names and paths (whether the
 * folders exist and what the paths hold is the core's to ask). */
al_status al_run_spec_check_folders(const al_run_spec *sp, char *msg, size_t msglen, const char **code) {
    if (sp->n_folders > AL_RUN_FOLDERS_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", "folders: at most %d folders, %zu asked", AL_RUN_FOLDERS_MAX,
               sp->n_folders);
    size_t paths = 0;
    for (size_t i = 0; i < sp->n_folders; i++) {
        const al_run_folder *f = &sp->folders[i];
        if (!f->name.s || !c_text(&f->name) || !al_valid_thread_id(f->name.s))
            REFUSE(AL_STATUS_INVALID, "bad_request",
                   "folders[%zu].folder must be a folder's name (1-64 characters of A-Z a-z 0-9 . _ -)", i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(sp->folders[k].name.s, f->name.s) == 0)
                REFUSE(AL_STATUS_INVALID, "bad_request",
                       "folders[%zu]: folder %s is named twice (give all its paths in one entry)", i, f->name.s);
        if (f->n_paths == 0)
            REFUSE(AL_STATUS_INVALID, "bad_request", "folders[%zu].paths must name at least one path", i);
        paths += f->n_paths;
        if (paths > AL_RUN_FOLDER_PATHS_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "folders: at most %d paths in all", AL_RUN_FOLDER_PATHS_MAX);
        for (size_t k = 0; k < f->n_paths; k++) {
            const al_run_text *p = &f->paths[k];
            const char *why = p->s ? al_run_folder_path_fault(p->s, p->len) : "is not a string";
            if (why)
                REFUSE(AL_STATUS_INVALID, "bad_request",
                       "folders[%zu].paths[%zu] %s: a path names a file or directory beneath folder %s (no .., not "
                       "absolute, no NUL, at most %d bytes)",
                       i, k, why, f->name.s, AL_RUN_FOLDER_PATH_MAX);
        }
    }
    return AL_STATUS_OK;
}
#undef REFUSE

#define REFUSE(...) return al_run_refuse(msg, msglen, code, __VA_ARGS__)
/* (the REST body's, MCP's and E2B's metadata's folders: one reader) */
al_status al_run_spec_folders_of(al_run_spec *sp, json_t *v, char *msg, size_t msglen, const char **code) {
    if (!json_is_array(v) || json_array_size(v) > AL_RUN_FOLDERS_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", "%s", AL_RUN_RULE_FOLDERS);
    static const char *const keys[] = { "folder", "paths" };
    size_t i, k, total = 0;
    json_t *f, *p;
    json_array_foreach(v, i, f) {
        json_t *nv = json_object_get(f, "folder"), *pv = json_object_get(f, "paths");
        if (!json_is_object(f) || !json_is_string(nv) || !json_is_array(pv))
            REFUSE(AL_STATUS_INVALID, "bad_request", "folders[%zu] must be {\"folder\": NAME, \"paths\": [PATH, ...]}",
                   i);
        char where[32];
        snprintf(where, sizeof where, "folders[%zu]", i);
        if (!al_json_keys_check(f, where, keys, ELEMENTSOF(keys), msg, msglen)) {
            *code = "bad_request";
            return AL_STATUS_INVALID;
        }
        total += json_array_size(pv);
        if (total > AL_RUN_FOLDER_PATHS_MAX)
            REFUSE(AL_STATUS_INVALID, "bad_request", "folders: at most %d paths in all", AL_RUN_FOLDER_PATHS_MAX);
        if (al_run_spec_add_folder(sp, json_string_value(nv), json_string_length(nv)) < 0)
            REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory");
        json_array_foreach(pv, k, p) {
            if (!json_is_string(p))
                REFUSE(AL_STATUS_INVALID, "bad_request", "folders[%zu].paths[%zu] must be a string", i, k);
            if (al_run_spec_add_folder_path(sp, json_string_value(p), json_string_length(p)) < 0)
                REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory");
        }
    }
    return AL_STATUS_OK;
}

al_status al_run_spec_packages_of(al_run_spec *sp, json_t *v, char *msg, size_t msglen, const char **code) {
    if (!v || json_is_null(v))
        return AL_STATUS_OK;
    if (!json_is_object(v))
        REFUSE(AL_STATUS_INVALID, "bad_request", "%s", AL_RUN_RULE_PACKAGES);
    /* a key no installer reads (pip, gem, "Python") is refused, not dropped */
    if (!al_json_keys_check(v, "packages", al_pkg_lang_names, _AL_PKG_LANG_MAX, msg, msglen)) {
        *code = "bad_request";
        return AL_STATUS_INVALID;
    }
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++) {
        json_t *list = json_object_get(v, al_pkg_lang_names[l]), *e;
        size_t i;
        if (!list || json_is_null(list))
            continue;
        /* a list longer than the most it may hold is not copied */
        bool ok = json_is_array(list) && json_array_size(list) <= AL_RUN_PACKAGES_MAX;
        json_array_foreach(list, i, e) ok = ok && json_is_string(e);
        if (!ok)
            REFUSE(AL_STATUS_INVALID, "bad_request", "%s", AL_RUN_RULE_PACKAGES);
        json_array_foreach(list, i, e) if (al_run_spec_add_package(sp, (al_pkg_lang)l, json_string_value(e),
                                                                   json_string_length(e)) < 0)
            REFUSE(AL_STATUS_INTERNAL, "internal", "out of memory");
    }
    return AL_STATUS_OK;
}
#undef REFUSE

al_status al_run_spec_check_packages(const al_run_spec *sp, char *msg, size_t msglen, const char **code) {
    static const char *const want[_AL_PKG_LANG_MAX] = { "NAME[EXTRAS][==VERSION] (e.g. requests==2.31.0)",
                                                        "[@SCOPE/]NAME[@RANGE] (e.g. lodash@4.17.21)" };
    for (size_t l = 0; l < _AL_PKG_LANG_MAX; l++) {
        if (sp->n_packages[l] > AL_RUN_PACKAGES_MAX)
            return al_run_refuse(msg, msglen, code, AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_PACKAGES);
        for (size_t i = 0; i < sp->n_packages[l]; i++) {
            const al_run_text *t = &sp->packages[l][i];
            if (!al_pkg_spec_valid((al_pkg_lang)l, t->s, t->len))
                return al_run_refuse(msg, msglen, code, AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_PACKAGE_SPEC,
                                     al_pkg_lang_names[l], i, c_text(t) ? t->s : "(with a NUL)", want[l]);
        }
    }
    return AL_STATUS_OK;
}

al_status al_run_spec_check(al_run_spec *sp, const al_run_bounds *b, char *msg, size_t msglen, const char **code) {
    static char none[1];
    if (!msg || msglen == 0) {
        msg = none;
        msglen = sizeof none;
    }
    msg[0] = '\0';
    *code = NULL;
    free(sp->net);
    sp->net = NULL;
    sp->lang = _AL_RUN_LANG_MAX;
#define REFUSE(...) return al_run_refuse(msg, msglen, code, __VA_ARGS__)
    bool args_ok = sp->n_args <= AL_RUN_ARGS_MAX;
    for (size_t i = 0; args_ok && i < sp->n_args; i++)
        args_ok = sp->args[i].len <= AL_RUN_ARG_MAX && c_text(&sp->args[i]);
    if (!args_ok)
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_ARGS);
    if (sp->stdin_text.s && sp->stdin_text.len > AL_RUN_STDIN_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_STDIN);
    /* its shape only: the core resolves the alias or digest */
    if (sp->image.s && !c_text(&sp->image))
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_IMAGE);
    for (size_t i = 0; c_text(&sp->language) && i < _AL_RUN_LANG_MAX; i++)
        if (strcmp(sp->language.s, al_run_languages[i]) == 0)
            sp->lang = (al_run_lang)i;
    if (sp->lang == _AL_RUN_LANG_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_LANGUAGE);
    if (!sp->code.s || sp->code.len == 0)
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_CODE);
    if (sp->code.len > b->code_max)
        REFUSE(AL_STATUS_TOO_LARGE, "payload_too_large", "code must be at most %llu bytes, without NUL",
               (unsigned long long)b->code_max);
    if (!c_text(&sp->code))
        REFUSE(AL_STATUS_INVALID, "bad_request", "code must be at most %llu bytes, without NUL",
               (unsigned long long)b->code_max);
    if (sp->thread_id.s && (!c_text(&sp->thread_id) || !al_valid_thread_id(sp->thread_id.s)))
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_THREAD_ID);
    if (sp->sandbox.s && (!c_text(&sp->sandbox) || !al_valid_sandbox_id(sp->sandbox.s)))
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_SANDBOX);
    /* the policy's syntax now, so that a bad one is refused before the
     * rest; whether the workspace allows it is the core's to ask */
    if (sp->network.s) {
        if (!c_text(&sp->network))
            REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_NETWORK);
        sp->net = malloc(sizeof *sp->net);
        al_error nerr = { 0 };
        if (!sp->net || al_net_policy_parse(sp->network.s, sp->net, &nerr) < 0) {
            /* the message first: the policy's error is in NERR, not in SP */
            al_status st = al_run_refuse(msg, msglen, code, AL_STATUS_INVALID, "bad_request", "network: %s",
                                  sp->net ? nerr.msg : "out of memory");
            free(sp->net);
            sp->net = NULL;
            return st;
        }
    }
    /* what the API accepts, the run can carry: a run whose job its helper
     * would refuse is refused here, not ended in error after its charge */
    if (job_bytes(sp) > AL_JOB_MAX)
        REFUSE(AL_STATUS_TOO_LARGE, "payload_too_large",
               "the run's code and args take %llu bytes JSON-escaped in the job its box is handed, of at most %llu "
               "(quotes, backslashes and control characters count twice or six times)",
               (unsigned long long)(job_bytes(sp) - AL_JOB_RESERVE), (unsigned long long)(AL_JOB_MAX - AL_JOB_RESERVE));
    if (sp->description.s && (sp->description.len > AL_RUN_DESCRIPTION_MAX || !c_text(&sp->description)))
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_DESCRIPTION);
    if (sp->n_files > b->files_max)
        REFUSE(AL_STATUS_INVALID, "bad_request", "files must be an array of at most %llu entries",
               (unsigned long long)b->files_max);
    if (sp->n_artifacts > AL_RUN_ARTIFACT_REFS_MAX)
        REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_ARTIFACTS);
    al_status fst = al_run_spec_check_folders(sp, msg, msglen, code);
    if (fst != AL_STATUS_OK)
        return fst;
    al_status pst = al_run_spec_check_packages(sp, msg, msglen, code);
    if (pst != AL_STATUS_OK)
        return pst;
    /* a timeout in milliseconds is held to the bounds in seconds, rounded
     * up: 1 ms is asked as a second of the budget, and boxed as 1 ms */
    if (sp->timeout_ms) {
        double max_ms = b->limit[AL_LIMIT_TIMEOUT_S].max * 1000;
        if (sp->limit[AL_LIMIT_TIMEOUT_S].has)
            REFUSE(AL_STATUS_INVALID, "bad_request", "give the timeout in seconds or in milliseconds, not both");
        if (sp->timeout_ms < 1 || (double)sp->timeout_ms > max_ms)
            REFUSE(AL_STATUS_INVALID, "bad_request", "the timeout (%lld ms) must be from 1 to %g ms",
                   (long long)sp->timeout_ms, max_ms);
        sp->limit[AL_LIMIT_TIMEOUT_S] = (al_run_limit_req){ true, (double)((sp->timeout_ms + 999) / 1000) };
    }
    for (size_t i = 0; i < _AL_LIMIT_MAX; i++) {
        if (!sp->limit[i].has) {
            sp->limit[i].value = b->limit[i].def > b->limit[i].max ? b->limit[i].max : b->limit[i].def;
            continue;
        }
        /* a NaN is no number from min to max: both tests are false */
        double d = sp->limit[i].value;
        if (!(d >= b->limit[i].min && d <= b->limit[i].max))
            REFUSE(AL_STATUS_INVALID, "bad_request", "limits.%s must be a number from %g to %g", al_run_limit_names[i],
                   b->limit[i].min, b->limit[i].max);
        /* seconds and processes are counted whole: 1.5 was cut to 1
         * without a word, a run given less than it asked for */
        if ((i == AL_LIMIT_TIMEOUT_S || i == AL_LIMIT_PIDS) && d != (double)(int64_t)d)
            REFUSE(AL_STATUS_INVALID, "bad_request", "limits.%s must be a whole number from %g to %g",
                   al_run_limit_names[i], b->limit[i].min, b->limit[i].max);
    }
    for (size_t i = 0; i < sp->n_files; i++) {
        const al_run_text *n = &sp->files[i].name;
        if (!n->s || !al_run_valid_file_name(n->s, n->len) || al_run_reserved_file_name(n->s))
            REFUSE(AL_STATUS_INVALID, "bad_request", AL_RUN_RULE_FILE_NAME, i);
        for (size_t k = 0; k < i; k++)
            if (strcmp(n->s, sp->files[k].name.s) == 0)
                REFUSE(AL_STATUS_INVALID, "bad_request", "two files are named \"%s\"", n->s);
        /* a skill's arguments are a file of its own */
        if (sp->skill && sp->skill->args_json && strcmp(n->s, AL_RUN_SKILL_ARGS_NAME) == 0)
            REFUSE(AL_STATUS_INVALID, "bad_request", "two files are named \"%s\"", n->s);
    }
#undef REFUSE
    const al_run_limit_req *l = sp->limit;
    sp->limits = (al_run_limits){
        .timeout_s = (int64_t)l[AL_LIMIT_TIMEOUT_S].value,
        .memory_bytes = (int64_t)(l[AL_LIMIT_MEMORY_MB].value * 1048576.0),
        .cpu_millis = (int64_t)(l[AL_LIMIT_CPUS].value * 1000.0 + 0.5),
        .pids = (int64_t)l[AL_LIMIT_PIDS].value,
        .timeout_ms = sp->timeout_ms ? sp->timeout_ms : (int64_t)l[AL_LIMIT_TIMEOUT_S].value * 1000,
    };
    return AL_STATUS_OK;
}

/* --------------------------------------------------------------- staged */

void al_run_staged_free(al_run_staged *st) {
    if (!st)
        return;
    for (size_t i = 0; i < st->n_files; i++)
        free(st->files[i].name);
    free(st->files);
    for (size_t i = 0; i < st->n_docs; i++) {
        free(st->docs[i].id);
        free(st->docs[i].path);
    }
    free(st->docs);
    for (size_t i = 0; i < st->n_imports; i++) {
        free(st->imports[i].folder);
        free(st->imports[i].path);
    }
    free(st->imports);
    *st = (al_run_staged){ 0 };
}

/* One import appended to a list (a spec's as pinned, a staged record's as
 * hashed): the same record, written once. 0 or -ENOMEM. */
static int import_add(al_run_import_id **v, size_t *n, const char *folder, const char *path, uint64_t size,
                      const char *sha256) {
    char *f = strdup(folder), *p = strdup(path);
    al_run_import_id *e = f && p ? grow(v, n, sizeof *e) : NULL;
    if (!e) {
        free(f);
        free(p);
        return -ENOMEM;
    }
    *e = (al_run_import_id){ .folder = f, .path = p, .size = size };
    snprintf(e->sha256, sizeof e->sha256, "%s", sha256);
    return 0;
}

int al_run_staged_add_import(al_run_staged *st, const char *folder, const char *path, uint64_t size,
                             const char *sha256) {
    return import_add(&st->imports, &st->n_imports, folder, path, size, sha256);
}

int al_run_staged_add_file(al_run_staged *st, const char *name, uint64_t size, const char *sha256) {
    char *n = strdup(name);
    al_run_input_id *e = n ? grow(&st->files, &st->n_files, sizeof *e) : NULL;
    if (!e) {
        free(n);
        return -ENOMEM;
    }
    e->name = n;
    e->size = size;
    snprintf(e->sha256, sizeof e->sha256, "%s", sha256);
    return 0;
}

int al_run_staged_add_doc(al_run_staged *st, const char *id, const char *path, int64_t version, uint64_t size,
                          const char *sha256) {
    char *i = strdup(id), *p = strdup(path);
    al_run_doc_id *e = i && p ? grow(&st->docs, &st->n_docs, sizeof *e) : NULL;
    if (!e) {
        free(i);
        free(p);
        return -ENOMEM;
    }
    *e = (al_run_doc_id){ .id = i, .path = p, .version = version, .size = size };
    snprintf(e->sha256, sizeof e->sha256, "%s", sha256);
    return 0;
}

int al_run_staged_of_spec(const al_run_spec *sp, al_run_staged *ret) {
    al_run_staged st = { 0 };
    char hex[65];
    int r = 0;
    for (size_t i = 0; r == 0 && i < sp->n_files; i++) {
        al_sha256_hex(sp->files[i].data, sp->files[i].len, hex);
        r = al_run_staged_add_file(&st, sp->files[i].name.s ? sp->files[i].name.s : "", sp->files[i].len, hex);
    }
    if (r == 0 && sp->skill && sp->skill->args_json) {
        size_t n = strlen(sp->skill->args_json);
        al_sha256_hex(sp->skill->args_json, n, hex);
        r = al_run_staged_add_file(&st, AL_RUN_SKILL_ARGS_NAME, n, hex);
    }
    for (size_t i = 0; r == 0 && i < sp->n_imports; i++)
        r = al_run_staged_add_import(&st, sp->imports[i].folder, sp->imports[i].path, sp->imports[i].size,
                                     sp->imports[i].sha256);
    if (r == 0 && sp->stdin_text.s) {
        st.has_stdin = true;
        st.stdin_id.size = sp->stdin_text.len;
        al_sha256_hex(sp->stdin_text.s, sp->stdin_text.len, st.stdin_id.sha256);
    }
    if (r < 0) {
        al_run_staged_free(&st);
        return r;
    }
    *ret = st;
    return 0;
}

/* --------------------------------------------------------------- record */

int64_t al_run_spec_input_bytes(const al_run_spec *sp) {
    int64_t n = sp->stdin_text.s ? (int64_t)sp->stdin_text.len : 0;
    for (size_t i = 0; i < sp->n_files; i++)
        n += (int64_t)sp->files[i].len;
    if (sp->skill && sp->skill->args_json)
        n += (int64_t)strlen(sp->skill->args_json);
    return n;
}

static json_t *text_json(const al_run_text *t) { return json_stringn(t->s ? t->s : "", t->s ? t->len : 0); }

int al_run_spec_record(const al_run_spec *sp, const char *via, json_t *documents, al_store_run *rec) {
    rec->limits = rec->inputs = NULL;
    const al_run_limits *l = &sp->limits;
    json_t *limits = json_pack("{s:I, s:I, s:I, s:I}", "timeout_s", (json_int_t)l->timeout_s, "memory_bytes",
                               (json_int_t)l->memory_bytes, "cpu_millis", (json_int_t)l->cpu_millis, "pids",
                               (json_int_t)l->pids);
    json_t *inputs = json_object(), *arts = json_array();
    bool ok = limits && inputs && arts && json_object_set_new(inputs, "artifacts", arts) == 0;
    if (!ok)
        json_decref(arts);
    /* milliseconds only where they say more than the seconds: every other
     * record stays as it was */
    if (ok && l->timeout_ms != l->timeout_s * 1000)
        ok = json_object_set_new(limits, "timeout_ms", json_integer((json_int_t)l->timeout_ms)) == 0;
    for (size_t i = 0; ok && i < sp->n_artifacts; i++)
        ok = json_array_append_new(arts, text_json(&sp->artifacts[i])) == 0;
    if (ok && sp->has_args) {
        json_t *args = json_array();
        ok = args && json_object_set_new(inputs, "args", args) == 0;
        for (size_t i = 0; ok && i < sp->n_args; i++)
            ok = json_array_append_new(args, text_json(&sp->args[i])) == 0;
    }
    const al_run_skill *k = sp->skill;
    if (ok && k)
        ok = json_object_set_new(inputs, "skill",
                                 json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:s?}", "name", k->name, "version", k->version,
                                           "digest", k->digest, "entrypoint", k->entrypoint, "script", k->script, "mode",
                                           k->mode)) == 0;
    /* which interface the call came through, for the audit at its end */
    if (ok)
        ok = json_object_set_new(inputs, "via", json_string(via ? via : "rest")) == 0;
    if (ok && documents)
        ok = json_object_set(inputs, "documents", documents) == 0;
    if (ok && sp->sandbox.s)
        ok = json_object_set_new(inputs, "sandbox", text_json(&sp->sandbox)) == 0;
    /* the folders' files as read at the request: what the start copies */
    if (ok && sp->n_imports) {
        json_t *imps = al_run_spec_imports_json(sp);
        ok = imps && json_object_set_new(inputs, "imports", imps) == 0;
    }
    /* the packages asked, as asked: the start of the run reads them back */
    if (ok && al_run_spec_wants_packages(sp)) {
        json_t *pk = json_object();
        ok = pk && json_object_set_new(inputs, "packages", pk) == 0;
        for (size_t pl = 0; ok && pl < _AL_PKG_LANG_MAX; pl++) {
            json_t *list = json_array();
            ok = list && json_object_set_new(pk, al_pkg_lang_names[pl], list) == 0;
            for (size_t i = 0; ok && i < sp->n_packages[pl]; i++)
                ok = json_array_append_new(list, text_json(&sp->packages[pl][i])) == 0;
        }
    }
    if (ok) {
        rec->limits = json_dumps(limits, JSON_COMPACT);
        rec->inputs = json_dumps(inputs, JSON_COMPACT);
    }
    json_decref(limits);
    json_decref(inputs);
    if (!rec->limits || !rec->inputs) {
        al_run_spec_record_done(rec);
        return -ENOMEM;
    }
    rec->code = sp->code.s;
    rec->description = sp->description.s ? sp->description.s : (char *)"";
    rec->network = sp->network.s;
    snprintf(rec->language, sizeof rec->language, "%s", sp->language.s ? sp->language.s : "");
    /* the host's runtime is stored as no image */
    snprintf(rec->image, sizeof rec->image, "%s", sp->image.s && strcmp(sp->image.s, "host") != 0 ? sp->image.s : "");
    snprintf(rec->thread_id, sizeof rec->thread_id, "%s", sp->thread_id.s ? sp->thread_id.s : "");
    rec->input_bytes = al_run_spec_input_bytes(sp);
    snprintf(rec->via, sizeof rec->via, "%s", via ? via : "rest");
    rec->skill_name = k ? k->name : NULL;
    rec->skill_version = k ? k->version : NULL;
    rec->skill_digest = k ? k->digest : NULL;
    return 0;
}

void al_run_spec_record_done(al_store_run *rec) {
    free(rec->limits);
    free(rec->inputs);
    rec->limits = rec->inputs = NULL;
}

static int set_str(al_run_text *t, const char *s) { return s ? al_run_text_set(t, s, strlen(s)) : 0; }

/* The strings of array V into a spec's list (ADD), as entries */
static int strings_of(json_t *v, al_run_spec *sp, int (*add)(al_run_spec *, const char *, size_t)) {
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e))
            return -EBADMSG;
        int r = add(sp, json_string_value(e), json_string_length(e));
        if (r < 0)
            return r;
    }
    return 0;
}

static int add_arg_str(al_run_spec *sp, const char *s, size_t n) { return al_run_spec_add_arg(sp, s, n); }
static int add_python(al_run_spec *sp, const char *s, size_t n) { return al_run_spec_add_package(sp, AL_PKG_PYTHON, s, n); }
static int add_node(al_run_spec *sp, const char *s, size_t n) { return al_run_spec_add_package(sp, AL_PKG_NODE, s, n); }

int al_run_spec_add_import(al_run_spec *sp, const char *folder, const char *path, uint64_t size,
                           const char *sha256) {
    return import_add(&sp->imports, &sp->n_imports, folder, path, size, sha256);
}

json_t *al_run_spec_imports_json(const al_run_spec *sp) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < sp->n_imports; i++)
        if (json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:s}", "folder", sp->imports[i].folder, "path",
                                               sp->imports[i].path, "size", (json_int_t)sp->imports[i].size,
                                               "sha256", sp->imports[i].sha256)) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

int al_run_spec_imports_of(json_t *imports, al_run_spec *sp) {
    if (!imports)
        return 0;
    if (!json_is_array(imports))
        return -EBADMSG;
    size_t i;
    json_t *e;
    json_array_foreach(imports, i, e) {
        const char *f = json_string_value(json_object_get(e, "folder")), *p = json_string_value(json_object_get(e, "path"));
        const char *h = json_string_value(json_object_get(e, "sha256"));
        json_t *sz = json_object_get(e, "size");
        if (!f || !p || !h || strlen(h) != 64 || !json_is_integer(sz) || json_integer_value(sz) < 0)
            return -EBADMSG;
        /* read back from the store, and used to make directories under the
         * run's documents: held to the request's rules again (a doctored
         * record's "../x" would leave them) */
        if (!al_valid_thread_id(f) || al_run_folder_path_fault(p, strlen(p)) || strcmp(p, ".") == 0)
            return -EBADMSG;
        int r = al_run_spec_add_import(sp, f, p, (uint64_t)json_integer_value(sz), h);
        if (r < 0)
            return r;
    }
    return 0;
}

int al_run_spec_of_record(const al_store_run *rec, al_run_spec *ret) {
    al_run_spec sp = { 0 };
    *ret = sp;
    if (!rec->code)
        return -EBADMSG;
    json_t *lim = rec->limits ? json_loads(rec->limits, 0, NULL) : NULL;
    json_t *ins = rec->inputs ? json_loads(rec->inputs, 0, NULL) : json_object();
    int r = json_is_object(lim) && json_is_object(ins) ? 0 : -EBADMSG;
    static const char *const lk[] = { "timeout_s", "memory_bytes", "cpu_millis", "pids" };
    int64_t *lv[] = { &sp.limits.timeout_s, &sp.limits.memory_bytes, &sp.limits.cpu_millis, &sp.limits.pids };
    for (size_t i = 0; r == 0 && i < ELEMENTSOF(lk); i++) {
        json_t *v = json_object_get(lim, lk[i]);
        if (!json_is_integer(v))
            r = -EBADMSG;
        else
            *lv[i] = (int64_t)json_integer_value(v);
    }
    json_t *ms = json_object_get(lim, "timeout_ms");
    sp.limits.timeout_ms = json_is_integer(ms) ? (int64_t)json_integer_value(ms) : sp.limits.timeout_s * 1000;
    if (r == 0 && (set_str(&sp.language, rec->language) < 0 || set_str(&sp.code, rec->code) < 0 ||
                   set_str(&sp.image, rec->image[0] ? rec->image : "host") < 0 ||
                   set_str(&sp.network, rec->network) < 0 ||
                   set_str(&sp.description, rec->description ? rec->description : "") < 0 ||
                   (rec->thread_id[0] && set_str(&sp.thread_id, rec->thread_id) < 0)))
        r = -ENOMEM;
    json_t *args = json_object_get(ins, "args"), *arts = json_object_get(ins, "artifacts");
    json_t *skill = json_object_get(ins, "skill"), *sandbox = json_object_get(ins, "sandbox");
    if (r == 0 && json_is_string(sandbox) && set_str(&sp.sandbox, json_string_value(sandbox)) < 0)
        r = -ENOMEM;
    if (r == 0 && json_is_array(args)) {
        sp.has_args = true;
        r = strings_of(args, &sp, add_arg_str);
    }
    if (r == 0 && json_is_array(arts))
        r = strings_of(arts, &sp, al_run_spec_add_artifact);
    if (r == 0)
        r = al_run_spec_imports_of(json_object_get(ins, "imports"), &sp);
    json_t *pk = json_object_get(ins, "packages");
    json_t *py = json_object_get(pk, "python"), *nd = json_object_get(pk, "node");
    if (r == 0 && json_is_array(py))
        r = strings_of(py, &sp, add_python);
    if (r == 0 && json_is_array(nd))
        r = strings_of(nd, &sp, add_node);
    if (r == 0 && json_is_object(skill)) {
        al_run_skill k = {
            .name = (char *)json_string_value(json_object_get(skill, "name")),
            .version = (char *)json_string_value(json_object_get(skill, "version")),
            .digest = (char *)json_string_value(json_object_get(skill, "digest")),
            .entrypoint = (char *)json_string_value(json_object_get(skill, "entrypoint")),
            .script = (char *)json_string_value(json_object_get(skill, "script")),
            .mode = (char *)json_string_value(json_object_get(skill, "mode")),
        };
        r = al_run_spec_set_skill(&sp, &k);
    }
    json_decref(lim);
    json_decref(ins);
    if (r < 0) {
        al_run_spec_free(&sp);
        return r;
    }
    *ret = sp;
    return 0;
}
