"""P. The E2B-compatible API as an attacker uses it (docs/security.md, group P).

Each case differential: its ingredient is shown working first (the file a
command reads really is the one written, the variable really reaches the
command), then the attack fails against airlock."""
import base64
import os
import re
import subprocess
import json
import struct
import threading
import time

from service_util import audit_events, gov_tenant, put_settings, service, services  # noqa: F401


def create(service, key, **body):
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", **body},
                                     headers={"X-API-KEY": key}, key=None)
    assert status == 201, (status, doc)
    return doc["sandboxID"], doc["envdAccessToken"]


def plane(service, sid, token, method, path, body=None, headers=None, json_body=None):
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", **({"X-Access-Token": token} if token else {}),
         **(headers or {})}
    return service.request(method, path, key=None, body=body, json=json_body, headers=h)


def write(service, sid, token, path, data):
    b = "pbattery"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{b}--\r\n".encode()
    status, _, doc = plane(service, sid, token, "POST", "/files?path=" + path, body=body,
                           headers={"Content-Type": f"multipart/form-data; boundary={b}"})
    assert status == 200, (status, doc)


def run_command(service, sid, token, cmd, envs=None):
    """commands.run(CMD) as the SDK sends it: (stdout bytes, the end event or the end-stream error)."""
    proc = {"cmd": "/bin/bash", "args": ["-l", "-c", cmd], **({"envs": envs} if envs else {})}
    body = json.dumps({"process": proc}).encode()
    env = struct.pack(">BI", 0, len(body)) + body
    status, _, raw = plane(service, sid, token, "POST", "/process.Process/Start", body=env, headers={
        "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
    assert status == 200, (status, raw)
    raw = raw if isinstance(raw, bytes) else raw.encode() if isinstance(raw, str) else bytes(raw)
    out, end, i = b"", None, 0
    while i < len(raw):
        f, n = struct.unpack(">BI", raw[i:i + 5])
        msg = json.loads(raw[i + 5:i + 5 + n] or b"{}")
        i += 5 + n
        ev = msg.get("event", {})
        if "data" in ev and ev["data"].get("stdout"):
            out += base64.b64decode(ev["data"]["stdout"])
        if "end" in ev:
            end = ev["end"]
        if f == 2 and msg.get("error"):
            end = msg["error"]
    return out, end


def key_id_of(svc, key):
    """The key id of KEY in `airlock admin list` (as test_battery_n_tenant.py finds it)."""
    for line in svc.admin("list").splitlines():
        m = re.search(r"\bid=(key_[A-Za-z0-9]+)\b.*\bkey=([A-Za-z0-9_]+)\.\.\.", line)
        if m and key.startswith(m.group(2)):
            return m.group(1)
    raise AssertionError(f"key {key[:10]}... not in airlock admin list")


def wait_pending(client, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, doc = client.request("GET", "/v1/runs", query={"state": "pending_approval"})
        assert status == 200, (status, doc)
        runs = doc.get("runs", doc.get("data", [])) if isinstance(doc, dict) else doc
        if runs:
            return runs[0]
        time.sleep(0.1)
    raise AssertionError("no run waits for approval")


# ------------------------------------------------------------ governance

def test_p1_a_sandbox_command_runs_on_the_files_its_approver_saw(service):
    """A command of a sandbox in an approval-required workspace reads its
    home's files. Once it waits for approval, the requester rewrote a file
    the approver could not see: the approved command ran on the new bytes.
    Now the home is pinned when the command is asked for (the card lists
    each file's sha256, the hash binds them) and the box gets exactly that."""
    t = gov_tenant(service, "pappr")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    sid, token = create(service, t.key)
    write(service, sid, token, "/home/user/note.txt", b"benign\n")
    got = {}
    th = threading.Thread(target=lambda: got.update(r=run_command(service, sid, token, "cat note.txt")))
    th.start()
    run = wait_pending(t.client)
    status, _, full = t.client.request("GET", f"/v1/runs/{run['id']}")
    card = full["approval"]
    # the attack: the file changes after the card was made
    write(service, sid, token, "/home/user/note.txt", b"EVIL\n")
    # the ingredient: a write the sandbox takes is what its next command reads
    assert (service.state / "sandboxes" / sid / "home" / "note.txt").read_bytes() == b"EVIL\n"
    # the approver reads each file the command will get, as kept
    files = card["inputs"]["sandbox_files"]
    status, _, body = approver.request("GET", files[0]["url"])
    assert status == 200 and body == b"benign\n", (status, body, files)
    assert approver.request("GET", f"/v1/runs/{run['id']}/inputs/home-7")[0] == 404
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    assert status == 200, (status, doc)
    th.join(60)
    out, end = got["r"]
    assert out == b"benign\n", (out, end)
    names = [f["path"] for f in card["inputs"].get("sandbox_files", [])]
    assert names == ["note.txt"], card["inputs"]
    # what ran is what was approved, as the audit trail says
    calls = [e for e in audit_events(t.client) if e.get("kind", e.get("type")) == "tool.call"
             and e["data"].get("invocation_id") == run["id"]]
    assert calls and calls[-1]["data"]["input_sha256"] == card["hash"], calls



# ------------------------------------------------------------ resources

PER_PERSON = 20


def test_p2_one_person_cannot_take_every_sandbox_of_the_workspace(service):
    """The workspace may hold 100 live sandboxes; one member (or one leaked
    key) took them all and the workspace's other people could make none.
    Now a person holds at most 20 in a workspace; the others still can."""
    t = gov_tenant(service, "pshare")
    _, hog = t.person_in("member")
    _, other = t.person_in("member")
    made = [create(service, hog.key)[0] for _ in range(PER_PERSON)]
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base"},
                                     headers={"X-API-KEY": hog.key}, key=None)
    assert status == 429 and "one person" in doc["message"], (status, doc)
    # the workspace still has room: another person makes one
    create(service, other.key)
    # and a sandbox killed gives its place back
    status, _, _ = service.request("DELETE", f"/sandboxes/{made[0]}", headers={"X-API-KEY": hog.key}, key=None)
    assert status == 204, status
    create(service, hog.key)


# ------------------------------------------------------------ one rule for a variable's name

def test_p3_a_sandbox_s_variables_are_held_to_its_commands_rule_at_create(service):
    """envVars were checked at create by a copy of the commands' rule that
    lacked the box's own names: a sandbox made with HTTP_PROXY or AIRLOCK_*
    was accepted, and then every command of it was refused. Now one core
    rule checks both, so create says what is wrong."""
    sid, token = create(service, service.key, envVars={"GREETING": "hi"})
    out, end = run_command(service, sid, token, "echo $GREETING $EXTRA", envs={"EXTRA": "there"})
    assert out == b"hi there\n" and end.get("exitCode") == 0, (out, end)
    for name in ("HTTP_PROXY", "no_proxy", "AIRLOCK_NETWORK", "E2B_SANDBOX_ID", "LD_PRELOAD", "BASH_ENV", "1BAD",
                 "A" * 129):
        status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", "envVars": {name: "x"}},
                                         headers={"X-API-KEY": service.key}, key=None)
        assert status == 400 and (name in doc["message"] or "128 bytes" in doc["message"]), (name, status, doc)
        _, end = run_command(service, sid, token, "true", envs={name: "x"})
        assert end.get("code") == "invalid_argument" and name[:64] in end["message"], (name, end)


# ------------------------------------------------------------ what the SDK does with what airlock says

def node(script, env, timeout=120):
    """SCRIPT (an ES module) run by node in tests/e2e, with the e2b SDK; its stdout."""
    from node_util import E2E, npm_ci
    npm_ci()
    full = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "AIRLOCK_"))}
    full.update(env)
    p = subprocess.run(["node", "--input-type=module", "-e", script], cwd=E2E, env=full, capture_output=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (p.returncode, p.stdout.decode(), p.stderr.decode())
    return p.stdout.decode()


def test_p4_a_client_without_the_sandbox_url_never_reaches_e2b_s_cloud(service):
    """Create answered "domain": null, which the SDK reads as E2B's own
    cloud: a client given E2B_API_URL but not E2B_SANDBOX_URL sent the
    sandbox's access token and its files to https://49983-ID.e2b.app. Now
    the domain is a name under .invalid, which resolves nowhere: the call
    fails at once, naming what to set."""
    out = node("""
import { Sandbox } from 'e2b';
const sbx = await Sandbox.create();
try { await sbx.files.write('/home/user/a.txt', 'private'); console.log('WROTE'); }
catch (e) { console.log('REFUSED', e.message, String(e.cause?.message ?? e.cause ?? '')); }
console.log('HOST', sbx.getHost(3000));
await Sandbox.kill(sbx.sandboxId);
""", {"E2B_API_URL": service.base_url, "E2B_API_KEY": service.key})
    assert "REFUSED" in out and "e2b.app" not in out, out
    assert "HOST 3000-sbx_" in out and ".airlock.invalid" in out and "set-e2b-sandbox-url" in out, out


def test_p5_what_a_new_user_is_told(service):
    """A failed command's CommandExitError had an empty message (envd's end
    carries "exit status N" as its error); watchDir answered an HTTP 501 the
    SDK showed as "[unknown] HTTP 501" (a server stream's error goes in its
    end-stream frame). Each now says what happened."""
    out = node("""
import { Sandbox } from 'e2b';
const sbx = await Sandbox.create();
try { await sbx.commands.run('exit 3'); } catch (e) { console.log('EXIT', e.constructor.name, e.exitCode, '|' + e.message + '|'); }
try { await sbx.files.watchDir('/home/user', () => {}); } catch (e) { console.log('WATCH', e.constructor.name, e.message); }
await sbx.kill();
""", {"E2B_API_URL": service.base_url, "E2B_SANDBOX_URL": service.base_url, "E2B_API_KEY": service.key})
    assert "EXIT CommandExitError 3 |exit status 3|" in out, out
    assert "WATCH" in out and "unimplemented" in out and "nothing changes its files" in out, out


# ------------------------------------------------------------ guards: what held (each passed before too)

def test_p6_guard_another_tenant_s_sandbox_and_a_revoked_key(service):
    """Another workspace's sandbox is 404 on every control-plane route and
    401 on the sandbox plane with one's own token; a sandbox whose creating
    key is revoked answers neither plane; the token-less /contexts reach
    nothing else."""
    a, b = gov_tenant(service, "pa"), gov_tenant(service, "pb")
    sid_b, tok_b = create(service, b.key)
    sid_a, tok_a = create(service, a.key)
    write(service, sid_b, tok_b, "/home/user/secret.txt", b"b's\n")
    # the ingredient: B reaches its own
    assert plane(service, sid_b, tok_b, "GET", "/files?path=/home/user/secret.txt")[2] == b"b's\n"
    for method, path, body in (("GET", f"/sandboxes/{sid_b}", None), ("DELETE", f"/sandboxes/{sid_b}", None),
                               ("POST", f"/sandboxes/{sid_b}/timeout", {"timeout": 5}),
                               ("POST", f"/sandboxes/{sid_b}/connect", {"timeout": 5}),
                               ("POST", f"/sandboxes/{sid_b}/pause", None)):
        status, _, doc = service.request(method, path, json=body, headers={"X-API-KEY": a.key}, key=None)
        assert status == 404, (method, path, status, doc)
    for token in (tok_a, None, tok_b[:-1] + ("0" if tok_b[-1] != "0" else "1")):
        status, _, doc = plane(service, sid_b, token, "GET", "/files?path=/home/user/secret.txt")
        assert status == 401 and b"b's" not in (doc if isinstance(doc, bytes) else json.dumps(doc).encode()), doc
    # token-less: the context calls, and nothing past them
    assert plane(service, sid_b, None, "GET", "/contexts")[0] == 200
    for path in ("/contexts/../files?path=/home/user/secret.txt", "/contexts/x/../../files?path=secret.txt"):
        status, _, doc = plane(service, sid_b, None, "GET", path)
        assert status in (401, 404, 405) and b"b's" not in (doc if isinstance(doc, bytes) else b""), (path, status)
    # B's key revoked: its sandbox answers neither plane
    service.admin("key", "revoke", key_id_of(service, b.key))
    status, _, _ = plane(service, sid_b, tok_b, "GET", "/files?path=/home/user/secret.txt")
    assert status == 502, status
    status, _, _ = service.request("GET", f"/sandboxes/{sid_b}", headers={"X-API-KEY": b.key}, key=None)
    assert status == 401, status


def test_p7_files_kept_for_an_approval_count_against_the_storage_quota(services):
    """The home pinned for a command awaiting approval (p1) is the run's
    input: with 2 MiB of storage, a sandbox holding 700 KiB (counted, p12)
    pins it for its first waiting command, and a second is refused
    (quota_exceeded) instead of pinning another copy outside the quota;
    denied, the first's copy goes and there is room again."""
    svc = services.start("pquota", {"storage_quota_mb": 2})
    t = gov_tenant(svc, "pquota")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    sid, token = create(svc, t.key)
    write(svc, sid, token, "/home/user/big.bin", os.urandom(700 * 1024))
    got = {}
    th = threading.Thread(target=lambda: got.update(r=run_command(svc, sid, token, "wc -c big.bin")))
    th.start()
    run = wait_pending(t.client)
    # the ingredient: the copy is there, the run's
    assert (svc.state / "runs" / run["id"] / "sandbox-home" / "big.bin").stat().st_size == 700 * 1024
    out, end = run_command(svc, sid, token, "wc -c big.bin")
    assert out == b"" and end.get("code") == "resource_exhausted" and "storage" in end["message"], (out, end)
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"})
    assert status == 200, (status, doc)
    th.join(60)
    assert "denied" in json.dumps(got["r"][1]), got
    deadline = time.monotonic() + 10
    while (svc.state / "runs" / run["id"]).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (svc.state / "runs" / run["id"]).exists(), "a denied command's copy stays on disk"
    got.clear()
    th = threading.Thread(target=lambda: got.update(r=run_command(svc, sid, token, "wc -c big.bin")))
    th.start()
    run = wait_pending(t.client)
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/deny", json={"reason": "no"})
    th.join(60)


def run_of(client, thread, states, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, doc = client.request("GET", "/v1/runs", query={"thread_id": thread})
        assert status == 200, (status, doc)
        runs = doc.get("runs", doc.get("data", [])) if isinstance(doc, dict) else doc
        for r in runs:
            if r["state"] in states:
                return r
        time.sleep(0.1)
    raise AssertionError(f"no run of {thread} in {states}: {runs}")


def test_p8_killing_a_sandbox_ends_its_commands(service):
    """Sandbox.kill() removed the row and the files, and the sandbox's
    commands ran on to their timeouts (charged, holding the person's
    places), reachable by no one: kill() says "everything is gone" in E2B.
    Now kill (and the reaper) cancel the sandbox's commands that have not
    ended: running, queued or waiting for an approval."""
    t = gov_tenant(service, "pkill")
    sid, token = create(service, t.key)
    got = {}
    th = threading.Thread(target=lambda: got.update(r=run_command(service, sid, token, "echo up; sleep 60")))
    th.start()
    # the ingredient: the command runs
    run = run_of(t.client, f"e2b-{sid}", ("running",))
    status, _, _ = service.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-KEY": t.key}, key=None)
    assert status == 204, status
    ended = run_of(t.client, f"e2b-{sid}", ("canceled", "killed", "error"), timeout=15)
    assert ended["id"] == run["id"], (ended, run)
    th.join(30)
    assert not th.is_alive()
    # and nothing of it stays on disk, whichever ended first
    deadline = time.monotonic() + 10
    while (service.state / "sandboxes" / sid).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not (service.state / "sandboxes" / sid).exists()


def tree_bytes(d):
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


def test_p9_guard_commands_cannot_grow_a_sandbox_past_the_box_s_caps(service):
    """Each command's /work replaces home/ and its /out replaces out/, each
    collected within the box's caps (64 MiB each): commands that each add
    30 MiB to both leave at most 64 MiB in each, whatever their number."""
    sid, token = create(service, service.key)
    root = service.state / "sandboxes" / sid
    for i in range(3):
        out, end = run_command(service, sid, token,
                               f"head -c 31457280 /dev/zero > w{i}.bin; head -c 31457280 /dev/zero > /out/o{i}.bin; "
                               "du -sm /work | cut -f1")
        assert end.get("exitCode") == 0 or i > 0, (out, end)
        # the ingredient: the first command's 30 MiB did come back
        if i == 0:
            assert (root / "home" / "w0.bin").stat().st_size == 31457280
        assert tree_bytes(root / "home") <= 64 << 20 and tree_bytes(root / "out") <= 64 << 20, i



def test_p10_a_sandbox_s_token_is_its_creator_s_alone(service):
    """Sandbox.connect (and the old resume) hand out the sandbox's access
    token to any key of the workspace, and the sandbox plane acts as the
    sandbox's creator. An approver connected to the admin's sandbox, ran a
    command that was recorded as the admin's, and approved it: their own
    code, approved by themselves, charged and audited as another person.
    Now only the creator is handed the token (403 for anyone else); the
    workspace's other people still see, time out and kill it."""
    t = gov_tenant(service, "powner")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600, allow_self_approval=False)
    _, approver = t.person_in("approver")
    # the ingredient: the approver cannot approve a run of their own
    status, _, run = approver.post_run("print(1)")
    assert status == 201 and run["state"] == "pending_approval", (status, run)
    status, _, doc = approver.request("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    assert status == 403, (status, doc)
    sid, _ = create(service, t.key)  # the admin's
    for path in (f"/sandboxes/{sid}/connect", f"/v2/sandboxes/{sid}/connect", f"/sandboxes/{sid}/resume"):
        status, _, doc = service.request("POST", path, json={"timeout": 60}, headers={"X-API-KEY": approver.key},
                                         key=None)
        assert status in (403, 409) and "envdAccessToken" not in doc, (path, status, doc)
    # what is the workspace's stays so: seeing it, its end, its kill
    assert service.request("GET", f"/sandboxes/{sid}", headers={"X-API-KEY": approver.key}, key=None)[0] == 200
    status, _, doc = service.request("POST", f"/sandboxes/{sid}/connect", json={"timeout": 60},
                                     headers={"X-API-KEY": t.key}, key=None)
    assert status == 200 and doc["envdAccessToken"], (status, doc)
    assert service.request("DELETE", f"/sandboxes/{sid}", headers={"X-API-KEY": approver.key}, key=None)[0] == 204


def test_p11_an_upload_over_the_request_cap_is_told_the_cap(service):
    """A 9 MiB upload was refused as "larger than 67108864 bytes": the
    sandbox's cap named for the request's (8 MiB). Now the refusal names
    the cap that refused it."""
    sid, token = create(service, service.key)
    write(service, sid, token, "/home/user/seven.bin", bytes(7 << 20))  # the ingredient: under the cap, taken
    b = "pbattery"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"nine.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + bytes(9 << 20) + f"\r\n--{b}--\r\n".encode()
    status, _, doc = plane(service, sid, token, "POST", "/files?path=/home/user/nine.bin", body=body,
                           headers={"Content-Type": f"multipart/form-data; boundary={b}"})
    assert status == 413 and "8 MiB" in doc["message"] and "67108864" not in doc["message"], (status, doc)


def test_p12_a_sandbox_s_files_count_against_the_storage_quota(services):
    """A sandbox's home/ and out/ (64 MiB each, 100 sandboxes a workspace)
    were disk no quota saw: with 1 MiB of storage, files.write took 600 KiB
    twice, and a command filled its home past the quota. Now what a
    sandbox holds counts as the organisation's storage: a write past the
    quota is refused (507), and so is the next command once one has filled
    it; removing files gives the room back."""
    svc = services.start("psbquota", {"storage_quota_mb": 1})
    t = gov_tenant(svc, "psbquota")
    sid, token = create(svc, t.key)
    write(svc, sid, token, "/home/user/a.bin", os.urandom(600 * 1024))  # the ingredient: within the quota
    b = "pbattery"
    body = (f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + os.urandom(600 * 1024) + \
        f"\r\n--{b}--\r\n".encode()
    status, _, doc = plane(svc, sid, token, "POST", "/files?path=/home/user/b.bin", body=body,
                           headers={"Content-Type": f"multipart/form-data; boundary={b}"})
    assert status == 507 and "storage" in doc["message"], (status, doc)
    # a command may fill it (its run was within the quota when it started) ...
    out, end = run_command(svc, sid, token, "head -c 2097152 /dev/zero > big.bin; echo done")
    assert out == b"done\n", (out, end)
    # ... and then the next is refused, as any run of the organisation
    out, end = run_command(svc, sid, token, "echo again")
    assert out == b"" and end.get("code") == "resource_exhausted" and "storage" in end["message"], (out, end)
    status, _, doc = t.client.post_run("print(1)")
    assert status == 507, (status, doc)
    # removing gives the room back
    status, _, doc = plane(svc, sid, token, "POST", "/filesystem.Filesystem/Remove",
                           json_body={"path": "/home/user/big.bin"}, headers={"Connect-Protocol-Version": "1"})
    assert status == 200, (status, doc)
    out, end = run_command(svc, sid, token, "echo again")
    assert out == b"again\n", (out, end)
