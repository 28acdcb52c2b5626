"""The default runtime image (issue 3): a real build from image/default with
debootstrap, then what an agent expects of it. The built image is cached
between runs on the same machine (by the recipe's hash); a clean machine
builds it here, which takes a few minutes."""
import json
import os
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import AIRLOCK
from image_util import CACHE, ensure_default_image, image_cmd

LIBS = ["numpy", "pandas", "matplotlib", "PIL", "reportlab", "pypdf", "requests", "openpyxl", "xlsxwriter", "scipy"]


@pytest.fixture(scope="module")
def default_image():
    return ensure_default_image()


def box(code, lang="python", *extra, out=None):
    args = [str(AIRLOCK), "run", "--json", "--image", "default", "--lang", lang, "--timeout", "120", "--memory", "1G"]
    if out:
        args += ["--out", str(out)]
    p = subprocess.run([*args, *extra, "-c", code], capture_output=True, timeout=300,
                       env=dict(os.environ, AIRLOCK_STATE=str(CACHE)))
    return p.returncode, json.loads(p.stdout) if p.stdout else {"stderr": p.stderr.decode(errors="replace")}


def test_every_library_imports(default_image):
    status, doc = box("import " + ", ".join(LIBS) + "\nprint('ok')")
    assert status == 0 and doc["stdout"] == "ok\n", doc
    assert doc["box"]["runtime"] == default_image["digest"]


def test_node_runs(default_image):
    status, doc = box("console.log([1,2,3].map(x => x * 2).join(','))", "node")
    assert status == 0 and doc["stdout"] == "2,4,6\n", doc


def test_no_package_manager(default_image):
    status, doc = box("for c in pip pip3 apt apt-get dpkg npm npx; do command -v $c && echo FOUND $c; done;"
                      "python3 -m pip --version 2>&1 | head -1; python3 -c 'import ensurepip' 2>&1 | tail -1; true",
                      "bash")
    assert status == 0, doc
    assert "FOUND" not in doc["stdout"], doc["stdout"]
    assert "No module named pip" in doc["stdout"] and "No module named 'ensurepip'" in doc["stdout"], doc["stdout"]


def test_pandas_matplotlib_chart(default_image, tmp_path):
    code = ("import pandas as pd, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "df = pd.DataFrame({'month': [1, 2, 3, 4], 'sales': [3, 5, 4, 7]})\n"
            "ax = df.plot(x='month', y='sales', title='Sales')\n"
            "ax.figure.savefig('/out/chart.png', dpi=80)\nprint(df['sales'].sum())\n")
    status, doc = box(code, out=tmp_path / "results")
    assert status == 0, doc
    assert doc["stdout"] == "19\n"
    # the first plot found the font cache made at build time
    assert "building the font cache" not in doc["stderr"], doc["stderr"]
    png = (tmp_path / "results" / "chart.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (512, 384), (w, h)
    assert [a["path"] for a in doc["artifacts"]] == ["chart.png"]


def test_image_is_intact_and_listed(default_image):
    p = image_cmd("verify", "default", timeout=600)
    assert p.returncode == 0 and b"intact" in p.stdout, p.stdout + p.stderr
    holds = default_image.get("holds", {})
    assert holds, default_image


def test_verify_catches_a_changed_file(default_image):
    rootfs = CACHE / "images" / ("sha256-" + default_image["digest"][7:]) / "rootfs"
    victim = rootfs / "etc" / "debian_version"
    original = victim.read_bytes()
    try:
        victim.write_bytes(original + b"tampered\n")
        p = image_cmd("verify", "default", timeout=600)
        assert p.returncode == 1 and b"CHANGED" in p.stdout and b"/etc/debian_version" in p.stdout, p.stdout
    finally:
        victim.write_bytes(original)
    assert image_cmd("verify", "default", timeout=600).returncode == 0


def test_service_runs_on_the_image(default_image, tmp_path):
    """POST /v1/runs {"image": "default"}: the run names the digest it ran on."""
    from service_util import Service
    state = tmp_path / "svc"
    state.mkdir()
    (state / "images").symlink_to(CACHE / "images")
    svc = Service(state).start()
    try:
        run = svc.run("import pandas as pd\nprint(pd.Series([1, 2, 3]).sum())", image="default",
                      limits={"memory_mb": 1024, "cpus": 1})
        assert run["state"] == "succeeded", run
        assert run["result"]["stdout"] == "6\n"
        assert run["image"] == default_image["digest"]
        status, _, err = svc.post_run("print(1)", "python", wait=False, image="nosuch")
        assert status == 400 and "no image" in err["error"]["message"]
    finally:
        svc.stop()
