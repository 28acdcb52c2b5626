/* Approval requests' rows (approvals.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approvals.h"
#include "internal.h"

static const char *const decision_names[_AL_DECISION_MAX] = {
    [AL_DECISION_NONE] = NULL,           [AL_DECISION_APPROVED] = "approved", [AL_DECISION_DENIED] = "denied",
    [AL_DECISION_EXPIRED] = "expired",   [AL_DECISION_CANCELED] = "canceled",
};

const char *al_approval_decision_name(al_approval_decision d) {
    return d >= 0 && d < _AL_DECISION_MAX ? decision_names[d] : NULL;
}

al_approval_decision al_approval_decision_from_name(const char *name) {
    if (!name)
        return AL_DECISION_NONE;
    for (int d = AL_DECISION_NONE + 1; d < _AL_DECISION_MAX; d++)
        if (strcmp(name, decision_names[d]) == 0)
            return (al_approval_decision)d;
    return _AL_DECISION_INVALID;
}


void al_store_approval_done(al_store_approval *a) {
    if (!a)
        return;
    free(a->card);
    free(a->reason);
    a->card = a->reason = NULL;
}

int al_store_approval_insert(al_store *s, const al_store_approval *a, al_error *err) {
    /* the card shows the code (and the inputs' names) to the approver: a
     * copy the run's organisation stores as much as the run's own, counted
     * with it and given back when the run expires */
    int64_t bytes = a->card ? (int64_t)strlen(a->card) : 0;
    int r = al_store_begin(s, err);
    if (r < 0)
        return r;
    if ((r = al_store_exec(s, err,
                           "INSERT INTO approval_requests (id, run_id, org_id, workspace_id, hash, card, requested_at, "
                           "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           "ssssssss", a->id, a->run_id, a->org_id, a->workspace_id, a->hash, a->card, a->requested_at,
                           a->expires_at)) < 0 ||
        (r = al_store_exec(s, err, "UPDATE runs SET stored_bytes = stored_bytes + ? WHERE id = ?", "is", bytes,
                           a->run_id)) < 0) {
        al_store_rollback(s);
        return r;
    }
    r = al_store_exec_commit(s, err, "UPDATE orgs SET run_bytes = run_bytes + ? WHERE id = ?", "is", bytes, a->org_id);
    return r < 0 ? r : 0;
}

int al_store_approval_get(al_store *s, const char *run_id, al_store_approval *ret, al_error *err) {
    memset(ret, 0, sizeof *ret);
    json_t *rows = al_store_query(s, err,
                                  "SELECT id, run_id, org_id, workspace_id, hash, card, requested_at, expires_at, decision, "
                                  "decided_by, decided_at, reason FROM approval_requests WHERE run_id = ?",
                                  "s", run_id);
    if (!rows)
        return -EIO;
    json_t *row = json_array_get(rows, 0);
    int r = 0;
    if (!row) {
        r = al_err(err, "approval", ENOENT, "run %s has no approval request", run_id);
        goto out;
    }
    json_t *dec = json_object_get(row, "decision");
    const char *card = json_string_value(json_object_get(row, "card"));
    const char *reason = json_string_value(json_object_get(row, "reason"));
    ret->decision = json_is_null(dec) ? AL_DECISION_NONE : al_approval_decision_from_name(json_string_value(dec));
    if (!al_col_text(row, "id", ret->id, sizeof ret->id, false) || !al_col_text(row, "run_id", ret->run_id, sizeof ret->run_id, false) ||
        !al_col_text(row, "org_id", ret->org_id, sizeof ret->org_id, false) ||
        !al_col_text(row, "workspace_id", ret->workspace_id, sizeof ret->workspace_id, false) ||
        !al_col_text(row, "hash", ret->hash, sizeof ret->hash, false) ||
        !al_col_text(row, "requested_at", ret->requested_at, sizeof ret->requested_at, false) ||
        !al_col_text(row, "expires_at", ret->expires_at, sizeof ret->expires_at, false) ||
        !al_col_text(row, "decided_by", ret->decided_by, sizeof ret->decided_by, true) ||
        !al_col_text(row, "decided_at", ret->decided_at, sizeof ret->decided_at, true) || !card ||
        (!reason && !json_is_null(json_object_get(row, "reason"))) || ret->decision == _AL_DECISION_INVALID) {
        r = al_err(err, "approval", EIO, "run %s's stored approval request is malformed", run_id);
        goto out;
    }
    ret->card = strdup(card);
    ret->reason = reason ? strdup(reason) : NULL;
    if (!ret->card || (reason && !ret->reason)) {
        al_store_approval_done(ret);
        r = al_err(err, "approval", ENOMEM, "out of memory");
    }
out:
    json_decref(rows);
    return r;
}

int al_store_approval_decide(al_store *s, const char *run_id, al_approval_decision decision, const char *by,
                             const char *now, const char *reason, const char *not_after, al_error *err) {
    const char *name = al_approval_decision_name(decision);
    if (!name)
        return al_err(err, "approval", EINVAL, "not a decision");
    return al_store_exec(s, err,
                         "UPDATE approval_requests SET decision = ?, decided_by = ?, decided_at = ?, reason = ? "
                         "WHERE run_id = ? AND decision IS NULL AND (CAST(? AS TEXT) IS NULL OR expires_at > ?)",
                         "sSsssSS", name, by, now, reason ? reason : "", run_id, not_after, not_after);
}
