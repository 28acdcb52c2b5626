/*
 * Idempotency-Key of the creating POSTs (docs/api.md "Idempotent
 * requests"). A client that lost the answer to a request (a daemon killed
 * after it accepted a run, a dropped connection) sends the request again
 * with the same key and gets what the first one created, never a second
 * run it would pay for twice.
 *
 * A key is a person's: (person, key) is the primary key of its row, so
 * another person's same key is unrelated. It is bound to the request by a
 * hash of the route and the canonical body, so the same key with another
 * request is refused (409) rather than answered with something the client
 * did not ask for. Its row is written in the transaction that records what
 * was created (al_idem_record inside the caller's BEGIN ... COMMIT): a crash
 * leaves both or neither. Rows are kept AL_IDEM_TTL_S and then swept.
 */
#include <nettle/sha2.h>
#include <string.h>

#include "service.h"

int al_idem_init(al_idem *ret, const char *key, const char *scope, const void *body, size_t len, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (!key)
        return 0;
    size_t n = strlen(key);
    if (n == 0 || n > AL_IDEM_KEY_MAX)
        return al_err(err, "idempotency", EINVAL, "Idempotency-Key must be 1 to %d characters", AL_IDEM_KEY_MAX);
    /* printable ASCII: what a header carries unambiguously, and what a log
     * or an error message can show as it is */
    for (size_t i = 0; i < n; i++)
        if (key[i] < 0x20 || key[i] > 0x7e)
            return al_err(err, "idempotency", EINVAL, "Idempotency-Key must be printable ASCII (0x20-0x7e)");
    memcpy(ret->key, key, n + 1);
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    /* the scope and the body, separated by a byte no scope holds */
    sha256_update(&c, strlen(scope), (const uint8_t *)scope);
    sha256_update(&c, 1, (const uint8_t *)"\0");
    sha256_update(&c, len, body ? (const uint8_t *)body : (const uint8_t *)"");
    sha256_digest(&c, sizeof d, d);
    for (size_t i = 0; i < sizeof d; i++)
        snprintf(ret->hash + 2 * i, 3, "%02x", d[i]);
    return 1;
}

int al_idem_init_json(al_idem *ret, const char *key, const char *scope, json_t *body, al_error *err) {
    memset(ret, 0, sizeof *ret);
    if (!key)
        return 0;
    /* the canonical form: sorted keys, no whitespace, so that the same
     * request sent again by another client library hashes the same */
    char *text = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!text)
        return al_err(err, "idempotency", ENOMEM, "cannot hash the request");
    int r = al_idem_init(ret, key, scope, text, strlen(text), err);
    free(text);
    return r;
}

int al_idem_lookup(al_store *st, const al_principal *p, const al_idem *k, const char *kind, char ret_id[40],
                   al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    al_store_idem row;
    int r = al_store_idem_get(st, p->person_id, k->key, now, &row, err);
    if (r <= 0)
        return r;
    if (strcmp(row.request_hash, k->hash) != 0 || strcmp(row.kind, kind) != 0)
        return al_err(err, "idempotency", EEXIST,
                      "this Idempotency-Key was used for another request (other body or route) in the last %d hours: "
                      "use a new key for a new request",
                      AL_IDEM_TTL_S / 3600);
    snprintf(ret_id, 40, "%s", row.resource_id);
    return 1;
}

int al_idem_record(al_store *st, const al_principal *p, const al_idem *k, const char *kind, const char *resource_id,
                   al_error *err) {
    char now[40], expires[40];
    al_store_now(now, sizeof now);
    al_rfc3339_after(AL_IDEM_TTL_S, expires, sizeof expires);
    al_store_idem rec = { 0 };
    if (strlen(kind) >= sizeof rec.kind || strlen(resource_id) >= sizeof rec.resource_id)
        return al_err(err, "idempotency", EINVAL, "an idempotency record too long to keep");
    snprintf(rec.request_hash, sizeof rec.request_hash, "%s", k->hash);
    snprintf(rec.kind, sizeof rec.kind, "%s", kind);
    snprintf(rec.resource_id, sizeof rec.resource_id, "%s", resource_id);
    return al_store_idem_put(st, p->person_id, k->key, &rec, now, expires, err);
}

int al_idem_forget(al_store *st, const al_principal *p, const al_idem *k, const char *resource_id, al_error *err) {
    return al_store_idem_forget(st, p->person_id, k->key, resource_id, err);
}

int al_idem_sweep(al_store *st, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    return al_store_idem_sweep(st, now, err);
}
