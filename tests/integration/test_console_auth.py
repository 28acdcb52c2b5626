"""The web console's sign-in (issue 36, docs/api.md "The console: sign-in"),
over HTTP against the real `airlock serve`: login links from the real
`airlock admin login-link`, the session cookie and its flags, CSRF, sign-out,
roles and tenants under a session, and a person's API keys by name."""
import json
import re
import time
import uuid

import pytest

from service_util import assert_error, gov_tenant, put_settings, service, services  # noqa: F401

LINK = re.compile(r"^(https?://[^#\s]+)/login#token=(ll_[0-9a-z]+)$")


def login_link(svc, person, *extra):
    """`airlock admin login-link --person PERSON ...`: the token of the one line it prints."""
    out = svc.admin("login-link", "--person", person, *extra).strip()
    m = LINK.match(out)
    assert m, f"login-link printed {out!r}, not BASE/login#token=TOKEN"
    return m.group(2)


class Console:
    """A browser's view of the API: the session cookie, and the CSRF token
    GET /v1/session gave, on every request; no key."""

    def __init__(self, svc, cookie, csrf=None):
        self.svc, self.cookie, self.csrf = svc, cookie, csrf

    def request(self, method, path, json=None, csrf=True, headers=None, **kw):
        h = {"Cookie": f"airlock_session={self.cookie}"}
        if csrf and self.csrf and method not in ("GET", "HEAD"):
            h["X-CSRF-Token"] = self.csrf
        h.update(headers or {})
        return self.svc.request(method, path, json=json, key=None, headers=h, timeout=30, **kw)

    def ok(self, method, path, want=200, **kw):
        status, _, doc = self.request(method, path, **kw)
        assert status == want, f"{method} {path} (session): want {want}, got {status}: {doc!r}"
        return doc


def cookie_of(headers):
    """The airlock_session value and the attributes of a Set-Cookie."""
    raw = headers.get("set-cookie", "")
    parts = [p.strip() for p in raw.split(";")]
    name, _, value = parts[0].partition("=")
    assert name == "airlock_session", f"Set-Cookie: {raw!r}"
    return value, {p.split("=", 1)[0].lower(): (p.split("=", 1)[1] if "=" in p else True) for p in parts[1:]}


def sign_in(svc, person, headers=None):
    """Redeem a new link for PERSON: (Console with its CSRF token, the POST's headers, its session document)."""
    token = login_link(svc, person)
    status, hdrs, doc = svc.request("POST", "/v1/session", json={"token": token}, key=None, headers=headers)
    assert status == 201, f"POST /v1/session: {status} {doc!r}"
    value, _ = cookie_of(hdrs)
    return Console(svc, value, doc["csrf_token"]), hdrs, doc


@pytest.fixture(scope="module")
def ws(service):
    """A workspace with an admin (key), an approver and a member (ids and key clients)."""
    t = gov_tenant(service, "cons")
    t.approver_id, t.approver = t.person_in("approver")
    t.member_id, t.member = t.person_in("member")
    return t


def test_link_signs_in_with_a_strict_cookie(service, ws):
    token = login_link(service, ws.member_id)
    status, hdrs, doc = service.request("POST", "/v1/session", json={"token": token}, key=None)
    assert status == 201, (status, doc)
    value, attrs = cookie_of(hdrs)
    assert re.fullmatch(r"cs_[0-9a-z]{30,}", value), value
    assert attrs.get("httponly") is True and attrs.get("samesite") == "Strict", attrs
    assert attrs.get("path") == "/" and attrs.get("max-age") == "43200", attrs
    assert "secure" not in attrs, "plain http on loopback: the cookie could never come back if Secure"
    assert doc["via"] == "session" and doc["person"]["id"] == ws.member_id and doc["person"]["role"] == "member"
    assert doc["workspace"]["id"] == ws.workspace and doc["org"]["id"] == ws.org
    assert re.fullmatch(r"[0-9a-f]{64}", doc["csrf_token"]), doc
    left = time.mktime(time.strptime(doc["expires_at"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())
    assert 12 * 3600 - 120 < left <= 12 * 3600 + 5, doc
    con = Console(service, value, doc["csrf_token"])
    # the cookie is the person, on the /v1 area: the same document again, and runs
    again = con.ok("GET", "/v1/session")
    assert again == doc
    assert "runs" in con.ok("GET", "/v1/runs")
    # but on nothing else: MCP and E2B's API take keys alone
    status, _, _ = con.request("POST", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                               headers={"Accept": "application/json, text/event-stream"})
    assert status == 401, status
    status, _, _ = con.request("GET", "/v2/sandboxes")
    assert status == 401, status
    # a key sees the same person, without a CSRF token or an expiry
    by_key = ws.member.ok("GET", "/v1/session")
    assert by_key["via"] == "key" and by_key["csrf_token"] is None and by_key["expires_at"] is None
    assert by_key["person"] == doc["person"]
    # both ends are in the workspace's audit trail; no secret is
    events = ws.client.ok("GET", "/v1/audit", query={"limit": 200})["events"]
    kinds = [e["kind"] for e in events if e["person_id"] == ws.member_id]
    assert "login_link.created" in kinds and "session.signed_in" in kinds, kinds
    text = json.dumps(events)
    assert token not in text and value not in text


def test_secure_cookie_behind_an_https_proxy(service, ws, services):
    _, hdrs, _ = sign_in(service, ws.member_id, headers={"X-Forwarded-Proto": "https"})
    _, attrs = cookie_of(hdrs)
    assert attrs.get("secure") is True, attrs
    # or when the operator says the console is reached over https
    tls = services.start("tls", {"public_url": "https://airlock.example.com"})
    # (bootstrap, run again, names the first admin: whom `make serve` prints a link for)
    person = re.search(r"^first admin person: (per_\w+)$", tls.admin("bootstrap"), re.M).group(1)
    _, hdrs, _ = sign_in(tls, person)
    _, attrs = cookie_of(hdrs)
    assert attrs.get("secure") is True, attrs


def test_changes_need_the_csrf_token(service, ws):
    con, _, _ = sign_in(service, ws.member_id)
    body = {"language": "python", "code": "print(6 * 7)"}
    status, _, doc = con.request("POST", "/v1/runs", json=body, csrf=False)
    assert_error(status, doc, "csrf_required", 403)
    status, _, doc = con.request("POST", "/v1/runs", json=body, headers={"X-CSRF-Token": "0" * 64})
    assert_error(status, doc, "csrf_required", 403)
    status, _, doc = con.request("POST", "/v1/runs", json=body, headers={"X-CSRF-Token": con.csrf[:-1]})
    assert_error(status, doc, "csrf_required", 403)
    # nothing was made by the refused ones; the right token runs it as the person
    before = len(ws.member.list_runs())
    run = con.ok("POST", "/v1/runs?wait=true", want=200, json=body)
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "42\n", run
    assert len(ws.member.list_runs()) == before + 1
    # a key wins over the cookie: a bad key is refused even with a good session
    status, _, doc = service.request("GET", "/v1/runs", key="al_" + "x" * 40,
                                     headers={"Cookie": f"airlock_session={con.cookie}"})
    assert_error(status, doc, "unauthorized")


def test_a_link_is_used_once_and_expires(service, ws):
    token = login_link(service, ws.member_id)
    status, _, doc = service.request("POST", "/v1/session", json={"token": token}, key=None)
    assert status == 201, doc
    status, hdrs, doc = service.request("POST", "/v1/session", json={"token": token}, key=None)
    assert_error(status, doc, "login_link_invalid", 401)
    assert "used already" in doc["error"]["message"] and "login-link" in doc["error"]["message"], doc
    assert "set-cookie" not in hdrs
    short = login_link(service, ws.member_id, "--ttl-s", "1")
    time.sleep(1.3)
    status, _, doc = service.request("POST", "/v1/session", json={"token": short}, key=None)
    assert_error(status, doc, "login_link_invalid", 401)
    assert "expired" in doc["error"]["message"], doc
    status, _, doc = service.request("POST", "/v1/session", json={"token": "ll_" + "0" * 40}, key=None)
    assert_error(status, doc, "login_link_invalid", 401)
    # the operator's bounds: a link lives 1 to 900 seconds
    for bad in ("0", "901", "x"):
        proc = service.admin_run("login-link", "--person", ws.member_id, "--ttl-s", bad)
        assert proc.returncode != 0 and b"1 to 900" in proc.stderr, proc
    proc = service.admin_run("login-link", "--person", "per_nobody")
    assert proc.returncode != 0 and b"no person" in proc.stderr, proc
    out = service.admin("login-link", "--person", ws.member_id, "--url", "https://console.example.com/")
    assert LINK.match(out.strip()) and out.startswith("https://console.example.com/login#token="), out


def test_sign_in_bodies_are_bounded_and_checked(service):
    status, _, doc = service.request("POST", "/v1/session", body=b"x" * 5000, key=None,
                                     headers={"Content-Type": "application/json"})
    assert_error(status, doc, "payload_too_large")
    status, _, doc = service.request("POST", "/v1/session", body=b"{not json", key=None,
                                     headers={"Content-Type": "application/json"})
    assert_error(status, doc, "bad_request")
    status, _, doc = service.request("POST", "/v1/session", json={"token": "ll_x", "person": "admin"}, key=None)
    assert_error(status, doc, "bad_request")


def test_sign_out_ends_the_session_at_once(service, ws):
    con, _, _ = sign_in(service, ws.member_id)
    other, _, _ = sign_in(service, ws.member_id)
    status, _, doc = con.request("DELETE", "/v1/session", csrf=False)
    assert_error(status, doc, "csrf_required", 403)
    status, hdrs, _ = con.request("DELETE", "/v1/session")
    assert status == 204, status
    value, attrs = cookie_of(hdrs)
    assert value == "" and attrs.get("max-age") == "0", hdrs
    status, _, doc = con.request("GET", "/v1/runs")
    assert_error(status, doc, "session_ended", 401)
    # the person's other session is another session
    other.ok("GET", "/v1/runs")
    kinds = [e["kind"] for e in ws.client.ok("GET", "/v1/audit", query={"limit": 200})["events"]]
    assert "session.signed_out" in kinds
    # a key is not a session: nothing to sign out
    status, _, doc = ws.member.request("DELETE", "/v1/session")
    assert_error(status, doc, "not_a_session", 400)


def test_a_session_has_its_persons_role(service, ws):
    member, _, _ = sign_in(service, ws.member_id)
    status, _, doc = member.request("PATCH", "/v1/settings", json={"timeout_s": 5})
    assert_error(status, doc, "forbidden", 403)
    status, _, doc = member.request("GET", "/v1/audit/checkpoint")
    assert status == 403, (status, doc)
    put_settings(ws.client, approval_policy="always", approval_ttl_s=600)
    try:
        approver, _, _ = sign_in(service, ws.approver_id)
        run = approver.ok("POST", "/v1/runs", want=201, json={"language": "python", "code": "print('mine')"})
        assert run["state"] == "pending_approval", run
        status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve",
                                          json={"hash": run["approval"]["hash"]})
        assert_error(status, doc, "separation_of_duties", 403)
        # a member's session may not approve another's run either
        status, _, doc = member.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
        assert_error(status, doc, "forbidden", 403)
        assert ws.client.get_run(run["id"])["state"] == "pending_approval"
        ws.client.cancel(run["id"])
    finally:
        put_settings(ws.client, approval_policy="never")


def test_another_tenants_session_sees_nothing_of_this_one(service, ws):
    mine = ws.member.run("print('tenant a')")
    other = gov_tenant(service, "consb")
    con, _, doc = sign_in(service, other.person)
    assert doc["workspace"]["id"] == other.workspace != ws.workspace
    ids = {r["id"] for r in con.ok("GET", "/v1/runs")["runs"]}
    assert mine["id"] not in ids
    status, _, doc = con.request("GET", f"/v1/runs/{mine['id']}")
    assert_error(status, doc, "not_found")
    keys = con.ok("GET", "/v1/keys")["keys"]
    assert keys and all(k["person"]["id"] == other.person for k in keys), keys


def test_keys_are_shown_once_listed_by_name_and_revoked(service, ws):
    con, _, _ = sign_in(service, ws.member_id)
    made = con.ok("POST", "/v1/keys", want=201, json={"name": "ci-agent"})
    secret, key = made["secret"], made["key"]
    assert secret.startswith("al_") and key["name"] == "ci-agent" and key["revoked_at"] is None, made
    assert key["person"]["id"] == ws.member_id and secret.startswith(key["prefix"])
    # the secret is a key like any other
    agent = service.with_key(secret)
    assert agent.ok("GET", "/v1/session")["person"]["id"] == ws.member_id
    # lists never show a secret; last use is recorded
    status, _, raw = con.request("GET", "/v1/keys")
    assert status == 200
    listed = {k["id"]: k for k in raw["keys"]}
    assert secret not in json.dumps(raw) and all("secret" not in k and "hash" not in k for k in raw["keys"])
    assert listed[key["id"]]["name"] == "ci-agent" and listed[key["id"]]["last_used_at"], listed[key["id"]]
    assert {k["person"]["id"] for k in raw["keys"]} == {ws.member_id}, "a member lists their own keys only"
    # an admin lists the workspace's
    admin_ids = {k["id"] for k in ws.client.ok("GET", "/v1/keys")["keys"]}
    assert key["id"] in admin_ids
    # a member cannot revoke another's key; the approver's key is untouched
    approver_key = ws.approver.ok("GET", "/v1/keys")["keys"][0]
    status, _, doc = con.request("DELETE", f"/v1/keys/{approver_key['id']}")
    assert_error(status, doc, "not_found")
    ws.approver.ok("GET", "/v1/session")
    # revoke: refused from the next request on
    gone = con.ok("DELETE", f"/v1/keys/{key['id']}")
    assert gone["id"] == key["id"] and gone["revoked_at"], gone
    status, _, doc = agent.request("GET", "/v1/runs")
    assert_error(status, doc, "unauthorized")
    assert con.ok("DELETE", f"/v1/keys/{key['id']}")["revoked_at"] == gone["revoked_at"]
    kinds = [(e["kind"], e["data"].get("key_id")) for e in ws.client.ok("GET", "/v1/audit", query={"limit": 200})["events"]]
    assert ("key.created", key["id"]) in kinds and ("key.revoked", key["id"]) in kinds, kinds
    # an admin revokes any of the workspace's keys
    extra = service.with_key(ws.member.ok("POST", "/v1/keys", want=201, json={"name": "spare"})["secret"])
    spare = [k for k in ws.client.ok("GET", "/v1/keys")["keys"] if k["name"] == "spare"][0]
    assert ws.client.ok("DELETE", f"/v1/keys/{spare['id']}")["revoked_at"]
    assert extra.request("GET", "/v1/runs")[0] == 401


@pytest.mark.parametrize("name", ["", "x" * 65, "tab\there", "caf\u00e9", None, 7])
def test_key_names_are_checked(ws, name):
    status, _, doc = ws.member.request("POST", "/v1/keys", json={"name": name})
    assert_error(status, doc, "bad_request")


def test_admin_key_create_takes_a_name(service, ws):
    out = service.admin("key", "create", "--person", ws.member_id, "--name", "deploy-" + uuid.uuid4().hex[:6])
    secret = re.search(r"\b(al_[A-Za-z0-9_\-]+)", out).group(1)
    names = {k["name"] for k in service.with_key(secret).ok("GET", "/v1/keys")["keys"]}
    assert any(n.startswith("deploy-") for n in names) and "default" in names, names
    proc = service.admin_run("key", "create", "--person", ws.member_id, "--name", "x" * 65)
    assert proc.returncode != 0 and b"1 to 64" in proc.stderr, proc
