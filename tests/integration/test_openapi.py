"""docs/openapi.json against the real service (issue 34, "a typed contract on
the wire"): every operation has an operationId and every JSON reply a schema;
one real request or more per operation, successful and refused, each reply
validated against the schema of its status (objects the spec closes with
additionalProperties: false fail on a field added or dropped); and the routes
the server serves are the spec's, read from its sources and probed."""
import base64
import http.client
import io
import json
import os
import re
import tarfile
import tempfile
import time

import pytest

from conftest import ROOT, need
from openapi_util import METHODS, Contract, compare_routes, load_spec, norm, operations, server_routes
from service_util import gov_tenant, service, services  # noqa: F401

SPEC = load_spec()
OPS = operations(SPEC)


def test_every_operation_has_an_id_and_every_json_reply_a_schema():
    ids = [op.get("operationId") for op in OPS.values()]
    assert all(ids), [k for k, op in OPS.items() if not op.get("operationId")]
    assert len(ids) == len(set(ids)), "operationIds repeat"
    for (m, p), op in OPS.items():
        assert op.get("responses"), f"{m} {p} has no responses"
        for status, resp in op["responses"].items():
            for media, c in resp.get("content", {}).items():
                assert "schema" in c or media == "application/octet-stream", f"{m} {p} {status} {media} has no schema"
    assert ("PATCH", "/v1/settings") in OPS
    # the run's result is typed to the field
    result = SPEC["components"]["schemas"]["RunResult"]
    assert result.get("additionalProperties") is False and {"stdout", "exit_code", "reason", "controls"} <= set(result["properties"])


def test_api_md_names_the_spec_operations():
    text = (ROOT / "docs" / "api.md").read_text()
    # E2B's paths are E2B's API, not in docs/openapi.json (openapi_util.NOT_AIRLOCKS)
    text = re.sub(r"^## E2B compatibility\n.*?(?=^## )", "", text, flags=re.S | re.M)
    documented = {(m, norm(p)) for m, p in re.findall(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`?\s]*)", text)}
    assert documented == {(m, norm(p)) for m, p in OPS}, (
        f"only in docs/api.md: {documented - {(m, norm(p)) for m, p in OPS}}; "
        f"only in docs/openapi.json: {({(m, norm(p)) for m, p in OPS}) - documented}")


def test_the_server_sources_route_what_the_spec_has():
    rows, literals, methods = server_routes()
    if rows:   # a route table: the same operations exactly
        undocumented, unrouted = compare_routes(rows, OPS)
        assert not undocumented and not unrouted, (f"routed, not in docs/openapi.json: {undocumented}; "
                                                   f"in docs/openapi.json, not routed: {unrouted}")
        return
    # the chains of strcmp of today's router: each segment it compares is in
    # a documented path, and each method it compares is documented
    assert len(literals) > 20 and methods, (literals, methods)
    spec_segments = {s for p in SPEC["paths"] for s in p.strip("/").split("/")}
    assert literals <= spec_segments, f"the router compares segments no documented path has: {literals - spec_segments}"
    assert methods - {"HEAD"} <= {m for m, _ in OPS}, f"the router takes methods the spec has not: {methods}"


def test_served_spec_is_docs_openapi_json(service):
    status, hdrs, doc = service.get("/openapi.json", key=None)
    assert status == 200 and doc == SPEC, "the served /openapi.json is not docs/openapi.json (rebuild?)"


# ------------------------------------------------------------ every operation


def bundle(name, version="1.0.0"):
    # (the docker driver runs only on images)
    image = "default" if os.environ.get("AIRLOCK_TEST_DRIVER") == "docker" else "host"
    manifest = {"name": name, "version": version, "description": "Says hi.", "image": image,
                "entrypoints": [{"name": "hi", "language": "python", "script": "hi.py", "description": "Say hi to WHO.",
                                 "input_schema": {"type": "object", "additionalProperties": False,
                                                  "properties": {"who": {"type": "string"}}}}]}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, data in {"skill.json": json.dumps(manifest),
                           "hi.py": "import json, sys\nprint('hi', json.load(open(sys.argv[1]))['who'])\n"}.items():
            info = tarfile.TarInfo(path)
            info.size = len(data.encode())
            t.addfile(info, io.BytesIO(data.encode()))
    return buf.getvalue()


def first_event_id(service, body, headers):
    """POST BODY to /mcp as an event stream, read up to its first event's id
    and go: the id."""
    conn = http.client.HTTPConnection(service.host, service.port, timeout=60)
    try:
        conn.request("POST", "/mcp", body=body, headers={**headers, "Authorization": f"Bearer {service.key}",
                                                         "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"), resp.status
        while True:
            line = resp.fp.readline().decode()
            assert line, "the stream ended before its first event"
            if line.startswith("id:"):
                return line[3:].strip()
    finally:
        conn.close()


class Caller:
    """Requests by documented operation, each reply checked by CONTRACT."""

    def __init__(self, contract, client):
        self.contract, self.client = contract, client

    def as_(self, client):
        return Caller(self.contract, client)

    def __call__(self, method, path, want, args=None, **kw):
        url = path
        for k, v in (args or {}).items():
            url = url.replace("{" + k + "}", v)
        kw.setdefault("timeout", 120)
        if want < 300 and kw.get("json") is not None:
            # a body the server takes is one the spec takes (a client typed
            # from it could not send it otherwise)
            rb = self.contract.ops[(method, path)].get("requestBody", {}).get("content", {}).get("application/json")
            assert rb, f"{method} {path} takes a JSON body docs/openapi.json does not document"
            self.contract.validate(rb["schema"], kw["json"], f"the body of {method} {path}")
        status, hdrs, body = self.client.request(method, url, **kw)
        assert status == want, f"{method} {url}: want {want}, got {status}: {body!r:.2000}"
        return self.contract.check(method, path, status, hdrs, body)


@pytest.fixture(scope="module")
def contract():
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        need(False, "python3-jsonschema (scripts/deps.sh installs it)")
    return Contract(SPEC)


def folder_reads(call, service):
    """The connected folders (issue 38): the list and a directory's entries, on a
    folder lent to the bootstrap workspace (the oldest: the one `call`'s key is of)."""
    ws = re.search(r"\b(ws_[a-z0-9]+)", service.admin("list")).group(1)
    d = tempfile.mkdtemp(prefix="oa-folder-")
    os.mkdir(os.path.join(d, "sub"))
    open(os.path.join(d, "a.txt"), "w").write("a")
    service.admin("folder", "add", "--workspace", ws, "oa", d)
    listed = call("GET", "/v1/folders", 200)
    assert [f["name"] for f in listed["folders"]] == ["oa"] and listed["folders"][0]["path"] == d, listed
    call("GET", "/v1/folders", 400, query={"path": "x"})
    got = call("GET", "/v1/folders/{name}/entries", 200, {"name": "oa"})
    assert [(e["name"], e["type"]) for e in got["entries"]] == [("a.txt", "file"), ("sub", "dir")], got
    call("GET", "/v1/folders/{name}/entries", 400, {"name": "oa"}, query={"path": "../x"})
    call("GET", "/v1/folders/{name}/entries", 404, {"name": "nope"})


def console_reads(call, contract, service):
    """The workspace's people, threads, sandboxes, activity stream, usage by
    day and audit verification and export, each checked as documented."""
    call("GET", "/v1/persons", 200)
    call("GET", "/v1/persons", 400, query={"role": "admin"})
    call("GET", "/v1/threads", 200)
    call("GET", "/v1/threads", 400, query={"limit": "0"})
    call("GET", "/v1/runs", 200, query={"via": "rest", "person_id": "nobody"})
    call("GET", "/v1/runs", 400, query={"via": "smtp"})
    call("GET", "/v1/audit/verify", 200)
    lines = call("GET", "/v1/audit", 200, query={"format": "ndjson"}).decode().splitlines()
    assert lines
    for line in lines:
        contract.validate({"$ref": "#/components/schemas/AuditEvent"}, json.loads(line), "an exported event")
    status, _, doc = service.request("POST", "/sandboxes", json={"templateID": "base"},
                                     headers={"X-API-KEY": service.key})
    assert status == 201, (status, doc)
    sid = doc["sandboxID"]
    assert [b["id"] for b in call("GET", "/v1/sandboxes", 200)["sandboxes"]] == [sid]
    call("GET", "/v1/sandboxes/{id}/files", 200, {"id": sid})
    call("GET", "/v1/sandboxes/{id}/files", 404, {"id": "sbx_nope"})
    call("DELETE", "/v1/sandboxes/{id}", 204, {"id": sid})
    call("DELETE", "/v1/sandboxes/{id}", 404, {"id": sid})
    # the activity stream (it never ends: read up to its first event)
    conn = http.client.HTTPConnection(service.host, service.port, timeout=60)
    try:
        conn.request("GET", "/v1/events", headers={"Authorization": f"Bearer {service.key}"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.readline() == b": listening\n"
        service.run("print(1)", wait=False)
        block = b""
        while not block.endswith(b"\n\n") or b"event:" not in block:
            line = resp.readline()
            assert line, "the stream ended"
            block = b"" if line == b"\n" and b"event:" not in block else block + line
        contract.check("GET", "/v1/events", 200, {"content-type": resp.getheader("Content-Type")}, block)
    finally:
        conn.close()
    call("GET", "/v1/events", 400, query={"since": "0"})


def test_every_operation_answers_as_documented(service, contract):
    call = Caller(contract, service)
    nokey = Caller(contract, service.with_key(None))
    # --- operator and public
    nokey("GET", "/healthz", 200, key=None)
    body = nokey("GET", "/metrics", 200, key=None)
    assert b"airlock_" in body
    nokey("GET", "/operator/status", 200, key=None)
    nokey("GET", "/openapi.json", 200, key=None)
    # --- the web console's files (test_console.py tests them in full)
    nokey("GET", "/", 200, key=None)
    nokey("GET", "/login", 200, key=None)
    nokey("GET", "/assets/{file}", 200, {"file": "app.js"}, key=None)
    nokey("GET", "/assets/{file}", 404, {"file": "nope.js"}, key=None)
    nokey("GET", "/assets/pages/{file}", 200, {"file": "activity.js"}, key=None)
    nokey("GET", "/assets/pages/{file}", 404, {"file": "nope.js"}, key=None)
    # --- settings
    call("GET", "/v1/settings", 200)
    nokey("GET", "/v1/settings", 401, key=None)
    call("PATCH", "/v1/settings", 200, json={"timeout_s": 30, "secrets": {"TOKEN": "s3cret"}})
    doc = call("GET", "/v1/settings", 200)
    assert doc["timeout_s"] == 30 and doc["secrets"] == ["TOKEN"], doc
    call("PATCH", "/v1/settings", 400, json={"no_such_setting": 1})
    call("PUT", "/v1/settings", 200, json={"secrets": {"TOKEN": None}})
    # --- runs
    code = "import sys\nprint('out'); print('err', file=sys.stderr)\nopen('/out/a.txt', 'w').write('a')\n"
    run = call("POST", "/v1/runs", 200, json={"language": "python", "code": code, "thread_id": "oa"},
               query={"wait": "true"})
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "out\n", run
    rid = run["id"]
    raw = call("POST", "/v1/runs", 200, json={"language": "bash", "code": "printf 'a\\xff\\x00'; exit 3"}, query={"wait": "true"})
    assert raw["result"]["exit_code"] == 3 and base64.b64decode(raw["result"]["stdout_base64"]) == b"a\xff\x00", raw
    assert b"data_base64" in call("GET", "/v1/runs/{id}/events", 200, {"id": raw["id"]})
    call("POST", "/v1/runs", 200, json={"language": "python", "code": "import time; time.sleep(5)", "limits": {"timeout_s": 1}},
         query={"wait": "true"})
    # through the egress proxy to a host the policy does not list: a denied connection in result.network.egress
    fetch = ("import urllib.request\ntry:\n    urllib.request.urlopen('http://not-listed.example/', timeout=10)\n"
             "except Exception as e:\n    print(e)\n")
    if doc["network_modes"]["packages"]["level"] != "not-enforced":   # (gVisor here keeps every run offline)
        net = call("POST", "/v1/runs", 200, json={"language": "python", "code": fetch, "network": "packages"},
                   query={"wait": "true"})
        assert [e["decision"] for e in net["result"]["network"]["egress"]] == ["denied"], net["result"]["network"]
    call("POST", "/v1/runs", 200, json={"language": "node", "code": "console.log(1)"}, query={"wait": "true"})
    call("POST", "/v1/runs", 400, json={"language": "cobol", "code": "x"})
    call("POST", "/v1/runs", 404, json={"language": "python", "code": "x", "artifacts": ["art_nope"]})
    slow = call("POST", "/v1/runs", 201, json={"language": "bash", "code": "sleep 30"})
    call("POST", "/v1/runs/{id}/cancel", 400, {"id": slow["id"]}, json={"reason": "x"})
    call("POST", "/v1/runs/{id}/cancel", 202, {"id": slow["id"]})
    call("POST", "/v1/runs/{id}/cancel", 409, {"id": rid})
    call("POST", "/v1/runs/{id}/cancel", 404, {"id": "run_nope"})
    service.wait_state(slow["id"], {"canceled"})
    call("GET", "/v1/runs", 200, query={"limit": "10"})
    call("GET", "/v1/runs", 400, query={"limit": "0"})
    call("GET", "/v1/runs/{id}", 200, {"id": rid})
    call("GET", "/v1/runs/{id}", 200, {"id": slow["id"]})
    call("GET", "/v1/runs/{id}", 404, {"id": "run_nope"})
    ev = call("GET", "/v1/runs/{id}/events", 200, {"id": rid})
    assert b"event: result" in ev
    call("GET", "/v1/runs/{id}/events", 404, {"id": "run_nope"})
    call("GET", "/v1/runs/{id}/trace", 200, {"id": rid})
    call("GET", "/v1/runs/{id}/trace", 200, {"id": slow["id"]})
    call("GET", "/v1/runs/{id}/trace", 404, {"id": "run_nope"})
    call("GET", "/v1/runs/{id}/inputs/{which}", 410, {"id": rid, "which": "stdin"})
    call("GET", "/v1/runs/{id}/inputs/{which}", 404, {"id": "run_nope", "which": "stdin"})
    # --- artifacts
    arts = call("GET", "/v1/threads/{thread_id}/artifacts", 200, {"thread_id": "oa"}, query={"all": "true"})
    art = arts["artifacts"][0]["id"]
    call("GET", "/v1/threads/{thread_id}/artifacts", 400, {"thread_id": "oa"}, query={"nope": "1"})
    # a thread's packages (issue 38): none here, the empty shape
    call("GET", "/v1/threads/{thread_id}/packages", 200, {"thread_id": "oa"})
    call("GET", "/v1/threads/{thread_id}/packages", 400, {"thread_id": "oa"}, query={"nope": "1"})
    call("GET", "/v1/artifacts/{id}", 200, {"id": art})
    call("GET", "/v1/artifacts/{id}", 404, {"id": "art_nope"})
    assert call("GET", "/v1/artifacts/{id}/content", 200, {"id": art}) == b"a"
    call("GET", "/v1/artifacts/{id}/content", 404, {"id": "art_nope"})
    # --- usage, audit
    call("GET", "/v1/usage", 200)
    call("GET", "/v1/usage", 400, query={"from": "yesterday"})
    call("GET", "/v1/audit", 200, query={"limit": "5"})
    call("GET", "/v1/audit", 400, query={"limit": "x"})
    call("GET", "/v1/audit/checkpoint", 200)
    # --- piston
    key = service.key
    nokey("GET", "/piston/{key}/api/v2/runtimes", 200, {"key": key}, key=None)
    nokey("GET", "/piston/{key}/api/v2/runtimes", 401, {"key": "al_wrongwrongwrong"}, key=None)
    out = nokey("POST", "/piston/{key}/api/v2/execute", 200, {"key": key}, key=None,
                json={"language": "python", "version": "*", "files": [{"content": "print(6*7)"}]})
    assert out["run"]["stdout"] == "42\n", out
    nokey("POST", "/piston/{key}/api/v2/execute", 400, {"key": key}, key=None, json={"language": "python"})
    nokey("GET", "/piston/{key}/api/v2/packages", 200, {"key": key}, key=None)
    # --- MCP
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    acc = {"Accept": "application/json, text/event-stream"}
    status, hdrs, doc = service.request("POST", "/mcp", json=init, headers=acc)
    contract.check("POST", "/mcp", status, hdrs, doc)
    sess = {**acc, "Mcp-Session-Id": hdrs["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    call("POST", "/mcp", 202, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sess)
    tools = call("POST", "/mcp", 200, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=sess)
    assert {t["name"] for t in tools["result"]["tools"]} >= {"code_execution"}, tools
    call("POST", "/mcp", 200, json={"jsonrpc": "2.0", "id": 3, "method": "no/such"}, headers=sess)
    call("GET", "/mcp", 405, headers=sess)
    # a tools/call's stream, left after its first event and resumed
    first = first_event_id(service, json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "code_execution", "arguments": {"language": "python", "code": "import time; print('early', flush=True); time.sleep(3); print('late')"}}}),
        sess)
    rest = call("GET", "/mcp", 200, headers={**sess, "Accept": "text/event-stream", "Last-Event-ID": first})
    assert b"late" in rest, rest
    call("GET", "/mcp", 410, headers={**sess, "Accept": "text/event-stream", "Last-Event-ID": first})
    call("POST", "/mcp", 400, json={"jsonrpc": "2.0", "id": 6, "method": "ping"}, headers=acc)
    call("DELETE", "/mcp", 204, headers=sess)
    call("DELETE", "/mcp", 404, headers=sess)
    call("POST", "/mcp", 404, json={"jsonrpc": "2.0", "id": 4, "method": "ping"}, headers=sess)
    nokey("POST", "/mcp", 401, json=init, headers=acc, key=None)
    # --- skills
    name = f"oa-hi-{time.monotonic_ns() % 10**9}"
    gz = {"Content-Type": "application/gzip"}
    call("GET", "/v1/skills", 200)
    up = call("POST", "/v1/skills", 201, body=bundle(name), headers=gz)
    call("POST", "/v1/skills", 200, body=bundle(name), headers=gz)
    call("POST", "/v1/skills", 400, body=b"not a tarball", headers=gz)
    call("GET", "/v1/skills/{name}", 200, {"name": name})
    call("GET", "/v1/skills/{name}", 404, {"name": "no-such-skill"})
    call("POST", "/v1/skills/{name}/run", 409, {"name": name}, json={"entrypoint": "hi", "args": {"who": "x"}})
    t = call("POST", "/v1/skills/{name}/test", 200, {"name": name}, json={"entrypoint": "hi", "args": {"who": "ann"}})
    assert t["result"]["stdout"] == "hi ann\n" and t["skill"]["mode"] == "test", t
    call("POST", "/v1/skills/{name}/test", 400, {"name": name}, json={"entrypoint": "hi", "args": {"whom": 1}})
    call("POST", "/v1/skills/{name}/promote", 200, {"name": name}, json={"digest": up["digest"]})
    r = call("POST", "/v1/skills/{name}/run", 200, {"name": name}, json={"entrypoint": "hi", "args": {"who": "bo"}},
             query={"wait": "true"})
    assert r["skill"]["mode"] == "run", r
    call("POST", "/v1/skills", 201, body=bundle(name, "2.0.0"), headers=gz)
    call("DELETE", "/v1/skills/{name}/versions/{version}", 200, {"name": name, "version": "2.0.0"})
    call("DELETE", "/v1/skills/{name}/versions/{version}", 404, {"name": name, "version": "9.9.9"})
    call("DELETE", "/v1/skills/{name}", 200, {"name": name})
    call("DELETE", "/v1/skills/{name}", 404, {"name": name})
    # --- governance: roles, approvals, a run's stored inputs
    gov = gov_tenant(service, "oa")
    _, approver = gov.person_in("approver")
    _, member = gov.person_in("member")
    admin, appr, mem = call.as_(gov.client), call.as_(approver), call.as_(member)
    mem("POST", "/v1/runs", 200, json={"language": "bash", "code": "echo d > /out/doc.txt", "thread_id": "g"},
        query={"wait": "true"})
    admin("PATCH", "/v1/settings", 200, json={"approval_policy": "always", "approval_ttl_s": 600})
    mem("PATCH", "/v1/settings", 403, json={"timeout_s": 20})
    mem("GET", "/v1/audit/checkpoint", 403)
    waiting = mem("POST", "/v1/runs", 201, json={"language": "python", "code": "import sys; print(sys.stdin.read())",
                                                 "stdin": "hello", "thread_id": "g", "args": ["a1"], "files": [{"name": "f.txt", "content_base64": base64.b64encode(b"f").decode()}]})
    assert waiting["state"] == "pending_approval" and waiting["approval"]["hash"], waiting
    ins = waiting["approval"]["inputs"]
    assert [d["path"] for d in ins["documents"]] == ["doc.txt"] and ins["args"] == ["a1"] and ins["stdin"]["size"] == 5, ins
    wid = waiting["id"]
    assert mem("GET", "/v1/runs/{id}/inputs/{which}", 200, {"id": wid, "which": "stdin"}) == b"hello"
    mem("GET", "/v1/runs/{id}/inputs/{which}", 200, {"id": wid, "which": "0"})
    mem("GET", "/v1/runs/{id}/inputs/{which}", 404, {"id": wid, "which": "7"})
    mem("GET", "/v1/runs", 200)
    mem("GET", "/v1/runs/{id}/trace", 200, {"id": wid})
    mem("POST", "/v1/runs/{id}/approve", 403, {"id": wid}, json={})
    appr("POST", "/v1/runs/{id}/approve", 409, {"id": wid}, json={"hash": "0" * 64})
    appr("POST", "/v1/runs/{id}/approve", 400, {"id": wid}, json={"why": "x"})
    ok = appr("POST", "/v1/runs/{id}/approve", 200, {"id": wid}, json={"hash": waiting["approval"]["hash"], "reason": "fine"})
    assert ok["approval"]["decision"] == "approved", ok
    done = member.wait_state(wid, {"succeeded", "failed"})
    # its stream, approval event included, each event's data as x-events says
    ev = mem("GET", "/v1/runs/{id}/events", 200, {"id": wid})
    assert b"event: approval" in ev and b"event: result" in ev, ev
    contract.check("GET", "/v1/runs/{id}", 200, {"content-type": "application/json"}, done)
    other = mem("POST", "/v1/runs", 201, json={"language": "bash", "code": "echo no"})
    denied = appr("POST", "/v1/runs/{id}/deny", 200, {"id": other["id"]}, json={"reason": "no"})
    assert denied["state"] == "denied", denied
    appr("POST", "/v1/runs/{id}/deny", 409, {"id": other["id"]}, json={})
    appr("POST", "/v1/runs/{id}/deny", 404, {"id": "run_nope"}, json={})
    mem("GET", "/v1/runs", 200, query={"state": "denied"})
    # --- the console's sign-in (a login link for the bootstrap admin) and keys
    link = service.admin("login-link", "--person", gov.person).strip()
    nokey("POST", "/v1/session", 401, key=None, json={"token": "ll_nope"})
    nokey("POST", "/v1/session", 400, key=None, json={"token": 1})
    status, hdrs, ses = service.request("POST", "/v1/session", key=None, json={"token": link.split("#token=", 1)[1]})
    assert status == 201, (status, ses)
    contract.check("POST", "/v1/session", status, hdrs, ses)
    call("GET", "/v1/session", 200)
    cookie = {"Cookie": hdrs["set-cookie"].split(";", 1)[0]}
    nokey("GET", "/v1/session", 200, key=None, headers=cookie)
    nokey("DELETE", "/v1/session", 403, key=None, headers=cookie)
    call("DELETE", "/v1/session", 400)
    nokey("DELETE", "/v1/session", 204, key=None, headers={**cookie, "X-CSRF-Token": ses["csrf_token"]})
    nokey("GET", "/v1/session", 401, key=None, headers=cookie)
    made = mem("POST", "/v1/keys", 201, json={"name": "oa-agent"})
    mem("POST", "/v1/keys", 400, json={"name": ""})
    mem("GET", "/v1/keys", 200)
    admin("GET", "/v1/keys", 200)
    appr("DELETE", "/v1/keys/{id}", 404, {"id": made["key"]["id"]})
    mem("DELETE", "/v1/keys/{id}", 200, {"id": made["key"]["id"]})
    # --- what the console reads (issue 36)
    console_reads(call, contract, service)
    folder_reads(call, service)
    # --- the operations with no reply seen are none
    unseen = {k for k in OPS if not any((m, p) == k for m, p, _ in contract.seen)}
    assert not unseen, f"operations never exercised: {sorted(unseen)}"
    # each one answered with success at least once
    ok_seen = {(m, p) for m, p, s in contract.seen if s < 300}
    assert set(OPS) - ok_seen == set(), f"never answered with success: {sorted(set(OPS) - ok_seen)}"


# ------------------------------------------------------------ routes, probed

ROUTER_404 = ("no such path", "no such route", "Piston's API here is")


def test_the_server_serves_each_documented_method_and_no_other(service):
    """Every path of the spec with every method: a documented one reaches
    its handler (whatever it then says of the resource), any other is 405
    (or the router's own 404): a method the server serves and the spec does
    not name fails here."""
    fill = {"id": "run_0000000000000000000x", "thread_id": "t0", "which": "stdin", "name": "no-such-skill",
            "version": "1.0.0", "key": service.key}
    for path, ops in SPEC["paths"].items():
        url = path
        for k, v in fill.items():
            url = url.replace("{" + k + "}", v)
        if path == "/v1/events":   # a stream that never ends: a parameter it refuses (400) shows it routed
            url += "?probe=1"
        for m in METHODS:
            # (a GET of /mcp without Last-Event-ID is 405 by design: no stream of its own)
            h = {"Content-Type": "application/json", **({"Last-Event-ID": "1-1"} if path == "/mcp" else {})}
            status, _, doc = service.request(m.upper(), url, body=b"{}" if m in ("post", "put", "patch") else None,
                                             headers=h, timeout=30)
            msg = doc.get("error", {}).get("message", "") if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else ""
            routed = status != 405 and not (status == 404 and msg.startswith(ROUTER_404))
            assert routed == (m in ops), (f"{m.upper()} {path}: {'served' if routed else 'not served'} ({status} {doc!r:.300}) "
                                          f"but {'documented' if m in ops else 'not documented'}")


def test_a_field_added_or_dropped_fails_the_contract(service, contract):
    """The check itself: the same reply with a field more, or one fewer, in
    the run, its result or the settings is refused."""
    run = service.run("print(1)")
    contract.validate({"$ref": "#/components/schemas/Run"}, run, "a run")
    settings = service.ok("GET", "/v1/settings")
    contract.validate({"$ref": "#/components/schemas/Settings"}, settings, "the settings")
    bad = [dict(run, surprise=1), {k: v for k, v in run.items() if k != "previews"},
           dict(run, result=dict(run["result"], surprise=1)),
           dict(run, result={k: v for k, v in run["result"].items() if k != "exit_code"}),
           dict(run, result=dict(run["result"], exit_code="0")),
           dict(run, result=dict(run["result"], box=dict(run["result"]["box"], cgroup="/sys/fs/cgroup/x")))]
    for doc in bad:
        with pytest.raises(AssertionError, match="does not match"):
            contract.validate({"$ref": "#/components/schemas/Run"}, doc, "a changed run")
    with pytest.raises(AssertionError, match="does not match"):
        contract.validate({"$ref": "#/components/schemas/Settings"}, dict(settings, surprise=1), "changed settings")


def test_an_expired_run_answers_as_documented(services, contract):
    """Past its workspace's run_retention_s a run's GET, events and trace
    answer 410 with its summary (Error.run, expired_at), as documented."""
    svc = services.start("sweep", {"max_concurrent": 4, "run_sweep_s": 1})
    call = Caller(contract, svc)
    call("PATCH", "/v1/settings", 200, json={"run_retention_s": 1})
    run = call("POST", "/v1/runs", 200, json={"language": "python", "code": "print('gone')"}, query={"wait": "true"})
    deadline = time.monotonic() + 30
    while svc.request("GET", f"/v1/runs/{run['id']}")[0] != 410:
        assert time.monotonic() < deadline, "the run never expired"
        time.sleep(0.3)
    doc = call("GET", "/v1/runs/{id}", 410, {"id": run["id"]})
    assert doc["error"]["code"] == "expired" and doc["run"]["expired_at"], doc
    call("GET", "/v1/runs/{id}/events", 410, {"id": run["id"]})
    call("GET", "/v1/runs/{id}/trace", 410, {"id": run["id"]})
    call("GET", "/v1/runs", 200)
