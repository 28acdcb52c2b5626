"""Hostile battery, group O1: requests mean what they say (docs/security.md).

A field the service does not read is refused, named, on every route that
takes a JSON body; an auditor's trace answers for every run; a tenant sees
only its own; and slow clients cannot hold every connection.  Each case shows
the ingredient working (the field the service does read, the trace of a run
that ran), then the case that failed on the old service."""
import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from service_util import ServiceSet, assert_error, gov_tenant, put_settings  # noqa: E402
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
