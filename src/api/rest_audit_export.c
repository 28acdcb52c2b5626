/* REST: the audit trail's verification (GET /v1/audit/verify) and its
 * export (GET /v1/audit?format=ndjson, rest_admin.c hands it here): the
 * console's Audit page shows the one and downloads the other. */
#include <string.h>

#include "reply.h"
#include "handlers.h"
#include "route.h"
#include "../core/holds.h"
#include "../core/views.h"

/* Events one verification reads at most: a page at a time, some seconds
 * of work; a longer chain is said to be verified that far (complete: false),
 * as `airlock admin audit verify` checks it whole. */
#define VERIFY_MAX 200000
/* Events one export holds at most, read a page at a time as the client
 * takes them (a longer trail is exported in parts with ?to=) */
#define EXPORT_MAX 100000
#define EXPORT_PAGE 500

enum MHD_Result al_rest_audit_verify(al_route_ctx *x) {
    enum MHD_Result bad;
    if (!al_req_query_ok(x->c, NULL, 0, &bad))
        return bad;
    al_audit_head last;
    bool signed_one = false;
    al_audit_check chk;
    al_error err = { 0 };
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_AUDIT))
        return al_reply_too_many(x->c, "audit verifications and exports", AL_AUDIT_READS_PER_PERSON,
                                 "GET /v1/audit/verify");
    int r = al_view_audit_verify(x->s, x->p, VERIFY_MAX, &chk, &signed_one, &last, &err);
    al_service_unhold(x->s, x->p->person_id, AL_HOLD_AUDIT);
    if (r < 0)
        return al_reply_error(x->c, 500, "internal", "%s", err.msg);
    /* the latest checkpoint this service signed, and whether the chain
     * still holds it (a chain cut back or rewritten does not) */
    json_t *cp = json_null();
    if (signed_one)
        cp = json_pack("{s:I, s:s, s:b}", "seq", (json_int_t)last.seq, "hash", last.hash, "held",
                       chk.intact || chk.first_bad_seq > last.seq);
    json_t *doc = json_pack("{s:b, s:I, s:o, s:o, s:b, s:{s:I, s:s}, s:o}", "ok", chk.intact, "events",
                            (json_int_t)chk.events, "first_bad_seq",
                            chk.intact ? json_null() : json_integer(chk.first_bad_seq), "why",
                            chk.intact ? json_null() : json_string(chk.why), "complete", chk.complete, "head", "seq",
                            (json_int_t)chk.head.seq, "hash", chk.head.hash, "checkpoint", cp);
    return al_reply_json(x->c, 200, doc);
}

/* ------------------------------------------------------------- export */

typedef struct export {
    al_service *s;
    al_principal p;
    char *kind, *person_id, *run_id, *from, *to; /* the filter, owned */
    int64_t before, left;
    bool done, held;
    char *buf;
    size_t len, pos;
} export;

static void export_free(void *cls) {
    export *e = cls;
    if (e->held)
        al_service_unhold(e->s, e->p.person_id, AL_HOLD_AUDIT);
    free(e->kind);
    free(e->person_id);
    free(e->run_id);
    free(e->from);
    free(e->to);
    free(e->buf);
    free(e);
}

/* The next page of events into E's buffer, one JSON object a line; <0 the end. */
static ssize_t export_fill(void *cls) {
    export *e = cls;
    if (e->done || e->left <= 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    al_view_audit_filter f = { .kind = e->kind, .person_id = e->person_id, .run_id = e->run_id, .from = e->from,
                               .to = e->to, .before_seq = e->before,
                               .limit = e->left < EXPORT_PAGE ? e->left : EXPORT_PAGE };
    al_error err = { 0 };
    json_t *rows = al_rest_audit_rows(e->s, &e->p, &f, &err);
    if (!rows)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t n = json_array_size(rows);
    if (n == 0) {
        json_decref(rows);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    e->done = (int64_t)n < f.limit;
    e->left -= (int64_t)n;
    /* each line is compact JSON: no newline inside one */
    size_t cap = 0;
    char **lines = calloc(n, sizeof *lines);
    for (size_t i = 0; lines && i < n; i++) {
        lines[i] = json_dumps(json_array_get(rows, i), JSON_COMPACT);
        cap += lines[i] ? strlen(lines[i]) + 1 : 0;
    }
    e->before = (int64_t)json_integer_value(json_object_get(json_array_get(rows, n - 1), "seq"));
    json_decref(rows);
    e->buf = lines ? malloc(cap + 1) : NULL;
    for (size_t i = 0; e->buf && i < n; i++)
        if (lines[i])
            e->len += (size_t)snprintf(e->buf + e->len, cap + 1 - e->len, "%s\n", lines[i]);
    for (size_t i = 0; lines && i < n; i++)
        free(lines[i]);
    free(lines);
    return e->buf ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
}

static ssize_t export_read(void *cls, uint64_t off, char *out, size_t max) {
    (void)off;
    export *e = cls;
    return al_reply_drain(&e->buf, &e->len, &e->pos, export_fill, e, out, max);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

enum MHD_Result al_rest_audit_export(al_route_ctx *x, const al_view_audit_filter *f) {
    if (!al_service_hold(x->s, x->p->person_id, AL_HOLD_AUDIT))
        return al_reply_too_many(x->c, "audit verifications and exports", AL_AUDIT_READS_PER_PERSON,
                                 "GET /v1/audit?format=ndjson");
    export *e = calloc(1, sizeof *e);
    if (!e) {
        al_service_unhold(x->s, x->p->person_id, AL_HOLD_AUDIT);
        return al_reply_error(x->c, 500, "internal", "out of memory");
    }
    e->held = true;
    e->s = x->s;
    e->p = *x->p;
    e->before = f->before_seq;
    e->left = EXPORT_MAX;
    e->kind = dup_or_null(f->kind);
    e->person_id = dup_or_null(f->person_id);
    e->run_id = dup_or_null(f->run_id);
    e->from = dup_or_null(f->from);
    e->to = dup_or_null(f->to);
    char disp[120];
    snprintf(disp, sizeof disp, "attachment; filename=\"audit-%s.ndjson\"", x->p->workspace_id);
    return al_reply_stream(x->c, "application/x-ndjson", disp, export_read, e, export_free);
}
