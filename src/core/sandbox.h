/*
 * E2B-compatible sandboxes (issue 35; sandbox.c, sandbox_fs.c). A sandbox
 * is a workspace of the tenant, not a process: an id, an access token
 * (shown once, kept hashed), an end time, and a host directory
 * STATE/sandboxes/ID/{home,out} that each command's run stages as /work
 * and collects back. Nothing runs at create.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "../store/store.h"

typedef struct al_service al_service;

typedef enum al_sandbox_state { AL_SANDBOX_RUNNING, AL_SANDBOX_PAUSED, _AL_SANDBOX_STATE_MAX } al_sandbox_state;
typedef enum al_sandbox_root { AL_SANDBOX_HOME, AL_SANDBOX_OUT } al_sandbox_root;
typedef struct al_sandbox {
    char id[32];
    al_principal owner;          /* who created it; the sandbox plane acts as this principal */
    char key_id[40];             /* the key that created it: revoked, the sandbox plane refuses */
    char template_id[64];
    char image[160];             /* what its runs get as "image" ("" = the workspace default) */
    char network[512];           /* the airlock network policy its runs get (never wider than the workspace allows) */
    json_t *metadata, *env_vars; /* objects of strings (owned) */
    char started_at[40], end_at[40];
    al_sandbox_state state;
    char thread_id[72];          /* "e2b-<id>" */
    int64_t bytes;               /* what it holds on disk, as last counted (al_sandbox_account) */
    char owner_name[128];        /* its person's name as it is now (cut to fit) */
} al_sandbox;

/* The sandbox plane: sandbox ID whose access token is TOKEN, not ended, its creator's key still valid.
 * 0; -ENOENT none/ended/killed; -EACCES token wrong (al_error says which). */
int al_sandbox_admit(al_service *s, const char *id, const char *token, al_sandbox *out, al_error *err);
/* E2B path PATH (absolute or relative) onto ROOT and REL ("" for the root itself, else a clean relative path:
 * no "..", no empty or "." segment, at most 15 deep, each segment passing the /out name rules). -EINVAL, said. */
int al_sandbox_path(const char *path, al_sandbox_root *root, char *rel, size_t n, al_error *err);
/* Why NAME may not be an environment variable of a sandbox's commands
 * (its envVars, a command's envs), or NULL: a shell name of at most
 * AL_SANDBOX_ENV_NAME_MAX bytes, not one the box sets itself, not one that
 * makes the shell, the loader or libc run other code. The one rule of both. */
const char *al_sandbox_env_problem(const char *name);
#define AL_SANDBOX_ENV_NAME_MAX 128

/* Host directory of ROOT of sandbox ID (STATE/sandboxes/ID/home or /out): into BUF. */
int al_sandbox_dir(al_service *s, const char *id, al_sandbox_root root, char *buf, size_t n);
void al_sandbox_clear(al_sandbox *sb);

/* A command that waits for an approval runs on its sandbox's home as it was
 * when it was asked for, not as it is when approved: the home's regular
 * files and directories copied into DST (a new directory, the run's own),
 * bounded as the sandbox is. 0 and the bytes copied in *RET_BYTES (which
 * the run's inputs count, against the organisation's storage), or -errno said. */
int al_sandbox_pin_home(al_service *s, const char *id, const char *dst, int64_t *ret_bytes, al_error *err);
/* The files of such a copy DIR, as its approval card shows and its hash
 * binds them: [{path, size, sha256}] sorted by path; NULL, said. */
json_t *al_sandbox_pinned_files(const char *dir, al_error *err);
/* File IDX (of that list) of the copy DIR, opened beneath it, and its path
 * in *RET_PATH (free()): what the approval card's URL gives. 0, -ENOENT said. */
int al_sandbox_pinned_open(const char *dir, size_t idx, int *ret_fd, char **ret_path, al_error *err);
/* What sandbox ID holds on disk (home/ and out/), counted and kept in its
 * row, which its organisation's storage use adds (after a write or a
 * removal through the API, and after a command's tree is put back). */
void al_sandbox_account(al_service *s, const char *id);
/* Where a run's pinned home is, below the run's directory */
#define AL_SANDBOX_PINNED_HOME "sandbox-home"

/* ------------------------------------------------------------ the control plane */

/* Sandbox ID's access token (64 hex digits) into TOKEN: an HMAC of its id
 * under the service's secret (STATE/sandbox-token.key, made once), so that
 * Sandbox.connect can hand it out again while the store keeps only its
 * hash (a copy of the database alone admits no one). */
int al_sandbox_token(al_service *s, const char *id, char token[72], al_error *err);
/* Whether P may be handed SB's access token: only its creator, since the
 * sandbox plane acts as them (whoever holds the token runs commands as
 * its creator). 0, or -EPERM said. */
int al_sandbox_owner_check(const al_sandbox *sb, const al_principal *p, al_error *err);

/* Bounds: E2B's own are wider; these keep what one tenant holds small. */
#define AL_SANDBOX_TIMEOUT_DEFAULT_S 300        /* capped by the workspace's sandbox_max_timeout_s */
#define AL_SANDBOX_LIVE_MAX 100                 /* live sandboxes, one workspace */
#define AL_SANDBOX_LIVE_PER_PERSON 20           /* of which one person's (E2B's own default concurrency) */
#define AL_SANDBOX_META_MAX 32                  /* metadata entries, and env vars */
#define AL_SANDBOX_META_KEY_MAX 128
#define AL_SANDBOX_META_VALUE_MAX 1024
/* the metadata key a sandbox's connected folders' imports are given in (a
 * JSON array as POST /v1/runs' folders), and its size: 256 paths */
#define AL_SANDBOX_META_FOLDERS "airlock_folders"
#define AL_SANDBOX_META_FOLDERS_MAX (64u << 10)
/* the one its packages are given in (a JSON object as POST /v1/runs'
 * packages), and its size: two lists of 32 specs of 214 bytes, quoted */
#define AL_SANDBOX_META_PACKAGES "airlock_packages"
#define AL_SANDBOX_META_PACKAGES_MAX (16u << 10)
#define AL_SANDBOX_BYTES_MAX (64ULL << 20)      /* home/ and out/ together: the box's /work tmpfs */
#define AL_SANDBOX_ENTRIES_MAX 4096             /* files and directories, home/ and out/ together */

/* What Sandbox.create asks for (the API reads the body into it). */
typedef struct al_sandbox_spec {
    const char *template_id;     /* NULL: "base" */
    int64_t timeout_s;           /* < 0: the default */
    json_t *metadata, *env_vars; /* borrowed objects; NULL: none */
    int allow_internet;          /* -1 unset, 0 false (offline), 1 true */
    json_t *allow_out, *deny_out;/* borrowed arrays of host names; NULL: none */
} al_sandbox_spec;

/* Create a sandbox for P (whose API key is KEY) as SP says: 0 with OUT and
 * its access token in TOKEN (shown once); -ENOENT template not found,
 * -EINVAL a bad field, -EPERM wider than the workspace allows, -EDQUOT the
 * workspace holds its most live sandboxes; ERR says which. */
int al_sandbox_create(al_service *s, const al_principal *p, const char *key, const al_sandbox_spec *sp,
                      al_sandbox *out, char token[72], al_error *err);
/* P's sandbox ID (of P's workspace): 0, -ENOENT. */
int al_sandbox_get(al_service *s, const al_principal *p, const char *id, al_sandbox *out, al_error *err);

/* A page of P's workspace's sandboxes, the newest first. */
typedef struct al_sandbox_list {
    al_sandbox *v;
    size_t n;
    char next[24];               /* the next page's token, "" for the last page */
} al_sandbox_list;
/* What a listing asks for (E2B's list query). */
typedef struct al_sandbox_query {
    json_t *metadata;             /* every key and value must match; NULL: any */
    unsigned states;              /* a bit per al_sandbox_state; 0: any */
    const char *template_id;      /* NULL: any */
    const char *started_after;    /* the store's RFC 3339 form (al_store_now's); NULL: any */
    bool oldest_first;            /* E2B's order=asc */
    const char *after;            /* the page token; "" or NULL: the first page */
    size_t limit;                 /* 1 or more */
} al_sandbox_query;
/* A page of those Q asks for. -EINVAL a malformed token. */
int al_sandbox_list_page(al_service *s, const al_principal *p, const al_sandbox_query *q, al_sandbox_list *ret,
                         al_error *err);
void al_sandbox_list_free(al_sandbox_list *l);

/* Its end: now + TIMEOUT_S (at most the workspace's sandbox_max_timeout_s).
 * 0, -ENOENT, -EINVAL. */
int al_sandbox_set_timeout(al_service *s, const al_principal *p, const char *id, int64_t timeout_s, al_error *err);
/* Connect: a paused sandbox resumes; TIMEOUT_S >= 0 moves its end to now +
 * TIMEOUT_S when that is later. OUT as after. 0, -ENOENT (ended too). */
int al_sandbox_connect(al_service *s, const al_principal *p, const char *id, int64_t timeout_s, al_sandbox *out,
                       al_error *err);
/* Pause (files kept, nothing reaped while paused) or resume. 0, -ENOENT,
 * -EALREADY when it is in that state already. */
int al_sandbox_pause(al_service *s, const al_principal *p, const char *id, bool pause, al_error *err);
/* Kill: the row and the directory go. 0, -ENOENT. */
int al_sandbox_kill(al_service *s, const al_principal *p, const char *id, al_error *err);
/* The reaper: kill the running sandboxes past their end (one node at a
 * time: the store's sweep claim). How many, or -errno. */
int al_sandbox_sweep(al_service *s);

/* "running", "paused" */
const char *al_sandbox_state_name(al_sandbox_state st);

/* ------------------------------------------------------------ the console (sandbox_console.c) */

/* A sandbox as the console lists it: the sandbox and how many files it holds. */
typedef struct al_sandbox_view {
    al_sandbox sb;
    int64_t files;               /* regular files in home/ and out/ (-1: could not be read) */
} al_sandbox_view;
/* P's workspace's live sandboxes, the newest first (at most
 * AL_SANDBOX_LIVE_MAX, as a workspace holds): each one's files are counted
 * by a walk of its tree, which its bounds keep to AL_SANDBOX_ENTRIES_MAX. */
int al_sandbox_views(al_service *s, const al_principal *p, al_sandbox_view **ret, size_t *ret_n, al_error *err);
void al_sandbox_views_free(al_sandbox_view *v, size_t n);
/* Sandbox ID's regular files ({path as its commands see it, size}), sorted,
 * at most AL_SANDBOX_ENTRIES_MAX: 0, -ENOENT. */
typedef struct al_sandbox_file {
    char path[1040];
    uint64_t size;
} al_sandbox_file;
int al_sandbox_files(al_service *s, const al_principal *p, const char *id, al_sandbox_file **ret, size_t *ret_n,
                     al_error *err);
/* Kill sandbox ID for P from the console: only its owner or an admin of
 * the workspace (-EPERM, said); else as al_sandbox_kill. */
int al_sandbox_kill_by(al_service *s, const al_principal *p, const char *id, al_error *err);

/* ------------------------------------------------------------ files (sandbox_fs.c) */

/* One entry beneath a root, as lstat saw it (no link is followed). */
typedef struct al_sandbox_entry {
    char rel[1024];              /* relative to its root */
    bool dir, link;              /* a directory; a symbolic link (never followed) */
    bool special;                /* a FIFO, a socket or a device: not a file one can read */
    uint64_t size;
    mode_t mode;                 /* the permission bits */
    int64_t mtime;               /* seconds since the epoch */
} al_sandbox_entry;

typedef struct al_sandbox_entries {
    al_sandbox_entry *v;
    size_t n;
} al_sandbox_entries;
void al_sandbox_entries_free(al_sandbox_entries *l);

/* An fd (O_RDONLY) on the regular file REL of ROOT, its size: -ENOENT
 * none, -EISDIR a directory, -ELOOP a link (never followed). */
int al_sandbox_fs_open(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, int *ret_fd,
                       uint64_t *ret_size, al_error *err);
/* Write LEN bytes DATA to REL of ROOT (parents made, an existing file
 * replaced): -EDQUOT past the sandbox's bytes or entries, -EISDIR, -ELOOP. */
int al_sandbox_fs_write(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, const void *data,
                        size_t len, al_error *err);
/* The entry REL of ROOT ("" the root): -ENOENT. */
int al_sandbox_fs_stat(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel,
                       al_sandbox_entry *ret, al_error *err);
/* The entries beneath directory REL of ROOT, DEPTH levels deep (1: its
 * own), sorted by path; -ENOENT, -ENOTDIR. */
int al_sandbox_fs_list(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, int depth,
                       al_sandbox_entries *ret, al_error *err);
/* How many files ROOT holds, as al_sandbox_fs_list's walk (WALK_DEPTH_MAX
 * deep) would list them, into *COUNT: read from the directories' own
 * entry types, nothing stat'ed and nothing kept, so a listing of a
 * workspace's sandboxes costs a directory read per directory. -E2BIG past
 * the listing's bound of entries, -ENOENT. */
int al_sandbox_fs_count(al_service *s, const al_sandbox *sb, al_sandbox_root root, int64_t *count, al_error *err);
/* Make directory REL of ROOT and its parents: -EEXIST when it exists. */
int al_sandbox_fs_mkdir(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err);
/* Move FROM to TO (each beneath its root; parents of TO made). */
int al_sandbox_fs_move(al_service *s, const al_sandbox *sb, al_sandbox_root from_root, const char *from,
                       al_sandbox_root to_root, const char *to, al_error *err);
/* Remove REL of ROOT (a directory with all it holds): -ENOENT; a root
 * itself is emptied, not removed. */
int al_sandbox_fs_remove(al_service *s, const al_sandbox *sb, al_sandbox_root root, const char *rel, al_error *err);
