"""MCP (issue 7): POST /mcp of a real `airlock serve`, driven by the official
TypeScript SDK (tests/e2e/*.test.mjs: Streamable HTTP, stdio through
`airlock mcp`, approvals) and, below, over raw HTTP for what a well-behaved
client never sends: malformed messages, wrong keys, stale sessions, another
tenant's artifacts, and both protocol versions."""
import http.client
import json
import os
import threading
import time

import pytest

from conftest import ROOT
from node_util import node_test, npm_ci
from test_image_default import CACHE, default_image  # noqa: F401
from service_util import (Service, audit_events, gov_tenant, put_settings, service, service_binary, set_price,  # noqa: F401
                          walk_json)

LATEST, PREVIOUS = "2025-11-25", "2025-06-18"
BOTH = "application/json, text/event-stream"


# ------------------------------------------------------------ raw client


class Mcp:
    """A minimal Streamable HTTP client: one POST per message."""

    def __init__(self, svc, key=None, version=LATEST, initialize=True):
        self.svc, self.key = svc, key or svc.key
        self.session, self.version, self.next_id = None, None, 1
        if initialize:
            status, hdrs, doc = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                           "params": {"protocolVersion": version, "capabilities": {},
                                                      "clientInfo": {"name": "pytest", "version": "1"}}},
                                          session=False)
            assert status == 200, (status, doc)
            self.session = hdrs.get("mcp-session-id")
            assert self.session, f"initialize gave no Mcp-Session-Id: {hdrs}"
            self.version = doc["result"]["protocolVersion"]
            self.init = doc["result"]
            assert self.notify("notifications/initialized")[0] == 202

    def post(self, msg=None, raw=None, session=True, accept=BOTH, headers=None, key=None, method="POST", timeout=120):
        """(status, lowercase headers, JSON document | [SSE messages] | bytes)."""
        h = {"Content-Type": "application/json", "Accept": accept}
        k = self.key if key is None else key
        if k:
            h["Authorization"] = f"Bearer {k}"
        if session and self.session:
            h["Mcp-Session-Id"] = self.session
        if session and self.version:
            h["MCP-Protocol-Version"] = self.version
        h.update(headers or {})
        h = {a: b for a, b in h.items() if b is not None}
        body = raw if raw is not None else (json.dumps(msg).encode() if msg is not None else None)
        conn = http.client.HTTPConnection(self.svc.host, self.svc.port, timeout=timeout)
        try:
            conn.request(method, "/mcp", body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {a.lower(): b for a, b in resp.getheaders()}
        finally:
            conn.close()
        ctype = hdrs.get("content-type", "")
        if ctype.startswith("text/event-stream"):
            msgs = []
            for block in data.decode().split("\n\n"):
                lines = [ln[5:].lstrip() for ln in block.split("\n") if ln.startswith("data:")]
                if "".join(lines):  # an event with an empty data line only primes a resumption
                    msgs.append(json.loads("\n".join(lines)))
            return resp.status, hdrs, msgs
        if "json" in ctype and data:
            return resp.status, hdrs, json.loads(data)
        return resp.status, hdrs, data

    def request(self, method, params=None, **kw):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            msg["params"] = params
        return self.post(msg, **kw)

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        return self.post(msg)

    def call(self, name, arguments, accept="application/json", **kw):
        """tools/call answered as one JSON document; returns the CallToolResult."""
        status, _, doc = self.request("tools/call", {"name": name, "arguments": arguments}, accept=accept, **kw)
        assert status == 200 and "result" in doc, (status, doc)
        return doc["result"]


def text_of(result):
    return "\n".join(c["text"] for c in result["content"] if c["type"] == "text")


# ------------------------------------------------------------ the SDK


@pytest.fixture(scope="module")
def approval_tenant(service):
    t = gov_tenant(service, "mcpappr")
    put_settings(t.client, approval_policy="always")
    _, member = t.person_in("member")
    _, approver = t.person_in("approver")
    return t, member, approver


def sdk_env(service, **extra):
    return {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key,
            "AIRLOCK_SERVER_BIN": str(service_binary().parent / "airlock-server"), **extra}


def test_sdk_streamable_http(service):
    npm_ci()
    node_test("mcp_http.test.mjs", sdk_env(service), expect=14)


def test_sdk_stdio_through_airlock_mcp(service):
    npm_ci()
    node_test("mcp_stdio.test.mjs", sdk_env(service), expect=12)


def test_sdk_approval_wait(service, approval_tenant):
    npm_ci()
    _, member, approver = approval_tenant
    node_test("mcp_approval.test.mjs", sdk_env(service, AIRLOCK_MEMBER_KEY=member.key, AIRLOCK_APPROVER_KEY=approver.key),
              expect=4)


# ------------------------------------------------------------ the protocol


@pytest.mark.parametrize("asked, answered", [(LATEST, LATEST), (PREVIOUS, PREVIOUS), ("2024-11-05", LATEST),
                                             ("2099-01-01", LATEST)])
def test_version_negotiation(service, asked, answered):
    m = Mcp(service, version=asked)
    assert m.version == answered
    assert m.init["serverInfo"]["name"] == "airlock"
    assert "tools" in m.init["capabilities"]
    # the negotiated version in the header is accepted on later requests
    status, _, doc = m.request("tools/list")
    assert status == 200 and {t["name"] for t in doc["result"]["tools"]} >= {"code_execution", "read_artifact"}


def test_unsupported_version_header_is_400(service):
    m = Mcp(service)
    status, _, doc = m.request("ping", headers={"MCP-Protocol-Version": "2024-11-05"})
    assert status == 400 and doc["error"]["code"] == -32000, doc
    assert m.request("ping")[0] == 200


def test_malformed_json_is_a_parse_error(service):
    m = Mcp(service)
    status, _, doc = m.post(raw=b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert status == 400
    assert doc["jsonrpc"] == "2.0" and doc["id"] is None and doc["error"]["code"] == -32700, doc


@pytest.mark.parametrize("msg, code", [
    ([{"jsonrpc": "2.0", "id": 1, "method": "ping"}], -32600),        # batches left MCP in 2025-06-18
    ([], -32600),
    ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
    ({"id": 1, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}, -32600),
    ({"jsonrpc": "2.0", "id": 1, "method": 7}, -32600),
    ("just a string", -32600),
])
def test_invalid_requests(service, msg, code):
    m = Mcp(service)
    status, _, doc = m.post(msg)
    assert status == 400 and doc["error"]["code"] == code, (status, doc)


def test_params_must_be_an_object(service):
    m = Mcp(service)
    status, _, doc = m.post({"jsonrpc": "2.0", "id": "a", "method": "tools/list", "params": [1]})
    assert status == 200 and doc["id"] == "a" and doc["error"]["code"] == -32602, doc


def test_unknown_method(service):
    m = Mcp(service)
    status, _, doc = m.post({"jsonrpc": "2.0", "id": "x-1", "method": "resources/subscribe", "params": {}})
    assert status == 200 and doc["id"] == "x-1" and doc["error"]["code"] == -32601, doc
    assert "resources/subscribe" in doc["error"]["message"]


def test_notifications_and_responses_are_accepted(service):
    m = Mcp(service)
    assert m.notify("notifications/cancelled", {"requestId": 99, "reason": "x"})[0] == 202
    status, _, body = m.post({"jsonrpc": "2.0", "id": 5, "result": {}})
    assert status == 202 and body == b""


def test_wrong_or_missing_key_is_401(service):
    m = Mcp(service, initialize=False)
    msg = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
           "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}
    for key in ("al_wrong", ""):
        status, hdrs, doc = m.post(msg, key=key)
        assert status == 401, (status, doc)
        assert hdrs.get("www-authenticate", "").startswith("Bearer"), hdrs
        assert doc["error"]["code"] == "unauthorized"


def test_sessions(service):
    m = Mcp(service)
    # no session, an unknown one, and another person's
    assert m.request("ping", session=False)[0] == 400
    assert m.request("ping", headers={"Mcp-Session-Id": "0" * 32})[0] == 404
    other = service.new_tenant(f"mcpsess{time.monotonic_ns() % 10**9}")
    status, _, doc = m.request("ping", key=other.key)
    assert status == 404 and doc["error"]["code"] == -32001, doc
    # no server-initiated stream (a GET only resumes one, with Last-Event-ID)
    status, hdrs, _ = m.post(method="GET", accept="text/event-stream")
    assert status == 405 and "POST" in hdrs.get("allow", "")
    # DELETE ends it
    assert m.request("ping")[0] == 200
    assert m.post(method="DELETE")[0] == 204
    assert m.request("ping")[0] == 404
    assert m.post(method="DELETE")[0] == 404


def test_a_person_with_many_sessions_pushes_out_only_their_own(service):
    other = Mcp(service, key=service.new_tenant(f"mcpmany{time.monotonic_ns() % 10**9}").key)
    mine = [Mcp(service)]
    time.sleep(0.01)
    mine += [Mcp(service) for _ in range(64)]
    assert mine[0].request("ping")[0] == 404          # the oldest of 65 is gone
    assert all(m.request("ping")[0] == 200 for m in mine[1:])
    assert other.request("ping")[0] == 200


def test_foreign_origin_is_refused(service):
    m = Mcp(service)
    assert m.request("ping", headers={"Origin": "http://evil.example"})[0] == 403
    assert m.request("ping", headers={"Origin": f"http://127.0.0.1:{service.port}"})[0] == 200


def test_too_large_is_413(service):
    m = Mcp(service)
    big = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "code_execution", "arguments": {"language": "python", "code": "#" * (9 << 20)}}}
    assert m.post(big)[0] == 413


def test_unknown_tool_is_a_protocol_error(service):
    m = Mcp(service)
    status, _, doc = m.request("tools/call", {"name": "rm_rf", "arguments": {}})
    assert status == 200 and doc["error"]["code"] == -32602 and "rm_rf" in doc["error"]["message"], doc
    status, _, doc = m.request("tools/call", {"arguments": {}})
    assert doc["error"]["code"] == -32602


@pytest.mark.parametrize("args, words", [
    ({"language": "python"}, "code"),
    ({"language": "cobol", "code": "x"}, "language"),
    ({"language": "python", "code": "print(1)", "bogus": 1}, "bogus"),
    ({"language": "python", "code": "print(1)", "thread": "../x"}, "thread"),
    ({"language": "python", "code": "print(1)", "files": [{"name": "a/b", "content": "x"}]}, "name"),
    ({"language": "python", "code": "print(1)", "network": "warp-drive"}, "network"),
    ({"language": "python", "code": "print(1)", "timeout_s": 100000}, "timeout_s"),
])
def test_bad_arguments_are_tool_errors(service, args, words):
    r = Mcp(service).call("code_execution", args)
    assert r["isError"] is True and words in text_of(r), r


def test_json_answer_or_event_stream(service):
    m = Mcp(service)
    args = {"name": "code_execution", "arguments": {"language": "bash", "code": "echo out; echo err >&2"},
            "_meta": {"progressToken": "tok-1"}}
    status, hdrs, doc = m.request("tools/call", args, accept="application/json")
    assert status == 200 and hdrs["content-type"] == "application/json"
    assert doc["result"]["isError"] is False and "out" in text_of(doc["result"])
    status, hdrs, msgs = m.request("tools/call", args)
    assert status == 200 and hdrs["content-type"] == "text/event-stream", hdrs
    *notes, last = msgs
    assert last["id"] == m.next_id and last["result"]["isError"] is False, last
    logs = [n["params"] for n in notes if n["method"] == "notifications/message"]
    assert {"logger": "stdout", "level": "info", "data": "out\n"} in logs, logs
    assert {"logger": "stderr", "level": "warning", "data": "err\n"} in logs, logs
    progress = [n["params"] for n in notes if n["method"] == "notifications/progress"]
    assert progress and all(p["progressToken"] == "tok-1" for p in progress)
    assert [p["progress"] for p in progress] == sorted({p["progress"] for p in progress})
    # logging/setLevel above info: no live output, the result still has it
    assert m.request("logging/setLevel", {"level": "error"})[0] == 200
    status, _, msgs = m.request("tools/call", args)
    assert not [n for n in msgs[:-1] if n.get("method") == "notifications/message"], msgs
    assert "out" in text_of(msgs[-1]["result"])


def test_tenant_isolation_of_artifacts(service):
    a = Mcp(service)
    thread = f"shared-name-{time.monotonic_ns() % 10**9}"
    r = a.call("code_execution", {"language": "bash", "code": "echo secret-of-a > /out/a.txt", "thread": thread})
    assert r["isError"] is False, r
    uri = r["structuredContent"]["artifacts"][0]["uri"]
    art_id = uri.rsplit("/", 1)[1]
    got = a.call("read_artifact", {"uri": uri})
    assert got["isError"] is False and got["content"][1]["resource"]["text"] == "secret-of-a\n"
    # another organisation: by URI, by bare id, by the same thread name
    b = Mcp(service, key=service.new_tenant(f"mcpiso{time.monotonic_ns() % 10**9}").key)
    for ref in (uri, art_id):
        r = b.call("read_artifact", {"uri": ref})
        assert r["isError"] is True and "No artifact" in text_of(r), r
        assert "secret-of-a" not in json.dumps(r)
    r = b.call("list_artifacts", {"thread": thread})
    assert r["isError"] is False and r["structuredContent"]["artifacts"] == [], r
    # and as resources
    status, _, doc = b.request("resources/read", {"uri": uri})
    assert status == 200 and doc["error"]["code"] == -32002 and "secret-of-a" not in json.dumps(doc), doc
    assert uri not in json.dumps(b.request("resources/list")[2])
    status, _, doc = a.request("resources/read", {"uri": uri})
    assert doc["result"]["contents"] == [{"uri": uri, "mimeType": "text/plain; charset=utf-8", "text": "secret-of-a\n"}], doc
    assert uri in json.dumps(a.request("resources/list")[2])
    r = b.call("code_execution", {"language": "bash", "code": "ls -R /work/documents 2>&1; true", "thread": thread})
    assert "a.txt" not in text_of(r), r


def test_allow_list_and_audit(service):
    t = gov_tenant(service, "mcpallow")
    m = Mcp(service, key=t.key)
    r = m.call("code_execution", {"language": "python", "code": "print(2)"})
    assert r["isError"] is False
    run_id = r["structuredContent"]["run_id"]
    allowed = [e for e in audit_events(t.client, kind="capability.invoke_allowed") if e["run_id"] == run_id]
    assert allowed and allowed[0]["data"]["tool"] == "code_execution", allowed
    # the audit says which interface each call came through
    assert allowed[0]["data"]["via"] == "mcp", allowed
    rest = t.client.run("print(3)")
    status, _, _ = t.client.request("POST", f"/piston/{t.key}/api/v2/execute",
                                    json={"language": "python", "version": "*", "files": [{"content": "print(4)"}]})
    assert status == 200
    calls = {e["run_id"]: e["data"]["via"] for e in audit_events(t.client, kind="tool.call")}
    assert calls[run_id] == "mcp" and calls[rest["id"]] == "rest", calls
    assert sorted(calls.values()) == ["mcp", "piston", "rest"], calls
    put_settings(t.client, tools=["run_skill_script"])
    names = {x["name"] for x in m.request("tools/list")[2]["result"]["tools"]}
    assert names == {"run_skill_script", "list_artifacts", "read_artifact"}, names
    r = m.call("code_execution", {"language": "python", "code": "print(2)"})
    assert r["isError"] is True and "allow-list" in text_of(r), r
    denied = audit_events(t.client, kind="capability.invoke_denied")
    assert any(e["data"].get("tool") == "code_execution" for e in denied), denied


def test_credits_are_charged_and_enforced(service):
    t = gov_tenant(service, "mcpcred")
    m = Mcp(service, key=t.key)
    before = t.client.ok("GET", "/v1/usage")["balance"]
    r = m.call("code_execution", {"language": "python", "code": "print(3)"})
    assert r["isError"] is False
    price = t.client.ok("GET", "/v1/settings")["price_per_run"]
    assert t.client.ok("GET", "/v1/usage")["balance"] == before - price
    set_price(service, t.workspace, before + 1)
    r = m.call("code_execution", {"language": "python", "code": "print(3)"})
    assert r["isError"] is True and "payment_required" in text_of(r), r


def test_output_is_dlp_redacted(service):
    t = gov_tenant(service, "mcpdlp")
    put_settings(t.client, dlp_patterns=[{"name": "token", "pattern": "TOK[0-9]{6}"}])
    m = Mcp(service, key=t.key)
    status, _, msgs = m.request("tools/call", {"name": "code_execution", "arguments": {
        "language": "python", "code": "print('the key is TOK123456')"}})
    assert status == 200
    everything = json.dumps(msgs)
    assert "TOK123456" not in everything, everything
    assert "[REDACTED:token]" in text_of(msgs[-1]["result"])


def test_approval_expiry_is_a_clear_error(service):
    t = gov_tenant(service, "mcpexp")
    put_settings(t.client, approval_policy="always", approval_ttl_s=1)
    m = Mcp(service, key=t.key)
    t0 = time.monotonic()
    r = m.call("code_execution", {"language": "python", "code": "print('never')"})
    assert time.monotonic() - t0 < 30
    assert r["isError"] is True, r
    assert "no one approved it before its approval expired" in text_of(r), r
    assert r["structuredContent"]["state"] == "denied"


def test_approval_wait_over_raw_sse(service, approval_tenant):
    """The waiting notice comes before the decision; a denial ends the call."""
    t, member, approver = approval_tenant
    m = Mcp(service, key=member.key)
    out = {}

    def call():
        out["answer"] = m.request("tools/call", {"name": "code_execution", "_meta": {"progressToken": 1},
                                                 "arguments": {"language": "bash", "code": "echo nope"}})
    th = threading.Thread(target=call)
    th.start()
    deadline = time.monotonic() + 30
    pending = []
    while not pending and time.monotonic() < deadline:
        pending = approver.ok("GET", "/v1/runs", query={"state": "pending_approval"})["runs"]
        time.sleep(0.1)
    assert pending, "no run waits for approval"
    time.sleep(0.5)
    approver.ok("POST", f"/v1/runs/{pending[0]['id']}/deny", json={"reason": "not today"})
    th.join(60)
    status, hdrs, msgs = out["answer"]
    assert status == 200 and hdrs["content-type"] == "text/event-stream"
    waits = [n for n in msgs if n.get("method") == "notifications/message" and n["params"]["data"].get("state") == "pending_approval"]
    assert waits and msgs.index(waits[0]) < len(msgs) - 1
    last = msgs[-1]["result"]
    assert last["isError"] is True and "denied" in text_of(last) and "not today" in text_of(last), last
    assert "nope" not in text_of(last)


PNG_PY = r"""
import struct, zlib, os
def chunk(t, d):
    return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
def png(w, h):
    raw = b''.join(b'\x00' + bytes([0, 128, 255] * w) for _ in range(h))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 8, 2, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))
os.makedirs('/out/preview')
open('/out/preview/look.png', 'wb').write(png(4, 5))
open('/out/real.png', 'wb').write(png(6, 7))
open('/out/fake.png', 'w').write('not an image at all')
open('/out/huge.png', 'wb').write(png(1, 1) + os.urandom(600 << 10))
"""


def test_images_inline_only_when_small_and_really_images(service):
    import base64
    import struct
    r = Mcp(service).call("code_execution", {"language": "python", "code": PNG_PY})
    assert r["isError"] is False, r
    links = sorted(c["name"] for c in r["content"] if c["type"] == "resource_link")
    assert links == ["fake.png", "huge.png", "real.png"], links      # previews are not published
    sizes = sorted(struct.unpack(">II", base64.b64decode(c["data"])[16:24])
                   for c in r["content"] if c["type"] == "image")
    assert sizes == [(4, 5), (6, 7)], sizes                           # real.png and the preview only


@pytest.mark.parametrize("accept", [BOTH, "application/json"])
def test_cancelled_notification_cancels_the_run(service, accept):
    m = Mcp(service)
    out = {}
    rid = f"slow-{accept[:4]}"

    def call():
        t = time.monotonic()
        out["answer"] = m.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {
            "name": "code_execution", "arguments": {"language": "bash", "code": "echo started; sleep 60"}}}, accept=accept)
        out["secs"] = time.monotonic() - t
    th = threading.Thread(target=call)
    th.start()
    deadline = time.monotonic() + 30
    running = []
    while not running and time.monotonic() < deadline:
        running = service.ok("GET", "/v1/runs", query={"state": "running"})["runs"]
        time.sleep(0.05)
    assert running, "the run never started"
    # another request id of the session, and another session: nothing happens
    assert m.notify("notifications/cancelled", {"requestId": "not-this-one"})[0] == 202
    assert Mcp(service).notify("notifications/cancelled", {"requestId": rid})[0] == 202
    time.sleep(0.5)
    assert service.get_run(running[0]["id"])["state"] == "running"
    assert m.notify("notifications/cancelled", {"requestId": rid, "reason": "user stopped it"})[0] == 202
    th.join(30)
    assert not th.is_alive() and out["secs"] < 30, out
    assert service.get_run(running[0]["id"])["state"] == "canceled"


def test_cancelled_notification_withdraws_an_approval_wait(service, approval_tenant):
    t, member, approver = approval_tenant
    m = Mcp(service, key=member.key)
    out = {}
    th = threading.Thread(target=lambda: out.update(a=m.post({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {
        "name": "code_execution", "arguments": {"language": "bash", "code": "echo x"}}}, accept="application/json")))
    th.start()
    deadline = time.monotonic() + 30
    pending = []
    while not pending and time.monotonic() < deadline:
        pending = approver.ok("GET", "/v1/runs", query={"state": "pending_approval"})["runs"]
        time.sleep(0.05)
    assert pending
    assert m.notify("notifications/cancelled", {"requestId": 77})[0] == 202
    th.join(30)
    assert not th.is_alive()
    run = approver.get_run(pending[0]["id"])
    assert run["state"] == "canceled" and run["approval"]["decision"] == "canceled", run


def test_network_policy_is_passed_through(service):
    """As POST /v1/runs' network field: the workspace's network_allowed (and
    network_hosts, the only hosts a run may name) decide."""
    put_settings(service, network_hosts=["example.com"])
    m = Mcp(service)
    for net in ("packages", "hosts:example.com", "offline"):
        r = m.call("code_execution", {"language": "python", "code": "print(1)", "network": net})
        assert r["isError"] is False, r
        assert r["structuredContent"]["network"] == net
        assert service.get_run(r["structuredContent"]["run_id"])["network"] == net
    r = m.call("code_execution", {"language": "python", "code": "print(1)"})
    assert r["structuredContent"]["network"] == "offline"
    r = m.call("code_execution", {"language": "python", "code": "print(1)", "network": "internet"})
    assert r["isError"] is True and "network_allowed" in text_of(r), r


def stdio(service, lines, args=(), env=None, timeout=60):
    """`airlock mcp` with LINES on stdin; (exit status, [stdout messages], stderr)."""
    import subprocess
    full = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    full.update(env or {})
    p = subprocess.run([str(service_binary()), "mcp", *args], input="".join(json.dumps(x) + "\n" for x in lines).encode(),
                       capture_output=True, timeout=timeout, env=full)
    out = [json.loads(line) for line in p.stdout.decode().splitlines()]
    return p.returncode, out, p.stderr.decode()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": PREVIOUS, "capabilities": {}, "clientInfo": {"name": "cli", "version": "1"}}}


def test_airlock_mcp_from_the_environment(service):
    code, out, err = stdio(service, [INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                     {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                                         "name": "code_execution", "arguments": {"language": "bash", "code": "echo via-env"}}}],
                           env={"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key})
    assert code == 0, err
    by_id = {m.get("id"): m for m in out}
    assert by_id[1]["result"]["protocolVersion"] == PREVIOUS
    assert "via-env" in text_of(by_id[2]["result"]), out
    # every line on stdout is a JSON-RPC message: nothing else goes there
    assert all(m.get("jsonrpc") == "2.0" for m in out)


def test_airlock_mcp_failures_are_json_rpc_errors(service):
    code, out, err = stdio(service, [INIT], args=["--url", service.base_url, "--key", "al_wrong"])
    assert code == 0 and out[0]["id"] == 1 and out[0]["error"]["code"] == -32000, out
    assert "401" in out[0]["error"]["message"], out
    code, out, err = stdio(service, [INIT], args=["--url", "http://127.0.0.1:1", "--key", service.key])
    assert code == 0 and out[0]["id"] == 1 and "cannot reach" in out[0]["error"]["message"], out
    code, out, err = stdio(service, [INIT], args=["--url", service.base_url])
    assert code == 125 and out == [] and "API key" in err


MATPLOTLIB_PY = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(4, 3), dpi=50)
ax.bar(["a", "b", "c"], [3, 1, 2])
fig.savefig("/out/chart.png")
print("saved")
"""


def test_matplotlib_chart_on_the_default_image(default_image, tmp_path):
    """The default runtime image (built, or reused when cached, by
    test_image_default's fixture) has matplotlib: a real chart comes back as
    an image."""
    import base64
    import struct
    from service_util import Service
    state = tmp_path / "svc"
    state.mkdir()
    (state / "images").symlink_to(CACHE / "images")
    svc = Service(state).start()
    try:
        r = Mcp(svc).call("code_execution", {"language": "python", "code": MATPLOTLIB_PY, "image": "default",
                                             "timeout_s": 60})
        assert r["isError"] is False, r
        images = [c for c in r["content"] if c["type"] == "image"]
        assert len(images) == 1 and images[0]["mimeType"] == "image/png", r["content"]
        png = base64.b64decode(images[0]["data"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", png[16:24]) == (200, 150)      # 4x3 inches at 50 dpi
        r = Mcp(svc).call("code_execution", {"language": "python", "code": "print(1)", "image": "nosuch"})
        assert r["isError"] is True and "image" in text_of(r), r
    finally:
        svc.stop()


def test_airlock_mcp_stops_at_once_on_sigterm(service):
    """The SDK's stdio transport closes stdin and then sends SIGTERM: a call
    under way does not hold airlock mcp up."""
    import signal
    import subprocess
    p = subprocess.Popen([str(service_binary()), "mcp", "--url", service.base_url, "--key", service.key],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write((json.dumps(INIT) + "\n").encode())
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "code_execution", "arguments": {"language": "bash", "code": "sleep 30"}}}) + "\n").encode())
    p.stdin.flush()
    assert json.loads(p.stdout.readline())["id"] == 1
    time.sleep(1)
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    assert time.monotonic() - t < 5
    assert b"stopped by signal 15" in p.stderr.read()
    # the abandoned call's run goes on in the service; end it, so no box outlives the test
    for run in service.ok("GET", "/v1/runs", query={"state": "running"})["runs"]:
        service.cancel(run["id"])
        service.wait_state(run["id"], "canceled")


@pytest.fixture(scope="module")
def skills_service(default_image, request):
    """A service with the bundled skills and the default runtime image (the
    skills run on it), built or reused by test_image_default's fixture."""
    from service_util import ServiceSet
    ss = ServiceSet(request)
    svc = Service(ss.root / "skills", config={"skills_dir": str(ROOT / "skills")})
    (svc.state / "images").symlink_to(CACHE / "images")
    ss.services.append(svc.start())
    yield svc
    ss.close()


def test_sdk_skill(skills_service):
    npm_ci()
    node_test("mcp_skills.test.mjs", sdk_env(skills_service), expect=1)


def test_skill_refusals_and_allow_list(skills_service):
    t = gov_tenant(skills_service, "mcpskill")
    m = Mcp(skills_service, key=t.key)
    tools = {x["name"]: x for x in m.request("tools/list")[2]["result"]["tools"]}
    assert 'skill "csv-cleaner"' in tools["run_skill_script"]["description"]
    r = m.call("run_skill_script", {"skill": "Not A Name", "entrypoint": "x"})
    assert r["isError"] is True and "bad_request" in text_of(r), r
    r = m.call("run_skill_script", {"skill": "chart-builder"})
    assert r["isError"] is True and "entrypoint" in text_of(r), r
    r = m.call("run_skill_script", {"skill": "chart-builder", "entrypoint": "chart", "arguments": [1]})
    assert r["isError"] is True and "arguments must be an object" in text_of(r), r
    put_settings(t.client, tools=["code_execution"])
    assert "run_skill_script" not in {x["name"] for x in m.request("tools/list")[2]["result"]["tools"]}
    r = m.call("run_skill_script", {"skill": "chart-builder", "entrypoint": "chart",
                                    "arguments": {"input": "a.csv", "x": "a"}})
    assert r["isError"] is True and "allow-list" in text_of(r), r
    denied = audit_events(t.client, kind="capability.invoke_denied")
    assert any(e["data"].get("tool") == "run_skill_script" for e in denied), denied


def test_skill_run_waits_for_approval_like_code(skills_service):
    """A skill's run goes through the same approval as code: waiting, then denied."""
    t = gov_tenant(skills_service, "mcpskillappr")
    put_settings(t.client, approval_policy="always")
    _, approver = t.person_in("approver")
    m = Mcp(skills_service, key=t.key)
    out = {}
    th = threading.Thread(target=lambda: out.update(a=m.request("tools/call", {"name": "run_skill_script", "arguments": {
        "skill": "chart-builder", "entrypoint": "chart", "arguments": {"input": "x.csv", "x": "a"}}})))
    th.start()
    deadline = time.monotonic() + 30
    pending = []
    while not pending and time.monotonic() < deadline:
        pending = approver.ok("GET", "/v1/runs", query={"state": "pending_approval"})["runs"]
        time.sleep(0.05)
    assert pending
    approver.ok("POST", f"/v1/runs/{pending[0]['id']}/deny", json={"reason": "no charts today"})
    th.join(30)
    status, _, msgs = out["a"]
    assert any(n.get("method") == "notifications/message" and n["params"]["data"].get("state") == "pending_approval"
               for n in msgs[:-1]), msgs
    last = msgs[-1]["result"]
    assert last["isError"] is True and "no charts today" in text_of(last), last


def test_a_quiet_wait_sends_progress_every_15_s(service, approval_tenant):
    """What keeps a client whose timeout resets on progress waiting for a
    person: a progress notification at least every 15 s."""
    t, member, approver = approval_tenant
    m = Mcp(service, key=member.key)
    out = {}
    th = threading.Thread(target=lambda: out.update(a=m.request("tools/call", {
        "name": "code_execution", "_meta": {"progressToken": "slow"},
        "arguments": {"language": "bash", "code": "echo x"}})))
    th.start()
    deadline = time.monotonic() + 30
    pending = []
    while not pending and time.monotonic() < deadline:
        pending = approver.ok("GET", "/v1/runs", query={"state": "pending_approval"})["runs"]
        time.sleep(0.05)
    assert pending
    time.sleep(16.5)
    approver.ok("POST", f"/v1/runs/{pending[0]['id']}/deny", json={"reason": "took too long"})
    th.join(30)
    _, _, msgs = out["a"]
    progress = [n["params"]["message"] for n in msgs if n.get("method") == "notifications/progress"]
    assert any("Still waiting for approval" in p for p in progress), progress


def test_sdk_stdio_local(tmp_path):
    """airlock mcp --local: the SDK's stdio tests against a private service."""
    npm_ci()
    node_test("mcp_local.test.mjs", {"AIRLOCK_SERVER_BIN": str(service_binary().parent / "airlock-server"),
                                     "AIRLOCK_LOCAL_STATE": str(tmp_path / "local")}, expect=12)


def test_airlock_mcp_local_keeps_threads_and_is_one_at_a_time(tmp_path):
    import subprocess
    state = tmp_path / "local"
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "code_execution", "arguments": {
        "language": "bash", "code": "echo kept > /out/k.txt", "thread": "t"}}}
    code, out, err = stdio(None, [INIT, call], args=["--local", "--state", str(state)])
    assert code == 0 and out[-1]["result"]["isError"] is False, (out, err)
    key = (state / "mcp-local.key").read_text()
    assert oct((state / "mcp-local.key").stat().st_mode & 0o777) == "0o600"
    # a later session: same key, the thread's files still there
    lst = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_artifacts",
                                                                         "arguments": {"thread": "t"}}}
    code, out, err = stdio(None, [INIT, lst], args=["--local", "--state", str(state)])
    assert code == 0 and [a["path"] for a in out[-1]["result"]["structuredContent"]["artifacts"]] == ["k.txt"], out
    assert (state / "mcp-local.key").read_text() == key
    # one airlock mcp --local per state directory
    first = subprocess.Popen([str(service_binary()), "mcp", "--local", "--state", str(state)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first.stdin.write((json.dumps(INIT) + "\n").encode())
        first.stdin.flush()
        assert json.loads(first.stdout.readline())["id"] == 1
        code, out, err = stdio(None, [INIT], args=["--local", "--state", str(state)])
        assert code == 125 and out == [] and "in use" in err, err
    finally:
        first.stdin.close()
        assert first.wait(30) == 0
    # its private service ended with it
    left = [p for p in os.listdir("/proc") if p.isdigit() and str(state).encode() in _cmdline(p)]
    assert not left, left
    code, out, err = stdio(None, [INIT], args=["--local", "--url", "http://x"])
    assert code == 125 and "not both" in err


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# ------------------------------------------------------ resumable streams


class Sse:
    """One SSE response read event by event: [(id or None, message or None)]."""

    def __init__(self, svc, method, headers, body=None, timeout=120):
        self.conn = http.client.HTTPConnection(svc.host, svc.port, timeout=timeout)
        self.conn.request(method, "/mcp", body=body, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {a.lower(): b for a, b in self.resp.getheaders()}

    def events(self):
        eid, data = None, []
        while True:
            line = self.resp.readline()
            if not line:
                return
            line = line.decode().rstrip("\r\n")
            if line == "":
                if eid is not None or data:
                    yield eid, json.loads("\n".join(data)) if "".join(data) else None
                eid, data = None, []
            elif line.startswith("id:"):
                eid = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())

    def drop(self):
        """The network fails: the client's end goes away without a word."""
        import socket
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def mcp_headers(m, **extra):
    h = {"Content-Type": "application/json", "Accept": BOTH, "Authorization": f"Bearer {m.key}",
         "Mcp-Session-Id": m.session, "MCP-Protocol-Version": m.version}
    h.update(extra)
    return {a: b for a, b in h.items() if b is not None}


def start_call(m, code, language="python", token=None):
    m.next_id += 1
    params = {"name": "code_execution", "arguments": {"language": language, "code": code}}
    if token:
        params["_meta"] = {"progressToken": token}
    body = json.dumps({"jsonrpc": "2.0", "id": m.next_id, "method": "tools/call", "params": params})
    return m.next_id, Sse(m.svc, "POST", mcp_headers(m), body)


def resume(m, last_id, key=None, session=None):
    h = mcp_headers(m, Accept="text/event-stream", **{"Last-Event-ID": last_id})
    if key:
        h["Authorization"] = f"Bearer {key}"
    if session:
        h["Mcp-Session-Id"] = session
    return Sse(m.svc, "GET", h)


def stdout_of(events):
    return "".join(msg["params"]["data"] for _, msg in events
                   if msg and msg.get("method") == "notifications/message" and msg["params"].get("logger") == "stdout")


def responses(events, rid):
    return [msg for _, msg in events if msg and msg.get("id") == rid and ("result" in msg or "error" in msg)]


def id_key(eid):
    stream, seq = eid.split("-")
    return int(stream), int(seq)


SLOW_LINES = "import time\nfor i in range(1, 9):\n    print(f'line{i}', flush=True)\n    time.sleep(0.4)\n"
WANT = "".join(f"line{i}\n" for i in range(1, 9))


@pytest.mark.parametrize("when", ["running", "ended"])
def test_a_dropped_stream_resumes_with_last_event_id(service, when):
    """The stream of a tools/call is cut after line2; a GET with Last-Event-ID
    (while the run still goes, or after it ended) brings the rest of the
    output and the result, each exactly once, with ids after the last one."""
    m = Mcp(service)
    rid, first = start_call(m, SLOW_LINES, token="t-resume")
    assert first.status == 200 and first.headers["content-type"] == "text/event-stream", first.headers
    got, last = [], None
    for eid, msg in first.events():
        if eid is not None:
            last = eid
        got.append((eid, msg))
        if "line2" in stdout_of(got):
            break
    first.drop()
    # the priming event comes first: an id and no message (2025-11-25)
    assert got[0][0] is not None and got[0][0].endswith("-0") and got[0][1] is None, got[:2]
    assert all(eid is not None for eid, msg in got), "an event without an id cannot be resumed after"
    assert stdout_of(got).startswith("line1\nline2\n") and not responses(got, rid), got
    run_ids = {msg["params"]["message"].split()[1] for _, msg in got
               if msg and msg.get("method") == "notifications/progress" and msg["params"]["message"].startswith("Run ")}
    assert len(run_ids) == 1, got
    run_id = run_ids.pop()
    if when == "ended":
        run = service.wait_state(run_id, {"succeeded", "failed", "error"}, timeout=60)
        assert run["state"] == "succeeded", run
    again = resume(m, last)
    assert again.status == 200 and again.headers["content-type"] == "text/event-stream", (again.status, again.headers)
    rest = list(again.events())
    assert all(eid is not None and id_key(eid) > id_key(last) for eid, _ in rest), (last, rest)
    ids = [eid for eid, _ in got + rest]
    assert len(ids) == len(set(ids)) and ids == sorted(ids, key=id_key), ids
    # the output, whole and once; the response, once, at the end
    assert stdout_of(got + rest) == WANT, (stdout_of(got), stdout_of(rest))
    final = responses(got + rest, rid)
    assert len(final) == 1 and rest[-1][1] is final[0], rest[-3:]
    assert final[0]["result"]["isError"] is False and "line8" in text_of(final[0]["result"]), final
    # delivered: the stream is forgotten; a resume of it says so
    status, _, doc = m.post(method="GET", accept="text/event-stream", headers={"Last-Event-ID": rest[-1][0]})
    assert status == 410 and "no longer kept" in doc["error"]["message"], (status, doc)


def test_resumption_refusals(service):
    m = Mcp(service)
    rid, first = start_call(m, SLOW_LINES)
    got = []
    for eid, msg in first.events():
        got.append((eid, msg))
        if "line1" in stdout_of(got):
            break
    first.drop()
    last = got[-1][0]
    # not an id of ours, a stream that never was, no session, another person's key
    for bad in ("abc", "1-", "-1-2", "1-2-3", "1 -2", "x" * 80):
        status, _, doc = m.post(method="GET", accept="text/event-stream", headers={"Last-Event-ID": bad})
        assert status == 400 and "Last-Event-ID" in doc["error"]["message"], (bad, status, doc)
    status, _, doc = m.post(method="GET", accept="text/event-stream", headers={"Last-Event-ID": "999-1"})
    assert status == 410, (status, doc)
    other = service.new_tenant(f"mcpres{time.monotonic_ns() % 10**9}")
    sneak = resume(m, last, key=other.key)
    assert sneak.status == 404, sneak.status
    sneak.drop()
    nos = resume(m, last, session="0" * 32)
    assert nos.status == 404, nos.status
    nos.drop()
    # the owner still resumes it, to the end
    again = resume(m, last)
    rest = list(again.events())
    assert stdout_of(got + rest) == WANT and len(responses(rest, rid)) == 1
    # a HEAD, or a GET without Last-Event-ID, is still 405
    assert m.post(method="HEAD", accept="text/event-stream", headers={"Last-Event-ID": last})[0] == 405


def test_a_resume_from_before_the_replay_bound_is_told_what_it_missed(service):
    """More events than a session keeps (512): a resume from the very first id
    gets a warning naming how many were dropped, then the newest kept events
    and the response; the output it did get is the tail of the whole."""
    m = Mcp(service)
    # 3,000 lines, each flushed apart: even a loaded machine that reads two
    # or three of them as one event gives far more than the 512 kept
    n = 3000
    code = f"import time\nfor i in range({n}):\n    print(f'n{{i}}', flush=True)\n    time.sleep(0.002)\n"
    rid, first = start_call(m, code)
    got, prime = [], None
    # The client goes away once it has read past the bound, while the run
    # still prints. Reading to the last line instead raced the response: the
    # server may have handed it to the socket before the drop, and a stream
    # whose response went out is rightly gone (410), which left the resume
    # with nothing to read.
    for eid, msg in first.events():
        prime = prime or eid
        got.append((eid, msg))
        if sum(1 for e in got if e[1] and e[1].get("method") == "notifications/message") > 520:
            break
    first.drop()
    outputs = [e for e in got if e[1] and e[1].get("method") == "notifications/message"]
    assert len(outputs) > 520, f"the run's output came in {len(outputs)} events, too few to pass the bound of 512"
    assert f"n{n - 1}\n" not in stdout_of(got), "the run ended before the first client had read past the bound"
    again = resume(m, prime)
    assert again.status == 200, (again.status, again.resp.read()[:500])
    rest = list(again.events())
    assert rest, "the resume's stream was empty"
    warn = rest[0][1]
    assert rest[0][0] is None and warn["method"] == "notifications/message", rest[:2]
    assert warn["params"]["level"] == "warning" and warn["params"]["data"]["missed"] > 0, warn
    assert f"GET /v1/runs/{warn['params']['data']['run_id']}/events" in warn["params"]["data"]["message"], warn
    kept = [e for e in rest[1:] if e[1] and e[1].get("method") == "notifications/message"]
    # missed and kept together are every output event after the one resumed
    # from: at least what the first client saw, and kept ones run on without
    # a gap to the end
    assert len(kept) + warn["params"]["data"]["missed"] >= len(outputs) - 1, (len(kept), warn, len(outputs))
    seqs = [id_key(e[0])[1] for e in kept if e[0]]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs[:5]
    whole = "".join(f"n{i}\n" for i in range(n))
    assert whole.startswith(stdout_of(got))
    assert whole.endswith(stdout_of(rest)) and len(stdout_of(rest)) < len(whole)
    assert len(responses(rest, rid)) == 1 and rest[-1][1]["id"] == rid


def test_sdk_resumes_a_dropped_stream(service):
    """The official SDK's StreamableHTTPClientTransport reconnects with
    Last-Event-ID when a tools/call stream breaks, and gets the result."""
    npm_ci()
    node_test("mcp_resume.test.mjs", sdk_env(service), expect=2)


class CuttingRelay:
    """A TCP relay to the service that fails the first connection carrying a
    tools/call (a reset, as a broken network does) once TRIGGER went through
    it towards the client; every other connection it relays whole."""

    def __init__(self, svc, trigger=b"line2"):
        import socket
        self.svc, self.trigger, self.cuts = svc, trigger, 0
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.lsock.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(c,), daemon=True).start()

    def _pipe(self, c):
        import socket
        import struct
        s = socket.create_connection((self.svc.host, self.svc.port))
        seen = {"call": False, "down": b""}

        def up():
            try:
                while (d := c.recv(65536)):
                    seen["call"] |= b'"tools/call"' in d
                    s.sendall(d)
            except OSError:
                pass
        threading.Thread(target=up, daemon=True).start()
        try:
            while (d := s.recv(65536)):
                c.sendall(d)
                if seen["call"] and not self.cuts:
                    seen["down"] += d
                    if self.trigger in seen["down"]:
                        self.cuts += 1
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        break
        except OSError:
            pass
        # shutdown first: a close alone does not wake the other thread's recv,
        # which keeps the socket (and the client's connection) alive
        for x in (c, s):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()


def test_airlock_mcp_resumes_a_broken_stream(service):
    """`airlock mcp` whose connection to the service breaks mid-call resumes
    the stream with Last-Event-ID: its client sees every line of output once
    and gets the answer, not an error."""
    relay = CuttingRelay(service)
    try:
        init = dict(INIT, params=dict(INIT["params"], protocolVersion=LATEST))
        code, out, err = stdio(service, [init, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                         {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                                             "name": "code_execution",
                                             "arguments": {"language": "python", "code": SLOW_LINES}}}],
                               args=["--url", relay.url, "--key", service.key])
    finally:
        relay.close()
    assert code == 0, err
    assert relay.cuts == 1, "the relay never cut the stream"
    assert "resuming after event" in err, err
    answers = [m for m in out if m.get("id") == 2]
    assert len(answers) == 1 and "result" in answers[0], out
    assert answers[0]["result"]["isError"] is False and "line8" in text_of(answers[0]["result"]), answers
    logs = "".join(m["params"]["data"] for m in out
                   if m.get("method") == "notifications/message" and m["params"].get("logger") == "stdout")
    assert logs == WANT, logs


# ------------------------------------------------------ security review fixes


def test_read_artifact_cut_inside_a_utf8_character(service):
    """Text just over read_artifact's inline cap (256 KiB) whose cut point
    lands inside a two-byte character: it comes back cut before that
    character, and says so (the cut once looked at a byte never read, and
    could refuse the artifact as too large)."""
    cap = 256 << 10
    m = Mcp(service)
    code = f"open('/out/cut.txt', 'w', encoding='utf-8').write('a' * {cap - 1} + '\\u00e9' + 'b' * 10)"
    r = m.call("code_execution", {"language": "python", "code": code})
    assert r["isError"] is False, r
    uri = next(a["uri"] for a in r["structuredContent"]["artifacts"] if a["path"] == "cut.txt")
    got = m.call("read_artifact", {"uri": uri})
    assert got["isError"] is False, got
    res = got["content"][1]["resource"]
    assert res["text"] == "a" * (cap - 1), (len(res.get("text", "")), res.get("text", "")[-5:])
    assert f"Only the first {cap - 1} bytes are shown" in got["content"][0]["text"], got["content"][0]


def test_a_person_s_concurrent_tools_calls_are_capped(service):
    """One person's key follows at most 16 tools/call at once (event streams
    and blocking JSON answers alike, each holding a connection's thread):
    the 17th is refused with 429 and a JSON-RPC error naming the limit,
    starting no run, while another person's key still works; once one ends,
    the person may call again."""
    t = service.new_tenant(f"mcpcap{time.monotonic_ns() % 10**9}")
    a = Mcp(service, key=t.key)
    slow = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    streams, rids = [], []
    json_out = {}
    try:
        for _ in range(15):
            rid, st = start_call(a, slow)
            assert st.status == 200, st.status
            streams.append(st)
            rids.append(rid)
        # the 16th: a blocking JSON answer, in a thread

        def blocking():
            json_out["answer"] = a.post({"jsonrpc": "2.0", "id": "json-16", "method": "tools/call", "params": {
                "name": "code_execution", "arguments": {"language": "python", "code": slow}}},
                accept="application/json", timeout=120)
        th = threading.Thread(target=blocking)
        th.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(t.client.ok("GET", "/v1/runs")["runs"]) < 16:
            time.sleep(0.05)
        assert len(t.client.ok("GET", "/v1/runs")["runs"]) == 16
        for accept in ("application/json", BOTH):
            status, hdrs, doc = a.request("tools/call", {"name": "code_execution", "arguments": {
                "language": "bash", "code": "echo over"}}, accept=accept)
            assert status == 429, (status, doc)
            assert doc["error"]["code"] == -32000 and "at most 16 tools/call" in doc["error"]["message"], doc
        # no run was started for them
        assert len(t.client.ok("GET", "/v1/runs")["runs"]) == 16
        # another session of the same person is the same person
        status, _, doc = Mcp(service, key=t.key).request("tools/call", {"name": "list_artifacts", "arguments": {}})
        assert status == 429, (status, doc)
        # another person is not held up
        r = Mcp(service).call("code_execution", {"language": "bash", "code": "echo other-person"})
        assert r["isError"] is False and "other-person" in text_of(r), r
        # one call ends (canceled): the person may call again
        assert a.notify("notifications/cancelled", {"requestId": rids[0]})[0] == 202
        assert responses(list(streams[0].events()), rids[0])
        r = a.call("list_artifacts", {"thread": "none"})
        assert r["isError"] is False, r
    finally:
        for rid in rids:
            a.notify("notifications/cancelled", {"requestId": rid})
        a.notify("notifications/cancelled", {"requestId": "json-16"})
        for st in streams:
            st.drop()
        th.join(60)
    assert json_out["answer"][0] == 200, json_out


def _local_server(state):
    """(pid, port) of the private `airlock serve` of an `airlock mcp --local` on STATE."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        args = _cmdline(p).split(b"\0")
        if b"serve" in args and str(state).encode() in args and b"--listen" in args:
            return int(p), int(args[args.index(b"--listen") + 1].rsplit(b":", 1)[1])
    return None, None


def test_airlock_mcp_local_port_cannot_be_squatted(tmp_path):
    """airlock mcp --local binds the loopback socket itself and hands it to its
    private service, so there is no moment where the port is free for
    another local user to take, answer /healthz on and be sent the key: a
    squatter cannot bind the port, even with SO_REUSEADDR and SO_REUSEPORT
    (a service that bound it itself with SO_REUSEPORT would have shared it)."""
    import socket
    import subprocess
    state = tmp_path / "local"
    bridge = subprocess.Popen([str(service_binary()), "mcp", "--local", "--state", str(state)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        bridge.stdin.write((json.dumps(INIT) + "\n").encode())
        bridge.stdin.flush()
        assert json.loads(bridge.stdout.readline())["id"] == 1
        pid, port = _local_server(state)
        assert pid and port, "no private service found"
        # the service listens on the socket it was handed (fd 3)
        assert os.readlink(f"/proc/{pid}/fd/3").startswith("socket:")
        squat = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        squat.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squat.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            with pytest.raises(OSError) as e:
                squat.bind(("127.0.0.1", port))
            assert e.value.errno == 98, e.value  # EADDRINUSE
        finally:
            squat.close()
        # and the bridge still works through its own socket
        bridge.stdin.write((json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}) + "\n").encode())
        bridge.stdin.flush()
        assert "code_execution" in json.dumps(json.loads(bridge.stdout.readline()))
    finally:
        bridge.stdin.close()
        assert bridge.wait(30) == 0


def _reset(st):
    """The client's end goes away with a reset, so the server's next write fails."""
    import socket
    import struct
    try:
        st.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    st.conn.close()


def test_a_person_keeps_at_most_32_parked_streams_and_never_pushes_out_others(service):
    """Unread ("parked") tools/call streams are bounded per person: the 33rd
    of one person makes that person's oldest one go (410), while another
    person's parked stream, older than all of them, is still resumable."""
    a_key = service.new_tenant(f"mcppark{time.monotonic_ns() % 10**9}").key
    b = Mcp(service)
    code = "print('x', flush=True)\n"

    def park(m, n):
        primes = []
        for _ in range(n):
            _, st = start_call(m, code)
            assert st.status == 200, st.status
            eid, _ = next(st.events())
            assert eid and eid.endswith("-0"), eid
            primes.append(eid)
            _reset(st)
        return primes

    def settled(key):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = service.ok("GET", "/v1/runs", key=key)["runs"]
            if all(r["state"] not in ("queued", "running", "provisioning", "pending_approval") for r in runs):
                time.sleep(1)  # the server's next write finds the client gone
                return
            time.sleep(0.1)
        raise AssertionError("runs did not end")

    b_prime = park(b, 1)[0]
    settled(service.key)
    sessions = [Mcp(service, key=a_key) for _ in range(3)]
    a_primes = []
    for m in sessions:  # 11 per session: under the session's own bound of 16
        a_primes.append((m, park(m, 11)))
        settled(a_key)
    got = {}
    for m, primes in a_primes:
        for eid in primes:
            st = resume(m, eid)
            got[(m.session, eid)] = st.status
            if st.status == 200:
                assert any(msg and "result" in msg for _, msg in st.events())
            st.conn.close()
    gone = [k for k, v in got.items() if v == 410]
    assert sorted(got.values()).count(200) == 32 and len(gone) == 1, got
    # one of the oldest (the first session's, parked before the others)
    assert gone[0][0] == a_primes[0][0].session, gone
    st = resume(b, b_prime)
    assert st.status == 200, st.status
    assert any(msg and "result" in msg for _, msg in st.events())


def test_resumes_racing_the_end_of_their_stream(service):
    """A resume that waits for the old connection to let go while that
    connection delivers the response (and the stream is freed) must not
    touch the freed stream, nor take over another stream that got its
    memory: it gets this stream's events or 410/409, never another's.
    (Under ASan this also checks for the use after free.)"""
    m, other = Mcp(service), Mcp(service)
    stop = threading.Event()

    def churn():  # another session's streams, to reuse freed memory
        while not stop.is_set():
            _, st = start_call(other, "print('other-session')")
            list(st.events())
    th = threading.Thread(target=churn)
    th.start()
    try:
        for _ in range(15):
            rid, first = start_call(m, "print('mine', flush=True)")
            eid, _ = next(first.events())
            reader = threading.Thread(target=lambda st=first: list(st.events()))
            reader.start()
            again = resume(m, eid)
            assert again.status in (200, 409, 410), again.status
            if again.status == 200:
                evs = list(again.events())
                stream = eid.split("-")[0]
                assert all(e is None or e.split("-")[0] == stream for e, _ in evs), evs
                assert "other-session" not in json.dumps(evs), evs
                assert all(msg.get("id") in (None, rid) for _, msg in evs if msg), evs
            again.conn.close()
            reader.join(30)
    finally:
        stop.set()
        th.join(30)
