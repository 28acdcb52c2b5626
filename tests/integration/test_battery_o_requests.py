"""Hostile battery, group O1: requests mean what they say (docs/security.md).

A field the service does not read is refused, named, on every route that
takes a JSON body; an auditor's trace answers for every run; a tenant sees
only its own; and slow clients cannot hold every connection.  Each case shows
the ingredient working (the field the service does read, the trace of a run
that ran), then the case that failed on the old service."""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from service_util import ServiceSet, assert_error, gov_tenant, put_settings, services  # noqa: E402,F401
from test_mcp import Mcp, text_of  # noqa: E402


@pytest.fixture(scope="module")
def svc(request):
    ss = ServiceSet(request)
    yield ss.start("battery-o", {"max_concurrent": 4})
    ss.close()


def refused(status, doc, field):
    """A 400 in the service's error shape that names FIELD."""
    assert_error(status, doc, "bad_request", 400)
    assert f'"{field}"' in doc["error"]["message"], doc
    return doc["error"]["message"]


# ------------------------------------------------- unknown fields: /v1/runs


def test_runs_refuse_unknown_top_level_fields(svc):
    c = gov_tenant(svc, "ofields").client
    # the ingredient: the field REST reads makes a run in the thread
    run = c.run("print(1)", thread_id="t1")
    assert run["thread_id"] == "t1" and run["state"] == "succeeded", run
    # MCP's name for it: was a run with no thread; now a 400 naming it
    status, _, doc = c.post_run("print(1)", thread="t1")
    msg = refused(status, doc, "thread")
    assert "thread_id" in msg, msg  # the fields it does take are listed
    # {"timeout": 5} ran for the default 60 s
    status, _, doc = c.post_run("print(1)", timeout=5)
    refused(status, doc, "timeout")
    # nothing was made of either
    assert all(r.get("thread_id") != "t1" or r["id"] == run["id"] for r in c.list_runs()), c.list_runs()
    assert len(c.list_runs()) == 1


def test_runs_refuse_unknown_nested_fields(svc):
    c = gov_tenant(svc, "onested").client
    f = {"name": "a.txt", "content_base64": "eA=="}
    # the ingredients: a file and a limit the service reads
    run = c.run("print(open('a.txt').read())", files=[f], limits={"timeout_s": 5})
    assert run["result"]["stdout"] == "x\n" and run["limits"]["timeout_s"] == 5, run
    # a file's field it does not read (MCP's text "content") was dropped
    status, _, doc = c.post_run("print(1)", files=[dict(f, mode="0755")])
    msg = refused(status, doc, "mode")
    assert "files[0]" in msg, msg
    status, _, doc = c.post_run("print(1)", limits={"timeout": 5})
    assert "limits" in refused(status, doc, "timeout")


def test_cancel_takes_no_fields(svc):
    c = gov_tenant(svc, "ocancel").client
    status, _, run = c.post_run("import time\ntime.sleep(30)")
    assert status == 201, run
    # a reason sent with a cancel was dropped: the run's record never had it
    status, _, doc = c.request("POST", f"/v1/runs/{run['id']}/cancel", json={"reason": "stuck"})
    refused(status, doc, "reason")
    assert c.get_run(run["id"])["state"] not in ("canceled",), "a refused cancel canceled"
    # the ingredient: a cancel as documented (no body, or {})
    status, _, doc = c.request("POST", f"/v1/runs/{run['id']}/cancel", json={})
    assert status == 202, (status, doc)
    c.wait_state(run["id"], {"canceled"})


def test_query_parameters_a_route_does_not_read_are_refused(svc):
    t = gov_tenant(svc, "oquery")
    c = t.client
    run = c.run("print(1)", thread_id="q1")
    c.run("print(2)")
    # the ingredients: the parameters the routes read filter and wait
    assert [r["id"] for r in c.list_runs(thread_id="q1")] == [run["id"]]
    ev = c.ok("GET", "/v1/audit", query={"run_id": run["id"]})["events"]
    assert ev and all(e["run_id"] == run["id"] for e in ev), ev
    # a misspelt filter answered every run, every event: an auditor read the workspace's trail as one run's
    for path, q, name in (("/v1/runs", {"thread": "q1"}, "thread"), ("/v1/audit", {"run": run["id"]}, "run"),
                          ("/v1/usage", {"since": "2026-01-01T00:00:00Z"}, "since"),
                          ("/v1/threads/q1/artifacts", {"all_versions": "true"}, "all_versions")):
        status, _, doc = c.request("GET", path, query=q)
        msg = refused(status, doc, name)
        assert "query parameter" in msg, msg
    # ?wiat=true made a run that did not wait; now nothing is made
    before = len(c.list_runs())
    status, _, doc = c.request("POST", "/v1/runs", json={"language": "python", "code": "print(3)"},
                               query={"wiat": "true"})
    refused(status, doc, "wiat")
    status, _, doc = c.request("POST", f"/piston/{c.key}/api/v2/execute", key=None, query={"timeout": "5"},
                               json={"language": "python", "files": [{"content": "print(4)"}]})
    refused(status, doc, "timeout")
    assert len(c.list_runs()) == before


# ---------------------------------------- unknown fields: the other routes


def test_approvals_settings_and_skills_refuse_unknown_fields(svc):
    t = gov_tenant(svc, "oroutes")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    _, member = t.person_in("member")
    status, _, run = member.post_run("print(2)")
    assert status == 201 and run["state"] == "pending_approval", run
    # a decision's field it does not read (a note meant as the reason) is refused, and decides nothing
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"note": "ok"})
    refused(status, doc, "note")
    assert member.get_run(run["id"])["state"] == "pending_approval"
    # the ingredient: the fields it reads decide
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"})
    assert status == 200 and doc["state"] == "denied", doc
    # settings: top level, and a DLP pattern's fields
    status, _, doc = t.client.request("PUT", "/v1/settings", json={"timeout": 5})
    refused(status, doc, "timeout")
    put_settings(t.client, dlp_patterns=[{"name": "tok", "pattern": "tok_[a-z]+"}])
    status, _, doc = t.client.request("PUT", "/v1/settings",
                                      json={"dlp_patterns": [{"name": "tok", "pattern": "x", "flags": "i"}]})
    refused(status, doc, "flags")
    # skills: run, test and promote (no such skill: the body is read first)
    for path in ("/v1/skills/nosuch/run", "/v1/skills/nosuch/test"):
        status, _, doc = t.client.request("POST", path, json={"entrypoint": "x", "thread": "t"})
        refused(status, doc, "thread")
    status, _, doc = t.client.request("POST", "/v1/skills/nosuch/promote", json={"version": "1"})
    refused(status, doc, "version")


def test_piston_refuses_unknown_fields_and_takes_its_documented_ones(svc):
    c = gov_tenant(svc, "opiston").client
    path = f"/piston/{c.key}/api/v2/execute"
    # the ingredient: every field Piston documents, as piston-client sends them (-1: no limit)
    body = {"language": "python", "version": "*", "files": [{"name": "main.py", "content": "print(5)",
                                                              "encoding": "utf8"}],
            "stdin": "", "args": [], "compile_timeout": 10000, "run_timeout": 3000,
            "compile_cpu_time": -1, "run_cpu_time": -1, "compile_memory_limit": -1, "run_memory_limit": -1}
    status, _, doc = c.request("POST", path, json=body, key=None)
    assert status == 200 and doc["run"]["stdout"] == "5\n", doc
    # a field outside Piston's (a typo of run_timeout) ran with the default
    status, _, doc = c.request("POST", path, json=dict(body, runTimeout=1), key=None)
    refused(status, doc, "runTimeout")
    status, _, doc = c.request("POST", path, key=None,
                               json=dict(body, files=[{"name": "main.py", "content": "print(5)", "path": "/x"}]))
    assert "files[0]" in refused(status, doc, "path")
    # content in another encoding would have run its encoded form
    status, _, doc = c.request("POST", path, key=None,
                               json=dict(body, files=[{"content": "cHJpbnQoNSk=", "encoding": "base64"}]))
    assert_error(status, doc, "bad_request", 400)
    assert "encoding" in doc["error"]["message"], doc


def test_mcp_tool_arguments_refuse_unknown_fields(svc):
    m = Mcp(svc)
    # the ingredient: a file the tool reads
    r = m.call("code_execution", {"language": "python", "code": "print(open('a.txt').read())",
                                  "files": [{"name": "a.txt", "content": "x"}]})
    assert r["isError"] is False and "x" in text_of(r), r
    # a file's field it does not read
    r = m.call("code_execution", {"language": "python", "code": "print(1)",
                                  "files": [{"name": "a.txt", "content": "x", "mode": "0755"}]})
    assert r["isError"] is True and '"mode"' in text_of(r), r
    r = m.call("code_execution", {"language": "python", "code": "print(1)", "thread_id": "t1"})
    assert r["isError"] is True and '"thread_id"' in text_of(r), r


# ---------------------------------------------- the trace of every run


def test_trace_of_runs_without_a_result(svc):
    t = gov_tenant(svc, "otrace")
    # the ingredient: a run that ran has its trace
    ran = t.client.run("print(3)")
    doc = t.client.ok("GET", f"/v1/runs/{ran['id']}/trace")
    assert doc["output"]["stdout"] == "3\n", doc
    # a denied run never reached its box: its trace was a 500
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    status, _, run = t.client.post_run("print('never')", description="to be denied")
    assert status == 201 and run["state"] == "pending_approval", run
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "not today"})
    assert status == 200 and doc["state"] == "denied", doc
    status, _, doc = t.client.request("GET", f"/v1/runs/{run['id']}/trace")
    assert status == 200, (status, doc)
    assert doc["run"]["state"] == "denied" and doc["input"]["code"] == "print('never')", doc
    assert doc["output"] == {"stdout": None, "stderr": None, "exit_code": None, "artifacts": [], "redactions": 0}, doc
    kinds = [e["kind"] for e in doc["decisions"]]
    assert any("denied" in k for k in kinds), kinds
    assert doc["timing"]["started_at"] is None and doc["timing"]["wall_ms"] is None, doc
    # and one still waiting for its decision
    status, _, run = t.client.post_run("print('waits')")
    assert status == 201 and run["state"] == "pending_approval", run
    status, _, doc = t.client.request("GET", f"/v1/runs/{run['id']}/trace")
    assert status == 200 and doc["run"]["state"] == "pending_approval" and doc["output"]["stdout"] is None, doc


# ------------------------------------------- the service's figures are the operator's


def test_tenant_settings_carry_no_pool_state(svc):
    a, b = gov_tenant(svc, "opsa"), gov_tenant(svc, "opsb")
    # the ingredient: tenant A's run is a shape of the pool's, with live counts
    a.client.run("print(1)")
    doc = b.client.ok("GET", "/v1/settings")
    assert doc["badges"]["pool"]["level"], doc["badges"]
    # tenant B's settings carried every tenant's shapes, hits and misses
    assert "state" not in doc["badges"]["pool"], doc["badges"]["pool"]
    # the operator (here: from loopback, the default) reads them
    op = svc.ok("GET", "/operator/status", key=None)
    assert {"hits", "misses", "shapes"} <= set(op["badges"]["pool"]["state"]), op


def test_metrics_and_the_pool_are_the_operators(services, tmp_path):
    token = "op_" + "k" * 40
    tf = tmp_path / "operator.token"
    tf.write_text(token + "\n")
    tf.chmod(0o600)
    svc = services.start("ops", {"operator_access": "token", "operator_token_file": str(tf)})
    b = svc.new_tenant("opsb")
    # the ingredient: the operator's token reads both
    status, _, op = svc.request("GET", "/operator/status", key=token)
    assert status == 200 and "hits" in op["badges"]["pool"]["state"], (status, op)
    status, _, text = svc.request("GET", "/metrics", key=token)
    assert status == 200 and b"airlock_runs" in text, (status, text[:200])
    # /metrics answered anyone; with operator_access = token nobody else reads it, a tenant neither
    for key in (None, b.key, "op_" + "x" * 40):
        status, _, body = svc.request("GET", "/metrics", key=key)
        assert_error(status, body, "operator_only", 403)
        status, _, body = svc.request("GET", "/operator/status", key=key)
        assert_error(status, body, "operator_only", 403)
    # `airlock doctor --url` with a tenant's key: the controls, and the pool said to be the operator's
    url = f"http://{svc.host}:{svc.port}"
    out = subprocess.run([str(svc.binary), "doctor", "--url", url, "--key", b.key], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "shape:" not in out.stdout and "operator" in out.stdout, (out.stdout, out.stderr)
    out = subprocess.run([str(svc.binary), "doctor", "--url", url, "--key", b.key, "--operator-token-file", str(tf)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "pool:    at most" in out.stdout, (out.stdout, out.stderr)


def test_metrics_default_to_loopback(svc):
    # the default (operator_access = loopback): the host's own scraper reads it without a key
    status, _, text = svc.request("GET", "/metrics", key=None)
    assert status == 200 and b"airlock_http_connections_cut_total" in text, (status, text[:200])
    # and `airlock doctor --url` on the host shows the pool, as its operator
    out = subprocess.run([str(svc.binary), "doctor", "--json", "--url", f"http://{svc.host}:{svc.port}", "--key",
                          svc.key], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"per_shape", "hits", "misses", "shapes"} <= set(doc["pool"]), doc


def test_an_operator_token_others_can_read_is_refused(services, tmp_path):
    tf = tmp_path / "operator.token"
    tf.write_text("op_" + "k" * 40 + "\n")
    tf.chmod(0o644)
    with pytest.raises(BaseException) as e:
        services.start("opsbad", {"operator_access": "token", "operator_token_file": str(tf)})
    assert "chmod 600" in str(e.value), e.value


# ------------------------------------------------------------- slow clients


def _trickle(svc, source, head=b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):
    s = socket.create_connection((svc.host, svc.port), timeout=5, source_address=(source, 0))
    s.sendall(head)
    return s


def _alive(s):
    """Whether S is still open: one more byte goes, and no end or reset came."""
    try:
        s.sendall(b"X")
        s.setblocking(False)
        try:
            return s.recv(1) != b""
        except BlockingIOError:
            return True
        finally:
            s.setblocking(True)
    except OSError:
        return False


def test_a_trickled_request_is_cut_at_its_deadline(services):
    svc = services.start("slow", {"request_timeout_s": 3, "connection_timeout_s": 60})
    # the ingredient: a request sent slowly but within its deadline is answered
    s = _trickle(svc, "127.0.0.1")
    for ch in b"X-Slow: 1\r\n":
        time.sleep(0.05)
        s.sendall(bytes([ch]))
    s.sendall(b"\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 200"), "a slow but timely request was not answered"
    s.close()
    # a byte every half second is never idle (connection_timeout_s = 60): it held its slot for ever
    s = _trickle(svc, "127.0.0.1", b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    start = time.monotonic()
    while _alive(s) and time.monotonic() - start < 15:
        time.sleep(0.5)
    held = time.monotonic() - start
    s.close()
    assert held < 6, f"a request trickled a byte each 0.5 s held its connection {held:.1f} s (request_timeout_s = 3)"
    text = svc.request("GET", "/metrics", key=None)[2].decode()
    assert 'airlock_http_connections_cut_total{reason="deadline"} 1' in text, text


def test_slow_clients_from_many_addresses_do_not_lock_out_a_keyed_client(services):
    # the service: 256 slots
    svc = services.start("slowmany", {"max_connections": 256})
    held = []
    try:
        # the ingredient: 400 trickling clients from 199 addresses, more than every slot
        for i in range(400):
            try:
                held.append(_trickle(svc, f"127.0.1.{i % 199 + 1}"))
            except OSError:
                pass
        time.sleep(1.0)
        live = sum(_alive(s) for s in held)
        assert live >= 150, f"only {live} of the trickling connections were held: the attack did not take hold"
        # a client with a valid key is served at once: the old service left it in the backlog
        t0 = time.monotonic()
        try:
            status, _, doc = svc.request("GET", "/v1/settings", timeout=5)
        except OSError as e:
            status, doc = None, repr(e)
        assert status == 200, f"a keyed client was not served with 400 slow clients holding 256 slots: {doc!r}"
        assert time.monotonic() - t0 < 5
        # and a second, after it: the slots the unauthenticated may take are bounded
        assert svc.request("GET", "/v1/settings", timeout=5)[0] == 200
        text = svc.request("GET", "/metrics", key=None, timeout=5)[2].decode()
        assert 'airlock_http_connections_cut_total{reason="reserve"}' in text, text
    finally:
        for s in held:
            s.close()
