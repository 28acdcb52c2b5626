/* Piston's public API (GET /api/v2/runtimes, POST /api/v2/execute, GET
 * /api/v2/packages), served
 * under /piston/<api key>/ so a Piston client works by changing its base URL
 * (Piston itself has no authentication; the key in the URL was checked on
 * the headers). docs/api.md says what differs. The translation is piston.c's. */
#include <string.h>

#include "piston.h"
#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "status.h"

enum MHD_Result al_piston_route_runtimes(al_route_ctx *x) { return al_reply_json(x->c, 200, al_piston_runtimes()); }

enum MHD_Result al_piston_route_packages(al_route_ctx *x) { return al_reply_json(x->c, 200, al_piston_packages()); }

enum MHD_Result al_piston_route_other(al_route_ctx *x) {
    /* Piston's package manager installs (POST) and removes (DELETE)
     * languages; airlock's are the host's or an image's, chosen by its
     * operator: the path is known, only its listing is served */
    if (strcmp(x->arg[1], "packages") == 0)
        return al_reply_method_why(x->c, "GET",
                                   "airlock installs no packages through Piston's API: python, javascript and bash "
                                   "are installed (GET /api/v2/packages lists them); its operator chooses the runtimes");
    return al_reply_error(x->c, 404, "not_found",
                          "Piston's API here is GET /api/v2/runtimes, POST /api/v2/execute and GET /api/v2/packages");
}

enum MHD_Result al_piston_route_execute(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    if (x->rq->too_large)
        return al_reply_error(c, 413, "payload_too_large", "the body is too large");
    enum MHD_Result bad;
    json_t *b = al_req_body_json(x, "a JSON object", &bad);
    if (!b)
        return bad;
    /* the key binds the request as Piston's client sent it */
    al_idem idem;
    if (!al_req_idem(c, "POST /piston/api/v2/execute", b, NULL, 0, &idem, &bad)) {
        json_decref(b);
        return bad;
    }
    /* the translation is pure (piston.c, fuzzed alone); the spec it
     * makes goes through al_run_create like any other */
    al_run_spec sp;
    char tmsg[300];
    al_status tst = al_piston_translate(b, &sp, tmsg, sizeof tmsg);
    json_decref(b);
    if (tst != AL_STATUS_OK)
        return al_reply_error(c, al_status_http(tst), tst == AL_STATUS_INVALID ? "bad_request" : "internal", "%s", tmsg);
    const char *ours = sp.language.s;
    /* answered with the runtime that ran, as Piston names it */
    json_t *rts = al_piston_runtimes();
    char pl[32] = "", pv[64] = "";
    size_t k;
    json_t *r;
    json_array_foreach(rts, k, r) {
        const char *l = json_string_value(json_object_get(r, "language"));
        if ((strcmp(ours, "node") == 0 && strcmp(l, "javascript") == 0) || strcmp(ours, l) == 0) {
            snprintf(pl, sizeof pl, "%s", l);
            snprintf(pv, sizeof pv, "%s", json_string_value(json_object_get(r, "version")));
        }
    }
    json_decref(rts);
    const char *answer[2] = { pl, pv };
    al_run_extra ex = { .via = "piston" };
    enum MHD_Result ret;
    if (al_req_wait(c, true, &ex, &ret))
        ret = al_rest_start_run(x, &sp, &ex, answer, &idem);
    al_run_spec_free(&sp);
    return ret;
}
