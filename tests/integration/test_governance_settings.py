"""Governance (docs/api.md): roles, per-workspace settings (GET for anyone in
the workspace, PUT for admins, write-only secrets, validation), settings that
take effect on runs, the per-workspace disabled driver, and the tool
allow-list (403 tool_not_allowed + capability.invoke_denied)."""
import json
import time
import uuid

import pytest

from service_util import (GOV_TERMINAL, SETTINGS_KEYS, assert_error, audit_events, balance, get_settings, gov_tenant,
                          new_role_person, put_settings, service)  # noqa: F401


@pytest.fixture(scope="module")
def org(service):
    t = gov_tenant(service, "set")
    t.approver_id, t.approver = t.person_in("approver")
    t.member_id, t.member = t.person_in("member")
    return t


def test_role_option(service, org):
    for role in ("admin", "approver", "member"):
        new_role_person(service, org.workspace, f"r-{role}-{uuid.uuid4().hex[:6]}", role)
    out = service.admin("person", "create", "--workspace", org.workspace, "bad-role", "--role", "emperor",
                        check=False)
    proc_ok = "per_" in out
    assert not proc_ok, f"`person create --role emperor` made a person: {out!r}"


def test_bootstrap_person_is_admin(service):
    # the bootstrap key may change settings (and puts back what it read)
    cur = get_settings(service)
    doc = put_settings(service, approval_ttl_s=cur["approval_ttl_s"])
    assert doc["approval_ttl_s"] == cur["approval_ttl_s"]


def test_get_settings_shape_and_defaults(org):
    for c in (org.client, org.approver, org.member):
        doc = get_settings(c)
        missing = (SETTINGS_KEYS - {"secrets"}) - set(doc)
        assert not missing, f"GET /v1/settings lacks {missing}: {doc}"
    doc = get_settings(org.member)
    assert doc["driver"] == "native", doc
    assert doc["network"] == "offline", doc
    assert doc["timeout_s"] == 60 and doc["max_timeout_s"] == 120, doc
    assert doc["price_per_run"] == 2, doc
    assert doc["approval_policy"] in ("never", "always", "high_risk"), doc
    assert sorted(doc["tools"]) == ["code_execution", "run_skill_script"], doc
    assert doc["dlp_patterns"] == [], doc


def test_put_needs_admin(org):
    before = get_settings(org.client)
    for who in (org.member, org.approver):
        status, _, doc = who.request("PUT", "/v1/settings", json={"price_per_run": 7})
        assert_error(status, doc, "forbidden", 403)
        status, _, doc = who.request("PUT", "/v1/settings", json={"approval_policy": "never", "tools": []})
        assert_error(status, doc, "forbidden", 403)
    status, _, doc = org.client.request("PUT", "/v1/settings", json={"price_per_run": 1}, key=None)
    assert_error(status, doc, "unauthorized")
    after = get_settings(org.client)
    assert after == before, "a refused PUT changed the settings"


def test_put_subset_round_trip(org):
    t = org
    conc = get_settings(t.client)["concurrency"]
    doc = put_settings(t.client, timeout_s=30, memory_mb=256, concurrency=2,
                       dlp_patterns=[{"name": "ticket", "pattern": "TCK-[0-9]{4}"}])
    assert doc["timeout_s"] == 30 and doc["memory_mb"] == 256 and doc["concurrency"] == 2, doc
    assert doc["dlp_patterns"] == [{"name": "ticket", "pattern": "TCK-[0-9]{4}"}], doc
    got = get_settings(t.member)
    for k in ("timeout_s", "memory_mb", "concurrency", "dlp_patterns"):
        assert got[k] == doc[k], (k, got, doc)
    # a subset leaves the rest alone
    doc2 = put_settings(t.client, approval_ttl_s=120)
    assert doc2["approval_ttl_s"] == 120 and doc2["timeout_s"] == 30 and doc2["concurrency"] == 2, doc2
    # the defaults apply to new runs
    run = t.member.run("print('x')")
    assert run["state"] == "succeeded", run
    assert run["limits"]["timeout_s"] == 30 and run["limits"]["memory_mb"] == 256, run["limits"]
    put_settings(t.client, timeout_s=60, memory_mb=512, concurrency=conc, dlp_patterns=[])


@pytest.mark.parametrize("body", [
    {"bogus_key": 1},
    {"approval_policy": "sometimes"},
    {"driver": "quantum"},
    {"timeout_s": 0},
    {"timeout_s": 1000},
    {"timeout_s": "sixty"},
    {"max_timeout_s": 10000},
    {"concurrency": 100000},
    {"concurrency": 0},
    {"approval_ttl_s": -5},
    {"tools": ["rm_rf"]},
    {"tools": "code_execution"},
    {"network": "everything"},
    {"dlp_patterns": [{"name": "bad", "pattern": "(unclosed"}]},
    {"dlp_patterns": [{"pattern": "x+"}]},
    {"secrets": {"k": 5}},
    {"secrets": ["k"]},
], ids=lambda b: json.dumps(b)[:40])
def test_bad_values_are_400(org, body):
    before = get_settings(org.client)
    status, _, doc = org.client.request("PUT", "/v1/settings", json=body)
    assert_error(status, doc, "bad_request")
    assert get_settings(org.client) == before, f"a refused PUT {body} changed the settings"


def test_workspace_maximum_timeout(service):
    t = gov_tenant(service, "maxt")
    doc = put_settings(t.client, max_timeout_s=10, timeout_s=5)
    assert doc["max_timeout_s"] == 10 and doc["timeout_s"] == 5, doc
    status, _, err = t.client.post_run("print(1)", limits={"timeout_s": 20})
    assert_error(status, err, "bad_request")
    assert t.client.run("print(1)", limits={"timeout_s": 10})["state"] == "succeeded"
    assert t.client.run("print(1)")["limits"]["timeout_s"] == 5
    # the default may not exceed the maximum
    status, _, err = t.client.request("PUT", "/v1/settings", json={"timeout_s": 30})
    assert_error(status, err, "bad_request")
    status, _, err = t.client.request("PUT", "/v1/settings", json={"max_timeout_s": 121})
    assert_error(status, err, "bad_request")


def test_workspace_concurrency(service):
    t = gov_tenant(service, "conc")
    put_settings(t.client, concurrency=1)
    a = t.client.run("import time; print('up', flush=True); time.sleep(3)", wait=False)
    t.client.wait_state(a["id"], "running", timeout=30)
    b = t.client.run("print('b')", wait=False)
    time.sleep(0.5)
    assert t.client.get_run(b["id"])["state"] == "queued", "the workspace's concurrency 1 was not applied"
    t.client.cancel(a["id"])
    assert t.client.wait_state(b["id"], ("succeeded",), timeout=30)["result"]["stdout"] == "b\n"


def test_bad_json_is_400(org):
    status, _, doc = org.client.request("PUT", "/v1/settings", body=b"{not json",
                                        headers={"Content-Type": "application/json"})
    assert_error(status, doc, "bad_request")
    status, _, doc = org.client.request("PUT", "/v1/settings", json=[1, 2])
    assert_error(status, doc, "bad_request")


def test_secrets_are_write_only(service, org):
    value = "sv-" + uuid.uuid4().hex + uuid.uuid4().hex
    status, _, raw = org.client.request("PUT", "/v1/settings", json={"secrets": {"cloud_api_key": value}})
    assert status == 200, (status, raw)
    assert value not in json.dumps(raw), "PUT /v1/settings showed a secret's value back"
    for c in (org.client, org.approver, org.member):
        status, _, doc = c.request("GET", "/v1/settings")
        assert status == 200
        text = json.dumps(doc)
        assert value not in text, "GET /v1/settings showed a secret's value"
        assert "cloud_api_key" in text, f"GET /v1/settings does not name the saved secret: {doc}"
    # a second secret adds a name; the first stays
    value2 = "sv2-" + uuid.uuid4().hex
    doc = put_settings(org.client, secrets={"other_key": value2})
    text = json.dumps(get_settings(org.client))
    assert "cloud_api_key" in text and "other_key" in text and value2 not in text and value not in json.dumps(doc)
    # the audit trail and the run list never carry it either
    run = org.member.run("print('hello')")
    for c in (org.client, org.member):
        assert value not in json.dumps(c.list_runs()) and value not in json.dumps(c.get_run(run["id"]))
    assert value not in json.dumps(audit_events(org.client))
    # another workspace's GET does not name it
    other = gov_tenant(service, "sec")
    assert "cloud_api_key" not in json.dumps(get_settings(other.client))


def test_settings_are_per_workspace(service, org):
    other_ws = org.add_workspace("second-ws")
    _, other_admin = new_role_person(service, other_ws, "second-admin", "admin")
    put_settings(other_admin, memory_mb=300, timeout_s=20)
    mine = get_settings(org.client)
    assert mine["memory_mb"] != 300 and mine["timeout_s"] != 20, mine
    # an admin of one workspace does not change another's settings
    theirs = gov_tenant(service, "iso")
    put_settings(theirs.client, memory_mb=320, approval_policy="always", tools=[])
    mine2 = get_settings(org.client)
    assert mine2["memory_mb"] != 320 and "code_execution" in mine2["tools"], mine2
    assert org.member.run("print(2)")["state"] == "succeeded"


def test_disabled_driver_per_workspace(service, org):
    t = gov_tenant(service, "drv")
    _, member = t.person_in("member")
    bal = balance(t.client)
    doc = put_settings(t.client, driver="disabled")
    assert doc["driver"] == "disabled" and get_settings(member)["driver"] == "disabled"
    for wait in (False, True):
        status, _, doc = member.post_run("print(1)", wait=wait)
        assert_error(status, doc, "driver_disabled")
    assert member.list_runs() == [], "a disabled workspace left a run record"
    assert balance(t.client) == bal, "a refused run was charged"
    # other workspaces are not affected
    assert org.member.run("print('still on')")["result"]["stdout"] == "still on\n"
    status, _, h = service.get("/healthz", key=None)
    assert status == 200 and h["driver"] == "native", h
    put_settings(t.client, driver="native")
    assert member.run("print(3)")["state"] == "succeeded"
    assert balance(t.client) == bal - 2


def test_disabled_driver_stops_queued_runs(service):
    """Switching a workspace's driver off also keeps its queued runs from starting
    (they end in error, uncharged), like a service whose driver is disabled."""
    t = gov_tenant(service, "drvq")
    put_settings(t.client, concurrency=1)
    a = t.client.run("import time; print('up', flush=True); time.sleep(2)", wait=False)
    t.client.wait_state(a["id"], "running", timeout=30)
    b = t.client.run("print('queued before the switch')", wait=False)
    put_settings(t.client, driver="disabled")
    try:
        done = t.client.wait_state(b["id"], GOV_TERMINAL, timeout=30)
        assert done["state"] != "succeeded" and done["result"] is None, \
            f"a queued run started after its workspace's driver was disabled: {done['state']}"
    finally:
        put_settings(t.client, driver="native")
    assert balance(t.client) == 998


# ------------------------------------------------------------ tool allow-list


def test_tool_allow_list(service):
    t = gov_tenant(service, "tools")
    mid, member = t.person_in("member")
    bal = balance(t.client)
    doc = put_settings(t.client, tools=[])
    assert doc["tools"] == [], doc
    for wait in (False, True):
        status, _, err = member.post_run("print('never')", wait=wait, description="tool test")
        assert_error(status, err, "tool_not_allowed", 403)
        assert "code_execution" in err["error"]["message"], f"the refusal does not name the tool: {err}"
    put_settings(t.client, tools=["run_skill_script"])
    status, _, err = member.post_run("print('never')")
    assert_error(status, err, "tool_not_allowed", 403)
    assert balance(t.client) == bal, "a refused tool call was charged"
    assert [r for r in member.list_runs() if r["state"] not in ("denied",)] == [], \
        "a refused tool call started a run"
    denied = audit_events(t.client, kind="capability.invoke_denied")
    mine = [e for e in denied if e["person_id"] == mid]
    assert len(mine) >= 3, f"want a capability.invoke_denied event per refusal: {denied}"
    assert all(e["kind"] == "capability.invoke_denied" for e in denied)
    assert "code_execution" in json.dumps(mine[0]["data"]), mine[0]
    assert not [e for e in audit_events(t.client, kind="tool.call")], "a refused call left a tool.call"
    put_settings(t.client, tools=["code_execution"])
    run = member.run("print('allowed')")
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "allowed\n"
    allowed = audit_events(t.client, kind="capability.invoke_allowed", run_id=run["id"])
    assert len(allowed) == 1 and allowed[0]["person_id"] == mid, allowed
