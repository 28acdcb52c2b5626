"""The kubernetes pass's cluster (conftest.driver_args, service_util): the
API double (kube_util.py) on the test dockerd, the loopback registry
(registry_util.py), and the default image exported with `airlock image
export` and pushed there once per session, so that runs through the
kubernetes driver pull it by digest as a cluster would. Airlock's seccomp
profile (`airlock seccomp-profile`) is installed in the double's seccomp root
(the kubelet's /var/lib/kubelet/seccomp) as SECCOMP_PATH, and every run and
service of the pass names it (`kubernetes_seccomp = localhost:...`), as an
operator's sandbox nodes would: the battery's seccomp cases then hold
through the pod as they do on docker."""
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from conftest import AIRLOCK

_env = None

# the profile's path under the kubelet's seccomp root, as the chart's example names it
SECCOMP_PATH = "airlock/airlock.json"
SECCOMP = f"localhost:{SECCOMP_PATH}"


def install_profile(kube, path=SECCOMP_PATH):
    """`airlock seccomp-profile --out` into the double's seccomp root at PATH."""
    dest = kube.seccomp_root / path
    dest.parent.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([str(AIRLOCK), "seccomp-profile", "--out", str(dest)], capture_output=True, timeout=30)
    assert p.returncode == 0, f"airlock seccomp-profile: {p.stderr.decode(errors='replace')}"
    return dest


NP = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"


def set_policy(kube, present=True):
    """The namespace's deny-all NetworkPolicy (the chart's) installed or
    removed. The pass installs it, as every install does, so that the
    battery's offline cases (I) hold through the pod: the double runs a pod
    it selects with no network (its stand-in for a CNI)."""
    path = NP.format(ns=kube.namespace)
    st, _, _ = kube.call("DELETE", path + "/airlock-sandbox-deny-all")
    assert st in (200, 404), st
    if present:
        doc = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "airlock-sandbox-deny-all", "namespace": kube.namespace},
               "spec": {"podSelector": {"matchLabels": {"airlock.dev/sandbox": "true"}},
                        "policyTypes": ["Ingress", "Egress"]}}
        st, _, body = kube.call("POST", path + "?fieldValidation=Strict", doc)
        assert st == 201, (st, body)


def cluster():
    """(kube double, registry, `--registry` value): started and pushed once."""
    global _env
    if _env is not None and _env[0].proc.poll() is None:
        return _env
    import kube_util
    import registry_util
    from image_util import CACHE, ensure_default_image
    ensure_default_image()
    reg = registry_util.start()
    kube = kube_util.start(registry=reg)
    install_profile(kube)
    set_policy(kube)
    # the export (~270 MB) is needed for the push alone: removed right
    # after it, whatever happens
    tmp = Path(tempfile.mkdtemp(prefix="airlock-kube-export-"))
    try:
        out = tmp / "oci"
        p = subprocess.run([str(AIRLOCK), "image", "--state", str(CACHE), "export", "default", "--out", str(out),
                            "--json"], capture_output=True, timeout=300)
        assert p.returncode == 0, f"airlock image export: {p.stderr.decode(errors='replace')}"
        digest = json.loads(p.stdout)["digest"]
        # (registry_util's push takes a skopeo source and answers the digest)
        pushed = reg.push(f"oci:{out}")
        assert pushed == digest, (pushed, digest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _env = (kube, reg, f"{reg.host}/airlock")
    return _env


def run_args(seccomp=SECCOMP):
    """`airlock run` arguments and environment for the kubernetes driver
    (SECCOMP: airlock's Localhost profile unless a test asks otherwise)."""
    from image_util import CACHE
    kube, _, registry = cluster()
    return (["--driver", "kubernetes", "--kubeconfig", kube.kubeconfig, "--namespace", kube.namespace,
             "--registry", registry, "--seccomp", seccomp], {"AIRLOCK_STATE": str(CACHE)})


def service_config(schedule_timeout_s=None, smoke=False, seccomp=SECCOMP):
    """A service's config keys for the kubernetes driver. The smoke test at
    start (three pods of its own) is off but where a test asks for it."""
    kube, _, registry = cluster()
    c = {"driver": "kubernetes", "kubeconfig": kube.kubeconfig, "kubernetes_namespace": kube.namespace,
         "kubernetes_registry": registry, "kubernetes_smoke": "true" if smoke else "false",
         "kubernetes_seccomp": seccomp}
    if schedule_timeout_s:
        c["kubernetes_schedule_timeout_s"] = str(schedule_timeout_s)
    return c


def stop():
    """The session's double, registry and test dockerd, stopped."""
    global _env
    import docker_util
    import kube_util
    import registry_util
    kube_util.stop()
    registry_util.stop()
    docker_util.stop()
    _env = None
