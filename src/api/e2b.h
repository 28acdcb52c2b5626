/*
 * What E2B's surfaces (e2b.c, e2b_files.c, and the commands' and code
 * interpreter's modules) share: E2B's shapes of error. The control plane
 * and envd's plain HTTP endpoints answer {"code": <status>, "message"};
 * envd's Connect RPCs answer {"code": "<connect code>", "message"} with the
 * status Connect maps that code to.
 */
#pragma once

#include <microhttpd.h>

#include "../util/util.h"

/* {"code": STATUS, "message": ...} with STATUS. */
enum MHD_Result al_e2b_reply_error(struct MHD_Connection *c, unsigned status, const char *fmt, ...) _printf_(3, 4);
/* A Connect unary error: CODE ("not_found", "invalid_argument", ...) with
 * the HTTP status the Connect protocol gives it. */
/* The domain E2B's SDK is given: no such host (see sandbox_json in e2b.c) */
#define AL_E2B_DOMAIN "set-e2b-sandbox-url.no-ports.airlock.invalid"
enum MHD_Result al_e2b_connect_error(struct MHD_Connection *c, const char *code, const char *fmt, ...) _printf_(3, 4);
/* The Connect code of a core call's -errno. */
const char *al_e2b_connect_code(int r);
/* The control plane's HTTP status of a core call's -errno. */
unsigned al_e2b_status(int r);
/* Whether URL is a Connect RPC's path (/<package>.<Service>/<Method>). */
bool al_e2b_is_rpc(const char *url);
