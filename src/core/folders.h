/*
 * Connected folders (folders.c): a directory of the service's host that
 * an operator lends a workspace by name (`airlock admin folder add`),
 * read-only always. A run names files and directories beneath it; they are
 * read and hashed when the run is requested (pinned in its record, bound by
 * its hash and its approval), and copied at its start into
 * /work/documents/FOLDER/PATH, each read again and refused when it is not
 * the file pinned.
 *
 * Whatever lies beneath a folder is the host's, not airlock's, and may be
 * changed by anyone while it is read: every path is opened from the root's
 * fd with openat2 (RESOLVE_BENEATH | NO_SYMLINKS | NO_MAGICLINKS | NO_XDEV),
 * first as O_PATH (a device or a FIFO is never opened for reading), then
 * again for reading, the two fstat'ed as the same regular file; a read
 * stops at the size seen; a walk is capped in depth, files and bytes.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../store/folders.h"
#include "run_spec.h"

#define AL_FOLDER_FILES_MAX 1000             /* files a run imports, in all */
#define AL_FOLDER_BYTES_MAX (64ULL << 20)    /* their bytes, in all */
#define AL_FOLDER_DEPTH_MAX 12               /* directories beneath a folder's root */
#define AL_FOLDER_ENTRIES_MAX 1000           /* entries a listing shows */
#define AL_FOLDER_NAMES_MAX 20000            /* names a run's walk reads, in all */
#define AL_FOLDER_GLOB_MAX 256
#define AL_FOLDERS_PER_WORKSPACE 100

/* Register PATH (absolute, an existing directory, not a link itself) as
 * folder NAME of workspace WS_ID, GLOB (NULL or "": every file) saying
 * which files may be listed and imported; its identity (st_dev, st_ino)
 * is recorded now. STATE_DIR (may be NULL): the service's state, which no
 * folder may hold or lie in (every tenant's files are there). 0, or
 * -errno with ERR (-EINVAL a bad name, path or glob, -EEXIST the name is
 * taken, -ENOENT no such workspace). */
int al_folder_add(al_store *st, const char *ws_id, const char *name, const char *path, const char *glob,
                  const char *state_dir, al_error *err);
/* 1 removed, 0 there was none. */
int al_folder_remove(al_store *st, const char *ws_id, const char *name, al_error *err);

/* Folder F's root, opened (O_DIRECTORY, no link followed) and checked to be
 * the directory registered: an fd, or -errno with ERR naming the folder
 * and why (-ESTALE: another directory is at its path now). */
int al_folder_open_root(const al_store_folder *f, al_error *err);

/* GET /v1/folders: {name, glob, created_at} a folder, and path too when
 * WITH_PATH (an admin's view). */
json_t *al_folder_json(const al_store_folder *f, bool with_path);

/* The entries of directory SUB ("" or ".": the root) of folder NAME of
 * WS_ID: {entries: [{name, type "file"|"dir", size, mtime}], truncated};
 * links, devices, FIFOs, sockets, mount points and files the glob does
 * not allow are left out. NULL with ERR: -ENOENT in ERR->err for no such
 * folder or directory, EINVAL a bad SUB, else the cause. */
json_t *al_folder_entries(al_store *st, const char *ws_id, const char *name, const char *sub, al_error *err);

/* The files SP's folders' imports name, read and hashed now, added to SP
 * as its imports (al_run_spec_add_import): each path a regular file, or a
 * directory whose regular files (the glob allowing them) are taken,
 * recursively; links, devices, FIFOs, sockets and mount points beneath a
 * directory are left out, but named alone they are refused. Within
 * AL_FOLDER_FILES_MAX files and AL_FOLDER_BYTES_MAX bytes in all. 0, or
 * -errno with ERR's message naming the folder, the path and the rule
 * (-ENOENT no such folder or path, -EINVAL a rule broken, -EIO the store). */
int al_folder_resolve(al_store *st, const char *ws_id, al_run_spec *sp, al_error *err);

/* The imports of SP (pinned) copied into DOCS_DIR/FOLDER/PATH (DOCS_DIR
 * made if need be), each opened beneath its folder's root again and its
 * bytes, as copied, hashed: one that is not the pinned file any more
 * (size or sha256) is refused, ERR's step "folder_changed" and its message
 * "folder F: P changed since it was approved" (or "... since the run was
 * requested" unless APPROVED); a folder whose top-level name DOCS_DIR
 * already holds (a thread document's) is refused too. The count copied,
 * or -errno with ERR. */
int al_folder_stage(al_store *st, const char *ws_id, const al_run_spec *sp, const char *docs_dir, bool approved,
                    al_error *err);

/* Whether DOCS (the documents a run is staged with: [{path, ...}]) hold a
 * path whose first component is the name of one of SP's folders, which
 * /work/documents/NAME is then: -EEXIST with ERR naming both, else 0. */
int al_folder_clash(json_t *docs, const al_run_spec *sp, al_error *err);

/* TEXT, a JSON array of {folder, paths} as POST /v1/runs' `folders` (E2B's
 * metadata airlock_folders), read into SP's folders and checked
 * (al_run_spec_check_folders): 0, or -EINVAL with ERR saying why. */
int al_folder_request_parse(const char *text, al_run_spec *sp, al_error *err);

