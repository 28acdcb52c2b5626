/*
 * The body of a run request (POST /v1/runs, and what the Piston API, MCP
 * and skills build from theirs) read into a typed record, with every check
 * that needs no store: shapes, sizes, the language table, file names and
 * their base64, the network policy's syntax, and each limit against the
 * bounds the caller read from the workspace. Pure (no store, no log, no
 * HTTP), so that a fuzzer can drive it alone (tests/fuzz/fuzz_run_body.c).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../proxy/policy.h"
#include "status.h"

#define AL_RUN_FILE_NAME_MAX 255
#define AL_RUN_ARTIFACT_REFS_MAX 100
#define AL_RUN_DESCRIPTION_MAX 4096
#define AL_RUN_ARGS_MAX 256
#define AL_RUN_ARG_MAX 4096
#define AL_RUN_STDIN_MAX (1u << 20)

typedef enum al_run_lang {
    AL_RUN_PYTHON,
    AL_RUN_NODE,
    AL_RUN_BASH,
    _AL_RUN_LANG_MAX,
} al_run_lang;

/* The language names a request may give, indexed by al_run_lang. */
extern const char *const al_run_languages[_AL_RUN_LANG_MAX];

/* The limits a request may set, in this order (the index of each in
 * al_run_bounds.limit and al_run_request.limit). */
typedef enum al_run_limit_key {
    AL_LIMIT_TIMEOUT_S,
    AL_LIMIT_MEMORY_MB,
    AL_LIMIT_CPUS,
    AL_LIMIT_PIDS,
    _AL_LIMIT_MAX,
} al_run_limit_key;

extern const char *const al_run_limit_names[_AL_LIMIT_MAX];

/* What a request is held to, read by the caller from its configuration
 * and the workspace's settings and maxima: the parser itself reads none. */
typedef struct al_run_bounds {
    uint64_t code_max;  /* bytes of code; more is 413 */
    uint64_t files_max; /* entries of files[] */
    struct {
        double def, min, max; /* a default above max is cut to max */
    } limit[_AL_LIMIT_MAX];
} al_run_bounds;

typedef struct al_run_file {
    const char *name; /* borrowed from the body */
    uint8_t *data;    /* decoded content_base64 (owned; one spare byte) */
    size_t len;
} al_run_file;

/* Every pointer but files[].data, files and net borrows from the body,
 * which must outlive the record. A field the request left out (or gave as
 * null) is NULL. */
typedef struct al_run_request {
    al_run_lang lang;
    const char *language; /* al_run_languages[lang] */
    const char *code;
    size_t code_len;
    const char *thread_id;
    const char *network;  /* the policy as given */
    al_net_policy *net;   /* it parsed (owned), NULL with network */
    const char *description;
    const char *image;    /* an alias, a digest or "host", unresolved */
    al_run_file *files;   /* owned */
    size_t n_files;
    json_t *artifacts;    /* borrowed array of the ids as given (entries
                           * that are no string are no artifact: the caller
                           * answers 404 for them as for an unknown id) */
    json_t *args;         /* borrowed array of strings, or NULL */
    const char *stdin_text;
    size_t stdin_len;
    struct {
        bool has;     /* the request set it */
        double value; /* what it set, else the bound's default */
    } limit[_AL_LIMIT_MAX];
} al_run_request;

/* Read BODY (a JSON object) into *RET, held to B. AL_STATUS_OK when it is a
 * request that could run, else the refusal (AL_STATUS_INVALID,
 * AL_STATUS_TOO_LARGE for code over B->code_max, AL_STATUS_INTERNAL out of
 * memory) with its message in MSG and its code
 * ("bad_request", "payload_too_large", "internal") in *CODE; *RET then
 * holds nothing to free (it may be freed all the same). Every check of the
 * body's own shape is made here, before any that needs the store: a body
 * that is malformed is invalid whatever the workspace allows (it used to be
 * refused as network_not_allowed, say, when its network came before its
 * fault), and among a body's faults the first in the order below is named. */
al_status al_run_request_parse(json_t *body, const al_run_bounds *b, al_run_request *ret, char *msg, size_t msglen,
                               const char **code);
void al_run_request_free(al_run_request *r);

/* 1-64 characters of A-Z a-z 0-9 . _ -, not . or .. */
bool al_valid_thread_id(const char *t);
/* A name of a file in /work: not empty, at most 255 bytes, no / and no
 * NUL, not . or .. (LEN is its length in bytes, NULs included). */
bool al_run_valid_file_name(const char *n, size_t len);
/* Whether N is a name that the box's /work gives to something else. */
bool al_run_reserved_file_name(const char *n);
