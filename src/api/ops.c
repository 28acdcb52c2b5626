/* The operations' own routes: /healthz, /openapi.json, and the operator's
 * view (/metrics, /operator/status), which the route table keeps to the
 * operator (operator.h). */
#include "conn_guard.h"
#include "metrics.h"
#include "openapi.h"
#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

enum MHD_Result al_ops_health(al_route_ctx *x) {
    char *text = al_service_health(x->s);
    return text ? al_reply_text(x->c, 200, "application/json", text) : MHD_NO;
}

enum MHD_Result al_ops_openapi(al_route_ctx *x) { return al_reply_static(x->c, "application/json", al_openapi[0].text); }

enum MHD_Result al_ops_metrics(al_route_ctx *x) {
    unsigned long long late, evicted;
    al_guard_counts(x->h->guard, &late, &evicted);
    char *t = al_metrics_text(x->h->metrics, x->s, late, evicted);
    return t ? al_reply_text(x->c, 200, "text/plain; version=0.0.4", t) : MHD_NO;
}

/* GET /operator/status: the driver's badges with the pool's live state
 * (every shape of run, its hits and misses), which /v1/settings keeps from
 * tenants. */
enum MHD_Result al_ops_status(al_route_ctx *x) {
    al_view_driver d;
    al_view_driver_get(x->s, true, &d);
    json_t *doc = json_pack("{s:s, s:O, s:O}", "driver", d.name, "badges", d.badges, "pool", d.pool ? d.pool : json_null());
    al_view_driver_done(&d);
    return al_reply_json(x->c, 200, doc);
}
