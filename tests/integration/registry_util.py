"""An OCI registry for the kubernetes driver's tests: Debian's
/usr/bin/docker-registry (distribution 2.x) on a free loopback port with a
config and storage of its own in a temp directory, started once per session
and stopped at its end; push(oci_dir) copies an OCI image layout into it
with skopeo, digests preserved, and returns the reference by digest that a
Pod names (REPO@sha256:...).

tiny_image(dir) writes a small OCI image layout for tests that need some
image before `airlock image export` makes airlock's own: the host's dash
and the coreutils the contract's STAGE and COLLECT scripts call (cp, tar,
base64, sleep, ...) with their shared libraries, in one deterministic
gzip layer (sorted, mtime 0, uid 0). A test helper only."""
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

REGISTRY = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"
REPO = "airlock/airlock-box"

_reg = None


class Registry:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="airlock-registry-"))
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.host = f"127.0.0.1:{self.port}"
        (self.dir / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.dir / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n")
        self.log = open(self.dir / "registry.log", "ab")
        self.proc = subprocess.Popen([REGISTRY, "serve", str(self.dir / "config.yml")], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert self.proc.poll() is None, f"docker-registry exited: {(self.dir / 'registry.log').read_text()[-2000:]}"
            assert time.monotonic() < deadline, "docker-registry did not answer in 20 s"
            time.sleep(0.1)

    def push(self, oci_dir, repo=REPO):
        """Copy the OCI layout OCI_DIR to REPO here; the reference by digest."""
        index = json.loads((Path(oci_dir) / "index.json").read_text())
        digest = index["manifests"][0]["digest"]
        p = subprocess.run([SKOPEO, "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false",
                            f"oci:{oci_dir}", f"docker://{self.host}/{repo}:pushed"],
                           capture_output=True, timeout=300)
        assert p.returncode == 0, f"skopeo copy: {p.stderr.decode(errors='replace')}"
        return f"{self.host}/{repo}@{digest}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def start():
    """The session's registry (started on first use)."""
    global _reg
    from conftest import need
    need(Path(REGISTRY).exists(), "docker-registry is not installed (scripts/deps.sh installs it)")
    need(Path(SKOPEO).exists(), "skopeo is not installed (scripts/deps.sh installs it)")
    if _reg is None or _reg.proc.poll() is not None:
        _reg = Registry()
    return _reg


def stop():
    global _reg
    if _reg is not None:
        _reg.stop()
        _reg = None


def push(oci_dir, repo=REPO):
    return start().push(oci_dir, repo)


# ------------------------------------------------------------ a tiny image

TOOLS = ("dash", "cp", "tar", "base64", "sleep", "cat", "dd", "head", "id", "ls", "wc", "mkdir", "rm", "touch",
         "env", "true", "false", "stat", "yes", "printf", "grep", "sort", "tail")


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
