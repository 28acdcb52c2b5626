/*
 * The MCP tools: code_execution, run_skill_script, list_artifacts and
 * read_artifact, and artifacts as resources. Runs are created by the paths
 * REST uses (al_run_create, and al_skill_run for skills), so the allow-list,
 * audit, credits and approvals apply as they do over REST; this file only
 * translates arguments in and the run out,
 * for a model: what it printed, how it ended, and its files as links (and
 * small images inline, so a model can look at its chart).
 */
#include <fcntl.h>
#include <math.h>
#include <nettle/base64.h>
#include <string.h>
#include <time.h>

#include "mcp_results.h"
#include "mcp_tools.h"
#include "run_body.h"
#include "../core/skills.h"
#include "../core/follow.h"
#include "../core/views.h"
#include "../util/json_keys.h"

#define READ_TEXT_MAX (256u << 10)   /* read_artifact: text, inline */
#define READ_BLOB_MAX (2u << 20)     /* read_artifact: binary, as base64 */
#define APPROVAL_WAIT_MAX_S 600      /* a call waits this long for a person, then says so */
#define RUN_SLACK_S 120              /* past the run's own timeout: queueing, provisioning */
#define EVENTS_PER_STEP 64
#define SKILL_CATALOGUE_MAX (24u << 10) /* the skills listed in run_skill_script's description */
#define RESOURCES_LIST_MAX 100       /* resources/list: the newest artifacts */

struct al_mcp_call {
    al_service *s;
    al_principal p;
    char run_id[40];
    json_t *progress_token;       /* NULL: the client asked for no progress */
    double progress;
    al_follow f;                  /* the run's events, the core's follower */
    char state[24];
    int timeout_s;                /* the run's own */
    uint64_t started_ms, deadline_ms;
    bool waited_for_approval;
};

/* ------------------------------------------------------------- schemas */

/* The caller's workspace's folders as a sentence for the tool's
 * description: an MCP client has no GET /v1/folders, so without it a model
 * could not know what to name. NULL when it cannot be read. */
static char *folder_catalogue(al_service *s, const al_principal *p) {
    al_error err = { 0 };
    json_t *doc = al_view_folders(s, p, false, &err);
    json_t *list = json_object_get(doc, "folders");
    char *b = NULL;
    size_t len = 0;
    FILE *f = doc ? open_memstream(&b, &len) : NULL;
    if (f) {
        size_t i;
        json_t *e;
        fputs(json_array_size(list) ? " This workspace's folders:" : " This workspace has no connected folder.", f);
        json_array_foreach(list, i, e) {
            const char *g = json_string_value(json_object_get(e, "glob"));
            fprintf(f, "%s %s", i ? "," : "", json_string_value(json_object_get(e, "name")));
            if (g && *g)
                fprintf(f, " (only files matching %s)", g);
        }
        fputs(json_array_size(list) ? ". To see what one holds, import \".\" and list /work/documents/FOLDER." : "",
              f);
        fclose(f);
    }
    json_decref(doc);
    return b;
}

/* code_execution's `folders`: the connected folders' files it imports, as
 * POST /v1/runs takes them; CATALOGUE (may be NULL) names the caller's */
static json_t *folders_schema(const char *catalogue) {
    char *desc = NULL;
    if (asprintf(&desc, "%s%s",
                 "Optional files of the workspace's connected folders (read-only directories an operator lent it), "
                 "copied into /work/documents/FOLDER/PATH before the program starts: at most 1000 files and 64 MiB "
                 "in all.",
                 catalogue ? catalogue : "") < 0)
        return NULL;
    json_t *schema = json_pack(
        "{s:s, s:i, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:i, s:{s:s}, s:s}}, s:[s, s], s:b}, s:s}", "type", "array",
        "maxItems", AL_RUN_FOLDERS_MAX, "items", "type", "object", "properties", "folder", "type", "string", "description",
        "A connected folder's name (listed in this argument's description; GET /v1/folders over REST).", "paths", "type", "array", "maxItems", AL_RUN_FOLDER_PATHS_MAX, "items",
        "type", "string", "description",
        "Files or directories beneath the folder, relative to it (\".\": all of it); a directory is taken whole.",
        "required", "folder", "paths", "additionalProperties", false, "description", desc);
    free(desc);
    return schema;
}


/* code_execution's `packages`: the same object as POST /v1/runs's (its
 * specs' rules in the pattern, so a client sees them before it calls) */
static json_t *packages_schema(void) {
    return json_pack(
        "{s:s, s:{s:{s:s, s:i, s:{s:s, s:i, s:s}}, s:{s:s, s:i, s:{s:s, s:i, s:s}}}, s:b, s:s}", "type", "object",
        "properties", "python", "type", "array", "maxItems", AL_RUN_PACKAGES_MAX, "items", "type", "string",
        "maxLength", AL_RUN_PACKAGE_SPEC_MAX, "pattern",
        AL_PKG_PYTHON_PATTERN, "node",
        "type", "array", "maxItems", AL_RUN_PACKAGES_MAX, "items", "type", "string", "maxLength",
        AL_RUN_PACKAGE_SPEC_MAX, "pattern", AL_PKG_NODE_PATTERN,
        "additionalProperties", false, "description",
        "Optional packages to install before the program runs, e.g. {\"python\": [\"requests==2.31.0\"], \"node\": "
        "[\"lodash@4.17.21\"]} (names and versions only: no URLs, paths or options). With a `thread`, they join the "
        "thread's environment: later runs of the thread have them too without asking. A workspace may not allow "
        "installs: then the call is refused, and you should tell the user the packages could not be installed "
        "rather than substitute something else.");
}

static json_t *tool_code_execution(al_service *s, const al_principal *p) {
    json_t *tool = json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:[s, s, s], s:s}, s:{s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:s, s:s},"
        " s:{s:s, s:i, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}, s:[s], s:b}, s:s},"
        " s:{s:s, s:s}, s:{s:s, s:i, s:s}, s:{s:s, s:s}}, s:[s, s], s:b}, s:{s:b, s:b, s:b, s:b}}",
        "name", "code_execution", "title", "Run code in a sandbox",
        "description",
        "Run a Python, Node.js or Bash program in a fresh, isolated sandbox and get back what it printed, how it "
        "ended (exit code and reason) and the files it wrote. Each call is a new machine: nothing is kept in "
        "memory between calls. To keep files, give a `thread`: files the program writes under /out/ become "
        "artifacts of that thread (returned as resource links; PNG and JPEG images are also returned inline so "
        "you can look at them), and later runs in the same thread find the thread's latest files under "
        "/work/documents/. The working directory is /work; files you pass in `files` are placed there. "
        "Write charts and reports to /out/ (for example /out/chart.png). There is no network unless `network` "
        "allows it. Output is capped and secrets are redacted. A workspace may require a person to approve each "
        "run: the call then waits for the decision and says so.",
        "inputSchema", "type", "object", "properties",
        "language", "type", "string", "enum", "python", "node", "bash", "description",
        "The language of `code`: python (Python 3), node (JavaScript, Node.js) or bash.",
        "code", "type", "string", "description", "The whole program to run, as source text.",
        "thread", "type", "string", "pattern", "^[A-Za-z0-9._-]{1,64}$", "description",
        "Optional name of a working session (1-64 of A-Z a-z 0-9 . _ -). Runs in the same thread share files: "
        "what one writes to /out/ the next finds in /work/documents/.",
        "network", "type", "string", "description",
        "Optional network policy (the workspace's default when absent, usually \"offline\": no network at "
        "all). \"packages\": package registries only (pip, npm); \"hosts:example.com,api.example.org\": those "
        "hosts only; \"hosts+packages:example.com\": both; \"internet\": anywhere public. A workspace allows "
        "some of these; one it does not allow is refused with a clear error.",
        "files", "type", "array", "maxItems", 64, "items", "type", "object", "properties",
        "name", "type", "string", "description", "A plain file name (no /), placed in /work.",
        "content", "type", "string", "description", "The file's text (UTF-8).",
        "content_base64", "type", "string", "description", "Or the file's bytes, base64-encoded.",
        "required", "name", "additionalProperties", false,
        "description", "Optional input files for the program.",
        "description", "type", "string", "description",
        "Optional: one sentence on what this run is for. A person who approves runs sees it.",
        "timeout_s", "type", "integer", "minimum", 1, "description",
        "Optional wall-clock limit in seconds (the workspace's default when absent; its maximum bounds it).",
        "image", "type", "string", "description",
        "Optional runtime image: \"default\" has Python with numpy, pandas, matplotlib, scipy, Pillow, "
        "openpyxl and reportlab, and Node.js, when the server has it built; absent: the server's own "
        "runtime (plain Python, Node.js and Bash, no extra libraries).",
        "required", "language", "code", "additionalProperties", false,
        "annotations", "readOnlyHint", false, "destructiveHint", false, "idempotentHint", false, "openWorldHint",
        false);
    json_t *props = json_object_get(json_object_get(tool, "inputSchema"), "properties");
    char *cat = props ? folder_catalogue(s, p) : NULL;
    int r = !props ? -1 : json_object_set_new(props, "folders", folders_schema(cat));
    free(cat);
    if (r < 0 || json_object_set_new(props, "packages", packages_schema()) < 0) {
        json_decref(tool);
        return NULL;
    }
    return tool;
}

/* The skills P may run (bundled, or promoted in the workspace), each with
 * its entrypoints and their argument schemas: what a model needs to pick
 * one and fill in its arguments, without another call. */
static char *skill_catalogue(al_service *s, const al_principal *p) {
    json_t *doc = NULL;
    char *b = NULL;
    size_t len = 0, cap = 0;
    if (al_skills_list(s, p, &doc) != AL_STATUS_OK) {
        json_decref(doc);
        return NULL;
    }
    size_t i, k;
    json_t *sk, *ep;
    int shown = 0;
    json_array_foreach(json_object_get(doc, "skills"), i, sk) {
        const char *state = json_string_value(json_object_get(sk, "state"));
        if (!state || (strcmp(state, "bundled") != 0 && strcmp(state, "promoted") != 0))
            continue;
        if (len > SKILL_CATALOGUE_MAX) {
            al_mcp_append_str(&b, &len, &cap, "\n(more skills: GET /v1/skills)");
            break;
        }
        char line[1200];
        snprintf(line, sizeof line, "%s\n- skill \"%s\": %s", shown++ ? "" : "\n\nSkills here:",
                 json_string_value(json_object_get(sk, "name")),
                 json_string_value(json_object_get(sk, "description")) ?: "");
        al_utf8_fix(line); /* a long description is cut at the line's size, maybe inside a character */
        al_mcp_append_str(&b, &len, &cap, line);
        json_array_foreach(json_object_get(sk, "entrypoints"), k, ep) {
            char *schema = json_dumps(json_object_get(ep, "input_schema"), JSON_COMPACT | JSON_SORT_KEYS);
            snprintf(line, sizeof line, "\n  - entrypoint \"%s\": %s Arguments (JSON Schema): ",
                     json_string_value(json_object_get(ep, "name")),
                     json_string_value(json_object_get(ep, "description")) ?: "");
            al_utf8_fix(line);
            al_mcp_append_str(&b, &len, &cap, line);
            al_mcp_append_str(&b, &len, &cap, schema ? schema : "{}");
            free(schema);
        }
    }
    if (!shown)
        al_mcp_append_str(&b, &len, &cap, "\n\nNo skill is installed here yet.");
    json_decref(doc);
    return b;
}

static json_t *tool_run_skill_script(al_service *s, const al_principal *p) {
    json_t *tool = json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s, s:s}, s:{s:s, s:s}},"
        " s:[s, s], s:b},"
        " s:{s:b, s:b, s:b, s:b}}",
        "name", "run_skill_script", "title", "Run a skill's script",
        "description",
        "Run one declared entrypoint of an installed skill (a reviewed bundle of scripts, such as a chart builder "
        "or a CSV cleaner) in a sandbox, with arguments checked against the entrypoint's schema. The skill's "
        "files are read-only; the thread's files are its inputs; what it writes becomes artifacts of the thread, "
        "returned as resource links (images also inline).",
        "inputSchema", "type", "object", "properties",
        "skill", "type", "string", "description", "The skill's name.",
        "entrypoint", "type", "string", "description", "One of the entrypoints the skill declares.",
        "arguments", "type", "object", "description", "The entrypoint's arguments, as its schema describes them.",
        "thread", "type", "string", "pattern", "^[A-Za-z0-9._-]{1,64}$", "description",
        "Optional working session whose files are the skill's inputs and which gets its outputs.",
        "network", "type", "string", "description",
        "Optional network policy, as code_execution takes it (the workspace's default when absent).",
        "required", "skill", "entrypoint", "additionalProperties", false,
        "annotations", "readOnlyHint", false, "destructiveHint", false, "idempotentHint", false, "openWorldHint",
        false);
    char *cat = skill_catalogue(s, p);
    if (tool && cat) {
        json_t *d = json_object_get(tool, "description");
        size_t n = json_string_length(d) + strlen(cat) + 1;
        char *full = malloc(n);
        if (full) {
            snprintf(full, n, "%s%s", json_string_value(d), cat);
            json_object_set_new(tool, "description", json_string(full));
        }
        free(full);
    }
    free(cat);
    return tool;
}

static json_t *tool_list_artifacts(void) {
    return json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}, s:b},"
        " s:{s:b, s:b, s:b, s:b}}",
        "name", "list_artifacts", "title", "List a thread's files",
        "description",
        "List the files (artifacts) of a thread: the latest version of each path, or every version with "
        "all_versions. Each comes with a URI to give to read_artifact. Give `thread`, or `run` for a run that "
        "had no thread.",
        "inputSchema", "type", "object", "properties",
        "thread", "type", "string", "pattern", "^[A-Za-z0-9._-]{1,64}$", "description", "The thread's name.",
        "run", "type", "string", "description", "Or a run id (run_...): the files that run wrote.",
        "all_versions", "type", "boolean", "description", "Every version of each path, not only the latest.",
        "additionalProperties", false,
        "annotations", "readOnlyHint", true, "destructiveHint", false, "idempotentHint", true, "openWorldHint", false);
}

static json_t *tool_read_artifact(void) {
    return json_pack(
        "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:s}}, s:[s], s:b}, s:{s:b, s:b, s:b, s:b}}",
        "name", "read_artifact", "title", "Read a file a run wrote",
        "description",
        "Read one artifact by the URI that code_execution or list_artifacts gave (airlock://artifacts/art_...) "
        "or by its id. Text files come back as text (up to 256 KiB, then cut), other files as base64 (up to "
        "2 MiB); PNG and JPEG images up to 512 KiB also as an image you can look at.",
        "inputSchema", "type", "object", "properties",
        "uri", "type", "string", "description", "airlock://artifacts/art_... or art_...",
        "required", "uri", "additionalProperties", false,
        "annotations", "readOnlyHint", true, "destructiveHint", false, "idempotentHint", true, "openWorldHint", false);
}

static bool tool_allowed(json_t *settings, const char *tool) {
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(settings, "tools"), i, v) if (strcmp(json_string_value(v), tool) == 0) return true;
    return false;
}

json_t *al_mcp_tools_list(al_service *s, const al_principal *p) {
    /* unreadable settings list no tool that runs code (a call would be refused anyway) */
    al_error err = { 0 };
    json_t *settings = al_settings_load(s, p->workspace_id, &err);
    json_t *tools = json_array();
    if (tool_allowed(settings, "code_execution"))
        json_array_append_new(tools, tool_code_execution(s, p));
    if (tool_allowed(settings, "run_skill_script"))
        json_array_append_new(tools, tool_run_skill_script(s, p));
    json_array_append_new(tools, tool_list_artifacts());
    json_array_append_new(tools, tool_read_artifact());
    json_decref(settings);
    return tools;
}

/* ------------------------------------------------------- code_execution */

/* Strict arguments (json_keys.h): false, and the first unknown one in
 * *RET_BAD, when ARGS holds a key that is not one of KEYS. */
static bool only_keys(json_t *args, const char *const *keys, size_t n, const char **ret_bad) {
    *ret_bad = al_json_unknown_key(args, keys, n);
    return !*ret_bad;
}

/* The refusal of a run as a tool error a model can read. */
static json_t *run_refusal(const char *tool, const char *code, const char *msg) {
    if (strcmp(code, "tool_not_allowed") == 0)
        return al_mcp_tool_error("%s is not allowed in this workspace (not on its tool allow-list).", tool);
    if (strcmp(code, "payment_required") == 0 || strcmp(code, "queue_full") == 0 ||
        strcmp(code, "driver_disabled") == 0 || strcmp(code, "quota_exceeded") == 0)
        return al_mcp_tool_error("The run was not started (%s): %s", code, msg);
    return al_mcp_tool_error("The run was refused: %s", msg);
}

/*
 * Start a run of SP through al_run_create, the one path POST /v1/runs and
 * the skills also take (allow-list, audit, credits, quotas, approvals). 0
 * and RET_RUN_ID; or -EINVAL and the refusal as a tool error a model can
 * read.
 */
static int start_run(al_service *s, const al_principal *p, al_run_spec *sp, const al_run_extra *x, const char *tool,
                     char ret_run_id[40], json_t **ret_refusal) {
    json_t *doc = NULL;
    al_status st = al_run_create(s, p, sp, x, &doc);
    const char *id = json_string_value(json_object_get(doc, "id"));
    if ((st == AL_STATUS_OK || st == AL_STATUS_CREATED) && id && strlen(id) < 40) {
        snprintf(ret_run_id, 40, "%s", id);
        json_decref(doc);
        return 0;
    }
    json_t *e = json_object_get(doc, "error");
    *ret_refusal = run_refusal(tool, json_string_value(json_object_get(e, "code")) ?: "internal",
                               json_string_value(json_object_get(e, "message")) ?: "the run could not be created");
    json_decref(doc);
    return -EINVAL;
}

/* Follow run RUN_ID (just started for P) to its end: *RET_CALL. */
static int follow_run(al_service *s, const al_principal *p, const char *run_id, json_t *progress_token,
                      al_mcp_call **ret_call, json_t **ret_result) {
    al_mcp_call *k = calloc(1, sizeof *k);
    if (!k) {
        *ret_result = al_mcp_tool_error("out of memory; run %s was started and goes on", run_id);
        return 0;
    }
    k->s = s;
    k->p = *p;
    snprintf(k->run_id, sizeof k->run_id, "%s", run_id);
    k->progress_token = progress_token ? json_incref(progress_token) : NULL;
    al_follow_init(&k->f, s, run_id, 0);
    al_view_run *row = al_view_run_load(s, p, run_id);
    json_t *lim = row ? al_json_text(row->limits) : NULL;
    k->timeout_s = (int)json_integer_value(json_object_get(lim, "timeout_s"));
    json_decref(lim);
    al_view_run_free(row);
    k->started_ms = al_now_ms();
    k->deadline_ms = k->started_ms + (uint64_t)(k->timeout_s + RUN_SLACK_S) * 1000;
    *ret_call = k;
    return 0;
}

static int code_execution(al_service *s, const al_principal *p, json_t *args, json_t *progress_token, al_idem *idem,
                          al_mcp_call **ret_call, json_t **ret_result) {
    static const char *const keys[] = { "language", "code", "thread", "network", "files", "description", "timeout_s",
                                        "image", "folders", "packages" };
    const char *bad = NULL;
    if (!only_keys(args, keys, ELEMENTSOF(keys), &bad)) {
        *ret_result = al_mcp_tool_error("Unknown argument \"%s\". code_execution takes language, code, and optionally thread, "
                                 "network, files, description, timeout_s, image, folders, packages.", bad);
        return 0;
    }
    json_t *lang = json_object_get(args, "language"), *code = json_object_get(args, "code");
    if (!json_is_string(lang) || !json_is_string(code)) {
        *ret_result = al_mcp_tool_error("code_execution needs language (python, node or bash) and code (a string).");
        return 0;
    }
    /* the arguments code_execution shares with POST /v1/runs, read as its
     * body's fields are (a field of the wrong type gets the same answer) */
    static const struct {
        const char *arg;
        al_run_field field;
    } shared[] = { { "language", AL_RUN_F_LANGUAGE }, { "code", AL_RUN_F_CODE }, { "thread", AL_RUN_F_THREAD_ID },
                   { "network", AL_RUN_F_NETWORK },   { "description", AL_RUN_F_DESCRIPTION },
                   { "image", AL_RUN_F_IMAGE },       { "folders", AL_RUN_F_FOLDERS },
                   { "packages", AL_RUN_F_PACKAGES } };
    al_run_spec sp = { 0 };
    char msg[600];
    const char *rcode = NULL;
    al_status st = AL_STATUS_OK;
    for (size_t i = 0; st == AL_STATUS_OK && i < ELEMENTSOF(shared); i++)
        st = al_run_body_field(&sp, shared[i].field, json_object_get(args, shared[i].arg), msg, sizeof msg, &rcode);
    json_t *v = json_object_get(args, "timeout_s");
    if (st == AL_STATUS_OK && v && !json_is_null(v))
        /* one that is no number is refused by the check, with its range */
        sp.limit[AL_LIMIT_TIMEOUT_S] = (al_run_limit_req){ true, json_is_number(v) ? json_number_value(v) : NAN };
    json_t *files = json_object_get(args, "files");
    if (st == AL_STATUS_OK && files && !json_is_null(files)) {
        if (!json_is_array(files)) {
            al_run_spec_free(&sp);
            *ret_result = al_mcp_tool_error("files must be an array of {name, content} objects.");
            return 0;
        }
        size_t i;
        json_t *f;
        static const char *const file_keys[] = { "name", "content", "content_base64" };
        json_array_foreach(files, i, f) {
            json_t *name = json_object_get(f, "name"), *text = json_object_get(f, "content");
            json_t *b64 = json_object_get(f, "content_base64");
            if (!only_keys(f, file_keys, ELEMENTSOF(file_keys), &bad)) {
                al_run_spec_free(&sp);
                *ret_result = al_mcp_tool_error("Unknown field \"%.64s\" in files[%zu]: a file has name and either content "
                                         "(text) or content_base64.", bad, i);
                return 0;
            }
            if (!json_is_object(f) || !json_is_string(name) || (!json_is_string(text) == !json_is_string(b64))) {
                al_run_spec_free(&sp);
                *ret_result = al_mcp_tool_error("files[%zu] must have a name and either content (text) or content_base64.", i);
                return 0;
            }
            const char *n = json_string_value(name);
            size_t nl = json_string_length(name);
            int r = json_is_string(text)
                        ? al_run_spec_add_file(&sp, n, nl, json_string_value(text), json_string_length(text))
                        : al_run_spec_add_file_base64(&sp, n, nl, json_string_value(b64), json_string_length(b64));
            if (r < 0) {
                al_run_spec_free(&sp);
                *ret_result = r == -ENOMEM ? al_mcp_tool_error("out of memory")
                                           : al_mcp_tool_error("The run was refused: " AL_RUN_RULE_FILE_BASE64, i);
                return 0;
            }
        }
    }
    if (st != AL_STATUS_OK) {
        al_run_spec_free(&sp);
        *ret_result = run_refusal("code_execution", rcode ? rcode : "internal", msg);
        return 0;
    }
    char run_id[40];
    json_t *refusal = NULL;
    al_run_extra via_mcp = { .via = "mcp", .idem = idem };
    int r = start_run(s, p, &sp, &via_mcp, "code_execution", run_id, &refusal);
    al_run_spec_free(&sp);
    if (r < 0) {
        *ret_result = refusal;
        return 0;
    }
    return follow_run(s, p, run_id, progress_token, ret_call, ret_result);
}

/* ----------------------------------------------------------- following */

static json_t *progress_note(al_mcp_call *k, const char *msg) {
    if (!k->progress_token)
        return NULL;
    k->progress += 1;
    return json_pack("{s:s, s:s, s:{s:O, s:f, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress", "params",
                     "progressToken", k->progress_token, "progress", k->progress, "message", msg);
}

static json_t *log_note(const char *level, const char *logger, json_t *data) {
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:o}}", "jsonrpc", "2.0", "method", "notifications/message", "params",
                     "level", level, "logger", logger, "data", data);
}

static void add(json_t *notes, json_t *n) {
    if (n)
        json_array_append_new(notes, n);
}

static void on_state(al_mcp_call *k, const char *state, json_t *notes) {
    char msg[600];
    if (strcmp(state, "pending_approval") == 0) {
        k->waited_for_approval = true;
        k->deadline_ms = al_now_ms() + (uint64_t)APPROVAL_WAIT_MAX_S * 1000;
        snprintf(msg, sizeof msg,
                 "Waiting for a person to approve run %s: this workspace requires approval before code runs. "
                 "An admin or approver other than the one who asked decides, after reviewing the code and every "
                 "input on the run's approval card, with POST /v1/runs/%s/approve (or /deny).",
                 k->run_id, k->run_id);
        add(notes, log_note("notice", "airlock", json_pack("{s:s, s:s, s:s}", "message", msg, "run_id", k->run_id,
                                                            "state", state)));
        add(notes, progress_note(k, msg));
    } else if (strcmp(state, "queued") == 0 && k->waited_for_approval) {
        /* approved: the run's own clock starts now */
        k->deadline_ms = al_now_ms() + (uint64_t)(k->timeout_s + RUN_SLACK_S) * 1000;
        snprintf(msg, sizeof msg, "Run %s was approved and is queued.", k->run_id);
        add(notes, log_note("notice", "airlock", json_pack("{s:s, s:s, s:s}", "message", msg, "run_id", k->run_id,
                                                            "state", state)));
        add(notes, progress_note(k, msg));
    } else if (strcmp(state, "running") == 0) {
        snprintf(msg, sizeof msg, "Run %s is running.", k->run_id);
        add(notes, progress_note(k, msg));
    }
    snprintf(k->state, sizeof k->state, "%s", state);
}

static json_t *denied_result(json_t *run) {
    json_t *error = json_object_get(run, "error");
    const char *code = json_string_value(json_object_get(error, "code")) ?: "denied";
    const char *msg = json_string_value(json_object_get(error, "message")) ?: "";
    const char *id = json_string_value(json_object_get(run, "id"));
    json_t *res;
    if (strcmp(code, "expired") == 0)
        res = al_mcp_tool_error("Run %s did not run: no one approved it before its approval expired. Ask a person with the "
                         "approver role to watch for approvals, then try again.", id);
    else
        res = al_mcp_tool_error("Run %s did not run: a person denied it%s%s%s.", id, *msg ? " (reason: " : "", msg,
                         *msg ? ")" : "");
    json_object_set_new(res, "structuredContent", json_pack("{s:s, s:s, s:s, s:s}", "run_id", id, "state", "denied",
                                                            "code", code, "message", msg));
    return res;
}

static json_t *final_result(al_mcp_call *k) {
    al_view_run *row = al_view_run_load(k->s, &k->p, k->run_id);
    if (!row)
        return al_mcp_tool_error("run %s vanished", k->run_id);
    json_t *run = al_run_json(k->s, row);
    al_view_run_free(row);
    json_t *res = strcmp(json_string_value(json_object_get(run, "state")), "denied") == 0 ? denied_result(run)
                                                                                          : al_mcp_run_result(k->s, run);
    json_decref(run);
    return res;
}

/* What the call's events say: notes to send, and the result once the run's
 * has come (true). */
static bool on_events(al_mcp_call *k, const al_follow_event *evs, size_t nev, bool send_output, json_t *notes,
                      json_t **ret_result) {
    for (size_t i = 0; i < nev; i++) {
        const char *type = evs[i].type;
        json_t *data = json_loads(evs[i].data, 0, NULL);
        if (strcmp(type, "state") == 0 && json_is_string(json_object_get(data, "state"))) {
            on_state(k, json_string_value(json_object_get(data, "state")), notes);
        } else if ((strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) && send_output &&
                   json_is_string(json_object_get(data, "data"))) {
            /* already redacted by the runner, as the REST stream is */
            add(notes, log_note(type[3] == 'o' ? "info" : "warning", type, json_incref(json_object_get(data, "data"))));
            add(notes, progress_note(k, type[3] == 'o' ? "output on stdout" : "output on stderr"));
        } else if (strcmp(type, "phase") == 0 && json_is_string(json_object_get(data, "phase"))) {
            char msg[200];
            snprintf(msg, sizeof msg, "Run %s is %s its packages.", k->run_id,
                     json_string_value(json_object_get(data, "phase")));
            add(notes, progress_note(k, msg));
        } else if (strcmp(type, "installing") == 0 && send_output && json_is_string(json_object_get(data, "data"))) {
            /* pip's and npm's own words, redacted as the run's output is */
            add(notes, log_note("info", "installing", json_incref(json_object_get(data, "data"))));
        } else if (strcmp(type, "installed") == 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "Run %s's packages are ready (%s %s).", k->run_id,
                     json_is_true(json_object_get(data, "reused")) ? "layer reused:" : "installed into",
                     json_string_value(json_object_get(data, "layer")) ?: "a layer");
            add(notes, progress_note(k, msg));
        } else if (strcmp(type, "result") == 0) {
            json_decref(data);
            *ret_result = final_result(k);
            return true;
        }
        json_decref(data);
    }
    return false;
}

/* The call waited past its deadline: it stops waiting, saying for what. */
static json_t *waited_too_long(al_mcp_call *k, uint64_t now) {
    if (strcmp(k->state, "pending_approval") == 0)
        return al_mcp_tool_error("No one has decided on run %s after %d s of waiting for approval. It still waits "
                          "(until its approval expires); this call stops waiting for it now.",
                          k->run_id, APPROVAL_WAIT_MAX_S);
    return al_mcp_tool_error("Run %s has not ended %llu s after it was started (state: %s); this call stops "
                      "waiting for it. Its files will be in list_artifacts when it ends.",
                      k->run_id, (unsigned long long)(now - k->started_ms) / 1000, k->state);
}

bool al_mcp_call_step(al_mcp_call *k, int wait_s, bool send_output, json_t *notes, json_t **ret_result) {
    al_error err = { 0 };
    *ret_result = NULL;
    /* wait at most WAIT_S, and never past the call's deadline */
    uint64_t now = al_now_ms();
    uint64_t wait_ms = (uint64_t)wait_s * 1000;
    if (k->deadline_ms <= now)
        wait_ms = 0;
    else if (k->deadline_ms - now < wait_ms)
        wait_ms = k->deadline_ms - now;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(wait_ms / 1000);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    al_follow_event *evs = NULL;
    size_t nev = 0;
    switch (al_follow_next(&k->f, (int64_t)EVENTS_PER_STEP, &until, &evs, &nev, &err)) {
    case AL_FOLLOW_EVENTS:
        on_events(k, evs, nev, send_output, notes, ret_result);
        al_follow_events_free(evs, nev);
        return false;
    case AL_FOLLOW_DONE:
        *ret_result = final_result(k);
        return false;
    case AL_FOLLOW_STOPPING:
        *ret_result = al_mcp_tool_error("The service is shutting down; run %s was stopped with it.", k->run_id);
        return false;
    case AL_FOLLOW_QUIET:
        break;
    default:
        *ret_result = al_mcp_tool_error("cannot follow run %s: %s", k->run_id, err.msg);
        return false;
    }
    now = al_now_ms();
    if (now >= k->deadline_ms) {
        *ret_result = waited_too_long(k, now);
        return false;
    }
    /* quiet for a while: a progress note keeps a client's timeout at bay */
    char msg[200];
    snprintf(msg, sizeof msg, strcmp(k->state, "pending_approval") == 0 ? "Still waiting for approval of run %s."
                                                                         : "Run %s is still going.", k->run_id);
    add(notes, progress_note(k, msg));
    return true;
}

const char *al_mcp_call_run_id(const al_mcp_call *k) { return k->run_id; }

void al_mcp_call_free(al_mcp_call *k) {
    if (!k)
        return;
    json_decref(k->progress_token);
    free(k);
}

/* ------------------------------------------------------------ artifacts */

static bool valid_thread(const char *t) {
    size_t n = strlen(t);
    return n > 0 && n <= 64 && strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n &&
           strcmp(t, ".") != 0 && strcmp(t, "..") != 0;
}

static json_t *list_artifacts(al_service *s, const al_principal *p, json_t *args) {
    static const char *const keys[] = { "thread", "run", "all_versions" };
    const char *bad = NULL;
    if (!only_keys(args, keys, ELEMENTSOF(keys), &bad))
        return al_mcp_tool_error("Unknown argument \"%s\". list_artifacts takes thread (or run) and all_versions.", bad);
    const char *thread = json_string_value(json_object_get(args, "thread"));
    const char *run = json_string_value(json_object_get(args, "run"));
    bool all = json_is_true(json_object_get(args, "all_versions"));
    if (!thread == !run)
        return al_mcp_tool_error("Give either thread (the thread's name) or run (a run id).");
    if (thread && !valid_thread(thread))
        return al_mcp_tool_error("thread must be 1-64 characters of A-Z a-z 0-9 . _ -");
    if (run && strlen(run) > 64)
        return al_mcp_tool_error("no run %s", run);
    al_error err = { 0 };
    /* the thread key: of the thread's name, or of the run's id for a run without one */
    const char *key = thread ? thread : run;
    json_t *rows = al_view_thread_artifacts(s, p->workspace_id, thread, run, all, 1000, &err);
    if (!rows)
        return al_mcp_tool_error("cannot list artifacts: %s", err.msg);
    char *b = NULL;
    size_t len = 0, cap = 0;
    char line[1200];
    if (json_array_size(rows) == 0)
        snprintf(line, sizeof line, "No files in %s %s.", thread ? "thread" : "run", key);
    else
        snprintf(line, sizeof line, "%zu file%s in %s %s:", json_array_size(rows), json_array_size(rows) == 1 ? "" : "s",
                 thread ? "thread" : "run", key);
    al_mcp_append_str(&b, &len, &cap, line);
    json_t *content = json_array(), *briefs = json_array();
    size_t i;
    json_t *a;
    json_array_foreach(rows, i, a) {
        snprintf(line, sizeof line, "\n- %s v%lld (%lld bytes, %s): " URI_PREFIX "%s",
                 json_string_value(json_object_get(a, "path")), (long long)json_integer_value(json_object_get(a, "version")),
                 (long long)json_integer_value(json_object_get(a, "size")),
                 json_string_value(json_object_get(a, "content_type")), json_string_value(json_object_get(a, "id")));
        al_mcp_append_str(&b, &len, &cap, line);
        json_array_append_new(briefs, al_mcp_artifact_brief(a));
    }
    json_array_append_new(content, al_mcp_text_item(b ? b : ""));
    free(b);
    json_array_foreach(rows, i, a) json_array_append_new(content, al_mcp_artifact_link(a));
    json_decref(rows);
    return json_pack("{s:o, s:{s:o}, s:b}", "content", content, "structuredContent", "artifacts", briefs, "isError", false);
}

static bool textual(const char *type) {
    return strncmp(type, "text/", 5) == 0 || strcmp(type, "application/json") == 0 ||
           strcmp(type, "application/xml") == 0 || strcmp(type, "image/svg+xml") == 0;
}

/* The artifact a URI (or bare id) names in P's workspace, or NULL: the
 * workspace scopes the lookup, so another tenant's id is simply not found. */
static json_t *artifact_by_uri(al_service *s, const al_principal *p, const char *uri) {
    const char *id = strncmp(uri, URI_PREFIX, strlen(URI_PREFIX)) == 0 ? uri + strlen(URI_PREFIX) : uri;
    if (strncmp(id, "art_", 4) != 0 || strlen(id) > 64)
        return NULL;
    return al_view_artifact(s, p->workspace_id, id);
}

/*
 * An artifact's content as an MCP resource: {uri, mimeType, text} for UTF-8
 * text (at most READ_TEXT_MAX bytes, *RET_CUT when there was more), else
 * {uri, mimeType, blob} (at most READ_BLOB_MAX). -EFBIG when it is too
 * large to send, -EIO when its bytes are missing.
 */
static int artifact_resource(al_service *s, json_t *a, json_t **ret, bool *ret_cut) {
    const char *type = json_string_value(json_object_get(a, "content_type"));
    json_int_t size = json_integer_value(json_object_get(a, "size"));
    bool text = textual(type);
    *ret = NULL;
    *ret_cut = false;
    if (!text && size > (json_int_t)READ_BLOB_MAX)
        return -EFBIG;
    char uri[128];
    snprintf(uri, sizeof uri, URI_PREFIX "%s", json_string_value(json_object_get(a, "id")));
    size_t want = text && size > (json_int_t)READ_TEXT_MAX ? READ_TEXT_MAX : (size_t)size, n = 0;
    _cleanup_close_ int fd = al_blob_open(s, json_string_value(json_object_get(a, "sha256")), (int64_t)size);
    /* one byte past WANT, so a cut sees the real byte after it */
    _cleanup_free_ char *data = malloc(want + 1);
    if (fd < 0 || !data)
        return -EIO;
    size_t got = 0;
    while (got < want + 1) {
        ssize_t r = read(fd, data + got, want + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    n = got < want ? got : want;
    if (text) {
        bool cut = got > want || (size_t)size > n;
        /* cut at a character boundary (data[n] is the first byte left
         * out: a continuation byte means the cut is inside a character);
         * bytes that are not UTF-8 make it binary after all */
        if (cut)
            n = al_utf8_cut(data, got, n);
        json_t *t = json_stringn(data, n);
        if (t) {
            *ret_cut = cut;
            *ret = json_pack("{s:s, s:s, s:o}", "uri", uri, "mimeType", type, "text", t);
            return 0;
        }
        if ((size_t)size > n)
            return -EFBIG;
    }
    _cleanup_free_ char *b64 = al_mcp_b64_of(data, n);
    if (!b64)
        return -ENOMEM;
    *ret = json_pack("{s:s, s:s, s:s}", "uri", uri, "mimeType", type, "blob", b64);
    /* an image a model can look at, when it is one */
    if (al_mcp_inline_image_type(type) && n <= INLINE_IMAGE_MAX && al_mcp_image_bytes_ok(type, data, n))
        json_object_set_new(*ret, "_image", json_true());
    return 0;
}

static json_t *read_artifact(al_service *s, const al_principal *p, json_t *args) {
    static const char *const keys[] = { "uri" };
    const char *bad = NULL;
    if (!only_keys(args, keys, ELEMENTSOF(keys), &bad))
        return al_mcp_tool_error("Unknown argument \"%s\". read_artifact takes uri.", bad);
    const char *uri = json_string_value(json_object_get(args, "uri"));
    if (!uri)
        return al_mcp_tool_error("read_artifact needs uri: airlock://artifacts/art_... (from code_execution or list_artifacts).");
    json_t *a = artifact_by_uri(s, p, uri);
    if (!a)
        return al_mcp_tool_error("No artifact %.200s in this workspace. list_artifacts shows a thread's files.", uri);
    const char *id = json_string_value(json_object_get(a, "id"));
    char line[1200];
    snprintf(line, sizeof line, "%s, version %lld, %lld bytes, %s.", json_string_value(json_object_get(a, "path")),
             (long long)json_integer_value(json_object_get(a, "version")),
             (long long)json_integer_value(json_object_get(a, "size")), json_string_value(json_object_get(a, "content_type")));
    al_utf8_fix(line); /* a long path, cut */
    json_t *res = NULL;
    bool cut = false;
    int r = artifact_resource(s, a, &res, &cut);
    if (r == -EFBIG) {
        json_t *e = al_mcp_tool_error("%s It is larger than read_artifact returns (%u KiB of text, %u MiB otherwise); fetch it "
                               "over HTTP with GET /v1/artifacts/%s/content.", line, READ_TEXT_MAX >> 10,
                               READ_BLOB_MAX >> 20, id);
        json_decref(a);
        return e;
    }
    if (r < 0) {
        json_decref(a);
        return al_mcp_tool_error("the content of %s is missing from the store", id);
    }
    if (cut)
        snprintf(line + strlen(line), sizeof line - strlen(line), " Only the first %zu bytes are shown.",
                 json_string_length(json_object_get(res, "text")));
    bool image = json_is_true(json_object_get(res, "_image"));
    json_object_del(res, "_image");
    json_t *content = json_pack("[o, {s:s, s:O}]", al_mcp_text_item(line), "type", "resource", "resource", res);
    if (image)
        json_array_append_new(content, json_pack("{s:s, s:O, s:O}", "type", "image", "data", json_object_get(res, "blob"),
                                                 "mimeType", json_object_get(res, "mimeType")));
    json_decref(res);
    json_t *out = json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent", al_mcp_artifact_brief(a), "isError", false);
    json_decref(a);
    return out;
}

/* ------------------------------------------------------------- resources */

json_t *al_mcp_resources_list(al_service *s, const al_principal *p) {
    al_error err = { 0 };
    /* the newest versions first: what a model most likely wants to look at */
    json_t *rows = al_view_artifacts_recent(s, p->workspace_id, RESOURCES_LIST_MAX, &err);
    json_t *out = json_array();
    size_t i;
    json_t *a;
    json_array_foreach(rows, i, a) {
        json_t *l = al_mcp_artifact_link(a);
        json_object_del(l, "type");
        json_array_append_new(out, l);
    }
    json_decref(rows);
    return out;
}

int al_mcp_resource_read(al_service *s, const al_principal *p, const char *uri, json_t **ret) {
    json_t *a = artifact_by_uri(s, p, uri);
    if (!a)
        return -ENOENT;
    json_t *res = NULL;
    bool cut = false;
    int r = artifact_resource(s, a, &res, &cut);
    json_decref(a);
    if (r < 0)
        return r;
    json_object_del(res, "_image");
    *ret = json_pack("{s:[o]}", "contents", res);
    return 0;
}

/* ---------------------------------------------------------------- skills */

static int run_skill_script(al_service *s, const al_principal *p, json_t *args, json_t *progress_token, al_idem *idem,
                            al_mcp_call **ret_call, json_t **ret_result) {
    static const char *const keys[] = { "skill", "entrypoint", "arguments", "thread", "network" };
    const char *bad = NULL;
    if (!only_keys(args, keys, ELEMENTSOF(keys), &bad)) {
        *ret_result = al_mcp_tool_error("Unknown argument \"%s\". run_skill_script takes skill, entrypoint, arguments, "
                                 "thread and network.", bad);
        return 0;
    }
    const char *skill = json_string_value(json_object_get(args, "skill"));
    const char *entrypoint = json_string_value(json_object_get(args, "entrypoint"));
    json_t *a = json_object_get(args, "arguments"), *thread = json_object_get(args, "thread");
    if (!skill || !entrypoint) {
        *ret_result = al_mcp_tool_error("run_skill_script needs skill and entrypoint (strings); the tool's description lists "
                                 "the skills here.");
        return 0;
    }
    if ((a && !json_is_object(a) && !json_is_null(a)) || (thread && !json_is_string(thread) && !json_is_null(thread))) {
        *ret_result = al_mcp_tool_error("arguments must be an object and thread a string.");
        return 0;
    }
    json_t *empty = json_object(), *doc = NULL;
    /* the one way a skill runs (REST's /v1/skills/{name}/run too): its
     * allow-list, argument schema, approval, credits and audit */
    json_t *net = json_object_get(args, "network");
    if (net && !json_is_null(net) && !json_is_string(net)) {
        json_decref(empty);
        *ret_result = al_mcp_tool_error("network must be a policy string, as code_execution takes it.");
        return 0;
    }
    al_skill_opts o = { .network = json_string_value(net), .via = "mcp", .mode = AL_SKILL_RUN, .idem = idem };
    al_status st = al_skill_run(s, p, skill, entrypoint, json_is_object(a) ? a : empty, json_string_value(thread), &o,
                                &doc);
    json_decref(empty);
    const char *id = json_string_value(json_object_get(doc, "id"));
    if ((st == AL_STATUS_OK || st == AL_STATUS_CREATED) && id) {
        char run_id[40];
        snprintf(run_id, sizeof run_id, "%s", id);
        json_decref(doc);
        return follow_run(s, p, run_id, progress_token, ret_call, ret_result);
    }
    json_t *e = json_object_get(doc, "error");
    const char *code = json_string_value(json_object_get(e, "code")) ?: "internal";
    const char *msg = json_string_value(json_object_get(e, "message")) ?: "the skill could not be run";
    if (strcmp(code, "tool_not_allowed") == 0)
        *ret_result = al_mcp_tool_error("run_skill_script is not allowed in this workspace (not on its tool allow-list).");
    else
        *ret_result = al_mcp_tool_error("The skill was not run (%s): %s", code, msg);
    json_decref(doc);
    return 0;
}

/* ------------------------------------------------------------------ call */

int al_mcp_tool_call(al_service *s, const al_principal *p, const char *name, json_t *args, json_t *progress_token,
                     al_idem *idem, al_mcp_call **ret_call, json_t **ret_result) {
    *ret_call = NULL;
    *ret_result = NULL;
    json_t *empty = NULL;
    if (!args || json_is_null(args))
        args = empty = json_object();
    int r = 0;
    if (!json_is_object(args))
        *ret_result = al_mcp_tool_error("arguments must be an object");
    else if (strcmp(name, "code_execution") == 0)
        r = code_execution(s, p, args, progress_token, idem, ret_call, ret_result);
    else if (strcmp(name, "list_artifacts") == 0)
        *ret_result = list_artifacts(s, p, args);
    else if (strcmp(name, "read_artifact") == 0)
        *ret_result = read_artifact(s, p, args);
    else if (strcmp(name, "run_skill_script") == 0) {
        r = run_skill_script(s, p, args, progress_token, idem, ret_call, ret_result);
    } else
        r = -ENOENT;
    json_decref(empty);
    return r;
}
