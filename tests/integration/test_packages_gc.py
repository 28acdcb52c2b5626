"""Package layer garbage collection (issue 38): a layer unused for
package_layer_retention_days goes, the least recently used go while the
store is over package_layers_max_mb, and a layer a run has mounted is
never removed (its helper holds the layer's lock shared until the run
ends). Through `airlock run --package` with `airlock admin layers prune`,
and through the service's own retention loop (run_sweep_s = 1)."""
import fcntl
import json
import os
import re
import subprocess
import time

import pytest

from conftest import AIRLOCK
from image_util import CACHE
from test_packages import _image, pyargs, run
from pypi_util import PyPI, wheel
from service_util import services  # noqa: F401

DAY = 86400


@pytest.fixture(scope="module")
def images():
    return _image("installer"), _image("default")


@pytest.fixture(scope="module")
def index():
    idx = PyPI().start()
    idx.add(wheel("tinydep", "2.0", {"tinydep/__init__.py": b"BASE = 40\n"}))
    idx.add(wheel("tinypkg", "1.0", {"tinypkg/__init__.py": b"from tinydep import BASE\nVALUE = BASE + 2\n"},
                  requires=["tinydep>=2"]))
    yield idx
    idx.stop()


def admin(state, *args):
    p = subprocess.run([str(AIRLOCK), "admin", "--state", str(state), "layers", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout


def layer_dirs(state):
    d = state / "layers"
    return sorted(p.name for p in d.iterdir() if not p.name.endswith(".lock")) if d.exists() else []


# reads its layer's files only after the prune below has run
SLOW = '''
import os, time
time.sleep(4)
print(open("/opt/airlock/python/tinypkg/__init__.py").read().count("BASE"), sorted(os.listdir("/opt/airlock/python"))[-1])
import tinypkg
print(tinypkg.VALUE)
'''


def test_a_layer_in_use_stays_an_unused_one_goes_and_comes_back(images, index, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    e = dict(index.env(), AIRLOCK_STATE=str(state), AIRLOCK_IMAGES=str(CACHE / "images"))
    p = subprocess.Popen([str(AIRLOCK), "run", "--json", "--image", "default", *pyargs(index, "tinypkg==1.0"),
                          "--lang", "python", "-c", SLOW], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    # the install done and the layer in use: its used file is touched under the shared lock
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any((state / "layers" / n / "used").exists() for n in layer_dirs(state)):
        assert p.poll() is None, p.communicate()
        time.sleep(0.1)
    (name,) = layer_dirs(state)
    # every layer not in use, whatever its age: this one is in use, and stays
    out = admin(state, "prune", "--older-than", "0")
    assert out.strip().endswith("0 layers removed"), out
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr.decode()[-3000:]
    doc = json.loads(stdout)
    # the run read its layer's files after the prune
    assert doc["stdout"] == "2 tinypkg-1.0.dist-info\n42\n", doc["stdout"]
    # the run over: now it goes, whole (no tmp- left, its lock file with it)
    listed = admin(state, "ls")
    assert name[len("sha256-"):] in listed and "1 layers" in listed, listed
    out = admin(state, "prune", "--older-than", "0")
    assert f"removed sha256:{name[7:]}" in out and "(unused)" in out and "1 layers removed" in out, out
    assert layer_dirs(state) == [] and not (state / "layers" / f"{name}.lock").exists()
    # a set that still names it: installed again at the next run
    status, doc, err = run(state, index.env(), "python", "import tinypkg; print(tinypkg.VALUE)",
                           *pyargs(index, "tinypkg==1.0"))
    assert status == 0 and doc["stdout"] == "42\n" and doc["packages"]["reused"] is False, (doc, err[-2000:])
    assert layer_dirs(state) == [name]
    # the age rule (the config's 30 days): kept when just used, gone 31 days later
    assert admin(state, "prune").strip().endswith("0 layers removed")
    old = time.time() - 31 * DAY
    os.utime(state / "layers" / name / "used", (old, old))
    out = admin(state, "prune")
    assert "1 layers removed" in out and "(unused)" in out, out
    assert layer_dirs(state) == []


def fake_layer(layers, c, age_s, size=4096):
    key = c * 64
    d = layers / f"sha256-{key}"
    (d / "python").mkdir(parents=True)
    (d / "layer.json").write_text('{"key": "%s"}\n' % key)
    (d / "python" / "data").write_bytes(b"x" * size)
    (d / "used").write_text("")
    t = time.time() - age_s
    os.utime(d / "used", (t, t))
    return key


def metric(svc, name):
    status, _, text = svc.request("GET", "/metrics", key=None)
    assert status == 200, status
    m = re.search(rb"^" + name.encode() + rb" (\d+)$", text, re.M)
    return int(m.group(1)) if m else None


def wait_gone(path, timeout=15):
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not path.exists()


def test_the_retention_loop_collects_old_layers_never_one_in_use(services):
    svc = services.start("layers", {"run_sweep_s": 1})
    layers = svc.state / "layers"
    layers.mkdir(exist_ok=True)
    assert metric(svc, "airlock_package_layers_removed_total") == 0
    old = fake_layer(layers, "a", 40 * DAY)
    held = fake_layer(layers, "b", 50 * DAY)
    fresh = fake_layer(layers, "c", 1 * DAY)
    # b in use: held shared as a run's helper holds it while its box has it mounted
    lock = open(layers / f"sha256-{held}.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_SH)
    try:
        assert wait_gone(layers / f"sha256-{old}"), "a layer unused for 40 days outlived the retention loop"
        time.sleep(2.5)  # two more sweeps: the held one stays, and the fresh one
        assert (layers / f"sha256-{held}" / "python" / "data").read_bytes() == b"x" * 4096
        assert (layers / f"sha256-{fresh}").exists()
    finally:
        lock.close()
    # the run over, its lock let go: the next sweep takes it
    assert wait_gone(layers / f"sha256-{held}"), "a layer no longer in use outlived the retention loop"
    assert (layers / f"sha256-{fresh}").exists() and not any(p.name.startswith("tmp-") for p in layers.iterdir())
    assert metric(svc, "airlock_package_layers_removed_total") == 2
    # each removal said: which layer, its bytes, why
    said = [ln for ln in svc.log_path.read_text(errors="replace").splitlines() if "layer.removed" in ln]
    assert len(said) == 2 and old in said[0] and held in said[1], said
    assert all("unused" in ln and "bytes" in ln for ln in said), said


def test_the_layer_settings_are_checked(tmp_path):
    """package_layer_retention_days and package_layers_max_mb: bounded, and
    a store smaller than one layer refused (each layer would go after its
    run); what is set is what the collection uses."""
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "airlock.conf"
    for text, said in (("package_layer_retention_days = 0\n", "package_layer_retention_days = 0"),
                       ("package_layer_retention_days = x\n", "package_layer_retention_days = x"),
                       ("package_layers_max_mb = 100\n", "less than one layer")):
        cfg.write_text(text)
        p = subprocess.run([str(AIRLOCK), "admin", "--config", str(cfg), "--state", str(state), "layers", "ls"],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 125 and said in p.stderr, (text, p.stdout, p.stderr)
    cfg.write_text("package_layer_retention_days = 7\npackage_layers_max_mb = 1024\n")
    layers = state / "layers"
    layers.mkdir()
    eight, six = fake_layer(layers, "d", 8 * DAY), fake_layer(layers, "e", 6 * DAY)
    p = subprocess.run([str(AIRLOCK), "admin", "--config", str(cfg), "--state", str(state), "layers", "prune"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and f"removed sha256:{eight}" in p.stdout and six not in p.stdout, (p.stdout, p.stderr)
    p = subprocess.run([str(AIRLOCK), "admin", "--config", str(cfg), "--state", str(state), "layers", "ls"],
                       capture_output=True, text=True, timeout=30)
    assert "1 layers" in p.stdout and "bound 1073741824 bytes" in p.stdout and "after 7 days" in p.stdout, p.stdout
