/* REST: skills (docs/api.md "Skills"): upload, list, read, delete, promote
 * a version, and run or test one of a skill's entrypoints. */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "run_body.h"
#include "status.h"
#include "../core/skills.h"
#include "../core/views.h"
#include "../util/json_keys.h"

/* {name} is a skill's name, or there is no such skill */
#define NAME_OR_404(x)                                                                                                \
    do {                                                                                                               \
        if (!al_skill_name_valid((x)->arg[0]))                                                                         \
            return al_reply_error((x)->c, 404, "not_found", "no such skill: names are 1-64 characters of a-z 0-9 -"); \
    } while (0)

/* POST /v1/skills/{name}/run and .../test: {entrypoint, args, thread_id,
 * limits, digest (test only)}. */
/* ---------------------------------------------------------------- skills */

/* POST /v1/skills/{name}/run and .../test: {entrypoint, args, thread_id,
 * limits, digest (test only)}. */
static enum MHD_Result skill_start(al_route_ctx *x, bool test) {
    al_service *s = x->s;
    struct MHD_Connection *c = x->c;
    const al_principal *p = x->p;
    const char *name = x->arg[0];
    if (!al_skill_name_valid(name))
        return al_reply_error(c, 404, "not_found", "no such skill: names are 1-64 characters of a-z 0-9 -");
    if (x->rq->too_large)
        return al_req_too_large(x, "the body");
    enum MHD_Result jbad;
    json_t *b = al_req_body_json(x, "a JSON object {entrypoint, args, thread_id}", &jbad);
    if (!b)
        return jbad;
    /* digest last: only the test bench picks a version */
    static const char *const keys[] = { "entrypoint", "args", "thread_id", "limits", "network", "digest" };
    char kmsg[300];
    if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys) - (test ? 0 : 1), kmsg, sizeof kmsg)) {
        json_decref(b);
        return al_reply_error(c, 400, "bad_request", "%s", kmsg);
    }
    json_t *ep = json_object_get(b, "entrypoint"), *thread = json_object_get(b, "thread_id");
    json_t *dg = json_object_get(b, "digest"), *lim = json_object_get(b, "limits"), *net = json_object_get(b, "network");
    if (!json_is_string(ep) || (thread && !json_is_null(thread) && (!json_is_string(thread) ||
                                                                     !al_valid_thread_id(json_string_value(thread)))) ||
        (dg && !json_is_string(dg)) || (lim && !json_is_null(lim) && !json_is_object(lim)) ||
        (net && !json_is_null(net) && !json_is_string(net))) {
        json_decref(b);
        return al_reply_error(c, 400, "bad_request", "want entrypoint (a string), args (an object), thread_id "
                                                  "([A-Za-z0-9._-]{1,64}), limits (an object), network (a policy string)");
    }
    static const char *const q[] = { "wait" };
    enum MHD_Result qbad;
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &qbad)) {
        json_decref(b);
        return qbad;
    }
    bool want_wait = test || al_req_flag(c, "wait");
    char scope[160];
    snprintf(scope, sizeof scope, "POST /v1/skills/%s/%s", name, test ? "test" : "run");
    al_idem idem;
    enum MHD_Result bad;
    if (!al_req_idem(c, scope, b, NULL, 0, &idem, &bad)) {
        json_decref(b);
        return bad;
    }
    /* the limits as a run's body has them (their ranges are the run's check) */
    al_run_limit_req limits[_AL_LIMIT_MAX] = { 0 };
    char lmsg[300];
    const char *lcode = NULL;
    al_status lst = al_run_body_limits(lim, limits, lmsg, sizeof lmsg, &lcode);
    if (lst != AL_STATUS_OK) {
        json_decref(b);
        return al_reply_error(c, al_status_http(lst), lcode, "%s", lmsg);
    }
    if (want_wait && !al_service_hold(s, p->person_id, AL_HOLD_WAIT)) {
        json_decref(b);
        return al_reply_too_many(c, "waits", al_view_config(s)->waits_per_person, "waits_per_person");
    }
    json_t *doc = NULL;
    al_skill_opts o = { .digest = json_string_value(dg), .limits = limits, .network = json_string_value(net),
                        .via = "rest", .wait = want_wait, .mode = test ? AL_SKILL_TEST : AL_SKILL_RUN, .idem = &idem };
    unsigned st = al_status_http(al_skill_run(s, p, name, json_string_value(ep), json_object_get(b, "args"),
                                              json_string_value(thread), &o, &doc));
    if (want_wait)
        al_service_unhold(s, p->person_id, AL_HOLD_WAIT);
    json_decref(b);
    return al_reply_doc_idem(c, st, doc, &idem);
}

enum MHD_Result al_rest_skills_run(al_route_ctx *x) { return skill_start(x, false); }
enum MHD_Result al_rest_skills_test(al_route_ctx *x) { return skill_start(x, true); }

/* POST /v1/skills: a bundle's bytes, the key bound to them as sent */
enum MHD_Result al_rest_skills_upload(al_route_ctx *x) {
    if (x->rq->too_large)
        return al_req_too_large(x, "the bundle");
    al_idem idem;
    enum MHD_Result bad;
    if (!al_req_idem(x->c, "POST /v1/skills", NULL, x->rq->body, x->rq->len, &idem, &bad))
        return bad;
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_upload(x->s, x->p, x->rq->body, x->rq->len, &idem, &doc));
    return al_reply_doc_idem(x->c, st, doc, &idem);
}

enum MHD_Result al_rest_skills_list(al_route_ctx *x) {
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_list(x->s, x->p, &doc));
    return al_reply_doc(x->c, st, doc);
}

enum MHD_Result al_rest_skills_get(al_route_ctx *x) {
    NAME_OR_404(x);
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_get(x->s, x->p, x->arg[0], &doc));
    return al_reply_doc(x->c, st, doc);
}

enum MHD_Result al_rest_skills_delete(al_route_ctx *x) {
    NAME_OR_404(x);
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_delete(x->s, x->p, x->arg[0], NULL, &doc));
    return al_reply_doc(x->c, st, doc);
}

enum MHD_Result al_rest_skills_delete_version(al_route_ctx *x) {
    NAME_OR_404(x);
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_delete(x->s, x->p, x->arg[0], x->arg[1], &doc));
    return al_reply_doc(x->c, st, doc);
}

enum MHD_Result al_rest_skills_promote(al_route_ctx *x) {
    NAME_OR_404(x);
    /* a body cut at the cap must not read as empty (promote the newest) */
    if (x->rq->too_large)
        return al_reply_error(x->c, 413, "payload_too_large", "the body is too large");
    json_t *b = al_req_body_object(x->rq);
    json_t *dg = json_object_get(b, "digest");
    static const char *const keys[] = { "digest" };
    char kmsg[300];
    if (!al_json_keys_check(b, "the body", keys, ELEMENTSOF(keys), kmsg, sizeof kmsg)) {
        json_decref(b);
        return al_reply_error(x->c, 400, "bad_request", "%s", kmsg);
    }
    if (!json_is_object(b) || (dg && !json_is_string(dg))) {
        json_decref(b);
        return al_reply_error(x->c, 400, "bad_request", "the body is empty or {\"digest\": \"sha256:...\"}");
    }
    json_t *doc = NULL;
    unsigned st = al_status_http(al_skills_promote(x->s, x->p, x->arg[0], json_string_value(dg), &doc));
    json_decref(b);
    return al_reply_doc(x->c, st, doc);
}
