/*
 * The job's wire form (src/drivers/job_codec.c): the one line a driver
 * writes on a helper's stdin, read by the helper. A service that is not
 * airlock's own may not write it, but the decoder is the only reader of a
 * document that reaches the box, so it is held to this: any bytes decode
 * to a job or to an error (never a crash, never a leak), and a job that
 * decodes encodes to a line that decodes to the same job (decode, encode,
 * decode: the two encodings identical, bytes for bytes).
 */
#include "fuzz.h"
#include "drivers/job.h"

static struct {
    unsigned decoded, refused, with_docker, with_args, warm;
} seen;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *in = fuzz_copy(data, size, 0);
    al_job a, b;
    al_error err = { 0 };
    int r = al_job_decode(in, size, &a, &err);
    free(in);
    if (r < 0) {
        FUZZ_CHECK(err.msg[0] && strcmp(err.step, "job") == 0, "a refusal without its reason (%d)", r);
        seen.refused++;
        al_job_free(&a);
        return 0;
    }
    seen.decoded++;
    seen.with_docker += a.driver == AL_JOB_DOCKER;
    seen.with_args += a.has_args;
    seen.warm += a.warm || a.zygote;
    char *t1 = NULL, *t2 = NULL;
    size_t n1 = 0, n2 = 0;
    memset(&err, 0, sizeof err);
    /* (what decodes is under AL_JOB_MAX, and encodes to no more than a
     * bounded growth of it: limits written out, escapes) */
    if (al_job_encode(&a, &t1, &n1, &err) < 0) {
        FUZZ_CHECK(err.err == E2BIG, "a decoded job that does not encode: %s", err.msg);
        al_job_free(&a);
        return 0;
    }
    FUZZ_CHECK(!memchr(t1, '\n', n1), "an encoded job holds a newline: %s", t1);
    memset(&err, 0, sizeof err);
    FUZZ_CHECK(al_job_decode(t1, n1, &b, &err) == 0, "an encoded job does not decode: %s (%s)", err.msg, t1);
    FUZZ_CHECK(al_job_encode(&b, &t2, &n2, &err) == 0, "a job decoded again does not encode: %s", err.msg);
    FUZZ_CHECK(n1 == n2 && memcmp(t1, t2, n1) == 0, "decode, encode, decode differ:\n%s\n%s", t1, t2);
    /* and a copy is the same job */
    al_job c;
    FUZZ_CHECK(al_job_copy(&b, &c) == 0, "a copy failed");
    char *t3 = NULL;
    size_t n3 = 0;
    FUZZ_CHECK(al_job_encode(&c, &t3, &n3, &err) == 0 && n3 == n1 && memcmp(t1, t3, n1) == 0, "a copy differs");
    free(t1);
    free(t2);
    free(t3);
    al_job_free(&a);
    al_job_free(&b);
    al_job_free(&c);
    return 0;
}

int fuzz_replay_check(void) {
    printf("job: %u decoded, %u refused; %u docker, %u with args, %u warm or zygote\n", seen.decoded, seen.refused,
           seen.with_docker, seen.with_args, seen.warm);
    return seen.decoded && seen.refused && seen.with_docker && seen.with_args && seen.warm ? 0 : 1;
}
