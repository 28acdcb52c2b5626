/*
 * Fuzz target for the Connect framing of E2B's sandbox plane
 * (src/api/connect.c): the body of a streaming call such as
 * /process.Process/Start, all of which the client controls. Each input is
 * held to what the decoder promises: an object it can write back and read
 * again to the same, or a refusal that says why and holds nothing; and an
 * end-stream frame carrying the input as its message is one envelope of
 * valid JSON, whatever bytes the input held.
 */
#include <jansson.h>

#include "fuzz.h"
#include "api/connect.h"

static long n_ok, n_refused;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    json_t *m = NULL;
    const char *why = NULL;
    int r = al_connect_decode(buf, size, 4096, &m, &why);
    if (r == 0) {
        FUZZ_CHECK(json_is_object(m), "accepted a message that is no object");
        char *f = NULL;
        size_t n = 0;
        FUZZ_CHECK(al_connect_encode(0, m, &f, &n) == 0, "cannot write back what was read");
        json_t *back = NULL;
        /* (a message read within the cap may be written longer: escapes) */
        FUZZ_CHECK(al_connect_decode(f, n, n, &back, &why) == 0 && json_equal(back, m), "written back differs");
        json_decref(back);
        free(f);
        json_decref(m);
        n_ok++;
    } else {
        FUZZ_CHECK(!m && why && *why, "a refusal without its reason, or holding a message");
        FUZZ_CHECK(r == -EINVAL || r == -EPROTONOSUPPORT || r == -E2BIG, "refused with %d", r);
        n_refused++;
    }
    /* the input as the message of an error: the client reads one envelope of JSON */
    char *msg = malloc(size + 1);
    if (msg) {
        for (size_t i = 0; i < size; i++)
            msg[i] = buf[i] ? (char)buf[i] : ' ';
        msg[size] = '\0';
        al_utf8_fix(msg);
        char *f = NULL;
        size_t n = 0;
        if (al_connect_end_stream(AL_CONNECT_INTERNAL, msg, &f, &n) == 0) {
            uint32_t len = (uint32_t)((uint8_t)f[1] << 24 | (uint8_t)f[2] << 16 | (uint8_t)f[3] << 8 | (uint8_t)f[4]);
            json_t *d = json_loadb(f + 5, n - 5, 0, NULL);
            FUZZ_CHECK(f[0] == AL_CONNECT_FLAG_END_STREAM && len == n - 5 && json_is_object(d),
                       "an end-stream frame that is not one envelope of JSON");
            json_decref(d);
            free(f);
        }
        free(msg);
    }
    free(buf);
    return 0;
}

int fuzz_replay_check(void) {
    printf("fuzz-connect: %ld accepted, %ld refused\n", n_ok, n_refused);
    return n_ok && n_refused ? 0 : 1;
}
