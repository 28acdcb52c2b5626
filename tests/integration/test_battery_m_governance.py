"""SECURITY.md group M (governance means what it says), the parts besides
approvals: the skill test bench obeys the tool allow-list and approval like
any run; audit events are never blanked by what a script prints, and a
failed audit write is loud; every error answer (REST and MCP's JSON-RPC)
survives hostile text cut inside a character; the workspace's network
settings bound what a run may ask for (a request narrows, never widens);
settings that cannot be read refuse runs instead of running them under the
defaults; the usage ledger is the caller's workspace's, and prices are the
operator's to set, not a workspace admin's.

Each case is differential: it first shows the ingredient working (the
bench runs, the preview holds a multi-byte character that fits, approval
holds runs, the host list admits a listed name), then that airlock is not
fooled."""
import http.client
import io
import json
import tarfile
import threading
import time

import pytest

from service_util import (GOV_TERMINAL, assert_error, audit_events, gov_tenant, put_settings, service,  # noqa: F401
                          services)

# ------------------------------------------------------------------ helpers


def tarball(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, data in files.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def bench_bundle(name):
    m = {"name": name, "version": "1.0.0", "description": "Says what it is.", "image": "host",
         "entrypoints": [{"name": "go", "language": "python", "script": "go.py", "description": "Print a marker.",
                          "input_schema": {"type": "object"}}]}
    return tarball({"skill.json": json.dumps(m), "go.py": "print('BENCH-RAN')\n"})


def upload(client, body, want=201):
    status, _, doc = client.request("POST", "/v1/skills", body=body, headers={"Content-Type": "application/gzip"})
    assert status == want, f"POST /v1/skills: want {want}, got {status}: {doc!r}"
    return doc


def bench(client, name, **kw):
    return client.request("POST", f"/v1/skills/{name}/test", json={"entrypoint": "go", "args": {}}, timeout=300, **kw)


def runs_of(client):
    return client.ok("GET", "/v1/runs", query={"limit": "200"})["runs"]


def verify_chains(svc):
    """`airlock admin audit verify` on SVC's store: (exit status, what it printed)."""
    proc = svc.admin_run("audit", "verify", timeout=120)
    return proc.returncode, proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def wait_for(pred, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# ------------------------------------------------ M: the skill test bench


def test_test_bench_needs_code_execution_on_the_allow_list(service):
    """The bench runs an unpromoted upload: code no admin reviewed, which is
    code execution. A workspace whose tools allow only run_skill_script
    (agents run promoted skills) does not get arbitrary code through it."""
    t = gov_tenant(service, "bench")
    _, member = t.person_in("member")
    name = f"bench-{time.monotonic_ns() % 10**9}"
    upload(member, bench_bundle(name))
    # the ingredient: where code execution is allowed, the member's bench runs the upload
    status, _, run = bench(member, name)
    assert status == 200 and run["state"] == "succeeded" and "BENCH-RAN" in run["result"]["stdout"], run
    assert run["skill"]["mode"] == "test", run
    # agents may run promoted skills only: the bench is refused, loudly, and nothing runs
    put_settings(t.client, tools=["run_skill_script"])
    before = len(runs_of(member))
    for who in (member, t.client):
        status, _, err = bench(who, name)
        assert_error(status, err, "tool_not_allowed", 403)
        assert "code_execution" in err["error"]["message"] and "test bench" in err["error"]["message"], err
    assert len(runs_of(member)) == before, "a refused bench call recorded a run"
    denied = [e for e in audit_events(t.client, kind="capability.invoke_denied")
              if e["data"].get("tool") == "code_execution" and e["data"].get("skill") == name]
    assert len(denied) == 2, f"the refused bench calls are not audited: {denied}"
    # promoted, the skill is what agents may run there
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    status, _, run = member.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "go", "args": {}},
                                    query={"wait": "true"}, timeout=300)
    assert status == 200 and run["state"] == "succeeded" and run["skill"]["mode"] == "run", run


def test_test_bench_obeys_approval(service):
    """An admin's bench run under approval_policy always waits for an
    approver like any run, with its card, and runs only once approved."""
    t = gov_tenant(service, "benchap")
    _, approver = t.person_in("approver")
    name = f"benchap-{time.monotonic_ns() % 10**9}"
    upload(t.client, bench_bundle(name))
    put_settings(t.client, approval_policy="always")
    answer = {}
    th = threading.Thread(target=lambda: answer.update(r=bench(t.client, name)))
    th.start()
    try:
        def pending():
            rs = [r for r in runs_of(t.client) if r.get("skill", {}).get("name") == name]
            return rs[0] if rs and rs[0]["state"] == "pending_approval" else None
        run = wait_for(pending, "the bench run to wait for approval")
        assert run["approval"] and run["approval"]["hash"] and "(test bench)" in run["description"], run
        assert run["result"] is None and run["started_at"] is None, run
        approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    finally:
        th.join(300)
    status, _, done = answer["r"]
    assert status == 200 and done["state"] == "succeeded" and "BENCH-RAN" in done["result"]["stdout"], done
    assert done["approval"]["decision"] == "approved", done


def test_a_waiting_run_is_held_to_the_tool_allow_list_when_it_starts(service):
    t = gov_tenant(service, "toolsnow")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always")
    runs = [t.client.post_run(f"print('run {i}')")[2] for i in range(2)]
    assert all(r["state"] == "pending_approval" for r in runs), runs

    def ended(run_id):
        return wait_for(lambda: (lambda x: x if x["state"] in GOV_TERMINAL else None)(t.client.get_run(run_id)),
                        "the approved run to end")
    # the ingredient: approved while code execution is allowed, it runs
    approver.ok("POST", f"/v1/runs/{runs[0]['id']}/approve", json={"hash": runs[0]["approval"]["hash"]})
    assert ended(runs[0]["id"])["state"] == "succeeded"
    put_settings(t.client, tools=["run_skill_script"])
    approver.ok("POST", f"/v1/runs/{runs[1]['id']}/approve", json={"hash": runs[1]["approval"]["hash"]})
    r = ended(runs[1]["id"])
    assert r["state"] == "error" and r["error"]["code"] == "tool_not_allowed" and r["result"] is None, r


# -------------------------------------------------- M: the audit trail


TOOL_CALL_FIELDS = {"tool", "via", "invocation_id", "input_sha256", "exit_code", "output_preview", "language",
                    "duration_ms", "network", "image_digest", "egress", "state", "redactions"}


def tool_call(client, run_id):
    evs = [e for e in audit_events(client, run_id=run_id) if e["kind"] == "tool.call"]
    assert len(evs) == 1, f"want one tool.call event of {run_id}: {evs}"
    return evs[0]["data"]


def test_a_character_cut_at_the_preview_does_not_blank_the_audit_event(service):
    t = gov_tenant(service, "prev")
    # the ingredient: a two-byte character that fits in the 512-byte preview is kept whole
    fits = t.client.run("print('A' * 510 + '\\u00e9', end='')")
    assert fits["result"]["stdout"] == "A" * 510 + "\u00e9", fits["result"]
    d = tool_call(t.client, fits["id"])
    assert d.get("output_preview") == "A" * 510 + "\u00e9", d
    # across byte 512: the preview is cut before the character, and every field is there
    run = t.client.run("print('A' * 511 + '\\u00e9', end='')")
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "A" * 511 + "\u00e9", run["result"]
    d = tool_call(t.client, run["id"])
    missing = TOOL_CALL_FIELDS - set(d)
    assert not missing, f"the tool.call event lost {missing}: {d}"
    assert d["output_preview"] == "A" * 511, d["output_preview"][-8:]
    assert d["invocation_id"] == run["id"] and d["state"] == "succeeded" and d["exit_code"] == 0, d
    # the same with a three- and a four-byte character, and stderr after stdout
    for ch, keep in (("\u20ac", 510), ("\U0001F600", 509)):
        run = t.client.run(f"import sys\nprint('B' * {keep}, end='')\nsys.stdout.flush()\n"
                           f"sys.stderr.write({ch!r} * 3)\n")
        d = tool_call(t.client, run["id"])
        assert TOOL_CALL_FIELDS <= set(d), d
        assert d["output_preview"].startswith("B" * keep) and len(d["output_preview"].encode()) <= 512, d
        assert len(d["output_preview"].encode()) > 512 - len(ch.encode()), d["output_preview"][-4:]
    rc, out = verify_chains(service)
    assert rc == 0, f"audit verify: {out}"


def test_a_redaction_that_cuts_a_character_does_not_blank_the_output(service):
    t = gov_tenant(service, "dlpcut")
    put_settings(t.client, dlp_patterns=[{"name": "tag", "pattern": "SECRET."}])
    # the ingredient: the pattern redacts (an ASCII byte after SECRET)
    run = t.client.run("print('keep SECRETx after')")
    assert run["result"]["stdout"] == "keep [REDACTED:tag] after\n" and run["redactions"] == 1, run["result"]
    # its "." matches the first byte of a two-byte character and leaves the second
    run = t.client.run("print('keep SECRET\u00e9 after')")
    out = run["result"]["stdout"]
    assert out.startswith("keep [REDACTED:tag]") and out.endswith(" after\n"), f"the output was blanked: {out!r}"
    assert "\u00e9" not in out, out
    d = tool_call(t.client, run["id"])
    assert d["output_preview"] == out and TOOL_CALL_FIELDS <= set(d), d
    # the live stream carried it too (the event was not dropped)
    live = "".join(d["data"] for _, ev, d in t.client.events(run["id"]) if ev == "stdout")
    assert live == out, (live, out)


def test_a_failed_audit_write_fails_the_operation_loudly(services):
    svc = services.start("auditfail")
    t = gov_tenant(svc, "af")
    # the ingredient: with the trail writable, each operation succeeds and is audited
    put_settings(t.client, timeout_s=30)
    ok = t.client.run("print('audited')")
    assert ok["state"] == "succeeded"
    kinds = {e["kind"] for e in audit_events(t.client)}
    assert {"settings.changed", "capability.invoke_allowed", "tool.call"} <= kinds, kinds
    # the store refuses every new audit event (a full disk, a broken table)
    svc.fail_inserts("audit_events", "no_audit", message="audit table refuses writes")
    status, _, err = t.client.request("PUT", "/v1/settings", json={"timeout_s": 20})
    assert_error(status, err, "audit_failed", 500)
    before = {r["id"] for r in runs_of(t.client)}
    status, _, err = t.client.post_run("print('unaudited')", wait=True)
    assert_error(status, err, "audit_failed", 500)
    new = [r for r in runs_of(t.client) if r["id"] not in before]
    assert all(r["state"] == "error" and r["result"] is None for r in new), new
    status, _, err = t.client.request("POST", "/v1/skills", body=bench_bundle("af-skill"),
                                      headers={"Content-Type": "application/gzip"})
    assert_error(status, err, "audit_failed", 500)
    log = svc.log_path.read_text(errors="replace")
    assert log.count('"event":"audit.failed"') >= 3 and "audit table refuses writes" in log, log[-3000:]
    # the trail itself is whole: nothing was written half, and the chain verifies
    svc.drop_trigger("no_audit")
    rc, out = verify_chains(svc)
    assert rc == 0, out


# --------------------------------------- M: errors over hostile, cut text


def test_rest_errors_quoting_cut_text_are_answered(service):
    t = gov_tenant(service, "cut")
    # the ingredient: a short unknown limit is named in a 400
    status, _, err = t.client.post_run("print(1)", limits={"\u00e9t\u00e9": 1})
    assert_error(status, err, "bad_request")
    assert "\u00e9t\u00e9" in err["error"]["message"], err
    # one long enough that the 600-byte message is cut inside a character
    status, _, err = t.client.post_run("print(1)", limits={"a" + "\u00e9" * 400: 1})
    assert_error(status, err, "bad_request")
    assert err["error"]["message"].startswith("unknown field \"a\u00e9\u00e9"), err
    # a skill's entrypoint quoted as %.64s
    name = f"cut-{time.monotonic_ns() % 10**9}"
    upload(t.client, bench_bundle(name))
    t.client.ok("POST", f"/v1/skills/{name}/promote")
    status, _, err = t.client.request("POST", f"/v1/skills/{name}/run", json={"entrypoint": "a" + "\u00e9" * 40})
    assert_error(status, err, "bad_request")
    assert "has no entrypoint" in err["error"]["message"], err
    # a malformed body whose parser message quotes half a character ("\u then é)
    for method, path in (("POST", "/v1/runs"), ("PUT", "/v1/settings"), ("POST", f"/v1/skills/{name}/run"),
                         ("POST", f"/v1/skills/{name}/test")):
        for body in (b'{"code": "\\u', b'{"code": "\\u' + "\u00e9".encode()):
            try:
                status, _, err = t.client.request(method, path, body=body, headers={"Content-Type": "application/json"})
            except (ConnectionError, http.client.HTTPException) as e:
                pytest.fail(f"{method} {path} {body!r}: the connection was dropped: {e!r}")
            assert_error(status, err, "bad_request")


class Mcp:
    """Just enough of the Streamable HTTP transport: raw bodies and headers."""

    def __init__(self, svc):
        self.svc = svc
        status, hdrs, doc = self.post(json.dumps({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "pytest", "version": "1"}}}).encode(), session=False)
        assert status == 200, (status, doc)
        self.session = hdrs["mcp-session-id"]

    def post(self, body, session=True, headers=None, method="POST"):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
             "Authorization": f"Bearer {self.svc.key}"}
        if session:
            h["Mcp-Session-Id"] = self.session
            h["MCP-Protocol-Version"] = "2025-11-25"
        h.update(headers or {})
        conn = http.client.HTTPConnection(self.svc.host, self.svc.port, timeout=60)
        try:
            conn.putrequest(method, "/mcp")
            for k, v in h.items():
                # a str header goes out as latin-1: "\xff" is the byte 0xff
                conn.putheader(k, v.encode("latin-1") if isinstance(v, str) else v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            hdrs = {a.lower(): b for a, b in resp.getheaders()}
        except (ConnectionError, http.client.RemoteDisconnected) as e:
            return None, {}, f"connection dropped: {e!r}"
        finally:
            conn.close()
        try:
            return resp.status, hdrs, json.loads(data)
        except ValueError:
            return resp.status, hdrs, data

    def rpc(self, method, params, **kw):
        return self.post(json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode(), **kw)


def rpc_error(answer, http_status, code, id_=7):
    status, _, doc = answer
    assert status == http_status, f"want HTTP {http_status}, got {status}: {doc!r}"
    assert isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" and doc.get("id") == id_, doc
    assert doc["error"]["code"] == code and doc["error"]["message"], doc
    return doc["error"]["message"]


LONG = "a" + "\u00e9" * 150  # every byte-count cut (100, 200) falls inside a character


@pytest.mark.parametrize("case", ["body", "method", "tool", "uri", "header"])
def test_mcp_errors_on_cut_text_get_a_json_rpc_reply(service, case):
    m = Mcp(service)
    # the ingredient: the same request with short text is answered with its error
    if case == "body":
        msg = rpc_error(m.post(b'{"jsonrpc":"2.0","id":1,"method":"\\u'), 400, -32700, None)
        assert "Parse error" in msg
        msg = rpc_error(m.post(b'{"jsonrpc":"2.0","id":1,"method":"\\u' + "\u00e9".encode()), 400, -32700, None)
        assert "Parse error" in msg
    elif case == "method":
        assert "no/such" in rpc_error(m.rpc("no/such", {}), 200, -32601)
        assert "a\u00e9\u00e9" in rpc_error(m.rpc(LONG, {}), 200, -32601)
    elif case == "tool":
        assert "nope" in rpc_error(m.rpc("tools/call", {"name": "nope", "arguments": {}}), 200, -32602)
        assert "a\u00e9\u00e9" in rpc_error(m.rpc("tools/call", {"name": LONG, "arguments": {}}), 200, -32602)
    elif case == "uri":
        assert "airlock://artifacts/art_none" in rpc_error(
            m.rpc("resources/read", {"uri": "airlock://artifacts/art_none"}), 200, -32002)
        assert "a\u00e9\u00e9" in rpc_error(m.rpc("resources/read", {"uri": LONG}), 200, -32002)
    else:
        assert "1999-01-01" in rpc_error(m.rpc("ping", {}, headers={"MCP-Protocol-Version": "1999-01-01"}), 400, -32000)
        rpc_error(m.rpc("ping", {}, headers={"MCP-Protocol-Version": "\xff\xfe1999"}), 400, -32000)
        rpc_error(m.rpc("ping", {}, headers={"MCP-Protocol-Version": b"x" * 39 + "\u00e9".encode()}), 400, -32000)
        # a resumption's Last-Event-ID is quoted too
        assert "nope" in rpc_error(m.post(b"", method="GET", headers={"Last-Event-ID": "nope"}), 400, -32000, None)
        rpc_error(m.post(b"", method="GET", headers={"Last-Event-ID": b"1-" + b"\xff" * 8}), 400, -32000, None)
        rpc_error(m.post(b"", method="GET", headers={"Last-Event-ID": b"x" * 63 + "\u00e9".encode()}), 400, -32000,
                  None)
    # and the service goes on answering
    status, _, doc = m.rpc("ping", {})
    assert status == 200 and doc.get("result") == {}, doc


# ----------------------------------------- M: settings fail closed


def corrupt_settings(svc, workspace, text):
    """Write TEXT over the workspace's settings row in the live store."""
    n = svc.sql_count("UPDATE workspace_settings SET settings = ? WHERE workspace_id = ?", text, workspace)
    assert n == 1, f"no settings row of {workspace} to corrupt"


@pytest.mark.parametrize("text", ['{"approval_policy": "always", ', '["approval_policy", "always"]', '',
                                  '{"approval_policy": "ALWAYS"}', '{"dlp_patterns": "EMP-[0-9]{6}"}'])
def test_settings_that_cannot_be_read_refuse_runs(services, text):
    svc = services.start("failclosed")
    t = gov_tenant(svc, "fc")
    _, member = t.person_in("member")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always",
                 dlp_patterns=[{"name": "emp", "pattern": "EMP-[0-9]{6}"}])
    # the ingredient: under these settings a run waits for approval, and DLP redacts
    status, _, run = member.post_run("print('EMP-123456')")
    assert status == 201 and run["state"] == "pending_approval", (status, run)
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = wait_for(lambda: (lambda r: r if r["state"] in GOV_TERMINAL else None)(member.get_run(run["id"])),
                    "the approved run to end")
    assert done["state"] == "succeeded" and "EMP-123456" not in done["result"]["stdout"], done["result"]
    # a run queued (approved) before the row breaks does not start under the defaults either
    status, _, queued = member.post_run("print('EMP-654321')")
    assert status == 201 and queued["state"] == "pending_approval", queued
    corrupt_settings(svc, t.workspace, text)
    before = {r["id"] for r in runs_of(member)}
    for who in (member, t.client):
        status, _, err = who.post_run("print('ran without approval')", wait=True)
        assert_error(status, err, "settings_unavailable", 503)
        assert "settings" in err["error"]["message"], err
    assert {r["id"] for r in runs_of(member)} == before, "a refused run was recorded"
    status, _, err = member.request("GET", "/v1/settings")
    assert_error(status, err, "settings_unavailable", 503)
    # a change is not written over the broken row (which would drop what it held)
    status, _, err = t.client.request("PUT", "/v1/settings", json={"timeout_s": 30})
    assert status == 500 and "corrupt" in err["error"]["message"], (status, err)
    approver.ok("POST", f"/v1/runs/{queued['id']}/approve", json={"hash": queued["approval"]["hash"]})
    ended = wait_for(lambda: (lambda r: r if r["state"] in GOV_TERMINAL else None)(member.get_run(queued["id"])),
                     "the queued run to end")
    assert ended["state"] == "error" and ended["error"]["code"] == "settings_unavailable", ended
    assert ended["result"] is None, ended
    # MCP lists no tool that runs code
    m = Mcp(member)
    status, _, doc = m.rpc("tools/list", {})
    assert status == 200 and {x["name"] for x in doc["result"]["tools"]}.isdisjoint(
        {"code_execution", "run_skill_script"}), doc


@pytest.mark.parametrize("column", ["max_memory_mb", "max_cpus_milli", "max_pids"])
def test_workspace_limits_that_cannot_be_read_refuse_runs(services, column):
    """A maximum read as 0 is no limit at all in the box (memory.max unset):
    an unreadable one refuses runs instead."""
    svc = services.start("limits")
    t = gov_tenant(svc, "lim")
    # the ingredient: the workspace's maxima bound a run's limits
    run = t.client.run("print(1)")
    assert run["limits"]["memory_mb"] == 512 and run["limits"]["pids"] == 256, run["limits"]
    assert svc.write_untyped("workspaces", column, "lots", "id = ?", t.workspace) == 1
    status, _, err = t.client.post_run("print('unbounded')", wait=True)
    assert_error(status, err, "settings_unavailable", 503)
    assert "limits" in err["error"]["message"], err


# ------------------------------------- M: the network policy narrows only


def test_hosts_come_from_the_workspace_settings_never_the_request(service):
    t = gov_tenant(service, "hosts")
    _, member = t.person_in("member")
    # the ingredient: a policy is parsed and checked at creation (a wildcard is malformed)
    status, _, err = member.post_run("print(1)", network="hosts:*.example")
    assert_error(status, err, "bad_request")
    # the default lists no host: the agent cannot write its own egress allow-list
    for net in ("hosts:evil.example", "hosts+packages:evil.example"):
        status, _, err = member.post_run("print(1)", network=net)
        assert_error(status, err, "network_not_allowed", 403)
        assert "network_hosts" in err["error"]["message"] and "evil.example" in err["error"]["message"], err
    doc = t.client.ok("GET", "/v1/settings")
    assert doc["network_hosts"] == [] and "hosts" in doc["network_allowed"], doc
    # an admin lists a.example: a run may name it, or narrow to it, never add to it
    doc = put_settings(t.client, network_hosts=["A.Example.", "c.example"])
    assert doc["network_hosts"] == ["a.example", "c.example"], doc
    for net in ("hosts:a.example", "hosts:a.example,c.example", "hosts:C.EXAMPLE."):
        run = member.run("print('in')", network=net)
        assert run["state"] == "succeeded" and run["network"] == net.lower().rstrip("."), run
    for net in ("hosts:a.example,b.example", "hosts:b.example", "hosts:a.example.evil"):
        status, _, err = member.post_run("print(1)", network=net)
        assert_error(status, err, "network_not_allowed", 403)
        assert "network_hosts" in err["error"]["message"], err
    # the other channels are held to the same list
    status, _, err = member.request("POST", "/v1/skills/no-skill/run",
                                    json={"entrypoint": "x", "args": {}, "network": "hosts:b.example"})
    assert status in (403, 404), (status, err)
    m = Mcp(member)
    status, _, doc = m.rpc("tools/call", {"name": "code_execution", "arguments": {
        "language": "python", "code": "print(1)", "network": "hosts:b.example"}})
    assert status == 200 and doc["result"]["isError"] is True, doc
    assert "network_hosts" in json.dumps(doc["result"]), doc
    # the workspace's default policy is held to the list too
    put_settings(t.client, want=400, network="hosts:b.example")
    put_settings(t.client, network="hosts:a.example")
    assert member.run("print(2)")["network"] == "hosts:a.example"
    put_settings(t.client, want=400, network_hosts=["c.example"])     # the default would fall outside it
    put_settings(t.client, want=400, network_hosts=["10.0.0.1"])      # never an address
    put_settings(t.client, want=400, network_hosts="a.example")
    put_settings(t.client, network="offline", network_hosts=[])
    status, _, err = member.post_run("print(1)", network="hosts:a.example")
    assert_error(status, err, "network_not_allowed", 403)


def test_a_waiting_run_is_held_to_the_hosts_listed_when_it_starts(service):
    """A host an admin takes off the list while a run waits for approval is
    not reached once the run is approved: the check is made again at start."""
    t = gov_tenant(service, "hostsnow")
    _, approver = t.person_in("approver")
    put_settings(t.client, approval_policy="always", network_hosts=["a.example", "c.example"])
    status, _, keep = t.client.post_run("print('kept')", network="hosts:c.example")
    status2, _, gone = t.client.post_run("print('reached a.example')", network="hosts:a.example")
    assert status == status2 == 201 and keep["state"] == gone["state"] == "pending_approval", (keep, gone)
    put_settings(t.client, network_hosts=["c.example"])
    for run in (keep, gone):
        approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    ended = {r["id"]: wait_for(lambda: (lambda x: x if x["state"] in GOV_TERMINAL else None)(t.client.get_run(r["id"])),
                               "the approved runs to end") for r in (keep, gone)}
    # the ingredient: the run whose host is still listed runs
    assert ended[keep["id"]]["state"] == "succeeded", ended[keep["id"]]
    g = ended[gone["id"]]
    assert g["state"] == "error" and g["error"]["code"] == "network_not_allowed" and g["result"] is None, g
    assert "a.example" in g["error"]["message"] and "network_hosts" in g["error"]["message"], g


def test_network_modes_follow_the_workspace_allow_list(service):
    t = gov_tenant(service, "modes")
    # internet is not in the default list; packages is, until an admin takes it out
    status, _, err = t.client.post_run("print(1)", network="internet")
    assert_error(status, err, "network_not_allowed", 403)
    assert t.client.run("print(1)", network="packages")["network"] == "packages"
    put_settings(t.client, network_allowed=["offline", "hosts"])
    # hosts+packages reaches the registries: it does not slip past a list without packages
    for net in ("packages", "hosts+packages:a.example", "internet"):
        status, _, err = t.client.post_run("print(1)", network=net)
        assert_error(status, err, "network_not_allowed", 403)
        assert "network_allowed" in err["error"]["message"], err
    put_settings(t.client, network_hosts=["a.example"])
    assert t.client.run("print(1)", network="hosts:a.example")["state"] == "succeeded"
    put_settings(t.client, want=400, network="hosts+packages:a.example")


# ------------------------------------------- M: usage and prices


def test_usage_ledger_is_the_callers_workspace(service):
    t = gov_tenant(service, "led")
    ws2 = t.add_workspace(t.name + "-ws2")
    from service_util import new_role_person
    _, admin2 = new_role_person(service, ws2, t.name + "-admin2", "admin")
    mine = t.client.run("print('ws1')")
    theirs = admin2.run("print('ws2')")
    # the ingredient: each workspace's own ledger shows its own charge (and the organisation's grant)
    l1 = t.client.ok("GET", "/v1/usage", query={"limit": "1000"})["ledger"]
    l2 = admin2.ok("GET", "/v1/usage", query={"limit": "1000"})["ledger"]
    assert any(e["run_id"] == theirs["id"] and e["kind"] == "charge" for e in l2), l2
    assert any(e["run_id"] == mine["id"] and e["kind"] == "charge" for e in l1), l1
    assert any(e["kind"] == "grant" for e in l1) and any(e["kind"] == "grant" for e in l2), (l1, l2)
    # never another workspace's runs, even of the same organisation
    assert not any(e["run_id"] == theirs["id"] for e in l1), f"workspace 1 sees workspace 2's run: {l1}"
    assert not any(e["run_id"] == mine["id"] for e in l2), f"workspace 2 sees workspace 1's run: {l2}"


def test_prices_are_the_operators_not_a_workspace_admins(service):
    t = gov_tenant(service, "price")
    before = t.client.ok("GET", "/v1/settings")["price_per_run"]
    assert before == 2, before
    # a workspace admin cannot make their own runs free (or dearer): 403, nothing changes
    for price in (0, 1, 5):
        status, _, err = t.client.request("PUT", "/v1/settings", json={"price_per_run": price})
        assert_error(status, err, "forbidden", 403)
        assert "operator" in err["error"]["message"], err
    assert t.client.ok("GET", "/v1/settings")["price_per_run"] == 2
    put_settings(t.client, price_per_run=2, timeout_s=30)   # the same price round-trips (GET, then PUT)
    run = t.client.run("print(1)")
    led = t.client.ok("GET", "/v1/usage", query={"limit": "1000"})["ledger"]
    assert [abs(e["amount"]) for e in led if e["run_id"] == run["id"] and e["kind"] == "charge"] == [2], led
    # the operator sets it (the ingredient: a price of 0 really is charged 0), audited in the workspace's chain
    out = service.admin("price", "set", "--workspace", t.workspace, "0")
    assert "0" in out, out
    assert t.client.ok("GET", "/v1/settings")["price_per_run"] == 0
    run = t.client.run("print(2)")
    led = t.client.ok("GET", "/v1/usage", query={"limit": "1000"})["ledger"]
    assert [abs(e["amount"]) for e in led if e["run_id"] == run["id"] and e["kind"] == "charge"] == [0], led
    ev = [e for e in audit_events(t.client, kind="price.changed")]
    assert len(ev) == 1 and ev[0]["data"] == {"price_per_run": 0, "by": "operator"} and ev[0]["person_id"] is None, ev
    status, _, err = t.client.request("PUT", "/v1/settings", json={"price_per_run": 3})
    assert_error(status, err, "forbidden", 403)
    for bad in ("-1", "x", "1000001"):
        proc = service.admin_run("price", "set", "--workspace", t.workspace, bad)
        assert proc.returncode != 0, (bad, proc.stdout)
    assert t.client.ok("GET", "/v1/settings")["price_per_run"] == 0
    rc, out = verify_chains(service)
    assert rc == 0, out
