/*
 * Fuzz target for MCP's JSON-RPC envelope (src/service/mcp_rpc.c): the body
 * of POST /mcp, all of which a client controls. LLVMFuzzerTestOneInput is
 * libFuzzer's entry point; without libFuzzer, main() mutates a seed corpus
 * with a fixed-seed PRNG, which `meson test` runs (under ASan+UBSan in
 * build-asan). Each input is also checked against what the parser promises
 * its caller: a message of the kind it says, or an error answer that is a
 * JSON-RPC 2.0 error with a code.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/mcp_rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long n_request, n_notification, n_response, n_error;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size heap copy, so a read past the end is caught */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    al_mcp_msg m;
    json_t *err = NULL;
    unsigned status = 0;
    int r = al_mcp_parse(buf, size, &m, &err, &status);
    if (r == 0) {
        if (err || !m.doc || m.kind >= _AL_MCP_KIND_MAX)
            abort();
        if (m.kind == AL_MCP_REQUEST && (!m.method || !(json_is_string(m.id) || json_is_integer(m.id))))
            abort();
        if (m.kind == AL_MCP_NOTIFICATION && (!m.method || m.id))
            abort();
        if (m.kind == AL_MCP_RESPONSE && (m.method || !m.id))
            abort();
        if (m.params && !json_is_object(m.params))
            abort();
        n_request += m.kind == AL_MCP_REQUEST;
        n_notification += m.kind == AL_MCP_NOTIFICATION;
        n_response += m.kind == AL_MCP_RESPONSE;
        /* what the handler does next with a request: negotiate a version */
        if (m.method && strcmp(m.method, "initialize") == 0) {
            const char *v = al_mcp_negotiate(json_string_value(json_object_get(m.params, "protocolVersion")));
            if (!al_mcp_version_supported(v))
                abort();
        }
        al_mcp_msg_free(&m);
    } else {
        if (status < 200 || status > 499 || m.doc)
            abort();
        if (err) {
            json_t *e = json_object_get(err, "error");
            if (strcmp(json_string_value(json_object_get(err, "jsonrpc")) ?: "", "2.0") != 0 ||
                !json_is_integer(json_object_get(e, "code")) || !json_is_string(json_object_get(e, "message")) ||
                !json_object_get(err, "id"))
                abort();
            char *t = json_dumps(err, JSON_COMPACT);
            if (!t || strchr(t, '\n'))
                abort(); /* one SSE data line, one stdio line */
            free(t);
            json_decref(err);
        } else if (status != 202) {
            abort(); /* nothing to say is only for notifications */
        }
        n_error++;
    }
    free(buf);
    return 0;
}

#ifndef AIRLOCK_LIBFUZZER
#include "mutate.h"

static const char *const seeds[] = {
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\","
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"x\",\"version\":\"1\"}}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
    "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"code_execution\","
    "\"arguments\":{\"language\":\"python\",\"code\":\"print(1)\"},\"_meta\":{\"progressToken\":7}}}",
    "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"a\"}}",
    "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
    /* the parser's error text quotes the bad token, cut inside a character */
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\u\xc3\xa9",
};


int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    double budget = argc > 2 ? atof(argv[2]) : 30.0;
    static const char *const dict[] = { "{", "}", "[", "]", ",", ":", "\"", "\\u0000", "\\ud800", "null", "true",
                                        "1e999", "-1", "\"id\":", "\"method\":", "\"params\":", "\"result\":",
                                        "\"jsonrpc\":\"2.0\",", "\"2025-06-18\"", "\x00", "\xff",
                                        "\\u\xc3\xa9", "\xe2\x82" };
    uint8_t buf[4096];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long i = 0;
    for (; i < iters; i++) {
        const char *seed = seeds[fuzz_next() % (sizeof seeds / sizeof seeds[0])];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        int muts = (int)(fuzz_next() % 4);
        for (int k = 0; k < muts; k++)
            fuzz_mutate(buf, &len, sizeof buf, dict, sizeof dict / sizeof dict[0], false);
        LLVMFuzzerTestOneInput(buf, len);
        if (fuzz_over(i, &t0, budget))
            break;
    }
    printf("fuzz_mcp: %ld inputs, no crash; %ld requests, %ld notifications, %ld responses, %ld refused\n", i,
           n_request, n_notification, n_response, n_error);
    /* the mutations must keep reaching every kind, and the refusals */
    return n_request > i / 20 && n_notification > 0 && n_response > 0 && n_error > i / 20 ? 0 : 1;
}
#endif
