"""Issue 38's packages, attacked (docs/security.md, S): a tenant and a
hostile package against the install step, its layer store and the service
around it. Each case is differential: the control (pip or npm's own
reading on the host, the same code run on the host) does what the attack
wants; airlock does not.

- a spec that pip or npm reads as a file or directory of the install's
  working directory (`foo.whl`, `x==1.tar.gz`, `x.tgz`, `left-pad@.`),
  refused before anything is charged;
- two different sets whose layer keys were one (the word "node" is a spec
  of both languages): each run gets a layer of its own set;
- a build script that writes a secret into the install's output in two
  pieces (the `installing` events were redacted a piece at a time), plants
  links, a FIFO, a hard link and a setuid file in its tree, and tries the
  service's port, the metadata address and an unlisted registry;
- a thread id two workspaces share: their sets are their own (a layer is
  shared only by its exact key), and no box sees the layer store.

The index is pypi_util's (loopback, through the proxy with its range); it
also serves a tiny npm registry (packuments and tarballs made here), so
no case needs the real registry."""
import base64
import hashlib
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, need
from service_util import TERMINAL, Service, balance, gov_tenant

SECRET = "AKIA" + "PATKSPLITSECRET7"  # the built-in aws_access_key pattern


def installer_images():
    need((ROOT / "image" / "installer").is_dir(), "the installer image's recipe (image/installer)")
    import image_util
    image_util.ensure_image("installer")
    image_util.ensure_default_image()
    return image_util.CACHE / "images"


def npm_add(pypi, name, version, files=None):
    """NAME@VERSION in the index's npm registry (/npm/): a packument and its
    tarball, its integrity sha512 as npm checks it."""
    import pypi_util
    members = {"package/package.json": json.dumps({"name": name, "version": version}).encode()}
    members.update({f"package/{p}": d for p, d in (files or {}).items()})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for p, d in members.items():
            ti = tarfile.TarInfo(p)
            ti.size, ti.mode = len(d), 0o644
            t.addfile(ti, io.BytesIO(d))
    data = buf.getvalue()
    (pypi.dir / "npm" / "-").mkdir(parents=True, exist_ok=True)
    fname = f"{name}-{version}.tgz"
    (pypi.dir / "npm" / "-" / fname).write_bytes(data)
    dist = {"tarball": f"http://{pypi_util.NAME}:{pypi.port}/npm/-/{fname}", "shasum": hashlib.sha1(data).hexdigest(),
            "integrity": "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()}
    doc = {"name": name, "dist-tags": {"latest": version},
           "versions": {version: {"name": name, "version": version, "dist": dist}}}
    (pypi.dir / "npm" / name).write_text(json.dumps(doc))


# the build backend of a hostile sdist (PEP 517, in its tree: it needs
# nothing from the index); %r: the service's port and the secret
BACKEND = r'''
import base64, hashlib, json, os, socket, sys, time, urllib.request, zipfile

PORT = %r


def tries():
    f = {"uid": os.getuid()}
    try:
        socket.create_connection(("127.0.0.1", PORT), timeout=3).close()
        f["direct"] = "connected"
    except OSError as e:
        f["direct"] = type(e).__name__
    for k, url in (("service", "http://127.0.0.1:%%d/v1/settings" %% PORT),
                   ("metadata", "http://169.254.169.254/latest/meta-data/"),
                   ("unlisted", "http://pypi.org/simple/")):
        try:
            urllib.request.urlopen(url, timeout=5)
            f[k] = "fetched"
        except urllib.error.HTTPError as e:
            f[k] = "HTTP %%d" %% e.code
        except Exception as e:
            f[k] = type(e).__name__ + ": " + str(e)[:120]
    return f


def plant(f):
    if not os.path.isdir("/out"):
        return
    d = "/out/python/planted"
    os.makedirs(d, exist_ok=True)
    with open(d + "/plain.txt", "w") as fh:
        fh.write("plain\n")
    for k, fn in (("symlink", lambda: os.symlink("/etc/passwd", d + "/link")),
                  ("fifo", lambda: os.mkfifo(d + "/fifo")),
                  ("hardlink", lambda: os.link(d + "/plain.txt", d + "/hard.txt")),
                  ("hostlink", lambda: os.link("/etc/passwd", d + "/passwd")),
                  ("setuid", lambda: (open(d + "/suid", "w").close(), os.chmod(d + "/suid", 0o6755))),
                  ("device", lambda: os.mknod(d + "/null", 0o666 | 0o020000, os.makedev(1, 3)))):
        try:
            fn()
            f[k] = "made"
        except OSError as e:
            f[k] = type(e).__name__


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    f = tries()
    plant(f)
    files = {"leaky/__init__.py": ("FINDINGS = " + repr(json.dumps(f)) + "\n").encode(),
             "leaky-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: leaky\nVersion: 1.0\n",
             "leaky-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rec = "".join("%%s,sha256=%%s,%%d\n" %% (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), len(d))
                  for n, d in files.items()) + "leaky-1.0.dist-info/RECORD,,\n"
    files["leaky-1.0.dist-info/RECORD"] = rec.encode()
    name = "leaky-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return name


if __name__ == "__main__":
    print(json.dumps(tries()))
'''
# a build that fails saying a secret many times, each at another offset:
# pip shows a failed build's output in one write, which the install box's
# reader takes in pieces, so some copies straddle two pieces
CHATTY = r'''
import sys


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    sys.stdout.write("".join("%%s%%s\n" %% ("x" * (i %% 13), %r) for i in range(12000)))
    sys.stdout.flush()
    sys.exit(1)
'''
PYPROJECT = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'


@pytest.fixture(scope="module")
def index():
    import pypi_util
    pypi = pypi_util.PyPI().start()
    # python: apatk and a project named "node"; npm: "node" and patk-x
    pypi.add(pypi_util.wheel("apatk", "1.0", {"apatk/__init__.py": b"V = 'apatk'\n"}))
    pypi.add(pypi_util.wheel("node", "1.0", {"nodepy/__init__.py": b"V = 'python node'\n"}))
    npm_add(pypi, "node", "1.0.0", {"index.js": b"module.exports = 'npm node'\n"})
    npm_add(pypi, "patk-x", "1.0.0", {"index.js": b"module.exports = 'x'\n"})
    # package managers: one asked by its name, one a package drags in by its tree
    pypi.add(pypi_util.wheel("pmsneak", "1.0", {"pip/__init__.py": b"def main(): pass\n"}))
    npm_add(pypi, "npm", "99.0.0", {"index.js": b"module.exports = 'an installer'\n"})
    yield pypi
    pypi.stop()


@pytest.fixture(scope="module")
def full(tmp_path_factory, index):
    images = installer_images()
    svc = Service(tmp_path_factory.mktemp("pkg-attack"),
                  config={"package_installs": "thread", "images": str(images), "package_install_timeout_s": "60",
                          "package_index_python": index.url,
                          "package_registry_node": index.url.replace("/simple", "/npm/"),
                          "package_registries": index.registries()},
                  extra_env={"AIRLOCK_PROXY_PORTS": f"80,443,{index.port}"})
    svc.start()
    svc.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"]})
    yield svc
    svc.stop()


# ------------------------------------------------------------ specs

FILE_SPECS = {"python": ["tinypkg-1.0-py3-none-any.whl", "x==1.tar.gz", "x.zip[e]"],
              "node": ["x.tgz", "left-pad@.", "left-pad@..", "@s/x@.1", "left-pad@1.tar.gz"]}


def test_specs_read_as_files_are_refused(tmp_path):
    """The control: pip's and npm's own readers take each for a file or a
    directory (pip: a file: link; npm-package-arg: type file or directory);
    airlock refuses each, naming it and why, and charges nothing."""
    pip = subprocess.run([sys.executable, "-c", "import json, sys\n"
                          "from pip._internal.req.constructors import install_req_from_line as f\n"
                          "print(json.dumps([str(f(s).link) for s in sys.argv[1:]]))", *FILE_SPECS["python"]],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    if pip.returncode == 0:
        links = json.loads(pip.stdout)
        assert all(link.startswith("file://") for link in links), links
    npa = "/usr/lib/node_modules/npm/node_modules/npm-package-arg"
    if os.path.isdir(npa):
        out = subprocess.run(["node", "-e", f"const n = require({npa!r}); console.log(JSON.stringify("
                              "process.argv.slice(1).map(s => n(s).type)))", *FILE_SPECS["node"]],
                             capture_output=True, text=True, timeout=30, check=True)
        assert set(json.loads(out.stdout)) <= {"file", "directory"}, out.stdout
    svc = Service(tmp_path / "svc", config={"package_installs": "thread"})
    svc.start()
    try:
        svc.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"]})
        before = balance(svc)
        for lang, specs in FILE_SPECS.items():
            for spec in specs:
                status, _, doc = svc.post_run("print(1)", packages={lang: ["ok1", spec]})
                assert status == 400 and doc["error"]["code"] == "bad_request", (spec, doc)
                msg = doc["error"]["message"]
                assert f'packages.{lang}[1] "{spec}" is not a package spec' in msg and "paths" in msg, msg
        # and the other ways to smuggle an option, a URL or a look-alike name
        for lang, spec in (("python", "--index-url=http://evil.example/simple"), ("python", "x @ file:///etc/passwd"),
                           ("python", "-e ."), ("python", "git+https://evil.example/x"), ("python", "a b"),
                           ("python", "req\u03c5ests"), ("python", "x==1 "), ("node", "x@http://evil.example/x.tgz"),
                           ("node", "x@npm:evil"), ("node", "x@git+ssh://evil.example/r"), ("node", "x@file:../y"),
                           ("node", "l\u043edash"), ("node", "--registry=http://evil.example/")):
            status, _, doc = svc.post_run("print(1)", packages={lang: [spec]})
            assert status == 400 and doc["error"]["code"] == "bad_request", (spec, doc)
        assert balance(svc) == before
        # the same packages named as packages pass the check (this service
        # has no installer image: the next refusal is that one)
        status, _, doc = svc.post_run("print(1)", packages={"python": ["tinypkg==1.0"], "node": ["left-pad@1.3.0"]})
        assert status == 503 and doc["error"]["code"] == "packages_unavailable", doc
    finally:
        svc.stop()


# ------------------------------------------------------------ the layer key

def test_two_sets_never_share_a_layer_by_the_word_node(full):
    """python [apatk], node [node, patk-x] and python [apatk, node], node
    [patk-x] fed the key the same strings: the second run got the first's
    layer (reused, no python `node` in it). Each now has its own."""
    a = full.run("import apatk; print(apatk.V)", packages={"python": ["apatk==1.0"], "node": ["node", "patk-x@1.0.0"]})
    assert a["state"] == "succeeded" and a["result"]["stdout"] == "apatk\n", a
    b = full.run("import apatk, nodepy; print(nodepy.V)",
                 packages={"python": ["apatk==1.0", "node"], "node": ["patk-x@1.0.0"]})
    assert b["state"] == "succeeded" and b["result"]["stdout"] == "python node\n", b
    pa, pb = a["result"]["packages"], b["result"]["packages"]
    assert pa["layer"] != pb["layer"] and pb["reused"] is False, (pa, pb)
    assert {p["name"] for p in pb["python"]} == {"apatk", "node"}, pb


# ------------------------------------------------------------ a hostile build

def test_a_hostile_build_leaks_nothing(full, index, tmp_path):
    """A build backend (run in the install box) plants a symlink, a FIFO, a hard link,
    a hard link to a host file, a setuid file and a device in its tree, and
    tries the service's port, the metadata address and an unlisted
    registry. The control: the same code on the host reaches the service."""
    from pypi_util import sdist
    code = BACKEND % full.port
    index.add(sdist("leaky", "1.0", "raise SystemExit('the backend builds this')\n",
                    {"backend.py": code.encode(), "pyproject.toml": PYPROJECT}))
    (tmp_path / "backend.py").write_text(code)
    control = json.loads(subprocess.run(["/usr/bin/python3", str(tmp_path / "backend.py")], capture_output=True,
                                        timeout=30, env={"PATH": "/usr/bin:/bin"}, check=True).stdout)
    assert control["direct"] == "connected" and control["service"] in ("fetched", "HTTP 401"), control
    r = full.run("import leaky; print(leaky.FINDINGS)", packages={"python": ["leaky==1.0"]})
    assert r["state"] == "succeeded", r
    f = json.loads(r["result"]["stdout"])
    # it ran, in the box, and reached nothing of the host's
    assert f["uid"] == 65534 and f["direct"] != "connected", f
    for k in ("service", "metadata", "unlisted"):
        assert f[k].startswith("HTTP 403") or "refused" in f[k], (k, f)
    # the tree: regular files and directories alone, no odd mode bits
    assert f["symlink"] == f["fifo"] == f["hardlink"] == f["setuid"] == "made", f
    assert f["hostlink"] != "made" and f["device"] != "made", f
    key = r["result"]["packages"]["layer"].split(":")[1]
    tree = full.state / "layers" / f"sha256-{key}"
    planted = tree / "python" / "planted"
    assert sorted(p.name for p in planted.iterdir()) == ["hard.txt", "plain.txt", "suid"], list(planted.iterdir())
    assert (planted / "hard.txt").read_text() == "plain\n" and os.stat(planted / "hard.txt").st_nlink == 1
    for p in [tree, *tree.rglob("*")]:
        st = os.lstat(p)
        assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), p
        assert stat.S_IMODE(st.st_mode) == (0o755 if stat.S_ISDIR(st.st_mode) else 0o644), (p, oct(st.st_mode))
        assert st.st_uid == 0, p
    assert json.loads((tree / "layer.json").read_text())["skipped_links"] >= 1
    # nothing of an install under way is left beside the layers
    assert not [p for p in (full.state / "layers").iterdir() if p.name.startswith("tmp-")]


def test_a_secret_in_the_install_output_is_redacted_across_pieces(full, index):
    """The installing events were redacted a piece at a time: a secret that
    straddled two pieces of pip's output went out in two events, whole once
    joined. They are held to the end of their line now, as a run's are."""
    from pypi_util import sdist
    index.add(sdist("chatty", "1.0", "raise SystemExit('the backend builds this')\n",
                    {"backend.py": (CHATTY % SECRET).encode(), "pyproject.toml": PYPROJECT}))
    before = balance(full)
    r = full.run("print(1)", packages={"python": ["chatty==1.0"]})
    assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r
    # docs/api.md: charged for the install's time (60 s at a 60 s run's
    # price: 2 + 2), and a failed install is the request's: not refunded
    assert before - balance(full) == 4, (before, balance(full))
    pieces = [d.get("data", "") for _, e, d in full.events(r["id"]) if e == "installing"]
    said = "".join(pieces)
    assert said.count("[REDACTED:aws_access_key]") >= 12000, (len(pieces), said[-2000:])
    assert SECRET not in said and SECRET[:9] not in said, said[-2000:]
    # the result says why in pip's words, not "its output is above" (no
    # reader of a result has an above), and where the rest is
    msg = r["result"]["error"]["message"]
    assert re.search(r"exit code 1: \S.*error.* \(its whole output: the run's installing events\)$", msg), msg


def test_a_failed_install_says_why_redacted(full):
    """pip's own reason is in the failure's message, redacted as the output
    is (here the secret is the asked name, which pip repeats)."""
    r = full.run("print(1)", packages={"python": [SECRET + "==1.0"]})
    assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r
    msg = r["result"]["error"]["message"]
    assert "No matching distribution found for [REDACTED:aws_access_key]" in msg and SECRET not in msg, msg


def test_registries_without_the_index_say_the_way_out(tmp_path):
    """package_registries naming the npm registry alone (a stranger's first
    try) leaves the default Python index outside it: the start is refused
    saying both ways out."""
    from service_util import free_port, service_binary
    cfg = tmp_path / "airlock.conf"
    cfg.write_text("package_installs = thread\npackage_registries = registry.npmjs.org=203.0.113.80/32\n")
    p = subprocess.run([str(service_binary()), "serve", "--listen", f"127.0.0.1:{free_port()}", "--state",
                        str(tmp_path / "state"), "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, p
    assert "add its host to package_registries" in p.stderr and "or set package_index_python" in p.stderr, p.stderr


# ------------------------------------------------------------ the store under cancel and kill

SLOW = r'''
import base64, hashlib, os, time, zipfile

NAME, SLEEP = @ARGS@


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    time.sleep(SLEEP)
    di = NAME + "-1.0.dist-info"
    files = {NAME + "/__init__.py": b"V = 1\n",
             di + "/METADATA": ("Metadata-Version: 2.1\nName: " + NAME + "\nVersion: 1.0\n").encode(),
             di + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    rec = "".join("%s,sha256=%s,%d\n" % (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), len(d))
                  for n, d in files.items()) + di + "/RECORD,,\n"
    files[di + "/RECORD"] = rec.encode()
    name = NAME + "-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return name
'''


def slow_package(index, name, sleep):
    from pypi_util import sdist
    index.add(sdist(name, "1.0", "raise SystemExit('the backend builds this')\n",
                    {"backend.py": SLOW.replace("@ARGS@", repr((name, sleep))).encode(), "pyproject.toml": PYPROJECT}))
    return f"{name}==1.0"


def store_is_clean(svc):
    """No tmp- directory left, and every key's lock free (flock: a new
    holder gets it at once)."""
    import fcntl
    layers = svc.state / "layers"
    assert not [p.name for p in layers.iterdir() if p.name.startswith("tmp-")], list(layers.iterdir())
    for lock in layers.glob("*.lock"):
        with open(lock, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_canceled_install_leaves_the_other_run_its_own(full, index):
    """Two runs want one new set; the first (holding the key's lock) is
    canceled mid-install: the second installs it itself and succeeds,
    nothing half-made is left and the lock is free."""
    spec = slow_package(index, "patkslow", 3)
    code = "import patkslow; print(patkslow.V)"
    status, _, a = full.post_run(code, packages={"python": [spec]})
    assert status == 201, a
    time.sleep(1.0)
    status, _, b = full.post_run(code, packages={"python": [spec]})
    assert status == 201, b
    time.sleep(0.7)
    full.cancel(a["id"])
    ra = full.wait_state(a["id"], TERMINAL, timeout=60)
    rb = full.wait_state(b["id"], TERMINAL, timeout=60)
    assert ra["state"] != "succeeded", ra
    assert rb["state"] == "succeeded" and rb["result"]["stdout"] == "1\n", rb
    assert rb["result"]["packages"]["reused"] is False, rb
    store_is_clean(full)


def test_a_killed_helper_mid_install(full, index):
    """The helper killed (SIGKILL) while its install box builds: the run
    ends as error, refunded; the key's lock is free and the next run of the
    same set installs it and succeeds; the dead install's directory is
    gone by then."""
    spec = slow_package(index, "patkkilled", 3)
    before = balance(full)
    status, _, a = full.post_run("print(1)", packages={"python": [spec]})
    assert status == 201, a
    deadline = time.monotonic() + 20
    while not [p for p in (full.state / "layers").glob("tmp-*")]:
        assert time.monotonic() < deadline, "the install never started"
        time.sleep(0.05)
    helpers = full.helpers()
    assert helpers, "no helper"
    for pid in helpers:
        os.kill(pid, signal.SIGKILL)
    ra = full.wait_state(a["id"], TERMINAL, timeout=60)
    assert ra["state"] == "error", ra
    assert balance(full) == before, (before, balance(full))
    r = full.run("import patkkilled; print(patkkilled.V)", packages={"python": [spec]})
    assert r["state"] == "succeeded" and r["result"]["stdout"] == "1\n", r
    store_is_clean(full)


# ------------------------------------------------------------ threads across workspaces

def test_one_thread_id_in_two_workspaces(full):
    """Two organisations name a thread alike: each has its own set (the
    second's run of the thread has nothing installed); the same set asked
    by both shares its layer, by its key alone; no box sees the store."""
    thread = "patk-shared-" + uuid.uuid4().hex[:6]
    t1, t2 = gov_tenant(full, "patka"), gov_tenant(full, "patkb")
    for t in (t1, t2):
        t.client.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"]})
    r1 = t1.client.run("import apatk; print(apatk.V)", thread_id=thread, packages={"python": ["apatk==1.0"]})
    assert r1["state"] == "succeeded", r1
    probe = ("import os, sys\n"
             "try:\n    import apatk; print('apatk')\nexcept ImportError:\n    print('none')\n"
             f"print(os.path.exists({str(full.state)!r}), os.path.exists('/opt/airlock/python'))\n")
    r2 = t2.client.run(probe, thread_id=thread)
    assert r2["state"] == "succeeded" and r2["result"]["stdout"] == "none\nFalse False\n", r2
    env = t2.client.ok("GET", f"/v1/threads/{thread}/packages")
    assert env["python"] == [] and env["layer"] is None, env
    # the same set: the same layer (reused by its key), still its own thread's set
    r3 = t2.client.run(probe, thread_id=thread, packages={"python": ["apatk==1.0"]})
    assert r3["result"]["stdout"] == "apatk\nFalse True\n", r3
    assert r3["result"]["packages"]["layer"] == r1["result"]["packages"]["layer"], r3
    assert r3["result"]["packages"]["reused"] is True
    # what the box sees of the layer is its python tree alone, read-only
    r4 = t2.client.run("import os\nprint(sorted(os.listdir('/opt/airlock/python')))\n"
                       "try:\n    open('/opt/airlock/python/x', 'w')\nexcept OSError as e:\n    print(e.errno)\n",
                       thread_id=thread)
    listing, errno_ = r4["result"]["stdout"].splitlines()
    assert "layer.json" not in listing and "apatk" in listing and errno_ == "30", r4


def test_official_clients_tell_why_an_install_failed(full):
    """MCP's code_execution and an E2B sandbox's command (the official SDKs)
    answer a failed install with pip's reason and what to tell the user,
    not a bare install_failed or "exit status 1" with no output."""
    from node_util import node_test, npm_ci
    npm_ci()
    node_test("packages.test.mjs", {"AIRLOCK_URL": full.base_url, "AIRLOCK_API_KEY": full.key,
                                          "AIRLOCK_PKG_MISSING": "patk-missing==1.0"}, expect=2, pattern="^attack: ")


def test_no_package_manager_reaches_the_run_box(full):
    """The run's box never holds a package manager (its image has none): a
    layer that would (npm asked by name; pip's tree inside another wheel) is
    refused, naming it; the thread's set is unchanged. The control: the
    same wheel installed by pip on the host puts pip/ in its target."""
    import tempfile
    import pypi_util
    with tempfile.TemporaryDirectory() as d:
        name, data = pypi_util.wheel("pmsneak", "1.0", {"pip/__init__.py": b"def main(): pass\n"})
        (Path(d) / name).write_bytes(data)
        p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target",
                            str(Path(d) / "t"), str(Path(d) / name)], capture_output=True, timeout=120)
        assert p.returncode == 0 and (Path(d) / "t" / "pip" / "__init__.py").exists(), p.stderr[-2000:]
    thread = "patk-pm-" + uuid.uuid4().hex[:6]
    for packages, what in (({"python": ["pmsneak==1.0"]}, "python packages would put a package manager (pip)"),
                           ({"node": ["npm@99.0.0"]}, "node packages would put a package manager (npm)")):
        r = full.run("print(1)", thread_id=thread, packages=packages)
        assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r
        assert what in r["result"]["error"]["message"], r["result"]["error"]
    env = full.ok("GET", f"/v1/threads/{thread}/packages")
    assert env["python"] == [] and env["node"] == [], env
    store_is_clean(full)


def test_a_layer_over_its_file_cap_leaves_nothing(tmp_path, index):
    """A layer that passes package_layer_max_files while it is collected:
    the run fails naming the cap, no layer and no tmp- directory is left,
    and the key's lock is free."""
    images = installer_images()
    cfg = {"package_installs": "thread", "images": str(images), "package_install_timeout_s": "60",
           "package_index_python": index.url, "package_registries": index.registries(),
           "package_registry_node": index.url.replace("/simple", "/npm/"), "package_layer_max_files": "3"}
    svc = Service(tmp_path / "svc", config=cfg, extra_env={"AIRLOCK_PROXY_PORTS": f"80,443,{index.port}"})
    svc.start()
    try:
        svc.ok("PUT", "/v1/settings", json={"network_allowed": ["offline", "packages"]})
        r = svc.run("import apatk", packages={"python": ["apatk==1.0"]})
        assert r["state"] == "failed" and r["result"]["reason"] == "install_failed", r
        assert "over the layer's caps" in r["result"]["error"]["message"], r["result"]["error"]
        assert not list((svc.state / "layers").glob("sha256-*[0-9a-f]")), list((svc.state / "layers").iterdir())
        store_is_clean(svc)
    finally:
        svc.stop()


FORGER = r'''
import json, os, time

FAKE = {"version": "1", "install": [{"metadata": {"name": "requests", "version": "2.31.0"}}]}


def _put(d):
    json.dump(d, open("/out/python-report.json.x", "w"))
    os.rename("/out/python-report.json.x", "/out/python-report.json")


def _forge():
    """a process of its own, left behind the build: a report of its own in
    /out at once, and pip's, once written, rewritten to name another
    package"""
    if os.fork() == 0:
        os.setsid()
        os.closerange(0, 4096)
        _put(FAKE)
        for _ in range(40000):
            try:
                d = json.load(open("/out/python-report.json"))
                if any(e["metadata"]["name"] != "requests" for e in d.get("install", [])):
                    for e in d["install"]:
                        e["metadata"]["name"], e["metadata"]["version"] = "requests", "2.31.0"
                    _put(d)
            except Exception:
                pass
            time.sleep(0.0005)
        os._exit(0)
'''


def test_a_build_cannot_rewrite_what_was_installed(full, index):
    """A build backend forks a process that rewrites pip's report once pip
    has written it (the code before: `forged 1.0` was recorded as
    `requests 2.31.0` in the result, the audit and the thread's set). The
    report is pip's stdout now, which no package's code holds."""
    from pypi_util import sdist
    code = SLOW.replace("@ARGS@", repr(("forged", 0))).replace(
        "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n",
        FORGER + "\n\ndef build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n    _forge()\n")
    index.add(sdist("forged", "1.0", "raise SystemExit('the backend builds this')\n",
                    {"backend.py": code.encode(), "pyproject.toml": PYPROJECT}))
    r = full.run("import forged; print(forged.V)", packages={"python": ["forged==1.0"]})
    assert r["state"] == "succeeded", r
    assert [(p["name"], p["version"]) for p in r["result"]["packages"]["python"]] == [("forged", "1.0")], r["result"]
