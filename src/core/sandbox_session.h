/*
 * The E2B session box's channel, the service's side (issue 35; the box's
 * side is src/drivers/session_agent.py, whose header describes the
 * protocol; the box itself is session_box.c, a call run_session.c).
 *
 * CHAN is an O_PATH fd of STATE/sandboxes/ID/session/box, bound read-only
 * at /skill in the session box beside the agent. Requests go to req/
 * (the service's: the box reads, never writes them). out/ (0700, the
 * service's: not the box's to read or write) holds each call's log and end,
 * written by the relay below from the agent's stdout: the box never writes
 * the shared state (a hostile box would fill it; the reader's caps bound
 * what is read, not what is written). out/ is still read as hostile: each
 * file opened beneath CHAN by its exact name, without following a link, a
 * regular file only (a FIFO never blocks the reader), each line, log and
 * end within a cap. A call's files are removed once its run ended
 * (al_session_forget).
 *
 * Credits: each call is a run; the session box's idle life is not charged
 * and holds no concurrency slot (docs/api.md, "Session box").
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../util/util.h"
#include "../util/json_keys.h"
#include "helper_events.h"

/* One output line: a 64 KiB chunk in base64 with its JSON around it */
#define AL_SESSION_LINE_MAX (96u << 10)
/* A call's whole log (its run's own output cap stops it far sooner) */
#define AL_SESSION_LOG_MAX (64u << 20)
#define AL_SESSION_END_MAX 4096
/* A request file (the service's code cap is 1 MiB, JSON-escaped) */
#define AL_SESSION_REQ_MAX (8u << 20)

/* Whether CALL can name a call's files: 1-63 of [a-z0-9_] (a run id). */
bool al_session_call_valid(const char *call);

/* REQ as req/CALL.json: written aside (req/.CALL.tmp, made new) and
 * renamed into place, so the agent reads a whole request or none. 0;
 * -EINVAL (a bad CALL), -EEXIST (submitted already), -E2BIG, -errno. */
int al_session_submit(int chan, const char *call, json_t *req, al_error *err);

/* Each output line of a call, an stdout or stderr event (else the line is
 * refused): 0 to go on, or a negative errno that stops the follow. */
typedef int (*al_session_chunk_fn)(void *ud, const al_helper_event *ev);

/* out/CALL.log from *OFF: each whole line given to FN, *OFF past the last
 * one given (a partial last line waits for its newline). 0 (also when the
 * log is not there yet); -EBADMSG (a line that is not an output event, or
 * longer than AL_SESSION_LINE_MAX), -EFBIG (the log past
 * AL_SESSION_LOG_MAX), -ELOOP/-EXDEV/-EINVAL (a link, another mount, not a
 * regular file), or FN's error; ERR says which. */
int al_session_follow(int chan, const char *call, uint64_t *off, al_session_chunk_fn fn, void *ud, al_error *err);

typedef struct al_session_end {
    int exit_code;
    bool timed_out;
    char error[256];              /* "" none; the box's words, cut to fit */
} al_session_end;

/* out/CALL.end: 1 (the call ended, *END filled), 0 (not yet), or a
 * negative errno for one that is hostile (a link, not a regular file,
 * past AL_SESSION_END_MAX, not {"exit": int, "timed_out": bool,
 * "error"?: string}). */
int al_session_end_read(int chan, const char *call, al_session_end *end, al_error *err);

/* ------------------------------------------------------------- the relay
 *
 * The box does not write the shared channel (above): the agent writes its
 * calls' lines to its stdout, which reaches the service as the session
 * box's stdout events, and the service relays them into out/ here:
 *
 *   {"call": C, "type": "stdout"|"stderr", "data_base64": B}
 *       appended to out/C.log as {"type", "data_base64"} (what
 *       al_session_follow reads), up to AL_SESSION_LOG_MAX a call (past
 *       it the call's lines are dropped: its run's own output cap has
 *       ended it long before)
 *   {"call": C, "end": {"exit", "timed_out", "error"?}}
 *       written to out/C.end (aside, renamed), once
 *
 * C must be a call the service submitted (req/C.json there), so a hostile
 * box names no other file: a line of any other call (one whose run ended
 * and whose files were removed, al_session_forget) is dropped; at most AL_SESSION_CALLS_MAX calls have
 * output pending at once; a line that is none of these, or over
 * AL_SESSION_LINE_MAX, is refused (-EBADMSG: the caller ends the session
 * box, whose agent never writes one). Everything is written beneath CHAN
 * without following a link, by the service's uid. */
#define AL_SESSION_CALLS_MAX 64

/* The node holding a session box keeps STATE/sandboxes/ID/session/holder
 * (its node id) fresh; one older than this is a dead node's. */
#define AL_SESSION_HOLDER_STALE_S 10
/* Whether a session box of sandbox ID lives (on any node: its holder file
 * is fresh): its files are the box's until it ends (session_box.h). */
bool al_session_box_holds(const char *state_dir, const char *id);

typedef struct al_session_relay_call {
    char call[64];
    uint64_t bytes;
} al_session_relay_call;

typedef struct al_session_relay {
    int chan;                     /* the channel (not owned) */
    char *part;                   /* a line whose newline is still to come */
    size_t part_len;
    al_session_relay_call calls[AL_SESSION_CALLS_MAX];
    size_t n_calls;
} al_session_relay;

void al_session_relay_init(al_session_relay *r, int chan);
void al_session_relay_clear(al_session_relay *r);
/* N bytes of the agent's stdout (any chunking): each whole line relayed.
 * 0, or -EBADMSG / -errno with ERR saying why (the relay is then done). */
int al_session_relay_feed(al_session_relay *r, const char *data, size_t n, al_error *err);

/* Ask the agent to kill call CALL's process group (req/CALL.cancel, made
 * beside its request): 0, -errno. */
int al_session_cancel(int chan, const char *call, al_error *err);

/* CALL's files (its request, cancel, log and end) removed, its run ended:
 * the channel holds only the calls that run. */
void al_session_forget(int chan, const char *call);
