#include "audit.h"
#include "../util/hash.h"
#include "../util/util.h"
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
    /* the heads expected of this chain: SEEN[i] the hash found at their seq */
    const al_audit_head *heads;
    size_t n_heads;
    char (*seen)[65];
    char why_buf[300];            /* WHY when it is about an expected head */
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
    /* only a verified link counts as holding a head */
    for (size_t i = 0; i < c->n_heads; i++)
        if (c->heads[i].seq == ev->seq)
            snprintf(c->seen[i], sizeof c->seen[i], "%s", ev->hash);
    snprintf(c->prev, sizeof c->prev, "%s", ev->hash);
    c->expect++;
    return 0;
}

typedef struct verify_ctx {
    al_store *s;
    al_error *err;
    json_t *report;
    int broken;
    const al_audit_head *expect;
    size_t n_expect;
    bool *matched;                /* per expected head: its workspace has events */
    al_audit_head *heads;         /* scratch, N_EXPECT long: one chain's expected heads */
    char (*seen)[65];             /* and the hashes found at their seqs */
} verify_ctx;

/* Whether C's chain holds each head expected of it; the first that it does
 * not becomes C's fault (a chain broken before it has one already). */
static void check_heads(chain_check *c) {
    for (size_t i = 0; i < c->n_heads && !c->why; i++) {
        const al_audit_head *h = &c->heads[i];
        if (!c->seen[i][0] && h->seq > c->events)
            snprintf(c->why_buf, sizeof c->why_buf, "the chain ends at seq %lld, before the expected head %lld:%.16s...: events were "
                     "removed from its end (truncated)", (long long)c->events, (long long)h->seq, h->hash);
        else if (strcmp(c->seen[i], h->hash) != 0)
            snprintf(c->why_buf, sizeof c->why_buf, "its event at seq %lld is not the expected head %lld:%.16s... (hash %.16s...): the "
                     "chain was rewritten from there or before", (long long)h->seq, (long long)h->seq, h->hash,
                     c->seen[i][0] ? c->seen[i] : "none");
        else
            continue;
        c->why = c->why_buf;
        c->bad_seq = h->seq;
        snprintf(c->bad_kind, sizeof c->bad_kind, "expected head");
    }
}

static int verify_workspace(const char *ws, void *userdata) {
    verify_ctx *v = userdata;
    /* this chain's expected heads: a copy, so that SEEN lines up with them */
    chain_check c = { .prev = AL_AUDIT_GENESIS, .expect = 1, .heads = v->heads, .seen = v->seen };
    for (size_t i = 0; i < v->n_expect; i++)
        if (strcmp(v->expect[i].workspace_id, ws) == 0) {
            v->matched[i] = true;
            v->heads[c.n_heads] = v->expect[i];
            v->seen[c.n_heads++][0] = '\0';
        }
    int r = al_store_audit_chain(v->s, ws, check_event, &c, v->err);
    if (r < 0)
        return r;
    check_heads(&c);
    json_t *entry = json_pack("{s:s, s:I, s:b, s:I, s:s}", "workspace_id", ws, "events", (json_int_t)c.events, "intact",
                              !c.why, "head_seq", (json_int_t)(c.expect - 1), "head_hash", c.prev);
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

#define VERIFY_PAGE 1000

int al_audit_verify_chain(al_store *s, const char *ws_id, const al_audit_head *expect, int64_t max,
                          al_audit_check *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    char seen[1][65] = { "" };
    chain_check c = { .prev = AL_AUDIT_GENESIS, .expect = 1, .heads = expect, .n_heads = expect ? 1 : 0,
                      .seen = seen };
    bool end = false;
    /* page by page, until the end, a break (nothing after it counts) or MAX */
    while (!c.why && c.events < max) {
        int64_t want = max - c.events < VERIFY_PAGE ? max - c.events : VERIFY_PAGE;
        int r = al_store_audit_chain_page(s, ws_id, c.expect - 1, want, check_event, &c, err);
        if (r < 0)
            return r;
        if (r < want) {
            end = true;
            break;
        }
    }
    ret->complete = end || c.why;
    /* a head past what was read is not judged when the read stopped at MAX */
    if (expect && !c.why && (end || expect->seq <= c.events))
        check_heads(&c);
    ret->events = c.events;
    ret->intact = !c.why;
    if (c.why) {
        ret->first_bad_seq = c.bad_seq;
        snprintf(ret->why, sizeof ret->why, "%s", c.why);
    }
    snprintf(ret->head.workspace_id, sizeof ret->head.workspace_id, "%s", ws_id);
    ret->head.seq = c.expect - 1;
    snprintf(ret->head.hash, sizeof ret->head.hash, "%s", c.prev);
    return 0;
}

/* An expected head whose workspace has no event left: its whole chain is gone. */
static int report_vanished(verify_ctx *v) {
    for (size_t i = 0; i < v->n_expect; i++) {
        if (v->matched[i])
            continue;
        char why[200];
        snprintf(why, sizeof why, "the workspace has no audit events, but its chain held %lld:%.16s...: every event "
                 "was removed", (long long)v->expect[i].seq, v->expect[i].hash);
        json_t *entry = json_pack("{s:s, s:I, s:b, s:I, s:s, s:I, s:s, s:s}", "workspace_id", v->expect[i].workspace_id,
                                  "events", (json_int_t)0, "intact", 0, "head_seq", (json_int_t)0, "head_hash",
                                  AL_AUDIT_GENESIS, "first_broken_seq", (json_int_t)v->expect[i].seq, "kind",
                                  "expected head", "why", why);
        if (!entry || json_array_append_new(v->report, entry) < 0)
            return al_err(v->err, "audit", ENOMEM, "out of memory");
        v->broken = 1;
        for (size_t j = i; j < v->n_expect; j++) /* one entry per workspace */
            if (strcmp(v->expect[j].workspace_id, v->expect[i].workspace_id) == 0)
                v->matched[j] = true;
    }
    return 0;
}

int al_audit_verify(al_store *s, const al_audit_head *expect, size_t n_expect, json_t **ret_report, al_error *err) {
    size_t n = n_expect ? n_expect : 1;
    _cleanup_free_ bool *matched = calloc(n, sizeof *matched);
    _cleanup_free_ al_audit_head *heads = calloc(n, sizeof *heads);
    _cleanup_free_ char(*seen)[65] = calloc(n, sizeof *seen);
    verify_ctx v = { .s = s, .err = err, .report = json_array(), .expect = expect, .n_expect = n_expect,
                     .matched = matched, .heads = heads, .seen = seen };
    if (!v.report || !matched || !heads || !seen) {
        json_decref(v.report);
        return al_err(err, "audit", ENOMEM, "out of memory");
    }
    int r = al_store_audit_workspaces(s, verify_workspace, &v, err);
    if (r == 0)
        r = report_vanished(&v);
    if (r < 0) {
        json_decref(v.report);
        return r;
    }
    *ret_report = v.report;
    return v.broken;
}

int al_audit_head_parse(const char *text, al_audit_head *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    const char *c1 = strchr(text, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    char num[24];
    uint64_t seq;
    bool ok = c1 && c2 && c1 > text && (size_t)(c1 - text) < sizeof ret->workspace_id &&
              strspn(text, AL_AUDIT_WS_CHARS) == (size_t)(c1 - text) && (size_t)(c2 - c1 - 1) < sizeof num &&
              al_is_sha256_hex(c2 + 1);
    if (ok) {
        snprintf(ret->workspace_id, sizeof ret->workspace_id, "%.*s", (int)(c1 - text), text);
        snprintf(num, sizeof num, "%.*s", (int)(c2 - c1 - 1), c1 + 1);
        /* one spelling: no leading zero */
        ok = num[0] != '0' && al_parse_u64(num, &seq) == 0 && seq >= 1 && seq <= INT64_MAX;
    }
    if (!ok)
        return al_err(err, "audit", EINVAL, "%.80s: want a head as `audit verify` prints it, WORKSPACE:SEQ:HASH "
                      "(HASH 64 hex digits)", text);
    ret->seq = (int64_t)seq;
    snprintf(ret->hash, sizeof ret->hash, "%s", c2 + 1);
    return 0;
}
