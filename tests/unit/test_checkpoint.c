/* Unit tests for the audit checkpoints' pure part (src/core/checkpoint.c):
 * the key file, the verifier key, and a signed note's round trip, against
 * every alteration of it and every other key. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checkpoint.h"

#include "check.h"

static const al_audit_head HEAD = {
    .workspace_id = "ws_abc", .seq = 42, .hash = "013aa101f2dceede7c1db654d3edd843ee000c53e875844d6175b880254cf825" };

static int open_note(const al_checkpoint_key *k, const char *text, al_audit_head *h) {
    al_error err = { 0 };
    return al_checkpoint_open(k, text, strlen(text), h, &err);
}

static void test_round_trip(const char *dir) {
    char path[512], other[512];
    snprintf(path, sizeof path, "%s/key", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    al_error err = { 0 };
    al_checkpoint_key k, again, o, v, w;
    CHECK(al_checkpoint_key_load(path, false, &k, &err) == -ENOENT);
    CHECK(al_checkpoint_key_load(path, true, &k, &err) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    /* a second load reads the same key; another path makes another */
    CHECK(al_checkpoint_key_load(path, true, &again, &err) == 0 && memcmp(again.pub, k.pub, 32) == 0);
    CHECK(al_checkpoint_key_load(other, true, &o, &err) == 0 && memcmp(o.pub, k.pub, 32) != 0);
    char vk[AL_CHECKPOINT_VERIFIER_MAX];
    al_checkpoint_key_verifier(&k, vk);
    CHECK(strncmp(vk, "airlock-audit+", 14) == 0);
    CHECK(al_checkpoint_key_parse_verifier(vk, &v, &err) == 0 && !v.has_private && memcmp(v.pub, k.pub, 32) == 0);
    char bad[AL_CHECKPOINT_VERIFIER_MAX];
    snprintf(bad, sizeof bad, "%s", vk);
    bad[15] = bad[15] == '0' ? '1' : '0'; /* the key id no longer the key's */
    CHECK(al_checkpoint_key_parse_verifier(bad, &w, &err) == -EINVAL);
    CHECK(al_checkpoint_key_parse_verifier("airlock-audit", &w, &err) == -EINVAL);

    char *note = NULL;
    CHECK(al_checkpoint_sign(&k, &HEAD, &note, &err) == 0 && note);
    CHECK(strncmp(note, "airlock/audit/ws_abc\n42\nATqhAfLc7t58HbZU0+3YQ+4ADFPodYRNYXW4gCVM+CU=\n\n\xe2\x80\x94 airlock-audit ",
                  74) == 0);
    al_audit_head h;
    CHECK(open_note(&k, note, &h) == 0 && h.seq == 42 && strcmp(h.hash, HEAD.hash) == 0 &&
          strcmp(h.workspace_id, "ws_abc") == 0);
    CHECK(open_note(&v, note, &h) == 0);            /* the public half alone verifies */
    CHECK(open_note(&o, note, &h) == -EPERM);       /* another key does not */
    /* a note signed by another key, under this key's name */
    char *forged = NULL;
    CHECK(al_checkpoint_sign(&o, &HEAD, &forged, &err) == 0);
    CHECK(open_note(&k, forged, &h) == -EPERM);
    free(forged);
    /* every byte of the body changed: refused */
    size_t body = strstr(note, "\n\n") - note + 1;
    for (size_t i = 0; i < body; i++) {
        char *t = strdup(note);
        t[i] = t[i] == 'A' ? 'B' : 'A';
        CHECK(open_note(&k, t, &h) < 0);
        free(t);
    }
    /* a signature cut, and a note with no signature */
    char *t = strdup(note);
    t[strlen(t) - 5] = '\n';
    t[strlen(t) - 4] = '\0';
    CHECK(open_note(&k, t, &h) < 0);
    t[body + 1] = '\0';
    CHECK(open_note(&k, t, &h) < 0);
    free(t);
    free(note);
    /* a key open to others is refused */
    CHECK(chmod(path, 0644) == 0 && al_checkpoint_key_load(path, false, &again, &err) == -EPERM);
    unlink(path);
    unlink(other);
}

static void test_heads(void) {
    al_error err = { 0 };
    al_audit_head h;
    CHECK(al_audit_head_parse("ws_a:7:013aa101f2dceede7c1db654d3edd843ee000c53e875844d6175b880254cf825", &h, &err) == 0 &&
          h.seq == 7 && strcmp(h.workspace_id, "ws_a") == 0);
    CHECK(al_audit_head_parse("ws_a:0:013aa101f2dceede7c1db654d3edd843ee000c53e875844d6175b880254cf825", &h, &err) < 0);
    CHECK(al_audit_head_parse("ws_a:7:013AA101f2dceede7c1db654d3edd843ee000c53e875844d6175b880254cf825", &h, &err) < 0);
    CHECK(al_audit_head_parse(":7:013aa101f2dceede7c1db654d3edd843ee000c53e875844d6175b880254cf825", &h, &err) < 0);
    CHECK(al_audit_head_parse("ws_a:7", &h, &err) < 0);
}

int main(void) {
    char dir[] = "/tmp/airlock-checkpoint-XXXXXX";
    if (!mkdtemp(dir))
        return 2;
    test_round_trip(dir);
    test_heads();
    rmdir(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
