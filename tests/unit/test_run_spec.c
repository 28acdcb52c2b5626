/* Unit tests for the pure core of a run: the run spec's check (each
 * refusal, its code and message, the bounds and the defaults), its
 * canonical hash (what an approval binds), its record in the store read
 * back, and the run state machine (src/core/run_spec.c, src/api/run_body.c,
 * al_run_transition_ok in src/store/runs.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/run_body.h"
#include "core/run_spec.h"
#include "store/runs.h"
#include "util/hash.h"

#include "check.h"

static const al_run_bounds bounds = {
    .code_max = 64,
    .files_max = 3,
    .limit = {
        [AL_LIMIT_TIMEOUT_S] = { 30, 1, 300 },
        [AL_LIMIT_MEMORY_MB] = { 512, 16, 4096 },
        [AL_LIMIT_CPUS] = { 1, 0.01, 4 },
        /* a default above its maximum is cut to the maximum */
        [AL_LIMIT_PIDS] = { 256, 8, 128 },
    },
};

/* The answer to the body TEXT: read (REST's reader) and checked. */
typedef struct answer {
    al_status st;
    char msg[600];
    const char *code;
} answer;

static answer check_text(const char *text, al_run_spec *ret) {
    answer a = { 0 };
    json_error_t jerr;
    json_t *body = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!body) {
        fprintf(stderr, "test body does not parse: %s: %s\n", text, jerr.text);
        a.st = _AL_STATUS_MAX;
        return a;
    }
    al_run_spec sp;
    a.st = al_run_body_parse(body, &sp, a.msg, sizeof a.msg, &a.code);
    if (a.st == AL_STATUS_OK)
        a.st = al_run_spec_check(&sp, &bounds, a.msg, sizeof a.msg, &a.code);
    json_decref(body);
    if (ret)
        *ret = sp;
    else
        al_run_spec_free(&sp);
    return a;
}

/* The body {"language": "python", "code": "print(1)", EXTRA}. */
static answer check_with(const char *extra) {
    char text[8192];
    snprintf(text, sizeof text, "{\"language\": \"python\", \"code\": \"print(1)\"%s%s}", extra[0] ? ", " : "", extra);
    return check_text(text, NULL);
}

/* A 400 whose message starts with PREFIX */
static bool refused(answer a, const char *prefix) {
    bool ok = a.st == AL_STATUS_INVALID && a.code && strcmp(a.code, "bad_request") == 0 &&
              strncmp(a.msg, prefix, strlen(prefix)) == 0;
    if (!ok)
        fprintf(stderr, "  want a 400 \"%s...\", got %u %s \"%s\"\n", prefix, (unsigned)a.st, a.code ? a.code : "-",
                a.msg);
    return ok;
}

static bool accepted(answer a) {
    if (a.st != AL_STATUS_OK)
        fprintf(stderr, "  want it accepted, got %u %s \"%s\"\n", (unsigned)a.st, a.code ? a.code : "-", a.msg);
    return a.st == AL_STATUS_OK && a.code == NULL && a.msg[0] == '\0';
}

/* ------------------------------------------------------------ validation */

static void test_refusals(void) {
    CHECK(refused(check_text("[1, 2]", NULL), "the body must be a JSON object"));
    CHECK(accepted(check_with("")));
    /* args */
    CHECK(accepted(check_with("\"args\": []")));
    CHECK(accepted(check_with("\"args\": [\"a\", \"\"]")));
    CHECK(refused(check_with("\"args\": \"a\""), "args must be at most 256 strings of at most 4096 bytes, without NUL"));
    CHECK(refused(check_with("\"args\": [1]"), "args must be"));
    CHECK(refused(check_with("\"args\": [\"a\\u0000b\"]"), "args must be"));
    {
        char many[4096] = "\"args\": [";
        for (int i = 0; i < 257; i++)
            strcat(many, i ? ",\"\"" : "\"\"");
        strcat(many, "]");
        CHECK(refused(check_with(many), "args must be"));
        many[strlen(many) - 4] = ']'; /* 256 */
        many[strlen(many) - 3] = '\0';
        CHECK(accepted(check_with(many)));
    }
    {
        char *big = malloc(4200);
        strcpy(big, "\"args\": [\"");
        memset(big + 10, 'x', 4097);
        strcpy(big + 10 + 4097, "\"]");
        CHECK(refused(check_with(big), "args must be"));
        strcpy(big + 10 + 4096, "\"]");
        CHECK(accepted(check_with(big)));
        free(big);
    }
    /* stdin */
    CHECK(refused(check_with("\"stdin\": 5"), "stdin must be a string of at most 1 MiB"));
    CHECK(accepted(check_with("\"stdin\": \"\"")));
    /* image: its shape only; the core resolves it */
    CHECK(refused(check_with("\"image\": 5"), "image: want an alias or sha256 digest"));
    CHECK(refused(check_with("\"image\": \"a\\u0000b\""), "image: want an alias"));
    CHECK(accepted(check_with("\"image\": \"whatever\"")));
    /* language */
    CHECK(refused(check_text("{\"code\": \"1\"}", NULL), "language must be one of python, node, bash"));
    CHECK(refused(check_text("{\"language\": \"cobol\", \"code\": \"1\"}", NULL), "language must be one of"));
    CHECK(refused(check_text("{\"language\": [\"python\"], \"code\": \"1\"}", NULL), "language must be one of"));
    CHECK(refused(check_text("{\"language\": \"python\\u0000\", \"code\": \"1\"}", NULL), "language must be one of"));
    CHECK(refused(check_text("{\"language\": \"Python\", \"code\": \"1\"}", NULL), "language must be one of"));
    CHECK(accepted(check_text("{\"language\": \"node\", \"code\": \"1\"}", NULL)));
    CHECK(accepted(check_text("{\"language\": \"bash\", \"code\": \"1\"}", NULL)));
    /* code: present, not empty, within code_max (413 past it), no NUL */
    CHECK(refused(check_text("{\"language\": \"python\"}", NULL), "code must be a non-empty string"));
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": \"\"}", NULL), "code must be a non-empty string"));
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": 1}", NULL), "code must be a non-empty string"));
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": \"a\\u0000b\"}", NULL),
                  "code must be at most 64 bytes, without NUL"));
    {
        char text[256];
        snprintf(text, sizeof text, "{\"language\": \"python\", \"code\": \"%065d\"}", 0);
        answer a = check_text(text, NULL);
        CHECK(a.st == AL_STATUS_TOO_LARGE && strcmp(a.code, "payload_too_large") == 0 &&
              strcmp(a.msg, "code must be at most 64 bytes, without NUL") == 0);
        snprintf(text, sizeof text, "{\"language\": \"python\", \"code\": \"%064d\"}", 0);
        CHECK(accepted(check_text(text, NULL)));
    }
    /* thread_id */
    char t65[80], t64[80];
    memset(t65, 'x', 65);
    t65[65] = '\0';
    snprintf(t64, sizeof t64, "%.64s", t65);
    const char *const bad_threads[] = { "\"\"", "\"a b\"", "\"../x\"", "\".\"", "\"..\"", "5", "\"a/b\"",
                                        "\"a\\u0000\"", t65 };
    for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, bad_threads[i] == t65 ? "\"thread_id\": \"%s\"" : "\"thread_id\": %s",
                 bad_threads[i]);
        CHECK(refused(check_with(extra), "thread_id must be 1-64 characters of A-Z a-z 0-9 . _ -"));
    }
    CHECK(accepted(check_with("\"thread_id\": \"t-1.a_B\"")));
    {
        char extra[128];
        snprintf(extra, sizeof extra, "\"thread_id\": \"%s\"", t64);
        CHECK(accepted(check_with(extra)));
    }
    /* network: the policy's syntax, with its own error */
    CHECK(refused(check_with("\"network\": 1"), "network must be a policy string"));
    CHECK(refused(check_with("\"network\": \"online\""), "network: "));
    CHECK(accepted(check_with("\"network\": \"hosts:a.example\"")));
    /* description */
    CHECK(refused(check_with("\"description\": {\"a\": 1}"), "description must be a string of at most 4096 bytes"));
    {
        char *d = malloc(4200);
        strcpy(d, "\"description\": \"");
        memset(d + 16, 'd', 4097);
        strcpy(d + 16 + 4097, "\"");
        CHECK(refused(check_with(d), "description must be"));
        strcpy(d + 16 + 4096, "\"");
        CHECK(accepted(check_with(d)));
        free(d);
    }
    /* files */
    CHECK(refused(check_with("\"files\": \"a.txt\""), "files must be an array"));
    CHECK(refused(check_with("\"files\": [{\"name\":\"a\",\"content_base64\":\"\"},{\"name\":\"b\",\"content_base64\":\"\"},"
                             "{\"name\":\"c\",\"content_base64\":\"\"},{\"name\":\"d\",\"content_base64\":\"\"}]"),
                  "files must be an array of at most 3 entries"));
    CHECK(refused(check_with("\"files\": [5]"), "files[0].name must be a plain file name"));
    CHECK(refused(check_with("\"files\": [{\"content_base64\": \"eA==\"}]"), "files[0].name must be"));
    CHECK(refused(check_with("\"files\": [{\"name\": \"a\", \"content_base64\": \"!!\"}]"),
                  "files[0].content_base64 is not valid base64"));
    CHECK(refused(check_with("\"files\": [{\"name\": \"a\"}]"), "files[0].content_base64 is not valid base64"));
    CHECK(refused(check_with("\"files\": [{\"name\": \"a\", \"content_base64\": \"eA\\u0000==\"}]"),
                  "files[0].content_base64 is not valid base64"));
    static const char *const bad_names[] = { "", "a/b", "/etc/passwd", ".", "..", "main.py", "main.js", "main.sh",
                                             "documents", "a\\u0000b" };
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, "\"files\": [{\"name\": \"ok\", \"content_base64\": \"\"}, "
                                      "{\"name\": \"%s\", \"content_base64\": \"eA==\"}]", bad_names[i]);
        CHECK(refused(check_with(extra), "files[1].name must be a plain file name (no /, not . or .., not main.py, "
                                         "main.js, main.sh or documents)"));
    }
    {
        char extra[400] = "\"files\": [{\"name\": \"";
        memset(extra + strlen(extra), 'n', 256);
        strcat(extra, "\", \"content_base64\": \"\"}]");
        CHECK(refused(check_with(extra), "files[0].name must be"));
    }
    CHECK(refused(check_with("\"files\": [{\"name\": \"a\", \"content_base64\": \"\"}, "
                             "{\"name\": \"a\", \"content_base64\": \"eA==\"}]"),
                  "two files are named \"a\""));
    /* artifacts: at most 100 ids; one that is no string is looked up as no id */
    CHECK(refused(check_with("\"artifacts\": \"art_x\""), "artifacts must be an array of at most 100 artifact ids"));
    {
        char many[2048] = "\"artifacts\": [";
        for (int i = 0; i < 101; i++)
            strcat(many, i ? ",\"a\"" : "\"a\"");
        strcat(many, "]");
        CHECK(refused(check_with(many), "artifacts must be"));
    }
    al_run_spec sp;
    CHECK(accepted(check_text("{\"language\": \"python\", \"code\": \"1\", \"artifacts\": [\"art_a\", 5]}", &sp)));
    CHECK(sp.n_artifacts == 2 && strcmp(sp.artifacts[0].s, "art_a") == 0 && sp.artifacts[1].s == NULL);
    al_run_spec_free(&sp);
    /* limits */
    CHECK(refused(check_with("\"limits\": 5"), "limits must be an object"));
    CHECK(refused(check_with("\"limits\": {\"walltime\": 5}"),
                  "unknown field \"walltime\" in limits (it takes: timeout_s, memory_mb, cpus, pids)"));
    CHECK(refused(check_with("\"limits\": {\"timeout_s\": \"abc\"}"), "limits.timeout_s must be a number from 1 to 300"));
    CHECK(refused(check_with("\"limits\": {\"timeout_s\": 0.5}"), "limits.timeout_s must be a number from 1 to 300"));
    CHECK(refused(check_with("\"limits\": {\"timeout_s\": 301}"), "limits.timeout_s must be"));
    CHECK(refused(check_with("\"limits\": {\"memory_mb\": 15}"), "limits.memory_mb must be a number from 16 to 4096"));
    CHECK(refused(check_with("\"limits\": {\"cpus\": 0.001}"), "limits.cpus must be a number from 0.01 to 4"));
    CHECK(refused(check_with("\"limits\": {\"pids\": 129}"), "limits.pids must be a number from 8 to 128"));
    CHECK(accepted(check_with("\"limits\": {\"timeout_s\": 1, \"memory_mb\": 4096, \"cpus\": 0.01, \"pids\": 128}")));
    CHECK(accepted(check_with("\"limits\": {\"timeout_s\": null}")));
}

static void test_order_and_defaults(void) {
    /* among several faults, the first in the check's order is named */
    CHECK(refused(check_text("{\"language\": \"cobol\", \"code\": \"\", \"args\": [\"a\\u0000\"]}", NULL), "args"));
    CHECK(refused(check_text("{\"language\": \"cobol\", \"code\": \"\", \"thread_id\": \"a b\"}", NULL), "language"));
    CHECK(refused(check_with("\"thread_id\": \"a b\", \"network\": \"online\""), "thread_id"));
    CHECK(refused(check_with("\"limits\": {\"pids\": 1}, \"files\": [{\"name\": \"main.py\", \"content_base64\": \"\"}]"),
                  "limits.pids"));
    /* a body refused as it is read holds nothing */
    al_run_spec sp;
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": \"1\", \"files\": [{\"name\": \"a\", "
                             "\"content_base64\": \"eA==\"}], \"limits\": 5}",
                             &sp),
                  "limits must be an object"));
    CHECK(sp.code.s == NULL && sp.files == NULL && sp.n_files == 0);
    /* the defaults, a default above its maximum cut to it, and the limits
     * as a run is recorded with them */
    CHECK(accepted(check_text("{\"language\": \"python\", \"code\": \"1\"}", &sp)));
    CHECK(sp.lang == AL_RUN_PYTHON && !sp.limit[AL_LIMIT_TIMEOUT_S].has);
    CHECK(sp.limit[AL_LIMIT_TIMEOUT_S].value == 30 && sp.limit[AL_LIMIT_MEMORY_MB].value == 512 &&
          sp.limit[AL_LIMIT_CPUS].value == 1 && sp.limit[AL_LIMIT_PIDS].value == 128);
    CHECK(sp.limits.timeout_s == 30 && sp.limits.memory_bytes == 512ll << 20 && sp.limits.cpu_millis == 1000 &&
          sp.limits.pids == 128);
    CHECK(sp.net == NULL && sp.thread_id.s == NULL && !sp.has_args && sp.n_files == 0 && sp.stdin_text.s == NULL);
    al_run_spec_free(&sp);
    CHECK(accepted(check_text("{\"language\": \"node\", \"code\": \"1\", \"network\": \"internet\", \"limits\": "
                              "{\"timeout_s\": 7.0, \"memory_mb\": 100.5, \"cpus\": 0.255, \"pids\": 32}, \"files\": "
                              "[{\"name\": \"d.csv\", \"content_base64\": \"YSxiCg==\"}], \"stdin\": \"in\"}",
                              &sp)));
    CHECK(sp.lang == AL_RUN_NODE && sp.net != NULL && sp.limit[AL_LIMIT_TIMEOUT_S].has);
    CHECK(sp.limits.timeout_s == 7 && sp.limits.memory_bytes == (int64_t)(100.5 * 1048576) &&
          sp.limits.cpu_millis == 255 && sp.limits.pids == 32);
    CHECK(sp.n_files == 1 && sp.files[0].len == 4 && memcmp(sp.files[0].data, "a,b\n", 4) == 0);
    CHECK(al_run_spec_input_bytes(&sp) == 4 + 2);
    al_run_spec_free(&sp);
    /* seconds and processes are whole: a fraction is refused, not cut */
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": \"1\", \"limits\": {\"timeout_s\": 7.9}}", NULL),
                  "limits.timeout_s must be a whole number"));
    CHECK(refused(check_text("{\"language\": \"python\", \"code\": \"1\", \"limits\": {\"pids\": 32.5}}", NULL),
                  "limits.pids must be a whole number"));
    /* a check answers the same twice, and fills in nothing on a refusal
     * it would not fill in again */
    CHECK(accepted(check_with("\"network\": \"offline\"")));
}

static void test_built_specs(void) {
    /* a spec built directly (as Piston, MCP and skills build theirs) is
     * held to the same rules */
    al_run_spec sp = { 0 };
    char msg[600];
    const char *code = NULL;
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_INVALID &&
          strcmp(msg, "language must be one of python, node, bash") == 0);
    al_run_text_set(&sp.language, "bash", 4);
    al_run_text_set(&sp.code, "echo", 4);
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_OK);
    CHECK(al_run_spec_add_arg(&sp, "a\0b", 3) == 0);
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_INVALID && strncmp(msg, "args", 4) == 0);
    al_run_spec_free(&sp);
    al_run_text_set(&sp.language, "bash", 4);
    al_run_text_set(&sp.code, "echo", 4);
    CHECK(al_run_spec_add_file(&sp, "a\0b", 3, "x", 1) == 0);
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_INVALID &&
          strncmp(msg, "files[0].name", 13) == 0);
    al_run_spec_free(&sp);
    CHECK(al_run_spec_add_file_base64(&sp, "a", 1, "!!", 2) == -EINVAL && sp.n_files == 0);
    CHECK(al_run_spec_add_file_base64(&sp, "a", 1, "eA==", 4) == 0 && sp.n_files == 1 && sp.files[0].len == 1 &&
          sp.files[0].data[0] == 'x');
    al_run_spec_free(&sp);
    /* a skill's arguments are its /work/args.json: no inline file may take the name */
    al_run_text_set(&sp.language, "python", 6);
    al_run_text_set(&sp.code, "x", 1);
    al_run_skill k = { .name = "s", .version = "1", .digest = "sha256:0", .entrypoint = "go", .script = "go.py",
                       .mode = "run", .args_json = "{}" };
    CHECK(al_run_spec_set_skill(&sp, &k) == 0);
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_OK);
    CHECK(al_run_spec_input_bytes(&sp) == 2);
    CHECK(al_run_spec_add_file(&sp, "args.json", 9, "[]", 2) == 0);
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_INVALID &&
          strcmp(msg, "two files are named \"args.json\"") == 0);
    al_run_spec_free(&sp);
}

/* ------------------------------------------------------------------ hash */

/* The hash of body TEXT, read, checked and resolved as the core would
 * (image "host", the network as given or "offline"), its files and stdin
 * staged from its own bytes, and DOCS when not NULL. */
static void hash_text(const char *text, const al_run_staged *docs, char out[65]) {
    al_run_spec sp;
    out[0] = '\0';
    if (!accepted(check_text(text, &sp))) {
        fprintf(stderr, "  in %s\n", text);
        return;
    }
    al_run_spec_resolve(&sp, sp.image.s ? sp.image.s : "host", sp.network.s ? sp.network.s : "offline");
    al_run_staged st;
    al_run_staged_of_spec(&sp, &st);
    for (size_t i = 0; docs && i < docs->n_docs; i++)
        al_run_staged_add_doc(&st, docs->docs[i].id, docs->docs[i].path, docs->docs[i].version, docs->docs[i].size,
                              docs->docs[i].sha256);
    al_run_spec_hash(&sp, &st, out);
    al_run_staged_free(&st);
    al_run_spec_free(&sp);
}

#define BASE                                                                                                         \
    "\"language\": \"python\", \"code\": \"print(1)\", \"thread_id\": \"t1\", \"description\": \"d\", "              \
    "\"network\": \"offline\", \"args\": [\"a\", \"b\"], \"artifacts\": [\"art_1\"], \"stdin\": \"in\", "            \
    "\"limits\": {\"timeout_s\": 10, \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 16}, "                             \
    "\"files\": [{\"name\": \"x.txt\", \"content_base64\": \"eHg=\"}, {\"name\": \"y.bin\", \"content_base64\": \"AAE=\"}]"

static void test_hash_stable(void) {
    char h[65], h2[65];
    hash_text("{" BASE "}", NULL, h);
    CHECK(strlen(h) == 64);
    hash_text("{" BASE "}", NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    /* the same body with its keys in another order, and white space */
    hash_text("{\"files\": [{\"content_base64\": \"eHg=\", \"name\": \"x.txt\"}, {\"name\": \"y.bin\", "
              "\"content_base64\": \"AAE=\"}], \"limits\": {\"pids\": 16, \"cpus\": 0.5, \"memory_mb\": 64, "
              "\"timeout_s\": 10}, \"stdin\": \"in\", \"artifacts\": [\"art_1\"], \"args\": [\"a\", \"b\"],"
              "\"network\": \"offline\", \"description\": \"d\", \"thread_id\": \"t1\", \"code\": \"print(1)\","
              "\n\"language\":\"python\"}",
              NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    /* escapes spell the same bytes; 10 and 10.0 are the same limit */
    hash_text("{" BASE ", \"image\": null}", NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    hash_text("{\"language\": \"python\", \"code\": \"print(1)\", \"thread_id\": \"t1\", \"description\": \"\\u0064\", "
              "\"network\": \"offline\", \"args\": [\"a\", \"b\"], \"artifacts\": [\"art_1\"], \"stdin\": \"in\", "
              "\"limits\": {\"timeout_s\": 10.0, \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 16}, "
              "\"files\": [{\"name\": \"x.txt\", \"content_base64\": \"eHg=\"}, {\"name\": \"y.bin\", "
              "\"content_base64\": \"AAE=\"}]}",
              NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    /* the inline files are taken by name, in whatever order they came */
    hash_text("{\"language\": \"python\", \"code\": \"print(1)\", \"thread_id\": \"t1\", \"description\": \"d\", "
              "\"network\": \"offline\", \"args\": [\"a\", \"b\"], \"artifacts\": [\"art_1\"], \"stdin\": \"in\", "
              "\"limits\": {\"timeout_s\": 10, \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 16}, "
              "\"files\": [{\"name\": \"y.bin\", \"content_base64\": \"AAE=\"}, {\"name\": \"x.txt\", "
              "\"content_base64\": \"eHg=\"}]}",
              NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    /* a limit left to its default is the default asked for */
    hash_text("{\"language\": \"python\", \"code\": \"1\"}", NULL, h);
    hash_text("{\"language\": \"python\", \"code\": \"1\", \"limits\": {\"timeout_s\": 30, \"pids\": 128}}", NULL, h2);
    CHECK(strcmp(h, h2) == 0);
}

/* Each variant of BASE (one field changed by one byte, name, entry or
 * presence) hashes to its own value, none to the base's. */
static void test_hash_changes(void) {
    static const char *const variants[] = {
        /* code, one byte */
        "\"language\": \"python\", \"code\": \"print(2)\"",
        /* language */
        "\"language\": \"bash\", \"code\": \"print(1)\"",
        /* a file's content, one byte */
        "\"files\": [{\"name\": \"x.txt\", \"content_base64\": \"eHk=\"}, {\"name\": \"y.bin\", \"content_base64\": \"AAE=\"}]",
        /* a file's name */
        "\"files\": [{\"name\": \"x.tx\", \"content_base64\": \"eHg=\"}, {\"name\": \"y.bin\", \"content_base64\": \"AAE=\"}]",
        /* a file fewer */
        "\"files\": [{\"name\": \"x.txt\", \"content_base64\": \"eHg=\"}]",
        /* an empty file more */
        "\"files\": [{\"name\": \"x.txt\", \"content_base64\": \"eHg=\"}, {\"name\": \"y.bin\", \"content_base64\": \"AAE=\"},"
        " {\"name\": \"z\", \"content_base64\": \"\"}]",
        /* stdin, one byte; empty; none */
        "\"stdin\": \"io\"",
        "\"stdin\": \"\"",
        "\"stdin\": null",
        /* args: one byte, one more, none, an empty list, split otherwise */
        "\"args\": [\"a\", \"c\"]",
        "\"args\": [\"a\", \"b\", \"\"]",
        "\"args\": null",
        "\"args\": []",
        "\"args\": [\"ab\"]",
        "\"args\": [\"a\", \"b\", \"c\"]",
        /* packages: one asked, the other language, two in the other order */
        "\"packages\": {\"python\": [\"a\"]}",
        "\"packages\": {\"node\": [\"a\"]}",
        "\"packages\": {\"python\": [\"a\", \"b\"]}",
        "\"packages\": {\"python\": [\"b\", \"a\"]}",
        "\"packages\": {\"python\": [\"ab\"]}",
        /* artifacts */
        "\"artifacts\": [\"art_2\"]",
        "\"artifacts\": []",
        "\"artifacts\": [\"art_1\", \"art_1\"]",
        /* each limit */
        "\"limits\": {\"timeout_s\": 11, \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 16}",
        "\"limits\": {\"timeout_s\": 10, \"memory_mb\": 65, \"cpus\": 0.5, \"pids\": 16}",
        "\"limits\": {\"timeout_s\": 10, \"memory_mb\": 64, \"cpus\": 0.501, \"pids\": 16}",
        "\"limits\": {\"timeout_s\": 10, \"memory_mb\": 64, \"cpus\": 0.5, \"pids\": 17}",
        /* network, image, thread, description */
        "\"network\": \"internet\"",
        "\"network\": \"hosts:a.example\"",
        "\"image\": \"sha256:0000000000000000000000000000000000000000000000000000000000000000\"",
        "\"thread_id\": \"t2\"",
        "\"thread_id\": null",
        "\"description\": \"e\"",
        "\"description\": \"\"",
    };
    size_t n = sizeof variants / sizeof variants[0];
    char (*h)[65] = calloc(n + 1, sizeof *h);
    hash_text("{" BASE "}", NULL, h[n]);
    for (size_t i = 0; i < n; i++) {
        char text[4096];
        /* the base with that field replaced */
        json_t *base = json_loads("{" BASE "}", 0, NULL);
        char vt[1024];
        snprintf(vt, sizeof vt, "{%s}", variants[i]);
        json_t *v = json_loads(vt, 0, NULL);
        json_object_update(base, v);
        char *t = json_dumps(base, JSON_COMPACT);
        snprintf(text, sizeof text, "%s", t);
        free(t);
        json_decref(base);
        json_decref(v);
        hash_text(text, NULL, h[i]);
        if (strlen(h[i]) != 64)
            fprintf(stderr, "  variant %zu: %s\n", i, variants[i]);
        CHECK(strlen(h[i]) == 64);
    }
    size_t alike = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = i + 1; k <= n; k++)
            if (strcmp(h[i], h[k]) == 0) {
                fprintf(stderr, "  variants %zu and %zu hash alike: %s / %s\n", i, k, variants[i],
                        k < n ? variants[k] : "the base");
                alike++;
            }
    CHECK(alike == 0);
    free(h);
    /* the documents as staged: their version and bytes are bound */
    al_run_staged docs = { 0 };
    char a[65], b[65], c[65], d[65];
    al_run_staged_add_doc(&docs, "art_1", "notes.md", 1, 3, "aa");
    hash_text("{" BASE "}", &docs, a);
    docs.docs[0].version = 2;
    hash_text("{" BASE "}", &docs, b);
    docs.docs[0].version = 1;
    docs.docs[0].sha256[1] = 'b';
    hash_text("{" BASE "}", &docs, c);
    hash_text("{" BASE "}", NULL, d);
    CHECK(strcmp(a, b) != 0 && strcmp(a, c) != 0 && strcmp(b, c) != 0 && strcmp(a, d) != 0);
    al_run_staged_free(&docs);
}

/* Two specs that split the same bytes differently between neighbouring
 * fields hash apart: every value is written with its length. */
static void test_hash_no_collision(void) {
    struct split {
        const char *code, *image, *network, *desc, *a0, *a1;
    } pairs[][2] = {
        { { "ab", "c", "offline", "", "x", "y" }, { "a", "bc", "offline", "", "x", "y" } },
        { { "a", "bc", "offline", "", "x", "y" }, { "a", "b", "coffline", "", "x", "y" } },
        { { "a", "host", "offline", "dd", "x", "y" }, { "a", "host", "offlined", "d", "x", "y" } },
        { { "a", "host", "offline", "", "ab", "c" }, { "a", "host", "offline", "", "a", "bc" } },
        { { "a", "host", "offline", "", "", "x" }, { "a", "host", "offline", "", "x", "" } },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char h[2][65];
        for (int j = 0; j < 2; j++) {
            const struct split *p = &pairs[i][j];
            al_run_spec sp = { 0 };
            al_run_text_set(&sp.language, "python", 6);
            al_run_text_set(&sp.code, p->code, strlen(p->code));
            al_run_text_set(&sp.image, p->image, strlen(p->image));
            al_run_text_set(&sp.network, p->network, strlen(p->network));
            al_run_text_set(&sp.description, p->desc, strlen(p->desc));
            al_run_spec_add_arg(&sp, p->a0, strlen(p->a0));
            al_run_spec_add_arg(&sp, p->a1, strlen(p->a1));
            al_run_spec_hash(&sp, NULL, h[j]);
            al_run_spec_free(&sp);
        }
        CHECK(strlen(h[0]) == 64 && strcmp(h[0], h[1]) != 0);
    }
    /* files: ("ab", "c") and ("a", "bc") as names; and a name and its
     * sha256 against another split */
    char f[2][65];
    for (int j = 0; j < 2; j++) {
        al_run_spec sp = { 0 };
        al_run_text_set(&sp.language, "python", 6);
        al_run_text_set(&sp.code, "1", 1);
        al_run_staged st = { 0 };
        al_run_staged_add_file(&st, j ? "a" : "ab", 1, "x");
        al_run_staged_add_file(&st, j ? "bc" : "c", 1, "x");
        al_run_spec_hash(&sp, &st, f[j]);
        al_run_staged_free(&st);
        al_run_spec_free(&sp);
    }
    CHECK(strcmp(f[0], f[1]) != 0);
    /* an empty thread is not no thread; no stdin is not an empty one; no
     * skill is not a skill of empty fields */
    char t[6][65];
    for (int j = 0; j < 6; j++) {
        al_run_spec sp = { 0 };
        al_run_text_set(&sp.language, "python", 6);
        al_run_text_set(&sp.code, "1", 1);
        al_run_staged st = { 0 };
        if (j == 1)
            al_run_text_set(&sp.thread_id, "", 0);
        if (j == 2) {
            st.has_stdin = true;
            al_sha256_hex("", 0, st.stdin_id.sha256);
        }
        if (j == 3) {
            al_run_skill k = { 0 };
            al_run_spec_set_skill(&sp, &k);
        }
        if (j == 4)
            sp.has_args = true;
        if (j == 5)
            al_run_spec_add_artifact(&sp, "", 0);
        al_run_spec_hash(&sp, &st, t[j]);
        al_run_staged_free(&st);
        al_run_spec_free(&sp);
    }
    for (int i = 0; i < 6; i++)
        for (int k = i + 1; k < 6; k++)
            CHECK(strcmp(t[i], t[k]) != 0);
}

/* What a run is recorded with, read back, hashes as the spec it was made
 * from: the approval card is hashed from the request's spec, the start of
 * the run from its record, and the two must agree. */
static void test_record_round_trip(void) {
    static const char *const bodies[] = {
        "{" BASE "}",
        "{\"language\": \"bash\", \"code\": \"echo\"}",
        "{\"language\": \"node\", \"code\": \"1\", \"args\": [], \"image\": \"x\", \"limits\": {\"cpus\": 0.333, "
        "\"memory_mb\": 100.3}}",
        "{\"language\": \"python\", \"code\": \"1\", \"packages\": {\"python\": [\"requests==2.31.0\", "
        "\"pandas[excel]>=2\"], \"node\": [\"@scope/x@^1\"]}}",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        al_run_spec sp, back;
        if (!accepted(check_text(bodies[i], &sp)))
            continue;
        al_run_spec_resolve(&sp, sp.image.s ? "sha256:0123" : "host", sp.network.s ? sp.network.s : "offline");
        if (i == 1) {
            al_run_skill k = { .name = "s", .version = "1.0", .digest = "sha256:ab", .entrypoint = "go",
                               .script = "go.sh", .mode = "test", .args_json = "{\"a\":1}" };
            al_run_spec_set_skill(&sp, &k);
        }
        json_t *docs = json_pack("[{s:s, s:s, s:i, s:i, s:s}]", "id", "art_1", "path", "a.md", "version", 1, "size", 1,
                                 "sha256", "00");
        al_store_run rec = { 0 };
        CHECK(al_run_spec_record(&sp, "mcp", docs, &rec) == 0);
        json_decref(docs);
        CHECK(strcmp(rec.language, sp.language.s) == 0 && rec.code == sp.code.s);
        CHECK(strcmp(rec.image, i == 2 ? "sha256:0123" : "") == 0);
        json_t *ins = json_loads(rec.inputs, 0, NULL);
        CHECK(strcmp(json_string_value(json_object_get(ins, "via")), "mcp") == 0 &&
              json_array_size(json_object_get(ins, "documents")) == 1);
        CHECK(!!json_object_get(ins, "args") == sp.has_args && !!json_object_get(ins, "skill") == !!sp.skill);
        CHECK(!!json_object_get(ins, "packages") == al_run_spec_wants_packages(&sp));
        json_decref(ins);
        CHECK(al_run_spec_of_record(&rec, &back) == 0);
        al_run_staged st;
        al_run_staged_of_spec(&sp, &st);
        char h[65], h2[65];
        al_run_spec_hash(&sp, &st, h);
        al_run_spec_hash(&back, &st, h2);
        CHECK(strlen(h) == 64 && strcmp(h, h2) == 0);
        CHECK(back.n_packages[AL_PKG_PYTHON] == sp.n_packages[AL_PKG_PYTHON] &&
              back.n_packages[AL_PKG_NODE] == sp.n_packages[AL_PKG_NODE]);
        CHECK(back.limits.timeout_s == sp.limits.timeout_s && back.limits.memory_bytes == sp.limits.memory_bytes &&
              back.limits.cpu_millis == sp.limits.cpu_millis && back.limits.pids == sp.limits.pids);
        if (i == 1)
            CHECK(st.n_files == 1 && strcmp(st.files[0].name, "args.json") == 0 && st.files[0].size == 7 &&
                  al_run_spec_input_bytes(&sp) == 7 && rec.skill_name && strcmp(rec.skill_name, "s") == 0);
        al_run_staged_free(&st);
        al_run_spec_free(&back);
        al_run_spec_record_done(&rec);
        al_run_spec_free(&sp);
    }
    /* a record that is no run's is refused, not hashed as another */
    al_store_run bad = { .code = "1", .limits = "{\"timeout_s\": 1}", .inputs = "{}" };
    al_run_spec back;
    CHECK(al_run_spec_of_record(&bad, &back) == -EBADMSG);
    bad.limits = "not json";
    CHECK(al_run_spec_of_record(&bad, &back) == -EBADMSG);
    bad.limits = "{\"timeout_s\": 1, \"memory_bytes\": 1, \"cpu_millis\": 1, \"pids\": 1}";
    bad.inputs = "{\"args\": [1]}";
    CHECK(al_run_spec_of_record(&bad, &back) == -EBADMSG);
    bad.inputs = NULL;
    CHECK(al_run_spec_of_record(&bad, &back) == 0 && !back.has_args && back.n_artifacts == 0);
    al_run_spec_free(&back);
    bad.code = NULL;
    CHECK(al_run_spec_of_record(&bad, &back) == -EBADMSG);
}

/* A timeout asked in milliseconds (Piston's run_timeout): held to the
 * bounds in seconds rounded up, boxed as the milliseconds, recorded and
 * hashed as them; a spec in whole seconds records and hashes as before. */
static void test_timeout_ms(void) {
    char msg[600];
    const char *code = NULL;
    al_run_spec sp = { 0 };
    al_run_text_set(&sp.language, "python", 6);
    al_run_text_set(&sp.code, "1", 1);
    sp.timeout_ms = 500;
    CHECK(al_run_spec_check(&sp, &bounds, msg, sizeof msg, &code) == AL_STATUS_OK);
    CHECK(sp.limits.timeout_s == 1 && sp.limits.timeout_ms == 500);
    al_run_spec_resolve(&sp, "host", "offline");
    al_store_run rec = { 0 };
    CHECK(al_run_spec_record(&sp, "piston", NULL, &rec) == 0);
    json_t *lim = json_loads(rec.limits, 0, NULL);
    CHECK(json_integer_value(json_object_get(lim, "timeout_s")) == 1 &&
          json_integer_value(json_object_get(lim, "timeout_ms")) == 500);
    json_decref(lim);
    al_run_spec back;
    CHECK(al_run_spec_of_record(&rec, &back) == 0 && back.limits.timeout_ms == 500);
    char h[65], h2[65], h1000[65];
    al_run_spec_hash(&sp, NULL, h);
    al_run_spec_hash(&back, NULL, h2);
    CHECK(strcmp(h, h2) == 0);
    al_run_spec_free(&back);
    al_run_spec_record_done(&rec);
    /* 1000 ms is the second asked in seconds: the same record and hash */
    al_run_spec whole = { 0 }, secs = { 0 };
    for (int j = 0; j < 2; j++) {
        al_run_spec *w = j ? &secs : &whole;
        al_run_text_set(&w->language, "python", 6);
        al_run_text_set(&w->code, "1", 1);
        if (j)
            w->limit[AL_LIMIT_TIMEOUT_S] = (al_run_limit_req){ true, 1 };
        else
            w->timeout_ms = 1000;
        CHECK(al_run_spec_check(w, &bounds, msg, sizeof msg, &code) == AL_STATUS_OK);
        al_run_spec_resolve(w, "host", "offline");
        CHECK(w->limits.timeout_s == 1 && w->limits.timeout_ms == 1000);
    }
    al_run_spec_hash(&whole, NULL, h1000);
    al_run_spec_hash(&secs, NULL, h2);
    CHECK(strcmp(h1000, h2) == 0 && strcmp(h1000, h) != 0);
    CHECK(al_run_spec_record(&whole, "piston", NULL, &rec) == 0 && !strstr(rec.limits, "timeout_ms"));
    al_run_spec_record_done(&rec);
    al_run_spec_free(&whole);
    al_run_spec_free(&secs);
    al_run_spec_free(&sp);
    /* 1 ms is a second of the bounds; one past the maximum is refused, in
     * milliseconds; and seconds and milliseconds together are refused */
    static const struct {
        int64_t ms;
        bool secs;
        const char *refusal;
    } cases[] = {
        { 1, false, NULL },
        { 300000, false, NULL },
        { 300001, false, "the timeout (300001 ms) must be from 1 to 300000 ms" },
        { -5, false, "the timeout (-5 ms) must be from 1 to 300000 ms" },
        { 500, true, "give the timeout in seconds or in milliseconds, not both" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        al_run_spec c = { 0 };
        al_run_text_set(&c.language, "python", 6);
        al_run_text_set(&c.code, "1", 1);
        c.timeout_ms = cases[i].ms;
        if (cases[i].secs)
            c.limit[AL_LIMIT_TIMEOUT_S] = (al_run_limit_req){ true, 2 };
        al_status st = al_run_spec_check(&c, &bounds, msg, sizeof msg, &code);
        if (cases[i].refusal)
            CHECK(st == AL_STATUS_INVALID && strcmp(msg, cases[i].refusal) == 0);
        else
            CHECK(st == AL_STATUS_OK && c.limits.timeout_ms == cases[i].ms &&
                  c.limits.timeout_s == (cases[i].ms + 999) / 1000);
        al_run_spec_free(&c);
    }
}

/* An E2B sandbox's run: its id is checked, bound by the hash (a run
 * approved for one sandbox's directory is not another's), kept by the
 * record; a run without one hashes as before the field existed. */
static void test_sandbox(void) {
    al_run_spec sp, back;
    char before[65], h[65], h2[65];
    CHECK(accepted(check_text("{\"language\": \"bash\", \"code\": \"ls\"}", &sp)));
    al_run_spec_resolve(&sp, "host", "offline");
    al_run_spec_hash(&sp, NULL, before);
    al_run_text_set(&sp.sandbox, "sbx_abc", 7);
    al_run_spec_hash(&sp, NULL, h);
    CHECK(strcmp(before, h) != 0);
    al_run_text_set(&sp.sandbox, "sbx_abd", 7);
    al_run_spec_hash(&sp, NULL, h2);
    CHECK(strcmp(h, h2) != 0);
    al_store_run rec = { 0 };
    CHECK(al_run_spec_record(&sp, "e2b", NULL, &rec) == 0 && strstr(rec.inputs, "\"sandbox\":\"sbx_abd\""));
    CHECK(al_run_spec_of_record(&rec, &back) == 0 && back.sandbox.s && strcmp(back.sandbox.s, "sbx_abd") == 0);
    al_run_spec_hash(&back, NULL, h);
    CHECK(strcmp(h, h2) == 0);
    al_run_spec_free(&back);
    al_run_spec_record_done(&rec);
    al_run_spec_free(&sp);
    /* the id names a directory: nothing that could climb out of it */
    static const char *const bad[] = { "", "../x", "a/b", "SBX", "sbx_0123456789012345678901234567", "a.b" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(!al_valid_sandbox_id(bad[i]));
    CHECK(al_valid_sandbox_id("sbx_0123456789abcdefghij"));
    char msg[256];
    const char *code;
    al_run_spec t = { 0 };
    al_run_text_set(&t.language, "bash", 4);
    al_run_text_set(&t.code, "ls", 2);
    al_run_text_set(&t.sandbox, "../x", 4);
    CHECK(al_run_spec_check(&t, &bounds, msg, sizeof msg, &code) == AL_STATUS_INVALID && strstr(msg, "sandbox"));
    al_run_spec_free(&t);
}

/* ------------------------------------------------------------ run states */

static void test_states(void) {
    static const al_run_state ended[] = { AL_RUN_SUCCEEDED, AL_RUN_FAILED, AL_RUN_TIMED_OUT, AL_RUN_KILLED,
                                          AL_RUN_CANCELED, AL_RUN_ERROR, AL_RUN_DENIED };
    static const al_run_state live[] = { AL_RUN_PENDING_APPROVAL, AL_RUN_QUEUED, AL_RUN_PROVISIONING, AL_RUN_RUNNING };
    for (size_t i = 0; i < sizeof ended / sizeof ended[0]; i++) {
        CHECK(al_run_state_ended(ended[i]));
        /* an ended run moves no more */
        for (int to = 0; to < _AL_RUN_STATE_MAX; to++)
            CHECK(!al_run_transition_ok(ended[i], (al_run_state)to));
    }
    for (size_t i = 0; i < sizeof live / sizeof live[0]; i++) {
        CHECK(!al_run_state_ended(live[i]));
        CHECK(!al_run_transition_ok(live[i], live[i])); /* no move is no transition */
    }
    CHECK(!al_run_state_ended(_AL_RUN_STATE_INVALID) && !al_run_state_ended(_AL_RUN_STATE_MAX));
    /* the legal moves, all of them: (from, to) */
    static const al_run_state legal[][2] = {
        { AL_RUN_PENDING_APPROVAL, AL_RUN_QUEUED },     { AL_RUN_PENDING_APPROVAL, AL_RUN_DENIED },
        { AL_RUN_PENDING_APPROVAL, AL_RUN_CANCELED },   { AL_RUN_PENDING_APPROVAL, AL_RUN_ERROR },
        { AL_RUN_QUEUED, AL_RUN_PROVISIONING },         { AL_RUN_QUEUED, AL_RUN_CANCELED },
        { AL_RUN_QUEUED, AL_RUN_ERROR },                { AL_RUN_PROVISIONING, AL_RUN_RUNNING },
        { AL_RUN_PROVISIONING, AL_RUN_SUCCEEDED },      { AL_RUN_PROVISIONING, AL_RUN_FAILED },
        { AL_RUN_PROVISIONING, AL_RUN_TIMED_OUT },      { AL_RUN_PROVISIONING, AL_RUN_KILLED },
        { AL_RUN_PROVISIONING, AL_RUN_CANCELED },       { AL_RUN_PROVISIONING, AL_RUN_ERROR },
        { AL_RUN_RUNNING, AL_RUN_SUCCEEDED },           { AL_RUN_RUNNING, AL_RUN_FAILED },
        { AL_RUN_RUNNING, AL_RUN_TIMED_OUT },           { AL_RUN_RUNNING, AL_RUN_KILLED },
        { AL_RUN_RUNNING, AL_RUN_CANCELED },            { AL_RUN_RUNNING, AL_RUN_ERROR },
    };
    size_t n_legal = sizeof legal / sizeof legal[0], seen = 0;
    for (int from = -1; from <= _AL_RUN_STATE_MAX; from++)
        for (int to = -1; to <= _AL_RUN_STATE_MAX; to++) {
            bool want = false;
            for (size_t i = 0; i < n_legal; i++)
                want |= legal[i][0] == (al_run_state)from && legal[i][1] == (al_run_state)to;
            bool got = al_run_transition_ok((al_run_state)from, (al_run_state)to);
            if (got != want)
                fprintf(stderr, "  %s -> %s: %s\n", al_run_state_name((al_run_state)from) ?: "?",
                        al_run_state_name((al_run_state)to) ?: "?", got ? "allowed" : "refused");
            CHECK(got == want);
            seen += got;
        }
    CHECK(seen == n_legal);
    /* the ones that would break a promise */
    CHECK(!al_run_transition_ok(AL_RUN_PENDING_APPROVAL, AL_RUN_RUNNING));     /* never past its approval */
    CHECK(!al_run_transition_ok(AL_RUN_PENDING_APPROVAL, AL_RUN_PROVISIONING));
    CHECK(!al_run_transition_ok(AL_RUN_QUEUED, AL_RUN_RUNNING));               /* never uncharged */
    CHECK(!al_run_transition_ok(AL_RUN_QUEUED, AL_RUN_SUCCEEDED));
    CHECK(!al_run_transition_ok(AL_RUN_RUNNING, AL_RUN_DENIED));               /* denied is an approval's */
    CHECK(!al_run_transition_ok(AL_RUN_RUNNING, AL_RUN_QUEUED));               /* nothing runs twice */
    CHECK(!al_run_transition_ok(AL_RUN_ERROR, AL_RUN_QUEUED));                 /* no resurrection */
    /* the names round-trip, and no other name is a state */
    for (int i = 0; i < _AL_RUN_STATE_MAX; i++)
        CHECK(al_run_state_from_name(al_run_state_name((al_run_state)i)) == (al_run_state)i);
    CHECK(al_run_state_from_name("done") == _AL_RUN_STATE_INVALID && al_run_state_from_name(NULL) == _AL_RUN_STATE_INVALID);
}

/* Connected folders' imports as asked: the rules of the request (the
 * folders themselves are the core's); the pinned files enter the hash as a
 * trailer (a run without any hashes as before), survive the record, and
 * any change of a file's folder, path, size, sha256 or order is another hash. */
static void test_folders(void) {
    CHECK(accepted(check_with("\"folders\": [{\"folder\": \"docs\", \"paths\": [\"a/b.csv\", \".\"]}]")));
    CHECK(refused(check_with("\"folders\": {}"), "folders must be an array"));
    CHECK(refused(check_with("\"folders\": [{\"folder\": \"docs\"}]"), "folders[0] must be"));
    CHECK(refused(check_with("\"folders\": [{\"folder\": \"docs\", \"paths\": [\"a\"], \"x\": 1}]"),
                  "unknown field \"x\" in folders[0]"));
    CHECK(refused(check_with("\"folders\": [{\"folder\": \"..\", \"paths\": [\"a\"]}]"), "folders[0].folder"));
    CHECK(refused(check_with("\"folders\": [{\"folder\": \"d\", \"paths\": []}]"), "folders[0].paths must name"));
    CHECK(refused(check_with("\"folders\": [{\"folder\": \"d\", \"paths\": [\"a\"]}, "
                             "{\"folder\": \"d\", \"paths\": [\"b\"]}]"),
                  "folders[1]: folder d is named twice"));
    static const char *const bad_paths[] = { "", "/etc", "a/../b", "..", "a//b", "a/", "./a", "a/./b", "a\\u0000b" };
    for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++) {
        char extra[200];
        snprintf(extra, sizeof extra, "\"folders\": [{\"folder\": \"d\", \"paths\": [\"%s\"]}]", bad_paths[i]);
        CHECK(refused(check_with(extra), "folders[0].paths[0]"));
    }
    /* the hash: none, one file, and each field of it changed */
    al_run_spec sp = { 0 };
    al_run_text_set(&sp.language, "python", 6);
    al_run_text_set(&sp.code, "1", 1);
    char h[8][65];
    const char *const sha_a = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const char *const sha_b = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    static const struct { const char *f, *p; uint64_t size; int sha; } v[] = {
        { "docs", "a.csv", 1, 0 }, { "docx", "a.csv", 1, 0 }, { "docs", "a.csv2", 1, 0 },
        { "docs", "a.csv", 2, 0 }, { "docs", "a.csv", 1, 1 }, { "doc", "sa.csv", 1, 0 },
    };
    al_run_spec_hash(&sp, NULL, h[0]);
    for (size_t i = 0; i < 6; i++) {
        al_run_staged st = { 0 };
        al_run_staged_add_import(&st, v[i].f, v[i].p, v[i].size, v[i].sha ? sha_b : sha_a);
        al_run_spec_hash(&sp, &st, h[i + 1]);
        al_run_staged_free(&st);
    }
    al_run_staged two = { 0 };
    al_run_staged_add_import(&two, "docs", "a.csv", 1, sha_a);
    al_run_staged_add_import(&two, "docs", "b.csv", 1, sha_a);
    al_run_spec_hash(&sp, &two, h[7]);
    for (int i = 0; i < 8; i++)
        for (int k = i + 1; k < 8; k++)
            CHECK(strlen(h[i]) == 64 && strcmp(h[i], h[k]) != 0);
    /* pinned in the spec, recorded, read back: the same hash */
    al_run_spec_resolve(&sp, "host", "offline");
    CHECK(al_run_spec_add_import(&sp, "docs", "a.csv", 1, sha_a) == 0 &&
          al_run_spec_add_import(&sp, "docs", "b.csv", 1, sha_a) == 0);
    al_store_run rec = { 0 };
    CHECK(al_run_spec_record(&sp, "rest", NULL, &rec) == 0);
    al_run_spec back;
    CHECK(al_run_spec_of_record(&rec, &back) == 0 && back.n_imports == 2);
    al_run_staged s1, s2;
    al_run_staged_of_spec(&sp, &s1);
    al_run_staged_of_spec(&back, &s2);
    char a[65], b[65];
    al_run_spec_hash(&sp, &s1, a);
    al_run_spec_hash(&back, &s2, b);
    CHECK(s1.n_imports == 2 && strcmp(a, b) == 0);
    al_run_staged_free(&s1);
    al_run_staged_free(&s2);
    al_run_staged_free(&two);
    al_run_spec_free(&back);
    al_run_spec_record_done(&rec);
    al_run_spec_free(&sp);
}

int main(void) {
    test_refusals();
    test_folders();
    test_order_and_defaults();
    test_built_specs();
    test_hash_stable();
    test_hash_changes();
    test_hash_no_collision();
    test_record_round_trip();
    test_timeout_ms();
    test_sandbox();
    test_states();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
