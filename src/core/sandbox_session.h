/*
 * The E2B session box's channel, the service's side (issue 35; the box's
 * side is src/drivers/session_agent.py, whose header describes the
 * protocol). NOT WIRED YET: nothing calls these (the setting
 * e2b_session_box is refused); they are tested on their own
 * (tests/unit/test_sandbox_session.c) so that the session step is built on
 * a reader already held to the rules for what a box writes.
 *
 * CHAN is an O_PATH fd of STATE/sandboxes/ID/session. Requests go to
 * req/ (root's: the box reads, never writes them); out/ is the box's and
 * hostile: each file is opened beneath CHAN by its exact name, without
 * following a link, and must be a regular file (a FIFO never blocks the
 * reader); a line, the log and the end each have a cap.
 *
 * What remains, as decided (issue 35): the session box is al_box_run with
 * WORK_IN = the sandbox's home/ and COLLECT_WORK (its /work the box's own,
 * on its bounded tmpfs, flowed back by the existing swap when the box
 * ends), the channel bound at /run/airlock-session (out/ and alive chowned
 * to the box's host uid, req/ root's), argv the agent, wall = the
 * sandbox's end. Not a bind of home/ itself: a box writing straight into
 * STATE would escape the sandbox's 64 MiB / 4,096-entry caps (only the
 * tmpfs bounds it). So while it lives the files API must go through the
 * agent (request kinds for read/write/list) or flow /work back first: that
 * is the piece to build next, with the runner's session step (submit,
 * al_session_follow into the run's events, al_session_end_read ends it;
 * result.box.session = true), and the ends: kill, reaper, pause, drain
 * (the node holding the box's helper kills it; a stale "alive" tells
 * another node the box died). Credits: each call is a run; the idle
 * lifetime is not charged but holds one of the person's concurrency slots.
 *
 * A limit found while writing this, to keep: the box must not write into
 * STATE directly either. Bound rw, out/ would let a hostile box fill the
 * shared state disk (the reader's caps bound what it reads, not what is
 * written). So out/ should be the box's own (its tmpfs, or the agent's
 * stdout) and the helper holding the box (the one process that can see
 * it) relay each call's lines into STATE's out/, counting them against
 * the caps above; req/ can be bound read-only. The service removes a
 * call's three files once its run has ended.
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
