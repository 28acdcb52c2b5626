/* REST: the workspace as the console reads it (docs/api.md "The
 * workspace"): its people (GET /v1/persons), its threads (GET
 * /v1/threads) and its E2B sandboxes (GET /v1/sandboxes, a sandbox's files,
 * DELETE to kill one). Wire format onto the core's typed calls. */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/sandbox.h"
#include "../core/views.h"

#define THREADS_MAX 200
#define THREADS_WINDOWS 4

enum MHD_Result al_rest_persons(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_error err = { 0 };
    al_view_person *v = NULL;
    size_t n = 0;
    if (al_view_persons(x->s, x->p, &v, &n, &err) < 0)
        return al_reply_error(x->c, 500, "internal", "%s", err.msg);
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++)
        json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "id", v[i].id, "name", v[i].name, "role", v[i].role));
    al_view_persons_free(v, n);
    return al_reply_json(x->c, 200, out ? json_pack("{s:o}", "persons", out) : NULL);
}

enum MHD_Result al_rest_threads(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    uint64_t limit = 50, cursor;
    enum MHD_Result bad;
    static const char *const q[] = { "limit", "cursor" };
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &bad) || !al_req_page(c, THREADS_MAX, &limit, &cursor, &bad))
        return bad;
    al_error err = { 0 };
    al_view_thread *t = NULL;
    size_t n = 0;
    int64_t more = 0, from = (int64_t)cursor;
    /* a window of runs without a thread reads on to the next, a few at
     * most, so that a page is seldom empty and never costs much */
    for (int w = 0;; w++) {
        if (al_view_threads(x->s, x->p, from, (int64_t)limit + 1, &t, &n, &more, &err) < 0)
            return al_reply_error(c, 500, "internal", "%s", err.msg);
        if (n > 0 || more == 0 || w + 1 >= THREADS_WINDOWS)
            break;
        free(t);
        t = NULL;
        from = more;
    }
    json_t *out = json_array(), *next = json_null();
    for (size_t i = 0; out && i < n && i < limit; i++)
        json_array_append_new(out, json_pack("{s:s, s:I, s:I, s:s}", "id", t[i].id, "runs", (json_int_t)t[i].runs,
                                             "artifacts", (json_int_t)t[i].artifacts, "last_run_at",
                                             t[i].last_run_at));
    /* a full page goes on below its last thread; a page whose window of
     * runs ended first (fewer threads, maybe none) goes on below the
     * window, so a client pages on until next_cursor is null */
    if (n > limit || more > 0) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)(n > limit ? t[limit - 1].last_seq : more));
        next = json_string(buf);
    }
    free(t);
    return al_reply_json(c, 200, out ? json_pack("{s:o, s:o}", "threads", out, "next_cursor", next) : NULL);
}

/* ------------------------------------------------------------ sandboxes */

static enum MHD_Result sandbox_error(struct MHD_Connection *c, int r, const al_error *err) {
    if (r == -ENOENT)
        return al_reply_error(c, 404, "not_found", "%s", err->msg);
    if (r == -EPERM)
        return al_reply_error(c, 403, "forbidden", "%s", err->msg);
    /* a session box holds the files while it lives; a command left more
     * entries than a listing reads: both the sandbox's state, not a fault */
    if (r == -EBUSY)
        return al_reply_error(c, 409, "conflict", "%s", err->msg);
    if (r == -E2BIG)
        return al_reply_error(c, 422, "too_many_files", "%s", err->msg);
    return al_reply_error(c, 500, "internal", "%s", err->msg);
}

enum MHD_Result al_rest_sandboxes(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_error err = { 0 };
    al_sandbox_view *v = NULL;
    size_t n = 0;
    int r = al_sandbox_views(x->s, x->p, &v, &n, &err);
    if (r < 0)
        return sandbox_error(x->c, r, &err);
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        const al_sandbox *sb = &v[i].sb;
        json_array_append_new(out, json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:I, s:I}", "id", sb->id, "state",
                                             al_sandbox_state_name(sb->state), "person", "id", sb->owner.person_id,
                                             "name", sb->owner_name, "created_at", sb->started_at, "end_at",
                                             sb->end_at, "files", (json_int_t)v[i].files, "bytes",
                                             (json_int_t)sb->bytes));
    }
    al_sandbox_views_free(v, n);
    return al_reply_json(x->c, 200, out ? json_pack("{s:o}", "sandboxes", out) : NULL);
}

enum MHD_Result al_rest_sandbox_files(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_error err = { 0 };
    al_sandbox_file *f = NULL;
    size_t n = 0;
    int r = al_sandbox_files(x->s, x->p, x->arg[0], &f, &n, &err);
    if (r < 0)
        return sandbox_error(x->c, r, &err);
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++)
        json_array_append_new(out, json_pack("{s:s, s:I}", "path", f[i].path, "size", (json_int_t)f[i].size));
    free(f);
    return al_reply_json(x->c, 200, out ? json_pack("{s:o}", "files", out) : NULL);
}

enum MHD_Result al_rest_sandbox_kill(al_route_ctx *x) {
    al_error err = { 0 };
    int r = al_sandbox_kill_by(x->s, x->p, x->arg[0], &err);
    return r < 0 ? sandbox_error(x->c, r, &err) : al_reply_empty(x->c, 204, NULL, NULL);
}
