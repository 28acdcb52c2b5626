"""The steps docs/operations.md gives a stranger for trying the kubernetes
driver without a cluster ("Trying it without a cluster"), run as written,
against the session's API double and registry (kube_pass.py: the default
image already exported and pushed there, as the block's first lines do).

The block is read from the doc, not copied here: a step that stops working,
or a doc edit that breaks a step (a flag renamed, a missing --lang, a
registry config that does not serve), fails this test. What is substituted
is only where this session's things are: the registry's address, the
double's kubeconfig, the images directory, the temp paths; and the
commands' own lines that start the double and export the image are the
session's (kube_pass.cluster) rather than second copies of them.
The kubernetes pass of make check; 10 to 14 s here (the session's double,
registry and export are the pass's, shared)."""
import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

import kube_pass
from conftest import AIRLOCK, ROOT
from service_util import free_port


NP = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/airlock-sandbox-deny-all"


def doc_steps():
    """The shell block under "Trying it without a cluster", one command a
    line (continuations joined, comments dropped)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    at = text.index("**Trying it without a cluster.**")
    block = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    assert block, "docs/operations.md: no ```sh block under 'Trying it without a cluster'"
    joined = re.sub(r"\\\n\s*", "", block.group(1))
    joined = re.sub(r"\|\n\s*", "| ", joined)
    steps = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            steps.append(line)
    return steps


def step(steps, prefix):
    found = [s for s in steps if s.startswith(prefix)]
    assert len(found) == 1, f"docs/operations.md: want one step starting {prefix!r}, found {found}"
    return found[0]


@pytest.fixture(scope="module")
def env(kube_double):
    kube, reg, registry = kube_pass.cluster()
    from image_util import CACHE
    tmp = Path(tempfile.mkdtemp(prefix="airlock-kube-docs-"))
    subs = {"127.0.0.1:5000": reg.host, "/tmp/kd/kubeconfig": kube.kubeconfig, "/tmp/registry": str(tmp / "registry"),
            "/var/lib/airlock/images": str(CACHE / "images"), "/tmp/st": str(tmp / "st")}
    path = f"{AIRLOCK.parent}:{Path(os.environ.get('AIRLOCK_KUBECTL', '/opt/airlock/tools/kubectl/kubectl')).parent}"
    e = dict(os.environ, PATH=f"{path}:{os.environ['PATH']}", AIRLOCK_STATE=str(CACHE))
    # the doc's steps start from a namespace without the policy; whatever
    # the session's double held before is what it holds after
    np = NP.format(ns=kube.namespace)
    st, _, before = kube.call("GET", np)
    kube.call("DELETE", np)
    yield kube, reg, subs, e, tmp
    kube.call("DELETE", np)
    if st == 200:
        keep = {"apiVersion": before["apiVersion"], "kind": before["kind"], "spec": before["spec"],
                "metadata": {k: before["metadata"][k] for k in ("name", "namespace", "labels") if k in before["metadata"]}}
        st, _, body = kube.call("POST", np.rsplit("/", 1)[0] + "?fieldValidation=Strict", keep)
        assert st == 201, (st, body)


def sub(line, subs):
    for k, v in subs.items():
        line = line.replace(k, v)
    return line


def sh(line, env, timeout=180):
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_the_docs_steps_run(env):
    kube, reg, subs, e, tmp = env
    steps = doc_steps()
    # the session did these: the same export and push, its own double
    assert step(steps, "airlock image export default --out ")
    push = step(steps, "skopeo copy ")
    assert "--preserve-digests" in push and "--dest-tls-verify=false" in push and "oci:" in push
    assert step(steps, "python3 tests/kube_double ").split()[2:4] == ["--state", "/tmp/kd"]
    # the registry as the doc configures it serves (Debian's own config would not, on loopback)
    port = free_port()
    subs_reg = dict(subs, **{"127.0.0.1:5000": f"127.0.0.1:{port}"})
    p = sh(sub(step(steps, "printf "), subs_reg), e)
    assert p.returncode == 0, p.stderr
    conf = step(steps, "docker-registry serve ").split()[2]
    reg2 = subprocess.Popen(["docker-registry", "serve", sub(conf, subs_reg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert reg2.poll() is None and time.monotonic() < deadline, "the doc's registry config did not serve"
                time.sleep(0.1)
    finally:
        reg2.terminate()
        reg2.wait(10)
    for kv in shlex.split(step(steps, "export "))[1:]:
        k, v = kv.split("=", 1)
        e[k] = sub(v, subs)
    assert e.get("KUBECONFIG") == e.get("AIRLOCK_KUBECONFIG") == kube.kubeconfig

    # a run, on the image pushed, through the double
    p = sh(sub(step(steps, "airlock run --driver kubernetes --registry 127.0.0.1:5000/airlock --lang"), subs), e)
    assert p.returncode == 0 and p.stdout == b"42\n", (p.returncode, p.stdout, p.stderr)
    # the summary claims no cpu or peak memory the API never reported
    assert b"airlock: exited 0 in " in p.stderr and b"not reported by Kubernetes" in p.stderr, p.stderr
    # the smoke test: the double's "CNI" lets the sandbox pod out until the policy is there
    smoke = sub(step(steps, "airlock smoke --driver kubernetes"), subs)
    p = sh(smoke, e)
    assert p.returncode == 1 and json.loads(p.stdout)["outcome"] == "NOT ENFORCED", (p.stdout, p.stderr)
    assert b"airlock-sandbox-deny-all" in p.stderr
    # the policy, from --dry-run through kubectl (as the doc pipes it)
    p = sh(sub(step(steps, "airlock run --driver kubernetes --registry 127.0.0.1:5000/airlock --dry-run"), subs), e)
    assert p.returncode == 0 and b"airlock-sandbox-deny-all created" in p.stdout, (p.stdout, p.stderr)
    p = sh(smoke, e)
    assert p.returncode == 0 and json.loads(p.stdout)["outcome"] == "enforced", (p.stdout, p.stderr)

    # the service, as the doc starts it (on a port of the test's own)
    serve = sub(step(steps, "airlock serve "), subs)
    http = free_port()
    log = open(tmp / "serve.log", "wb")
    svc = subprocess.Popen(shlex.split(serve) + ["--listen", f"127.0.0.1:{http}"], env=e, stdout=log, stderr=log,
                           stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{http}"
        deadline = time.monotonic() + 60
        while True:
            assert svc.poll() is None, (tmp / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
                    h = json.loads(r.read())
                break
            except OSError:
                assert time.monotonic() < deadline, "airlock serve did not answer /healthz in 60 s"
                time.sleep(0.2)
        assert h["driver"] == "kubernetes" and h["badges"]["namespace"] == kube.namespace, h
        p = subprocess.run([str(AIRLOCK), "admin", "--state", subs["/tmp/st"], "bootstrap"], capture_output=True,
                           env=e, timeout=60)
        key = re.search(rb"al_[a-z0-9]+", p.stdout)
        assert p.returncode == 0 and key, p
        hdr = {"Authorization": f"Bearer {key.group().decode()}", "Content-Type": "application/json"}
        # the smoke test at start: unconfirmed, saying so, until it has passed
        # (GET /v1/settings: /healthz's badges are probed at most every 30 s)
        while True:
            with urllib.request.urlopen(urllib.request.Request(base + "/v1/settings", headers=hdr), timeout=10) as r:
                st = json.loads(r.read())
            badge = st["badges"]["network"]
            if badge["level"] == "boundary-conditional":
                break
            assert badge["level"] == "unconfirmed" and "smoke test" in badge["detail"], badge
            assert time.monotonic() < deadline, f"the smoke test at start did not pass in 60 s: {badge}"
            time.sleep(0.3)
        assert "confirmed by `airlock smoke --driver kubernetes` at start" in badge["detail"], badge
        req = urllib.request.Request(base + "/v1/runs?wait=true", method="POST", headers=hdr,
                                     data=json.dumps({"language": "python", "code": "print(6 * 7)"}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            run = json.loads(r.read())
        assert run["state"] == "succeeded" and run["result"]["stdout"] == "42\n", run
        assert run["result"]["box"]["driver"] == "kubernetes"
        # offline is the driver's deny-all policy, confirmed by the smoke test: its badge, not a native box's
        assert st["network_modes"]["offline"] == st["badges"]["network"], st["network_modes"]
        assert st["network_modes"]["internet"]["level"] == "not-enforced"
    finally:
        svc.send_signal(signal.SIGTERM)
        try:
            svc.wait(60)
        except subprocess.TimeoutExpired:
            svc.kill()
            svc.wait(10)
        log.close()
