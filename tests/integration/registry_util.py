"""A real OCI registry for the kubernetes tests: Debian's docker-registry
(distribution) on a free loopback port, its storage in a directory of the
session's, no auth and no TLS (docker and skopeo treat 127.0.0.0/8 as an
insecure registry they may use over plain HTTP). Images go in with skopeo,
as an operator's pipeline pushes them (`airlock image export` then
`skopeo copy --preserve-digests oci:DIR docker://...`), and come out by
digest (the kubernetes double's pulls, a test dockerd's).

Shared by the kubernetes driver's tests and the deploy tests: one file
(K-deploy wrote it first; K-double owns it from here)."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from conftest import need

REPO = "airlock/airlock-box"


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Registry:
    def __init__(self, root=None):
        need(shutil.which("docker-registry") is not None,
             "docker-registry is not installed (scripts/deps.sh installs it)")
        need(shutil.which("skopeo") is not None, "skopeo is not installed (scripts/deps.sh installs it)")
        self._own = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="airlock-registry-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        cfg = self.root / "config.yml"
        # JSON is YAML: the registry reads it as its config
        cfg.write_text(json.dumps({
            "version": 0.1, "log": {"level": "warn"},
            "storage": {"filesystem": {"rootdirectory": str(self.root / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }))
        self._log = open(self.root / "registry.log", "ab")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(cfg)], stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, \
                f"docker-registry exited {self.proc.returncode}: {(self.root / 'registry.log').read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "docker-registry did not answer in 30 s"
            time.sleep(0.1)

    def push(self, source, repo=REPO, timeout=180):
        """skopeo copy SOURCE (e.g. "oci:/path" or "oci-archive:/path.tar")
        to REPO here, digests preserved; the manifest digest it landed as."""
        with tempfile.NamedTemporaryFile(prefix="digest-", dir=self.root) as f:
            p = subprocess.run(["skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                                "--digestfile", f.name, source, f"docker://{self.host}/{repo}"],
                               capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
            assert p.returncode == 0, f"skopeo copy {source}: {p.stderr.decode(errors='replace')[-2000:]}"
            return Path(f.name).read_text().strip()

    def ref(self, digest, repo=REPO):
        """How a pod (or docker pull) names the image: by digest, never a tag."""
        return f"{self.host}/{repo}@{digest}"

    def manifest(self, digest, repo=REPO):
        req = urllib.request.Request(f"http://{self.host}/v2/{repo}/manifests/{digest}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        if self._own:
            shutil.rmtree(self.root, ignore_errors=True)


def start(root=None):
    """A registry for a session (or a module): stop() it at the end."""
    return Registry(root)
