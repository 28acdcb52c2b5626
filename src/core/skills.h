/*
 * Skills: bundles of scripts an agent runs by name (issue 7). A bundle is a
 * directory holding skill.json and its files (see skills/README.md):
 *
 *   {"name": "chart-builder", "version": "1.0.0", "description": "...",
 *    "image": "default",                      // optional: "host", an alias or sha256:...; default "default"
 *    "entrypoints": [{"name": "line", "language": "python|node|bash",
 *                     "script": "chart.py", "description": "...",
 *                     "timeout_s": 60,        // optional
 *                     "input_schema": {"type": "object", ...}}]}
 *
 * A run of an entrypoint sees the skill's files read-only at /skill, its
 * validated arguments as the JSON object in /work/args.json (whose path is
 * also argv[1]: `python3 /skill/chart.py /work/args.json`), the thread's
 * artifacts in /work/documents, and what it writes to /out becomes
 * artifacts, as for any run.
 *
 * skill_manifest.c is the pure part (manifest, paths, schema, arguments);
 * skills.c stores bundles by digest, lists them, and starts runs.
 */
#pragma once

/* versions of one skill a workspace keeps (delete old ones to add more) */
#define AL_SKILL_VERSIONS_MAX 20

#include <jansson.h>
#include <stdbool.h>

#include "../util/util.h"
#include "run_spec.h"
#include "status.h"

#define AL_SKILL_NAME_MAX 64
#define AL_SKILL_PATH_MAX 255
#define AL_SKILL_DEPTH_MAX 8
#define AL_SKILL_FILES_MAX 256
#define AL_SKILL_BYTES_MAX (16 << 20)        /* all files of a bundle, unpacked */
#define AL_SKILL_MANIFEST_MAX (256 << 10)
#define AL_SKILL_ENTRYPOINTS_MAX 32
#define AL_SKILL_ARGS_MAX (64 << 10)         /* the arguments, as JSON */

/* ------------------------------------------------ skill_manifest.c (pure) */

/* 1-64 characters of a-z 0-9 -, not starting or ending with -. */
bool al_skill_name_valid(const char *name);
/* A path inside a bundle: relative, no "." or ".." or empty component, no
 * control characters, at most AL_SKILL_PATH_MAX bytes and
 * AL_SKILL_DEPTH_MAX components (a trailing "/" is allowed: a directory). */
int al_skill_path_check(const char *path, unsigned *ret_depth, al_error *err);
/* Parse and validate skill.json; RET is the manifest as given. */
int al_skill_manifest_parse(const char *text, size_t len, json_t **ret, al_error *err);
/* Is SCHEMA within the supported subset of JSON Schema (top level an
 * object; type, properties, required, additionalProperties, enum, minimum,
 * maximum, minLength, maxLength, items, minItems, maxItems, description)?
 * Unknown keywords are refused, not ignored. */
int al_skill_schema_check(json_t *schema, al_error *err);
/* Validate ARGS against a checked SCHEMA; ERR names the first failing
 * path, e.g. "args.rows: must be at most 100". */
int al_skill_args_validate(json_t *schema, json_t *args, al_error *err);
/* The entrypoint named NAME of a parsed manifest, or NULL (borrowed). */
json_t *al_skill_entrypoint(json_t *manifest, const char *name);

/* ------------------------------------------------------- skill_bundle.c */

/* Unpack BODY, a tar or tar.gz, into ROOTFD, an empty directory of ours:
 * regular files (0644, or 0755 when executable) and directories (0755)
 * only, within the caps above. On failure, what was made is left for the
 * caller to remove with the directory. */
int al_skill_unpack(int rootfd, const void *body, size_t len, al_error *err);
/* Copy the directory PATH into ROOTFD by the same rules. */
int al_skill_copy_dir(int rootfd, const char *path, al_error *err);

/* ------------------------------------------------------------- skills.c */

typedef struct al_service al_service;
typedef struct al_principal al_principal;
struct al_idem;

/* Load the bundled skills (every subdirectory of SKILLS_DIR holding a
 * skill.json) into the store by digest. A bundled skill that does not
 * validate is an error: it ships with airlock. */
int al_skills_init(al_service *s, const char *skills_dir, al_error *err);
/* At the service's end: what al_skills_init made. */
void al_skills_free(al_service *s);

typedef enum al_skill_mode {
    AL_SKILL_RUN,                 /* agents: bundled or promoted skills only */
    AL_SKILL_TEST,                /* the test bench: the newest upload too */
    _AL_SKILL_MODE_MAX,
} al_skill_mode;

/*
 * Start a run of entrypoint ENTRYPOINT of skill NAME, on behalf of P, with
 * ARGS (a JSON object, validated against the entrypoint's input_schema),
 * in thread THREAD_ID (may be NULL). This is the one way to run a skill:
 * POST /v1/skills/{name}/run, .../test and the MCP tool run_skill_script
 * all come here, and from here the run goes through the same path as
 * POST /v1/runs (tool allow-list, approval, credits, queue, audit).
 *
 * O (may be NULL: all defaults): DIGEST picks one version in
 * AL_SKILL_TEST mode; LIMITS (NULL: none) the limits asked for, as a
 * run spec's;
 * NETWORK its `network` policy (NULL: the workspace's default); VIA the
 * interface the call came through, for the audit; WAIT: return when the
 * run has ended (or the run's timeout + 30 s passed). IDEM: a retry with
 * the key of an earlier request gets that request's run (even if the skill
 * has changed since), another request with it a conflict.
 *
 * Returns a status and sets *RET_DOC (always, owned by the caller):
 *   CREATED    started (OK with WAIT: ended); the run object, with "skill"
 *   INVALID    bad_request: unknown entrypoint, args failing the schema, bad thread
 *   FORBIDDEN  tool_not_allowed: run_skill_script is not on the allow-list
 *   NOT_FOUND  not_found: no such skill in this workspace or bundled
 *   CONFLICT   not_promoted: the skill exists but no version is promoted (RUN mode)
 *   PAYMENT_REQUIRED, BUSY, UNAVAILABLE, QUOTA, INTERNAL as al_run_create
 * Errors are {"error": {"code", "message"}}, the message written for a model.
 */
typedef struct al_skill_opts {
    const char *digest;
    const al_run_limit_req *limits; /* _AL_LIMIT_MAX of them, or NULL */
    const char *network;
    const char *via;              /* "rest", "mcp" */
    bool wait;
    al_skill_mode mode;
    struct al_idem *idem;         /* the request's Idempotency-Key, or NULL */
} al_skill_opts;

al_status al_skill_run(al_service *s, const al_principal *p, const char *name, const char *entrypoint, json_t *args,
                       const char *thread_id, const al_skill_opts *o, json_t **ret_doc);

/* The other operations; each returns a status and a document. */
/* IDEM (may be NULL): the upload's Idempotency-Key; a retry with it gets
 * the version its first attempt recorded (OK), another bundle CONFLICT. */
al_status al_skills_upload(al_service *s, const al_principal *p, const void *body, size_t len, struct al_idem *idem,
                           json_t **ret_doc);
al_status al_skills_list(al_service *s, const al_principal *p, json_t **ret_doc);
al_status al_skills_get(al_service *s, const al_principal *p, const char *name, json_t **ret_doc);
al_status al_skills_promote(al_service *s, const al_principal *p, const char *name, const char *digest,
                            json_t **ret_doc);
/*
 * DELETE /v1/skills/{name} (VERSION NULL: every version) and
 * DELETE /v1/skills/{name}/versions/{version} (VERSION a version string or
 * a digest): admins only (FORBIDDEN), workspace skills only (a bundled
 * skill is CONFLICT), NOT_FOUND when the workspace has no such skill or
 * version. The rows go at
 * once, so no new run can start from them; a bundle that a queued, pending
 * or running run still uses stays on disk until that run ends, so those
 * runs complete. Then the store is collected (al_skills_gc). OK and
 * {name, deleted: [{version, digest, state}], bundles_removed,
 * bundles_kept_for_runs: [digest]}; audited as skill.deleted.
 */
al_status al_skills_delete(al_service *s, const al_principal *p, const char *name, const char *version,
                           json_t **ret_doc);
/*
 * Remove every stored bundle (STATE/skills/sha256-<hex>) that nothing
 * refers to: no skill version of any workspace, no bundled skill, no run
 * that has not ended, no run being created. Bundles are shared by digest
 * across workspaces, so one workspace's delete never removes what another
 * still has. Returns how many were removed; RET_KEPT (may be NULL) gets the
 * digests kept only because a live run uses them.
 */
int al_skills_gc(al_service *s, json_t *ret_kept, al_error *err);
/* A run ended: collect the bundles a delete left behind for it, if any. */
void al_skills_run_ended(al_service *s);
/* The host directory of the stored bundle DIGEST ("sha256:<hex>"). */
int al_skills_dir(al_service *s, const char *digest, char *buf, size_t len);
/* skill_store.c, for skills.c: the store's directory (STATE/skills), and
 * al_skills_gc with skills_mu held. */
void al_skills_root(al_service *s, char *buf, size_t len);
int al_skills_gc_locked(al_service *s, json_t *ret_kept, al_error *err);
