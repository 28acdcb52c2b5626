/* Tenants' reads (tenants.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "tenants.h"

/* Column COL of ROW into BUF; NULL is "" when NULLABLE. False when it does
 * not fit the record (a row of another shape is not read as one). */
static bool text(json_t *row, const char *col, char *buf, size_t len, bool nullable) {
    json_t *v = json_object_get(row, col);
    if (nullable && json_is_null(v)) {
        buf[0] = '\0';
        return true;
    }
    const char *t = json_string_value(v);
    if (!t || strlen(t) >= len)
        return false;
    memcpy(buf, t, strlen(t) + 1);
    return true;
}

int al_store_workspace_get(al_store *s, const char *id, al_store_workspace *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    json_t *rows = al_store_query(s, err,
                                  "SELECT id, org_id, max_timeout_s, max_memory_mb, max_cpus_milli, max_pids, price_per_run, "
                                  "created_at FROM workspaces WHERE id = ?",
                                  "s", id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row) {
        r = al_err(err, "store", ENOENT, "no workspace %s", id);
    } else if (!text(row, "id", ret->id, sizeof ret->id, false) ||
               !text(row, "org_id", ret->org_id, sizeof ret->org_id, false) ||
               !text(row, "created_at", ret->created_at, sizeof ret->created_at, false)) {
        r = al_err(err, "store", EIO, "workspace %s's stored row is malformed", id);
    } else {
        /* json_integer_value is 0 for what is not an integer */
        ret->max_timeout_s = json_integer_value(json_object_get(row, "max_timeout_s"));
        ret->max_memory_mb = json_integer_value(json_object_get(row, "max_memory_mb"));
        ret->max_cpus_milli = json_integer_value(json_object_get(row, "max_cpus_milli"));
        ret->max_pids = json_integer_value(json_object_get(row, "max_pids"));
        ret->has_price = json_is_integer(json_object_get(row, "price_per_run"));
        ret->price_per_run = json_integer_value(json_object_get(row, "price_per_run"));
    }
    json_decref(rows);
    return r;
}

int al_store_tenants_each(al_store *s, al_tenant_kind kind, int (*each)(const al_store_tenant *t, void *userdata),
                          void *userdata, al_error *err) {
    /* each listing's columns under the same names: id, parent_id, name,
     * prefix, created_at, revoked_at */
    static const char *const sql[_AL_TENANT_KIND_MAX] = {
        [AL_TENANT_ORG] = "SELECT id, name, created_at FROM orgs ORDER BY created_at, id",
        [AL_TENANT_WORKSPACE] = "SELECT id, org_id AS parent_id, name, created_at FROM workspaces ORDER BY created_at, id",
        [AL_TENANT_PERSON] = "SELECT id, workspace_id AS parent_id, name, created_at FROM people ORDER BY created_at, id",
        [AL_TENANT_KEY] = "SELECT id, person_id AS parent_id, prefix, created_at, revoked_at FROM api_keys "
                          "ORDER BY created_at, id",
    };
    if (kind < 0 || kind >= _AL_TENANT_KIND_MAX)
        return al_err(err, "store", EINVAL, "not a kind of tenant");
    json_t *rows = al_store_query(s, err, sql[kind], NULL);
    if (!rows)
        return -EIO;
    int r = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
        al_store_tenant t = { .name = json_string_value(json_object_get(row, "name")) };
        bool key = kind == AL_TENANT_KEY;
        if (!text(row, "id", t.id, sizeof t.id, false) || !text(row, "created_at", t.created_at, sizeof t.created_at, false) ||
            (kind != AL_TENANT_ORG && !text(row, "parent_id", t.parent_id, sizeof t.parent_id, false)) ||
            (!key && !t.name) || (key && !text(row, "prefix", t.key_prefix, sizeof t.key_prefix, false)) ||
            (key && !text(row, "revoked_at", t.revoked_at, sizeof t.revoked_at, true))) {
            r = al_err(err, "store", EIO, "a stored tenant is malformed");
            break;
        }
        if ((r = each(&t, userdata)) < 0)
            break;
    }
    json_decref(rows);
    return r < 0 ? r : 0;
}

int al_store_keys_count(al_store *s, int64_t *ret, al_error *err) {
    json_t *rows = al_store_query(s, err, "SELECT COUNT(*) AS n FROM api_keys", NULL);
    if (!rows)
        return -EIO;
    *ret = json_integer_value(json_object_get(json_array_get(rows, 0), "n"));
    json_decref(rows);
    return 0;
}
