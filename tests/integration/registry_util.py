"""A real OCI registry for the kubernetes tests: Debian's docker-registry
(distribution) on a free loopback port, its storage in a directory of the
session's, no auth and no TLS (docker and skopeo treat 127.0.0.0/8 as an
insecure registry they may use over plain HTTP). Images go in with skopeo,
as an operator's pipeline pushes them (`airlock image export` then
`skopeo copy --preserve-digests oci:DIR docker://...`), and come out by
digest (the kubernetes double's pulls, a test dockerd's).

Shared by the kubernetes driver's tests and the deploy tests: one file
(K-deploy wrote it first; K-double owns it from here)."""
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
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


_session = None


def start(root=None):
    """A registry: with ROOT, one of its own (the caller stops it); without,
    the session's, started on first use (stop() ends it)."""
    global _session
    if root is not None:
        return Registry(root)
    if _session is None or _session.proc.poll() is not None:
        if _session is not None:
            _session.stop()   # a dead one's storage goes too
        _session = Registry()
    return _session


def stop():
    """The session's registry stopped (if it runs)."""
    global _session
    if _session is not None:
        _session.stop()
        _session = None


# ------------------------------------------------------------ a tiny image

TOOLS = ("dash", "cp", "tar", "base64", "sleep", "cat", "dd", "head", "id", "ls", "wc", "mkdir", "rm", "touch",
         "env", "true", "false", "stat", "yes", "printf", "grep", "sort", "tail", "cut", "tr", "sed", "readlink", "bash", "timeout")


def _libs(paths):
    out = set()
    for p in paths:
        r = subprocess.run(["ldd", p], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            parts = line.split()
            for x in parts:
                if x.startswith("/"):
                    out.add(x)
    return out


def _blob(d, data):
    h = hashlib.sha256(data).hexdigest()
    (d / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (d / "blobs" / "sha256" / h).write_bytes(data)
    return "sha256:" + h


def tiny_image(out):
    """Write the tiny image's OCI layout into OUT; its manifest digest."""
    out = Path(out)
    bins = [shutil.which(t) for t in TOOLS]
    bins = [os.path.realpath(b) for b in bins if b]
    wanted = set(bins) | _libs(bins) | {"/lib64/ld-linux-x86-64.so.2"}
    files = sorted({os.path.realpath(x) for x in wanted})
    # the names the binaries ask for (the ELF interpreter, sonames) as links
    # to the files, under the merged /usr
    def under_usr(p):
        rel = os.path.normpath(p).lstrip("/")
        return rel if rel.startswith("usr/") else "usr/" + rel
    links = {under_usr(x): "/" + under_usr(os.path.realpath(x)) for x in wanted
             if under_usr(x) != under_usr(os.path.realpath(x))}
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add_dir(name, mode=0o755):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 0
            tar.addfile(ti)

        def add_link(name, target):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, 0
            tar.addfile(ti)
        entries = {}
        for f in files:
            real = os.path.realpath(f)
            entries[under_usr(real)] = real   # merged /usr: everything under usr/
        dirs = sorted({str(Path(r).parent) for r in list(entries) + list(links)} |
                      {"usr", "usr/bin", "usr/lib", "usr/lib64", "etc", "tmp"})
        allp = set()
        for dd in dirs:
            parts = dd.split("/")
            for i in range(1, len(parts) + 1):
                allp.add("/".join(parts[:i]))
        for dd in sorted(allp):
            add_dir(dd, 0o1777 if dd == "tmp" else 0o755)
        for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/bin")):
            add_link(link, target)
        for rel, real in sorted(entries.items()):
            ti = tarfile.TarInfo(rel)
            data = Path(real).read_bytes()
            ti.size, ti.mode, ti.mtime = len(data), 0o755, 0
            tar.addfile(ti, io.BytesIO(data))
        for rel, real in sorted(links.items()):
            if rel not in entries:
                add_link(rel, real)
        if "usr/bin/sh" not in entries:
            add_link("usr/bin/sh", "dash")
        for name, body in (("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"),
                           ("etc/group", b"root:x:0:\nnogroup:x:65534:\n")):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(body), 0o644, 0
            tar.addfile(ti, io.BytesIO(body))
    layer = raw.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="") as g:
        g.write(layer)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    ldig = _blob(out, gz.getvalue())
    cfg = json.dumps({"architecture": "amd64", "os": "linux",
                      "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "User": ""},
                      "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}},
                     sort_keys=True).encode()
    cdig = _blob(out, cfg)
    man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig,
                                 "size": len(cfg)},
                      "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ldig,
                                  "size": len(gz.getvalue())}]}, sort_keys=True).encode()
    mdig = _blob(out, man)
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdig, "size": len(man)}]}))
    return mdig
