/*
 * The E2B session box (issue 35; docs/api.md "Session box"): one
 * long-lived native box per sandbox whose workspace has e2b_session_box
 * on, held by the node that started it. Its process is the agent
 * (src/drivers/session_agent.py, embedded), bound read-only at /skill with
 * the channel's req/ beside it: the box reads requests there and writes
 * its calls' output as lines on its stdout, which the keeper thread here
 * relays into the channel's out/ (sandbox_session.h), for the call's
 * runner (run_session.c) to follow.
 *
 * The box stages the sandbox's home/ as /work when it starts and flows
 * /work back into home/ (and /out into out/) when it ends, as a run's box
 * does: while it lives its /work is its own (on its bounded tmpfs), not
 * bound to home/ (a box writing straight into STATE would escape the
 * sandbox's caps), so the files API refuses, saying so, until it ends
 * (pause ends it, files kept): never a stale or lost file.
 *
 * It ends when its sandbox's directory goes (kill, the reaper: on any
 * node, seen within a second), when STATE/sandboxes/ID/session/stop
 * appears (pause, on any node), at al_session_box_stop_all (the service's
 * stop), at its lifetime (the workspace's sandbox_max_timeout_s), or when
 * it dies (OOM, ...): then the call running in it ends error and the next
 * call starts a new one.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "service.h"

/* The session box of sandbox ID held by this node, started now (for RUN:
 * its image, network and limits; the sandbox's home staged) if there is
 * none: its generation in *GEN; when it was started now in place of one
 * this node held that ended, how that one ended in PREV (PREV_N bytes;
 * else ""). 0; -EBUSY (held by another node: ERR says which), -errno. */
int al_session_box_ensure(al_service *s, const al_store_run *run, const char *id, uint64_t *gen, char *prev,
                          size_t prev_n, al_error *err);
/* Whether the session box GEN of ID still lives: 1, or 0 with how it
 * ended in WHY. */
int al_session_box_alive(al_service *s, const char *id, uint64_t gen, char *why, size_t n);
/* Ask the session box of ID (held here) to end; its keeper flows its
 * files back. STATE/sandboxes/ID/session/stop asks it of any node. */
void al_session_box_end(al_service *s, const char *id);
int al_session_box_ask_end(al_service *s, const char *id);
/* Every session box of this node ended, its keeper joined (files back). */
void al_session_box_stop_all(al_service *s);
