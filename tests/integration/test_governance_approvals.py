"""Governance (docs/api.md): approvals.  A workspace whose policy asks for it
creates runs in `pending_approval` with an approval card; admins and approvers
approve (bound to the card's hash) or deny; unanswered cards expire; `?wait=true`
waits through the approval; every decision is kept, audited and never charged
when nothing ran; other tenants see none of it."""
import hashlib
import json
import re
import threading
import time
import uuid

import pytest

from service_util import (CARD_FIELDS, GOV_TERMINAL, assert_error, audit_events, balance, get_settings,
                          gov_tenant, parse_time, put_settings, service, services, set_price, usage)  # noqa: F401

HEX64 = re.compile(r"^[0-9a-f]{64}$")


@pytest.fixture(scope="module")
def ws(service):
    """A workspace with approval_policy always: admin client, approver, member (and their ids)."""
    t = gov_tenant(service, "appr")
    t.approver_id, t.approver = t.person_in("approver")
    t.member_id, t.member = t.person_in("member")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    return t


def token():
    return "tok-" + uuid.uuid4().hex


def pending(client, code, **fields):
    """POST a run that needs approval; returns it (asserting the card)."""
    status, _, run = client.post_run(code, **fields)
    assert status == 201, (status, run)
    assert run["state"] == "pending_approval", f"the policy asks for approval but the run is {run['state']}: {run}"
    card = run.get("approval")
    assert isinstance(card, dict), f"a pending run has no approval card: {run}"
    missing = CARD_FIELDS - set(card)
    assert not missing, f"the approval card lacks {missing}: {card}"
    assert card["code"] == code and card["language"] == run["language"], card
    assert card["risk"] == "high", card
    assert card["network"] == run["network"] and card["limits"] == run["limits"], (card, run)
    assert card["description"] == run["description"], card
    assert isinstance(card["runtime"], str) and card["runtime"], card
    assert HEX64.match(card["hash"]), card
    assert run["started_at"] is None and run["result"] is None, run
    return run


def approve(client, run_id, want=None, **body):
    status, _, doc = client.request("POST", f"/v1/runs/{run_id}/approve", json=body, timeout=30)
    if want is None:
        assert status in (200, 202), f"approve {run_id}: {status} {doc!r}"
    return status, doc


def deny(client, run_id, **body):
    return client.request("POST", f"/v1/runs/{run_id}/deny", json=body, timeout=30)


def test_card_and_approve_by_approver(ws):
    tok = token()
    code = f"print('{tok}')"
    bal = balance(ws.client)
    run = pending(ws.member, code, description="print a token for the approver")
    card = run["approval"]
    assert parse_time(card["expires_at"]) > parse_time(card["requested_at"])
    # nothing is charged or started while pending
    time.sleep(0.5)
    assert ws.member.get_run(run["id"])["state"] == "pending_approval"
    assert balance(ws.client) == bal
    status, doc = approve(ws.approver, run["id"], hash=card["hash"], reason="looks fine")
    assert isinstance(doc, dict) and doc.get("id") == run["id"], doc
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert done["state"] == "succeeded", done
    # the run that executed is exactly the card's code
    assert done["result"]["stdout"] == tok + "\n", done["result"]
    a = done["approval"]
    assert a["decision"] == "approved" and a["decided_by"] == ws.approver_id, a
    assert a["reason"] == "looks fine" and parse_time(a["decided_at"]) >= parse_time(card["requested_at"]), a
    assert a["hash"] == card["hash"] and a["code"] == code, "the card changed after approval"
    assert balance(ws.client) == bal - 2
    kinds = [e["kind"] for e in audit_events(ws.client, run_id=run["id"])]
    for k in ("capability.invoke_allowed", "approval.requested", "approval.approved", "tool.call"):
        assert k in kinds, f"{k} missing from the run's audit events: {kinds}"
    assert kinds.index("approval.requested") < kinds.index("approval.approved") < kinds.index("tool.call"), kinds
    ev = [e for e in audit_events(ws.client, run_id=run["id"]) if e["kind"] == "approval.approved"][0]
    assert ev["person_id"] == ws.approver_id, ev


def test_approve_by_admin_without_hash(ws):
    tok = token()
    run = pending(ws.member, f"print('{tok}')")
    approve(ws.client, run["id"])
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert done["state"] == "succeeded" and done["result"]["stdout"] == tok + "\n", done
    assert done["approval"]["decision"] == "approved" and done["approval"]["decided_by"] == ws.person


def test_member_cannot_decide(ws):
    run = pending(ws.member, "print('member tries')")
    for path in ("approve", "deny"):
        status, _, doc = ws.member.request("POST", f"/v1/runs/{run['id']}/{path}",
                                           json={"hash": run["approval"]["hash"]})
        assert_error(status, doc, "forbidden", 403)
    assert ws.member.get_run(run["id"])["state"] == "pending_approval"
    # a member of the workspace cannot approve someone else's run either
    other_member_id, other_member = ws.person_in("member")
    status, _, doc = other_member.request("POST", f"/v1/runs/{run['id']}/approve", json={})
    assert_error(status, doc, "forbidden", 403)
    status, _, doc = deny(ws.approver, run["id"], reason="cleanup")
    assert status in (200, 202), (status, doc)


def test_wrong_hash_is_409_and_binding(ws):
    tok = token()
    code = f"print('{tok}')"
    run = pending(ws.member, code)
    card = run["approval"]
    wrong = [hashlib.sha256(b"print('something else')").hexdigest(), "0" * 64,
             card["hash"][:-1] + ("0" if card["hash"][-1] != "0" else "1")]
    for h in wrong:
        status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": h})
        assert_error(status, doc, "conflict")
    again = ws.member.get_run(run["id"])
    assert again["state"] == "pending_approval" and again["approval"]["hash"] == card["hash"], again
    assert again["approval"].get("decision") in (None, "", "pending"), again["approval"]
    # a second submission with other code gets another card and another hash
    other = pending(ws.member, code + "\nprint('more')")
    assert other["approval"]["hash"] != card["hash"]
    # approving the first with the second's hash is refused too
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve",
                                         json={"hash": other["approval"]["hash"]})
    assert_error(status, doc, "conflict")
    # the hash covers the limits: the same code with other limits is another card
    third = pending(ws.member, code, limits={"timeout_s": 7})
    assert third["approval"]["hash"] != card["hash"], "the card's hash does not cover the limits"
    approve(ws.approver, run["id"], hash=card["hash"])
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert done["state"] == "succeeded" and done["result"]["stdout"] == tok + "\n", done
    # decided once: approving again, or denying now, is 409
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    assert_error(status, doc, "conflict")
    status, _, doc = deny(ws.approver, run["id"])
    assert_error(status, doc, "conflict")
    for r in (other, third):
        deny(ws.client, r["id"], reason="cleanup")


def test_deny(ws):
    bal = balance(ws.client)
    tok = token()
    run = pending(ws.member, f"open('/out/never.txt','w').write('x'); print('{tok}')")
    status, _, doc = deny(ws.approver, run["id"], reason="not today: " + tok[:8])
    assert status in (200, 202), (status, doc)
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=10)
    assert done["state"] == "denied", done
    assert done["result"] is None or tok not in json.dumps(done["result"]), "a denied run ran"
    assert done["artifacts"] == [], done
    assert done["error"] and "not today" in done["error"]["message"] + json.dumps(done["error"]), done["error"]
    assert done["finished_at"] is not None and done["started_at"] is None, done
    a = done["approval"]
    assert a["decision"] == "denied" and a["decided_by"] == ws.approver_id and "not today" in a["reason"], a
    assert balance(ws.client) == bal, "a denied run was charged"
    led = [e for e in usage(ws.client)["ledger"] if e.get("run_id") == run["id"]]
    assert led == [], f"a denied run has ledger entries: {led}"
    kinds = [e["kind"] for e in audit_events(ws.client, run_id=run["id"])]
    assert "approval.requested" in kinds and "approval.denied" in kinds and "approval.approved" not in kinds, kinds
    # the stream tells the agent: the card, then the result (denied)
    ev = ws.member.events(run["id"], timeout=15)
    types = [t for _, t, _ in ev]
    assert "approval" in types, types
    assert types[-1] == "result" and ev[-1][2]["state"] == "denied", ev[-1]
    assert "stdout" not in types, ev
    # a denied run cannot be approved, canceled (it has ended) or denied again
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={})
    assert_error(status, doc, "conflict")
    status, _, doc = ws.member.cancel(run["id"])
    assert_error(status, doc, "conflict")
    # it is listed as denied
    assert {r["id"]: r["state"] for r in ws.member.list_runs()}[run["id"]] == "denied"


def test_expiry(service):
    t = gov_tenant(service, "exp")
    _, member = t.person_in("member")
    put_settings(t.client, approval_policy="always", approval_ttl_s=2)
    bal = balance(t.client)
    run = pending(member, "print('too late')")
    card = run["approval"]
    ttl = (parse_time(card["expires_at"]) - parse_time(card["requested_at"])).total_seconds()
    assert 1.0 <= ttl <= 3, f"approval_ttl_s 2 but the card expires after {ttl}s: {card}"
    done = member.wait_state(run["id"], GOV_TERMINAL, timeout=20)
    assert done["state"] == "denied", done
    assert done["error"] and done["error"]["code"] == "expired", done
    assert done["approval"]["decision"] in ("expired", "denied"), done["approval"]
    assert balance(t.client) == bal
    status, _, doc = t.client.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    assert_error(status, doc, "conflict")
    kinds = [e["kind"] for e in audit_events(t.client, run_id=run["id"])]
    assert "approval.expired" in kinds and "approval.approved" not in kinds, kinds
    ev = member.events(run["id"], timeout=15)
    assert ev[-1][1] == "result" and ev[-1][2]["state"] == "denied", ev[-1]
    assert ev[-1][2]["error"]["code"] == "expired"


def test_expires_at_is_not_early(service):
    """expires_at is requested_at + approval_ttl_s (not rounded down to the second)."""
    t = gov_tenant(service, "exq")
    put_settings(t.client, approval_policy="always", approval_ttl_s=5)
    short = []
    for _ in range(4):
        card = pending(t.client, "print(1)")["approval"]
        ttl = (parse_time(card["expires_at"]) - parse_time(card["requested_at"])).total_seconds()
        if ttl < 4.999:
            short.append((card["requested_at"], card["expires_at"], ttl))
        time.sleep(0.13)
    assert not short, f"approval_ttl_s 5 but cards expire sooner: {short}"


def _find_pending(client, description, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in client.list_runs():
            if r["description"] == description and r["state"] == "pending_approval":
                return r
        time.sleep(0.1)
    raise AssertionError(f"no pending run described {description!r}")


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_wait_through_approval(ws, decision):
    tok = token()
    desc = "wait-" + tok
    box = {}

    def submit():
        box["answer"] = ws.member.post_run(f"print('{tok}')", wait=True, description=desc)
        box["at"] = time.monotonic()

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    run = _find_pending(ws.member, desc)
    time.sleep(1.0)
    assert th.is_alive(), f"?wait=true answered before the approval: {box.get('answer')}"
    t_decide = time.monotonic()
    if decision == "approve":
        approve(ws.approver, run["id"], hash=run["approval"]["hash"])
    else:
        status, _, doc = deny(ws.approver, run["id"], reason="no waiting")
        assert status in (200, 202), (status, doc)
    th.join(90)
    assert not th.is_alive(), "?wait=true never answered after the decision"
    status, _, doc = box["answer"]
    assert status == 200, (status, doc)
    assert doc["id"] == run["id"] and box["at"] >= t_decide
    if decision == "approve":
        assert doc["state"] == "succeeded" and doc["result"]["stdout"] == tok + "\n", doc
    else:
        assert doc["state"] == "denied" and "no waiting" in json.dumps(doc["error"]), doc


def test_stream_carries_card_then_output(ws):
    tok = token()
    run = pending(ws.member, f"print('{tok}')")
    got = []

    def reader():
        for item in ws.member.stream(run["id"], timeout=60):
            got.append(item)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    deadline = time.monotonic() + 10
    while not any(e == "approval" for _, e, _, _ in got) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(e == "approval" for _, e, _, _ in got), f"no approval event on the stream: {got}"
    card_ev = [d for _, e, d, _ in got if e == "approval"][0]
    assert json.dumps(card_ev).find(run["approval"]["hash"]) >= 0, card_ev
    approve(ws.approver, run["id"], hash=run["approval"]["hash"])
    th.join(60)
    assert not th.is_alive()
    ids = [i for i, _, _, _ in got]
    assert ids == list(range(1, len(ids) + 1)), ids
    out = "".join(d["data"] for _, e, d, _ in got if e == "stdout")
    assert out == tok + "\n" and got[-1][1] == "result" and got[-1][2]["state"] == "succeeded", got


def test_cancel_pending(ws):
    bal = balance(ws.client)
    run = pending(ws.member, "print('cancel me')")
    status, _, doc = ws.member.cancel(run["id"])
    assert status == 202, (status, doc)
    done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=10)
    assert done["state"] in ("canceled", "denied"), done
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={})
    assert_error(status, doc, "conflict")
    assert balance(ws.client) == bal


def test_policies(service):
    t = gov_tenant(service, "pol")
    _, member = t.person_in("member")
    put_settings(t.client, approval_policy="never")
    run = member.run("print('no card')")
    assert run["state"] == "succeeded" and not run.get("approval"), run
    status, _, doc = t.client.request("POST", f"/v1/runs/{run['id']}/approve", json={})
    assert_error(status, doc, "conflict")
    kinds = [e["kind"] for e in audit_events(t.client, run_id=run["id"])]
    assert not [k for k in kinds if k.startswith("approval.")], kinds
    # code execution is risk "high"
    put_settings(t.client, approval_policy="high_risk")
    r = pending(member, "print('high risk')")
    assert r["approval"]["risk"] == "high"
    deny(t.client, r["id"])
    put_settings(t.client, approval_policy="always")
    r = pending(member, "print('always')")
    # changing the policy does not change a card that was shown
    put_settings(t.client, approval_policy="never")
    assert member.get_run(r["id"])["state"] == "pending_approval"
    approve(t.client, r["id"], hash=r["approval"]["hash"])
    assert member.wait_state(r["id"], GOV_TERMINAL)["state"] == "succeeded"


def test_other_tenants_cannot_decide(service, ws):
    run = pending(ws.member, "print('mine')")
    other = gov_tenant(service, "intruder")
    _, other_approver = other.person_in("approver")
    # another workspace of the same organisation is another tenant too
    ws2 = ws.add_workspace("appr-second")
    _, same_org_admin = ws.person_in("admin", workspace=ws2)
    for c in (other.client, other_approver, same_org_admin):
        for method, path, body in [("POST", f"/v1/runs/{run['id']}/approve", {"hash": run["approval"]["hash"]}),
                                   ("POST", f"/v1/runs/{run['id']}/deny", {"reason": "mine now"}),
                                   ("GET", f"/v1/runs/{run['id']}/trace", None),
                                   ("GET", f"/v1/runs/{run['id']}", None),
                                   ("GET", f"/v1/runs/{run['id']}/events", None),
                                   ("POST", f"/v1/runs/{run['id']}/cancel", None)]:
            status, _, doc = c.request(method, path, json=body, timeout=15)
            assert_error(status, doc, "not_found")
        status, _, doc = c.request("GET", "/v1/audit", query={"run_id": run["id"]})
        assert status == 404 or (status == 200 and doc["events"] == []), (status, doc)
        assert run["id"] not in json.dumps(audit_events(c))
        assert run["id"] not in {r["id"] for r in c.list_runs()}
    assert ws.member.get_run(run["id"])["state"] == "pending_approval"
    deny(ws.client, run["id"], reason="cleanup")


def test_concurrent_decisions(ws):
    """Two deciders at once: exactly one decision wins, the other is 409, the run runs at most once."""
    for _ in range(3):
        tok = token()
        run = pending(ws.member, f"print('{tok}')")
        answers = {}

        def go(name, fn):
            answers[name] = fn()

        a = threading.Thread(target=go, args=("approve", lambda: ws.approver.request(
            "POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})))
        d = threading.Thread(target=go, args=("deny", lambda: ws.client.request(
            "POST", f"/v1/runs/{run['id']}/deny", json={"reason": "race"})))
        a.start(), d.start()
        a.join(30), d.join(30)
        codes = sorted(answers[k][0] for k in answers)
        assert len(codes) == 2 and codes[1] == 409 and codes[0] in (200, 202), answers
        done = ws.member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
        winner = "approve" if answers["approve"][0] in (200, 202) else "deny"
        if winner == "approve":
            assert done["state"] == "succeeded" and done["approval"]["decision"] == "approved", done
        else:
            assert done["state"] == "denied" and done["approval"]["decision"] == "denied", done
        kinds = [e["kind"] for e in audit_events(ws.client, run_id=run["id"])]
        assert kinds.count("approval.approved") + kinds.count("approval.denied") == 1, kinds


def test_pending_survives_restart_and_expires_after(services):
    svc = services.start("pend")
    t = gov_tenant(svc, "pend")
    _, approver = t.person_in("approver")   # the requester does not approve its own run
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    keep = pending(t.client, "print('kept across a restart')")
    put_settings(t.client, approval_ttl_s=3)
    lapse = pending(t.client, "print('lapses while the service is down')")
    svc.kill9()
    time.sleep(4)
    svc.start()
    k = t.client.get_run(keep["id"])
    assert k["state"] == "pending_approval", f"a pending run after kill -9 and a restart is {k['state']}: {k}"
    done = t.client.wait_state(lapse["id"], GOV_TERMINAL, timeout=15)
    assert done["state"] == "denied" and done["error"]["code"] == "expired", done
    approve(approver, keep["id"], hash=keep["approval"]["hash"])
    k = t.client.wait_state(keep["id"], GOV_TERMINAL, timeout=60)
    assert k["state"] == "succeeded" and k["result"]["stdout"] == "kept across a restart\n", k
    kinds = [e["kind"] for e in audit_events(t.client, run_id=lapse["id"])]
    assert "approval.expired" in kinds, kinds
    assert balance(t.client) == 998


def test_approved_but_unpaid(service):
    """Both cards were shown while the balance covered one run each; approving both
    must not take the balance below zero (the second is refused, uncharged)."""
    t = gov_tenant(service, "unpaid")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always")
    set_price(service, t.workspace, 600)
    a = pending(t.client, "print('first')")
    b = pending(t.client, "print('second')")
    approve(approver, a["id"])
    assert t.client.wait_state(a["id"], GOV_TERMINAL, timeout=60)["state"] == "succeeded"
    assert balance(t.client) == 400
    status, _, doc = approver.request("POST", f"/v1/runs/{b['id']}/approve", json={})
    if status == 402:
        assert_error(status, doc, "payment_required", 402)
    else:
        assert status in (200, 202), (status, doc)
        done = t.client.wait_state(b["id"], GOV_TERMINAL, timeout=60)
        assert done["state"] != "succeeded" and done["result"] is None, f"an unpaid run ran: {done}"
        assert done["error"] and "payment" in json.dumps(done["error"]) or "credit" in json.dumps(done["error"]), done
    assert balance(t.client) == 400, "an unpaid run was charged (or the balance went below zero)"


def test_list_filters_by_new_states(ws):
    p = pending(ws.member, "print('listed pending')")
    d = pending(ws.member, "print('listed denied')")
    deny(ws.client, d["id"], reason="for the list")
    ws.member.wait_state(d["id"], GOV_TERMINAL, timeout=10)
    pend = ws.member.list_runs(state="pending_approval")
    assert p["id"] in {r["id"] for r in pend} and all(r["state"] == "pending_approval" for r in pend), pend
    den = ws.member.list_runs(state="denied")
    assert d["id"] in {r["id"] for r in den} and all(r["state"] == "denied" for r in den), den
    deny(ws.client, p["id"], reason="cleanup")


def test_approved_while_driver_disabled(service):
    """A card approved after the workspace's driver was switched off: a clear refusal
    (503 at approval, or the run ends in error), and no charge."""
    t = gov_tenant(service, "offdrv")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always")
    r = pending(t.client, "print('should not run')")
    put_settings(t.client, driver="disabled")
    try:
        status, _, doc = approver.request("POST", f"/v1/runs/{r['id']}/approve", json={})
        if status == 503:
            assert_error(status, doc, "driver_disabled")
        else:
            assert status in (200, 202), (status, doc)
            done = t.client.wait_state(r["id"], GOV_TERMINAL, timeout=30)
            assert done["state"] in ("error", "denied") and done["result"] is None, done
            assert done["error"] and done["error"]["message"], done
    finally:
        put_settings(t.client, driver="native")
    net = usage(t.client)
    assert net["balance"] == 1000, f"a run that could not run was charged: {net['ledger']}"


def test_code_changed_after_approval_does_not_run(services):
    """The binding holds at execution: code altered in the store after the approval
    (while the run waits for a slot) is not what runs; the run does not execute it."""
    svc = services.start("bind", {"max_concurrent": 1, "per_person_concurrency": 1})
    t = gov_tenant(svc, "bind")
    _, approver = t.person_in("approver")
    busy = t.client.run("import time; print('up', flush=True); time.sleep(3)", wait=False)
    t.client.wait_state(busy["id"], "running", timeout=30)
    put_settings(t.client, approval_policy="always")
    tok = token()
    r = pending(t.client, f"print('{tok}')")
    approve(approver, r["id"], hash=r["approval"]["hash"])
    assert t.client.get_run(r["id"])["state"] == "queued"
    n = svc.sql_count("UPDATE runs SET code = ? WHERE id = ?", "print('EVIL-' + 'CODE')", r["id"])
    assert n == 1
    done = t.client.wait_state(r["id"], GOV_TERMINAL, timeout=60)
    out = json.dumps(done.get("result"))
    assert "EVIL-CODE" not in out, f"code changed after the approval ran: {done}"
    assert done["state"] in ("error", "denied") and done["error"], done
    by = {e["run_id"]: e for e in usage(t.client)["ledger"] if e["kind"] == "charge"}
    refunds = {e["run_id"] for e in usage(t.client)["ledger"] if e["kind"] == "refund"}
    assert r["id"] not in by or r["id"] in refunds, "a run refused at execution was charged"
