/* Unit tests for the pure part of skills (src/core/skill_manifest.c):
 * the manifest, bundle paths, the schema subset and argument validation. */
#include <string.h>

#include "core/skills.h"

#include "check.h"

/* Parse TEXT as a manifest; 0 or -errno, and the message in MSG. */
static int manifest(const char *text, char *msg) {
    al_error err = { 0 };
    json_t *m = NULL;
    int r = al_skill_manifest_parse(text, strlen(text), &m, &err);
    json_decref(m);
    snprintf(msg, 512, "%s", err.msg);
    return r;
}

static void test_names(void) {
    CHECK(al_skill_name_valid("chart-builder"));
    CHECK(al_skill_name_valid("a"));
    CHECK(al_skill_name_valid("x1-2"));
    CHECK(!al_skill_name_valid(""));
    CHECK(!al_skill_name_valid("-a"));
    CHECK(!al_skill_name_valid("a-"));
    CHECK(!al_skill_name_valid("Chart"));
    CHECK(!al_skill_name_valid("a_b"));
    CHECK(!al_skill_name_valid("a/b"));
    CHECK(!al_skill_name_valid("a.b"));
    CHECK(!al_skill_name_valid(NULL));
    char long_name[80];
    memset(long_name, 'a', 65);
    long_name[65] = '\0';
    CHECK(!al_skill_name_valid(long_name));
    long_name[64] = '\0';
    CHECK(al_skill_name_valid(long_name));
}

static void test_paths(void) {
    al_error err = { 0 };
    unsigned depth = 0;
    CHECK(al_skill_path_check("skill.json", &depth, &err) == 0 && depth == 1);
    CHECK(al_skill_path_check("lib/util/x.py", &depth, &err) == 0 && depth == 3);
    CHECK(al_skill_path_check("lib/", &depth, &err) == 0 && depth == 1);
    CHECK(al_skill_path_check("/etc/passwd", NULL, &err) < 0 && strstr(err.msg, "absolute"));
    memset(&err, 0, sizeof err);
    CHECK(al_skill_path_check("../x", NULL, &err) < 0 && strstr(err.msg, ".."));
    CHECK(al_skill_path_check("a/../../x", NULL, &err) < 0);
    CHECK(al_skill_path_check("a/./x", NULL, &err) < 0);
    CHECK(al_skill_path_check("a//x", NULL, &err) < 0);
    CHECK(al_skill_path_check("", NULL, &err) < 0);
    CHECK(al_skill_path_check("a\nb", NULL, &err) < 0);
    CHECK(al_skill_path_check("a\\..\\b", NULL, &err) < 0);
    CHECK(al_skill_path_check("1/2/3/4/5/6/7/8", NULL, &err) == 0);
    CHECK(al_skill_path_check("1/2/3/4/5/6/7/8/9", NULL, &err) == -ELOOP);
    char p[400];
    memset(p, 'a', 300);
    p[300] = '\0';
    CHECK(al_skill_path_check(p, NULL, &err) == -ENAMETOOLONG);
}

#define EP(schema)                                                                                          \
    "{\"name\": \"s\", \"version\": \"1.0\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", " \
    "\"language\": \"python\", \"script\": \"e.py\", \"description\": \"d\", \"input_schema\": " schema "}]}"

static void test_manifest(void) {
    char msg[512];
    CHECK(manifest(EP("{\"type\": \"object\"}"), msg) == 0);
    CHECK(manifest("not json", msg) < 0 && strstr(msg, "not JSON"));
    CHECK(manifest("[]", msg) < 0);
    CHECK(manifest("{\"name\": \"Bad Name\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": []}", msg) < 0 &&
          strstr(msg, "\"name\""));
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": []}", msg) < 0 &&
          strstr(msg, "entrypoints"));
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"extra\": 1, \"entrypoints\": []}",
                   msg) < 0 && strstr(msg, "unknown field \"extra\""));
    /* language, script path, duplicate names, missing schema */
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", "
                   "\"language\": \"ruby\", \"script\": \"e.rb\", \"description\": \"d\", \"input_schema\": "
                   "{\"type\": \"object\"}}]}", msg) < 0 && strstr(msg, "language"));
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", "
                   "\"language\": \"bash\", \"script\": \"../e.sh\", \"description\": \"d\", \"input_schema\": "
                   "{\"type\": \"object\"}}]}", msg) < 0 && strstr(msg, ".."));
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", "
                   "\"language\": \"bash\", \"script\": \"e.sh\", \"description\": \"d\"}]}", msg) < 0 &&
          strstr(msg, "input_schema"));
    CHECK(manifest("{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": ["
                   "{\"name\": \"e\", \"language\": \"bash\", \"script\": \"e.sh\", \"description\": \"d\", "
                   "\"input_schema\": {\"type\": \"object\"}},"
                   "{\"name\": \"e\", \"language\": \"bash\", \"script\": \"f.sh\", \"description\": \"d\", "
                   "\"input_schema\": {\"type\": \"object\"}}]}", msg) < 0 && strstr(msg, "two entrypoints"));
    /* duplicate keys are refused rather than one silently winning */
    CHECK(manifest("{\"name\": \"s\", \"name\": \"t\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": []}",
                   msg) < 0);
    /* schemas: top level an object, known keywords only, well-typed */
    CHECK(manifest(EP("{\"type\": \"string\"}"), msg) < 0 && strstr(msg, "top level"));
    CHECK(manifest(EP("{\"type\": \"object\", \"patternProperties\": {}}"), msg) < 0 &&
          strstr(msg, "unsupported schema keyword \"patternProperties\""));
    CHECK(manifest(EP("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"date\"}}}"), msg) < 0);
    CHECK(manifest(EP("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"minimum\": 1}}}"), msg) < 0 &&
          strstr(msg, "minimum"));
    CHECK(manifest(EP("{\"type\": \"object\", \"required\": [\"a\"]}"), msg) < 0 && strstr(msg, "required"));
    CHECK(manifest(EP("{\"type\": \"object\", \"additionalProperties\": {}}"), msg) < 0);
    CHECK(manifest(EP("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\", \"enum\": [1, \"x\"]}}}"),
                   msg) < 0 && strstr(msg, "enum"));
    CHECK(manifest(EP("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"maxLength\": -1}}}"), msg) < 0);
    /* nesting is capped */
    char deep[4096] = "{\"type\": \"object\", \"properties\": {\"a\": ";
    for (int i = 0; i < 12; i++)
        strcat(deep, "{\"type\": \"array\", \"items\": ");
    strcat(deep, "{\"type\": \"string\"}");
    for (int i = 0; i < 12; i++)
        strcat(deep, "}");
    strcat(deep, "}}");
    char doc[8192];
    snprintf(doc, sizeof doc,
             "{\"name\": \"s\", \"version\": \"1\", \"description\": \"d\", \"entrypoints\": [{\"name\": \"e\", "
             "\"language\": \"python\", \"script\": \"e.py\", \"description\": \"d\", \"input_schema\": %s}]}", deep);
    CHECK(manifest(doc, msg) < 0 && strstr(msg, "nest"));
}

/* Validate ARGS (JSON text) against SCHEMA (JSON text); 0 or -errno. */
static int validate(const char *schema, const char *args, char *msg) {
    json_t *sc = json_loads(schema, 0, NULL), *a = json_loads(args, JSON_DECODE_ANY, NULL);
    al_error err = { 0 };
    int r = al_skill_schema_check(sc, &err);
    if (r == 0)
        r = al_skill_args_validate(sc, a, &err);
    snprintf(msg, 512, "%s", err.msg);
    json_decref(sc);
    json_decref(a);
    return r;
}

static void test_args(void) {
    char msg[512];
    const char *sc = "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"csv\"], \"properties\": {"
                     "\"csv\": {\"type\": \"string\", \"maxLength\": 8},"
                     "\"kind\": {\"type\": \"string\", \"enum\": [\"line\", \"bar\"]},"
                     "\"rows\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 100},"
                     "\"scale\": {\"type\": \"number\", \"minimum\": 0.5},"
                     "\"log\": {\"type\": \"boolean\"},"
                     "\"cols\": {\"type\": \"array\", \"maxItems\": 2, \"items\": {\"type\": \"string\"}},"
                     "\"opts\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}}}}";
    CHECK(validate(sc, "{\"csv\": \"a.csv\"}", msg) == 0);
    CHECK(validate(sc, "{\"csv\": \"a.csv\", \"kind\": \"bar\", \"rows\": 100, \"scale\": 0.5, \"log\": true, "
                       "\"cols\": [\"a\", \"b\"], \"opts\": {\"x\": 3, \"y\": 1}}", msg) == 0);
    CHECK(validate(sc, "{\"csv\": \"a.csv\", \"rows\": 2.0}", msg) == 0); /* 2.0 is an integer in JSON Schema */
    CHECK(validate(sc, "{}", msg) < 0 && strcmp(msg, "args.csv: is required") == 0);
    CHECK(validate(sc, "[]", msg) < 0 && strstr(msg, "object"));
    CHECK(validate(sc, "{\"csv\": 3}", msg) < 0 && strcmp(msg, "args.csv: must be a string") == 0);
    CHECK(validate(sc, "{\"csv\": \"123456789\"}", msg) < 0 && strstr(msg, "at most 8 characters"));
    /* characters, not bytes: 8 two-byte characters fit */
    CHECK(validate(sc, "{\"csv\": \"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}", msg) == 0);
    CHECK(validate(sc, "{\"csv\": \"a\", \"kind\": \"pie\"}", msg) < 0 && strstr(msg, "args.kind: must be one of"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"rows\": 0}", msg) < 0 && strstr(msg, "args.rows: must be at least 1"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"rows\": 101}", msg) < 0 && strstr(msg, "args.rows: must be at most 100"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"rows\": 1.5}", msg) < 0 && strstr(msg, "integer"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"scale\": 0.4}", msg) < 0);
    CHECK(validate(sc, "{\"csv\": \"a\", \"log\": 1}", msg) < 0 && strstr(msg, "boolean"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"cols\": [\"a\", \"b\", \"c\"]}", msg) < 0 && strstr(msg, "at most 2 items"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"cols\": [\"a\", 1]}", msg) < 0 && strcmp(msg, "args.cols[1]: must be a string") == 0);
    CHECK(validate(sc, "{\"csv\": \"a\", \"opts\": {\"x\": \"no\"}}", msg) < 0 && strstr(msg, "args.opts.x"));
    CHECK(validate(sc, "{\"csv\": \"a\", \"extra\": 1}", msg) < 0 && strstr(msg, "unknown property \"extra\""));
    /* an open object takes what it does not declare */
    CHECK(validate("{\"type\": \"object\"}", "{\"anything\": [1, 2]}", msg) == 0);
    /* arguments are capped in size */
    size_t big = AL_SKILL_ARGS_MAX + 10;
    char *text = malloc(big + 32);
    strcpy(text, "{\"a\": \"");
    memset(text + 7, 'x', big);
    strcpy(text + 7 + big, "\"}");
    CHECK(validate("{\"type\": \"object\"}", text, msg) == -E2BIG);
    free(text);
}

int main(void) {
    test_names();
    test_paths();
    test_manifest();
    test_args();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
