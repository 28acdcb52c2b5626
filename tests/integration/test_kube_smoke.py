"""The NetworkPolicy smoke test (src/kube/smoke.c, research E2) against the
API double on the test dockerd: `airlock smoke --driver kubernetes` says
NOT ENFORCED (exit 1) when the namespace has no deny-all NetworkPolicy (the
sandbox probe reaches the target pod the control probe reaches) and
enforced (exit 0) when it has; the service runs it once at start and its
network badge is "boundary-conditional" only after it passed, "unconfirmed"
with the smoke test's words when it did not. No smoke pod is left behind.

The double's enforcement stands in for a CNI's (a pod selected by an
Egress policy with no rules gets no network): this proves airlock's side,
not a cluster's CNI. The kubernetes pass of make check."""
import json
import os
import time

import pytest

import kube_pass
from conftest import airlock
from service_util import services  # noqa: F401


set_policy = kube_pass.set_policy


def smoke_pods(kube):
    return [p for p in kube.pods() if "airlock-smoke-" in json.dumps(p)]


@pytest.fixture(scope="module")
def env(kube_double):
    # (kube_double first: the session's double and registry, which it stops
    # at the session's end; kube_pass.cluster() then finds them running)
    kube, _, registry = kube_pass.cluster()
    yield kube, registry
    set_policy(kube, True)     # as the pass keeps it (kube_pass.cluster)


def smoke(kube, registry, kubeconfig=None):
    from image_util import CACHE
    p = airlock("smoke", "--driver", "kubernetes", "--kubeconfig", kubeconfig or kube.kubeconfig,
                "--namespace", kube.namespace,
                "--registry", registry, "--timeout", "120", timeout=180,
                env=dict(os.environ, AIRLOCK_STATE=str(CACHE)))
    doc = json.loads(p.stdout)
    return p.returncode, doc, p.stderr.decode(errors="replace")


def test_smoke_cli(env):
    kube, registry = env
    t0 = time.monotonic()
    # (the double may have served other modules of the pass before: only
    # the requests from here on are this test's)
    seen = kube.requests()
    seen = len(seen.get("requests", seen) if isinstance(seen, dict) else seen)
    set_policy(kube, False)
    rc, doc, err = smoke(kube, registry)
    assert rc == 1 and doc["outcome"] == "NOT ENFORCED", (doc, err)
    assert doc["detail"]["control"]["reached"] is True and doc["detail"]["sandbox"]["reached"] is True
    assert "NOT ENFORCED" in err and "does not enforce the NetworkPolicy airlock-sandbox-deny-all" in err
    assert not smoke_pods(kube)
    set_policy(kube, True)
    # (with the client certificate this time: the other way airlock authenticates)
    rc, doc, err = smoke(kube, registry, kube.kubeconfig_cert)
    assert rc == 0 and doc["outcome"] == "enforced", (doc, err)
    sb = doc["detail"]["sandbox"]
    assert sb["reached"] is False and doc["detail"]["control"]["reached"] is True
    assert sb["uid"] == 65534 and sb["service_account_token"] is False and sb["read_only_root"] is True
    # (RuntimeDefault, Docker's default profile here: ptrace reaches the kernel, ESRCH)
    assert sb["syscalls"]["ptrace"] == 3, sb
    assert doc["image"].startswith(registry + "/airlock-box@sha256:")
    assert not smoke_pods(kube)
    # every pod it made went through Strict field validation
    reqs = kube.requests()
    reqs = (reqs.get("requests", reqs) if isinstance(reqs, dict) else reqs)[seen:]
    made = [r for r in reqs if r["method"] == "POST" and r["path"].endswith("/pods")]
    assert made and all(r.get("query", {}).get("fieldValidation") == "Strict" for r in made), made[-3:]
    assert [r["auth"] for r in made[-3:]] == ["cert"] * 3 and made[-4]["auth"] == "token", made[-4:]
    print(f"smoke CLI, not enforced then enforced: {time.monotonic() - t0:.1f} s")


def badge(svc, want_level, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        net = svc.ok("GET", "/v1/settings")["badges"]["network"]
        if net["level"] == want_level and (want_level != "unconfirmed" or "smoke test at start" in net["detail"]):
            return net
        assert time.monotonic() < deadline, net
        time.sleep(0.5)


def test_service_smoke_at_start(env, services):
    from image_util import CACHE
    kube, _ = env
    t0 = time.monotonic()
    cfg = dict(kube_pass.service_config(smoke=True), images=str(CACHE / "images"))
    set_policy(kube, False)
    svc = services.start("smoke-off", cfg)
    net = badge(svc, "unconfirmed")
    assert "NOT ENFORCED" in net["detail"], net
    # (the pass names airlock's Localhost profile: applied, not yet confirmed)
    sc = svc.ok("GET", "/v1/settings")["badges"]["seccomp"]
    assert sc["level"] == "unconfirmed" and "not confirmed until the smoke test" in sc["detail"], sc
    svc.stop()
    assert not smoke_pods(kube)
    set_policy(kube, True)
    svc = services.start("smoke-on", cfg)
    net = badge(svc, "boundary-conditional")
    assert "confirmed by `airlock smoke --driver kubernetes` at start" in net["detail"], net
    # its sandbox probe ran under the pass's Localhost profile and saw it refuse
    sc = svc.ok("GET", "/v1/settings")["badges"]["seccomp"]
    assert sc["level"] == "boundary-conditional" and "confirmed by the smoke test" in sc["detail"], sc
    assert not smoke_pods(kube)
    print(f"the service's smoke at start, both ways: {time.monotonic() - t0:.1f} s")


def test_smoke_refuses_a_server_its_ca_did_not_sign(env, tmp_path):
    """The kubeconfig's CA alone is trusted: the same server under another
    CA is refused before any request is sent."""
    import base64
    import subprocess
    kube, registry = env
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "ca.pem"), "-days", "1",
                    "-subj", "/CN=not-the-cluster-ca"], check=True, capture_output=True)
    cfg = json.loads(open(kube.kubeconfig).read())
    cfg["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        (tmp_path / "ca.pem").read_bytes()).decode()
    other = tmp_path / "kubeconfig"
    other.write_text(json.dumps(cfg))
    before = len([r for r in kube.requests() if r["method"] == "POST"])
    rc, doc, err = smoke(kube, registry, other)
    assert rc == 2 and doc["outcome"] == "inconclusive", (doc, err)
    assert "certificate" in doc["reason"].lower() or "ssl" in doc["reason"].lower(), doc
    assert len([r for r in kube.requests() if r["method"] == "POST"]) == before
