/* Unit tests for the session box's channel, the service's side
 * (core/sandbox_session.c): a request is written whole, and what the box
 * writes (its log, its end) is read beneath the channel, by exact name,
 * never through a link or from a FIFO, within its caps, and refused when
 * it is not what the agent writes. */
#include "core/sandbox_session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[] = "/tmp/airlock-session-test-XXXXXX";
static int chan = -1;

static void put(const char *rel, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

typedef struct seen { char text[4096]; int n; } seen;

static int take(void *ud, const al_helper_event *ev) {
    seen *s = ud;
    size_t at = strlen(s->text);
    snprintf(s->text + at, sizeof s->text - at, "%s:%.*s|", ev->kind == AL_HELPER_EVENT_STDOUT ? "o" : "e",
             (int)ev->len, ev->data);
    s->n++;
    return 0;
}

static int follow(const char *call, uint64_t *off, seen *s, al_error *err) {
    *err = (al_error){ 0 };
    return al_session_follow(chan, call, off, take, s, err);
}

static void test_submit(void) {
    al_error err = { 0 };
    json_t *req = json_pack("{s:s, s:s}", "kind", "bash", "code", "echo hi");
    CHECK(al_session_submit(chan, "run_1", req, &err) == 0);
    char p[256];
    snprintf(p, sizeof p, "%s/req/run_1.json", dir);
    json_t *back = json_load_file(p, 0, NULL);
    CHECK(back && json_equal(back, req));
    CHECK(al_session_submit(chan, "run_1", req, &err) == -EEXIST);
    CHECK(al_session_submit(chan, "../x", req, &err) == -EINVAL);
    CHECK(al_session_submit(chan, "", req, &err) == -EINVAL);
    snprintf(p, sizeof p, "%s/req/.run_1.tmp", dir);
    CHECK(access(p, F_OK) < 0);   /* nothing left aside */
    json_decref(back);
    json_decref(req);
}

static void test_follow(void) {
    al_error err;
    seen s = { 0 };
    uint64_t off = 0;
    CHECK(follow("run_2", &off, &s, &err) == 0 && s.n == 0 && off == 0);   /* not there yet */
    /* "hi\n" and "oops" in base64; a third line still partial */
    put("out/run_2.log", "{\"type\":\"stdout\",\"data_base64\":\"aGkK\"}\n"
                         "{\"type\":\"stderr\",\"data_base64\":\"b29wcw==\"}\n{\"type\":\"std");
    CHECK(follow("run_2", &off, &s, &err) == 0 && s.n == 2 && strcmp(s.text, "o:hi\n|e:oops|") == 0);
    CHECK(off == 82);
    char p[256];
    snprintf(p, sizeof p, "%s/out/run_2.log", dir);
    FILE *f = fopen(p, "a");
    fputs("out\",\"data_base64\":\"eA==\"}\n", f);
    fclose(f);
    CHECK(follow("run_2", &off, &s, &err) == 0 && s.n == 3 && strstr(s.text, "|o:x|"));

    /* what the agent never writes is refused, said */
    seen t = { 0 };
    off = 0;
    put("out/run_3.log", "{\"type\":\"result\",\"result\":{}}\n");
    CHECK(follow("run_3", &off, &t, &err) == -EBADMSG && strstr(err.msg, "not an output event") && t.n == 0);
    put("out/run_3.log", "not json\n");
    CHECK(follow("run_3", &off, &t, &err) == -EBADMSG);
    char *big = malloc(AL_SESSION_LINE_MAX + 64);
    memset(big, 'a', AL_SESSION_LINE_MAX + 63);
    big[AL_SESSION_LINE_MAX + 63] = '\0';
    put("out/run_3.log", big);   /* no newline: too long to ever be a line */
    CHECK(follow("run_3", &off, &t, &err) == -EBADMSG && strstr(err.msg, "over"));
    free(big);

    /* a link (to a file the service could read) and a FIFO: refused, no wait */
    put("secret", "{\"type\":\"stdout\",\"data_base64\":\"c2VjcmV0\"}\n");
    snprintf(p, sizeof p, "%s/out/run_4.log", dir);
    CHECK(symlink("../secret", p) == 0);
    CHECK(follow("run_4", &off, &t, &err) == -ELOOP && t.n == 0);
    snprintf(p, sizeof p, "%s/out/run_5.log", dir);
    CHECK(mkfifo(p, 0600) == 0);
    CHECK(follow("run_5", &off, &t, &err) == -EINVAL && strstr(err.msg, "not a regular file"));
    snprintf(p, sizeof p, "%s/out/run_6.log", dir);
    CHECK(mkdir(p, 0700) == 0);
    CHECK(follow("run_6", &off, &t, &err) == -EINVAL);
    CHECK(follow("../secret", &off, &t, &err) == -EINVAL);
    CHECK(t.n == 0);
}

static void test_end(void) {
    al_error err = { 0 };
    al_session_end end;
    CHECK(al_session_end_read(chan, "run_7", &end, &err) == 0);
    put("out/run_7.end", "{\"exit\": 3, \"timed_out\": false}");
    CHECK(al_session_end_read(chan, "run_7", &end, &err) == 1 && end.exit_code == 3 && !end.timed_out &&
          end.error[0] == '\0');
    put("out/run_7.end", "{\"exit\": -1, \"timed_out\": true, \"error\": \"killed\"}");
    CHECK(al_session_end_read(chan, "run_7", &end, &err) == 1 && end.exit_code == -1 && end.timed_out &&
          strcmp(end.error, "killed") == 0);
    const char *bad[] = { "{\"exit\": 3}", "{\"exit\": \"3\", \"timed_out\": false}",
                          "{\"exit\": 300, \"timed_out\": false}", "{\"exit\": 0, \"timed_out\": false, \"x\": 1}",
                          "[]", "" };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        put("out/run_7.end", bad[i]);
        CHECK(al_session_end_read(chan, "run_7", &end, &err) == -EBADMSG);
    }
    char *big = malloc(AL_SESSION_END_MAX + 100);
    snprintf(big, AL_SESSION_END_MAX + 100, "{\"exit\": 0, \"timed_out\": false, \"error\": \"%0*d\"}",
             AL_SESSION_END_MAX, 0);
    put("out/run_7.end", big);
    err = (al_error){ 0 };   /* al_err keeps the first failure's words */
    CHECK(al_session_end_read(chan, "run_7", &end, &err) == -EBADMSG && strstr(err.msg, "over"));
    free(big);
    char p[256];
    snprintf(p, sizeof p, "%s/out/run_8.end", dir);
    put("ok.end", "{\"exit\": 0, \"timed_out\": false}");
    CHECK(symlink("../ok.end", p) == 0);
    CHECK(al_session_end_read(chan, "run_8", &end, &err) == -ELOOP);
}

static int feed(al_session_relay *r, const char *text, al_error *err) {
    *err = (al_error){ 0 };
    return al_session_relay_feed(r, text, strlen(text), err);
}

/* The agent's stdout relayed into out/: a call's lines whatever their
 * chunking, read back by al_session_follow; its end once; nothing for a
 * call never submitted, no line that is not the agent's, nothing through
 * a link. */
static void test_relay(void) {
    al_error err = { 0 };
    json_t *req = json_pack("{s:s}", "kind", "bash");
    CHECK(al_session_submit(chan, "run_r1", req, &err) == 0);
    CHECK(al_session_submit(chan, "run_r2", req, &err) == 0);
    al_session_relay r;
    al_session_relay_init(&r, chan);
    /* "hi" in base64 is aGk=, "yo" eW8= */
    const char *a = "{\"call\":\"run_r1\",\"type\":\"stdout\",\"data_base64\":\"aGk=\"}\n{\"call\":\"run_r2\",\"ty";
    const char *b = "pe\":\"stderr\",\"data_base64\":\"eW8=\"}\n";
    CHECK(feed(&r, a, &err) == 0);
    CHECK(feed(&r, b, &err) == 0);
    CHECK(feed(&r, "{\"call\":\"run_r1\",\"end\":{\"exit\":2,\"timed_out\":false}}\n", &err) == 0);
    seen s = { 0 };
    uint64_t off = 0;
    CHECK(follow("run_r1", &off, &s, &err) == 0 && strcmp(s.text, "o:hi|") == 0);
    seen s2 = { 0 };
    off = 0;
    CHECK(follow("run_r2", &off, &s2, &err) == 0 && strcmp(s2.text, "e:yo|") == 0);
    al_session_end end;
    CHECK(al_session_end_read(chan, "run_r1", &end, &err) == 1 && end.exit_code == 2);
    CHECK(al_session_end_read(chan, "run_r2", &end, &err) == 0);
    /* an end written once */
    CHECK(feed(&r, "{\"call\":\"run_r1\",\"end\":{\"exit\":0,\"timed_out\":false}}\n", &err) == -EBADMSG &&
          strstr(err.msg, "twice"));
    /* each of these ends the relay */
    const char *bad[] = {
        "{\"call\":\"../x\",\"type\":\"stdout\",\"data_base64\":\"aGk=\"}\n",        /* not a call id */
        "{\"call\":\"run_r2\",\"type\":\"exit\",\"data_base64\":\"aGk=\"}\n",        /* not an output */
        "{\"call\":\"run_r2\",\"type\":\"stdout\",\"data_base64\":\"aGk=\",\"x\":1}\n",
        "{\"call\":\"run_r2\",\"end\":{\"exit\":999,\"timed_out\":false}}\n",
        "not json\n", "\n", "[]\n",
    };
    for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
        al_session_relay_clear(&r);
        CHECK(feed(&r, bad[i], &err) == -EBADMSG);
    }
    /* a call never submitted (or forgotten): dropped, nothing written */
    al_session_relay_clear(&r);
    CHECK(feed(&r, "{\"call\":\"run_zz\",\"type\":\"stdout\",\"data_base64\":\"aGk=\"}\n", &err) == 0);
    char p[256];
    snprintf(p, sizeof p, "%s/out/run_zz.log", dir);
    CHECK(access(p, F_OK) < 0);
    /* forgotten: its files gone, its later lines dropped */
    al_session_forget(chan, "run_r2");
    snprintf(p, sizeof p, "%s/out/run_r2.log", dir);
    CHECK(access(p, F_OK) < 0);
    CHECK(feed(&r, "{\"call\":\"run_r2\",\"end\":{\"exit\":0,\"timed_out\":false}}\n", &err) == 0);
    snprintf(p, sizeof p, "%s/out/run_r2.end", dir);
    CHECK(access(p, F_OK) < 0);
    /* a line past the cap, however chunked */
    al_session_relay_clear(&r);
    char *big = malloc(AL_SESSION_LINE_MAX + 2);
    memset(big, 'a', AL_SESSION_LINE_MAX + 1);
    big[AL_SESSION_LINE_MAX + 1] = '\0';
    CHECK(feed(&r, big + 10, &err) == 0);
    CHECK(feed(&r, big + AL_SESSION_LINE_MAX - 9, &err) == -EBADMSG && strstr(err.msg, "over"));
    free(big);
    /* a link where the log goes: refused, nothing written through it */
    al_session_relay_clear(&r);
    CHECK(al_session_submit(chan, "run_r3", req, &err) == 0);
    put("victim", "");
    snprintf(p, sizeof p, "%s/out/run_r3.log", dir);
    CHECK(symlink("../victim", p) == 0);
    CHECK(feed(&r, "{\"call\":\"run_r3\",\"type\":\"stdout\",\"data_base64\":\"aGk=\"}\n", &err) == -ELOOP);
    struct stat st;
    snprintf(p, sizeof p, "%s/victim", dir);
    CHECK(stat(p, &st) == 0 && st.st_size == 0);
    al_session_relay_clear(&r);
    json_decref(req);
}

int main(void) {
    if (!mkdtemp(dir))
        return 1;
    char p[256];
    snprintf(p, sizeof p, "%s/req", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/out", dir);
    mkdir(p, 0755);
    chan = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    test_submit();
    test_follow();
    test_end();
    test_relay();
    close(chan);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf -- '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
