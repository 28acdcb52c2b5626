/*
 * What E2B's commands (e2b_process.c) and the code interpreter
 * (e2b_execute.c) share: a sandbox's run made from what the SDK sent (its
 * environment merged and checked, its working directory, via "e2b"), the
 * pid a run is known by, and a run's end in envd's words.
 */
#pragma once

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>

#include "../core/runs.h"
#include "../core/sandbox.h"
#include "connect.h"

/* A command's environment: at most this many variables (the sandbox's and
 * the command's together), names of at most 128 bytes, values of 32 KiB. */
#define AL_E2B_ENVS_MAX 64
#define AL_E2B_ENV_VALUE_MAX (32u << 10)

/* SB's envVars, then ENVS (an object of strings, NULL: none; the
 * command's win), then what the box of a sandbox always has (HOME=/work,
 * E2B_SANDBOX=true, E2B_SANDBOX_ID; never overridden), in *RET (an object,
 * owned). A name that is not [A-Za-z_][A-Za-z0-9_]*, or one of the box's
 * own (AIRLOCK_*, the egress proxy's, E2B_SANDBOX*), a value that is no
 * string or holds a NUL, and more than the caps: -EINVAL, WHY says which. */
int al_e2b_env(const al_sandbox *sb, json_t *envs, json_t **ret, char *why, size_t n);
/* The bash lines that set ENV (al_e2b_env's) and go to DIR ("/work",
 * "/out/x", ...) before a command, each value single-quoted (malloc'd). */
char *al_e2b_bash_prelude(json_t *env, const char *dir);
/* The box's directory of an E2B cwd (NULL or "": /work): "/work/REL" or
 * "/out/REL" into BUF; -EINVAL (WHY) for a path outside what a sandbox
 * keeps. */
int al_e2b_box_dir(const char *cwd, char *buf, size_t n, char *why, size_t wn);

/* A sandbox's run: LANG ("bash", "python", "node") running CODE (LEN
 * bytes) in SB's working directory, with its image, network and thread,
 * DESCRIPTION shown to an approver, asked for by P via "e2b", its timeout
 * TIMEOUT_S brought within the workspace's bounds (INFINITY: the longest
 * they allow; 0: the workspace's default). 0 and its
 * id in RUN_ID; else the Connect code of the refusal and its words in
 * MSG. */
int al_e2b_run_start(al_service *s, const al_principal *p, const al_sandbox *sb, const char *lang, const char *code,
                     size_t len, const char *description, double timeout_s, char run_id[40], al_connect_code *ret_code,
                     char *msg, size_t msglen);
/* The pid a run is known by in its sandbox: a number from its id, the
 * same on every node (no mapping to keep; two live runs of one sandbox
 * meeting on one are not told apart: 1 in 2^31 each). */
uint32_t al_e2b_pid(const char *run_id);

/* How a run ended, as envd's end event says it. */
typedef struct al_e2b_end {
    int exit_code;                /* -1: killed, timed out, denied, failed to run */
    bool exited;
    char status[48];              /* "exit status 0", "signal: killed", ... */
    char error[640];              /* "" none */
    bool ended;                   /* false: the run has not ended */
} al_e2b_end;
/* Run RUN_ID of P (NULL: gone) as envd's end; its result in *RET_RESULT
 * when asked (owned; NULL without one). */
void al_e2b_end_of(al_service *s, const al_principal *p, const char *run_id, al_e2b_end *ret, json_t **ret_result);

/* 200, a body of TYPE that READ fills from CLS (DONE frees CLS, also when
 * no answer could be made): the Connect streams and /execute's NDJSON. */
/* A stream that is only its end-stream frame carrying CODE and MSG: a
 * server stream's error before any event (Connect's streams carry their
 * errors there, with status 200; a client reads no other). */
enum MHD_Result al_e2b_stream_error(struct MHD_Connection *c, al_connect_code code, const char *msg);
enum MHD_Result al_e2b_stream_reply(struct MHD_Connection *c, const char *type, MHD_ContentReaderCallback read,
                                    void *cls, MHD_ContentReaderFreeCallback done);
/* Whether the client of C has closed its side (or the connection broke). */
bool al_e2b_peer_gone(struct MHD_Connection *c);
/* LEN bytes of DATA in base64 (malloc'd), NULL out of memory. */
char *al_e2b_base64(const void *data, size_t len);
/* The bash line of an E2B process {cmd, args}: CMD itself when the SDK
 * sent ("/bin/bash", ["-l"?, "-c", CMD]) (commands.run), else cmd and
 * args each quoted (malloc'd; NULL out of memory or an arg no string). */
char *al_e2b_command_line(const char *cmd, json_t *args);
