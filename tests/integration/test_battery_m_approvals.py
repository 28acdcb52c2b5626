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
    the stream ends once, with the run's real end; nothing ran after a "canceled".
    The lie is a narrow interleaving (about 2 pairs in 100 on today's main), hence the
    count: 300 pairs, most of which end without a box."""
    pairs = 300
    seen = {"cancel_won": 0, "approve_won": 0}
    for i in range(pairs):
        tok = token()
        run = pending(ws.member, f"print('{tok}')")
        rid, h = run["id"], run["approval"]["hash"]
        answers = {}
        barrier = threading.Barrier(2)

        # the cancel goes out a little after the approval, by an offset swept over the
        # pairs (0 to 6 ms, in steps of 0.1 ms): the window where the two interleave moves with the load
        offset = (i % 60) * 0.0001

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


# ---------------------------------------------------------------- the card binds every input

SHADOW = b"def dumps(obj, **kw):\n    return 'SHADOWED-' + 'BY-FILES'\n"
USES_JSON = "import json\nprint(json.dumps({'a': 1}))\n"


def raw_get(client, path):
    """GET PATH; (status, bytes) however the answer is typed."""
    status, _, doc = client.request("GET", path)
    return status, doc if isinstance(doc, (bytes, bytearray)) else json.dumps(doc).encode()


def test_a_shadowing_file_is_on_the_card_and_bound(service, ws):
    """A `json.py` in `files` replaces the stdlib module the approved code imports
    (/work is first on Python's path). The card must show it (name, size, sha256,
    the bytes one request away) and the hash must bind it: the same code without
    it is another card, and one card's hash does not approve the other."""
    # the ingredient: without approval, the file really replaces json
    plain = gov_tenant(service, "mjsonctl")
    ran = plain.client.run(USES_JSON, files=[{"name": "json.py", "content_base64": b64(SHADOW)}])
    assert ran["state"] == "succeeded" and ran["result"]["stdout"] == "SHADOWED-BY-FILES\n", ran
    ran = plain.client.run(USES_JSON)
    assert ran["result"]["stdout"] == '{"a": 1}\n', ran

    benign = pending(ws.member, USES_JSON)
    attack = pending(ws.member, USES_JSON, files=[{"name": "json.py", "content_base64": b64(SHADOW)}])
    assert benign["approval"]["code"] == attack["approval"]["code"]
    assert attack["approval"]["hash"] != benign["approval"]["hash"], \
        "the approval hash covers the code only: a shadowing json.py is not bound"
    inputs = attack["approval"].get("inputs")
    assert isinstance(inputs, dict), f"the card shows no inputs: {attack['approval']}"
    files = inputs["files"]
    assert [(f["name"], f["size"], f["sha256"]) for f in files] == [("json.py", len(SHADOW), sha(SHADOW))], files
    assert benign["approval"]["inputs"]["files"] == []
    # the bytes, one request away, for this workspace only
    status, got = raw_get(ws.approver, files[0]["url"])
    assert status == 200 and got == SHADOW, (status, got)
    other = gov_tenant(service, "mjsonother")
    status, _, doc = other.client.request("GET", files[0]["url"])
    assert_error(status, doc, "not_found", 404)
    # the benign card's hash does not approve the attack
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{attack['id']}/approve",
                                         json={"hash": benign["approval"]["hash"]})
    assert_error(status, doc, "conflict", 409)
    # approved with its own card, it runs exactly what the card showed
    status, _, doc = ws.approver.request("POST", f"/v1/runs/{attack['id']}/approve",
                                         json={"hash": attack["approval"]["hash"]})
    assert status == 200, (status, doc)
    done = ws.member.wait_state(attack["id"], GOV_TERMINAL)
    assert done["state"] == "succeeded" and done["result"]["stdout"] == "SHADOWED-BY-FILES\n", done
    # its inputs are not kept once it has ended
    status, _ = raw_get(ws.approver, files[0]["url"])
    assert status == 410, status
    ws.approver.request("POST", f"/v1/runs/{benign['id']}/deny", json={"reason": "cleanup"})


def test_stdin_args_and_artifacts_are_on_the_card_and_bound(service, ws):
    code = "import sys\nprint(sys.argv[1:], sys.stdin.read())\n"
    base = pending(ws.member, code)
    with_stdin = pending(ws.member, code, stdin="hello")
    with_args = pending(ws.member, code, args=["--x", "y"])
    hashes = {base["approval"]["hash"], with_stdin["approval"]["hash"], with_args["approval"]["hash"]}
    assert len(hashes) == 3, "stdin and args are not bound by the approval hash"
    st = with_stdin["approval"]["inputs"]["stdin"]
    assert st["size"] == 5 and st["sha256"] == sha(b"hello"), st
    status, got = raw_get(ws.approver, st["url"])
    assert status == 200 and got == b"hello", (status, got)
    assert with_args["approval"]["inputs"]["args"] == ["--x", "y"]
    assert base["approval"]["inputs"]["stdin"] is None and base["approval"]["inputs"]["args"] is None
    # an artifact passed by id is listed with its hash (and a link to its bytes)
    put_settings(ws.client, approval_policy="never")
    try:
        made = ws.member.run("open('/out/data.csv', 'w').write('a,b\\n1,2\\n')")
    finally:
        put_settings(ws.client, approval_policy="always")
    art = made["artifacts"][0]
    with_art = pending(ws.member, code, artifacts=[art["id"]])
    assert with_art["approval"]["hash"] != base["approval"]["hash"]
    inputs = with_art["approval"]["inputs"]
    assert inputs["artifacts"] == [art["id"]], inputs
    assert [(d["id"], d["path"], d["sha256"], d["size"]) for d in inputs["documents"]] == [
        (art["id"], "data.csv", sha(b"a,b\n1,2\n"), 8)], inputs
    status, got = raw_get(ws.approver, inputs["documents"][0]["url"])
    assert status == 200 and got == b"a,b\n1,2\n", (status, got)
    for r in (base, with_stdin, with_args, with_art):
        ws.approver.request("POST", f"/v1/runs/{r['id']}/deny", json={"reason": "cleanup"})


READ_DOC = "print(open('/work/documents/doc.txt').read())"


def test_thread_document_changed_after_approval_is_not_staged(services):
    """The card shows the thread's documents as they are at request time, and the run gets
    exactly those: a new version the thread gains between the approval and the start
    (here while the run waits for its requester's slot) is not what it reads."""
    svc = services.start("mthread", {"max_concurrent": 4, "per_person_concurrency": 1})
    t = gov_tenant(svc, "mthr")
    _, approver = t.person_in("approver")
    _, member = t.person_in("member")
    thread = "th-" + uuid.uuid4().hex[:8]
    v1 = member.run("open('/out/doc.txt', 'w').write('version-1')", thread_id=thread)
    assert v1["state"] == "succeeded" and v1["artifacts"], v1
    busy = member.run("import time; print('up', flush=True); time.sleep(120)", wait=False)
    member.wait_state(busy["id"], "running", timeout=30)
    put_settings(t.client, approval_policy="always")
    run = pending(member, READ_DOC, thread_id=thread)
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    assert status == 200, (status, doc)
    assert member.get_run(run["id"])["state"] == "queued"   # the member's one slot is busy
    # the thread gains version 2 while the approved run waits
    put_settings(t.client, approval_policy="never")
    v2 = approver.run("open('/out/doc.txt', 'w').write('version-2')", thread_id=thread)
    assert v2["state"] == "succeeded", v2
    # the ingredient: a run of the thread now reads version 2
    now = approver.run(READ_DOC, thread_id=thread)
    assert now["result"]["stdout"] == "version-2\n", now
    assert member.get_run(run["id"])["state"] == "queued"
    status, _, doc = member.cancel(busy["id"])
    assert status == 202, (status, doc)
    done = member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    out = json.dumps(done.get("result"))
    assert "version-2" not in out, f"the approved run read a version no one approved: {done}"
    # the approved version is what it got, and what its card showed
    assert done["state"] == "succeeded" and done["result"]["stdout"] == "version-1\n", done
    docs = run["approval"].get("inputs", {}).get("documents")
    assert [(d["path"], d["sha256"]) for d in docs or []] == [("doc.txt", sha(b"version-1"))], run["approval"]


def test_an_input_changed_on_disk_after_approval_does_not_run(services):
    """The binding is checked again before the box starts: a stored input altered after
    the approval (while the run waits for a slot) makes the run refuse, not run it."""
    svc = services.start("mdisk", {"max_concurrent": 2, "per_person_concurrency": 1})
    t = gov_tenant(svc, "mdisk")
    _, approver = t.person_in("approver")
    busy = t.client.run("import time; print('up', flush=True); time.sleep(120)", wait=False)
    t.client.wait_state(busy["id"], "running", timeout=30)
    put_settings(t.client, approval_policy="always")
    run = pending(t.client, USES_JSON, files=[{"name": "json.py", "content_base64": b64(b"from_json = 1\n")}])
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    stored = svc.state / "runs" / run["id"] / "in" / "json.py"
    assert stored.read_bytes() == b"from_json = 1\n"
    stored.write_bytes(SHADOW)
    t.client.ok("POST", f"/v1/runs/{busy['id']}/cancel", want=202)
    done = t.client.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert "SHADOWED" not in json.dumps(done.get("result")), f"an input changed after the approval ran: {done}"
    assert done["state"] == "error" and done["error"]["code"] == "approval", done


# ---------------------------------------------------------------- the rest of the class

def test_a_decision_after_expires_at_is_refused(service):
    """A card is valid until its expires_at, not until the sweeper next passes: an
    approval that arrives after it is 409 and the run ends expired, unrun."""
    from datetime import datetime, timedelta, timezone

    from service_util import parse_time
    t = gov_tenant(service, "mexp")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always", approval_ttl_s=1)
    for _ in range(3):
        run = pending(t.client, "print('late')")
        expires = parse_time(run["approval"]["expires_at"])
        # the service runs on this machine's clock: wait until the card has just expired
        # (the sweeper passes about once a second, so mostly it has not yet)
        while datetime.now(timezone.utc) <= expires + timedelta(milliseconds=5):
            time.sleep(0.005)
        status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
        assert_error(status, doc, "conflict", 409)
        done = t.client.wait_state(run["id"], GOV_TERMINAL, timeout=20)
        assert done["state"] == "denied" and done["error"]["code"] == "expired" and done["result"] is None, done
        assert done["approval"]["decision"] == "expired", done["approval"]


def test_a_document_whose_stored_bytes_changed_does_not_run(services):
    """The documents are staged by linking their blobs: the bytes a box reads are the
    blob's. A blob whose bytes no longer match the approved version's sha256 (planted,
    or overwritten after the approval) makes the approved run refuse."""
    svc = services.start("mblob", {"max_concurrent": 2, "per_person_concurrency": 1})
    t = gov_tenant(svc, "mblob")
    _, approver = t.person_in("approver")
    thread = "tb-" + uuid.uuid4().hex[:8]
    v1 = t.client.run("open('/out/doc.txt', 'w').write('approved-bytes')", thread_id=thread)
    assert v1["state"] == "succeeded", v1
    digest = sha(b"approved-bytes")
    blob = svc.state / "blobs" / digest[:2] / digest
    assert blob.read_bytes() == b"approved-bytes"
    busy = t.client.run("import time; print('up', flush=True); time.sleep(120)", wait=False)
    t.client.wait_state(busy["id"], "running", timeout=30)
    put_settings(t.client, approval_policy="always")
    run = pending(t.client, READ_DOC, thread_id=thread)
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    blob.write_bytes(b"planted-bytes!")
    t.client.ok("POST", f"/v1/runs/{busy['id']}/cancel", want=202)
    done = t.client.wait_state(run["id"], GOV_TERMINAL, timeout=60)
    assert "planted" not in json.dumps(done.get("result")), f"bytes no one approved were staged: {done}"
    assert done["state"] == "error" and done["error"]["code"] == "approval", done


def _one_pending(client, exclude=(), timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in client.ok("GET", "/v1/runs", query={"state": "pending_approval"})["runs"]
                if r["id"] not in exclude]
        if runs:
            assert len(runs) == 1, runs
            return client.get_run(runs[0]["id"])
        time.sleep(0.05)
    raise AssertionError("no pending run appeared")


def test_every_surface_binds_the_same_inputs(service):
    """MCP's code_execution and Piston's execute create runs through the same path:
    their inline files are on the card and in the hash like REST's."""
    from test_mcp import Mcp
    t = gov_tenant(service, "msurf")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    seen = set()
    # MCP
    m = Mcp(service, key=t.key)
    out = {}
    th = threading.Thread(target=lambda: out.update(mcp=m.request("tools/call", {"name": "code_execution", "arguments": {
        "language": "python", "code": USES_JSON, "files": [{"name": "json.py", "content": SHADOW.decode()}]}})))
    th.start()
    run = _one_pending(approver)
    seen.add(run["id"])
    files = run["approval"]["inputs"]["files"]
    assert [(f["name"], f["sha256"]) for f in files] == [("json.py", sha(SHADOW))], run["approval"]
    approver.ok("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "shadows json"})
    th.join(60)
    assert "shadows json" in json.dumps(out["mcp"][2]), out
    # Piston
    body = {"language": "python", "version": "*", "files": [{"content": USES_JSON},
                                                            {"name": "json.py", "content": SHADOW.decode()}]}
    th = threading.Thread(target=lambda: out.update(piston=t.client.request(
        "POST", f"/piston/{t.key}/api/v2/execute", json=body, key=None, timeout=120)))
    th.start()
    run = _one_pending(approver, exclude=seen)
    files = run["approval"]["inputs"]["files"]
    assert [(f["name"], f["sha256"]) for f in files] == [("json.py", sha(SHADOW))], run["approval"]
    status, got = raw_get(approver, files[0]["url"])
    assert status == 200 and got == SHADOW
    approver.ok("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "shadows json"})
    th.join(60)
    status, _, doc = out["piston"]
    assert status == 200 and doc["airlock_state"] == "denied" and doc["run"]["stdout"] == "", out["piston"]


def test_the_audit_trail_names_what_ran_not_only_the_code(service, ws):
    """The tool.call event's input_sha256 covers the code and every input, as
    the card's hash does: two runs of the same code with another json.py are
    told apart in the trail, and an approved run's event carries its card's
    hash. (It was the code's sha256 alone.)"""
    plain = gov_tenant(service, "mauditin")
    a = plain.client.run(USES_JSON)
    b = plain.client.run(USES_JSON, files=[{"name": "json.py", "content_base64": b64(SHADOW)}])
    # the ingredient: the same code, and what ran differed
    assert a["result"]["stdout"] != b["result"]["stdout"], (a["result"], b["result"])
    calls = {e["run_id"]: e for e in audit_events(plain.client) if e["kind"] == "tool.call"}
    ha, hb = calls[a["id"]]["data"]["input_sha256"], calls[b["id"]]["data"]["input_sha256"]
    assert ha and hb and ha != hb, (ha, hb)
    assert sha(USES_JSON.encode()) not in (ha, hb)
    run = pending(ws.member, USES_JSON, files=[{"name": "json.py", "content_base64": b64(SHADOW)}])
    ws.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    ws.member.wait_state(run["id"], GOV_TERMINAL)
    ev = [e for e in audit_events(ws.client) if e["kind"] == "tool.call" and e["run_id"] == run["id"]]
    assert [e["data"]["input_sha256"] for e in ev] == [run["approval"]["hash"]], ev


def test_a_decision_the_trail_cannot_show_is_not_made(service, ws):
    """An approval whose audit event cannot be written is refused (500
    audit_failed) and nothing is decided: the run still waits, and a later
    approval, with the trail back, runs it and is on the trail."""
    run = pending(ws.member, "print('decided')")
    service.fail_inserts("audit_events", "no_decision_audit", when="NEW.kind = 'approval.approved'")
    try:
        status, _, doc = ws.approver.request("POST", f"/v1/runs/{run['id']}/approve",
                                             json={"hash": run["approval"]["hash"]})
    finally:
        service.drop_trigger("no_decision_audit")
    assert_error(status, doc, "audit_failed", 500)
    assert ws.member.get_run(run["id"])["state"] == "pending_approval"
    ws.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = ws.member.wait_state(run["id"], GOV_TERMINAL)
    assert done["state"] == "succeeded", done
    kinds = [e["kind"] for e in audit_events(ws.client) if e["run_id"] == run["id"]]
    assert kinds.count("approval.approved") == 1, kinds
