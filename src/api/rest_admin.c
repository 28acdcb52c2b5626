/* REST: the workspace's audit trail (GET /v1/audit) and its signed
 * checkpoints (GET /v1/audit/checkpoint). */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/checkpoint.h"
#include "../core/views.h"

enum MHD_Result al_rest_audit(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    al_error err = { 0 };
    al_view_audit_filter f = {
        .kind = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "kind"),
        .person_id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "person_id"),
        .run_id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run_id"),
        .from = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from"),
        .to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to"),
    };
    uint64_t limit = 100, cursor;
    enum MHD_Result bad;
    static const char *const q[] = { "kind", "person_id", "run_id", "from", "to", "limit", "cursor", "format" };
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &bad) || !al_req_page(c, 1000, &limit, &cursor, &bad))
        return bad;
    if ((f.from && !al_rfc3339_valid(f.from)) || (f.to && !al_rfc3339_valid(f.to)))
        return al_reply_error(c, 400, "bad_request", "from and to are RFC 3339 UTC times (2026-01-31T12:00:00Z)");
    const char *format = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "format");
    if (format && strcmp(format, "json") != 0 && strcmp(format, "ndjson") != 0)
        return al_reply_error(c, 400, "bad_request", "format must be json (a page, the default) or ndjson (an export)");
    f.before_seq = (int64_t)cursor;
    /* the export: every event the filter names, one a line, newest first
     * (rest_audit_export.c) */
    if (format && strcmp(format, "ndjson") == 0)
        return al_rest_audit_export(x, &f);
    f.limit = (int64_t)limit + 1;
    json_t *rows = al_rest_audit_rows(x->s, x->p, &f, &err);
    if (!rows)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    json_t *next = json_null();
    if (json_array_size(rows) > limit) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)json_integer_value(json_object_get(json_array_get(rows, limit - 1), "seq")));
        next = json_string(b);
        json_array_remove(rows, limit);
    }
    return al_reply_json(c, 200, json_pack("{s:o, s:o}", "events", rows, "next_cursor", next));
}

/* GET /v1/audit/checkpoint: the workspace's head, signed now, for a copy
 * kept outside the store (checkpoint.h). */
enum MHD_Result al_rest_audit_checkpoint(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    if (!al_req_is_admin(x->p))
        return al_reply_error(c, 403, "forbidden", "only admins may take the audit trail's checkpoints");
    al_error err = { 0 };
    char *text = NULL, v[AL_CHECKPOINT_VERIFIER_MAX];
    al_audit_head h;
    int r = al_checkpointer_sign_now(x->s, x->p->workspace_id, &text, &h, &err);
    if (r == -ENOENT || r == -ESTALE)
        return al_reply_error(c, r == -ENOENT ? 404 : 409, r == -ENOENT ? "not_found" : "conflict", "%s", err.msg);
    if (r < 0)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    al_checkpointer_verifier(x->s, v);
    json_t *doc = json_pack("{s:s, s:I, s:s, s:s, s:s}", "workspace_id", h.workspace_id, "seq", (json_int_t)h.seq,
                            "hash", h.hash, "checkpoint", text, "verifier_key", v);
    free(text);
    return al_reply_json(c, 200, doc);
}
