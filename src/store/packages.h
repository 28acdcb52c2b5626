/*
 * A thread's package set (issue 38), one row per package manager: the
 * specs its runs asked for, the layer they were installed into and what
 * that resolved to. Typed as the store keeps them: the specs and the
 * resolved list are JSON arrays as text, the core's to read
 * (core/packages.c); the language is its name ("python", "node").
 */
#pragma once

#include <stddef.h>

#include "../util/util.h"
#include "store.h"

typedef struct al_store_thread_packages {
    char lang[16];
    char *specs;      /* JSON array of strings */
    char *layer;      /* "sha256:<hex>", "" when none yet */
    char *resolved;   /* JSON array of {name, version, ...} */
    char updated_at[40];
} al_store_thread_packages;

void al_store_thread_packages_free(al_store_thread_packages *v, size_t n);
/* WS_ID's thread THREAD_ID's rows (at most one per language, by language)
 * into *RET (al_store_thread_packages_free, even for none) and *RET_N. 0
 * or -errno with ERR. */
int al_store_thread_packages_get(al_store *s, const char *ws_id, const char *thread_id,
                                 al_store_thread_packages **ret, size_t *ret_n, al_error *err);
/* The row of (WS_ID, THREAD_ID, R->lang) made R (ORG_ID its
 * organisation's): 0 or -errno with ERR. */
int al_store_thread_packages_put(al_store *s, const char *org_id, const char *ws_id, const char *thread_id,
                                 const al_store_thread_packages *r, al_error *err);
/* In a unit of work (al_store_begin), hold thread THREAD_ID's package set
 * (WS_ID's) until the unit ends: what a read-then-write of the set (the
 * union a finished install makes with what other runs of the thread
 * added) takes before its read, so that two runs of one thread finishing
 * their installs at once both land. SQLite's writer lock, PostgreSQL's
 * advisory lock. 0 or -errno with ERR. */
int al_store_thread_packages_lock(al_store *s, const char *ws_id, const char *thread_id, al_error *err);
