/* What sandbox.c, sandbox_ctl.c, sandbox_fs.c and sandbox_pin.c share, and nothing
 * above the core sees. */
#pragma once

#include "../store/sandboxes.h"
#include "sandbox.h"

/* The store's row B as OUT (its documents parsed): 0, -EIO. */
int al_sandbox_from_store(const al_store_sandbox *b, al_sandbox *out, al_error *err);
/* STATE/sandboxes/ID and its roots, each 0700 (ID's must not exist yet). */
int al_sandbox_make_dirs(al_service *s, const char *id, al_error *err);
/* STATE/sandboxes/ID and all it holds (no link followed). */
void al_sandbox_remove_dirs(al_service *s, const char *id);
/* Why SEG (LEN bytes), one segment of a path, may not name a file in a
 * sandbox (the /out name rules), or NULL. */
const char *al_sandbox_name_problem(const char *seg, size_t len);
/* REL beneath DIRFD opened with FLAGS (MODE when it creates): openat2 with
 * no "..", no symbolic or magic link, no other mount; -errno. */
int al_sandbox_beneath(int dirfd, const char *rel, int flags, mode_t mode);
/* How deep a walk goes (a box may have left deeper trees: they count as full) */
#define WALK_DEPTH_MAX 32
