"""Idempotent creation (issue 11, "Idempotent run creation"; docs/api.md
"Idempotent requests").  A client that lost the answer to a creating POST (the
daemon killed after it accepted the run, a dropped connection) retries with the
same `Idempotency-Key` and gets the run the first attempt made: one run, one
charge.  The same key with another request is 409; keys are a person's, bounded,
kept a day through restarts, and swept after.

Each test is differential: the same retry without a key (or on a build without
keys) makes a second run, which is the double charge the key prevents."""
import base64
import http.client
import json
import socket
import threading
import time
import uuid

from service_util import (TERMINAL, assert_error, audit_events, gov_tenant, ledger_by_run, put_settings, service, set_price,  # noqa: F401
                          services, usage)  # noqa: F401
from test_skills import hello_bundle

SLEEPY = "import time; time.sleep(0.2); print('ran once')"


def key():
    return f"idem-{uuid.uuid4()}"


def post(client, body, k=None, wait=False, path="/v1/runs", headers=None, **kw):
    h = dict(headers or {})
    if k is not None:
        h["Idempotency-Key"] = k
    return client.request("POST", path, json=body, headers=h, query={"wait": "true"} if wait else None, timeout=300, **kw)


def run_ids(client):
    return [r["id"] for r in client.list_runs()]


def charges(client):
    return ledger_by_run(usage(client, limit=1000)["ledger"])


def test_a_retry_with_the_same_key_is_the_same_run_charged_once(service):
    t = gov_tenant(service, "idem")
    set_price(service, t.workspace, 5)
    start = usage(t.client)["balance"]
    body = {"language": "python", "code": SLEEPY, "limits": {"timeout_s": 30}, "description": "retried"}
    # the ingredient: a retry without a key is a second run, paid twice
    s1, _, a = post(t.client, body, wait=True)
    s2, _, b = post(t.client, body, wait=True)
    assert s1 == s2 == 200 and a["id"] != b["id"], (a, b)
    assert usage(t.client)["balance"] == start - 10
    # with a key: the retry (its JSON in another key order) is the first run
    k = key()
    status, hdrs, first = post(t.client, body, k)
    assert status == 201, first
    assert "idempotent-replayed" not in hdrs
    reordered = dict(reversed(list(body.items())))
    assert json.dumps(reordered) != json.dumps(body)
    status, hdrs, again = post(t.client, reordered, k)
    assert status == 201 and again["id"] == first["id"], (first, again)
    assert hdrs.get("idempotent-replayed") == "true", hdrs
    ended = t.client.wait_state(first["id"], TERMINAL)
    assert ended["state"] == "succeeded" and ended["result"]["stdout"] == "ran once\n", ended
    # a retry after the end gets the ended run, and still makes nothing
    status, _, late = post(t.client, body, k)
    assert status == 201 and late["id"] == first["id"] and late["state"] == "succeeded", late
    assert sorted(run_ids(t.client)) == sorted([a["id"], b["id"], first["id"]])
    led = charges(t.client)
    assert led[first["id"]] == {"charge": [5], "refund": []}, led
    assert usage(t.client)["balance"] == start - 15


def test_the_same_key_with_another_request_is_409(service):
    t = gov_tenant(service, "idemc")
    k = key()
    body = {"language": "python", "code": "print(1)"}
    status, _, first = post(t.client, body, k)
    assert status == 201, first
    for other in ({"language": "python", "code": "print(2)"}, {**body, "description": "x"},
                  {**body, "limits": {"timeout_s": 5}}):
        status, _, doc = post(t.client, other, k)
        assert_error(status, doc, "idempotency_conflict", 409)
        assert "Idempotency-Key" in doc["error"]["message"], doc
    # the same key on another creating route is another request too
    status, _, doc = t.client.request("POST", f"/piston/{t.key}/api/v2/execute", key=None,
                                      json={"language": "python", "files": [{"content": "print(1)"}]},
                                      headers={"Idempotency-Key": k})
    assert_error(status, doc, "idempotency_conflict", 409)
    assert run_ids(t.client) == [first["id"]]
    # and the first request again is still answered with its run
    status, _, again = post(t.client, body, k)
    assert status == 201 and again["id"] == first["id"]


def test_keys_are_a_persons_own(service):
    t = gov_tenant(service, "idemp")
    _, other = t.person_in("member")
    stranger = gov_tenant(service, "idemq").client
    k = key()
    body = {"language": "python", "code": "print('mine')"}
    runs = {}
    for who, client in (("admin", t.client), ("member", other), ("stranger", stranger)):
        status, hdrs, doc = post(client, body, k)
        assert status == 201 and "idempotent-replayed" not in hdrs, (who, doc)
        runs[who] = doc["id"]
    assert len(set(runs.values())) == 3, runs
    for who, client in (("admin", t.client), ("member", other), ("stranger", stranger)):
        status, hdrs, doc = post(client, body, k)
        assert status == 201 and doc["id"] == runs[who] and hdrs.get("idempotent-replayed") == "true", (who, doc)
    # another person's key never shows their run
    status, _, doc = post(other, {"language": "python", "code": "print('else')"}, k)
    assert_error(status, doc, "idempotency_conflict", 409)
    assert sorted(run_ids(t.client)) == sorted([runs["admin"], runs["member"]])
    assert run_ids(stranger) == [runs["stranger"]]


def raw_post(svc, path, body, header_lines):
    """A POST with exactly HEADER_LINES (bytes), which http.client would not send (repeated headers)."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {svc.host}:{svc.port}\r\nAuthorization: Bearer {svc.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n").encode()
    with socket.create_connection((svc.host, svc.port), timeout=60) as sock:
        sock.sendall(head + b"".join(h + b"\r\n" for h in header_lines) + b"\r\n" + data)
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, json.loads(resp.read())


def test_malformed_keys_are_400(service):
    t = gov_tenant(service, "idemb")
    body = {"language": "python", "code": "print(1)"}
    for bad in ("", "x" * 256, "tab\there", "bell\x07", "del\x7f", "caf\xe9"):
        status, _, doc = post(t.client, body, bad)
        assert_error(status, doc, "bad_request", 400)
        assert "Idempotency-Key" in doc["error"]["message"], (bad, doc)
    svc = t.client
    status, doc = raw_post(svc, "/v1/runs", body, [b"Idempotency-Key: one", b"Idempotency-Key: two"])
    assert_error(status, doc, "bad_request", 400)
    assert run_ids(t.client) == []
    # the longest key and every printable character are keys
    for good in ("x" * 255, "".join(chr(c) for c in range(0x21, 0x7f))):
        status, _, doc = post(t.client, body, good)
        assert status == 201, doc
        status, _, again = post(t.client, body, good)
        assert status == 201 and again["id"] == doc["id"]
    assert len(run_ids(t.client)) == 2


def test_wait_true_waits_on_the_first_attempts_run(service):
    t = gov_tenant(service, "idemw")
    body = {"language": "python", "code": "import time; time.sleep(1); print('done')"}
    k = key()
    status, _, first = post(t.client, body, k)
    assert status == 201 and first["state"] not in TERMINAL, first
    # the retry asks to wait: it waits on that run, and makes none
    status, hdrs, waited = post(t.client, body, k, wait=True)
    assert status == 200 and waited["id"] == first["id"], (first, waited)
    assert waited["state"] == "succeeded" and waited["result"]["stdout"] == "done\n", waited
    assert hdrs.get("idempotent-replayed") == "true"
    # a waited request retried waiting
    k2 = key()
    status, _, w1 = post(t.client, body, k2, wait=True)
    status2, _, w2 = post(t.client, body, k2, wait=True)
    assert status == status2 == 200 and w1["id"] == w2["id"] and w2["state"] == "succeeded", (w1, w2)
    assert sorted(run_ids(t.client)) == sorted([first["id"], w1["id"]])


def test_piston_execute_honours_the_key(service):
    t = gov_tenant(service, "idempi")
    path = f"/piston/{t.key}/api/v2/execute"
    body = {"language": "python", "version": "*", "files": [{"content": "print('piston')"}]}
    k = key()
    s1, _, a = t.client.request("POST", path, key=None, json=body, headers={"Idempotency-Key": k}, timeout=120)
    s2, h2, b = t.client.request("POST", path, key=None, json=body, headers={"Idempotency-Key": k}, timeout=120)
    assert s1 == s2 == 200, (a, b)
    assert a["run"]["stdout"] == b["run"]["stdout"] == "piston\n"
    assert a["airlock_run_id"] == b["airlock_run_id"] and h2.get("idempotent-replayed") == "true", (a, b)
    s3, _, c = t.client.request("POST", path, key=None, json={**body, "stdin": "x"}, headers={"Idempotency-Key": k})
    assert_error(s3, c, "idempotency_conflict", 409)
    # without a key each call is a run of its own
    s4, _, d = t.client.request("POST", path, key=None, json=body, timeout=120)
    assert s4 == 200 and d["airlock_run_id"] != a["airlock_run_id"]
    assert sorted(run_ids(t.client)) == sorted([a["airlock_run_id"], d["airlock_run_id"]])


def test_concurrent_identical_requests_make_one_run(service):
    t = gov_tenant(service, "idemr")
    set_price(service, t.workspace, 7)
    start = usage(t.client)["balance"]
    body = {"language": "python", "code": "print('raced')", "files": [
        {"name": "data.bin", "content_base64": base64.b64encode(b"z" * 200000).decode()}]}
    k = key()
    n = 8
    barrier = threading.Barrier(n)
    answers = [None] * n

    def one(i):
        barrier.wait()
        answers[i] = post(t.client, body, k)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert all(a is not None for a in answers), answers
    assert all(st == 201 for st, _, _ in answers), [(st, d) for st, _, d in answers]
    ids = {d["id"] for _, _, d in answers}
    assert len(ids) == 1, ids
    assert sum(1 for _, h, _ in answers if h.get("idempotent-replayed") != "true") == 1
    run_id = ids.pop()
    t.client.wait_state(run_id, TERMINAL)
    assert run_ids(t.client) == [run_id]
    assert charges(t.client) == {run_id: {"charge": [7], "refund": []}}
    assert usage(t.client)["balance"] == start - 7


def test_a_retry_after_kill9_and_restart_is_the_same_run(services):
    svc = services.start("crash", {"max_concurrent": 2})
    t = gov_tenant(svc, "idemk")
    set_price(svc, t.workspace, 4)
    start = usage(t.client)["balance"]
    # 1. the client waits on its run and never reads the answer: the daemon dies
    k = key()
    body = {"language": "python", "code": "import time; print('up', flush=True); time.sleep(60)"}
    lost = {}

    def waiting():
        try:
            lost["answer"] = post(t.client, body, k, wait=True)
        except (OSError, http.client.HTTPException) as e:
            lost["error"] = e

    th = threading.Thread(target=waiting)
    th.start()
    deadline = time.monotonic() + 60
    while not (ids := run_ids(t.client)):
        assert time.monotonic() < deadline, "the run never appeared"
        time.sleep(0.05)
    t.client.wait_state(ids[0], "running", timeout=60)
    svc.kill9()
    th.join(60)
    assert "error" in lost and "answer" not in lost, lost
    svc.start()
    # the retry gets that run (ended by the crash and refunded), not a second run
    status, hdrs, again = post(t.client, body, k, wait=True)
    assert status == 200 and again["id"] == ids[0] and hdrs.get("idempotent-replayed") == "true", again
    assert again["state"] == "error" and again["error"]["code"] == "lost", again
    # 2. a run waiting for approval when the daemon dies, retried after the restart
    put_settings(t.client, approval_policy="always")
    k2 = key()
    body2 = {"language": "python", "code": "print('approve me')"}
    status, _, pending = post(t.client, body2, k2)
    assert status == 201 and pending["state"] == "pending_approval", pending
    svc.kill9()
    svc.start()
    status, hdrs, again2 = post(t.client, body2, k2)
    assert status == 201 and again2["id"] == pending["id"] and again2["state"] == "pending_approval", again2
    assert sorted(run_ids(t.client)) == sorted([ids[0], pending["id"]])
    # the crashed run was charged once and refunded once; nothing else was charged
    assert charges(t.client) == {ids[0]: {"charge": [4], "refund": [4]}}
    assert usage(t.client)["balance"] == start


def test_keys_expire_and_are_swept(services):
    svc = services.start("sweep")
    t = gov_tenant(svc, "idemx")
    body = {"language": "python", "code": "print('old')"}
    k, keep = key(), key()
    status, _, first = post(t.client, body, k)
    assert status == 201
    status, _, kept = post(t.client, body, keep)
    assert status == 201
    svc.stop()
    rows = svc.sql("SELECT key, resource_id, created_at, expires_at FROM idempotency_keys")
    assert {r[0]: r[1] for r in rows} == {k: first["id"], keep: kept["id"]}, rows
    # kept a day
    for _, _, created, expires in rows:
        assert (time.mktime(time.strptime(expires[:19], "%Y-%m-%dT%H:%M:%S")) -
                time.mktime(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S"))) >= 24 * 3600, rows
    # one day later, as the store sees it
    assert svc.sql_count("UPDATE idempotency_keys SET expires_at = '2000-01-01T00:00:00.000Z' WHERE key = ?",
                         k) == 1
    svc.start()
    deadline = time.monotonic() + 30
    while True:
        left = [r[0] for r in svc.sql("SELECT key FROM idempotency_keys")]
        if left == [keep]:
            break
        assert time.monotonic() < deadline, f"the expired key was never swept: {left}"
        time.sleep(0.1)
    # an expired key is free again; a kept one still answers
    status, hdrs, new = post(t.client, body, k)
    assert status == 201 and new["id"] != first["id"] and "idempotent-replayed" not in hdrs
    status, _, same = post(t.client, body, keep)
    assert status == 201 and same["id"] == kept["id"]


def test_skill_runs_and_uploads_honour_the_key(services):
    from conftest import ROOT
    svc = services.start("skills", {"skills_dir": str(ROOT / "skills")})
    t = gov_tenant(svc, "idems")
    name = f"idem-{time.monotonic_ns() % 10**9}"
    bundle = hello_bundle(name=name)
    k = key()
    hdr = {"Content-Type": "application/gzip", "Idempotency-Key": k}
    status, h1, up = t.client.request("POST", "/v1/skills", body=bundle, headers=hdr)
    assert status == 201 and "idempotent-replayed" not in h1, up
    status, h2, up2 = t.client.request("POST", "/v1/skills", body=bundle, headers=hdr)
    assert status == 200 and up2["digest"] == up["digest"] and h2.get("idempotent-replayed") == "true", up2
    status, _, doc = t.client.request("POST", "/v1/skills", body=hello_bundle(name=name, version="2.0.0"), headers=hdr)
    assert_error(status, doc, "idempotency_conflict", 409)
    versions = t.client.ok("GET", f"/v1/skills/{name}")["versions"]
    assert [v["version"] for v in versions] == ["1.0.0"], versions
    # the test bench and a run of a promoted skill, each retried
    run_body = {"entrypoint": "greet", "args": {"who": "ann"}}
    k2 = key()
    s1, _, a = t.client.request("POST", f"/v1/skills/{name}/test", json=run_body, headers={"Idempotency-Key": k2},
                                timeout=120)
    s2, h, b = t.client.request("POST", f"/v1/skills/{name}/test", json=run_body, headers={"Idempotency-Key": k2},
                                timeout=120)
    assert s1 == s2 == 200 and a["id"] == b["id"] and h.get("idempotent-replayed") == "true", (a, b)
    assert a["state"] == "succeeded", a
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    k3 = key()
    s1, _, c = t.client.request("POST", f"/v1/skills/{name}/run", json=run_body, headers={"Idempotency-Key": k3})
    # a retry gets its run even after the skill is gone
    t.client.ok("DELETE", f"/v1/skills/{name}")
    s2, _, d = t.client.request("POST", f"/v1/skills/{name}/run", json=run_body, headers={"Idempotency-Key": k3})
    assert s1 == s2 == 201 and c["id"] == d["id"], (c, d)
    status, _, e = t.client.request("POST", f"/v1/skills/{name}/run", json={**run_body, "args": {"who": "bo"}},
                                    headers={"Idempotency-Key": k3})
    assert_error(status, e, "idempotency_conflict", 409)
    t.client.wait_state(c["id"], TERMINAL)
    assert sorted(run_ids(t.client)) == sorted([a["id"], c["id"]])


def test_mcp_tools_call_honours_the_key(service):
    from test_mcp import Mcp, text_of
    t = gov_tenant(service, "idemm")
    m = Mcp(service, key=t.key)
    args = {"language": "python", "code": "import random; print('mcp', random.random())"}
    k = key()
    # each attempt has its own JSON-RPC id, as a retrying client sends it
    first = m.call("code_execution", args, headers={"Idempotency-Key": k})
    again = m.call("code_execution", args, headers={"Idempotency-Key": k})
    assert first["isError"] is False and "stdout:\nmcp 0." in text_of(first), first
    assert text_of(again) == text_of(first), (first, again)
    assert len(run_ids(t.client)) == 1
    # without a key, the same call is another run (another random number)
    other = m.call("code_execution", args)
    assert text_of(other) != text_of(first)
    assert len(run_ids(t.client)) == 2
    refused = m.call("code_execution", {**args, "code": "print(2)"}, headers={"Idempotency-Key": k})
    assert refused["isError"] is True and "Idempotency-Key" in text_of(refused), refused
    status, _, doc = m.request("tools/call", {"name": "code_execution", "arguments": args},
                               accept="application/json", headers={"Idempotency-Key": "x" * 256})
    assert status == 400 and "Idempotency-Key" in doc["error"]["message"], (status, doc)
    assert len(run_ids(t.client)) == 2


# ------------------------------------------------- the rest of the class: crash windows
# What a crash between two writes leaves is made here by a trigger that
# refuses the second write (the same state a kill -9 between them leaves):
# Service.fail_inserts, on either backend.


def test_a_run_whose_approval_request_was_never_recorded_does_not_wait_forever(services):
    svc = services.start("orphan")
    t = gov_tenant(svc, "idemo")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always")
    # a card the store refuses: the request fails loudly, and its run ends
    # at once instead of waiting for a decision no one can make
    svc.fail_inserts("approval_requests", "no_approval")
    k = key()
    body = {"language": "python", "code": "print('never decided')"}
    status, _, doc = post(t.client, body, k)
    assert status == 500 and "approval card" in doc["error"]["message"], doc
    svc.drop_trigger("no_approval")
    runs = t.client.ok("GET", "/v1/runs")["runs"]
    assert len(runs) == 1 and runs[0]["state"] == "error", runs
    # the ended run says so to whoever follows it
    evs = t.client.ok("GET", f"/v1/runs/{runs[0]['id']}")
    assert evs["state"] == "error" and evs["error"]["code"] == "approval", evs
    # nothing ran: its retry with the key is a new attempt, which now succeeds
    status, _, again = post(t.client, body, k)
    assert status == 201 and again["id"] != runs[0]["id"] and again["state"] == "pending_approval", again
    # what a crash between the run's row and its card leaves: a pending run
    # with no approval request, which the restart ends as lost
    k2 = key()
    status, _, run = post(t.client, {"language": "python", "code": "print('crashed')"}, k2)
    assert status == 201 and run["state"] == "pending_approval", run
    svc.kill9()
    assert svc.sql_count("DELETE FROM approval_requests WHERE run_id = ?", run["id"]) == 1
    svc.start()
    # the ingredient: no one could decide it, and it would have waited forever
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={})
    assert status in (404, 409), (status, doc)
    ended = t.client.get_run(run["id"])
    assert ended["state"] == "error" and ended["error"]["code"] == "lost", ended
    assert ended["finished_at"], ended
    evs = [e for e in audit_events(t.client, run_id=run["id"]) if e["kind"] == "tool.call"]
    assert [e["data"]["state"] for e in evs] == ["error"] and evs[0]["data"]["error"] == "lost", evs
    assert charges(t.client) == {}


def test_a_run_ended_in_error_is_refunded_even_across_a_crash(services):
    svc = services.start("refund")
    t = gov_tenant(svc, "idemf")
    set_price(svc, t.workspace, 6)
    start = usage(t.client)["balance"]
    run = t.client.run("import time; print('up', flush=True); time.sleep(60)", wait=False)
    t.client.wait_state(run["id"], "running", timeout=60)
    assert charges(t.client) == {run["id"]: {"charge": [6], "refund": []}}
    svc.kill9()
    # the restart ends the lost run in error, and its refund does not land:
    # what a crash between the two writes leaves
    svc.fail_inserts("ledger", "no_refund", when="NEW.kind = 'refund'")
    svc.start()
    assert t.client.get_run(run["id"])["state"] == "error"
    assert charges(t.client) == {run["id"]: {"charge": [6], "refund": []}}
    assert usage(t.client)["balance"] == start - 6
    svc.stop()
    svc.drop_trigger("no_refund")
    svc.start()
    assert charges(t.client) == {run["id"]: {"charge": [6], "refund": [6]}}
    assert usage(t.client)["balance"] == start
    # and only once
    svc.kill9()
    svc.start()
    assert charges(t.client) == {run["id"]: {"charge": [6], "refund": [6]}}


def test_inputs_stored_for_a_run_never_recorded_are_removed_at_start(services):
    svc = services.start("inputs", {"max_concurrent": 1})
    t = gov_tenant(svc, "idemi")
    put_settings(t.client, approval_policy="always")
    files = [{"name": "data.txt", "content_base64": base64.b64encode(b"kept for its run").decode()}]
    status, _, kept = post(t.client, {"language": "python", "code": "print(open('data.txt').read())", "files": files})
    assert status == 201 and kept["state"] == "pending_approval", kept
    runs_dir = svc.state / "runs"
    assert (runs_dir / kept["id"] / "in" / "data.txt").read_bytes() == b"kept for its run"
    svc.kill9()
    # what a crash between storing a run's files and recording the run leaves
    orphan = runs_dir / "run_0000000000orphaned00"
    (orphan / "in").mkdir(parents=True)
    (orphan / "in" / "big.bin").write_bytes(b"x" * 100000)
    svc.start()
    assert not orphan.exists(), sorted(p.name for p in runs_dir.iterdir())
    assert (runs_dir / kept["id"] / "in" / "data.txt").read_bytes() == b"kept for its run"
    assert t.client.get_run(kept["id"])["state"] == "pending_approval"


def test_an_upload_whose_audit_failed_is_tried_again_by_its_retry(services):
    """A skill upload whose audit event could not be written answers 500
    audit_failed; its retry with the same key is a new attempt (and writes the
    event), not an answer of "done" that would leave the upload unaudited."""
    from conftest import ROOT
    svc = services.start("skills-audit", {"skills_dir": str(ROOT / "skills")})
    t = gov_tenant(svc, "idemu")
    name = f"idem-{time.monotonic_ns() % 10**9}"
    bundle = hello_bundle(name=name)
    hdr = {"Content-Type": "application/gzip", "Idempotency-Key": key()}
    svc.fail_inserts("audit_events", "no_audit", when="NEW.kind = 'skill.uploaded'")
    status, _, doc = t.client.request("POST", "/v1/skills", body=bundle, headers=hdr)
    assert_error(status, doc, "audit_failed", 500)
    svc.drop_trigger("no_audit")
    status, h, up = t.client.request("POST", "/v1/skills", body=bundle, headers=hdr)
    assert status in (200, 201) and h.get("idempotent-replayed") != "true", (status, h, up)
    evs = [e for e in audit_events(t.client) if e["kind"] == "skill.uploaded"]
    assert [e["data"]["skill"] for e in evs] == [name], evs
