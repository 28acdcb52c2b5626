"""Battery M (../shared/SECURITY.md section 6, "Governance means what it says"): approvals.

What a person approves is exactly what runs: the code and every input (inline
files, stdin, args, artifact ids, the thread's documents), hashed together at
request time, shown on the card (names, sizes, sha256; the bytes one request
away) and re-checked before the box starts. The requester does not decide
their own run (separation of duties, relaxed only by an audited setting). A
body over the cap, or malformed, is refused, never read as `{}`. A cancel and
a decision are mutually exclusive transitions: the answer each gets is true.

Each case is differential: it shows the ingredient working (a `json.py` in
`files` really replaces the stdlib module; the thread really has a newer
version; the oversized body really carries a wrong hash) and then that the
approval is not fooled by it."""
import base64
import hashlib
import json
import threading
import time
import uuid

import pytest

from service_util import (GOV_TERMINAL, assert_error, audit_events, gov_tenant, put_settings,  # noqa: F401
                          service, services)

BODY_MAX = 8 << 20   # the service's request body cap (al_service_config_default)


@pytest.fixture(scope="module")
def ws(service):
    """Approval always: admin (`client`), a member who asks, an approver who decides."""
    t = gov_tenant(service, "mappr")
    t.approver_id, t.approver = t.person_in("approver")
    t.member_id, t.member = t.person_in("member")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    return t


def token():
    return "tok" + uuid.uuid4().hex[:16]


def pending(client, code, **fields):
    status, _, run = client.post_run(code, **fields)
    assert status == 201 and run["state"] == "pending_approval", (status, run)
    assert isinstance(run.get("approval"), dict) and run["approval"].get("hash"), run
    return run


def b64(data):
    return base64.b64encode(data).decode()


def sha(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- separation of duties

def test_requester_cannot_decide_their_own_run(ws):
    """An admin (the bootstrap key and `airlock mcp --local`'s key are admins) asks for
    a run and approves it with the same key: refused, the run still waits, and the
    requester may still withdraw it. A second person decides."""
    tok = token()
    run = pending(ws.client, f"print('{tok}')")
    card = run["approval"]
    for path, body in (("approve", {"hash": card["hash"]}), ("deny", {"reason": "mine"})):
        status, _, doc = ws.client.request("POST", f"/v1/runs/{run['id']}/{path}", json=body)
        assert_error(status, doc, "separation_of_duties", 403)
    again = ws.client.get_run(run["id"])
    assert again["state"] == "pending_approval" and again["approval"]["decision"] is None, again
    kinds = [e["kind"] for e in audit_events(ws.client, run_id=run["id"])]
    assert "approval.approved" not in kinds and "approval.denied" not in kinds, kinds
    # another person with the role decides it
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    assert status == 200, (status, doc)
    done = ws.client.wait_state(run["id"], GOV_TERMINAL)
    assert done["state"] == "succeeded" and done["result"]["stdout"] == tok + "\n", done
    assert done["approval"]["decided_by"] == ws.approver_id, done["approval"]
    # the requester may withdraw their own pending run
    other = pending(ws.client, "print('withdrawn')")
    status, _, doc = ws.client.cancel(other["id"])
    assert status == 202 and doc["state"] == "canceled", (status, doc)


def test_self_approval_is_a_setting_and_changing_it_is_audited(service):
    t = gov_tenant(service, "mself")
    put_settings(t.client, approval_policy="always")
    assert t.client.ok("GET", "/v1/settings")["allow_self_approval"] is False
    run = pending(t.client, "print('self')")
    status, _, doc = t.client.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    assert_error(status, doc, "separation_of_duties", 403)
    put_settings(t.client, want=400, allow_self_approval="yes")
    put_settings(t.client, allow_self_approval=True)
    status, _, doc = t.client.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    assert status == 200, (status, doc)
    assert t.client.wait_state(run["id"], GOV_TERMINAL)["state"] == "succeeded"
    put_settings(t.client, allow_self_approval=False)
    ev = [e for e in audit_events(t.client) if e["kind"] == "settings.self_approval_changed"]
    assert [(e["data"]["from"], e["data"]["to"], e["person_id"]) for e in ev] == [
        (False, True, t.person), (True, False, t.person)], ev


# ---------------------------------------------------------------- bodies over the cap or malformed

def test_approve_body_over_the_cap_or_malformed_is_refused(ws):
    """The body carries a hash that is NOT the card's (so an honest read refuses it);
    padded past the cap, today's service read it as {} and approved without the check."""
    run = pending(ws.member, "print('over the cap')")
    wrong = "0" * 64
    assert wrong != run["approval"]["hash"]
    # the ingredient: the same wrong hash in a body under the cap is refused as a mismatch
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": wrong})
    assert_error(status, doc, "conflict", 409)
    big = json.dumps({"hash": wrong, "reason": "x" * (BODY_MAX + 1024)}).encode()
    assert len(big) > BODY_MAX
    for path in ("approve", "deny"):
        status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/{path}", body=big,
                                             headers={"Content-Type": "application/json"})
        assert_error(status, doc, "payload_too_large", 413)
        for bad in (b'{"hash": ', b"[1, 2]", b'{"hash": "a", "hash": "b"}', b"\xff\xfe"):
            status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/{path}", body=bad,
                                                 headers={"Content-Type": "application/json"})
            assert_error(status, doc, "bad_request", 400)
    again = ws.member.get_run(run["id"])
    assert again["state"] == "pending_approval" and again["approval"]["decision"] is None, again
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "cleanup"})
    assert status == 200, (status, doc)


def test_piston_malformed_fields_are_refused_not_dropped(service):
    """Piston's execute: a file without a name, or stdin/args of the wrong type, was
    silently dropped (the run then ran without it). Now 400."""
    key = service.key
    ok = {"language": "python", "version": "*", "files": [{"content": "print(open('x.txt').read())"},
                                                          {"name": "x.txt", "content": "here"}]}
    status, _, doc = service.request("POST", f"/piston/{key}/api/v2/execute", json=ok, key=None)
    assert status == 200 and doc["run"]["stdout"] == "here\n", (status, doc)
    for bad in ({**ok, "files": [ok["files"][0], {"content": "no name"}]},
                {**ok, "files": [ok["files"][0], {"name": "x.txt"}]},
                {**ok, "stdin": 5}, {**ok, "args": "a b"}, {**ok, "run_timeout": "3"}):
        status, _, doc = service.request("POST", f"/piston/{key}/api/v2/execute", json=bad, key=None)
        assert_error(status, doc, "bad_request", 400)


# ---------------------------------------------------------------- cancel racing a decision

def test_cancel_racing_approval_tells_the_truth(ws):
    """Pairs of (cancel by the requester, approve by an approver) fired together. Whatever
    wins, each answer is true: a cancel that says "canceled" means the run never started;
    the stream ends once, with the run's real end; nothing ran after a "canceled"."""
    pairs = 60
    seen = {"cancel_won": 0, "approve_won": 0}
    for i in range(pairs):
        tok = token()
        run = pending(ws.member, f"print('{tok}')")
        rid, h = run["id"], run["approval"]["hash"]
        answers = {}
        barrier = threading.Barrier(2)

        # the cancel goes out a little after the approval, by an offset swept over the
        # pairs (0 to 8 ms): the window where the two interleave moves with the load
        offset = (i % 30) * 0.0003

        def go(name, fn):
            barrier.wait(10)
            if name == "cancel":
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < offset:
                    pass
            answers[name] = fn()

        c = threading.Thread(target=go, args=("cancel", lambda: ws.member.request("POST", f"/v1/runs/{rid}/cancel")))
        a = threading.Thread(target=go, args=("approve", lambda: ws.approver.request(
            "POST", f"/v1/runs/{rid}/approve", json={"hash": h})))
        c.start(), a.start()
        c.join(60), a.join(60)
        (cs, _, cdoc), (as_, _, adoc) = answers["cancel"], answers["approve"]
        done = ws.member.wait_state(rid, GOV_TERMINAL, timeout=60)
        ev = ws.member.events(rid, timeout=30)
        states = [d["state"] for _, t, d in ev if t == "state"]
        results = [d for _, t, d in ev if t == "result"]
        ran = "running" in states or any(t == "stdout" for _, t, _ in ev) or (
            done["result"] is not None and tok in json.dumps(done["result"]))
        what = f"pair {i}: cancel {cs} {cdoc!r}, approve {as_} {adoc!r}, final {done['state']}, states {states}"
        assert cs in (202, 409) and as_ in (200, 409), what
        # the stream ends once, with the run as it really ended
        assert ev and ev[-1][1] == "result" and len(results) == 1, what + f" events {ev}"
        assert results[0]["state"] == done["state"], what
        assert states.count("canceled") <= 1 and ("canceled" not in states or done["state"] == "canceled"), what
        if cs == 202 and cdoc["state"] == "canceled":
            assert done["state"] == "canceled" and not ran, what
        if done["state"] == "succeeded":
            assert as_ == 200 and not (cs == 202 and cdoc["state"] == "canceled"), what
            assert done["result"]["stdout"] == tok + "\n", what
        if as_ == 409:
            assert done["state"] == "canceled" and done["approval"]["decision"] == "canceled" and not ran, what
            seen["cancel_won"] += 1
        else:
            # the approval won the pending run: it was queued by it (a cancel can only
            # have come after, as the cancel of a queued run), and nothing says that
            # a cancel withdrew it while it waited
            assert done["approval"]["decision"] == "approved", what
            assert "queued" in states, what
            if done["state"] == "canceled":
                assert states.index("queued") < states.index("canceled"), what
                assert "waiting for approval" not in json.dumps(done["error"]), what
            seen["approve_won"] += 1
    print("race outcomes", seen)
    assert sum(seen.values()) == pairs, seen
