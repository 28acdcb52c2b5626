/*
 * The run spec: everything a run will receive, as one typed record,
 * whichever interface asked for it: its code, inline files, stdin, args,
 * artifacts, thread, image, network policy, limits and description (and
 * for a skill's run, the skill and its arguments). REST's body is read into
 * one by src/api/run_body.c, Piston's by src/api/piston.c, MCP's
 * code_execution by src/api/mcp_tools.c, a skill's run by skills.c; the
 * core takes it from there (al_run_create).
 *
 * A spec goes through four steps, all pure (no store, no log, no HTTP, no
 * wire shape), so that each can be unit-tested and fuzzed alone:
 *   1. built: the al_run_spec_set_text / _add_* calls copy what was given;
 *   2. checked once (al_run_spec_check): every rule of its values against
 *      the bounds the caller read from the workspace, in one order;
 *   3. resolved by the core (al_run_spec_resolve): the image it runs on
 *      and the network policy in canonical form;
 *   4. hashed (al_run_spec_hash) with the identities of the inputs as
 *      staged: the one hash an approval binds, and that the start of the
 *      run checks again.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../drivers/pkg_spec.h"
#include "../proxy/policy.h"
#include "../store/runs.h"
#include "status.h"

#define AL_RUN_FILE_NAME_MAX 255
#define AL_RUN_ARTIFACT_REFS_MAX 100
/* connected folders a run imports from, paths it names in all, a path's bytes */
#define AL_RUN_FOLDERS_MAX 16
#define AL_RUN_FOLDER_PATHS_MAX 256
#define AL_RUN_FOLDER_PATH_MAX 1024
#define AL_RUN_DESCRIPTION_MAX 4096
#define AL_RUN_ARGS_MAX 256
#define AL_RUN_ARG_MAX 4096
#define AL_RUN_STDIN_MAX (1u << 20)
/* packages a run asks for (issue 38): per language at most this many
 * specs, each at most this many bytes */
#define AL_RUN_PACKAGES_MAX 32
#define AL_RUN_PACKAGE_SPEC_MAX 214
/* the name a skill's arguments are staged under in /work */
#define AL_RUN_SKILL_ARGS_NAME "args.json"

typedef enum al_run_lang {
    AL_RUN_PYTHON,
    AL_RUN_NODE,
    AL_RUN_BASH,
    _AL_RUN_LANG_MAX,
} al_run_lang;

/* The language names a request may give, indexed by al_run_lang. */
extern const char *const al_run_languages[_AL_RUN_LANG_MAX];

/* The package managers' names under `packages`, indexed by al_pkg_lang
 * (drivers/pkg_spec.h), in the order they are checked, hashed and recorded. */
extern const char *const al_pkg_lang_names[_AL_PKG_LANG_MAX];

/* The limits a request may set, in this order (the index of each in
 * al_run_bounds.limit and al_run_spec.limit). */
typedef enum al_run_limit_key {
    AL_LIMIT_TIMEOUT_S,
    AL_LIMIT_MEMORY_MB,
    AL_LIMIT_CPUS,
    AL_LIMIT_PIDS,
    _AL_LIMIT_MAX,
} al_run_limit_key;

extern const char *const al_run_limit_names[_AL_LIMIT_MAX];

/* What a request is held to, read by the caller from its configuration
 * and the workspace's settings and maxima: the check itself reads none. */
typedef struct al_run_bounds {
    uint64_t code_max;  /* bytes of code; more is AL_STATUS_TOO_LARGE */
    uint64_t files_max; /* inline files */
    struct {
        double def, min, max; /* a default above max is cut to max */
    } limit[_AL_LIMIT_MAX];
} al_run_bounds;

/* Bytes as given: S is an owned copy with a NUL after LEN bytes (which may
 * hold NULs of their own: a text with one is refused where a name or a C
 * string is wanted). S NULL: not given. */
typedef struct al_run_text {
    char *s;
    size_t len;
} al_run_text;

typedef struct al_run_file {
    al_run_text name;
    uint8_t *data; /* owned, one spare byte (an empty file is not NULL) */
    size_t len;
} al_run_file;

/* A limit as asked: HAS, and VALUE (a NaN for one that was no number,
 * which no range holds); after the check, VALUE is the bound's default
 * where HAS is false. */
typedef struct al_run_limit_req {
    bool has;
    double value;
} al_run_limit_req;

/* The limits as a run is recorded and boxed with them (whole numbers). */
typedef struct al_run_limits {
    int64_t timeout_s, memory_bytes, cpu_millis, pids;
    /* the wall clock exactly: timeout_s * 1000, unless it was asked in
     * milliseconds (al_run_spec.timeout_ms), when timeout_s is it rounded
     * up (what the waits and the bounds in seconds go by) */
    int64_t timeout_ms;
} al_run_limits;

/* A skill's run: what it runs (owned strings), and ARGS_JSON, its
 * arguments, staged as /work/args.json. */
typedef struct al_run_skill {
    char *name, *version, *digest, *entrypoint, *script, *mode;
    char *args_json;
} al_run_skill;

/* A connected folder's file as it was read when the run was requested
 * (pinned: the start copies exactly these bytes or refuses). */
typedef struct al_run_import_id {
    char *folder, *path;
    uint64_t size;
    char sha256[65];
} al_run_import_id;

/* A connected folder's imports as a request names them (core/folders.h
 * says what they become): the folder's name and the paths beneath it, each
 * a file or a directory taken whole. */
typedef struct al_run_folder {
    al_run_text name;
    al_run_text *paths;
    size_t n_paths;
} al_run_folder;

typedef struct al_run_spec {
    al_run_text language;          /* one of al_run_languages once checked */
    al_run_text code;
    al_run_file *files;            /* in the order given */
    size_t n_files;
    al_run_text stdin_text;
    bool has_args;                 /* args given (an empty list is given) */
    al_run_text *args;
    size_t n_args;
    al_run_text *artifacts;        /* the ids asked for; .s NULL for an entry
                                    * that was no id (the core answers as for
                                    * an unknown one) */
    size_t n_artifacts;
    al_run_text thread_id;
    al_run_text image;             /* as asked; once resolved "host" or "sha256:<hex>" */
    al_run_text network;           /* as asked; once resolved the canonical policy */
    al_run_text description;
    al_run_limit_req limit[_AL_LIMIT_MAX];
    al_run_skill *skill;           /* owned; NULL unless a skill's run */
    al_run_folder *folders;        /* connected folders' imports, as asked */
    size_t n_folders;
    al_run_import_id *imports;     /* and the files they name, as read when the run
                                    * was requested (core/folders.c; the record's
                                    * inputs.imports): what the hash and the start bind */
    size_t n_imports;
    /* packages to install before the run (`packages`: python, node), each
     * list in the order given; none given: n_packages all 0 */
    al_run_text *packages[_AL_PKG_LANG_MAX];
    size_t n_packages[_AL_PKG_LANG_MAX];
    al_run_text sandbox;           /* an E2B sandbox's id: the run works in its working
                                    * directory (staged as /work, collected back after);
                                    * set by the E2B surface alone, never read from a body */
    /* filled by al_run_spec_check */
    al_run_lang lang;
    al_net_policy *net;            /* the network asked for, parsed (owned); NULL without one */
    al_run_limits limits;
    /* a timeout asked in milliseconds (Piston's run_timeout), 0: none. The
     * check takes it as limit[AL_LIMIT_TIMEOUT_S] rounded up to seconds
     * (which must then not be given too), held to the same bounds, and
     * boxes the run with the milliseconds themselves (limits.timeout_ms) */
    int64_t timeout_ms;
} al_run_spec;

/* A spec starts zeroed ({0}: nothing given). Free what it holds (it is
 * zeroed again; NULL is fine). */
void al_run_spec_free(al_run_spec *sp);

/* Building: each copies what it is given; 0, or -ENOMEM. */
int al_run_text_set(al_run_text *t, const void *s, size_t len);
int al_run_spec_add_file(al_run_spec *sp, const void *name, size_t name_len, const void *data, size_t len);
/* The same with the content in base64 (B64, B64_LEN bytes): -EINVAL when
 * it is not base64 (a NUL in it included: nettle would stop reading there
 * and ignore the rest). */
int al_run_spec_add_file_base64(al_run_spec *sp, const void *name, size_t name_len, const char *b64, size_t b64_len);
/* Sets has_args. */
int al_run_spec_add_arg(al_run_spec *sp, const void *arg, size_t len);
/* A folder's entry (NAME may be NULL: an entry that named none) and a path
 * of the last one added (PATH NULL: one that was no string). */
int al_run_spec_add_folder(al_run_spec *sp, const char *name, size_t len);
int al_run_spec_add_folder_path(al_run_spec *sp, const char *path, size_t len);
/* A file a folder's import pinned (the core's, core/folders.c); 0 or -ENOMEM. */
int al_run_spec_add_import(al_run_spec *sp, const char *folder, const char *path, uint64_t size,
                           const char *sha256);
/* SP's imports as JSON, [{folder, path, size, sha256}] (the record's
 * inputs.imports, the audit's and the approval card's view), or NULL. */
json_t *al_run_spec_imports_json(const al_run_spec *sp);
/* The imports a record's inputs.imports lists (NULL: none), added to SP:
 * 0, -ENOMEM, -EBADMSG for a list that is not one. */
int al_run_spec_imports_of(json_t *imports, al_run_spec *sp);
/* ID NULL: an entry that is no id. */
int al_run_spec_add_artifact(al_run_spec *sp, const char *id, size_t len);
/* One package spec of language L (checked by al_run_spec_check). */
int al_run_spec_add_package(al_run_spec *sp, al_pkg_lang l, const void *spec, size_t len);
/* Whether SP asks for any package. */
bool al_run_spec_wants_packages(const al_run_spec *sp);
/* Whether SPEC (LEN bytes) is a package spec of language L a run may ask
 * for: no NUL, and al_pkg_spec_check's (drivers/pkg_spec.c: the one
 * checker the service, the CLI and the helper share). */
bool al_pkg_spec_valid(al_pkg_lang l, const char *spec, size_t len);
/* The skill's fields, copied; ARGS_JSON may be NULL ("{}" is staged). */
int al_run_spec_set_skill(al_run_spec *sp, const al_run_skill *k);

/* Check SP against B: AL_STATUS_OK when it is a run that could be made,
 * and then lang, net, limits and the limits' defaults are filled in; else
 * the refusal (AL_STATUS_INVALID, AL_STATUS_TOO_LARGE for code over
 * B->code_max, AL_STATUS_INTERNAL out of memory) with its message in MSG
 * and its code ("bad_request", "payload_too_large", "internal") in *CODE.
 * Every rule of the spec's own values is checked here, before any that
 * needs the store: among its faults the first in this order is named:
 * args, stdin, image, language, code, thread_id, network, description,
 * the number of files, of artifacts, packages (each list's length, each
 * spec), limits, each file's name. */
al_status al_run_spec_check(al_run_spec *sp, const al_run_bounds *b, char *msg, size_t msglen, const char **code);

/* A `packages` object V (NULL or null: none) into SP's packages: an object
 * of at most the keys python and node, each a list of at most
 * AL_RUN_PACKAGES_MAX strings (their values are al_run_spec_check_packages'),
 * as al_run_spec_check answers: the REST body's, MCP's and E2B's reader. */
al_status al_run_spec_packages_of(al_run_spec *sp, json_t *v, char *msg, size_t msglen, const char **code);
/* V, a `folders` array of {folder, paths: [PATH, ...]} objects and nothing
 * else, into SP's folders (counts beyond the most the check takes are not
 * copied): the one reader of the REST body's, MCP's and E2B's metadata's
 * folders. AL_STATUS_OK, or the refusal as al_run_spec_check answers. */
al_status al_run_spec_folders_of(al_run_spec *sp, json_t *v, char *msg, size_t msglen, const char **code);
/* SP's package specs, each list within AL_RUN_PACKAGES_MAX and each spec
 * al_pkg_spec_valid's: AL_STATUS_OK, or the refusal (naming the spec and
 * the form it must take) as al_run_spec_check answers. */
al_status al_run_spec_check_packages(const al_run_spec *sp, char *msg, size_t msglen, const char **code);
/* The folders' part of the check (al_run_spec_check runs it too): for a
 * request that names folders without a run (an E2B sandbox's create). */
al_status al_run_spec_check_folders(const al_run_spec *sp, char *msg, size_t msglen, const char **code);

/* The core's resolution: IMAGE_REF ("host" or "sha256:<hex>") and NETWORK
 * (the policy in canonical form, the workspace's default where none was
 * asked) replace what was asked. 0 or -ENOMEM. */
int al_run_spec_resolve(al_run_spec *sp, const char *image_ref, const char *network);

/* ------------------------------------------------------------------ hash */

/* The identity of an input as staged: its name (a file's; NULL for
 * stdin), size and sha256. */
typedef struct al_run_input_id {
    char *name;
    uint64_t size;
    char sha256[65];
} al_run_input_id;

/* A thread document as it will be staged in /work/documents. */
typedef struct al_run_doc_id {
    char *id, *path;
    int64_t version;
    uint64_t size;
    char sha256[65];
} al_run_doc_id;

/* What the box will hold besides what the spec says itself: the inline
 * files (a skill's args.json among them) and stdin as stored, the
 * documents as staging will link them, and the folders' imports. */
typedef struct al_run_staged {
    al_run_input_id *files; /* any order: the hash takes them by name */
    size_t n_files;
    bool has_stdin;
    al_run_input_id stdin_id;
    al_run_doc_id *docs;    /* in staging order */
    size_t n_docs;
    al_run_import_id *imports; /* in the order they were resolved */
    size_t n_imports;
} al_run_staged;

void al_run_staged_free(al_run_staged *st);
/* The files and stdin of SP (and a skill's args.json) as they will be
 * stored, hashed from the spec's own bytes; no documents (the store's).
 * 0 or -ENOMEM. */
int al_run_staged_of_spec(const al_run_spec *sp, al_run_staged *ret);
/* Appending to a staged record; 0 or -ENOMEM. */
int al_run_staged_add_file(al_run_staged *st, const char *name, uint64_t size, const char *sha256);
int al_run_staged_add_doc(al_run_staged *st, const char *id, const char *path, int64_t version, uint64_t size,
                          const char *sha256);
int al_run_staged_add_import(al_run_staged *st, const char *folder, const char *path, uint64_t size,
                             const char *sha256);

/* The sha256, as hex, of the canonical form of SP (checked and resolved,
 * or read back from its record) and ST: what an approval binds. The
 * spec's files and stdin enter through ST (their identities as staged),
 * never through their bytes in SP. The canonical form is described in
 * run_spec.c, above its definition. */
void al_run_spec_hash(const al_run_spec *sp, const al_run_staged *st, char out[65]);

/* ---------------------------------------------------------------- record */

/* The columns of a run's record that SP (checked and resolved) gives:
 * language, code, description, network, image, thread_id, limits and
 * inputs (JSON: artifacts, args, skill, and VIA and DOCUMENTS, the pinned
 * thread documents, when not NULL), input_bytes and skill_*. The record's
 * strings point into SP but for limits and inputs, which are new
 * (al_run_spec_record_done). 0 or -ENOMEM. */
int al_run_spec_record(const al_run_spec *sp, const char *via, json_t *documents, al_store_run *rec);
void al_run_spec_record_done(al_store_run *rec);
/* The spec a stored run was made from, as far as the hash binds it (all
 * but the files' and stdin's bytes, which are its staged inputs): what the
 * start of an approved run hashes again. 0, -ENOMEM, or -EBADMSG for a
 * record that is no run's. */
int al_run_spec_of_record(const al_store_run *rec, al_run_spec *ret);
/* The inputs' bytes SP will hold on disk until a box stages them. */
int64_t al_run_spec_input_bytes(const al_run_spec *sp);

/* ------------------------------------------------------------- refusals */

/* The rules a spec's fields are held to, in the words a refusal uses: the
 * same whether the value or its type (in a body that was read) broke one. */
#define AL_RUN_RULE_ARGS "args must be at most 256 strings of at most 4096 bytes, without NUL"
#define AL_RUN_RULE_STDIN "stdin must be a string of at most 1 MiB"
#define AL_RUN_RULE_IMAGE "image: want an alias or sha256 digest"
#define AL_RUN_RULE_LANGUAGE "language must be one of python, node, bash"
#define AL_RUN_RULE_CODE "code must be a non-empty string"
#define AL_RUN_RULE_THREAD_ID "thread_id must be 1-64 characters of A-Z a-z 0-9 . _ -"
#define AL_RUN_RULE_NETWORK                                                                                           \
    "network must be a policy string (offline, packages, internet, hosts:a.example,b.example, "                      \
    "hosts+packages:a.example)"
#define AL_RUN_RULE_DESCRIPTION "description must be a string of at most 4096 bytes, without NUL"
#define AL_RUN_RULE_PACKAGES                                                                                          \
    "packages must be an object {\"python\": [specs], \"node\": [specs]}, each a list of at most 32 strings"
/* with the language, the index and the spec */
#define AL_RUN_RULE_PACKAGE_SPEC                                                                                      \
    "packages.%s[%zu] \"%.214s\" is not a package spec: want %s, at most 214 bytes (no URLs, paths, git refs or "   \
    "options)"
#define AL_RUN_RULE_SANDBOX "sandbox must be a sandbox id (1-31 characters of a-z 0-9 _)"
#define AL_RUN_RULE_ARTIFACTS "artifacts must be an array of at most 100 artifact ids"
#define AL_RUN_RULE_FOLDERS                                                                                           \
    "folders must be an array of at most 16 {folder, paths} objects, 256 paths in all, each path relative to its "   \
    "folder (no .., not absolute, no NUL, at most 1024 bytes)"
/* with the file's index */
#define AL_RUN_RULE_FILE_NAME                                                                                         \
    "files[%zu].name must be a plain file name (no /, not . or .., not main.py, main.js, main.sh or documents)"
#define AL_RUN_RULE_FILE_BASE64 "files[%zu].content_base64 is not valid base64"

/* A refusal: STATUS returned, code C in *CODE and the message in MSG
 * (MSGLEN bytes), as the check and each reader of a spec answer. */
al_status al_run_refuse(char *msg, size_t msglen, const char **code, al_status status, const char *c, const char *fmt,
                        ...) _printf_(6, 7);

/* ----------------------------------------------------------------- names */

/* 1-64 characters of A-Z a-z 0-9 . _ -, not . or .. */
bool al_valid_thread_id(const char *t);
/* 1-31 characters of a-z 0-9 _ (an E2B sandbox's id, "sbx_..."): safe as a
 * directory's name under the state directory */
bool al_valid_sandbox_id(const char *t);
/* A name of a file in /work: not empty, at most 255 bytes, no / and no
 * NUL, not . or .. (LEN is its length in bytes, NULs included). */
bool al_run_valid_file_name(const char *n, size_t len);
/* Why P (LEN bytes) is no path beneath a connected folder, or NULL: not
 * empty, at most AL_RUN_FOLDER_PATH_MAX bytes, no NUL, not absolute, no
 * component empty, . or .. ("." alone: the folder itself). */
const char *al_run_folder_path_fault(const char *p, size_t len);
/* Why P (LEN bytes, a name or a path) cannot be a folder's name of a file:
 * not valid UTF-8, or a control or bidirectional-override character in it
 * (it would show as another name on an approval card); NULL when fine. */
const char *al_run_folder_name_fault(const char *p, size_t len);
/* Whether N is a name that the box's /work gives to something else. */
bool al_run_reserved_file_name(const char *n);
