"""The Kubernetes API double (tests/kube_double) for a test session: started
once on the session's test dockerd (docker_util.py), stopped at its end.

    kube = kube_util.start(registry=registry_util.start())
    kube.kubeconfig     # a file: server, CA data, user.tokenFile
    kube.kubeconfig_cert  # the same cluster, a client certificate instead
    kube.namespace, kube.url, kube.token_file
    kube.fault({"status_500": 2})    # POST /_double/fault
    kube.pods(), kube.requests()     # what it holds, the requests it saw
    kube.call("GET", "/api/v1/...")  # (status, headers, parsed body) as the driver would call
    kube.stop()

KUBECTL and HELM are the real tools (kubectl 1.35.2, Helm 4.1.4) where
scripts/deps.sh unpacks them."""
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from conftest import ROOT, need

KUBECTL = Path(os.environ.get("AIRLOCK_KUBECTL", "/opt/airlock/tools/kubectl/kubectl"))
HELM = Path(os.environ.get("AIRLOCK_HELM", "/opt/airlock/tools/helm/helm"))
DOUBLE = ROOT / "tests" / "kube_double"

_kube = None


class KubeDouble:
    def __init__(self, registry=None, namespace="airlock-sandbox", pids_limit=1024, seccomp_root=None):
        import docker_util
        self.registry = registry
        self.dir = Path(tempfile.mkdtemp(prefix="airlock-kube-double-"))
        self.log_path = self.dir / "double.log"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(DOUBLE), "--state", str(self.dir / "state"), "--docker", str(docker_util.SOCKET),
             "--namespace", namespace, "--pids-limit", str(pids_limit)]
            + (["--seccomp-root", str(seccomp_root)] if seccomp_root else []),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        ready = self.dir / "state" / "ready.json"
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert self.proc.poll() is None, f"kube_double exited: {self.log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"kube_double not ready in 30 s: {self.log_path.read_text()[-3000:]}"
            time.sleep(0.05)
        info = json.loads(ready.read_text())
        self.url, self.port, self.namespace = info["url"], info["port"], info["namespace"]
        self.kubeconfig, self.kubeconfig_cert = info["kubeconfig"], info["kubeconfig_cert"]
        self.token_file, self.ca, self.network = info["token_file"], info["ca"], info["network"]
        # the kubelet's seccomp root: a Localhost profile PATH is read from here
        self.seccomp_root = Path(info["seccomp_root"])
        self.ctx = ssl.create_default_context(cafile=self.ca)

    # ------------------------------------------------------------ calls
    def token(self):
        return Path(self.token_file).read_text().strip()

    def call(self, method, path, body=None, token=None, timeout=30, raw=False):
        """One API call as a client would make it: (status, headers, body parsed as JSON, or bytes when RAW)."""
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token if token is not None else self.token()}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                status, headers, out = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, headers, out = e.code, e.headers, e.read()
        if raw:
            return status, headers, out
        try:
            return status, headers, json.loads(out)
        except ValueError:
            return status, headers, out

    def stream(self, path, timeout=60):
        """An open streaming response (watch, follow): read lines from it; close it."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", f"Bearer {self.token()}")
        return urllib.request.urlopen(req, context=self.ctx, timeout=timeout)

    def control(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{path}: {e.code} {e.read()!r}") from None

    def fault(self, f):
        return self.control("POST", "/_double/fault", f)

    def pods(self):
        return self.control("GET", "/_double/pods")

    def requests(self):
        return self.control("GET", "/_double/requests")

    def info(self):
        return self.control("GET", "/_double/info")

    def kubectl(self, *args, kubeconfig=None, timeout=60, input=None):
        need(KUBECTL.exists(), f"kubectl is not at {KUBECTL} (scripts/deps.sh unpacks it)")
        env = dict(os.environ, HOME=str(self.dir), KUBECACHEDIR=str(self.dir / "kubecache"))
        return subprocess.run([str(KUBECTL), "--kubeconfig", kubeconfig or self.kubeconfig,
                               "--cache-dir", str(self.dir / "kubecache"), *map(str, args)],
                              capture_output=True, timeout=timeout, env=env, input=input)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # its certificates, token and Secret volumes (read kube.log() before)
        shutil.rmtree(self.dir, ignore_errors=True)


def start(registry=None, **kw):
    """The session's double (started on first use, on docker_util's dockerd)."""
    global _kube
    import docker_util
    docker_util.start()
    if _kube is None or _kube.proc.poll() is not None:
        if _kube is not None:
            _kube.stop()      # a dead one's directory goes too
        _kube = KubeDouble(registry=registry, **kw)
    return _kube


def stop():
    global _kube
    if _kube is not None:
        _kube.stop()
        _kube = None
