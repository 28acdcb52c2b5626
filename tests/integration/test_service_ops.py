"""`airlock serve` operations: /healthz, /metrics, /openapi.json (in sync with
docs/api.md), /v1/settings, configuration, the disabled driver, graceful
shutdown, and kill -9 of the service during runs with recovery on restart."""
import json
import os
import re
import signal
import subprocess
import time
import uuid

import pytest

from conftest import ROOT
from service_util import (LIVE, OUR_PIDS, TERMINAL, Service, service_binary, assert_error, assert_no_boxes, box_cgroups, box_processes,
                          free_port, hooks_binary, ppid, service, services, wait_no_boxes)  # noqa: F401

# Every operation of docs/api.md.  test_docs_list_matches keeps this list honest.
API = [
    ("POST", "/v1/runs"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/runs/{id}"),
    ("GET", "/v1/runs/{id}/events"),
    ("POST", "/v1/runs/{id}/cancel"),
    ("GET", "/v1/threads/{thread_id}/artifacts"),
    ("GET", "/v1/threads/{thread_id}/packages"),
    ("GET", "/v1/folders"),
    ("GET", "/v1/folders/{name}/entries"),
    ("GET", "/v1/artifacts/{id}"),
    ("GET", "/v1/artifacts/{id}/content"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    ("GET", "/operator/status"),
    ("GET", "/openapi.json"),
    ("GET", "/v1/settings"),
    ("PUT", "/v1/settings"),
    ("PATCH", "/v1/settings"),
    ("POST", "/v1/runs/{id}/approve"),
    ("POST", "/v1/runs/{id}/deny"),
    ("GET", "/v1/runs/{id}/trace"),
    ("GET", "/v1/runs/{id}/inputs/{which}"),
    ("GET", "/v1/usage"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/audit/checkpoint"),
    ("GET", "/piston/{key}/api/v2/runtimes"),
    ("POST", "/piston/{key}/api/v2/execute"),
    ("GET", "/piston/{key}/api/v2/packages"),
    ("GET", "/v1/skills"),
    ("POST", "/v1/skills"),
    ("GET", "/v1/skills/{name}"),
    ("POST", "/v1/skills/{name}/test"),
    ("POST", "/v1/skills/{name}/promote"),
    ("POST", "/v1/skills/{name}/run"),
    ("DELETE", "/v1/skills/{name}"),
    ("DELETE", "/v1/skills/{name}/versions/{version}"),
    ("POST", "/mcp"),
    ("GET", "/mcp"),
    ("DELETE", "/mcp"),
    # the console's sign-in and keys (rest_session.c)
    ("POST", "/v1/session"),
    ("GET", "/v1/session"),
    ("DELETE", "/v1/session"),
    ("GET", "/v1/keys"),
    ("POST", "/v1/keys"),
    ("DELETE", "/v1/keys/{id}"),
    # the console's reads (rest_workspace.c, rest_events.c)
    ("GET", "/v1/events"),
    ("GET", "/v1/persons"),
    ("GET", "/v1/threads"),
    ("GET", "/v1/sandboxes"),
    ("GET", "/v1/sandboxes/{id}/files"),
    ("DELETE", "/v1/sandboxes/{id}"),
    ("GET", "/v1/audit/verify"),
    # the console's files (console.c)
    ("GET", "/"),
    ("GET", "/login"),
    ("GET", "/assets/{file}"),
    ("GET", "/assets/pages/{file}"),
]


def norm(path):
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_docs_list_matches():
    text = (ROOT / "docs" / "api.md").read_text()
    # E2B's paths are E2B's API, held to the e2b SDK's tests (test_e2b_*.py), not this list
    text = re.sub(r"^## E2B compatibility\n.*?(?=^## )", "", text, flags=re.S | re.M)
    documented = set(re.findall(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`?\s]*)", text))
    assert {(m, norm(p)) for m, p in documented} == {(m, norm(p)) for m, p in API}, (
        "docs/api.md and the API list of this test differ")


def test_openapi_lists_every_path(service):
    status, hdrs, doc = service.get("/openapi.json", key=None)
    assert status == 200 and isinstance(doc, dict), (status, hdrs)
    assert str(doc.get("openapi", "")).startswith("3."), doc.get("openapi")
    assert doc.get("info", {}).get("title") and doc["info"].get("version")
    paths = {norm(p): ops for p, ops in doc["paths"].items()}
    for method, path in API:
        assert norm(path) in paths, f"/openapi.json lacks {path}"
        ops = paths[norm(path)]
        assert method.lower() in ops, f"/openapi.json lacks {method} {path}"
        assert ops[method.lower()].get("responses"), f"{method} {path} has no responses"
    extra = set(paths) - {norm(p) for _, p in API}
    assert not extra, f"/openapi.json has paths docs/api.md does not: {extra}"
    # the run-creation body names the documented fields
    text = str(doc)
    for field in ("language", "code", "thread_id", "files", "artifacts", "network", "limits", "description",
                  "timeout_s", "memory_mb", "cpus", "pids", "content_base64"):
        assert field in text, f"/openapi.json never mentions {field}"
    for state in ("queued", "provisioning", "running", "succeeded", "failed", "timed_out", "killed",
                  "canceled", "error"):
        assert state in text, f"/openapi.json never mentions the state {state}"


def test_healthz(service):
    status, _, doc = service.get("/healthz", key=None)
    assert status == 200, (status, doc)
    assert doc["status"] == "ok" and doc["driver"] == "native" and isinstance(doc["badges"], dict), doc


def test_settings(service):
    doc = service.ok("GET", "/v1/settings")
    assert doc["driver"] == "native" and isinstance(doc["badges"], dict), doc
    text = str(doc)
    assert "timeout_s" in text and "120" in text, f"settings lack the timeout maximum: {doc}"
    assert "concurren" in text, f"settings lack concurrency: {doc}"
    status, _, err = service.get("/v1/settings", key=None)
    assert_error(status, err, "unauthorized")


def test_settings_weigh_host_roots_inotify_budget_against_max_concurrent(services):
    """Every box's inotify instances are charged to host root's one budget
    (battery E6): a service whose max_concurrent boxes could take more than
    half of it says so, with the value to raise the sysctl to; one whose
    boxes fit says they do. A test build reads Debian's default, 128, for
    the host's value; /healthz, which asks for no key, keeps max_concurrent
    to itself."""
    badge = {}
    for boxes in (8, 9, 17):
        svc = services.start(f"ino{boxes}", {"max_concurrent": boxes}, extra_env={"AIRLOCK_TEST_INOTIFY_MAX": "128"},
                             binary=hooks_binary(ROOT / "build-asan"))
        badge[boxes] = svc.ok("GET", "/v1/settings")["badges"]["inotify budget"]
        # the same badge as `airlock doctor --url` prints it
        p = subprocess.run([str(svc.binary), "doctor", "--url", svc.base_url, "--key", svc.key], capture_output=True,
                           timeout=60)
        assert p.returncode == 0 and b"inotify budget" in p.stdout, p
        status, _, health = svc.get("/healthz", key=None)
        assert status == 200 and "inotify budget" not in health["badges"], health
    assert badge[8] == {"level": "boundary", "detail": "fs.inotify.max_user_instances=128 is host root's, shared with "
                        "every box: 8 boxes at once (max_concurrent) may open 64 of it, 8 each"}, badge
    assert badge[9]["level"] == "applied" and "raise it to at least 144 " in badge[9]["detail"], badge
    assert badge[17]["level"] == "applied" and "and leave it 0; raise it to at least 272 " in badge[17]["detail"], badge
    # and the host's doctor, which knows no service, says how many boxes its own value holds
    have = int(open("/proc/sys/fs/inotify/max_user_instances").read())
    doc = json.loads(subprocess.run([str(service_binary()), "doctor", "--json"], capture_output=True, check=True,
                                    timeout=60).stdout)
    item = {c["control"]: c for c in doc["controls"]}["inotify budget"]
    assert f"max_user_instances={have} " in item["detail"], item
    assert f": {-(-have // 8)} boxes opening all of theirs" in item["detail"], item


METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\d+)?$")


def parse_metrics(text):
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = METRIC_LINE.match(line)
        assert m, f"not Prometheus text: {line!r}"
        float(m.group(3))
        out.append((m.group(1), m.group(2) or "", float(m.group(3))))
    return out


def test_metrics(service):
    for _ in range(2):
        assert service.run("print(1)")["state"] == "succeeded"
    assert service.run("import sys; sys.exit(1)")["state"] == "failed"
    status, hdrs, raw = service.get("/metrics", key=None)
    assert status == 200
    assert hdrs.get("content-type", "").startswith("text/plain"), hdrs
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    samples = parse_metrics(text)
    by_state = [(n, lab, v) for n, lab, v in samples if "run" in n and 'state="succeeded"' in lab]
    assert by_state, f"no runs-by-state metric:\n{text}"
    assert max(v for _, _, v in by_state) >= 2
    assert any("run" in n and 'state="failed"' in lab and v >= 1 for n, lab, v in samples), text
    assert any("queue" in n for n, _, _ in samples), f"no queue-length metric:\n{text}"
    assert any(n.endswith("_bucket") and "le=" in lab and "duration" in n for n, lab, _ in samples), \
        f"no run duration histogram:\n{text}"
    assert any("box" in n for n, _, _ in samples), f"no boxes-alive metric:\n{text}"
    assert "# TYPE" in text
    # once the runs have ended, the histogram counts them and no box is alive (allow a moment)
    deadline = time.monotonic() + 3
    while True:
        samples = parse_metrics(service.get("/metrics", key=None)[2].decode())
        count = sum(v for n, lab, v in samples if n.endswith("duration_seconds_count"))
        alive = sum(v for n, lab, v in samples if "box" in n and "alive" in n)
        if (count >= 3 and alive == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert count >= 3, f"run duration histogram counts {count} of 3+ ended runs"
    assert alive == 0, f"{alive} boxes alive after every run ended"


def test_bootstrap_twice_makes_no_second_key(service):
    out = service.admin("bootstrap", check=False)
    assert "al_" not in out, f"a second bootstrap printed a key: {out!r}"
    assert service.ok("GET", "/v1/runs")


def test_environment_configuration(tmp_path):
    state = tmp_path / "envstate"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    env.update(AIRLOCK_LISTEN=f"127.0.0.1:{port}", AIRLOCK_STATE=str(state))
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([str(service_binary()), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    OUR_PIDS.add(proc.pid)
    try:
        probe = Service(state, bootstrap=False)
        probe.port, probe.base_url = port, f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if probe.get("/healthz", key=None, timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no /healthz with AIRLOCK_LISTEN/AIRLOCK_STATE"
            time.sleep(0.1)
        assert state.is_dir() and any(state.iterdir()), "AIRLOCK_STATE not used"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_max_timeout_configured(services):
    svc = services.start("maxt", {"max_timeout_s": 5})
    status, _, doc = svc.post_run("print(1)", limits={"timeout_s": 10})
    assert_error(status, doc, "bad_request")
    run = svc.run("print(1)", limits={"timeout_s": 5})
    assert run["state"] == "succeeded" and run["limits"]["timeout_s"] == 5


def test_disabled_driver(services):
    svc = services.start("disabled", {"driver": "disabled"})
    status, _, doc = svc.get("/healthz", key=None)
    assert status in (200, 503) and doc["driver"] == "disabled", (status, doc)
    status, _, doc = svc.post_run("print(1)")
    assert_error(status, doc, "driver_disabled")
    assert "disabled" in doc["error"]["message"].lower() or "driver" in doc["error"]["message"].lower()
    status, _, doc = svc.post_run("print(1)", wait=True)
    assert_error(status, doc, "driver_disabled")
    assert svc.ok("GET", "/v1/settings")["driver"] == "disabled"
    assert svc.ok("GET", "/v1/runs")["runs"] == [], "the disabled driver left a run record"
    assert box_processes() == [] and box_cgroups() == []


def test_storage_quota(services):
    svc = services.start("quota", {"storage_quota_mb": 1})
    code = "import os\nopen('/out/big.bin', 'wb').write(os.urandom(int(1.5 * 1024 * 1024)))\n"
    status, _, run = svc.post_run(code, wait=True)
    signals = []
    if status == 200:
        skipped = [s for s in run.get("skipped", []) if "quota" in s.get("why", "").lower()]
        if skipped:
            signals.append("skipped")
        if run["state"] == "error" and run["error"] and "quota" in (run["error"]["code"] + run["error"]["message"]):
            signals.append("error")
        stored = [a for a in run["artifacts"] if a["path"] == "big.bin"]
        assert not stored or not signals, run
    else:
        assert_error(status, run, "quota_exceeded")
        signals.append("507 at once")
    status, _, doc = svc.post_run("open('/out/more.bin', 'wb').write(b'x' * 600000)", wait=True)
    if status == 507:
        assert_error(status, doc, "quota_exceeded")
        signals.append("507 next")
    assert signals, f"over the storage quota with no clear error: first run {run!r}"


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def start_sleepers(svc, n, thread=None):
    ids = []
    for _ in range(n):
        fields = {"thread_id": thread} if thread else {}
        ids.append(svc.run("import time; print('up', flush=True); time.sleep(120)", wait=False, **fields)["id"])
    for i in ids:
        svc.wait_state(i, "running", timeout=30)
    return ids


def test_kill9_and_restart(services):
    svc = services.start("crash", {"max_concurrent": 8})
    thread = "crash-" + uuid.uuid4().hex[:8]
    data = os.urandom(5000)
    code = f"open('/out/keep.bin', 'wb').write(bytes.fromhex('{data.hex()}'))"
    done = svc.run(code, thread_id=thread)
    art = done["artifacts"][0]
    lost = start_sleepers(svc, 3, thread)
    assert box_processes(), "no box process while three runs sleep?"
    port = svc.port
    children = [int(d) for d in os.listdir("/proc") if d.isdigit() and ppid(int(d)) == svc.proc.pid]
    svc.kill9()
    time.sleep(0.5)
    svc.start()
    assert svc.port == port
    for i in lost:
        run = svc.wait_state(i, TERMINAL, timeout=30)
        assert run["state"] == "error", f"a run lost by a killed service is {run['state']}: {run}"
        assert run["error"] and run["error"].get("code") and run["error"].get("message"), run
        assert run["finished_at"] is not None
        ev = svc.events(i, timeout=15)
        assert ev[-1][1] == "result" and ev[-1][2]["state"] == "error"
    assert_no_boxes(20, "after a restart following kill -9")
    # a zombie has died: this machine's PID 1 may be slow to reap orphans
    left = [p for p in children if ppid(p) is not None and p != svc.proc.pid and not _zombie(p)]
    assert not left, f"the killed service's helper processes are still alive: {left}"
    # what was stored before is still there
    assert svc.ok("GET", f"/v1/artifacts/{art['id']}") == art
    assert svc.content_bytes(art["id"])[1] == data
    assert svc.get_run(done["id"])["state"] == "succeeded"
    arts = svc.ok("GET", f"/v1/threads/{thread}/artifacts")["artifacts"]
    assert [a["id"] for a in arts] == [art["id"]]
    # and the service works, staging the old artifact into a new run of the thread
    r = svc.run("import hashlib; print(hashlib.sha256(open('/work/documents/keep.bin','rb').read()).hexdigest())",
                thread_id=thread)
    assert r["state"] == "succeeded" and r["result"]["stdout"].strip() == art["sha256"], r
    listed = {x["id"]: x["state"] for x in svc.list_runs()}
    assert all(listed[i] == "error" for i in lost) and listed[done["id"]] == "succeeded"
    # metrics agree
    text = svc.get("/metrics", key=None)[2]
    text = text.decode() if isinstance(text, bytes) else str(text)
    assert any('state="error"' in line and not line.rstrip().endswith(" 0") for line in text.splitlines()), text


def test_a_service_killed_between_a_runs_record_and_its_end_audits_it_once(services):
    """The runner records a run's tool.call before it writes the run's end
    (whoever sees the end finds the record). A service killed between the
    two: the next start ends the run as lost, refunded, and its audit keeps
    the one tool.call the runner wrote, not a second (a CI run of the
    credits burst saw two). The test build holds the runner between the two
    (AIRLOCK_TEST_FINISH_PAUSE_MS)."""
    svc = services.start("recordkill", extra_env={"AIRLOCK_TEST_FINISH_PAUSE_MS": "60000"},
                         binary=hooks_binary(ROOT / "build-asan"))
    rid = svc.run("print('ran')", wait=False)["id"]
    calls = "SELECT count(*) FROM audit_events WHERE run_id = ? AND kind = 'tool.call'"

    def count(run_id):
        return svc.sql(calls, run_id)[0][0]

    deadline = time.monotonic() + 30
    while count(rid) == 0:
        assert time.monotonic() < deadline, svc.sql("SELECT id, state FROM runs")
        time.sleep(0.05)
    assert svc.get_run(rid)["state"] in LIVE, "the run ended before the service was killed"
    svc.kill9()
    svc.extra_env.pop("AIRLOCK_TEST_FINISH_PAUSE_MS")
    svc.start()
    run = svc.wait_state(rid, TERMINAL, timeout=30)
    assert run["state"] == "error" and run["error"]["code"] == "lost", run
    assert count(rid) == 1, svc.sql("SELECT seq, data FROM audit_events WHERE run_id = ?", rid)
    assert "intact" in svc.admin("audit", "verify")
    # and the next run is recorded once, as always
    again = svc.run("print('again')")
    assert again["state"] == "succeeded" and count(again["id"]) == 1


def kill_a_runs_helper(svc):
    """Start a sleeping run on SVC and SIGKILL its helper: once the run has
    ended in airlock's error, the cgroups its box had."""
    before = set(box_cgroups())
    (rid,) = start_sleepers(svc, 1)
    helpers = svc.helpers()
    assert len(helpers) == 1, helpers
    cgs = [c for c in box_cgroups() if c not in before]
    assert cgs, "the running box has no cgroup"
    os.kill(helpers[0], signal.SIGKILL)
    killed = time.monotonic()
    run = svc.wait_state(rid, TERMINAL, timeout=30)
    assert run["state"] == "error" and run["error"]["code"] == "helper", run
    kill_a_runs_helper.ended_after_s = time.monotonic() - killed
    return cgs


def wait_gone(cgs, timeout):
    deadline = time.monotonic() + timeout
    while any(os.path.exists(c) for c in cgs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [c for c in cgs if os.path.exists(c)], f"the killed helper's box cgroup is left: {cgs}"


def test_a_helper_killed_outright_leaves_no_cgroup(services):
    # an operator's or the OOM killer's SIGKILL of one run's helper: the run
    # ends in airlock's error, and its box's cgroup, which the dead helper
    # could not remove, is removed then, not at the service's next start
    svc = services.start("helperkill")
    cgs = kill_a_runs_helper(svc)
    wait_gone(cgs, 10)
    assert_no_boxes(10, "after its helper was killed")
    # and the service goes on
    assert svc.run("print('after')")["result"]["stdout"] == "after\n"


def test_the_sweep_after_a_killed_helper_does_not_hold_up_its_runs_end(services):
    # the sweep after a helper killed outright (above) may take seconds (a
    # busy docker daemon): the run's end and its person's slot do not wait
    # for it. The test build makes the sweep that slow (AIRLOCK_TEST_SWEEP_PAUSE_MS).
    svc = services.start("sweepslow", {"per_person_concurrency": 1}, extra_env={"AIRLOCK_TEST_SWEEP_PAUSE_MS": "12000"},
                         binary=hooks_binary(ROOT / "build-asan"))
    cgs = kill_a_runs_helper(svc)
    # ended before the service's sweep could be done (the box's keeper
    # removes its cgroup meanwhile, so the cgroup's presence no longer
    # tells); and the person's one slot is free
    assert kill_a_runs_helper.ended_after_s < 10, f"the run's end waited for the sweep: {kill_a_runs_helper.ended_after_s:.1f} s"
    after = svc.run("print('next')")
    assert after["state"] == "succeeded" and after["result"]["stdout"] == "next\n", after
    wait_gone(cgs, 30)


def test_kill9_with_queued_runs(services):
    svc = services.start("crashq", {"max_concurrent": 1, "per_person_concurrency": 1})
    running = start_sleepers(svc, 1)
    queued = svc.run("print('queued one')", wait=False)["id"]
    assert svc.get_run(queued)["state"] == "queued"
    svc.kill9()
    svc.start()
    assert svc.wait_state(running[0], TERMINAL, timeout=30)["state"] == "error"
    # a queued run was never started: it may be failed as lost, or run after the restart
    q = svc.wait_state(queued, TERMINAL, timeout=30)
    assert q["state"] in ("error", "succeeded"), q
    if q["state"] == "succeeded":
        assert q["result"]["stdout"] == "queued one\n"
    else:
        assert q["error"] and q["error"]["message"]
    assert_no_boxes(20, "after a restart following kill -9")


def test_graceful_shutdown(services):
    svc = services.start("term")
    ids = start_sleepers(svc, 2)
    t0 = time.monotonic()
    rc = svc.stop(timeout=30)
    assert rc == 0, f"SIGTERM: exit status {rc} after {time.monotonic() - t0:.1f}s"
    assert_no_boxes(10, "after SIGTERM")
    svc.start()
    for i in ids:
        run = svc.get_run(i)
        assert run["state"] in ("canceled", "error"), f"after a graceful shutdown a run is {run['state']}"
        assert run["finished_at"] is not None


def test_a_stop_during_a_claim_leaves_the_run_queued(services):
    """A SIGTERM that comes while the scheduler asks the store for the next
    run: the stop sees no run active, so a runner started from that claim
    would outlive the service it reads (ASan saw it read the freed service).
    The claimed run goes back to the queue instead, and runs at the next
    start. The test build widens the window (AIRLOCK_TEST_CLAIM_PAUSE_MS)."""
    svc = services.start("claimstop", extra_env={"AIRLOCK_TEST_CLAIM_PAUSE_MS": "1500"},
                         binary=hooks_binary(ROOT / "build-asan"))
    rid = svc.run("print('after the restart')", wait=False)["id"]
    # the scheduler holds the claim, paused
    deadline = time.monotonic() + 10
    while svc.sql("SELECT node_id FROM runs WHERE id = ?", rid) != [(svc.sql("SELECT id FROM nodes")[0][0],)]:
        assert time.monotonic() < deadline, svc.sql("SELECT id, state, node_id FROM runs")
        time.sleep(0.02)
    assert svc.stop(timeout=30) == 0
    rows = svc.sql("SELECT state, node_id FROM runs WHERE id = ?", rid)
    assert rows == [("queued", None)], f"a claim taken while the service stopped was kept: {rows}"
    svc.start()
    run = svc.wait_state(rid, TERMINAL, timeout=60)
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "after the restart\n", run
