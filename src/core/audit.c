#include "audit.h"
#include "../util/hash.h"
#include "../store/audit.h"

#include <nettle/sha2.h>
#include <string.h>

static void hex_sha256(const char *a, const char *b, char out[65]) {
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, strlen(a), (const uint8_t *)a);
    sha256_update(&c, 1, (const uint8_t *)"\n");
    sha256_update(&c, strlen(b), (const uint8_t *)b);
    al_sha256_finish_hex(&c, out);
}

/* The hashed form of an event: canonical JSON (sorted keys, compact) of
 * every field but the hash itself. NULL when a field is not valid UTF-8. */
static char *canonical(const al_store_audit_event *ev) {
    json_t *c = json_pack("{s:s, s:I, s:s, s:s, s:s?, s:s?, s:s, s:s, s:s}", "workspace_id", ev->workspace_id, "seq",
                          (json_int_t)ev->seq, "org_id", ev->org_id, "kind", ev->kind, "person_id",
                          ev->has_person_id ? ev->person_id : NULL, "run_id", ev->has_run_id ? ev->run_id : NULL, "data",
                          ev->data, "created_at", ev->created_at, "prev_hash", ev->prev_hash);
    char *s = c ? json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(c);
    return s;
}

/* The store's call once it has numbered and linked EV. */
static int seal(al_store_audit_event *ev, void *userdata, al_error *err) {
    char *canon = canonical(ev);
    if (!canon) /* never the hash of nothing: a link that verifies must cover the event */
        return al_err(err, "audit", EINVAL, "audit event %s: cannot build its canonical form (an id that is not "
                      "valid UTF-8?)", ev->kind);
    hex_sha256(ev->prev_hash, canon, ev->hash);
    free(canon);
    return 0;
}

/* SRC into the record's BUF, or an error naming WHAT. */
static int field(char *buf, size_t len, const char *src, const char *kind, const char *what, al_error *err) {
    if (strlen(src) >= len)
        return al_err(err, "audit", EINVAL, "audit event %s: its %s is too long", kind, what);
    memcpy(buf, src, strlen(src) + 1);
    return 0;
}

int al_audit_append(al_store *s, const char *org_id, const char *ws_id, const char *kind, const char *person_id,
                    const char *run_id, json_t *data, al_error *err) {
    /* An event is written whole or not at all, and its writer hears of it:
     * a json_pack that failed (a string cut inside a character, a NULL where
     * a string belongs) hands us NULL, which used to be stored as {}. */
    if (!data)
        return al_err(err, "audit", EINVAL, "audit event %s: its fields could not be built (a value that is not valid "
                      "UTF-8, or missing)", kind ? kind : "?");
    if (!org_id || !ws_id || !kind) {
        json_decref(data);
        return al_err(err, "audit", EINVAL, "audit event %s: no organisation or workspace", kind ? kind : "?");
    }
    al_store_audit_event ev = { .has_person_id = person_id != NULL, .has_run_id = run_id != NULL };
    int r = field(ev.workspace_id, sizeof ev.workspace_id, ws_id, kind, "workspace", err);
    if (r == 0)
        r = field(ev.org_id, sizeof ev.org_id, org_id, kind, "organisation", err);
    if (r == 0)
        r = field(ev.kind, sizeof ev.kind, kind, kind, "kind", err);
    if (r == 0 && person_id)
        r = field(ev.person_id, sizeof ev.person_id, person_id, kind, "person", err);
    if (r == 0 && run_id)
        r = field(ev.run_id, sizeof ev.run_id, run_id, kind, "run", err);
    if (r < 0) {
        json_decref(data);
        return r;
    }
    ev.data = json_dumps(data, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(data);
    if (!ev.data)
        return al_err(err, "audit", ENOMEM, "audit event %s: cannot serialise its fields", kind);
    al_store_now(ev.created_at, sizeof ev.created_at);
    r = al_store_audit_append(s, &ev, seal, NULL, err);
    free(ev.data);
    return r;
}

/* One chain's check, event by event. */
typedef struct chain_check {
    char prev[65];
    int64_t expect, events;
    const char *why;              /* the first broken link's fault */
    int64_t bad_seq;
    char bad_kind[64];
} chain_check;

static int check_event(const al_store_audit_event *ev, bool malformed, void *userdata) {
    chain_check *c = userdata;
    c->events++;
    if (c->why)
        return 0;
    char *canon = malformed ? NULL : canonical(ev);
    char want[65];
    hex_sha256(c->prev, canon ? canon : "", want);
    bool readable = canon != NULL;
    free(canon);
    if (!readable) /* never the hash of nothing, which a forger could compute */
        c->why = "its fields cannot be read as an event";
    else if (ev->seq != c->expect)
        c->why = "an event is missing before it (sequence gap)";
    else if (strcmp(ev->prev_hash, c->prev) != 0)
        c->why = "its prev_hash is not the hash of the event before it";
    else if (strcmp(ev->hash, want) != 0)
        c->why = "its content does not match its hash (changed after it was written)";
    if (c->why) {
        c->bad_seq = ev->seq;
        snprintf(c->bad_kind, sizeof c->bad_kind, "%s", ev->kind);
        return 0;
    }
    snprintf(c->prev, sizeof c->prev, "%s", ev->hash);
    c->expect++;
    return 0;
}

typedef struct verify_ctx {
    al_store *s;
    al_error *err;
    json_t *report;
    int broken;
} verify_ctx;

static int verify_workspace(const char *ws, void *userdata) {
    verify_ctx *v = userdata;
    chain_check c = { .prev = AL_AUDIT_GENESIS, .expect = 1 };
    int r = al_store_audit_chain(v->s, ws, check_event, &c, v->err);
    if (r < 0)
        return r;
    json_t *entry = json_pack("{s:s, s:I, s:b}", "workspace_id", ws, "events", (json_int_t)c.events, "intact", !c.why);
    if (!entry)
        return al_err(v->err, "audit", ENOMEM, "out of memory");
    if (c.why) {
        v->broken = 1;
        json_object_set_new(entry, "first_broken_seq", json_integer(c.bad_seq));
        json_object_set_new(entry, "kind", json_string(c.bad_kind));
        json_object_set_new(entry, "why", json_string(c.why));
    }
    json_array_append_new(v->report, entry);
    return 0;
}

int al_audit_verify(al_store *s, json_t **ret_report, al_error *err) {
    verify_ctx v = { .s = s, .err = err, .report = json_array() };
    if (!v.report)
        return al_err(err, "audit", ENOMEM, "out of memory");
    int r = al_store_audit_workspaces(s, verify_workspace, &v, err);
    if (r < 0) {
        json_decref(v.report);
        return r;
    }
    *ret_report = v.report;
    return v.broken;
}
