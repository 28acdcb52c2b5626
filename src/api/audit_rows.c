/* An audit event as the API writes it, written once: a page of
 * GET /v1/audit (rest_admin.c), its NDJSON export (rest_audit_export.c)
 * and a run's trace (rest_trace.c) all show the same fields. Below those
 * three, so that none of them reaches into another. */
#include <errno.h>

#include "route.h"
#include "../core/views.h"

json_t *al_rest_audit_rows(al_service *s, const al_principal *p, const al_view_audit_filter *f, al_error *err) {
    al_view_audit_events evs;
    if (al_view_audit_list(s, p, f, &evs, err) < 0)
        return NULL;
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < evs.n; i++) {
        const al_view_audit_event *e = &evs.v[i];
        json_t *d = json_loads(e->data, 0, NULL);
        json_array_append_new(rows, json_pack("{s:I, s:s, s:s?, s:s?, s:o, s:s, s:s, s:s}", "seq", (json_int_t)e->seq,
                                              "kind", e->kind, "person_id", e->has_person_id ? e->person_id : NULL,
                                              "run_id", e->has_run_id ? e->run_id : NULL, "data", d ? d : json_object(),
                                              "created_at", e->created_at, "prev_hash", e->prev_hash, "hash", e->hash));
    }
    al_view_audit_done(&evs);
    if (!rows)
        al_err(err, "audit", ENOMEM, "out of memory");
    return rows;
}
