/*
 * Skills' rows (store/skills.c): one row per version (bundle digest) a
 * workspace uploaded, and which runs still stage a bundle. Lists come back
 * as counted arrays that al_store_skills_free releases.
 */
#pragma once

#include "store.h"

typedef enum al_store_skill_state {
    AL_STORE_SKILL_UPLOADED,      /* testable */
    AL_STORE_SKILL_PROMOTED,      /* runnable by agents; one per name */
    _AL_STORE_SKILL_STATE_MAX,
} al_store_skill_state;

/* "uploaded", "promoted" */
const char *al_store_skill_state_name(al_store_skill_state st);

typedef struct al_store_skill {
    int64_t seq;                  /* the order of upload */
    char id[40];
    char org_id[40], workspace_id[40];
    char name[72];
    char version[64];
    char digest[80];              /* "sha256:<hex>" of the bundle's manifest of files */
    char *manifest;               /* skill.json as uploaded (JSON text) */
    al_store_skill_state state;
    char uploaded_by[40];
    char created_at[40];
    char promoted_by[40];         /* "" when never promoted */
    char promoted_at[40];         /* "" when never promoted */
    int64_t bytes;                /* unpacked, against the storage quota */
} al_store_skill;

typedef struct al_store_skills {
    al_store_skill *v;
    size_t n;
} al_store_skills;

void al_store_skills_free(al_store_skills *l);
/* A record's owned parts (its manifest). */
void al_store_skill_done(al_store_skill *k);

/* Skill version ID of WS_ID: 0, -ENOENT when there is none, -EIO. */
int al_store_skill_get(al_store *s, const char *ws_id, const char *id, al_store_skill *ret, al_error *err);
/* The version of NAME in WS_ID whose bundle is DIGEST: as al_store_skill_get. */
int al_store_skill_get_digest(al_store *s, const char *ws_id, const char *name, const char *digest,
                              al_store_skill *ret, al_error *err);
/* The versions of NAME in WS_ID (only DIGEST's when it is not NULL), the
 * promoted one first when PROMOTED_FIRST, then the newest first; at most
 * LIMIT (0: no bound). */
int al_store_skill_versions(al_store *s, const char *ws_id, const char *name, const char *digest, bool promoted_first,
                            size_t limit, al_store_skills *ret, al_error *err);
/* Every version in WS_ID, by name, each name's promoted version first,
 * then the newest first; at most LIMIT. */
int al_store_skills_list(al_store *s, const char *ws_id, size_t limit, al_store_skills *ret, al_error *err);

/* How many versions of NAME WS_ID keeps other than DIGEST's, and whether
 * ORG_ID holds DIGEST's bundle already (in any workspace). */
int al_store_skill_counts(al_store *s, const char *ws_id, const char *name, const char *digest, const char *org_id,
                          int64_t *ret_versions, bool *ret_held, al_error *err);
/* Record K as uploaded (its state, promoted_by/at and seq are the store's):
 * 1 when added, 0 when WS_ID keeps that bundle of that name already. */
int al_store_skill_add(al_store *s, const al_store_skill *k, al_error *err);
/* Make the version of NAME in WS_ID whose bundle is DIGEST the promoted
 * one (BY at NOW); every other version of NAME steps back to uploaded. */
int al_store_skill_promote(al_store *s, const char *ws_id, const char *name, const char *digest, const char *by,
                           const char *now, al_error *err);
/* Remove the versions of NAME in WS_ID whose version or digest is VERSION
 * (every version when NULL), in one transaction: how many, with RET what
 * was removed (oldest first), or -errno. */
int al_store_skill_delete(al_store *s, const char *ws_id, const char *name, const char *version, al_store_skills *ret,
                          al_error *err);

/* Call EACH with every digest a workspace's version names. */
int al_store_skill_digests(al_store *s, int (*each)(const char *digest, void *userdata), void *userdata,
                           al_error *err);
/* Call EACH with every digest a run that has not ended stages. */
int al_store_skill_digests_live(al_store *s, int (*each)(const char *digest, void *userdata), void *userdata,
                                al_error *err);
/* Up to LIMIT ids (40 bytes each, in RET_IDS) of WS_ID's runs that have not
 * ended and stage DIGEST, the oldest first: how many, or -errno. */
int al_store_skill_live_runs(al_store *s, const char *ws_id, const char *digest, char (*ret_ids)[40], size_t limit,
                             al_error *err);
