/*
 * A run's events as its followers read them (SSE, MCP): the store's rows,
 * with what the store keeps once put back. An output event whose bytes the
 * run's result holds has no data of its own (al_store_events_drop_output),
 * only its place in its stream; the result event names the run
 * ({"ref":"run"}) and the approval event the run's card ({"ref":
 * "approval"}) rather than holding copies of them. All are read back here
 * from the run's row, so every reader gets the documents the stream
 * carried live.
 */
#include <string.h>

#include "dlp.h"
#include "service.h"
#include "service_int.h"
#include "../store/approvals.h"

typedef struct run_view {
    al_store_run *row;
    json_t *result;
    bool tried;
    /* each stream's bytes, decoded once for the page: a replay of a run's
     * thousand small events would otherwise copy (or base64-decode) the
     * whole stream once per event */
    char *bytes[2];
    size_t len[2];
    bool decoded[2];
} run_view;

static al_store_run *view_row(al_service *s, const char *run_id, run_view *v) {
    if (!v->tried) {
        v->tried = true;
        al_error err = { 0 };
        if (al_store_run_get(s->store, run_id, NULL, &v->row, &err) < 0)
            v->row = NULL;
        v->result = v->row && v->row->result ? json_loads(v->row->result, 0, NULL) : NULL;
    }
    return v->row;
}

/* EV's data (an output event with none of its own) from the result: NULL
 * when the result does not hold its place (left as it is then). */
static char *output_from_result(al_service *s, const char *run_id, run_view *v, const al_store_event *ev) {
    if (!view_row(s, run_id, v) || !v->result)
        return NULL;
    int k = strcmp(ev->type, "stdout") == 0 ? 0 : strcmp(ev->type, "stderr") == 0 ? 1 : -1;
    if (k < 0)
        return NULL;
    if (!v->decoded[k]) {
        v->decoded[k] = true;
        v->bytes[k] = al_output_get(v->result, ev->type, &v->len[k]);
    }
    const char *bytes = v->bytes[k];
    size_t len = v->len[k];
    char *text = NULL;
    if (bytes && ev->out_at >= 0 && ev->out_len >= 0 && (uint64_t)ev->out_at + (uint64_t)ev->out_len <= len) {
        json_t *o = json_object();
        if (o && al_output_set(o, "data", bytes + ev->out_at, (size_t)ev->out_len) == 0)
            text = json_dumps(o, JSON_COMPACT);
        json_decref(o);
    }
    return text;
}

static bool is_ref(const al_store_event *ev, const char *type, const char *ref) {
    char text[64];
    snprintf(text, sizeof text, "{\"ref\":\"%s\"}", ref);
    return strcmp(ev->type, type) == 0 && strcmp(ev->data, text) == 0;
}

/* The run's approval card as the approvals row holds it. */
static char *approval_card(al_service *s, const char *run_id) {
    al_store_approval a;
    al_error err = { 0 };
    if (al_store_approval_get(s->store, run_id, &a, &err) < 0)
        return NULL;
    char *card = a.card ? strdup(a.card) : NULL;
    al_store_approval_done(&a);
    return card;
}

int al_run_events_after(al_service *s, const char *run_id, int64_t after, int64_t limit, al_store_event **ret,
                        size_t *ret_n, al_error *err) {
    int r = al_store_events_after(s->store, run_id, after, limit, ret, ret_n, err);
    if (r < 0)
        return r;
    run_view v = { 0 };
    for (size_t i = 0; i < *ret_n; i++) {
        al_store_event *ev = &(*ret)[i];
        char *text = NULL;
        if (ev->out_at >= 0 && !ev->data[0]) {
            text = output_from_result(s, run_id, &v, ev);
        } else if (is_ref(ev, "result", "run") && view_row(s, run_id, &v)) {
            json_t *doc = al_run_json(s, v.row);
            text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
            json_decref(doc);
        } else if (is_ref(ev, "approval", "approval")) {
            text = approval_card(s, run_id);
        }
        if (text) {
            free(ev->data);
            ev->data = text;
        }
    }
    json_decref(v.result);
    al_store_run_free(v.row);
    free(v.bytes[0]);
    free(v.bytes[1]);
    return 0;
}

bool al_run_events_gone(al_service *s, const char *run_id) {
    al_store_run *row = NULL;
    al_error err = { 0 };
    int r = al_store_run_get(s->store, run_id, NULL, &row, &err);
    /* a store that cannot say is not taken for gone: the follower waits on */
    bool gone = r == -ENOENT || (r == 0 && row->expired_at[0]);
    al_store_run_free(row);
    return gone;
}
