"""The web console's sign-in (issue 36, docs/api.md "The console: sign-in"),
over HTTP against the real `airlock serve`: login links from the real
`airlock admin login-link`, the session cookie and its flags, CSRF, sign-out,
roles and tenants under a session, and a person's API keys by name."""
import json
import subprocess
import re
import time
import uuid

import pytest

from conftest import need

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


# ------------------------------------------------- an attacker's review
# Each test below shows an attack's control (what the same request does
# when it is honest), then that the attack itself is refused.


def test_sign_in_takes_json_alone(service, ws):
    """Login CSRF: another site's page can POST a text/plain body (a form
    with enctype=text/plain, or fetch in no-cors mode) but cannot send
    Content-Type: application/json without a CORS preflight; a sign-in it
    could make would put the visitor in the attacker's session."""
    token = login_link(service, ws.member_id)
    body = json.dumps({"token": token}).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None,
                  "application/jsonx", "text/json"):
        headers = {"Content-Type": ctype} if ctype else {}
        status, hdrs, doc = service.request("POST", "/v1/session", body=body, key=None, headers=headers)
        assert_error(status, doc, "unsupported_media_type", 415)
        assert "set-cookie" not in hdrs and "application/json" in doc["error"]["message"], doc
    # refused unread: the link is still good, as JSON (any case, with a charset)
    status, hdrs, doc = service.request("POST", "/v1/session", body=body, key=None,
                                        headers={"Content-Type": "Application/JSON; charset=utf-8"})
    assert status == 201 and cookie_of(hdrs)[0], (status, doc)


def test_unknown_tokens_are_refused_alike(service, ws):
    """Guesses: a misshapen, a well-shaped unknown and a used token are all
    401 login_link_invalid, with no cookie and no echo of what was sent."""
    used = login_link(service, ws.member_id)
    service.ok("POST", "/v1/session", want=201, key=None, json={"token": used})
    guesses = ["ll_" + "0" * 40, "ll_" + "i" * 40, used.upper(), used + "0", used[:-1], "x" * 200,
               "ll_\u00e9" + "0" * 39, "ll_%30" + "0" * 37, used]
    for guess in guesses:
        status, hdrs, doc = service.request("POST", "/v1/session", json={"token": guess}, key=None)
        assert_error(status, doc, "login_link_invalid", 401)
        assert "set-cookie" not in hdrs and guess not in json.dumps(doc), (guess, doc)
    status, _, doc = service.request("POST", "/v1/session", json={"token": 7}, key=None)
    assert_error(status, doc, "bad_request")


def test_a_second_session_cookie_is_refused(service, ws):
    """Cookie tossing: a neighbouring subdomain sets its own airlock_session
    (a valid session of the attacker's) with a longer Path, which the
    browser sends first; taking it would have the person work, and type
    secrets, in the attacker's workspace."""
    victim, _, _ = sign_in(service, ws.member_id)
    attacker_tenant = gov_tenant(service, "toss")
    attacker, _, _ = sign_in(service, attacker_tenant.person)
    # control: each cookie alone is its own person
    assert victim.ok("GET", "/v1/session")["person"]["id"] == ws.member_id
    assert attacker.ok("GET", "/v1/session")["person"]["id"] == attacker_tenant.person
    for first, second in ((attacker, victim), (victim, attacker), (attacker, attacker)):
        both = f"airlock_session={first.cookie}; airlock_session={second.cookie}"
        for method, path, body, csrf in (("GET", "/v1/session", None, None),
                                         ("POST", "/v1/keys", {"name": "tossed"}, first.csrf)):
            headers = {"Cookie": both}
            if csrf:
                headers["X-CSRF-Token"] = csrf
            status, _, doc = service.request(method, path, json=body, key=None, headers=headers)
            assert_error(status, doc, "ambiguous_session", 400)
    for con, person in ((victim, ws.member_id), (attacker, attacker_tenant.person)):
        assert not [k for k in con.ok("GET", "/v1/keys")["keys"] if k["name"] == "tossed"]
    # a key still decides alone, whatever cookies come with it
    status, _, doc = service.request("GET", "/v1/session", key=ws.member.key,
                                     headers={"Cookie": f"airlock_session={attacker.cookie}; airlock_session=x"})
    assert status == 200 and doc["person"]["id"] == ws.member_id, doc


def test_csrf_token_is_this_sessions_own(service, ws):
    """Another session's token (the same person's, or another's), an empty
    one, a method override, or a method in lower case: refused, nothing made."""
    con, _, _ = sign_in(service, ws.member_id)
    mine_too, _, _ = sign_in(service, ws.member_id)
    other, _, _ = sign_in(service, ws.approver_id)
    before = {k["id"] for k in con.ok("GET", "/v1/keys")["keys"]}
    attempts = [({"X-CSRF-Token": mine_too.csrf}, "POST"), ({"X-CSRF-Token": other.csrf}, "POST"),
                ({"X-CSRF-Token": ""}, "POST"), ({"X-CSRF-Token": con.csrf + " "}, "POST"),
                ({"X-CSRF-Token": con.csrf.upper()}, "POST"),
                ({"X-HTTP-Method-Override": "GET", "X-Method-Override": "GET"}, "POST"), ({}, "post"),
                ({}, "PUT"), ({}, "OPTIONS")]
    for headers, method in attempts:
        status, _, doc = con.request(method, "/v1/keys", json={"name": "forged"}, csrf=False, headers=headers)
        assert_error(status, doc, "csrf_required", 403)
    assert {k["id"] for k in con.ok("GET", "/v1/keys")["keys"]} == before
    # control: its own token makes one (and revokes it)
    made = con.ok("POST", "/v1/keys", want=201, json={"name": "honest"})
    con.ok("DELETE", f"/v1/keys/{made['key']['id']}")
    # HEAD is GET without a body: it changes nothing
    status, _, _ = con.request("HEAD", "/v1/keys")
    assert status == 200


def test_the_cookie_opens_nothing_outside_v1(service, ws):
    """MCP, Piston, E2B's API and its sandbox plane take keys alone."""
    con, _, _ = sign_in(service, ws.person)
    piston = service.request("GET", "/piston/x/api/v2/runtimes", key=None,
                             headers={"Cookie": f"airlock_session={con.cookie}"})[0]
    assert piston in (401, 404), piston
    for path in ("/sandboxes", "/v2/sandboxes"):
        assert con.request("GET", path)[0] == 401, path
    status, _, _ = con.request("POST", "/sandboxes", json={"templateID": "base"})
    assert status == 401, status
    status, _, _ = con.request("GET", "/files?path=/etc/passwd", headers={"E2b-Sandbox-Id": "isb_nosuch"})
    assert status in (401, 502), status
    # control: the same cookie is the person on /v1
    assert con.ok("GET", "/v1/session")["via"] == "session"


def test_a_sessions_role_is_read_on_each_request(service):
    """A demoted admin's session keeps no admin right, and a session whose
    person is gone opens nothing: the role is the store's, read per request."""
    t = gov_tenant(service, "demote")
    con, _, doc = sign_in(service, t.person)
    assert doc["person"]["role"] == "admin"
    status, _, _ = con.request("GET", "/v1/audit/checkpoint")
    assert status == 200, status
    con.ok("GET", "/v1/settings")
    assert service.sql_count("UPDATE people SET role = 'member' WHERE id = ?", t.person) == 1
    try:
        assert con.ok("GET", "/v1/session")["person"]["role"] == "member"
        status, _, doc = con.request("GET", "/v1/audit/checkpoint")
        assert status == 403, (status, doc)
        status, _, doc = con.request("PATCH", "/v1/settings", json={"timeout_s": 5})
        assert_error(status, doc, "forbidden", 403)
    finally:
        service.sql_count("UPDATE people SET role = 'admin' WHERE id = ?", t.person)
    assert con.request("GET", "/v1/audit/checkpoint")[0] == 200


def test_sign_out_is_final_and_a_cookie_is_never_chosen(service, ws):
    """Fixation: a cookie value the attacker picks (or an ended session's)
    opens nothing, and signing in mints a new one whatever cookie came."""
    con, _, _ = sign_in(service, ws.member_id)
    old = con.cookie
    con.ok("DELETE", "/v1/session", want=204)
    for value in (old, "cs_" + "0" * 40, "cs_attacker_chosen"):
        status, _, doc = service.request("GET", "/v1/runs", key=None, headers={"Cookie": f"airlock_session={value}"})
        assert_error(status, doc, "session_ended", 401)
    token = login_link(service, ws.member_id)
    status, hdrs, doc = service.request("POST", "/v1/session", json={"token": token}, key=None,
                                        headers={"Cookie": "airlock_session=cs_attacker_chosen"})
    assert status == 201 and cookie_of(hdrs)[0] not in (old, "cs_attacker_chosen"), hdrs


def test_login_link_defaults_to_the_configured_public_url(services, tmp_path):
    svc = services.start("pub", {"public_url": "https://console.example.com/base/"})
    person = re.search(r"^first admin person: (per_\w+)$", svc.admin("bootstrap"), re.M).group(1)
    cfg = svc.state.parent / f"{svc.state.name}.conf"
    proc = subprocess.run([str(svc.binary), "admin", "--config", str(cfg), *svc.store_args(), "login-link",
                           "--person", person], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc
    out = proc.stdout.decode().strip()
    assert out.startswith("https://console.example.com/base/login#token=ll_"), out
    # and redeems on the service whose config it is; --url still wins
    token = LINK.match(out).group(2)
    assert svc.request("POST", "/v1/session", json={"token": token}, key=None)[0] == 201
    out = svc.admin("login-link", "--person", person, "--url", "http://127.0.0.1:1")
    assert out.startswith("http://127.0.0.1:1/login#token="), out
    # the config names the state too: no --state needed
    bad = tmp_path / "bad.conf"
    bad.write_text("public_url = ftp://x\n")
    proc = subprocess.run([str(svc.binary), "admin", "--config", str(bad), *svc.store_args(), "list"],
                          capture_output=True, timeout=60)
    assert proc.returncode != 0 and b"public_url" in proc.stderr, proc


def test_admin_list_shows_key_names(service, ws):
    name = "listed-" + uuid.uuid4().hex[:6]
    ws.member.ok("POST", "/v1/keys", want=201, json={"name": name})
    out = service.admin("list")
    line = [ln for ln in out.splitlines() if f"name={name}" in ln]
    assert len(line) == 1 and f"person_id={ws.member_id}" in line[0], out[-2000:]


def test_the_key_cap_holds_under_a_burst(service):
    """100 keys not revoked per person: a burst of creations at once, on the
    cap's edge, makes no more than the cap's worth (counted and made under
    the person's lock)."""
    from concurrent.futures import ThreadPoolExecutor
    t = gov_tenant(service, "keycap")
    con, _, _ = sign_in(service, t.person)
    have = len([k for k in con.ok("GET", "/v1/keys")["keys"] if not k["revoked_at"]])
    for i in range(100 - 4 - have):
        con.ok("POST", "/v1/keys", want=201, json={"name": f"k{i}"})
    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(lambda i: con.request("POST", "/v1/keys", json={"name": f"burst{i}"})[0], range(12)))
    assert sorted(statuses) == [201] * 4 + [409] * 8, statuses
    status, _, doc = con.request("POST", "/v1/keys", json={"name": "one-more"})
    assert_error(status, doc, "limit_reached", 409)
    assert "revoke one" in doc["error"]["message"], doc
    assert len([k for k in con.ok("GET", "/v1/keys")["keys"] if not k["revoked_at"]]) == 100


def test_the_token_and_cookie_leak_nowhere(services):
    """With a line per request logged: neither the login token nor the
    session's cookie or CSRF token is in the service's log, its audit trail
    or an error message, however they were sent (a misused ?token= too)."""
    svc = services.start("leak", {"access_log": "true"})
    person = re.search(r"^first admin person: (per_\w+)$", svc.admin("bootstrap"), re.M).group(1)
    token = login_link(svc, person)
    svc.request("POST", f"/login?token={token}", key=None)
    svc.request("GET", f"/v1/session?token={token}", key=None)
    status, hdrs, doc = svc.request("POST", "/v1/session", json={"token": token}, key=None)
    assert status == 201, doc
    cookie = cookie_of(hdrs)[0]
    con = Console(svc, cookie, doc["csrf_token"])
    con.ok("GET", "/v1/runs")
    status, _, again = svc.request("POST", "/v1/session", json={"token": token}, key=None)
    assert status == 401 and token not in json.dumps(again)
    con.request("POST", "/v1/keys", json={"name": "x"}, csrf=False)
    audit = json.dumps(svc.ok("GET", "/v1/audit", query={"limit": 200}))
    con.ok("DELETE", "/v1/session", want=204)
    log = svc.log_path.read_text(errors="replace")
    assert '"route":"/v1/session"' in log.replace(" ", ""), "the access log is on: it logged the sign-in"
    # the refused reuse is seen, with its address and why, not its token
    refused = [json.loads(ln) for ln in log.splitlines() if '"signin.refused"' in ln]
    assert refused and refused[-1]["address"] == "127.0.0.1", refused
    assert refused[-1]["why"] == "this sign-in link was used already", refused
    for secret in (token, token[3:], cookie, cookie[3:], doc["csrf_token"]):
        assert secret not in log, f"{secret[:8]}... is in the service's log"
        assert secret not in audit, f"{secret[:8]}... is in the audit trail"


def test_a_stream_ends_with_its_session(service, ws):
    """A run's event stream opened by a session ends within seconds of the
    session's sign-out, not when the run does (which here is much later);
    the same person's other session's stream goes on (the control)."""
    import http.client
    import socket
    run = ws.member.ok("POST", "/v1/runs", want=201,
                       json={"language": "python", "code": "import time\nprint('start', flush=True)\ntime.sleep(40)"})
    try:
        ended, going = sign_in(service, ws.member_id)[0], sign_in(service, ws.member_id)[0]

        def follow(con):
            conn = http.client.HTTPConnection(service.host, service.port, timeout=20)
            conn.request("GET", f"/v1/runs/{run['id']}/events", headers={"Cookie": f"airlock_session={con.cookie}"})
            resp = conn.getresponse()
            assert resp.status == 200, resp.status
            return conn, resp
        a_conn, a = follow(ended)
        b_conn, b = follow(going)
        ended.ok("DELETE", "/v1/session", want=204)
        t0 = time.monotonic()
        while a.readline():
            assert time.monotonic() - t0 < 15, "the stream went on after its session ended"
        took = time.monotonic() - t0
        assert took < 12, took
        # the control's stream is still open: a read waits (times out), it does not end
        b_conn.sock.settimeout(1.0)
        try:
            while True:
                line = b.readline()
                assert line, "the other session's stream ended too"
        except (socket.timeout, TimeoutError):
            pass
        a_conn.close()
        b_conn.close()
    finally:
        ws.member.cancel(run["id"])


def _serve_sh(state, port, **env):
    """scripts/serve.sh (what `make serve` runs) started with STATE and
    LISTEN: (its process, the login link it printed)."""
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    e = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    e.update(STATE=str(state), LISTEN=f"127.0.0.1:{port}", IMAGES=str(state / "images"), **env)
    proc = subprocess.Popen(["sh", "scripts/serve.sh"], cwd=root, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    link = None
    deadline = time.monotonic() + 30
    for raw in proc.stdout:
        line = raw.decode(errors="replace").strip()
        if "/login#token=" in line and LINK.match(line):
            link = line
        if '"service.start"' in line or time.monotonic() > deadline:
            break
    return proc, link


def test_make_serve_prints_a_link_that_signs_in(tmp_path):
    """A stranger's path: `make serve`, open the printed link, signed in as
    the first admin; each start prints a new one; PUBLIC_URL is the link's
    address and makes the cookie Secure."""
    from service_util import free_port
    from pathlib import Path
    need((Path(__file__).resolve().parents[2] / "build" / "airlock").exists(),
         "the release build ./build/airlock, which scripts/serve.sh runs (make build)")
    state, port = tmp_path / "state", free_port()
    for env, base in (({}, f"http://127.0.0.1:{port}"), ({"PUBLIC_URL": "https://console.example.com/"},
                                                         "https://console.example.com")):
        proc, link = _serve_sh(state, port, **env)
        try:
            assert link and link.startswith(base + "/login#token="), link
            token = LINK.match(link).group(2)
            conn = __import__("http.client").client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/v1/session", body=json.dumps({"token": token}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            doc = json.loads(resp.read())
            assert resp.status == 201 and doc["person"]["role"] == "admin", doc
            assert ("Secure" in resp.getheader("Set-Cookie")) == bool(env), resp.getheader("Set-Cookie")
        finally:
            proc.terminate()
            proc.wait(timeout=40)
            proc.stdout.close()


def test_another_workspaces_admin_cannot_touch_a_key_by_id(service, ws):
    """Key ids are not secrets: another workspace's admin, by session or by
    key, revoking this workspace's key by its id gets 404, and the key works."""
    made = ws.member.ok("POST", "/v1/keys", want=201, json={"name": "victim"})
    victim = service.with_key(made["secret"])
    other = gov_tenant(service, "keythief")
    thief, _, _ = sign_in(service, other.person)
    for attempt in (lambda: thief.request("DELETE", f"/v1/keys/{made['key']['id']}"),
                    lambda: other.client.request("DELETE", f"/v1/keys/{made['key']['id']}")):
        status, _, doc = attempt()
        assert_error(status, doc, "not_found", 404)
    assert victim.ok("GET", "/v1/session")["person"]["id"] == ws.member_id
    assert made["key"]["id"] not in {k["id"] for k in thief.ok("GET", "/v1/keys")["keys"]}
    # control: this workspace's admin can
    assert ws.client.ok("DELETE", f"/v1/keys/{made['key']['id']}")["revoked_at"]
    assert victim.request("GET", "/v1/session")[0] == 401


def test_the_activity_stream_ends_with_its_session(service, ws):
    """The console's Activity page holds GET /v1/events open: after sign-out
    it must stop telling the workspace's runs to whoever holds the socket."""
    import http.client
    con, _, _ = sign_in(service, ws.member_id)
    conn = http.client.HTTPConnection(service.host, service.port, timeout=20)
    conn.request("GET", "/v1/events", headers={"Cookie": f"airlock_session={con.cookie}"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    assert resp.readline().startswith(b": listening")
    con.ok("DELETE", "/v1/session", want=204)
    # a session is asked about every 5 s: 9 s without the stream's end is too long
    conn.sock.settimeout(9)
    try:
        while resp.readline():
            pass
    except TimeoutError:
        pytest.fail("the activity stream went on after its session ended")
    finally:
        conn.close()
