/*
 * A box's result as JSON: what `airlock run --json` prints and the
 * helper's "result" event carries, its text made valid UTF-8 and its
 * bytes kept exactly where the text is not them.
 */
#include <nettle/base64.h>
#include <string.h>

#include "box_result.h"

json_t *al_box_result_text(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(len * 3 + 1);
    if (!out)
        return json_null();
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t k = al_utf8_seq(u + i, len - i);
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

json_t *al_box_result_base64(const char *s, size_t len) {
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!out)
        return json_null();
    base64_encode_raw(out, len, (const uint8_t *)s);
    json_t *j = json_stringn(out, BASE64_ENCODE_RAW_LENGTH(len));
    free(out);
    return j ? j : json_null();
}

/* Whether al_box_result_text(S, LEN) is S exactly and holds no NUL. */
static bool text_exact(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t k = u[i] ? al_utf8_seq(u + i, len - i) : 0;
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

static json_t *control_json(const al_control *c) {
    return json_pack("{s:s, s:s}", "level", al_level_name(c->level), "detail", c->detail);
}

json_t *al_box_result_json(const al_box_result *r, const al_runtime *rt) {
    json_t *arts = json_array(), *skips = json_array();
    /* An artifact's path is how the service finds its file: it is carried
     * exactly or not at all, never through a lossy conversion that could
     * make two names one (collect keeps only UTF-8 names; this holds it). */
    for (size_t i = 0; i < r->n_artifacts; i++) {
        json_t *p = json_string(r->artifacts[i].path);
        if (p)
            json_array_append_new(arts, json_pack("{s:o, s:I, s:s}", "path", p, "size", (json_int_t)r->artifacts[i].size,
                                                  "sha256", r->artifacts[i].sha256));
        else
            json_array_append_new(skips, json_pack("{s:o, s:s}", "path",
                                                   al_box_result_text(r->artifacts[i].path, strlen(r->artifacts[i].path)), "why",
                                                   "name is not valid UTF-8 (not kept)"));
    }
    for (size_t i = 0; i < r->n_skipped; i++)
        json_array_append_new(skips, json_pack("{s:o, s:s}", "path",
                                               al_box_result_text(r->skipped[i].path, strlen(r->skipped[i].path)),
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
        "stdout", al_box_result_text(r->out[0] ? r->out[0] : "", r->out_len[0]),
        "stderr", al_box_result_text(r->out[1] ? r->out[1] : "", r->out_len[1]),
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
            json_object_set_new(doc, i ? "stderr_base64" : "stdout_base64", al_box_result_base64(r->out[i], r->out_len[i]));
    /* which driver ran it, and for a container which runtime and image */
    json_t *box = json_object_get(doc, "box");
    json_object_set_new(box, "driver", json_string(r->driver[0] ? r->driver : "native"));
    if (r->forked)
        json_object_set_new(box, "forked", json_true());
    /* a sandbox's run: its /work came back whole (the core swaps it in) */
    if (r->work_collected)
        json_object_set_new(box, "work_collected", json_true());
    if (r->driver[0]) {
        json_object_set_new(box, "engine_runtime", json_string(r->engine_runtime));
        json_object_set_new(box, "engine_image", json_string(r->engine_image));
        json_object_set_new(box, "pooled", json_boolean(r->pooled));
    }
    if (doc && r->reason == AL_REASON_ERROR)
        json_object_set_new(doc, "error", json_pack("{s:s, s:i, s:s}", "step", r->error.step, "errno", r->error.err,
                                                    "message", r->error.msg));
    return doc;
}
