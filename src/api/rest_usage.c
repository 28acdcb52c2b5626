/* REST: GET /v1/usage: the workspace's balance, ledger and runs by state
 * and language over a time range. */
#include "metrics.h"
#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/views.h"

static json_t *ledger_rows(const al_view_usage *u) {
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < u->nledger; i++) {
        const al_view_ledger_entry *e = &u->ledger[i];
        json_array_append_new(rows, json_pack("{s:s, s:s, s:I, s:s?, s:I, s:s}", "id", e->id, "kind",
                                              al_ledger_kind_name(e->kind), "amount", (json_int_t)e->amount,
                                              "run_id", e->run_id[0] ? e->run_id : NULL, "balance_after",
                                              (json_int_t)e->balance_after, "created_at", e->created_at));
    }
    return rows;
}

/* The last 30 days, the oldest first: what the console's charts draw. */
static json_t *day_rows(const al_view_usage *u) {
    json_t *rows = json_array();
    for (int i = 0; rows && i < AL_USAGE_DAYS; i++) {
        const al_view_usage_day *d = &u->days[i];
        json_t *st = json_object(), *lg = json_object(), *via = json_object();
        for (size_t k = 0; k < al_run_states_by_name_n; k++)
            if (d->by_state[al_run_states_by_name[k]] > 0)
                json_object_set_new(st, al_run_state_name(al_run_states_by_name[k]),
                                    json_integer(d->by_state[al_run_states_by_name[k]]));
        for (size_t k = 0; k < d->nlanguage; k++)
            json_object_set_new(lg, d->by_language[k].key, json_integer(d->by_language[k].n));
        for (int v = 0; v < _AL_VIA_MAX; v++)
            if (d->by_via[v] > 0)
                json_object_set_new(via, al_run_via_name((al_run_via)v), json_integer(d->by_via[v]));
        json_array_append_new(rows, json_pack("{s:s, s:I, s:o, s:o, s:o, s:I}", "date", d->date, "runs",
                                              (json_int_t)d->runs, "by_state", st, "by_language", lg, "by_via", via,
                                              "credits", (json_int_t)d->credits));
    }
    return rows;
}

enum MHD_Result al_rest_usage(al_route_ctx *x) {
    struct MHD_Connection *c = x->c;
    const char *from = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "to");
    const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
    uint64_t limit = 100;
    static const char *const q[] = { "from", "to", "limit" };
    enum MHD_Result bad;
    if (!al_req_query_ok(c, q, ELEMENTSOF(q), &bad))
        return bad;
    if (lim && (al_parse_u64(lim, &limit) < 0 || limit < 1 || limit > 1000))
        return al_reply_error(c, 400, "bad_request", "limit must be from 1 to 1000");
    if ((from && !al_rfc3339_valid(from)) || (to && !al_rfc3339_valid(to)))
        return al_reply_error(c, 400, "bad_request", "from and to are RFC 3339 UTC times (2026-01-31T12:00:00Z)");
    al_error err = { 0 };
    al_view_usage u;
    if (al_view_usage_get(x->s, x->p, from, to, (int64_t)limit, &u, &err) < 0)
        return al_reply_error(c, 500, "internal", "%s", err.msg);
    json_t *ledger = ledger_rows(&u), *days = day_rows(&u);
    json_t *st = json_object(), *lg = json_object();
    for (size_t i = 0; i < al_run_states_by_name_n; i++)
        if (u.by_state[al_run_states_by_name[i]] > 0)
            json_object_set_new(st, al_run_state_name(al_run_states_by_name[i]),
                                json_integer(u.by_state[al_run_states_by_name[i]]));
    for (size_t i = 0; i < u.nlanguage; i++)
        json_object_set_new(lg, u.by_language[i].key, json_integer(u.by_language[i].n));
    json_int_t balance = (json_int_t)u.balance;
    al_view_usage_done(&u);
    if (!ledger || !days) {
        json_decref(st);
        json_decref(lg);
        json_decref(ledger);
        json_decref(days);
        return al_reply_error(c, 500, "internal", "out of memory");
    }
    return al_reply_json(c, 200, json_pack("{s:I, s:o, s:{s:o, s:o}, s:o}", "balance", balance, "ledger", ledger,
                                           "runs", "by_state", st, "by_language", lg, "days", days));
}
