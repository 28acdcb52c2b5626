#include "audit.h"
#include "../util/hash.h"
#include "../store/internal.h" /* SQL, until it moves into src/store (issue 12) */

#include <nettle/sha2.h>
#include <string.h>

#define GENESIS "0000000000000000000000000000000000000000000000000000000000000000"

static void hex_sha256(const char *a, const char *b, char out[65]) {
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, strlen(a), (const uint8_t *)a);
    sha256_update(&c, 1, (const uint8_t *)"\n");
    sha256_update(&c, strlen(b), (const uint8_t *)b);
    al_sha256_finish_hex(&c, out);
}

/* The hashed form of an event: canonical JSON (sorted keys, compact) of
 * every field but the hash itself. */
static char *canonical(json_t *ev) {
    json_t *c = json_pack("{s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O, s:O}", "workspace_id", json_object_get(ev, "workspace_id"),
                          "seq", json_object_get(ev, "seq"), "org_id", json_object_get(ev, "org_id"), "kind",
                          json_object_get(ev, "kind"), "person_id", json_object_get(ev, "person_id"), "run_id",
                          json_object_get(ev, "run_id"), "data", json_object_get(ev, "data"), "created_at",
                          json_object_get(ev, "created_at"), "prev_hash", json_object_get(ev, "prev_hash"));
    char *s = c ? json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(c);
    return s;
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
    char *data_text = json_dumps(data, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(data);
    if (!data_text)
        return al_err(err, "audit", ENOMEM, "audit event %s: cannot serialise its fields", kind);
    char now[40];
    al_store_now(now, sizeof now);
    /* the chain's tail is read and extended in one transaction */
    int r = al_store_begin(s, err);
    if (r < 0) {
        free(data_text);
        return r;
    }
    json_t *last = al_store_query(s, err, "SELECT seq, hash FROM audit_events WHERE workspace_id = ? ORDER BY seq DESC LIMIT 1",
                                  "s", ws_id);
    if (!last) {
        al_store_rollback(s);
        free(data_text);
        return al_err(err, "audit", EIO, "audit event %s: cannot read the chain's tail", kind);
    }
    json_int_t seq = 1;
    const char *prev = GENESIS;
    if (json_array_size(last)) {
        seq = json_integer_value(json_object_get(json_array_get(last, 0), "seq")) + 1;
        prev = json_string_value(json_object_get(json_array_get(last, 0), "hash"));
    }
    char prev_copy[65];
    snprintf(prev_copy, sizeof prev_copy, "%s", prev ? prev : "");
    json_decref(last);
    json_t *ev = json_pack("{s:s, s:I, s:s, s:s, s:s?, s:s?, s:s, s:s, s:s}", "workspace_id", ws_id, "seq", seq, "org_id",
                           org_id, "kind", kind, "person_id", person_id, "run_id", run_id, "data", data_text,
                           "created_at", now, "prev_hash", prev_copy);
    if (ev && !json_object_get(ev, "person_id"))
        json_object_set_new(ev, "person_id", json_null());
    if (ev && !json_object_get(ev, "run_id"))
        json_object_set_new(ev, "run_id", json_null());
    char *canon = ev ? canonical(ev) : NULL;
    json_decref(ev);
    if (!canon) {
        /* never the hash of nothing: a link that verifies must cover the event */
        al_store_rollback(s);
        free(data_text);
        return al_err(err, "audit", EINVAL, "audit event %s: cannot build its canonical form (an id that is not "
                      "valid UTF-8?)", kind);
    }
    char hash[65];
    hex_sha256(prev_copy, canon, hash);
    free(canon);
    r = al_store_exec(s, err,
                      "INSERT INTO audit_events (workspace_id, seq, org_id, kind, person_id, run_id, data, created_at, "
                      "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      "sissSSssss", ws_id, (int64_t)seq, org_id, kind, person_id, run_id, data_text, now, prev_copy, hash);
    free(data_text);
    if (r < 0) {
        al_store_rollback(s);
        return r;
    }
    return al_store_commit(s, err);
}

int al_audit_verify(al_store *s, json_t **ret_report, al_error *err) {
    json_t *wss = al_store_query(s, err, "SELECT DISTINCT workspace_id FROM audit_events ORDER BY workspace_id", NULL);
    if (!wss)
        return -EIO;
    json_t *report = json_array();
    int broken = 0;
    size_t i;
    json_t *w;
    json_array_foreach(wss, i, w) {
        const char *ws = json_string_value(json_object_get(w, "workspace_id"));
        json_t *evs = al_store_query(s, err, "SELECT * FROM audit_events WHERE workspace_id = ? ORDER BY seq", "s", ws);
        if (!evs) {
            json_decref(wss);
            json_decref(report);
            return -EIO;
        }
        char prev[65] = GENESIS;
        json_int_t expect = 1;
        const char *why = NULL;
        json_t *bad = NULL;
        size_t k;
        json_t *ev;
        json_array_foreach(evs, k, ev) {
            json_int_t seq = json_integer_value(json_object_get(ev, "seq"));
            const char *ph = json_string_value(json_object_get(ev, "prev_hash"));
            const char *h = json_string_value(json_object_get(ev, "hash"));
            char *canon = canonical(ev);
            char want[65];
            hex_sha256(prev, canon ? canon : "", want);
            bool readable = canon != NULL;
            free(canon);
            if (!readable) /* never the hash of nothing, which a forger could compute */
                why = "its fields cannot be read as an event";
            else if (seq != expect)
                why = "an event is missing before it (sequence gap)";
            else if (!ph || strcmp(ph, prev) != 0)
                why = "its prev_hash is not the hash of the event before it";
            else if (!h || strcmp(h, want) != 0)
                why = "its content does not match its hash (changed after it was written)";
            if (why) {
                bad = ev;
                break;
            }
            snprintf(prev, sizeof prev, "%s", h);
            expect++;
        }
        json_t *entry = json_pack("{s:s, s:I, s:b}", "workspace_id", ws, "events", (json_int_t)json_array_size(evs),
                                  "intact", bad == NULL);
        if (bad) {
            broken = 1;
            json_object_set(entry, "first_broken_seq", json_object_get(bad, "seq"));
            json_object_set(entry, "kind", json_object_get(bad, "kind"));
            json_object_set_new(entry, "why", json_string(why));
        }
        json_array_append_new(report, entry);
        json_decref(evs);
    }
    json_decref(wss);
    *ret_report = report;
    return broken;
}
