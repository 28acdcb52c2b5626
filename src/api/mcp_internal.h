/* What MCP's transport (mcp.c: sessions, requests) and its resumable
 * tools/call streams (mcp_stream.c) share: the state under al_mcp's lock
 * and the calls each makes of the other. Not for other files. */
#pragma once

#include <microhttpd.h>
#include <pthread.h>

#include "mcp.h"
#include "mcp_tools.h"

#define SESSIONS_MAX 4096
#define SESSIONS_PER_PERSON_MAX 64
#define SESSION_IDLE_MS (24ull * 3600 * 1000) /* an idle session is forgotten after a day */
#define KEEPALIVE_S 15
#define INFLIGHT_MAX 1024 /* tools/call under way (followed or parked) service-wide */
/* tools/call that one person's connections follow at once (a JSON answer
 * holds its connection's thread until the run ends; so does an event
 * stream): one person cannot take every connection of the service */
#define CALLS_PER_PERSON_MAX 16

typedef struct session {
    char id[33];
    char person_id[40];
    char version[16];
    int log_level; /* index into levels: the least severe a client wants */
    uint64_t last_ms;
    uint64_t streams;  /* event streams made: the next one's number */
} session;

/* A tools/call under way, so notifications/cancelled can find it and each
 * person's calls can be counted. */
typedef struct inflight {
    char session[33]; /* empty: a free slot */
    char person[40];
    char request[72]; /* the request's id as compact JSON ("" when too long to find) */
    char run_id[40];
    bool attached;    /* a connection follows it (else its stream is parked) */
} inflight;

typedef struct rstream rstream;

struct al_mcp {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* a stream's connection let go */
    session *sessions; /* SESSIONS_MAX slots; id[0] == 0 is free */
    inflight *calls;   /* INFLIGHT_MAX slots */
    rstream *streams;  /* resumable tools/call streams (below) */
};

/* ------------------------------------------------------------- mcp.c */

/* Session ID as P's (a copy in *RET); false when it is not one. */
bool al_mcp_session_get(al_mcp *m, const char *id, const al_principal *p, session *ret);
/* The number of session ID's next event stream (from 1). Under m->mu. */
uint64_t al_mcp_session_next_stream(al_mcp *m, const char *id);
/* The number of P's calls that connections follow. Under m->mu. */
int al_mcp_inflight_attached(al_mcp *m, const char *person);
void al_mcp_inflight_set_run(al_mcp *m, int slot, const char *run_id);
void al_mcp_inflight_del(al_mcp *m, int slot);
enum MHD_Result al_mcp_send_json(struct MHD_Connection *c, unsigned status, json_t *doc, const char *session_id);
/* A JSON-RPC error response with HTTP STATUS. */
enum MHD_Result al_mcp_send_error(struct MHD_Connection *c, unsigned status, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* ------------------------------------------------------ mcp_stream.c */

/* Take RS out of the list and free it. Under m->mu. */
void al_mcp_rstream_drop(al_mcp *m, rstream *rs);
/* Forget session SID's streams (the ones read end with their connections). Under m->mu. */
void al_mcp_rstreams_end_session(al_mcp *m, const char *sid);
/* Forget the streams past their bounds (SID's own first, when not NULL). Under m->mu. */
void al_mcp_rstreams_reap(al_mcp *m, const char *sid);
/* Answer tools/call ID (call K, in-flight SLOT) of SESS: as one JSON
 * response, or (SSE) as a resumable event stream of its notifications. */
enum MHD_Result al_mcp_follow(al_mcp *m, const session *sess, const al_principal *p, struct MHD_Connection *c,
                              al_mcp_call *k, json_t *id, bool sse, bool send_output, int slot);
/* GET /mcp with Last-Event-ID LAST: resume the stream it names. */
enum MHD_Result al_mcp_resume(al_mcp *m, al_service *s, struct MHD_Connection *c, const al_principal *p,
                              const char *last);
