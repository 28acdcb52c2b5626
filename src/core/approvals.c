/* Deciding approvals: approve, deny, withdraw and expire, each one
 * transaction with the run's move out of pending_approval (and its audit
 * event), so exactly one of them wins. */
#include <string.h>

#include "run_end.h"
#include "service.h"
#include "service_int.h"
#include "../store/approvals.h"

/* Closes an open approval of run ID and moves the run out of
 * pending_approval, in one transaction: the decision (approved, denied,
 * expired, canceled) and the run's new state land together or not at all,
 * so a cancel, an approval, a denial and the expiry of one run are mutually
 * exclusive and exactly one of them wins. TO AL_RUN_QUEUED for an
 * approval; otherwise the run ends in TO with ECODE/EMSG. With
 * NOT_AFTER (RFC 3339) the decision only lands before the card's
 * expires_at. 1 won, 0 another decision (or the clock) was first. */
int al_service_close_approval(al_service *s, const char *id, al_approval_decision decision, const char *by,
                              const char *reason, const char *not_after, al_run_state to, const char *ecode,
                              const char *emsg, al_error *err) {
    char now[40];
    al_store_now(now, sizeof now);
    int r = al_store_begin(s->store, err);
    if (r < 0)
        return r;
    r = al_store_approval_decide(s->store, id, decision, by, now, reason, not_after, err);
    if (r > 0)
        /* queued, held by this node until it admits it (below) */
        r = to == AL_RUN_QUEUED ? al_store_run_approved(s->store, id, s->node_id, err)
                                : al_store_run_end(s->store, id, AL_RUN_BIT(AL_RUN_PENDING_APPROVAL), to, ecode, emsg,
                                                   now, err);
    /* the state event too, inside the transaction: a cancel of the queued
     * run that follows can only append its events after this one */
    if (r > 0 && al_service_append_event(s, id, "state", json_pack("{s:s}", "state", al_run_state_name(to))) < 0)
        r = al_err(err, "approval", EIO, "cannot record the run's new state");
    if (r <= 0) {
        al_store_rollback(s->store);
        return r;
    }
    r = al_store_commit(s->store, err);
    return r < 0 ? r : 1;
}

/* A run that ended without running (denied, expired, canceled while it
 * waited): its state event came with the transition, the rest of its end
 * is every run's (run_end.h). */
static void ended_unstarted(al_service *s, const char *id) {
    al_error err = { 0 };
    _cleanup_run_ al_store_run *run = NULL;
    if (al_store_run_get(s->store, id, NULL, &run, &err) < 0)
        run = NULL;
    al_run_ended(s, id, run,
                 &(al_run_end){ .state = run ? run->state : AL_RUN_DENIED,
                                .error_code = run && run->error_code[0] ? run->error_code : NULL,
                                .state_said = true });
}

int al_service_withdraw(al_service *s, const char *id, const char *person_id, al_error *err) {
    int r = al_service_close_approval(s, id, AL_DECISION_CANCELED, person_id, "canceled by the requester", NULL,
                                      AL_RUN_CANCELED, "canceled", "canceled while waiting for approval", err);
    if (r > 0)
        ended_unstarted(s, id);
    return r;
}

int al_service_decide(al_service *s, const al_store_run *run, const char *person_id, bool approve, const char *hash,
                      const char *reason, al_error *err) {
    const char *id = run->id;
    al_store_approval ar;
    int r0 = al_store_approval_get(s->store, id, &ar, err);
    if (r0 == -ENOENT)
        return al_err(err, "approval", ENOENT, "run %s does not wait for an approval", id);
    if (r0 < 0)
        return r0;
    al_store_approval_done(&ar);
    if (ar.decision != AL_DECISION_NONE)
        return al_err(err, "approval", EEXIST, "run %s was already %s", id, al_approval_decision_name(ar.decision));
    if (hash && strcmp(hash, ar.hash) != 0)
        return al_err(err, "approval", ESTALE, "the hash does not match the approval card: nothing was approved");
    /* separation of duties: whoever asked for the run does not decide it
     * (they may withdraw it with cancel), unless the workspace allows it */
    const char *requester = run->person_id;
    /* unreadable settings: no self-approval, and the smallest cap (the run
     * re-reads them before it starts, and fails closed there) */
    al_error serr = { 0 };
    al_settings st;
    bool readable = al_settings_get(s, run->workspace_id, &st, &serr) == 0;
    bool self_ok = readable && st.allow_self_approval;
    int cap = readable ? st.concurrency : 1;
    al_settings_done(&st);
    if (!self_ok && (!requester[0] || !person_id || strcmp(requester, person_id) == 0))
        return al_err(err, "approval", EPERM, "you requested run %s: another admin or approver decides it "
                                              "(you may cancel it; settings allow_self_approval relaxes this)", id);
    char now[40];
    al_store_now(now, sizeof now);
    /* decided once, and only while the card is valid: the decision and the
     * run's move out of pending_approval land together (see above) */
    int n = al_store_begin(s->store, err);
    if (n < 0)
        return n;
    n = al_service_close_approval(s, id, approve ? AL_DECISION_APPROVED : AL_DECISION_DENIED, person_id, reason, now,
                                  approve ? AL_RUN_QUEUED : AL_RUN_DENIED, "denied",
                                  reason && *reason ? reason : "denied by an approver", err);
    /* the decision and the audit event that says so land together, or
     * nothing was decided: a decision the trail does not show is refused */
    if (n > 0 && al_governance_audit(s, run, approve ? "approval.approved" : "approval.denied", person_id,
                                     json_pack("{s:s, s:s}", "run_id", id, "reason", reason ? reason : "")) < 0) {
        al_store_rollback(s->store);
        return al_err(err, "audit", EIO, "the decision's audit event could not be written: nothing was decided");
    }
    if (n > 0)
        n = al_store_commit(s->store, err) < 0 ? -EIO : 1;
    else
        al_store_rollback(s->store);
    if (n < 0)
        return n;
    if (n == 0) {
        /* lost: decided, withdrawn or expired meanwhile; say which */
        al_service_expire_approvals(s);
        al_store_approval d;
        const char *dec = NULL;
        if (al_store_approval_get(s->store, id, &d, err) == 0) {
            dec = al_approval_decision_name(d.decision);
            al_store_approval_done(&d);
        }
        return al_err(err, "approval", EEXIST, "run %s was %s meanwhile", id, dec ? dec : "decided");
    }
    if (!approve) {
        ended_unstarted(s, id);
        return 0;
    }
    /* an approver let it through: the global cap only, not the person's share */
    al_error qerr = { 0 };
    int qr = al_service_enqueue(s, id, requester, run->org_id, cap, false, &qerr);
    if (qr < 0)
        al_service_end_unqueued(s, id, qr == -EIO ? "store" : "queue_full",
                                qr == -EIO ? qerr.msg : "approved, but the run queue was full");
    return 0;
}

void al_service_expire_approvals(al_service *s) {
    al_error err = { 0 };
    char now[40];
    al_store_now(now, sizeof now);
    al_store_run_ref *due = NULL;
    size_t ndue = 0;
    al_store_run_refs_approval_due(s->store, now, &due, &ndue, &err);
    for (size_t i = 0; i < ndue; i++) {
        const char *id = due[i].id;
        _cleanup_run_ al_store_run *run = NULL;
        if (al_store_run_get(s->store, id, NULL, &run, &err) < 0)
            continue;
        /* expired and audited together; if the trail refuses, the card
         * stays open and the next sweep tries again (the log says why) */
        if (al_store_begin(s->store, &err) < 0)
            continue;
        int n = al_service_close_approval(s, id, AL_DECISION_EXPIRED, NULL, NULL, NULL, AL_RUN_DENIED, "expired",
                                          "no one approved this run before its approval expired", &err);
        if (n > 0 && al_governance_audit(s, run, "approval.expired", NULL, json_pack("{s:s}", "run_id", id)) < 0)
            n = -EIO;
        if (n > 0 && al_store_commit(s->store, &err) == 0)
            ended_unstarted(s, id);
        else if (n <= 0)
            al_store_rollback(s->store);
    }
    free(due);
}

