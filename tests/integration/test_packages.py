"""A run's packages (issue 38), through `airlock run --package` and the
run helper (`airlock helper`, as the service's drivers start it): an
install box on the installer image, the layer store, the layer mounted
read-only in the run's box, registries with address ranges in the proxy.

Nothing here reaches a Python index on the internet (none is reachable
from CI): the tests serve their own (pypi_util.py) on loopback, reached by
a name of their own given 127.0.0.1/32 in package_registries. The node
test installs a small real package from registry.npmjs.org through the
proxy: here that name resolves into a reserved range, so the registry is
reached only with its address given as its range (read at test time), and
without it the proxy refuses: the differential.
"""
import json
import os
import secrets
import socket
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from conftest import AIRLOCK, need
from image_util import CACHE, ensure_image, image_cmd
from pypi_util import PyPI, sdist, wheel


def _image(name):
    """The cached image NAME: the installer built from its recipe; the
    default whichever build the cache holds (a runtime only: its recipe's
    build.sh is the installer's, and a rebuild for this would cost minutes)."""
    if name == "default":
        listing = json.loads(image_cmd("ls", "--json").stdout or b"[]")
        found = [e for e in listing if "default" in e.get("aliases", [])]
        if found:
            return found[0]
    return ensure_image(name)


@pytest.fixture(scope="module")
def images():
    return _image("installer"), _image("default")


@pytest.fixture(scope="module")
def index():
    idx = PyPI().start()
    idx.add(wheel("tinydep", "2.0", {"tinydep/__init__.py": b"BASE = 40\n"}))
    idx.add(wheel("tinypkg", "1.0", {"tinypkg/__init__.py": b"from tinydep import BASE\nVALUE = BASE + 2\n"},
                  requires=["tinydep>=2"]))
    idx.add(wheel("otherpkg", "0.3", {"otherpkg/__init__.py": b"NAME = 'other'\n"}))
    yield idx
    idx.stop()


@pytest.fixture
def state(tmp_path):
    """A state of the test's own (its layers), over the cached images."""
    d = tmp_path / "state"
    d.mkdir()
    return d


def run(state, env, lang, code, *pkg, timeout=300):
    """`airlock run --json --image default` with PKG options, under umask
    0077: (exit status, document, stderr: the install's output is there)."""
    e = dict(env, AIRLOCK_STATE=str(state), AIRLOCK_IMAGES=str(CACHE / "images"))
    # under the service unit's umask (0077): the layer must still be readable by the box's user
    p = subprocess.run([str(AIRLOCK), "run", "--json", "--image", "default", *pkg, "--lang", lang, "-c", code],
                       capture_output=True, timeout=timeout, env=e, preexec_fn=lambda: os.umask(0o077))
    err = p.stderr.decode(errors="replace")
    assert b"ERROR: AddressSanitizer" not in p.stderr and "runtime error" not in err, err[-4000:]
    try:
        doc = json.loads(p.stdout)
    except ValueError as ex:
        raise AssertionError(f"not JSON (exit {p.returncode}): {p.stdout[:2000]!r} stderr={err[-3000:]}") from ex
    return p.returncode, doc, err


def pyargs(index, *specs, scripts=None):
    a = ["--package-registries", index.registries(), "--package-index", index.url]
    for s in specs:
        a += ["--package", f"python:{s}"]
    if scripts:
        a += ["--package-scripts", scripts]
    return a


def layers(state):
    d = state / "layers"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ------------------------------------------------------------ python

READ_ONLY = '''
import errno, tinypkg, tinydep, otherpkg
print(tinypkg.VALUE, tinypkg.__file__, otherpkg.NAME)
try:
    open("/opt/airlock/python/tinypkg/planted.py", "w").write("x")
    print("layer written")
except OSError as e:
    print("layer", errno.errorcode[e.errno])
open("/tmp/control", "w").write("x")
print("tmp written")
'''


def test_python_install_reuse_and_a_read_only_layer(images, index, state):
    status, doc, err = run(state, index.env(), "python", READ_ONLY, *pyargs(index, "tinypkg==1.0", "otherpkg"))
    assert status == 0, (doc.get("error"), err[-3000:])
    out = doc["stdout"].split("\n")
    assert out[0] == "42 /opt/airlock/python/tinypkg/__init__.py other", doc["stdout"]
    # the layer is read-only in the box; the control, /tmp, is writable
    assert out[1] == "layer EROFS" and out[2] == "tmp written", doc["stdout"]
    pk = doc["packages"]
    assert pk["reused"] is False and pk["layer"].startswith("sha256:") and pk["node"] == []
    got = {p["name"]: p for p in pk["python"]}
    assert set(got) == {"tinypkg", "tinydep", "otherpkg"} and got["tinypkg"]["version"] == "1.0"
    # the hashes are the index's files', as pip's report gave them
    served = {f.split("-")[0]: h for files in index.projects.values() for f, h in files}
    assert all(got[n]["sha256"] == served[n] for n in got), (got, served)
    key = pk["layer"].split(":")[1]
    meta = json.loads((state / "layers" / f"sha256-{key}" / "layer.json").read_text())
    assert meta["key"] == key and meta["installer"] == "sha256:" + images[0]["digest"].split(":")[-1]
    assert "Successfully installed" in err and "otherpkg-0.3" in err, err[-2000:]
    first_ms = pk["install_ms"]

    # the same set, its specs in another order: the same layer, no install
    asked = len(index.requests)
    t = time.monotonic()
    status, doc2, err2 = run(state, index.env(), "python", "import tinypkg; print(tinypkg.VALUE)",
                             *pyargs(index, "otherpkg", "tinypkg==1.0"))
    wall = time.monotonic() - t
    assert status == 0 and doc2["stdout"] == "42\n", (doc2.get("error"), err2[-2000:])
    assert doc2["packages"]["layer"] == pk["layer"] and doc2["packages"]["reused"] is True
    assert len(index.requests) == asked, index.requests[asked:]
    assert "Collecting" not in err2
    assert doc2["packages"]["install_ms"] < first_ms, (doc2["packages"]["install_ms"], first_ms)
    print(f"install {first_ms} ms, reuse {doc2['packages']['install_ms']} ms (whole run {wall:.2f} s)")
    assert [n for n in layers(state) if n.startswith("tmp-")] == []


def test_a_failed_install_makes_no_box_and_keeps_nothing(images, index, state):
    status, doc, err = run(state, index.env(), "python", "print('ran')", *pyargs(index, "nosuchpkg==9"))
    assert status == 125 and doc["reason"] == "install_failed", doc
    assert doc["stdout"] == "" and doc["exit_code"] not in (None, 0)
    assert doc["packages"]["failed"] == "python" and "pip" in doc["error"]["message"], doc["error"]
    assert "No matching distribution found for nosuchpkg==9" in err, err[-2000:]
    # no layer, no half layer
    assert [n for n in layers(state) if n.startswith(("sha256-", "tmp-")) and not n.endswith(".lock")] == []


# ------------------------------------------------------------ node

def registry_address():
    try:
        return socket.getaddrinfo("registry.npmjs.org", 443, socket.AF_INET)[0][4][0]
    except OSError:
        return None


NODE = '''
const lp = require("left-pad");
console.log(lp("7", 3, "0"));
import("left-pad").then(m => console.log("esm", m.default("x", 2)));
'''


def test_node_install_through_the_proxy_needs_the_registry_range(images, state):
    addr = registry_address()
    need(addr is not None, "registry.npmjs.org does not resolve here")
    env = dict(os.environ)
    # the differential: without its range, the registry's address is not
    # public here (a reserved range), and the proxy refuses it
    status, doc, err = run(state, env, "node", NODE, "--package", "node:left-pad@1.3.0",
                           "--package-registries", "registry.npmjs.org")
    assert status == 125 and doc["reason"] == "install_failed" and doc["packages"]["failed"] == "node", doc
    assert "403" in err or "refused" in err, err[-2000:]
    # with it, npm reaches the registry through the proxy
    status, doc, err = run(state, env, "node", NODE, "--package", "node:left-pad@1.3.0",
                           "--package-registries", f"registry.npmjs.org={addr}/32")
    assert status == 0, (doc.get("error"), err[-3000:])
    assert doc["stdout"] == "007\nesm  x\n", doc["stdout"]
    (lp,) = doc["packages"]["node"]
    assert lp["name"] == "left-pad" and lp["version"] == "1.3.0" and lp["integrity"].startswith("sha512-")


# ------------------------------------------------------------ hostile packages

def naive_extract(whl_bytes, target):
    """What an installer that trusts a wheel's names does: each entry
    joined to the target and written."""
    with zipfile.ZipFile(__import__("io").BytesIO(whl_bytes)) as z:
        for n in z.namelist():
            p = os.path.join(target, n)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(z.read(n))


def test_a_hostile_wheel_writes_nothing_outside_the_layer(images, index, state, tmp_path):
    tok = secrets.token_hex(6)
    absolute = f"/tmp/airlock-pkg-escape-{tok}"
    name, data = wheel("evilwheel", "1.0", {"evilwheel/__init__.py": b"X = 1\n"},
                       extra_record=[f"../../escape-{tok},,\n", f"{absolute},,\n"],
                       raw_entries=[(f"../../escape-{tok}", b"escaped\n"), (absolute, b"escaped\n")])
    index.add((name, data))
    # control: extracted naively on the host, the wheel writes outside its target
    target = tmp_path / "c" / "d" / "target"
    target.mkdir(parents=True)
    naive_extract(data, str(target))
    assert (tmp_path / "c" / f"escape-{tok}").exists() and Path(absolute).exists()
    os.unlink(absolute)
    # airlock: whatever pip makes of it, in the install box; nothing reaches the host
    status, doc, err = run(state, index.env(), "python", "import evilwheel; print(evilwheel.X)",
                           *pyargs(index, "evilwheel==1.0"))
    assert not Path(absolute).exists()
    print("hostile wheel:", doc["reason"], doc.get("error", {}).get("message"), err.strip().splitlines()[-3:])
    found = [str(p) for p in state.rglob(f"*escape-{tok}*")]
    assert found == [], found
    assert not list(Path("/").glob(f"escape-{tok}")) and not list(Path("/tmp").glob(f"escape-{tok}"))
    if status == 0:
        # installed: the escaping entries are not in the layer
        key = doc["packages"]["layer"].split(":")[1]
        assert not any(f"escape-{tok}" in str(p) for p in (state / "layers" / f"sha256-{key}").rglob("*"))
    else:
        assert doc["reason"] == "install_failed", doc


BACKEND = '''
import base64, hashlib, io, json, os, socket, urllib.request, zipfile

ADDR, SECRET = %r, %r


def findings():
    f = {"uid": os.getuid()}
    try:
        socket.create_connection((ADDR, 443), timeout=3).close()
        f["direct"] = "connected"
    except OSError as e:
        f["direct"] = type(e).__name__
    try:
        urllib.request.urlopen("http://example.com/", timeout=5)
        f["proxy"] = "fetched"
    except Exception as e:
        f["proxy"] = str(e)[:200]
    try:
        f["secret"] = open(SECRET).read()
    except OSError as e:
        f["secret"] = type(e).__name__
    # in the install box: a link to a host secret and a FIFO planted in
    # what becomes the layer (never on a host without /out)
    if os.path.isdir("/out"):
        try:
            os.makedirs("/out/python", exist_ok=True)
            os.symlink("/etc/shadow", "/out/python/leak")
            os.mkfifo("/out/python/fifo")
            f["planted"] = "yes"
        except OSError as e:
            f["planted"] = type(e).__name__
    return f


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {"sneaky/__init__.py": ("FINDINGS = " + repr(json.dumps(findings())) + "\\n").encode(),
             "sneaky-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: sneaky\\nVersion: 1.0\\n",
             "sneaky-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    rec = "".join("%%s,sha256=%%s,%%d\\n" %% (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode(), len(d))
                  for n, d in files.items()) + "sneaky-1.0.dist-info/RECORD,,\\n"
    files["sneaky-1.0.dist-info/RECORD"] = rec.encode()
    name = "sneaky-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
    return name


if __name__ == "__main__":
    print(json.dumps(findings()))
'''

PYPROJECT = b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'


def test_a_build_script_runs_in_the_install_box_or_not_at_all(images, index, state, tmp_path):
    """An sdist's build code (an in-tree PEP 517 backend: setup.py's form
    today, and one that needs nothing from the index) tries the network
    directly and through the proxy, and reads a host file."""
    addr = registry_address() or "1.1.1.1"
    secret = Path(f"/tmp/airlock-pkg-secret-{secrets.token_hex(6)}")
    secret.write_text("host secret\n")
    try:
        code = BACKEND % (addr, str(secret))
        index.add(sdist("sneaky", "1.0", "raise SystemExit('the backend builds this')\n",
                        {"backend.py": code.encode(), "pyproject.toml": PYPROJECT}))
        # control: the same code on the host reaches the address and reads the file
        (tmp_path / "backend.py").write_text(code)
        control = json.loads(subprocess.run(["/usr/bin/python3", str(tmp_path / "backend.py")], capture_output=True,
                                            timeout=30, env={"PATH": "/usr/bin:/bin"}).stdout)
        assert control["secret"] == "host secret\n", control
        host_connects = control["direct"] == "connected"
        # refused: no source build, so the code never runs
        status, doc, err = run(state, index.env(), "python", "import sneaky", *pyargs(index, "sneaky==1.0", scripts="refuse"))
        assert status == 125 and doc["reason"] == "install_failed", doc
        assert "No matching distribution" in err, err[-2000:]
        # in the box: it ran there, as 65534, with the proxy's policy alone
        status, doc, err = run(state, index.env(), "python", "import sneaky; print(sneaky.FINDINGS)",
                               *pyargs(index, "sneaky==1.0"))
        assert status == 0, (doc.get("error"), err[-3000:])
        f = json.loads(doc["stdout"])
        assert f["uid"] == 65534 and f["secret"] in ("FileNotFoundError", "PermissionError"), f
        assert f["direct"] != "connected" and "403" in f["proxy"], f
        # what it planted in /out is not in the layer: links and FIFOs are not collected
        assert f["planted"] == "yes", f
        key = doc["packages"]["layer"].split(":")[1]
        tree = state / "layers" / f"sha256-{key}"
        assert not (tree / "python" / "leak").exists() and not (tree / "python" / "leak").is_symlink()
        assert not (tree / "python" / "fifo").exists()
        assert json.loads((tree / "layer.json").read_text())["skipped_links"] >= 1
        if host_connects:
            print("control: the host connects to", addr, "- the build in the box could not")
    finally:
        secret.unlink(missing_ok=True)


# ------------------------------------------------------------ the helper's events

def helper_events(job, env):
    """`airlock helper` given JOB, its stdin kept open (its end cancels the
    run, as the service's death would) until the result: the events."""
    p = subprocess.Popen([str(AIRLOCK), "helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    p.stdin.write((json.dumps(job) + "\n").encode())
    p.stdin.flush()
    events = []
    try:
        for line in p.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] in ("result", "error"):
                break
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    return events


def test_the_helper_says_installing_installed_and_the_result_packages(images, index, state, tmp_path):
    """`airlock helper`, as the service's drivers start it, with a job that
    has packages: installing events, installed before started, and the
    result's packages member."""
    inst, default = images
    out = tmp_path / "out"
    out.mkdir()
    job = {"language": "python", "code": "import tinypkg; print(tinypkg.VALUE)", "out_dir": str(out),
           "limits": {"timeout_ms": 60000, "memory_bytes": 256 << 20, "cpu_millis": 1000, "pids": 64,
                      "output_bytes": 1 << 20, "tmpfs_bytes": 64 << 20},
           "image_dir": str(CACHE / "images" / ("sha256-" + default["digest"].split(":")[-1])),
           "image_digest": default["digest"].split(":")[-1],
           "packages": {"python": ["tinypkg==1.0"], "layers_dir": str(state / "layers"),
                        "installer_dir": str(CACHE / "images" / ("sha256-" + inst["digest"].split(":")[-1])),
                        "index_python": index.url, "registry_node": "https://registry.npmjs.org/",
                        "network": "packages:" + index.registries(), "scripts": False,
                        "limits": {"timeout_ms": 120000, "memory_bytes": 1 << 30, "cpu_millis": 1000, "pids": 256,
                                   "output_bytes": 1 << 20, "tmpfs_bytes": 64 << 20},
                        "layer_max_bytes": 64 << 20, "layer_max_files": 1000}}
    events = helper_events(job, index.env())
    kinds = [e["type"] for e in events]
    assert "installing" in kinds and "installed" in kinds and "started" in kinds, events[-1]
    assert kinds.index("installed") < kinds.index("started") and kinds[-1] == "result"
    assert all(e["stream"] in ("stdout", "stderr") for e in events if e["type"] == "installing")
    inst_ev = next(e for e in events if e["type"] == "installed")
    res = events[-1]["result"]
    assert res["stdout"] == "42\n" and res["reason"] == "exited", res
    assert res["packages"]["layer"] == inst_ev["layer"] and {x["name"] for x in inst_ev["python"]} == {"tinypkg", "tinydep"}
    # a job whose install fails: its result, reason install_failed, and no box
    job["packages"]["python"] = ["nosuchpkg"]
    events = helper_events(job, index.env())
    kinds = [e["type"] for e in events]
    assert "started" not in kinds and kinds[-1] == "result", kinds
    res = events[-1]["result"]
    assert res["reason"] == "install_failed" and res["error"]["step"] == "install" and res["exit_code"] == 1, res


def test_bad_package_options_are_refused_before_anything_runs(images, state):
    for args, why in ((["--package", "python:--index-url=http://evil"], "not an option"),
                      (["--package", "python:git+https://x/y"], "no URL"),
                      (["--package", "ruby:rails"], "python:SPEC or node:SPEC"),
                      (["--package", "python:x", "--package-index", "http://pypi.org/simple"], "https"),
                      (["--package", "python:x", "--package-index", "https://evil.example/simple"], "not a package registry")):
        p = subprocess.run([str(AIRLOCK), "run", *args, "--lang", "python", "-c", "pass"], capture_output=True,
                           timeout=30, env=dict(os.environ, AIRLOCK_STATE=str(state), AIRLOCK_IMAGES=str(CACHE / "images")))
        assert p.returncode == 125 and why in p.stderr.decode(), (args, p.stderr.decode()[-1000:])


def test_two_runs_wanting_one_new_set_install_it_once(images, index, state):
    index.add(wheel("lockpkg", "1.0", {"lockpkg/__init__.py": b"OK = True\n"}))
    e = dict(index.env(), AIRLOCK_STATE=str(state), AIRLOCK_IMAGES=str(CACHE / "images"))
    cmd = [str(AIRLOCK), "run", "--json", "--image", "default", *pyargs(index, "lockpkg==1.0"), "--lang", "python",
           "-c", "import lockpkg; print(lockpkg.OK)"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e) for _ in range(2)]
    docs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert [d["stdout"] for d in docs] == ["True\n", "True\n"], docs
    assert sorted(d["packages"]["reused"] for d in docs) == [False, True]
    assert docs[0]["packages"]["layer"] == docs[1]["packages"]["layer"]
    # the one install's one download
    assert sum(r.startswith("/files/lockpkg-") for r in index.requests) == 1, index.requests


def test_a_layer_over_its_caps_is_refused(images, index, state, tmp_path):
    inst, default = images
    index.add(wheel("manyfiles", "1.0", {f"manyfiles/m{i}.py": b"" for i in range(12)}))
    job = {"language": "python", "code": "import manyfiles", "out_dir": str(tmp_path),
           "image_dir": str(CACHE / "images" / ("sha256-" + default["digest"].split(":")[-1])),
           "image_digest": default["digest"].split(":")[-1],
           "packages": {"python": ["manyfiles==1.0"], "layers_dir": str(state / "layers"),
                        "installer_dir": str(CACHE / "images" / ("sha256-" + inst["digest"].split(":")[-1])),
                        "index_python": index.url, "network": "packages:" + index.registries(),
                        "limits": {"timeout_ms": 120000, "memory_bytes": 1 << 30, "cpu_millis": 1000, "pids": 256},
                        "layer_max_bytes": 64 << 20, "layer_max_files": 8}}
    events = helper_events(job, index.env())
    res = events[-1]["result"]
    assert "started" not in [e["type"] for e in events] and res["reason"] == "install_failed", res
    assert "over the layer's caps" in res["error"]["message"] and "artifact count cap" in res["error"]["message"], res
    assert [n for n in layers(state) if not n.endswith(".lock")] == []
