"""The E2B SDKs (npm e2b 2.51.0, @e2b/code-interpreter 2.8.0), unchanged,
running commands and code cells in airlock sandboxes
(tests/e2e/e2b_commands.test.mjs, e2b_code.test.mjs): each is one airlock
run in the sandbox's working directory; and what the SDKs cannot show: the
Connect framing refusing hostile envelopes, envs the box keeps for itself."""
import base64
import json
import os
import struct
import threading
import time

import pytest

from conftest import DRIVER, RUNTIME
from node_util import node_test, npm_ci
from service_util import gov_tenant, put_settings, service  # noqa: F401

# The docker passes (runc, gVisor) run what depends on the driver: a
# sandbox's working directory staged into the container's /work and
# collected back (the SDK's commands that carry files from one command to
# the next, a deleted file gone, an exec bit kept; a hostile tree in the
# home; what a command leaves), a command's timeout and kill, the code
# interpreter's cells. The rest of the sandbox plane's protocol (Connect
# framing, approvals, streams' deadlines) is the service's, whatever runs
# the box: the native passes test it.
ON_DOCKER = DRIVER == "docker"
# the sandbox plane's protocol, not the driver's: the native passes test it
protocol_only = pytest.mark.only_passes("asan", "postgresql")


def test_e2b_commands_sdk(service):
    npm_ci()
    t = gov_tenant(service, "e2bappr")
    put_settings(t.client, approval_policy="always", allow_self_approval=True, approval_ttl_s=600)
    env = {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key, "AIRLOCK_APPROVAL_KEY": t.key}
    if ON_DOCKER:
        # in containers: the tests whose commands carry files (and an exec
        # bit) from one command to the next, and end by timeout or kill
        # (approvals are the service's)
        node_test("e2b_commands.test.mjs", env, expect=3,
                  pattern="files flow between commands|timeoutMs ends a command|each command is an airlock run")
    else:
        node_test("e2b_commands.test.mjs", env, expect=4)


def test_e2b_code_interpreter_sdk(service):
    npm_ci()
    node_test("e2b_code.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key}, expect=1)


# ------------------------------------------------------------ what the SDK cannot show

def create(service, **body):
    status, _, doc = service.request("POST", "/v2/sandboxes", json={"templateID": "base", **body},
                                     headers={"X-API-KEY": service.key})
    assert status == 201, (status, doc)
    return doc["sandboxID"], doc["envdAccessToken"]


def start(service, sid, token, body, flags=0, length=None, headers=None):
    """POST /process.Process/Start with BODY (bytes) in one envelope (its
    flags and length as given): the frames of the answer as (flags, bytes)."""
    env = struct.pack(">BI", flags, len(body) if length is None else length) + body
    status, _, raw = service.request("POST", "/process.Process/Start", key=None, body=env, headers={
        "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
        "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1", **(headers or {})})
    assert status == 200, (status, raw)
    raw = raw if isinstance(raw, bytes) else raw.encode() if isinstance(raw, str) else bytes(raw)
    frames, i = [], 0
    while i < len(raw):
        f, n = struct.unpack(">BI", raw[i:i + 5])
        frames.append((f, raw[i + 5:i + 5 + n]))
        i += 5 + n
    assert i == len(raw), raw
    return frames


@protocol_only
def test_hostile_envelopes_end_in_an_error_frame(service):
    sid, token = create(service)
    ok = b'{"process":{"cmd":"/bin/bash","args":["-l","-c","echo x"]}}'
    for body, flags, length, code in [
        (ok, 1, None, b"invalid_argument"),                     # compressed: refused (not offered)
        (ok, 0, len(ok) + 7, b"invalid_argument"),              # a length that lies
        (ok, 0, 0xFFFFFFFF, b"resource_exhausted"),             # 4 GiB claimed
        (b"[1]", 0, None, b"invalid_argument"),                 # no object
        (b'{"process":{"cmd":"/bin/bash","envs":{"AIRLOCK_NETWORK":"x"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","envs":{"1BAD":"x"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","envs":{"LD_PRELOAD":"/x.so"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","envs":{"A":"x\\u0000y"}}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash","cwd":"/home/user/../../etc"}}', 0, None, b"invalid_argument"),
        (b'{"process":{"cmd":"/bin/bash"},"stdin":true}', 0, None, b"unimplemented"),
    ]:
        frames = start(service, sid, token, body, flags, length)
        assert len(frames) == 1 and frames[0][0] == 2 and code in frames[0][1], (body, flags, length, frames)
    # the same request well formed runs: start, data, end, end-stream
    frames = start(service, sid, token, ok)
    assert [f for f, _ in frames] == [0, 0, 0, 2], frames
    assert b'"start"' in frames[0][1] and b'"stdout":"eAo="' in frames[1][1] and b'"exitCode":0' in frames[2][1]
    assert frames[3][1] == b"{}"


@protocol_only
def test_unary_methods_without_stdin_are_unimplemented(service):
    sid, token = create(service)
    h = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
         "Connect-Protocol-Version": "1"}
    for method in ("SendInput", "CloseStdin", "Update", "NoSuchMethod"):
        status, _, doc = service.request("POST", f"/process.Process/{method}", key=None, json={}, headers=h)
        assert status == 501 and doc["code"] == "unimplemented", (method, status, doc)
    status, _, doc = service.request("POST", "/process.Process/SendSignal", key=None, headers=h,
                                     json={"process": {"pid": 12345}, "signal": "SIGNAL_SIGKILL"})
    assert status == 404 and doc["code"] == "not_found", (status, doc)
    status, _, doc = service.request("POST", "/process.Process/SendSignal", key=None, headers=h,
                                     json={"process": {"pid": 12345}, "signal": "SIGNAL_SIGHUP"})
    assert status == 400 and doc["code"] == "invalid_argument", (status, doc)
    # without the sandbox's token nothing of it runs
    status, _, raw = service.request("POST", "/process.Process/List", key=None, json={},
                                     headers={**h, "X-Access-Token": "wrong"})
    assert status == 401, (status, raw)


def test_links_and_fifos_left_in_home_are_never_followed_by_staging(service, tmp_path):
    """What a hostile tree in a sandbox's home holds (a link to a host file,
    a link to a host directory, a FIFO) is staged as it is: a link is a link
    inside the box (resolved there, never on the host), a FIFO is left out
    (nothing blocks). Differential: the same paths read on the host show
    the secret."""
    sid, token = create(service)
    home = service.state / "sandboxes" / sid / "home"
    secret = tmp_path / "secret.txt"
    secret.write_text("host-secret\n")
    os.chmod(tmp_path, 0o755)
    os.symlink(str(secret), home / "escape")
    os.symlink(str(tmp_path), home / "escape_dir")
    os.mkfifo(home / "pipe")
    (home / "ok.txt").write_text("fine\n")
    assert (home / "escape").read_text() == "host-secret\n"       # the link works on the host
    assert (home / "escape_dir" / "secret.txt").read_text() == "host-secret\n"
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c",
                       "cat ok.txt; cat escape escape_dir/secret.txt 2>&1; test -e pipe || echo no-pipe"]}})
    frames = start(service, sid, token, body.encode())
    text = b"".join(base64.b64decode(json.loads(f)["event"]["data"]["stdout"])
                    for fl, f in frames if fl == 0 and b'"stdout"' in f)
    assert text.startswith(b"fine\n") and b"No such file" in text and text.endswith(b"no-pipe\n"), text
    assert b"host-secret" not in text, text
    # what came back holds no link and no FIFO (only regular files are collected)
    assert sorted(os.listdir(home)) == ["ok.txt"], os.listdir(home)


def stdout_of(frames):
    return b"".join(base64.b64decode(json.loads(f)["event"]["data"]["stdout"])
                    for fl, f in frames if fl == 0 and b'"stdout"' in f)


def test_what_a_command_leaves_in_work_comes_back_by_the_rules(service):
    """On every driver (native; runc and gVisor containers in the docker
    passes): what a command leaves in /work is the sandbox's next /work by
    /out's rules: regular files and directories come back (an exec bit
    kept; a file deleted is gone), while a link (to a host file, to /), a
    FIFO and a name collection refuses never come back, each named in the
    run's skips as work/PATH; the box's own script does not join the home.
    Differential: the next command sees the tree, the script runs."""
    sid, token = create(service)
    home = service.state / "sandboxes" / sid / "home"
    (home / "gone.txt").write_text("old\n")
    cmd = ("rm gone.txt; mkdir -p d/e && echo deep > d/e/f.txt; printf '#!/bin/sh\\necho ran\\n' > x.sh; "
           "chmod 755 x.sh; ln -s /etc/passwd link; ln -s / rootlink; mkfifo pipe; "
           "echo bad > \"$(printf 'bad\\001name')\"; ls -a | tr '\\n' ' '")
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", cmd]}}).encode()
    text = stdout_of(start(service, sid, token, body))
    # the box's /work held the script under its own name, and all of it
    assert text.startswith(b". .. .airlock-main.sh") and b" link pipe rootlink x.sh" in text, text
    assert sorted(os.listdir(home)) == ["d", "x.sh"], os.listdir(home)
    assert (home / "d" / "e" / "f.txt").read_text() == "deep\n"
    assert os.stat(home / "x.sh").st_mode & 0o777 == 0o755
    runs_before = service.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}"})["runs"]
    assert len(runs_before) == 1, runs_before
    run = service.ok("GET", f"/v1/runs/{runs_before[0]['id']}")
    res = run["result"]
    assert res["box"]["driver"] == ("docker" if ON_DOCKER else "native"), res["box"]
    assert res["box"].get("engine_runtime") == (RUNTIME if ON_DOCKER else None), res["box"]
    assert res["box"].get("work_collected") is True, res["box"]
    skips = {s["path"]: s["why"] for s in run["skipped"]}
    assert {"work/link", "work/rootlink", "work/pipe"} <= skips.keys(), skips
    assert any(p.startswith("work/bad") for p in skips), skips
    # the next command has the tree: the script runs, nothing else came back;
    # in a container the pool made ahead of need (docker_pool), which holds
    # nothing of anyone's until its run stages, as well as in one made now
    if ON_DOCKER:
        deadline = time.monotonic() + 30
        while not any(sh["idle"] >= 1 for sh in
                      service.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]["shapes"]):
            assert time.monotonic() < deadline, "the docker pool made no container for the sandbox's runs"
            time.sleep(0.2)
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "./x.sh; cat d/e/f.txt; ls"]}}).encode()
    assert stdout_of(start(service, sid, token, body)) == b"ran\ndeep\nd\nx.sh\n"
    if ON_DOCKER:
        runs = service.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}"})["runs"]
        second = [r for r in runs if r["id"] != runs_before[0]["id"]]
        assert len(second) == 1, runs
        assert service.ok("GET", f"/v1/runs/{second[0]['id']}")["result"]["box"]["pooled"] is True, second


@protocol_only
def test_a_command_awaiting_approval_keeps_its_stream_alive_and_its_deadline(service):
    """start{pid} at once, keepalives every Keepalive-Ping-Interval while the
    run awaits approval, its output once approved; and a deadline
    (Connect-Timeout-Ms) that passes while it waits withdraws the run and
    ends the stream with deadline_exceeded."""
    t = gov_tenant(service, "e2bka")
    put_settings(t.client, approval_policy="always", allow_self_approval=True, approval_ttl_s=600)
    status, _, doc = service.request("POST", "/v2/sandboxes", key=None, json={"templateID": "base"},
                                     headers={"X-API-KEY": t.key})
    assert status == 201, doc
    sid, token = doc["sandboxID"], doc["envdAccessToken"]
    body = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo approved"]}}).encode()
    t0 = time.monotonic()
    approved = []

    def approve_after(seconds):
        while time.monotonic() - t0 < 30:
            d = t.client.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}", "state": "pending_approval"})
            if d["runs"] and time.monotonic() - t0 >= seconds:
                approved.append(t.client.request("POST", f"/v1/runs/{d['runs'][0]['id']}/approve", json={})[0])
                return
            time.sleep(0.1)

    th = threading.Thread(target=approve_after, args=(2.5,))
    th.start()
    frames = start(service, sid, token, body, headers={"Keepalive-Ping-Interval": "1"})
    th.join()
    assert approved and approved[0] in (200, 202), approved
    events = [json.loads(f)["event"] for fl, f in frames if fl == 0]
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end", kinds
    assert kinds.count("keepalive") >= 2 and kinds.index("data") > kinds.index("keepalive"), kinds
    assert events[-1]["end"]["exitCode"] == 0 and frames[-1] == (2, b"{}"), frames[-2:]
    # the deadline passes while it waits: withdrawn, deadline_exceeded
    t1 = time.monotonic()
    frames = start(service, sid, token, body, headers={"Connect-Timeout-Ms": "1500"})
    assert 1.4 < time.monotonic() - t1 < 10
    assert frames[0][0] == 0 and b'"start"' in frames[0][1] and frames[-1][0] == 2, frames
    assert b'"deadline_exceeded"' in frames[-1][1], frames
    runs = t.client.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}"})["runs"]
    assert sorted(r["state"] for r in runs) == ["canceled", "succeeded"], runs


@protocol_only
def test_a_cell_awaiting_approval_shows_its_code_on_the_card(service):
    """runCode in a workspace that asks for approval: the approver reads the
    cell as it was sent (comment lines above the driver; a CR shown escaped,
    so nothing of the copy runs), approves, and the cell runs."""
    t = gov_tenant(service, "e2bcell")
    put_settings(t.client, approval_policy="always", allow_self_approval=True, approval_ttl_s=600)
    status, _, doc = service.request("POST", "/v2/sandboxes", key=None, json={"templateID": "base"},
                                     headers={"X-API-KEY": t.key})
    assert status == 201, doc
    sid, token = doc["sandboxID"], doc["envdAccessToken"]
    cell = "print('hello from the cell')\nx = 'a\\rb'\nlen(x)  # \r"
    got = []

    def execute():
        got.append(service.request("POST", "/execute", key=None, json={"code": cell}, timeout=60, headers={
            "E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "X-Access-Token": token}))

    th = threading.Thread(target=execute)
    th.start()
    run = None
    for _ in range(200):
        runs = t.client.ok("GET", "/v1/runs", query={"thread_id": f"e2b-{sid}", "state": "pending_approval"})["runs"]
        if runs:
            run = t.client.ok("GET", f"/v1/runs/{runs[0]['id']}")
            break
        time.sleep(0.1)
    assert run, "the cell never awaited approval"
    code = run["approval"]["code"]
    assert "# print('hello from the cell')\n# x = 'a\\rb'\n# len(x)  # \\r\n" in code, code
    assert t.client.request("POST", f"/v1/runs/{run['id']}/approve", json={})[0] in (200, 202)
    th.join()
    status, _, raw = got[0]
    assert status == 200, (status, raw)
    lines = [json.loads(l) for l in raw.decode().splitlines()] if isinstance(raw, bytes) else raw
    kinds = [l["type"] for l in lines if l["type"] != "keepalive"]
    assert kinds == ["stdout", "result", "number_of_executions", "end_of_execution"], lines
    assert lines[0]["text"] == "hello from the cell\n" and lines[1]["text"] == "3", lines
