"""The daytona driver (driver = daytona, src/remote/daytona.c) against the
Daytona TEST DOUBLE (daytona_double.py), not the real Daytona service, which
cannot be reached from where this suite runs.

What this proves: a real `airlock serve` with driver = daytona runs the
service's runs in sandboxes of an endpoint that speaks the protocol the
official @daytonaio/sdk 0.218.0 speaks (test_daytona_double.py shows that
SDK, unmodified, accepted by the same double): a sandbox made per run with
its tag in the labels, the inputs and the script uploaded (files/bulk-upload),
the command run (process/execute, its output merged and not streamed), the
exit code, the wall clock (a timeout), /out listed and downloaded under
airlock's caps and name rules (hostile names skipped, never written), the
sandbox deleted after every run, the key sent as Bearer and never shown, a
driver with no key refused at start. What it does not prove: anything of the
real Daytona service (its isolation, its network filter, its limits, its
exact error bodies), which the driver's badges say are unconfirmed.
"""
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from daytona_double import start_daytona_double
from service_util import Service, b64, free_port, put_settings, service_binary


@pytest.fixture
def remote(tmp_path):
    d = start_daytona_double(tmp_path)
    key_file = tmp_path / "daytona.key"
    key_file.write_text(d.key + "\n")
    key_file.chmod(0o600)
    svc = Service(tmp_path / "a", config={"driver": "daytona", "daytona_api_url": d.url,
                                          "daytona_api_key_file": str(key_file)})
    svc.start()
    yield svc, d
    svc.stop()
    d.stop()


def live(d):
    return [s for s in d.sandboxes.values() if s.state != "destroyed"]


def test_runs_limits_and_artifacts_through_daytona(remote):
    svc, d = remote
    # output, an input in /work, arguments
    run = svc.run("import sys; print(open('data.csv').read().strip()); print('to stderr', file=sys.stderr); "
                  "print(sys.argv[1:])", files=[{"name": "data.csv", "content_base64": b64("a,b\n1,2")}],
                  args=["x y", "it's"])
    assert run["state"] == "succeeded", run
    res = run["result"]
    assert res["exit_code"] == 0 and res["reason"] == "exited", res
    # Daytona merges the streams: all of it arrives as stdout, at the end
    assert "a,b\n1,2\n" in res["stdout"] and "to stderr" in res["stdout"], res
    assert "['x y', \"it's\"]" in res["stdout"], res
    assert res["controls"]["userns"]["level"] == "unconfirmed", res["controls"]
    assert "Daytona" in res["controls"]["userns"]["detail"], res["controls"]
    # a non-zero exit
    run = svc.run("import sys; print('bye'); sys.exit(3)")
    assert run["result"]["exit_code"] == 3 and "bye" in run["result"]["stdout"], run
    # the wall clock
    run = svc.run("import time; print('start', flush=True); time.sleep(30)", limits={"timeout_s": 2})
    assert run["result"]["reason"] == "timeout", run
    assert run["result"]["wall_ms"] < 15000, run
    # /out: files and a directory collected; a hostile name and a link skipped
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
    # every sandbox made was deleted, each tagged with its run
    assert not live(d), [s.id for s in live(d)]
    creates = [r for r in d.requests if r["method"] == "POST" and r["path"] == "/api/sandbox"]
    assert len(creates) == 4, d.calls()
    for r in creates:
        node, instance, run_id = r["json"]["labels"]["airlock"].split("/")
        assert ":" in node and len(instance) == 12 and run_id.startswith("run_"), r["json"]
        assert r["json"]["networkBlockAll"] is True and r["json"]["autoDeleteInterval"] == 0, r["json"]
    assert all(r["auth"] for r in d.requests), [r for r in d.requests if not r["auth"]]
    calls = d.calls()
    assert sum(c.startswith("DELETE /api/sandbox/") for c in calls) == 4, calls
    assert any(c.endswith("/files/bulk-upload") for c in calls) and any(c.endswith("/process/execute") for c in calls)
    assert any(c.endswith("/files/download") for c in calls), calls
    # the key is nowhere in what the service shows
    for path in ("/v1/settings", "/healthz"):
        status, _, doc = svc.request("GET", path)
        assert d.key not in str(doc), path
    assert d.key not in svc.log_path.read_text(errors="replace")


def test_a_host_allow_list_is_refused(remote):
    svc, d = remote
    put_settings(svc, network_hosts=["example.com"])
    status, _, doc = svc.post_run("print(1)", wait=True, network="hosts:example.com")
    assert status >= 400 or doc.get("state") == "error", doc
    assert "Daytona filters egress by address" in str(doc), doc
    assert not live(d)


def test_cancel(remote):
    svc, d = remote
    # (the double goes on running the command it was given to its end: a
    # short one, so nothing of it outlives the test for long)
    status, _, doc = svc.post_run("import time; time.sleep(8)")
    assert status == 201, doc
    deadline = time.monotonic() + 20
    while not any(r["path"].endswith("/process/execute") for r in d.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    svc.cancel(doc["id"])
    run = svc.wait_state(doc["id"], ("canceled", "error", "failed", "succeeded"), timeout=20)
    assert run["state"] == "canceled", run
    deadline = time.monotonic() + 10
    while live(d) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not live(d)


def test_sweep(remote):
    """What a dead instance of this service left is deleted at the next
    start; another service's is not."""
    svc, d = remote

    def make(tag):
        req = urllib.request.Request(d.url + "/sandbox", method="POST", data=json.dumps(
            {"labels": {"airlock": tag}}).encode(), headers={"Authorization": f"Bearer {d.key}",
                                                             "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)["id"]
    node = socket.gethostname()[:63] + ":" + hashlib.sha256(str(svc.state).encode()).hexdigest()[:12]
    mine, other = make(f"{node}/0123456789ab/run_lost"), make("elsewhere:000000000000/0123456789ab/run_x")
    svc.stop()
    svc.start()
    deadline = time.monotonic() + 10
    while d.sandboxes[mine].state != "destroyed" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert d.sandboxes[mine].state == "destroyed" and d.sandboxes[other].state != "destroyed"


def test_no_key_refuses_to_start(tmp_path):
    cfg = tmp_path / "a.conf"
    cfg.write_text("driver = daytona\ndaytona_api_url = http://127.0.0.1:9/api\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRLOCK_", "DAYTONA_"))}
    p = subprocess.run([str(service_binary()), "serve", "--listen", f"127.0.0.1:{free_port()}", "--state", str(tmp_path / "s"),
                        "--config", str(cfg)], env=env, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "DAYTONA_API_KEY" in p.stdout + p.stderr and "no API key" in p.stdout + p.stderr, p
