"""Governance (docs/api.md): the audit trail.  Every run leaves
capability.invoke_allowed and tool.call (and approval events when there was
one); each event carries the hash of the one before it in its workspace's
chain; `airlock admin audit verify` passes on an untouched store and, after
the store is tampered with (on either backend), fails naming the first broken link.
GET /v1/audit filters (kind, run_id, person_id, from/to, limit/cursor) and
GET /v1/runs/{id}/trace; no tenant reads another's."""
import hashlib
import json
import re
import threading
import time
import uuid

import pytest

from service_util import (AUDIT_FIELDS, GOV_TERMINAL, assert_error, audit_events, gov_tenant, put_settings,
                          service, services, walk_json)  # noqa: F401

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def verify(svc):
    """`airlock admin audit verify` on SVC's store: (exit status, what it printed)."""
    proc = svc.admin_run("audit", "verify", timeout=120)
    return proc.returncode, proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def check_chain(events):
    """Events of one workspace, by seq: each carries the hash of the one before it."""
    for e in events:
        missing = AUDIT_FIELDS - set(e)
        assert not missing, f"audit event lacks {missing}: {e}"
        assert HEX64.match(e["hash"]), e
    for a, b in zip(events, events[1:]):
        assert b["seq"] > a["seq"], (a, b)
        assert b["prev_hash"] == a["hash"], f"chain broken between seq {a['seq']} and {b['seq']}: {a} {b}"
    hashes = [e["hash"] for e in events]
    assert len(set(hashes)) == len(hashes), "two events share a hash"


@pytest.fixture(scope="module")
def tenant(service):
    t = gov_tenant(service, "aud")
    t.member_id, t.member = t.person_in("member")
    t.approver_id, t.approver = t.person_in("approver")
    t.tok = "aud-" + uuid.uuid4().hex
    t.code_ok = f"print('{t.tok}')"
    t.run_ok = t.member.run(t.code_ok)
    t.run_fail = t.client.run("import sys; print('failing'); sys.exit(5)")
    return t


def test_every_run_leaves_allowed_and_tool_call(tenant):
    t = tenant
    for run, person, code, exit_code in ((t.run_ok, t.member_id, t.code_ok, 0),
                                         (t.run_fail, t.person, None, 5)):
        evs = audit_events(t.client, run_id=run["id"])
        kinds = [e["kind"] for e in evs]
        assert kinds.count("capability.invoke_allowed") == 1 and kinds.count("tool.call") == 1, kinds
        assert kinds.index("capability.invoke_allowed") < kinds.index("tool.call"), kinds
        assert all(e["run_id"] == run["id"] for e in evs), evs
        allowed = evs[kinds.index("capability.invoke_allowed")]
        assert allowed["person_id"] == person, allowed
        assert "code_execution" in json.dumps(allowed["data"]), allowed
        call = evs[kinds.index("tool.call")]
        d = call["data"]
        assert isinstance(d, dict), call
        text = json.dumps(d)
        assert d.get("exit_code") == exit_code, d
        assert "python" in text, f"tool.call lacks the language: {d}"
        assert "offline" in text, f"tool.call lacks the network policy: {d}"
        assert any(HEX64.match(str(v)) for x in walk_json(d) for v in x.values()), f"no sha256 of the input: {d}"
        assert re.search(r"duration|wall_ms|_ms", text), f"tool.call lacks a duration: {d}"
        assert re.search(r"digest", text), f"tool.call lacks the image digest: {d}"
        assert re.search(r"egress", text), f"tool.call lacks the egress summary: {d}"
        if code is not None:
            assert hashlib.sha256(code.encode()).hexdigest() in text or "input" in text, d
            assert t.tok in text, f"tool.call's output preview lacks the output: {d}"
        else:
            assert "failing" in text, d


def test_tool_call_recorded_when_run_ends(tenant):
    """The run's end and its tool.call are one fact: once ?wait=true (or the stream's
    result event) says the run ended, its tool.call is in the audit trail (4 clients at once)."""
    t = tenant
    missing, lock = [], threading.Lock()
    code = "import sys, time\nsys.stdout.write('a'); sys.stdout.flush(); time.sleep(0.2); print('b')"

    def client(k):
        _, c = t.person_in("member")
        for i in range(12):
            run = c.run(code, wait=(i % 2 == 0))
            how = "wait"
            if i % 2:
                how = "stream"
                assert c.events(run["id"], timeout=30)[-1][1] == "result"
            if not audit_events(c, run_id=run["id"], kind="tool.call"):
                with lock:
                    missing.append((how, run["id"]))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not missing, (f"{len(missing)} of 48 runs had ended (?wait=true answer / result event) with no "
                         f"tool.call audit event yet: {missing[:6]}")


def test_chain_links_in_listing(tenant):
    evs = audit_events(tenant.client)
    assert len(evs) >= 4
    check_chain(evs)
    # a member sees the same workspace trail
    assert [e["seq"] for e in audit_events(tenant.member)] == [e["seq"] for e in evs]


def test_filters(tenant):
    t = tenant
    every = audit_events(t.client)
    calls = audit_events(t.client, kind="tool.call")
    assert calls and all(e["kind"] == "tool.call" for e in calls)
    assert len(calls) == sum(1 for e in every if e["kind"] == "tool.call")
    by_run = audit_events(t.client, run_id=t.run_ok["id"])
    assert by_run and all(e["run_id"] == t.run_ok["id"] for e in by_run)
    assert by_run == [e for e in every if e["run_id"] == t.run_ok["id"]]
    by_person = audit_events(t.client, person_id=t.member_id)
    assert by_person and all(e["person_id"] == t.member_id for e in by_person)
    assert t.run_fail["id"] not in {e["run_id"] for e in by_person}
    both = audit_events(t.client, kind="tool.call", person_id=t.person)
    assert [e["run_id"] for e in both] == [t.run_fail["id"]], both
    assert audit_events(t.client, kind="no.such.kind") == []
    assert audit_events(t.client, run_id="run_doesnotexist") == []
    # time
    assert audit_events(t.client, **{"from": "2999-01-01T00:00:00Z"}) == []
    assert len(audit_events(t.client, **{"from": "2000-01-01T00:00:00Z", "to": "2999-01-01T00:00:00Z"})) == len(every)
    assert audit_events(t.client, to="2000-01-01T00:00:00Z") == []
    # pages
    paged = audit_events(t.client, limit=1)
    assert [e["seq"] for e in paged] == [e["seq"] for e in every], "pages of one lose or repeat events"
    doc = t.client.ok("GET", "/v1/audit", query={"limit": "2"})
    assert len(doc["events"]) == 2 and doc["next_cursor"]
    for q in ({"limit": "0"}, {"limit": "abc"}, {"cursor": "garbage!!"}):
        status, _, err = t.client.request("GET", "/v1/audit", query=q)
        assert_error(status, err, "bad_request")
    status, _, err = t.client.request("GET", "/v1/audit", key=None)
    assert_error(status, err, "unauthorized")


@pytest.mark.parametrize("q", [{"from": "not a time"}, {"to": "yesterday"}, {"from": "2026-13-45T99:00:00Z"}])
def test_bad_time_filter_is_400(tenant, q):
    # a filter that cannot be read must not silently answer "no events"
    status, _, err = tenant.client.request("GET", "/v1/audit", query=q)
    assert_error(status, err, "bad_request")


def test_trace(tenant):
    t = tenant
    doc = t.member.ok("GET", f"/v1/runs/{t.run_ok['id']}/trace")
    text = json.dumps(doc)
    assert t.code_ok in text, "the trace lacks the run's input (its code)"
    assert t.tok in text, "the trace lacks the run's output"
    for k in ("input", "output", "decisions", "timing"):
        assert k in doc, f"the trace lacks {k}: {list(doc)}"
    kinds = [d["kind"] for d in walk_json(doc["decisions"]) if "kind" in d]
    assert "capability.invoke_allowed" in kinds and "tool.call" in kinds, kinds
    assert "created_at" in json.dumps(doc["timing"]) or "ms" in json.dumps(doc["timing"]), doc["timing"]
    status, _, err = t.member.request("GET", "/v1/runs/run_doesnotexist/trace")
    assert_error(status, err, "not_found")


def test_approval_events_in_chain(service, tenant):
    t = tenant
    put_settings(t.client, approval_policy="always")
    try:
        status, _, run = t.member.post_run("print('approved one')")
        assert status == 201 and run["state"] == "pending_approval", run
        status, _, doc = t.approver.request("POST", f"/v1/runs/{run['id']}/approve",
                                            json={"hash": run["approval"]["hash"], "reason": "ok by me"})
        assert status in (200, 202), doc
        t.member.wait_state(run["id"], GOV_TERMINAL, timeout=60)
        status, _, run2 = t.member.post_run("print('denied one')")
        assert status == 201
        t.approver.request("POST", f"/v1/runs/{run2['id']}/deny", json={"reason": "no"})
        t.member.wait_state(run2["id"], GOV_TERMINAL, timeout=20)
    finally:
        put_settings(t.client, approval_policy="never")
    ev1 = audit_events(t.client, run_id=run["id"])
    k1 = [e["kind"] for e in ev1]
    assert k1[0] == "capability.invoke_allowed" or "capability.invoke_allowed" in k1, k1
    assert "approval.requested" in k1 and "approval.approved" in k1 and k1[-1] == "tool.call", k1
    appr = ev1[k1.index("approval.approved")]
    assert appr["person_id"] == t.approver_id and "ok by me" in json.dumps(appr["data"]), appr
    req = ev1[k1.index("approval.requested")]
    assert run["approval"]["hash"] in json.dumps(req["data"]), "approval.requested does not name the card's hash"
    assert k1.index("approval.requested") < k1.index("approval.approved")
    k2 = [e["kind"] for e in audit_events(t.client, run_id=run2["id"])]
    assert "approval.denied" in k2 and "tool.call" not in k2, k2
    tr = t.member.ok("GET", f"/v1/runs/{run['id']}/trace")
    kinds = [d["kind"] for d in walk_json(tr) if "kind" in d]
    assert "approval.approved" in kinds, kinds
    check_chain(audit_events(t.client))


def test_tenant_boundary(service, tenant):
    t = tenant
    other = gov_tenant(service, "audx")
    other.client.run("print('other org')")
    theirs = audit_events(other.client)
    assert theirs, "the other org's run left no audit event"
    mine_runs = {t.run_ok["id"], t.run_fail["id"]}
    assert not mine_runs & {e["run_id"] for e in theirs}
    assert not {t.person, t.member_id} & {e["person_id"] for e in theirs}
    for q in ({"run_id": t.run_ok["id"]}, {"person_id": t.member_id}):
        status, _, doc = other.client.request("GET", "/v1/audit", query=q)
        assert status == 404 or (status == 200 and doc["events"] == []), (q, status, doc)
    status, _, doc = other.client.request("GET", f"/v1/runs/{t.run_ok['id']}/trace")
    assert_error(status, doc, "not_found")
    # another workspace of the same organisation has a chain of its own and sees nothing of this one
    ws2 = t.add_workspace("aud-ws2")
    _, c2 = t.person_in("admin", workspace=ws2)
    c2.run("print('ws2')")
    ev2 = audit_events(c2)
    assert ev2 and not mine_runs & {e["run_id"] for e in ev2}
    check_chain(ev2)
    status, _, doc = c2.request("GET", f"/v1/runs/{t.run_ok['id']}/trace")
    assert_error(status, doc, "not_found")


def test_verify_passes_on_live_store(service, tenant):
    rc, out = verify(service)
    assert rc == 0, f"audit verify failed on an untouched store: {out}"


# ------------------------------------------------------------ tamper detection (own services)


def _audit_table(svc):
    cols = svc.columns("audit_events")
    assert cols, "no audit_events table in the store"
    assert "seq" in cols and "data" in cols, cols
    return cols


def _populated(services, name):
    svc = services.start(name)
    a = gov_tenant(svc, "ta")
    b = gov_tenant(svc, "tb")
    for i in range(3):
        a.client.run(f"print('a{i}')")
        b.client.run(f"print('b{i}')")
    put_settings(a.client, tools=[])
    a.client.post_run("print('refused')")
    put_settings(a.client, tools=["code_execution"])
    rc, out = verify(svc)
    assert rc == 0, f"audit verify failed on an untouched store: {out}"
    assert audit_events(a.client) and audit_events(b.client)
    return svc, a, b


def test_tamper_data_detected(services):
    svc, a, b = _populated(services, "tamper")
    evs = audit_events(a.client)
    victim = evs[len(evs) // 2]
    svc.stop()
    _audit_table(svc)
    [(data,)] = svc.sql("SELECT data FROM audit_events WHERE workspace_id = ? AND seq = ?",
                        a.workspace, victim["seq"])
    forged = data.replace("python", "pythoN") if "python" in data else data[:-1] + ' ' + data[-1:]
    assert forged != data
    n = svc.sql_count("UPDATE audit_events SET data = ? WHERE workspace_id = ? AND seq = ?",
                      forged, a.workspace, victim["seq"])
    assert n == 1
    rc, out = verify(svc)
    assert rc != 0, f"audit verify passed a tampered store: {out}"
    assert re.search(rf"(?<![0-9]){victim['seq']}(?![0-9])", out), \
        f"audit verify does not name the broken link (seq {victim['seq']}): {out}"
    assert a.workspace in out, f"audit verify does not name the broken chain's workspace {a.workspace}: {out}"
    assert b.workspace not in out or "ok" in out.lower(), out
    # the service still serves (what it reads is its own business), and a restart works
    svc.start()
    assert svc.ok("GET", "/healthz", key=None)


def test_tamper_delete_and_hash_detected(services):
    svc, a, b = _populated(services, "tamper2")
    ea, eb = audit_events(a.client), audit_events(b.client)
    gone = ea[1]
    svc.stop()
    cols = _audit_table(svc)
    assert svc.sql_count("DELETE FROM audit_events WHERE workspace_id = ? AND seq = ?",
                         a.workspace, gone["seq"]) == 1
    rc, out = verify(svc)
    assert rc != 0, f"audit verify passed a chain with a deleted event: {out}"
    nxt = ea[2]["seq"]
    assert re.search(rf"(?<![0-9])({gone['seq']}|{nxt})(?![0-9])", out), \
        f"verify does not name where the chain breaks (deleted {gone['seq']}, next {nxt}): {out}"
    # a fresh copy: a rewritten hash (data and hash changed together) breaks the next link
    svc2, a2, _ = _populated(services, "tamper3")
    e2 = audit_events(a2.client)
    victim = e2[1]
    svc2.stop()
    cols = _audit_table(svc2)
    if "hash" in cols:
        assert svc2.sql_count("UPDATE audit_events SET hash = ? WHERE workspace_id = ? AND seq = ?",
                              "f" * 64, a2.workspace, victim["seq"]) == 1
    rc, out = verify(svc2)
    assert rc != 0, f"audit verify passed a forged hash: {out}"
    assert re.search(rf"(?<![0-9])({victim['seq']}|{e2[2]['seq']})(?![0-9])", out), out
    del eb


def test_every_column_is_covered(services):
    """Forging any column of an event (who, what kind, which run, when, the data, the link)
    breaks the chain; putting the value back repairs it."""
    svc, a, b = _populated(services, "columns")
    evs = audit_events(a.client)
    victim = [e for e in evs if e["person_id"] and e["run_id"]][1]
    svc.stop()
    forged = {
        "data": '{"forged": true}',
        "kind": "capability.invoke_denied" if victim["kind"] != "capability.invoke_denied" else "tool.call",
        "person_id": b.person,
        "run_id": "run_forged0000000000000",
        "created_at": "2020-01-01T00:00:00.000Z",
        "prev_hash": "0" * 64,
        "org_id": b.org,
    }
    missed = []
    for col, value in forged.items():
        [(orig,)] = svc.sql(f"SELECT {col} FROM audit_events WHERE workspace_id = ? AND seq = ?",
                            a.workspace, victim["seq"])
        assert orig != value
        svc.sql(f"UPDATE audit_events SET {col} = ? WHERE workspace_id = ? AND seq = ?",
                value, a.workspace, victim["seq"])
        rc, out = verify(svc)
        if rc == 0:
            missed.append(col)
        svc.sql(f"UPDATE audit_events SET {col} = ? WHERE workspace_id = ? AND seq = ?",
                orig, a.workspace, victim["seq"])
        rc, out = verify(svc)
        assert rc == 0, f"verify still fails after {col} was put back: {out}"
    assert not missed, f"audit verify does not notice a forged {missed} (seq {victim['seq']})"


def test_moved_or_swapped_events_detected(services):
    svc, a, b = _populated(services, "swap")
    ea = audit_events(a.client)
    svc.stop()
    # swap the data of two events of the same kind (two tool.calls)
    calls = [e["seq"] for e in ea if e["kind"] == "tool.call"][:2]
    rows = [svc.sql("SELECT data FROM audit_events WHERE workspace_id = ? AND seq = ?", a.workspace, s)[0][0]
            for s in calls]
    for s, d in zip(calls, reversed(rows)):
        assert svc.sql_count("UPDATE audit_events SET data = ? WHERE workspace_id = ? AND seq = ?",
                             d, a.workspace, s) == 1
    rc, out = verify(svc)
    assert rc != 0, f"verify passed two swapped tool.call records: {out}"
    assert re.search(rf"(?<![0-9]){calls[0]}(?![0-9])", out), out
