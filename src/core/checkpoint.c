/* Signed checkpoints of the audit trail's heads (checkpoint.h): the
 * operator's key, and the signed note of one chain's head. The signature
 * is nettle's ed25519; only the note's framing is written here. */
#include "checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/base64.h>
#include <nettle/eddsa.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/hash.h"
#include "../util/util.h"

#define ALG_ED25519 0x01
#define SIG_PREFIX "\xe2\x80\x94 " /* "— ": U+2014 and a space start a signature line */

/* LEN bytes SRC in canonical base64 (padded) in DST, NUL-terminated. */
static void b64(const uint8_t *src, size_t len, char *dst) {
    base64_encode_raw(dst, len, src);
    dst[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
}

/* Canonical base64 TEXT (LEN chars) into exactly WANT bytes of OUT. */
static bool unb64(const char *text, size_t len, uint8_t *out, size_t want) {
    if (len != BASE64_ENCODE_RAW_LENGTH(want) || len > 256)
        return false;
    uint8_t buf[BASE64_DECODE_LENGTH(256)];
    size_t n = 0;
    struct base64_decode_ctx ctx;
    base64_decode_init(&ctx);
    if (!base64_decode_update(&ctx, &n, buf, len, text) || !base64_decode_final(&ctx) || n != want)
        return false;
    /* one spelling per value: what decodes must encode back the same */
    char again[260];
    b64(buf, n, again);
    if (strncmp(again, text, len) != 0)
        return false;
    memcpy(out, buf, want);
    return true;
}

static uint32_t key_id(const char *name, const uint8_t pub[32]) {
    struct sha256_ctx c;
    uint8_t alg = ALG_ED25519, d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    sha256_update(&c, strlen(name), (const uint8_t *)name);
    sha256_update(&c, 1, (const uint8_t *)"\n");
    sha256_update(&c, 1, &alg);
    sha256_update(&c, 32, pub);
    sha256_digest(&c, sizeof d, d);
    return (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
}

/* NAME+KEYID+BASE64(0x01 || KEY): both halves' text form, parsed. */
static bool parse_key_text(const char *text, al_checkpoint_key *k, uint8_t key[32]) {
    const char *p1 = strchr(text, '+'), *p2 = p1 ? strchr(p1 + 1, '+') : NULL;
    if (!p1 || !p2 || p1 == text || (size_t)(p1 - text) >= sizeof k->name || p2 - p1 - 1 != 8)
        return false;
    snprintf(k->name, sizeof k->name, "%.*s", (int)(p1 - text), text);
    uint8_t id[4], raw[33];
    char idhex[9];
    snprintf(idhex, sizeof idhex, "%.8s", p1 + 1);
    if (!al_unhex(idhex, id, 4) || !unb64(p2 + 1, strlen(p2 + 1), raw, sizeof raw) || raw[0] != ALG_ED25519)
        return false;
    k->id = (uint32_t)id[0] << 24 | (uint32_t)id[1] << 16 | (uint32_t)id[2] << 8 | id[3];
    memcpy(key, raw + 1, 32);
    return true;
}

static void key_text(const char *name, uint32_t id, const uint8_t key[32], char *buf, size_t len) {
    uint8_t raw[33] = { ALG_ED25519 };
    char enc[BASE64_ENCODE_RAW_LENGTH(33) + 1];
    memcpy(raw + 1, key, 32);
    b64(raw, sizeof raw, enc);
    snprintf(buf, len, "%s+%08x+%s", name, id, enc);
}

void al_checkpoint_key_verifier(const al_checkpoint_key *k, char buf[AL_CHECKPOINT_VERIFIER_MAX]) {
    key_text(k->name, k->id, k->pub, buf, AL_CHECKPOINT_VERIFIER_MAX);
}

int al_checkpoint_key_parse_verifier(const char *text, al_checkpoint_key *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (strlen(text) >= AL_CHECKPOINT_VERIFIER_MAX || !parse_key_text(text, ret, ret->pub) ||
        key_id(ret->name, ret->pub) != ret->id)
        return al_err(err, "audit", EINVAL, "%.80s: not a verifier key (NAME+KEYID+BASE64, as `airlock admin audit "
                      "key` prints it)", text);
    return 0;
}

/* A new key at PATH: written whole under a name of its own, then linked
 * into place, so no reader sees half a key and a second maker keeps the
 * first's. */
static int key_create(const char *path, al_error *err) {
    al_checkpoint_key k = { .has_private = true };
    snprintf(k.name, sizeof k.name, "%s", AL_CHECKPOINT_KEY_NAME);
    if (getrandom(k.seed, sizeof k.seed, 0) != (ssize_t)sizeof k.seed)
        return al_err(err, "audit", errno ? errno : EIO, "getrandom: %m");
    ed25519_sha512_public_key(k.pub, k.seed);
    k.id = key_id(k.name, k.pub);
    char text[200], tmp[PATH_MAX + 32];
    key_text("PRIVATE+KEY+" AL_CHECKPOINT_KEY_NAME, k.id, k.seed, text, sizeof text);
    memset(&k, 0, sizeof k);
    snprintf(tmp, sizeof tmp, "%s.new.%d", path, (int)getpid());
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return al_err(err, "audit", errno, "create the audit key %s: %m", tmp);
    size_t n = strlen(text);
    text[n++] = '\n';
    bool ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    memset(text, 0, sizeof text);
    if (!ok || (link(tmp, path) < 0 && errno != EEXIST)) {
        e = ok ? errno : e;
        unlink(tmp);
        return al_err(err, "audit", e, "write the audit key %s: %s", path, strerror(e));
    }
    unlink(tmp);
    return 0;
}

int al_checkpoint_key_load(const char *path, bool create, al_checkpoint_key *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    /* a link is followed: a secret mounted by Kubernetes is one (its mode is checked below) */
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        int r = key_create(path, err);
        if (r < 0)
            return r;
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0)
        return al_err(err, "audit", errno, "the audit key %s: %m", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return al_err(err, "audit", errno, "the audit key %s: %m", path);
    if (!S_ISREG(st.st_mode))
        return al_err(err, "audit", EINVAL, "the audit key %s is not a regular file", path);
    /* a key others can read is no longer only the operator's */
    if (st.st_mode & 077)
        return al_err(err, "audit", EPERM, "the audit key %s is open to others (mode %03o): chmod 600 it", path,
                      (unsigned)(st.st_mode & 0777));
    char text[256] = "";
    ssize_t n = read(fd, text, sizeof text - 1);
    if (n < 0)
        return al_err(err, "audit", errno, "read the audit key %s: %m", path);
    text[n] = '\0';
    text[strcspn(text, "\n")] = '\0';
    const char *prefix = "PRIVATE+KEY+";
    bool ok = strncmp(text, prefix, strlen(prefix)) == 0 && parse_key_text(text + strlen(prefix), ret, ret->seed);
    memset(text, 0, sizeof text);
    if (ok) {
        ed25519_sha512_public_key(ret->pub, ret->seed);
        ok = key_id(ret->name, ret->pub) == ret->id;
    }
    if (!ok) {
        memset(ret, 0, sizeof *ret);
        return al_err(err, "audit", EINVAL, "the audit key %s is not an ed25519 key as airlock writes it "
                      "(PRIVATE+KEY+NAME+KEYID+BASE64)", path);
    }
    ret->has_private = true;
    return 0;
}

/* The note's text: the lines a signature covers. */
static int body(const al_audit_head *h, char *buf, size_t len) {
    uint8_t raw[32];
    char enc[BASE64_ENCODE_RAW_LENGTH(32) + 1];
    if (!al_unhex(h->hash, raw, sizeof raw))
        return -EINVAL;
    b64(raw, sizeof raw, enc);
    int n = snprintf(buf, len, AL_CHECKPOINT_ORIGIN "%s\n%lld\n%s\n", h->workspace_id, (long long)h->seq, enc);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : n;
}

int al_checkpoint_sign(const al_checkpoint_key *k, const al_audit_head *head, char **ret_text, al_error *err) {
    char text[512];
    int n = body(head, text, sizeof text);
    if (n < 0 || !k->has_private)
        return al_err(err, "audit", EINVAL, "cannot sign the head %s:%lld", head->workspace_id, (long long)head->seq);
    uint8_t sig[4 + ED25519_SIGNATURE_SIZE] = { k->id >> 24, k->id >> 16, k->id >> 8, k->id };
    ed25519_sha512_sign(k->pub, k->seed, (size_t)n, (const uint8_t *)text, sig + 4);
    char enc[BASE64_ENCODE_RAW_LENGTH(sizeof sig) + 1];
    b64(sig, sizeof sig, enc);
    if (asprintf(ret_text, "%s\n" SIG_PREFIX "%s %s\n", text, k->name, enc) < 0) {
        *ret_text = NULL;
        return al_err(err, "audit", ENOMEM, "out of memory");
    }
    return 0;
}

/* The three lines of a checkpoint's BODY (LEN bytes, its last newline
 * included) as a head. */
static bool parse_body(const char *text, size_t len, al_audit_head *ret) {
    char buf[512], *lines[4];
    if (len >= sizeof buf)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    size_t n = 0;
    for (char *p = buf; *p && n < 4; n++) {
        lines[n] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            return false;
        *nl = '\0';
        p = nl + 1;
    }
    /* exactly origin, size and hash: airlock writes no extension lines */
    if (n != 3 || strncmp(lines[0], AL_CHECKPOINT_ORIGIN, strlen(AL_CHECKPOINT_ORIGIN)) != 0)
        return false;
    const char *ws = lines[0] + strlen(AL_CHECKPOINT_ORIGIN);
    uint64_t seq;
    uint8_t raw[32];
    if (!*ws || strlen(ws) >= sizeof ret->workspace_id || strspn(ws, AL_AUDIT_WS_CHARS) != strlen(ws) ||
        al_parse_u64(lines[1], &seq) < 0 ||
        seq < 1 || seq > INT64_MAX || lines[1][0] == '0' || !unb64(lines[2], strlen(lines[2]), raw, sizeof raw))
        return false;
    snprintf(ret->workspace_id, sizeof ret->workspace_id, "%s", ws);
    ret->seq = (int64_t)seq;
    al_hex(raw, sizeof raw, ret->hash);
    return true;
}

int al_checkpoint_open(const al_checkpoint_key *k, const char *text, size_t len, al_audit_head *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (len > AL_CHECKPOINT_MAX || memchr(text, '\0', len))
        return al_err(err, "audit", EBADMSG, "not a checkpoint (larger than %d bytes, or binary)", AL_CHECKPOINT_MAX);
    /* the signatures follow the last blank line, one per line */
    const char *split = NULL;
    for (const char *p = text; (p = memmem(p, (size_t)(text + len - p), "\n\n", 2)); p++)
        split = p;
    if (!split || len == 0 || text[len - 1] != '\n')
        return al_err(err, "audit", EBADMSG, "not a checkpoint (no blank line before its signatures)");
    size_t body_len = (size_t)(split - text) + 1;
    if (!parse_body(text, body_len, ret))
        return al_err(err, "audit", EBADMSG, "not an airlock audit checkpoint (want the lines %sWORKSPACE, SIZE, "
                      "BASE64 HASH)", AL_CHECKPOINT_ORIGIN);
    bool signed_by_k = false;
    for (const char *line = split + 2; line < text + len && !signed_by_k;) {
        const char *nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t pl = strlen(SIG_PREFIX);
        /* the line's length first: a line shorter than the prefix would
         * give the name a negative length, read as a huge one */
        if (!nl || (size_t)(nl - line) <= pl || memcmp(line, SIG_PREFIX, pl) != 0)
            return al_err(err, "audit", EBADMSG, "not a checkpoint (a signature line is malformed)");
        const char *name = line + pl, *sp = memchr(name, ' ', (size_t)(nl - name));
        if (!sp)
            return al_err(err, "audit", EBADMSG, "not a checkpoint (a signature line is malformed)");
        uint8_t sig[4 + ED25519_SIGNATURE_SIZE];
        uint32_t id = 0;
        if ((size_t)(sp - name) == strlen(k->name) && memcmp(name, k->name, strlen(k->name)) == 0 &&
            unb64(sp + 1, (size_t)(nl - sp - 1), sig, sizeof sig)) {
            id = (uint32_t)sig[0] << 24 | (uint32_t)sig[1] << 16 | (uint32_t)sig[2] << 8 | sig[3];
            signed_by_k = id == k->id && ed25519_sha512_verify(k->pub, body_len, (const uint8_t *)text, sig + 4);
        }
        line = nl + 1;
    }
    if (!signed_by_k) {
        char v[AL_CHECKPOINT_VERIFIER_MAX];
        al_checkpoint_key_verifier(k, v);
        return al_err(err, "audit", EPERM, "the checkpoint of %s:%lld bears no valid signature of the key %s: forged, "
                      "altered, or signed by another key", ret->workspace_id, (long long)ret->seq, v);
    }
    return 0;
}
