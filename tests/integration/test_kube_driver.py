"""The kubernetes driver (src/kube/run.c, src/drivers/kubernetes.c) against
the API double (tests/kube_double) on the test dockerd: `airlock run
--driver kubernetes` end to end (a real pod of real containers pulled by
digest from the loopback registry), every create under
fieldValidation=Strict, the faults the double injects (the API server
unreachable, 500s mid-run, watches that end or expire, a pod deleted by
someone else, a rotated token, an unschedulable pod, an image that cannot
be pulled), no pod or Secret left after any of them, and the sweep of a
dead service's pods. The kubernetes pass of make check (conftest.MODULES)."""
import hashlib
import json
import os
import subprocess
import threading
import time

import pytest

import kube_pass
from conftest import AIRLOCK



@pytest.fixture(scope="module")
def kube():
    return kube_pass.cluster()[0]


def kube_run(code, *extra, lang="python", timeout=180, input=None, args=()):
    dargs, env = kube_pass.run_args()
    p = subprocess.run([str(AIRLOCK), "run", "--json", *dargs, "--lang", lang, *map(str, extra), "-c", code, *args],
                       capture_output=True, timeout=timeout, env=dict(os.environ, **env), input=input)
    try:
        return p.returncode, json.loads(p.stdout), p.stderr.decode(errors="replace")
    except ValueError:
        raise AssertionError(f"not JSON (exit {p.returncode}): {p.stdout[:2000]!r} {p.stderr[:2000]!r}") from None


def ours(items):
    return [i for i in items if (i.get("metadata", i).get("name") or "").startswith("airlock-")]


def held(kube):
    """The pods and Secrets the double holds that a run made."""
    doc = kube.pods()
    pods = doc.get("pods", doc) if isinstance(doc, dict) else doc
    secrets = doc.get("secrets", []) if isinstance(doc, dict) else []
    return ours(pods), ours(secrets)


def assert_clean(kube, within=15):
    deadline = time.monotonic() + within
    while True:
        pods, secrets = held(kube)
        if not pods and not secrets:
            return
        assert time.monotonic() < deadline, f"left behind: pods {pods}, secrets {secrets}"
        time.sleep(0.2)


def wait_pod(kube, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods, _ = held(kube)
        if pods:
            p = pods[0]
            return p.get("metadata", p).get("name")
        time.sleep(0.1)
    raise AssertionError("no pod appeared")


def requests_now(kube):
    reqs = kube.requests()
    return reqs.get("requests", reqs) if isinstance(reqs, dict) else reqs


def test_run_end_to_end(kube, tmp_path):
    t0 = time.monotonic()
    # (the double may have served other modules of the pass before)
    seen = len(requests_now(kube))
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    out = tmp_path / "out"
    out.mkdir()
    stdin = tmp_path / "stdin"
    stdin.write_bytes(b"hello\n")
    code = ("import os, sys\n"
            "print('args', sys.argv[1:], 'stdin', sys.stdin.read().strip())\n"
            "print('err', file=sys.stderr)\n"
            "print('uid', os.getuid(), 'cwd', os.getcwd(), 'data', open('data.csv').read().split())\n"
            "os.makedirs('/out/sub', exist_ok=True)\n"
            "open('/out/sub/result.txt', 'w').write('42\\n')\n"
            "sys.exit(3)\n")
    st, doc, err = kube_run(code, "--in", data, "--out", out, "--stdin", stdin, args=("x", "y z"))
    assert doc["reason"] == "exited" and doc["exit_code"] == 3, (doc, err)
    assert "args ['x', 'y z'] stdin hello" in doc["stdout"], doc["stdout"]
    assert "uid 65534 cwd /work data ['a,b', '1,2']" in doc["stdout"]
    # stdout and stderr come merged, as stdout, and the badge says so
    assert "err" in doc["stdout"] and not doc.get("stderr"), doc
    assert (out / "sub" / "result.txt").read_text() == "42\n"
    arts = {a["path"]: a for a in doc["artifacts"]}
    assert arts["sub/result.txt"]["sha256"] == hashlib.sha256(b"42\n").hexdigest()
    assert doc["box"]["driver"] == "kubernetes"
    assert doc["controls"]["network"]["level"] == "unconfirmed"
    pids = doc["controls"]["cgroup"]["pids"]
    assert pids["level"] == "not-enforced" and "podPidsLimit" in pids["detail"], pids
    # every create went with fieldValidation=Strict
    reqs = requests_now(kube)[seen:]
    creates = [r for r in reqs if r["method"] == "POST" and "/_double/" not in r["path"]]
    def strict(r):
        q = r.get("query") or {}
        v = q.get("fieldValidation") if isinstance(q, dict) else None
        return (v[0] if isinstance(v, list) else v) == "Strict" or "fieldValidation=Strict" in str(q)
    assert len(creates) >= 2 and all(strict(r) for r in creates), creates
    assert_clean(kube)
    print(f"one run through the double: {time.monotonic() - t0:.1f} s")


def test_signal_and_timeout_collect_out(kube, tmp_path):
    # a real fault, and a signal the script sends itself: it is the stage
    # shell's child, not its container's PID 1 (which would ignore it), and
    # the shell's 128+N is read back as the signal N
    st, doc, err = kube_run("import ctypes; ctypes.string_at(0)")
    assert doc["reason"] == "exited" and doc["signal"] == 11 and doc["exit_code"] is None, (doc, err)
    st, doc, err = kube_run("import os; print(os.getppid() != 0 and os.getpid() != 1); os.kill(os.getpid(), 15)")
    assert doc["signal"] == 15 and doc["exit_code"] is None and doc["stdout"] == "True\n", (doc, err)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    st, doc, err = kube_run("import time; open('/out/partial.txt', 'w').write('before'); print('up', flush=True); "
                            "time.sleep(60)", "--timeout", "2", "--out", out)
    assert doc["reason"] == "timeout", (doc, err)
    assert "up" in doc["stdout"]
    # /out as the script left it, written by the sidecar once main was gone
    assert (out / "partial.txt").read_text() == "before"
    assert time.monotonic() - t0 < 30
    assert_clean(kube)


def test_faults_mid_run_are_ridden_out(kube):
    """500s, a watch that ends, a watch that expires (410), a rotated token:
    each mid-run, and the run ends as it would have."""
    for fault in ({"status_500": 2}, {"end_watches": True}, {"expire_watches": True}, {"rotate_token": True}):
        box = {}
        th = threading.Thread(target=lambda: box.update(zip(("st", "doc", "err"), kube_run(
            "import time; time.sleep(3); print('done')"))))
        th.start()
        wait_pod(kube)
        time.sleep(1)
        kube.fault(fault)
        th.join(120)
        assert box["doc"]["reason"] == "exited" and box["doc"]["exit_code"] == 0, (fault, box)
        assert box["doc"]["stdout"] == "done\n", (fault, box["doc"])
        assert_clean(kube)


def test_api_unreachable_for_a_while(kube):
    kube.fault({"unreachable_s": 3})
    st, doc, err = kube_run("print('after')")
    assert doc["reason"] == "exited" and doc["stdout"] == "after\n", (doc, err)
    assert_clean(kube)


def test_pod_deleted_by_someone_else(kube):
    box = {}
    th = threading.Thread(target=lambda: box.update(zip(("st", "doc", "err"), kube_run(
        "import time; time.sleep(60)"))))
    th.start()
    name = wait_pod(kube)
    time.sleep(1.5)
    kube.fault({"delete_pod": name})
    th.join(60)
    doc = box["doc"]
    assert doc["reason"] == "error" and "deleted by someone else" in doc["error"]["message"], doc
    assert doc["error"]["step"] == "provisioning"
    assert_clean(kube)


def test_image_not_pullable(kube):
    _, reg, _ = kube_pass.cluster()
    ref = f"{reg.host}/airlock/airlock-box@sha256:{'0' * 64}"
    st, doc, err = kube_run("print(1)", "--image-ref", ref)
    assert doc["reason"] == "error" and doc["error"]["step"] == "provisioning", (doc, err)
    assert "ErrImagePull" in doc["error"]["message"] or "ImagePullBackOff" in doc["error"]["message"], doc
    assert_clean(kube)


def kube_service(state, key=None, **kw):
    """A service on the kubernetes driver, its images the suite's cache's."""
    from image_util import CACHE
    from service_util import Service
    state.mkdir(parents=True, exist_ok=True)
    if not (state / "images").exists():
        (state / "images").symlink_to(CACHE / "images")
    return Service(state, config=kube_pass.service_config(**kw), key=key, bootstrap=key is None)


def test_unschedulable_is_an_error_not_charged(kube, tmp_path):
    from service_util import ledger_by_run, usage
    svc = kube_service(tmp_path / "svc", schedule_timeout_s=2)
    svc.start()
    try:
        kube.fault({"unschedulable": True})
        t0 = time.monotonic()
        run = svc.run("print(1)")
        took = time.monotonic() - t0
        assert run["state"] == "error", run
        assert "cannot be scheduled" in json.dumps(run["error"]), run["error"]
        assert took < 20, f"an unschedulable pod (2 s allowed) took {took:.1f} s"
        kube.fault({"unschedulable": False})
        ok = svc.run("print(2)")
        assert ok["state"] == "succeeded" and ok["result"]["stdout"] == "2\n", ok
        led = ledger_by_run(usage(svc)["ledger"])
        # the run that ran is charged; the one the cluster could not place is not
        assert sum(led.get(ok["id"], {}).get("charge", [])) > 0, led
        bad = led.get(run["id"], {"charge": [], "refund": []})
        assert sum(bad["charge"]) == sum(bad["refund"]), bad
    finally:
        kube.fault({"unschedulable": False})
        svc.stop()
    assert_clean(kube)


def test_sweep_of_a_dead_services_pods(kube, tmp_path):
    state = tmp_path / "svc"
    a = kube_service(state)
    a.start()
    a.post_run("import time; time.sleep(120)")
    name = wait_pod(kube)
    # the service and its helper die at once: nothing deletes the pod
    for pid in a.helpers():
        os.kill(pid, 9)
    a.kill9()
    assert name in [p.get("metadata", p).get("name") for p in held(kube)[0]]
    b = kube_service(state, key=a.key)
    b.start()
    try:
        assert_clean(kube, within=20)
    finally:
        b.stop()


def test_cancel_deletes_the_pod(kube, tmp_path):
    from service_util import TERMINAL
    svc = kube_service(tmp_path / "svc")
    svc.start()
    try:
        run = svc.run("import time; print('up', flush=True); time.sleep(60)", wait=False)
        wait_pod(kube)
        svc.wait_state(run["id"], "running", timeout=30)
        t0 = time.monotonic()
        status, _, _ = svc.cancel(run["id"])
        assert status == 202
        done = svc.wait_state(run["id"], TERMINAL, timeout=30)
        assert done["state"] == "canceled", done
        assert_clean(kube, within=10)
        assert time.monotonic() - t0 < 12
    finally:
        svc.stop()
