/* REST: what one run was given and did, for a person reviewing it: its
 * trace (GET /v1/runs/{id}/trace) and its inputs' bytes while it holds them
 * (GET /v1/runs/{id}/inputs/{stdin|N}). */
#include <string.h>
#include <unistd.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "status.h"
#include "../core/views.h"

/* V, or JSON's null where there is nothing (for json_pack's O) */
static json_t *or_null(json_t *v) { return v ? v : json_null(); }

/* The audit events of run ID, oldest first (it reads as a story). */
static json_t *decisions_of(al_route_ctx *x, const char *id) {
    al_error err = { 0 };
    al_view_audit_filter f = { .run_id = id, .before_seq = INT64_MAX, .limit = 1000 };
    json_t *decisions = al_rest_audit_rows(x->s, x->p, &f, &err);
    if (!decisions)
        return json_array();
    json_t *rev = json_array();
    for (size_t i = json_array_size(decisions); i > 0; i--)
        json_array_append(rev, json_array_get(decisions, i - 1));
    json_decref(decisions);
    return rev;
}

static json_t *trace_doc(al_route_ctx *x, const al_view_run *row) {
    json_t *rj = al_run_json(x->s, row);
    json_t *decisions = decisions_of(x, row->id);
    json_t *inputs = al_json_text(row->inputs);
    /* a run that never reached its box (denied, expired, refused at
     * provisioning) has a null result: what is known is answered, and
     * what is not is null, never a 500 */
    json_t *result = json_is_object(json_object_get(rj, "result")) ? json_object_get(rj, "result") : NULL;
    json_t *in_arts = json_object_get(inputs, "artifacts");
    json_t *doc = json_pack("{s:O, s:{s:s?, s:s?, s:s?, s:O, s:o}, s:{s:O, s:O, s:O, s:O, s:O}, s:o, s:{s:O, s:O, s:O, s:O}}",
                            "run", rj ? rj : json_null(),
                            "input", "language", row->language, "code", row->code,
                            "network", row->network, "limits", or_null(json_object_get(rj, "limits")),
                            "artifacts", json_is_array(in_arts) ? json_incref(in_arts) : json_array(),
                            "output", "stdout", or_null(json_object_get(result, "stdout")),
                            "stderr", or_null(json_object_get(result, "stderr")),
                            "exit_code", or_null(json_object_get(result, "exit_code")),
                            "artifacts", or_null(json_object_get(rj, "artifacts")),
                            "redactions", or_null(json_object_get(rj, "redactions")),
                            "decisions", decisions,
                            "timing", "created_at", or_null(json_object_get(rj, "created_at")), "started_at",
                            or_null(json_object_get(rj, "started_at")), "finished_at",
                            or_null(json_object_get(rj, "finished_at")),
                            "wall_ms", or_null(json_object_get(result, "wall_ms")));
    /* output is bytes: the exact ones too, where the text is not them */
    static const char *const exact[] = { "stdout_base64", "stderr_base64" };
    for (size_t i = 0; doc && result && i < ELEMENTSOF(exact); i++)
        if (json_is_string(json_object_get(result, exact[i])))
            json_object_set(json_object_get(doc, "output"), exact[i], json_object_get(result, exact[i]));
    json_decref(inputs);
    json_decref(rj);
    return doc;
}

enum MHD_Result al_rest_runs_trace(al_route_ctx *x) {
    const char *id = x->arg[0];
    al_view_run *row = al_view_run_load(x->s, x->p, id);
    if (!row)
        return al_reply_error(x->c, 404, "not_found", "no run %s", id);
    if (row->expired_at[0]) { /* its input and output are gone: 410 and the summary */
        al_view_run_free(row);
        json_t *doc = NULL;
        al_status st = al_run_view(x->s, x->p, id, &doc);
        return al_reply_json(x->c, al_status_http(st), doc);
    }
    json_t *doc = trace_doc(x, row);
    al_view_run_free(row);
    return doc ? al_reply_json(x->c, 200, doc) : al_reply_error(x->c, 500, "internal", "cannot build the trace");
}

/* The bytes of one input of a run of this workspace (an approval card's
 * inputs[].url), while the run holds them (until it ends). */
enum MHD_Result al_rest_runs_input(al_route_ctx *x) {
    const char *id = x->arg[0], *which = x->arg[1];
    struct MHD_Connection *c = x->c;
    al_view_run *row = al_view_run_load(x->s, x->p, id);
    if (!row)
        return al_reply_error(c, 404, "not_found", "no run %s", id);
    bool ended = al_run_state_ended(row->state);
    al_view_run_free(row);
    al_error err = { 0 };
    int fd = -1;
    uint64_t size = 0;
    char *name = NULL;
    int r = ended ? -ENOENT : al_run_input_open(x->s, id, which, &fd, &size, &name, &err);
    if (r == -ENOENT)
        return ended ? al_reply_error(c, 410, "gone", "run %s has ended: its inputs are not kept", id)
                     : al_reply_error(c, 404, "not_found", "%s", err.msg);
    if (r < 0)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    free(name);
    struct MHD_Response *resp = MHD_create_response_from_fd64(size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "Content-Disposition", "attachment");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}
