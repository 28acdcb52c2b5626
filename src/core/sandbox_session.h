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
