/* Unit tests for what a sandbox's command becomes (api/e2b_run.c): its
 * environment merged and checked, and the bash that sets it, goes to its
 * directory and runs its command line. The quoting is checked by bash
 * itself: each hostile value, exported by the prelude, is printed back by
 * a real bash byte for byte, and nothing of it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/e2b_run.h"
#include "check.h"

/* SCRIPT run by /bin/bash -c; its stdout (malloc'd). */
static char *bash(const char *script) {
    int p[2];
    if (pipe(p) < 0)
        return NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl("/bin/bash", "bash", "--norc", "--noprofile", "-c", script, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char *out = calloc(1, 65536);
    size_t n = 0;
    ssize_t r;
    while (out && n < 65535 && (r = read(p[0], out + n, 65535 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    waitpid(pid, NULL, 0);
    return out;
}

static al_sandbox sandbox(json_t *env_vars) {
    al_sandbox sb = { .env_vars = env_vars };
    snprintf(sb.id, sizeof sb.id, "sbx_0123456789abcdefghij");
    snprintf(sb.template_id, sizeof sb.template_id, "base");
    return sb;
}

static void test_env(void) {
    char why[700];
    json_t *env = NULL;
    al_sandbox sb = sandbox(json_pack("{s:s, s:s}", "A", "sandbox", "B", "sandbox"));
    json_t *cmd = json_pack("{s:s, s:s}", "B", "command", "PATH", "/opt/bin:/usr/bin:/bin");
    CHECK(al_e2b_env(&sb, cmd, &env, why, sizeof why) == 0);
    CHECK(strcmp(json_string_value(json_object_get(env, "A")), "sandbox") == 0);
    CHECK(strcmp(json_string_value(json_object_get(env, "B")), "command") == 0);
    CHECK(strcmp(json_string_value(json_object_get(env, "HOME")), "/work") == 0);
    CHECK(strcmp(json_string_value(json_object_get(env, "E2B_SANDBOX_ID")), sb.id) == 0);
    json_decref(env);
    json_decref(cmd);
    /* refused: names that are none, the box's own, the loader's, values of another type or with NUL */
    const char *bad[] = { "{\"1A\":\"x\"}", "{\"A-B\":\"x\"}", "{\"\":\"x\"}", "{\"HOME\":\"/\"}",
                          "{\"E2B_SANDBOX_ID\":\"x\"}", "{\"AIRLOCK_NETWORK\":\"internet\"}", "{\"HTTPS_PROXY\":\"x\"}",
                          "{\"LD_PRELOAD\":\"/x.so\"}", "{\"BASH_ENV\":\"/x\"}", "{\"BASH_FUNC_ls%%\":\"x\"}",
                          "{\"A\":1}", "{\"A\":\"x\\u0000y\"}", "[]" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *e = json_loads(bad[i], JSON_ALLOW_NUL, NULL);
        env = NULL;
        why[0] = '\0';
        CHECK(e && al_e2b_env(&sb, e, &env, why, sizeof why) == -EINVAL && !env && why[0]);
        json_decref(e);
    }
    /* at most AL_E2B_ENVS_MAX together */
    json_t *many = json_object();
    for (int i = 0; i < AL_E2B_ENVS_MAX; i++) {
        char k[16];
        snprintf(k, sizeof k, "V%d", i);
        json_object_set_new(many, k, json_string("x"));
    }
    CHECK(al_e2b_env(&sb, many, &env, why, sizeof why) == -EINVAL && strstr(why, "at most"));
    json_decref(many);
    json_decref(sb.env_vars);
}

static void test_quoting(void) {
    static const char *const values[] = { "plain", "it's", "'", "''\\''", "$(touch /tmp/airlock-e2b-pwned)",
                                          "`id`", "a\nb\n", "; exit 7 #", "\"$HOME\"", "\\", "é ü 日本", "" };
    al_sandbox sb = sandbox(NULL);
    unlink("/tmp/airlock-e2b-pwned");
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char why[700];
        json_t *env = NULL, *cmd = json_pack("{s:s}", "V", values[i]);
        CHECK(al_e2b_env(&sb, cmd, &env, why, sizeof why) == 0);
        char *pre = al_e2b_bash_prelude(env, "/");
        char *script = NULL;
        CHECK(pre && asprintf(&script, "%sprintf '%%s|%%s' \"$V\" \"$PWD\"", pre) > 0);
        char *out = bash(script);
        char *want = NULL;
        CHECK(asprintf(&want, "%s|/", values[i]) > 0);
        CHECK(out && strcmp(out, want) == 0);
        if (out && strcmp(out, want) != 0)
            fprintf(stderr, "  value %zu: got [%s]\n", i, out);
        free(want);
        free(out);
        free(script);
        free(pre);
        json_decref(env);
        json_decref(cmd);
    }
    CHECK(access("/tmp/airlock-e2b-pwned", F_OK) != 0);
    /* a directory that is not there ends the command before it runs */
    json_t *env = json_object();
    char *pre = al_e2b_bash_prelude(env, "/no/such/dir'$(id)");
    char *script = NULL;
    CHECK(pre && asprintf(&script, "%secho ran", pre) > 0);
    char *out = bash(script);
    CHECK(out && strcmp(out, "") == 0);
    free(out);
    free(script);
    free(pre);
    json_decref(env);
}

static void test_command_line(void) {
    /* what commands.run sends: its command as it is */
    json_t *args = json_pack("[s, s, s]", "-l", "-c", "echo $HOME; ls");
    char *line = al_e2b_command_line("/bin/bash", args);
    CHECK(line && strcmp(line, "echo $HOME; ls") == 0);
    free(line);
    json_decref(args);
    /* any other: each word quoted, run as one command line */
    args = json_pack("[s, s, s, s]", "%s|", "a'b", "$(touch /tmp/airlock-e2b-pwned)", "x y");
    line = al_e2b_command_line("printf", args);
    char *out = line ? bash(line) : NULL;
    CHECK(out && strcmp(out, "a'b|$(touch /tmp/airlock-e2b-pwned)|x y|") == 0);
    CHECK(access("/tmp/airlock-e2b-pwned", F_OK) != 0);
    free(out);
    free(line);
    json_decref(args);
    /* an arg that is no string: refused */
    args = json_pack("[s, i]", "a", 1);
    CHECK(al_e2b_command_line("echo", args) == NULL);
    json_decref(args);
    /* the pid of a run: the same from the same id, above 1000 */
    CHECK(al_e2b_pid("run_abc") == al_e2b_pid("run_abc") && al_e2b_pid("run_abc") != al_e2b_pid("run_abd"));
    CHECK(al_e2b_pid("run_abc") >= 1000 && al_e2b_pid("") >= 1000);
}

int main(void) {
    test_env();
    test_quoting();
    test_command_line();
    printf("e2b-run: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
