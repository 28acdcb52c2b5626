/*
 * Signed checkpoints of the audit trail's heads (checkpoint.c).
 *
 * A hash chain shows that nothing before its newest event was changed, but
 * not that newer events were never there: whoever can write the store can
 * cut the chain back and leave a shorter valid one. A checkpoint is the
 * head (seq and hash) of one workspace's chain, signed with the operator's
 * ed25519 key, which the store never holds: a copy kept anywhere else shows
 * a later cut or rewrite, and no one with the database alone can sign a
 * new one.
 *
 * The form is Certificate Transparency's signed tree head as the
 * transparency-log world writes it (c2sp.org/tlog-checkpoint in a signed
 * note, c2sp.org/signed-note): an origin line ("airlock/audit/WS"), the
 * chain's size (the head's seq: chains number from 1 without gaps), the
 * head's hash in base64, a blank line and one signature line,
 * "— NAME BASE64(KEY_ID || SIGNATURE)". Unlike a tlog the hash is a chain's,
 * not a Merkle tree's root. Keys are written as the Go note package writes
 * them: the verifier key NAME+KEYID+BASE64(0x01 || PUBLIC), the private one
 * PRIVATE+KEY+NAME+KEYID+BASE64(0x01 || SEED), KEYID the first 4 bytes of
 * SHA-256(NAME "\n" 0x01 PUBLIC).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "audit.h"

#define AL_CHECKPOINT_KEY_NAME "airlock-audit"
#define AL_CHECKPOINT_ORIGIN "airlock/audit/"
#define AL_CHECKPOINT_KEY_FILE "audit.key" /* in the state directory, unless audit_key names a path */
#define AL_CHECKPOINT_HEADS_FILE "audit.heads" /* in the state directory: the last head signed of each chain */
#define AL_CHECKPOINT_MAX 8192    /* bytes of a checkpoint read */
#define AL_CHECKPOINT_VERIFIER_MAX 128

typedef struct al_checkpoint_key {
    char name[64];
    uint32_t id;
    uint8_t pub[32];
    bool has_private;             /* false: a verifier key only */
    uint8_t seed[32];
} al_checkpoint_key;

/* The private key at PATH; when there is none and CREATE, a new one made
 * there (0600; of two makers at once, both end up with the first's). A
 * key file that others may read or write is refused. */
int al_checkpoint_key_load(const char *path, bool create, al_checkpoint_key *ret, al_error *err);
/* K's verifier key (its public half) as text in BUF. */
void al_checkpoint_key_verifier(const al_checkpoint_key *k, char buf[AL_CHECKPOINT_VERIFIER_MAX]);
/* A verifier key TEXT (as al_checkpoint_key_verifier writes it). */
int al_checkpoint_key_parse_verifier(const char *text, al_checkpoint_key *ret, al_error *err);
/* The checkpoint of HEAD signed with K (which has its private half): a
 * NUL-terminated note in *RET_TEXT (free). */
int al_checkpoint_sign(const al_checkpoint_key *k, const al_audit_head *head, char **ret_text, al_error *err);
/* The head LEN bytes TEXT sign, when a signature by K is among its
 * signatures and holds; -EBADMSG (with why) when it is not a checkpoint,
 * -EPERM when K did not sign it. */
int al_checkpoint_open(const al_checkpoint_key *k, const char *text, size_t len, al_audit_head *ret, al_error *err);

/* checkpointer.c: the service's checkpoints. It loads (or makes) the key
 * at start, and every audit_checkpoint_s writes to its log, as an
 * audit.checkpoint line, the signed checkpoint of each chain whose head
 * moved, and a last round when it stops. It signs no head of a chain that
 * no longer holds the last head it signed (cut back or rewritten in the
 * store since; before a restart too: the last heads are kept in
 * STATE/audit.heads), and logs audit.head_rewritten instead. */
struct al_service;
typedef struct al_checkpointer al_checkpointer;
int al_checkpointer_start(struct al_service *s, al_error *err);
void al_checkpointer_stop(struct al_service *s);
/* The signed checkpoint of WORKSPACE_ID's chain now in *RET_TEXT (free),
 * its head in RET_HEAD. -ENOENT: the chain has no events; -ESTALE: it no
 * longer holds a head signed before (ERR says which). */
int al_checkpointer_sign_now(struct al_service *s, const char *workspace_id, char **ret_text, al_audit_head *ret_head,
                             al_error *err);
/* The head of WORKSPACE_ID's chain this service signed last, into *RET:
 * false when it signed none. */
bool al_checkpointer_last(struct al_service *s, const char *workspace_id, al_audit_head *ret);
/* The verifier key of the service's checkpoints in BUF. */
void al_checkpointer_verifier(struct al_service *s, char buf[AL_CHECKPOINT_VERIFIER_MAX]);
