/* Reading a request's query, headers and body the same way on every route
 * (route.h): a malformed one is answered 400 here, named. */
#include <string.h>

#include "http.h"
#include "query.h"
#include "reply.h"
#include "route.h"
#include "../core/views.h"

bool al_req_query_ok(struct MHD_Connection *c, const char *const *allowed, size_t n, enum MHD_Result *ret) {
    char msg[400];
    if (al_query_check(c, allowed, n, msg, sizeof msg))
        return true;
    *ret = al_reply_error(c, 400, "bad_request", "%s", msg);
    return false;
}

bool al_req_flag(struct MHD_Connection *c, const char *name) {
    const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
    return v && (strcmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* They say how to answer, not what to make: a retry may wait on the run its
 * first attempt made. */
bool al_req_wait(struct MHD_Connection *c, bool wait_always, al_run_extra *x, enum MHD_Result *ret) {
    static const char *const q[] = { "wait", "timeout_s" };
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), ret))
        return false;
    const char *wait = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "wait");
    const char *ts = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "timeout_s");
    x->wait = wait_always || al_req_flag(c, "wait");
    if (wait && !x->wait && strcmp(wait, "false") != 0 && strcmp(wait, "0") != 0) {
        *ret = al_reply_error(c, 400, "bad_request", "wait must be true or false");
        return false;
    }
    if (ts && (al_parse_u64(ts, &x->wait_secs) < 0 || x->wait_secs < 1 || x->wait_secs > 3600)) {
        *ret = al_reply_error(c, 400, "bad_request", "timeout_s must be a whole number of seconds from 1 to 3600");
        return false;
    }
    return true;
}

bool al_req_page(struct MHD_Connection *c, uint64_t max, uint64_t *limit, uint64_t *cursor, enum MHD_Result *ret) {
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    const char *cur = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "cursor");
    *cursor = INT64_MAX;
    if (lim && (al_parse_u64(lim, limit) < 0 || *limit < 1 || *limit > max)) {
        *ret = al_reply_error(c, 400, "bad_request", "limit must be from 1 to %llu", (unsigned long long)max);
        return false;
    }
    if (cur && (al_parse_u64(cur, cursor) < 0 || *cursor > INT64_MAX)) {
        *ret = al_reply_error(c, 400, "bad_request", "bad cursor");
        return false;
    }
    return true;
}

bool al_req_idem(struct MHD_Connection *c, const char *scope, json_t *json, const void *raw, size_t len, al_idem *k,
                 enum MHD_Result *ret) {
    al_error err = { 0 };
    if (al_idem_from_request(c, scope, json, raw, len, k, &err) < 0) {
        *ret = al_reply_error(c, 400, "bad_request", "%s", err.msg);
        return false;
    }
    return true;
}

json_t *al_req_body_object(const al_request *rq) {
    if (rq->too_large)
        return NULL;
    if (!rq->body || rq->len == 0)
        return json_object();
    return json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, NULL);
}

json_t *al_req_body_json(al_route_ctx *x, const char *want, enum MHD_Result *ret) {
    json_error_t jerr;
    json_t *b = json_loadb(x->rq->body ? x->rq->body : "", x->rq->len, JSON_REJECT_DUPLICATES, &jerr);
    if (json_is_object(b))
        return b;
    json_decref(b);
    *ret = al_reply_error(x->c, 400, "bad_request", "the body must be %s: %s", want, jerr.text);
    return NULL;
}

enum MHD_Result al_req_too_large(al_route_ctx *x, const char *what) {
    return al_reply_error(x->c, 413, "payload_too_large", "%s is larger than %llu bytes", what,
                          (unsigned long long)al_view_config(x->s)->body_max);
}

bool al_req_is_admin(const al_principal *p) { return al_principal_role(p) == AL_ROLE_ADMIN; }

bool al_req_decides(const al_principal *p) { return al_role_decides(al_principal_role(p)); }
