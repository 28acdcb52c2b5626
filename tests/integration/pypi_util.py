"""A Python package index of the tests' own (PEP 503 "simple"), served on
loopback in a thread, and the packages it serves, made with the standard
library alone: no index is reachable from this machine, and a test must
know exactly what it installs.

    idx = PyPI().start()            # http://127.0.0.1:PORT/simple/
    idx.add(wheel("tinypkg", "1.0", {"tinypkg/__init__.py": b"VALUE = 1\\n"}))
    ...
    idx.stop()

The install box reaches it through airlock's egress proxy by a name of its
own (NAME, pypi.airlock.test, no DNS answer) given the range 127.0.0.1/32
in package_registries: `registries()` is that entry, `url` the index URL by
that name, `env()` the proxy's allowed ports with the index's.
"""
import base64
import hashlib
import html
import http.server
import io
import os
import re
import tarfile
import tempfile
import threading
import zipfile
from pathlib import Path

NAME = "pypi.airlock.test"


def normalize(name):
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def wheel(name, version, files, requires=(), extra_record=(), raw_entries=()):
    """A pure-Python wheel (py3-none-any): (filename, bytes). FILES maps a
    path in the wheel to its bytes; REQUIRES are Requires-Dist lines;
    EXTRA_RECORD lines go into RECORD as they are, and RAW_ENTRIES
    ((path, bytes)) into the zip under exactly that path (a hostile wheel's
    `../../escape` or `/abs/path`)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    entries = dict(files)
    entries[f"{info}/METADATA"] = meta.encode()
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: airlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(_record_line(p, d) for p, d in entries.items())
    record += "".join(extra_record) + f"{info}/RECORD,,\n"
    entries[f"{info}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in entries.items():
            z.writestr(p, d)
        for p, d in raw_entries:
            zi = zipfile.ZipInfo(p)
            z.writestr(zi, d)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


def sdist(name, version, setup_py, files=None):
    """A source distribution (.tar.gz) whose setup.py is SETUP_PY: what
    builds it runs that code (setuptools, no build isolation needed:
    pyproject-less sdists are built with the installer's setuptools)."""
    base = f"{name}-{version}"
    members = {f"{base}/setup.py": setup_py.encode(),
               f"{base}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()}
    for p, d in (files or {}).items():
        members[f"{base}/{p}"] = d
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for p, d in members.items():
            ti = tarfile.TarInfo(p)
            ti.size = len(d)
            ti.mode = 0o644
            t.addfile(ti, io.BytesIO(d))
    return f"{base}.tar.gz", buf.getvalue()


class PyPI:
    """The index: a directory served by http.server, PEP 503 pages
    rewritten at each add()."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="airlock-pypi-"))
        (self.dir / "simple").mkdir()
        (self.dir / "files").mkdir()
        self.projects = {}
        self.server = None
        self.requests = []

    def add(self, dist, project=None):
        """DIST ((filename, bytes)) served under PROJECT (else its name's)."""
        filename, data = dist
        project = normalize(project or re.split(r"-\d", filename, maxsplit=1)[0])
        (self.dir / "files" / filename).write_bytes(data)
        self.projects.setdefault(project, []).append((filename, hashlib.sha256(data).hexdigest()))
        self._write_pages()
        return hashlib.sha256(data).hexdigest()

    def _write_pages(self):
        links = "".join(f'<a href="/simple/{p}/">{p}</a>\n' for p in sorted(self.projects))
        (self.dir / "simple" / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        for p, files in self.projects.items():
            (self.dir / "simple" / p).mkdir(exist_ok=True)
            body = "".join(f'<a href="/files/{html.escape(f)}#sha256={h}">{html.escape(f)}</a>\n' for f, h in files)
            (self.dir / "simple" / p / "index.html").write_text(
                f"<!DOCTYPE html><html><body>\n{body}</body></html>\n")

    def start(self):
        root, log = str(self.dir), self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=root, **kw)

            def log_message(self, fmt, *args):
                log.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def port(self):
        return self.server.server_address[1]

    @property
    def url(self):
        """The index as the install box names it: by NAME, through the proxy."""
        return f"http://{NAME}:{self.port}/simple"

    def registries(self, *more):
        """package_registries with this index (its one address a range)."""
        return ",".join((f"{NAME}=127.0.0.1/32",) + more)

    def env(self, **extra):
        """The environment for `airlock run`: the proxy allows the index's port."""
        e = dict(os.environ)
        e["AIRLOCK_PROXY_PORTS"] = f"80,443,{self.port}"
        e.update(extra)
        return e

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)
