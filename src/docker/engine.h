/*
 * A client of the Docker Engine API on its Unix socket: JSON calls through
 * libcurl (CURLOPT_UNIX_SOCKET_PATH), the API version negotiated with
 * GET /version, and the hijacked stream of an exec (stdin raw, stdout and
 * stderr in the 8-byte multiplexed frames). Mechanism only: it never logs,
 * never exits, and knows nothing of runs.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/util.h"

/* The highest API version airlock speaks; a daemon that speaks a lower one
 * (at least AL_ENGINE_API_MIN) is spoken to at its own. */
#define AL_ENGINE_API "1.41"
#define AL_ENGINE_API_MIN "1.40"
/* The most a JSON answer may hold: a daemon is trusted, a bug is not. */
#define AL_ENGINE_ANSWER_MAX (8u << 20)

typedef struct al_engine {
    char socket[108];             /* sun_path */
    char version[16];             /* the API version in use, "1.41" */
    char daemon[64];              /* the daemon's own version, "20.10.24+dfsg1" */
    char os[32], kernel[128];
    void *curl;                   /* CURL *, reused: one connection */
    /* while set (ms, al_now_ms's clock): every call ends by then, or
     * AL_ENGINE_FLOOR_MS after it began when that is later, so a run's
     * kill ends within its grace whatever the daemon does (0: each call
     * has the engine's own 120 s) */
    uint64_t until_ms;
    /* the last call was not answered in its time: the daemon is stuck.
     * While until_ms is set, a call to a stuck daemon is given only
     * AL_ENGINE_STUCK_MS, the time to hand it the request; an answer
     * clears it */
    bool stuck;
} al_engine;

/* the least time a call is given under until_ms: a daemon that answers
 * at all answers an inspect or an exec's start well within it, on a
 * loaded host too */
#define AL_ENGINE_FLOOR_MS 2500
#define AL_ENGINE_STUCK_MS 200

/* The socket Docker's own clients would use: DOCKER_HOST=unix://PATH,
 * else CONFIGURED (the config's docker_socket) when set, else
 * /var/run/docker.sock. A DOCKER_HOST that is not unix:// is refused: the
 * daemon must be on this host (its socket is root on it). */
int al_engine_socket_path(const char *configured, char *ret, size_t len, al_error *err);

/* Connect, ping and negotiate the version. */
int al_engine_open(al_engine *e, const char *socket_path, al_error *err);
void al_engine_close(al_engine *e);

/* METHOD PATH (no version prefix: "/containers/create?name=x") with BODY
 * (a JSON document, or NULL). Returns the HTTP status (>= 100) and, when
 * RET is not NULL, the answer parsed as JSON (NULL when it is empty or not
 * JSON; its text is then in ERR's message for a status >= 400), or -errno
 * when the daemon could not be reached. */
int al_engine_call(al_engine *e, const char *method, const char *path, json_t *body, json_t **ret, al_error *err);

/* POST PATH with the bytes read from FD as the body (an image's tar). */
int al_engine_post_fd(al_engine *e, const char *path, int fd, const char *content_type, json_t **ret,
                      al_error *err);

/* A path's query value, escaped (malloc'd). */
char *al_engine_escape(al_engine *e, const char *s);

/* The stream of one exec, started with POST /exec/{id}/start hijacked. */
typedef struct al_engine_stream {
    int fd;                       /* the connection (owned by the curl handle) */
    void *curl;
    uint8_t hdr[8];
    size_t hdr_len;
    uint32_t left;                /* bytes of the current frame still to come */
    int stream;                   /* 1 stdout, 2 stderr */
    bool eof;
} al_engine_stream;

/* Start exec ID and take over its connection. */
int al_engine_exec_start(al_engine *e, const char *exec_id, al_engine_stream *ret, al_error *err);
/* Read what is there (non-blocking): calls ON_DATA(stream 1|2, bytes) for
 * each piece of a frame. Returns 1 while open, 0 at the end, -errno. */
int al_engine_stream_read(al_engine_stream *s, void (*on_data)(int stream, const char *buf, size_t len, void *ud),
                          void *ud);
/* Write stdin bytes (non-blocking: returns how many, 0 when it would
 * block, or -errno), and end stdin. */
ssize_t al_engine_stream_write(al_engine_stream *s, const void *buf, size_t len);
int al_engine_stream_close_stdin(al_engine_stream *s);
void al_engine_stream_close(al_engine_stream *s);
