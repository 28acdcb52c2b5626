/* What MCP's tools answer with (mcp_results.h): text items, tool errors,
 * artifacts as links, and a run's end as a model reads it. */
#include <nettle/base64.h>
#include <string.h>

#include "../core/packages.h"
#include "mcp_results.h"

#define OUTPUT_TEXT_MAX (64u << 10)  /* per stream, in the result's text */
#define INLINE_IMAGES_MAX 8

json_t *al_mcp_text_item(const char *text) { return json_pack("{s:s, s:s}", "type", "text", "text", text); }

json_t *al_mcp_tool_error(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    al_utf8_fix(msg); /* it may quote arguments, cut at a byte count */
    return json_pack("{s:[o], s:b}", "content", al_mcp_text_item(msg), "isError", true);
}

/* Append at most MAX bytes of S to B, cut at a character boundary. */
static void append_capped(char **b, size_t *len, size_t *cap, const char *s, size_t n, size_t max, bool *cut) {
    if (n > max) {
        n = al_utf8_cut(s, n, max);
        *cut = true;
    }
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *nb = realloc(*b, nc);
        if (!nb)
            return;
        *b = nb;
        *cap = nc;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = '\0';
}

void al_mcp_append_str(char **b, size_t *len, size_t *cap, const char *s) {
    bool cut = false;
    append_capped(b, len, cap, s, strlen(s), SIZE_MAX, &cut);
}

char *al_mcp_b64_of(const char *data, size_t n) {
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
    if (!out)
        return NULL;
    base64_encode_raw(out, n, (const uint8_t *)data);
    out[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
    return out;
}

bool al_mcp_inline_image_type(const char *t) {
    return t && (strcmp(t, "image/png") == 0 || strcmp(t, "image/jpeg") == 0);
}

/* Only bytes that start as the type says go inline as an image: a client
 * hands images to its model's API, which may refuse the whole request over
 * one that does not decode. A file named .png that is not one stays a link. */
bool al_mcp_image_bytes_ok(const char *type, const char *data, size_t n) {
    if (strcmp(type, "image/png") == 0)
        return n >= 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0;
    return n >= 3 && memcmp(data, "\xff\xd8\xff", 3) == 0;
}

/* The same, for base64 text: the encodings of those first bytes. */
static bool image_b64_ok(const char *type, const char *b64) {
    return strncmp(b64, strcmp(type, "image/png") == 0 ? "iVBORw0KGgo" : "/9j/", strcmp(type, "image/png") == 0 ? 11 : 4) == 0;
}

json_t *al_mcp_artifact_link(json_t *a) {
    char uri[128];
    snprintf(uri, sizeof uri, URI_PREFIX "%s", json_string_value(json_object_get(a, "id")));
    char desc[600];
    snprintf(desc, sizeof desc, "version %lld of %s, written by %s",
             (long long)json_integer_value(json_object_get(a, "version")), json_string_value(json_object_get(a, "path")),
             json_string_value(json_object_get(a, "run_id")));
    return json_pack("{s:s, s:s, s:O, s:O, s:O, s:s}", "type", "resource_link", "uri", uri, "name",
                     json_object_get(a, "path"), "mimeType", json_object_get(a, "content_type"), "size",
                     json_object_get(a, "size"), "description", desc);
}

json_t *al_mcp_artifact_brief(json_t *a) {
    char uri[128];
    snprintf(uri, sizeof uri, URI_PREFIX "%s", json_string_value(json_object_get(a, "id")));
    return json_pack("{s:O, s:s, s:O, s:O, s:O, s:O, s:O}", "id", json_object_get(a, "id"), "uri", uri, "path",
                     json_object_get(a, "path"), "version", json_object_get(a, "version"), "size",
                     json_object_get(a, "size"), "content_type", json_object_get(a, "content_type"), "thread_id",
                     json_object_get(a, "thread_id"));
}

/* An artifact's bytes when it is at most MAX; NULL otherwise. */
static char *artifact_bytes(al_service *s, json_t *a, size_t max, size_t *ret_len) {
    json_int_t size = json_integer_value(json_object_get(a, "size"));
    if (size < 0 || (uint64_t)size > max)
        return NULL;
    _cleanup_close_ int fd = al_blob_open(s, json_string_value(json_object_get(a, "sha256")), size);
    char *buf = fd < 0 ? NULL : malloc((size_t)size + 1);
    size_t got = 0;
    while (buf && got < (size_t)size) {
        ssize_t n = pread(fd, buf + got, (size_t)size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (!buf || got != (size_t)size) {
        free(buf);
        return NULL;
    }
    buf[got] = '\0';
    *ret_len = got;
    return buf;
}

static const char *ended_how(const char *state) {
    static const struct { const char *state, *how; } m[] = {
        { "succeeded", "succeeded" }, { "failed", "failed" }, { "timed_out", "was killed at its time limit" },
        { "killed", "was killed at a resource limit" }, { "canceled", "was canceled" },
        { "error", "could not run (airlock's own failure)" }, { "denied", "was not approved and did not run" },
    };
    for (size_t i = 0; i < ELEMENTSOF(m); i++)
        if (strcmp(state, m[i].state) == 0)
            return m[i].how;
    return state;
}

/* The CallToolResult of an ended run. */
json_t *al_mcp_run_result(al_service *s, json_t *run) {
    const char *id = json_string_value(json_object_get(run, "id"));
    const char *state = json_string_value(json_object_get(run, "state")) ?: "error";
    json_t *r = json_object_get(run, "result");
    json_t *error = json_object_get(run, "error");
    char *b = NULL;
    size_t len = 0, cap = 0;
    char line[1400];
    snprintf(line, sizeof line, "Run %s %s", id, ended_how(state));
    al_mcp_append_str(&b, &len, &cap, line);
    if (json_is_object(r)) {
        json_t *code = json_object_get(r, "exit_code"), *sig = json_object_get(r, "signal");
        if (json_is_integer(code))
            snprintf(line, sizeof line, " (exit code %lld", (long long)json_integer_value(code));
        else if (json_is_integer(sig))
            snprintf(line, sizeof line, " (signal %lld", (long long)json_integer_value(sig));
        else
            snprintf(line, sizeof line, " (");
        al_mcp_append_str(&b, &len, &cap, line);
        snprintf(line, sizeof line, "%sreason: %s, %lld ms).", line[2] == '\0' ? "" : ", ",
                 json_string_value(json_object_get(r, "reason")) ?: "?",
                 (long long)json_integer_value(json_object_get(r, "wall_ms")));
        al_mcp_append_str(&b, &len, &cap, line);
    } else {
        al_mcp_append_str(&b, &len, &cap, ".");
    }
    if (json_is_object(error)) {
        snprintf(line, sizeof line, " %s: %s", json_string_value(json_object_get(error, "code")) ?: "error",
                 json_string_value(json_object_get(error, "message")) ?: "");
        al_mcp_append_str(&b, &len, &cap, line);
    }
    /* a failed install says why (its message: pip's or npm's words) and
     * what the agent does with it, as the refusals before it do: an
     * agent told only "install_failed" reaches for something else */
    const char *rmsg = json_is_object(r) ? al_packages_install_failure(r) : NULL;
    if (rmsg) {
        snprintf(line, sizeof line, " The packages could not be installed: %.1200s. " AL_PACKAGES_FAILED_TELL ".",
                 rmsg);
        al_mcp_append_str(&b, &len, &cap, line);
    }
    static const char *const streams[] = { "stdout", "stderr" };
    for (size_t i = 0; json_is_object(r) && i < 2; i++) {
        json_t *t = json_object_get(r, streams[i]);
        if (!json_is_string(t) || json_string_length(t) == 0)
            continue;
        bool cut = json_is_true(json_object_get(r, i == 0 ? "stdout_truncated" : "stderr_truncated"));
        snprintf(line, sizeof line, "\n\n%s:\n", streams[i]);
        al_mcp_append_str(&b, &len, &cap, line);
        append_capped(&b, &len, &cap, json_string_value(t), json_string_length(t), OUTPUT_TEXT_MAX, &cut);
        if (cut)
            al_mcp_append_str(&b, &len, &cap, "\n[output cut here: it was longer than the cap]");
    }
    json_t *content = json_array(), *briefs = json_array();
    json_t *arts = json_object_get(run, "artifacts");
    if (json_array_size(arts)) {
        al_mcp_append_str(&b, &len, &cap, "\n\nFiles written (read them with read_artifact):");
        size_t i;
        json_t *a;
        json_array_foreach(arts, i, a) {
            snprintf(line, sizeof line, "\n- %s (%lld bytes, %s): " URI_PREFIX "%s",
                     json_string_value(json_object_get(a, "path")), (long long)json_integer_value(json_object_get(a, "size")),
                     json_string_value(json_object_get(a, "content_type")), json_string_value(json_object_get(a, "id")));
            al_mcp_append_str(&b, &len, &cap, line);
            json_array_append_new(briefs, al_mcp_artifact_brief(a));
        }
    }
    json_array_append_new(content, al_mcp_text_item(b ? b : ""));
    free(b);
    size_t i, images = 0;
    json_t *a;
    json_array_foreach(arts, i, a) json_array_append_new(content, al_mcp_artifact_link(a));
    /* small images inline, so a model sees its chart without another call */
    json_array_foreach(arts, i, a) {
        const char *type = json_string_value(json_object_get(a, "content_type"));
        if (images >= INLINE_IMAGES_MAX || !al_mcp_inline_image_type(type) ||
            json_integer_value(json_object_get(a, "size")) > (json_int_t)INLINE_IMAGE_MAX)
            continue;
        size_t n = 0;
        _cleanup_free_ char *data = artifact_bytes(s, a, INLINE_IMAGE_MAX, &n);
        _cleanup_free_ char *b64 = data && al_mcp_image_bytes_ok(type, data, n) ? al_mcp_b64_of(data, n) : NULL;
        if (b64) {
            json_array_append_new(content, json_pack("{s:s, s:s, s:s}", "type", "image", "data", b64, "mimeType", type));
            images++;
        }
    }
    json_array_foreach(json_object_get(run, "previews"), i, a) {
        const char *type = json_string_value(json_object_get(a, "content_type"));
        json_t *data = json_object_get(a, "content_base64");
        if (images >= INLINE_IMAGES_MAX || !al_mcp_inline_image_type(type) || !json_is_string(data) ||
            json_integer_value(json_object_get(a, "size")) > (json_int_t)INLINE_IMAGE_MAX ||
            !image_b64_ok(type, json_string_value(data)))
            continue;
        json_array_append_new(content, json_pack("{s:s, s:O, s:s}", "type", "image", "data", data, "mimeType", type));
        images++;
    }
    json_t *structured = json_pack("{s:s, s:s, s:O, s:o, s:o, s:o, s:o, s:o}", "run_id", id, "state", state, "network",
                                   json_object_get(run, "network"), "exit_code",
                                   json_is_object(r) ? json_incref(json_object_get(r, "exit_code")) : json_null(),
                                   "reason", json_is_object(r) ? json_incref(json_object_get(r, "reason")) : json_null(),
                                   "thread", json_incref(json_object_get(run, "thread_id")), "artifacts", briefs,
                                   "error", json_incref(error));
    return json_pack("{s:o, s:o, s:b}", "content", content, "structuredContent", structured, "isError",
                     strcmp(state, "succeeded") != 0);
}
