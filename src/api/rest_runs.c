/* REST: runs (docs/api.md "Runs"): create, list, read, trace, inputs,
 * approve, deny, cancel. Wire format onto the core's typed calls. */
#include <string.h>

#include "piston.h"
#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "run_body.h"
#include "status.h"
#include "../core/views.h"
#include "../util/json_keys.h"

#define LIST_MAX 200

enum MHD_Result al_rest_start_run(al_route_ctx *x, al_run_spec *sp, al_run_extra *ex, const char *const *piston,
                                  al_idem *idem) {
    /* a wait holds a connection (and a thread) until the run ends */
    if (ex->wait && !al_service_hold(x->s, x->p->person_id, AL_HOLD_WAIT))
        return al_reply_too_many(x->c, "waits", al_view_config(x->s)->waits_per_person, "waits_per_person");
    json_t *doc = NULL;
    ex->idem = idem;
    unsigned status = al_status_http(al_run_create(x->s, x->p, sp, ex, &doc));
    if (ex->wait)
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_WAIT);
    return al_reply_doc_idem(x->c, status, status == 200 && piston ? al_piston_result(doc, piston[0], piston[1]) : doc,
                             idem);
}

/* POST /v1/runs: its body read into a run spec (run_body.c). */
enum MHD_Result al_rest_runs_create(al_route_ctx *x) {
    if (x->rq->too_large)
        return al_req_too_large(x, "the body");
    enum MHD_Result bad;
    json_t *body = al_req_body_json(x, "a JSON object", &bad);
    if (!body)
        return bad;
    al_idem idem;
    al_run_extra ex = { .via = "rest" };
    if (!al_req_idem(x->c, "POST /v1/runs", body, NULL, 0, &idem, &bad) || !al_req_wait(x->c, false, &ex, &bad)) {
        json_decref(body);
        return bad;
    }
    al_run_spec sp;
    char msg[600];
    const char *code = NULL;
    al_status st = al_run_body_parse(body, &sp, msg, sizeof msg, &code);
    json_decref(body);
    if (st != AL_STATUS_OK)
        return al_reply_error(x->c, al_status_http(st), code, "%s", msg);
    enum MHD_Result ret = al_rest_start_run(x, &sp, &ex, NULL, &idem);
    al_run_spec_free(&sp);
    return ret;
}

enum MHD_Result al_rest_runs_list(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    al_error err = { 0 };
    const char *state = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "state");
    const char *thread = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "thread_id");
    const char *person = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "person_id");
    const char *via = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "via");
    const char *key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key_id");
    uint64_t limit = 50, cursor;
    enum MHD_Result bad;
    static const char *const q[] = { "state", "thread_id", "person_id", "via", "key_id", "limit", "cursor" };
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &bad) || !al_req_page(c, LIST_MAX, &limit, &cursor, &bad))
        return bad;
    al_run_state want = state ? al_run_state_from_name(state) : _AL_RUN_STATE_INVALID;
    if (state && want == _AL_RUN_STATE_INVALID)
        return al_reply_error(c, 400, "bad_request", "state must be one of pending_approval, queued, provisioning, "
                              "running, succeeded, failed, timed_out, killed, canceled, error, denied");
    if (thread && !al_valid_thread_id(thread))
        return al_reply_error(c, 400, "bad_request", AL_RUN_RULE_THREAD_ID);
    if (via && !al_run_via_valid(via))
        return al_reply_error(c, 400, "bad_request", "via must be one of rest, mcp, piston, e2b");
    /* a person id is matched as it is (one of another workspace matches
     * nothing); only its length is bounded */
    if (person && (!person[0] || strlen(person) >= 40))
        return al_reply_error(c, 400, "bad_request", "person_id must be a person's id (GET /v1/persons)");
    /* a key id likewise: the workspace's runs only are searched, so one of
     * another workspace finds nothing */
    if (key && (!key[0] || strlen(key) >= 40))
        return al_reply_error(c, 400, "bad_request", "key_id must be an API key's id (GET /v1/keys)");
    /* summaries only: a page of full runs held 20 MiB per run in the daemon */
    al_view_run_brief *runs = NULL;
    size_t nruns = 0;
    al_view_run_query rq = { .state = want, .thread_id = thread, .person_id = person, .via = via, .key_id = key,
                             .before = (int64_t)cursor, .limit = (int64_t)limit + 1 };
    if (al_view_runs_find(x->s, x->p, &rq, &runs, &nruns, &err) < 0)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    json_t *out = json_array(), *next = json_null();
    for (size_t i = 0; i < nruns && i < limit; i++)
        json_array_append_new(out, al_run_summary_json(&runs[i]));
    if (nruns > limit) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)runs[limit - 1].run.seq);
        next = json_string(buf);
    }
    al_view_run_briefs_free(runs, nruns);
    return al_reply_json(c, 200, json_pack("{s:o, s:o}", "runs", out, "next_cursor", next));
}

enum MHD_Result al_rest_runs_get(al_route_ctx *x) {
    json_t *doc = NULL;
    al_status st = al_run_view(x->s, x->p, x->arg[0], &doc);
    return al_reply_json(x->c, al_status_http(st), doc);
}

/* ------------------------------------------------------------- decisions */

/* The body of a decision ({hash, reason}) into *RET; NULL *RET and a 400 or
 * 413 queued in *BAD when it is not one. */
static bool decision_body(al_route_ctx *x, json_t **ret, enum MHD_Result *bad) {
    *ret = NULL;
    /* a body past the cap was not kept: reading it as {} would skip the
     * hash the approver sent */
    if (x->rq->too_large) {
        *bad = al_req_too_large(x, "the body");
        return false;
    }
    json_t *b = al_req_body_object(x->rq);
    if (!json_is_object(b)) {
        json_decref(b);
        *bad = al_reply_error(x->c, 400, "bad_request", "the body must be a JSON object ({hash, reason})");
        return false;
    }
    static const char *const keys[] = { "hash", "reason" };
    char msg[300];
    if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys), msg, sizeof msg)) {
        json_decref(b);
        *bad = al_reply_error(x->c, 400, "bad_request", "%s", msg);
        return false;
    }
    json_t *hash = json_object_get(b, "hash"), *reason = json_object_get(b, "reason");
    if ((hash && !json_is_string(hash) && !json_is_null(hash)) ||
        (reason && !json_is_string(reason) && !json_is_null(reason)) ||
        (json_is_string(reason) && json_string_length(reason) > 2000)) {
        json_decref(b);
        *bad = al_reply_error(x->c, 400, "bad_request", "hash and reason must be strings (reason at most 2000 bytes)");
        return false;
    }
    *ret = b;
    return true;
}

static enum MHD_Result decide(al_route_ctx *x, bool approve) {
    struct MHD_Connection *c = x->c;
    const char *id = x->arg[0];
    al_view_run *row = al_view_run_load(x->s, x->p, id);
    if (!row)
        return al_reply_error(c, 404, "not_found", "no run %s", id);
    if (!al_req_decides(x->p)) {
        al_view_run_free(row);
        return al_reply_error(c, 403, "forbidden", "only admins and approvers may decide approvals");
    }
    json_t *b;
    enum MHD_Result bad;
    if (!decision_body(x, &b, &bad)) {
        al_view_run_free(row);
        return bad;
    }
    al_error err = { 0 };
    int r = al_service_decide(x->s, row, x->p->person_id, approve, json_string_value(json_object_get(b, "hash")),
                              json_string_value(json_object_get(b, "reason")), &err);
    json_decref(b);
    al_view_run_free(row);
    if (r == -EPERM)
        return al_reply_error(c, 403, "separation_of_duties", "%s", err.msg);
    if (r == -ENOENT || r == -EEXIST || r == -ESTALE)
        return al_reply_error(c, 409, "conflict", "%s", err.msg);
    if (r < 0)
        return al_reply_error(c, 500, strcmp(err.step, "audit") == 0 ? "audit_failed" : "internal", "%s", err.msg);
    row = al_view_run_load(x->s, x->p, id);
    enum MHD_Result ret = al_reply_json(c, 200, row ? al_run_json(x->s, row) : NULL);
    al_view_run_free(row);
    return ret;
}

enum MHD_Result al_rest_runs_approve(al_route_ctx *x) { return decide(x, true); }
enum MHD_Result al_rest_runs_deny(al_route_ctx *x) { return decide(x, false); }

enum MHD_Result al_rest_runs_cancel(al_route_ctx *x) {
    const char *id = x->arg[0];
    /* it takes no fields: a reason sent with it would be dropped */
    json_t *b = al_req_body_object(x->rq);
    char kmsg[300] = "a cancel takes no body (or {})";
    bool ok = json_is_object(b) && al_json_keys_check(b, "the body", NULL, 0, kmsg, sizeof kmsg);
    json_decref(b);
    if (!ok)
        return al_reply_error(x->c, 400, "bad_request", "%s", kmsg);
    int r = al_run_cancel(x->s, x->p, id);
    if (r == -ENOENT)
        return al_reply_error(x->c, 404, "not_found", "no run %s", id);
    if (r == 0)
        return al_reply_error(x->c, 409, "conflict", "run %s has already ended", id);
    al_view_run *row = al_view_run_load(x->s, x->p, id);
    enum MHD_Result ret = al_reply_json(x->c, 202, row ? al_run_json(x->s, row) : NULL);
    al_view_run_free(row);
    return ret;
}
