/* The Connect framing (api/connect.c) against hostile request bodies: a
 * short header, a length that lies either way, flags, compression, a body
 * past the cap, JSON that is no object, two envelopes; and what it
 * writes read back byte for byte. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/connect.h"
#include "check.h"

/* An envelope of FLAGS, claiming length CLAIM, holding TEXT. */
static size_t frame(unsigned char *b, unsigned flags, uint32_t claim, const char *text) {
    b[0] = (unsigned char)flags;
    b[1] = (unsigned char)(claim >> 24);
    b[2] = (unsigned char)(claim >> 16);
    b[3] = (unsigned char)(claim >> 8);
    b[4] = (unsigned char)claim;
    memcpy(b + 5, text, strlen(text));
    return 5 + strlen(text);
}

static int decode(const unsigned char *b, size_t n, size_t max, json_t **ret) {
    const char *why = NULL;
    int r = al_connect_decode(b, n, max, ret, &why);
    CHECK(r == 0 || (why && *why && !*ret));
    return r;
}

static void test_decode(void) {
    unsigned char b[256];
    json_t *m = NULL;
    const char *ok = "{\"process\":{\"cmd\":\"/bin/bash\"},\"stdin\":false}";
    size_t n = frame(b, 0, (uint32_t)strlen(ok), ok);
    CHECK(decode(b, n, 1024, &m) == 0);
    CHECK(json_is_object(m) && strcmp(json_string_value(json_object_get(json_object_get(m, "process"), "cmd")),
                                      "/bin/bash") == 0);
    json_decref(m);
    /* shorter than a header; empty; NULL */
    CHECK(decode(b, 4, 1024, &m) == -EINVAL);
    CHECK(decode(b, 0, 1024, &m) == -EINVAL);
    CHECK(decode(NULL, 10, 1024, &m) == -EINVAL);
    /* a length longer, or shorter, than what follows */
    n = frame(b, 0, (uint32_t)strlen(ok) + 1, ok);
    CHECK(decode(b, n, 1024, &m) == -EINVAL);
    n = frame(b, 0, (uint32_t)strlen(ok) - 1, ok);
    CHECK(decode(b, n, 1024, &m) == -EINVAL);
    /* a length of 4 GiB claimed, past the cap before anything is read */
    n = frame(b, 0, 0xffffffffu, ok);
    CHECK(decode(b, n, 1024, &m) == -E2BIG);
    /* past the cap, honestly */
    n = frame(b, 0, (uint32_t)strlen(ok), ok);
    CHECK(decode(b, n, 10, &m) == -E2BIG);
    /* compressed, an end-stream flag, a flag nobody defined */
    n = frame(b, AL_CONNECT_FLAG_COMPRESSED, (uint32_t)strlen(ok), ok);
    CHECK(decode(b, n, 1024, &m) == -EPROTONOSUPPORT);
    n = frame(b, AL_CONNECT_FLAG_END_STREAM, (uint32_t)strlen(ok), ok);
    CHECK(decode(b, n, 1024, &m) == -EINVAL);
    n = frame(b, 0x80, (uint32_t)strlen(ok), ok);
    CHECK(decode(b, n, 1024, &m) == -EINVAL);
    /* JSON that is no object, no JSON, a NUL inside, duplicate keys */
    const char *bad[] = { "[1,2]", "\"x\"", "{", "", "{\"a\":1}x", "{\"a\":1,\"a\":2}" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = frame(b, 0, (uint32_t)strlen(bad[i]), bad[i]);
        CHECK(decode(b, n, 1024, &m) == -EINVAL);
    }
    unsigned char nul[16] = { 0, 0, 0, 0, 4, '{', 0, '}', ' ' };
    CHECK(decode(nul, 9, 1024, &m) == -EINVAL);
    /* two envelopes back to back: a server-streaming request has one */
    n = frame(b, 0, 2, "{}");
    n += frame(b + n, 0, 2, "{}");
    CHECK(decode(b, n, 1024, &m) == -EINVAL);
}

static void test_encode(void) {
    char *f = NULL;
    size_t n = 0;
    json_t *msg = json_pack("{s:{s:{s:i}}}", "event", "start", "pid", 7);
    CHECK(al_connect_encode(0, msg, &f, &n) == 0);
    const char *want = "{\"event\":{\"start\":{\"pid\":7}}}";
    CHECK(n == 5 + strlen(want) && f[0] == 0 && f[4] == (char)strlen(want) && memcmp(f + 5, want, strlen(want)) == 0);
    /* what it writes, it reads */
    json_t *back = NULL;
    const char *why;
    CHECK(al_connect_decode(f, n, 1024, &back, &why) == 0 && json_equal(back, msg));
    json_decref(back);
    json_decref(msg);
    free(f);
    CHECK(al_connect_end_stream(-1, NULL, &f, &n) == 0);
    CHECK(n == 7 && f[0] == AL_CONNECT_FLAG_END_STREAM && memcmp(f + 5, "{}", 2) == 0);
    free(f);
    CHECK(al_connect_end_stream(AL_CONNECT_DEADLINE_EXCEEDED, "the command ran past \"timeoutMs\"", &f, &n) == 0);
    const char *e = "{\"error\":{\"code\":\"deadline_exceeded\",\"message\":\"the command ran past \\\"timeoutMs\\\"\"}}";
    CHECK(f[0] == AL_CONNECT_FLAG_END_STREAM && n == 5 + strlen(e) && memcmp(f + 5, e, strlen(e)) == 0);
    free(f);
    CHECK(strcmp(al_connect_code_name(AL_CONNECT_NOT_FOUND), "not_found") == 0);
    CHECK(al_connect_code_http(AL_CONNECT_NOT_FOUND) == 404 && al_connect_code_http(AL_CONNECT_UNIMPLEMENTED) == 501);
    CHECK(strcmp(al_connect_code_name((al_connect_code)99), "unknown") == 0 && al_connect_code_http((al_connect_code)-3) == 500);
}

int main(void) {
    test_decode();
    test_encode();
    printf("connect: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
