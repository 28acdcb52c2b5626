/* The idempotency keys' rows (store.h: al_store_idem_*), in SQLite. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int al_store_idem_get(al_store *s, const char *person_id, const char *key, const char *now, al_store_idem *ret,
                      al_error *err) {
    json_t *rows = al_store_query(s, err,
                                  "SELECT request_hash, kind, resource_id FROM idempotency_keys "
                                  "WHERE person_id = ? AND key = ? AND expires_at > ?",
                                  "sss", person_id, key, now);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (row) {
        const char *hash = json_string_value(json_object_get(row, "request_hash"));
        const char *kind = json_string_value(json_object_get(row, "kind"));
        const char *id = json_string_value(json_object_get(row, "resource_id"));
        /* a row that does not fit the record is not read as another one */
        if (!hash || strlen(hash) >= sizeof ret->request_hash || !kind || strlen(kind) >= sizeof ret->kind || !id ||
            strlen(id) >= sizeof ret->resource_id) {
            r = al_err(err, "idempotency", EIO, "a stored idempotency key is malformed");
        } else {
            snprintf(ret->request_hash, sizeof ret->request_hash, "%s", hash);
            snprintf(ret->kind, sizeof ret->kind, "%s", kind);
            snprintf(ret->resource_id, sizeof ret->resource_id, "%s", id);
            r = 1;
        }
    }
    json_decref(rows);
    return r;
}

int al_store_idem_put(al_store *s, const char *person_id, const char *key, const al_store_idem *rec, const char *now,
                      const char *expires_at, al_error *err) {
    /* a row past its time that the sweep has not reached yet is gone */
    int r = al_store_exec(s, err, "DELETE FROM idempotency_keys WHERE person_id = ? AND key = ? AND expires_at <= ?", "sss",
                          person_id, key, now);
    if (r < 0)
        return r;
    r = al_store_exec(s, err,
                      "INSERT INTO idempotency_keys (person_id, key, request_hash, kind, resource_id, created_at, expires_at) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)",
                      "sssssss", person_id, key, rec->request_hash, rec->kind, rec->resource_id, now, expires_at);
    return r < 0 ? r : 0;
}

int al_store_idem_forget(al_store *s, const char *person_id, const char *key, const char *resource_id, al_error *err) {
    return al_store_exec(s, err, "DELETE FROM idempotency_keys WHERE person_id = ? AND key = ? AND resource_id = ?", "sss",
                         person_id, key, resource_id);
}

int al_store_idem_sweep(al_store *s, const char *now, al_error *err) {
    return al_store_exec(s, err, "DELETE FROM idempotency_keys WHERE expires_at <= ?", "s", now);
}
