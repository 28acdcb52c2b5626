"""The e2b driver (driver = e2b, src/remote/e2b.c) against E2B-compatible
endpoints on loopback: E2B itself cannot be reached from where this suite
runs, so nothing here proves anything of the real E2B service (its
isolation, its egress filter, its limits), which the driver's badges call
unconfirmed.

Against airlock's own E2B-compatible API (test_against_airlocks_e2b_api: a
second `airlock serve`, B, whose key service A's e2b driver holds): A's runs
go through B's control plane and sandbox plane (each command one ordinary
run of B, audited `via: e2b`), with output, exit codes, a timeout, files in
/work and artifacts from /out, and every sandbox of B deleted after.

Against e2b_double.py (a TEST DOUBLE of E2B's control plane and envd, in
the shapes the e2b SDK 2.51.0 uses): a real `airlock serve` with driver =
e2b makes a sandbox per run (its tag in the metadata, the network compiled
into allowInternetAccess / network.allowOut), uploads the script and inputs
(multipart /files), runs it over Connect (process.Process/Start, streamed:
stdout and stderr apart), keeps its exit code and wall clock (a timeout
kills it with SendSignal), lists /out (ListDir) and downloads its files under
airlock's caps and name rules (hostile names and links skipped), and deletes
the sandbox after every run; the key goes as X-API-KEY and is never shown; a
driver with no key refuses to start.
"""
import hashlib
import http.client
import json
import os
import socket
import struct
import subprocess
import time
import urllib.request

import pytest

from e2b_double import start_e2b_double
from service_util import Service, audit_events, b64, free_port, put_settings, service_binary


@pytest.fixture
def remote(tmp_path):
    d = start_e2b_double(tmp_path)
    key_file = tmp_path / "e2b.key"
    key_file.write_text(d.key + "\n")
    key_file.chmod(0o600)
    svc = Service(tmp_path / "a", config={"driver": "e2b", "e2b_api_url": d.url, "e2b_sandbox_url": d.url,
                                          "e2b_api_key_file": str(key_file)})
    svc.start()
    yield svc, d
    svc.stop()
    d.stop()


@pytest.fixture
def through_b(tmp_path):
    b = Service(tmp_path / "b").start()
    key_file = tmp_path / "b.key"
    key_file.write_text(b.key + "\n")
    key_file.chmod(0o600)
    a = Service(tmp_path / "a", config={"driver": "e2b", "e2b_api_url": b.base_url, "e2b_sandbox_url": b.base_url,
                                        "e2b_api_key_file": str(key_file)})
    a.start()
    yield a, b
    a.stop()
    b.stop()


def test_against_airlocks_e2b_api(through_b):
    a, b = through_b
    run = a.run("import sys; print(open('data.csv').read().strip()); print('to stderr', file=sys.stderr); "
                "print(sys.argv[1:])", files=[{"name": "data.csv", "content_base64": b64("a,b\n1,2")}],
                args=["x y", "it's"])
    assert run["state"] == "succeeded", run
    res = run["result"]
    assert res["exit_code"] == 0 and res["reason"] == "exited", res
    assert res["stdout"] == "a,b\n1,2\n['x y', \"it's\"]\n" and res["stderr"] == "to stderr\n", res
    assert res["controls"]["userns"]["level"] == "unconfirmed"
    run = a.run("import sys; print('bye', sys.stdin.read()); sys.exit(3)", stdin="from stdin")
    assert run["result"]["exit_code"] == 3 and run["result"]["stdout"] == "bye from stdin\n", run
    run = a.run("import time; print('start', flush=True); time.sleep(30)", limits={"timeout_s": 2})
    assert run["result"]["reason"] == "timeout" and run["result"]["stdout"] == "start\n", run
    assert run["result"]["wall_ms"] < 15000, run
    # /out through B's box and B's /files; what B's box would not keep (a
    # hostile name, a link) never reaches A
    code = ("import os\n"
            "open('/out/report.txt', 'w').write('hello')\n"
            "os.makedirs('/out/sub', exist_ok=True)\n"
            "open('/out/sub/data.bin', 'wb').write(bytes(range(256)))\n"
            "open('/out/bad\\x01name', 'w').write('x')\n"
            "os.symlink('/etc/passwd', '/out/link')\n")
    run = a.run(code)
    assert run["state"] == "succeeded", run
    arts = {x["path"]: x for x in run["artifacts"]}
    assert set(arts) == {"report.txt", "sub/data.bin"}, run["artifacts"]
    assert a.content_bytes(arts["report.txt"]["id"])[1] == b"hello"
    assert a.content_bytes(arts["sub/data.bin"]["id"])[1] == bytes(range(256))
    # B: a sandbox per run of A, each deleted; its runs audited as E2B's
    status, _, listed = b.request("GET", "/v2/sandboxes", key=None, headers={"X-API-KEY": b.key})
    assert status == 200 and listed == [], listed
    kinds = [e["kind"] for e in audit_events(b) if e["data"].get("via") == "e2b"]
    assert kinds.count("sandbox.create") == 4 and kinds.count("sandbox.kill") == 4, kinds
    assert kinds.count("capability.invoke_allowed") == 4, kinds
    # A's own E2B API cannot put a sandbox's command on its e2b driver (the
    # sandbox's /work is A's): refused, said, not run without it
    status, _, sb = a.request("POST", "/v2/sandboxes", key=None, headers={"X-API-KEY": a.key},
                              json={"templateID": "base"})
    assert status == 201, sb
    msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-c", "echo hi"]}}).encode()
    conn = http.client.HTTPConnection(a.host, a.port, timeout=30)
    conn.request("POST", "/process.Process/Start", body=struct.pack(">BI", 0, len(msg)) + msg,
                 headers={"E2b-Sandbox-Id": sb["sandboxID"], "X-Access-Token": sb["envdAccessToken"],
                          "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"})
    body = conn.getresponse().read()
    conn.close()
    assert b'"exited":false' in body and b"native driver only: the e2b driver does not carry" in body, body
    assert b'"stdout"' not in body, body


def test_runs_limits_and_artifacts_through_e2b(remote):
    svc, d = remote
    run = svc.run("import sys; print(open('data.csv').read().strip()); print('to stderr', file=sys.stderr); "
                  "print(sys.argv[1:])", files=[{"name": "data.csv", "content_base64": b64("a,b\n1,2")}],
                  args=["x y", "it's"])
    assert run["state"] == "succeeded", run
    res = run["result"]
    assert res["exit_code"] == 0 and res["reason"] == "exited", res
    assert res["stdout"] == "a,b\n1,2\n['x y', \"it's\"]\n" and res["stderr"] == "to stderr\n", res
    assert res["controls"]["userns"]["level"] == "unconfirmed" and "E2B" in res["controls"]["userns"]["detail"]
    assert "offline" in res["controls"]["network"]["detail"], res["controls"]["network"]
    run = svc.run("import sys; print('bye', sys.stdin.read()); sys.exit(3)", stdin="from stdin")
    assert run["result"]["exit_code"] == 3 and run["result"]["stdout"] == "bye from stdin\n", run
    run = svc.run("import time; print('start', flush=True); time.sleep(30)", limits={"timeout_s": 2})
    assert run["result"]["reason"] == "timeout" and run["result"]["stdout"] == "start\n", run
    assert run["result"]["wall_ms"] < 15000, run
    code = ("import os\n"
            "open('/out/report.txt', 'w').write('hello')\n"
            "os.makedirs('/out/sub', exist_ok=True)\n"
            "open('/out/sub/data.bin', 'wb').write(bytes(range(256)))\n"
            "open('/out/bad\\x01name', 'w').write('x')\n"
            "os.symlink('/etc/passwd', '/out/link')\n")
    run = svc.run(code)
    assert run["state"] == "succeeded", run
    arts = {a["path"]: a for a in run["artifacts"]}
    assert set(arts) == {"report.txt", "sub/data.bin"}, run["artifacts"]
    assert svc.content_bytes(arts["report.txt"]["id"])[1] == b"hello"
    assert svc.content_bytes(arts["sub/data.bin"]["id"])[1] == bytes(range(256))
    skipped = {s["path"]: s["why"] for s in run["skipped"]}
    assert "bad\\x01name" in skipped and "link" in skipped, run["skipped"]
    # every sandbox deleted; each tagged with its run; offline compiled
    assert not d.live(), [s.id for s in d.live()]
    creates = [r for r in d.requests if r["method"] == "POST" and r["path"] == "/v2/sandboxes"]
    assert len(creates) == 4, d.calls()
    for r in creates:
        assert r["json"]["metadata"]["airlock"].split("/")[-1].startswith("run_"), r["json"]
        assert r["json"]["allowInternetAccess"] is False and "network" not in r["json"], r["json"]
        assert r["json"]["timeout"] >= 60, r["json"]
    calls = d.calls()
    assert sum(c.startswith("DELETE /sandboxes/") for c in calls) == 4, calls
    assert "POST /process.Process/SendSignal" in calls, calls
    for path in ("/v1/settings", "/healthz"):
        _, _, doc = svc.request("GET", path)
        assert d.key not in str(doc), path
    assert d.key not in svc.log_path.read_text(errors="replace")


def test_a_host_allow_list_becomes_allow_out(remote):
    svc, d = remote
    put_settings(svc, network_hosts=["example.com", "pypi.org"])
    run = svc.run("print(1)", network="hosts:example.com,pypi.org")
    assert run["state"] == "succeeded", run
    create = [r for r in d.requests if r["path"] == "/v2/sandboxes"][-1]["json"]
    assert create["network"] == {"allowOut": ["example.com", "pypi.org"], "denyOut": ["0.0.0.0/0"]}, create
    net = run["result"]["controls"]["network"]
    assert net["level"] == "unconfirmed" and "SNI" in net["detail"], net
    assert not d.live()


def test_caps(remote):
    svc, d = remote
    # the output cap (1 MiB a stream by default): the command killed there
    run = svc.run("import sys, time; sys.stdout.write('x' * (4 << 20)); sys.stdout.flush(); time.sleep(30)")
    assert run["result"]["reason"] == "output_limit" and run["result"]["stdout_truncated"], run["result"]["reason"]
    assert run["result"]["wall_ms"] < 15000 and len(run["result"]["stdout"]) == 1 << 20
    # the artifact count cap (100 by default): the first 100 by name, the rest skipped
    run = svc.run("for i in range(105): open(f'/out/f{i:03d}', 'w').write(str(i))")
    assert len(run["artifacts"]) == 100 and max(a["path"] for a in run["artifacts"]) == "f099", run["artifacts"][-1]
    assert {s["path"]: s["why"] for s in run["skipped"]} == {f"f{i}": "artifact count cap reached"
                                                             for i in range(100, 105)}, run["skipped"]
    assert not d.live()


def make_sandbox(d, tag):
    req = urllib.request.Request(d.url + "/v2/sandboxes", method="POST", data=json.dumps(
        {"templateID": "base", "metadata": {"airlock": tag}}).encode(),
        headers={"X-API-KEY": d.key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["sandboxID"]


def test_cancel_and_sweep(remote, tmp_path):
    svc, d = remote
    # a running run canceled: its command killed, its sandbox deleted
    status, _, doc = svc.post_run("import time; print('up', flush=True); time.sleep(60)")
    assert status == 201, doc
    deadline = time.monotonic() + 20
    while not any(r["path"] == "/process.Process/Start" for r in d.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    svc.cancel(doc["id"])
    run = svc.wait_state(doc["id"], ("canceled", "error", "failed", "succeeded"), timeout=20)
    assert run["state"] == "canceled", run
    deadline = time.monotonic() + 10
    while d.live() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not d.live()
    # what a dead instance of this service left is deleted at the next start;
    # another service's (another state directory) is not
    node = socket.gethostname()[:63] + ":" + hashlib.sha256(str(svc.state).encode()).hexdigest()[:12]
    mine = make_sandbox(d, f"{node}/0123456789ab/run_lost")
    other = make_sandbox(d, "elsewhere:000000000000/0123456789ab/run_other")
    svc.stop()
    svc.start()
    deadline = time.monotonic() + 10
    while d.sandboxes[mine].state != "destroyed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.sandboxes[mine].state == "destroyed" and d.sandboxes[other].state != "destroyed"


def test_no_key_refuses_to_start(tmp_path):
    cfg = tmp_path / "a.conf"
    cfg.write_text("driver = e2b\ne2b_api_url = http://127.0.0.1:9\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "E2B_"))}
    p = subprocess.run([str(service_binary()), "serve", "--listen", f"127.0.0.1:{free_port()}", "--state",
                        str(tmp_path / "s"), "--config", str(cfg)], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0
    assert "E2B_API_KEY" in p.stderr and "no API key" in p.stderr, p


def test_cli_run_driver_e2b(tmp_path):
    """`airlock-server run --driver e2b`: the same run, its service and key
    from the SDK's environment variables."""
    d = start_e2b_double(tmp_path)
    try:
        out = tmp_path / "out"
        out.mkdir()
        env = dict({k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")},
                   E2B_API_KEY=d.key, E2B_API_URL=d.url, E2B_SANDBOX_URL=d.url)
        server = service_binary().parent / "airlock-server"
        p = subprocess.run([str(server), "run", "--driver", "e2b", "--out", str(out), "--json", "--lang", "python",
                            "-c", "import sys; print(sys.argv[1:]); open('/out/x.txt', 'w').write('y')", "a b"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p
        doc = json.loads(p.stdout)
        assert doc["stdout"] == "['a b']\n" and doc["box"]["driver"] == "e2b", doc
        assert (out / "x.txt").read_text() == "y" and not d.live()
        p = subprocess.run([str(server), "run", "--driver", "e2b", "--lang", "python", "-c", "pass"],
                           env={k: v for k, v in env.items() if k != "E2B_API_KEY"}, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode != 0 and "E2B_API_KEY" in p.stderr, p
    finally:
        d.stop()
