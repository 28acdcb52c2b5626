/* Unit tests for E2B's paths onto a sandbox's two trees (core/sandbox.c,
 * al_sandbox_path): /home/user, /work and a relative path are home/,
 * /out is out/, and nothing else, no "..", no hostile name, no depth past
 * 15 gets through. */
#include "core/sandbox.h"

#include <string.h>

#include "check.h"

static bool maps(const char *path, al_sandbox_root want_root, const char *want_rel) {
    al_sandbox_root root = (al_sandbox_root)-1;
    char rel[1024];
    al_error err = { 0 };
    return al_sandbox_path(path, &root, rel, sizeof rel, &err) == 0 && root == want_root && strcmp(rel, want_rel) == 0;
}

static bool refused(const char *path, const char *why) {
    al_sandbox_root root;
    char rel[1024];
    al_error err = { 0 };
    return al_sandbox_path(path, &root, rel, sizeof rel, &err) == -EINVAL && strstr(err.msg, why) != NULL;
}

int main(void) {
    CHECK(maps("/home/user", AL_SANDBOX_HOME, ""));
    CHECK(maps("/home/user/", AL_SANDBOX_HOME, ""));
    CHECK(maps("/home/user/a/b.txt", AL_SANDBOX_HOME, "a/b.txt"));
    CHECK(maps("/work/a//./b.txt", AL_SANDBOX_HOME, "a/b.txt"));
    CHECK(maps("/work", AL_SANDBOX_HOME, ""));
    CHECK(maps("a/b", AL_SANDBOX_HOME, "a/b"));
    CHECK(maps(".", AL_SANDBOX_HOME, ""));
    CHECK(maps("out/x", AL_SANDBOX_HOME, "out/x"));
    CHECK(maps("/out", AL_SANDBOX_OUT, ""));
    CHECK(maps("/out/r/s.png", AL_SANDBOX_OUT, "r/s.png"));
    CHECK(maps("/home/user/caf\xc3\xa9 \\ x", AL_SANDBOX_HOME, "caf\xc3\xa9 \\ x"));

    const char *roots = "only /home/user (= /work) and /out are kept";
    CHECK(refused("/", roots));
    CHECK(refused("/etc/passwd", roots));
    CHECK(refused("/home", roots));
    CHECK(refused("/home/userx/a", roots));
    CHECK(refused("/home/other/a", roots));
    CHECK(refused("/tmp", roots));
    CHECK(refused("/outside", roots));
    CHECK(refused("", "required"));
    CHECK(refused(NULL, "required"));
    CHECK(refused("/home/user/../etc", "\"..\""));
    CHECK(refused("a/../../b", "\"..\""));
    CHECK(refused("/out/..", "\"..\""));
    CHECK(refused("/home/user/a\x01" "b", "control"));
    CHECK(refused("/out/\x1b[31mred", "control"));
    CHECK(refused("/home/user/\xe2\x80\xaetxt.exe", "bidirectional"));
    CHECK(refused("/home/user/\xff\xfe", "UTF-8"));
    char deep[256] = "/home/user";
    for (int i = 0; i < 16; i++)
        strcat(deep, "/d");
    CHECK(refused(deep, "deeper than 15"));
    deep[strlen(deep) - 2] = '\0';
    CHECK(maps(deep, AL_SANDBOX_HOME, "d/d/d/d/d/d/d/d/d/d/d/d/d/d/d"));
    char longname[300] = "/out/";
    memset(longname + 5, 'n', 256);
    CHECK(refused(longname, "255 bytes"));
    /* a path that does not fit the caller's buffer is refused, not cut */
    al_sandbox_root root;
    char small[8];
    al_error err = { 0 };
    CHECK(al_sandbox_path("/home/user/abcdefgh", &root, small, sizeof small, &err) == -EINVAL);

    fprintf(stderr, "sandbox-path: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
