#include <nettle/base64.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at S (1-4), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    if (s[0] < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if ((s[0] & 0xe0) == 0xc0) { len = 2; cp = s[0] & 0x1f; }
    else if ((s[0] & 0xf0) == 0xe0) { len = 3; cp = s[0] & 0x0f; }
    else if ((s[0] & 0xf8) == 0xf0) { len = 4; cp = s[0] & 0x07; }
    else return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    return len;
}

json_t *cli_string(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(len * 3 + 1);
    if (!out)
        return json_null();
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(u + i, len - i);
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, s + i, k);
            o += k;
            i += k;
        }
    }
    json_t *j = json_stringn(out, o);
    free(out);
    return j ? j : json_null();
}

json_t *cli_base64(const char *s, size_t len) {
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!out)
        return json_null();
    base64_encode_raw(out, len, (const uint8_t *)s);
    json_t *j = json_stringn(out, BASE64_ENCODE_RAW_LENGTH(len));
    free(out);
    return j ? j : json_null();
}

/* Whether cli_string(S, LEN) is S exactly and holds no NUL. */
static bool text_exact(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = u[i] ? utf8_seq(u + i, len - i) : 0;
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

void cli_write_safe(FILE *f, const char *buf, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
            fputc(c, f);
        else if (c == 0x1b)
            fputs("^[", f);
        else if (c < 0x20)
            fprintf(f, "^%c", c + '@');
        else
            fputs("^?", f);
    }
}

static json_t *control_json(const al_control *c) {
    return json_pack("{s:s, s:s}", "level", al_level_name(c->level), "detail", c->detail);
}

json_t *cli_result_json(const al_box_result *r, const al_runtime *rt) {
    json_t *arts = json_array(), *skips = json_array();
    for (size_t i = 0; i < r->n_artifacts; i++)
        json_array_append_new(arts, json_pack("{s:o, s:I, s:s}", "path",
                                              cli_string(r->artifacts[i].path, strlen(r->artifacts[i].path)),
                                              "size", (json_int_t)r->artifacts[i].size, "sha256", r->artifacts[i].sha256));
    for (size_t i = 0; i < r->n_skipped; i++)
        json_array_append_new(skips, json_pack("{s:o, s:s}", "path",
                                               cli_string(r->skipped[i].path, strlen(r->skipped[i].path)),
                                               "why", r->skipped[i].why));
    const al_controls *c = &r->controls;
    json_t *controls = json_pack(
        "{s:o, s:{s:s, s:o, s:o, s:o}, s:o, s:I, s:b, s:o, s:o, s:o, s:o}",
        "seccomp", control_json(&c->seccomp),
        "cgroup", "version", c->cgroup_version, "memory", control_json(&c->memory), "pids",
        control_json(&c->pids), "cpu", control_json(&c->cpu),
        "userns", control_json(&c->userns),
        "host_uid", (json_int_t)c->host_uid,
        "host_uid_unique", c->host_uid_unique,
        "network", control_json(&c->network),
        "no_new_privs", control_json(&c->no_new_privs),
        "capabilities", control_json(&c->caps),
        "tmpfs", control_json(&c->tmpfs));
    json_t *doc = json_pack(
        "{s:o, s:o, s:s, s:o, s:o, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:{s:I, s:s, s:I, s:s}}",
        "exit_code", r->exit_code >= 0 ? json_integer(r->exit_code) : json_null(),
        "signal", r->signal ? json_integer(r->signal) : json_null(),
        "reason", al_reason_name(r->reason),
        "stdout", cli_string(r->out[0] ? r->out[0] : "", r->out_len[0]),
        "stderr", cli_string(r->out[1] ? r->out[1] : "", r->out_len[1]),
        "stdout_truncated", r->out_truncated[0],
        "stderr_truncated", r->out_truncated[1],
        "stdout_bytes", (json_int_t)r->out_total[0],
        "stderr_bytes", (json_int_t)r->out_total[1],
        "wall_ms", (json_int_t)r->wall_ms,
        "cpu_ms", (json_int_t)r->cpu_ms,
        "peak_memory_bytes", (json_int_t)r->peak_memory_bytes,
        "artifacts", arts,
        "skipped", skips,
        "controls", controls,
        "box", "host_uid", (json_int_t)c->host_uid, "cgroup", r->cgroup_path, "init_pid", (json_int_t)r->init_pid,
        "runtime", rt ? rt->name : "host");
    /* output is bytes: where the text is not them exactly (not UTF-8, or a
     * NUL), the exact bytes too */
    for (int i = 0; doc && i < 2; i++)
        if (!text_exact(r->out[i] ? r->out[i] : "", r->out_len[i]))
            json_object_set_new(doc, i ? "stderr_base64" : "stdout_base64", cli_base64(r->out[i], r->out_len[i]));
    if (doc && r->reason == AL_REASON_ERROR)
        json_object_set_new(doc, "error", json_pack("{s:s, s:i, s:s}", "step", r->error.step, "errno", r->error.err,
                                                    "message", r->error.msg));
    return doc;
}
