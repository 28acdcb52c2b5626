/*
 * Fuzz target for what `airlock admin audit verify` reads from outside the
 * store (src/core/checkpoint.c, audit.c): a checkpoint file (a signed note
 * anyone may hand the operator), a verifier key, and a head as
 * WORKSPACE:SEQ:HASH.
 *
 * What must hold: a checkpoint is accepted only with a valid signature of
 * the one key trusted here, and what it then says is a plain head (a
 * workspace id without spaces, '+' or '/', a seq from 1, a hash of 64
 * lower-case hex digits); a changed byte of an accepted note's signed
 * lines is refused; a verifier key or a head is accepted only in its one
 * spelling (written back, it is the input).
 */
#include <errno.h>
#include <inttypes.h>

#include "core/audit.h"
#include "core/checkpoint.h"
#include "fuzz.h"
#include "util/hash.h"

/* the public half of the key that signed the corpus's checkpoints */
#define TRUSTED "airlock-audit+aac31f3b+AYEXA3lcUktFYfe0IGopG7dyUi9V2QI2sAtBqMFM8gzQ"

static long n_opened, n_keys, n_heads;

static void check_head(const al_audit_head *h) {
    size_t n = strlen(h->workspace_id);
    FUZZ_CHECK(n > 0 && n < sizeof h->workspace_id && strspn(h->workspace_id, AL_AUDIT_WS_CHARS) == n, "workspace %s",
               h->workspace_id);
    FUZZ_CHECK(h->seq >= 1, "seq %" PRId64, h->seq);
    FUZZ_CHECK(al_is_sha256_hex(h->hash), "hash %s", h->hash);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > AL_CHECKPOINT_MAX + 16)
        return 0;
    static al_checkpoint_key trusted;
    al_error err = { 0 };
    if (!trusted.name[0])
        FUZZ_CHECK(al_checkpoint_key_parse_verifier(TRUSTED, &trusted, &err) == 0, "the trusted key: %s", err.msg);
    char *buf = fuzz_copy(data, size, 0);
    al_audit_head h;
    int r = al_checkpoint_open(&trusted, buf, size, &h, &err);
    FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EPERM, "answer %d", r);
    if (r == 0) {
        n_opened++;
        check_head(&h);
        /* the signature covers every byte of the lines before the blank one */
        const char *split = NULL;
        for (const char *p = buf; (p = memmem(p, (size_t)(buf + size - p), "\n\n", 2)); p++)
            split = p;
        FUZZ_CHECK(split, "accepted without a blank line");
        for (size_t i = 0; i <= (size_t)(split - buf); i++) {
            buf[i] ^= 0x01;
            al_audit_head h2;
            FUZZ_CHECK(al_checkpoint_open(&trusted, buf, size, &h2, &err) < 0, "byte %zu changed, still accepted", i);
            buf[i] ^= 0x01;
        }
    }
    free(buf);

    char *s = fuzz_copy(data, size, 1);
    al_checkpoint_key k;
    if (al_checkpoint_key_parse_verifier(s, &k, &err) == 0) {
        n_keys++;
        char again[AL_CHECKPOINT_VERIFIER_MAX];
        al_checkpoint_key_verifier(&k, again);
        FUZZ_CHECK(strcmp(again, s) == 0, "verifier key %s written back as %s", s, again);
    }
    if (al_audit_head_parse(s, &h, &err) == 0) {
        n_heads++;
        check_head(&h);
        char again[200];
        snprintf(again, sizeof again, "%s:%" PRId64 ":%s", h.workspace_id, h.seq, h.hash);
        FUZZ_CHECK(strcmp(again, s) == 0, "head %s written back as %s", s, again);
    }
    free(s);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-checkpoint: %ld checkpoints, %ld verifier keys, %ld heads accepted\n", n_opened, n_keys, n_heads);
    return n_opened && n_keys && n_heads ? 0 : 1;
}
