/* REST: a thread's files (GET /v1/threads/{thread}/artifacts): the newest
 * version of each path, or every version with ?all=true; and its packages
 * (GET /v1/threads/{thread}/packages: the thread's environment). */
#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/packages.h"
#include "../core/views.h"

enum MHD_Result al_rest_thread_artifacts(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    const char *thread = x->arg[0];
    if (!al_valid_thread_id(thread))
        return al_reply_error(c, 400, "bad_request", "bad thread id");
    static const char *const q[] = { "all" };
    enum MHD_Result bad;
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &bad))
        return bad;
    al_error err = { 0 };
    json_t *rows = al_view_thread_artifacts(x->s, x->p->workspace_id, thread, NULL, al_req_flag(c, "all"), 0, &err);
    if (!rows)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    return al_reply_json(c, 200, json_pack("{s:o}", "artifacts", rows));
}

enum MHD_Result al_rest_thread_packages(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    const char *thread = x->arg[0];
    if (!al_valid_thread_id(thread))
        return al_reply_error(c, 400, "bad_request", AL_RUN_RULE_THREAD_ID);
    enum MHD_Result bad;
    if (!al_req_query_ok(c, NULL, 0, &bad))
        return bad;
    al_error err = { 0 };
    json_t *doc = al_packages_thread_view(x->s, x->p->workspace_id, thread, &err);
    if (!doc)
        return al_reply_error(c, 503, "store_unavailable", "%s", err.msg);
    return al_reply_json(c, 200, doc);
}
