/* REST: the workspace's settings (GET, PUT and PATCH /v1/settings): what
 * an admin set, with what this service enforces beside it. */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

/* GET /v1/settings, and the answer of PUT: 503 when they cannot be read */
static enum MHD_Result settings_reply(al_service *s, struct MHD_Connection *c, const char *ws_id) {
    al_error err = { 0 };
    json_t *doc = al_view_settings(s, ws_id, &err);
    if (!doc)
        return al_reply_error(c, 503, "settings_unavailable", "%s", err.msg);
    return al_reply_json(c, 200, doc);
}

enum MHD_Result al_rest_settings_get(al_route_ctx *x) { return settings_reply(x->s, x->c, x->p->workspace_id); }

/* PUT and PATCH /v1/settings (admins): the change, and its audit events */
enum MHD_Result al_rest_settings_put(al_route_ctx *x) {
    al_service *s = x->s;
    struct MHD_Connection *c = x->c;
    const al_principal *p = x->p;
    al_request *rq = x->rq;
    if (!al_req_is_admin(p))
        return al_reply_error(c, 403, "forbidden", "only admins may change settings");
    if (rq->too_large)
        return al_reply_error(c, 413, "payload_too_large", "the body is too large");
    json_error_t jerr;
    json_t *b = json_loadb(rq->body ? rq->body : "", rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(b)) {
        json_decref(b);
        return al_reply_error(c, 400, "bad_request", "the body must be a JSON object: %s", jerr.text);
    }
    al_error err = { 0 };
    json_t *eff = NULL;
    /* unreadable settings: al_settings_put below refuses to write over them */
    al_error lerr = { 0 };
    json_t *before = al_settings_load(s, p->workspace_id, &lerr);
    bool self_before = json_is_true(json_object_get(before, "allow_self_approval"));
    json_decref(before);
    int r = al_settings_put(s, p->workspace_id, b, &eff, &err);
    if (r < 0) {
        json_decref(b);
        return al_reply_error(c, r == -EINVAL ? 400 : r == -EPERM ? 403 : 500,
                           r == -EINVAL ? "bad_request" : r == -EPERM ? "forbidden" : "internal", "%s", err.msg);
    }
    bool self_after = json_is_true(json_object_get(eff, "allow_self_approval"));
    json_decref(eff);
    /* which settings changed (names only: secrets' values never reach the trail) */
    json_t *keys = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v) json_array_append_new(keys, json_string(k));
    json_decref(b);
    r = al_workspace_audit(s, p, "settings.changed", json_pack("{s:s, s:o}", "by", p->person_id, "keys", keys), &err);
    /* relaxing (or restoring) separation of duties is its own event */
    if (r >= 0 && self_before != self_after)
        r = al_workspace_audit(s, p, "settings.self_approval_changed",
                               json_pack("{s:s, s:b, s:b}", "by", p->person_id, "from", self_before, "to", self_after),
                               &err);
    if (r < 0) {
        return al_reply_error(c, 500, "audit_failed", "the settings were changed but their audit event could not be "
                           "written: %s", err.msg);
    }
    return settings_reply(s, c, p->workspace_id);
}
