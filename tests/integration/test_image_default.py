"""The default runtime image (issues 3 and 15): a real build from
image/default (Debian 13 trixie) with debootstrap, then what an agent
expects of it. The built image is cached between runs on the same machine
(by the recipe's hash); a clean machine builds it here, which takes a few
minutes."""
import json
import os
import struct
import subprocess

import pytest

from conftest import AIRLOCK
from image_util import (CACHE, box, ensure_default_image, image_cmd, images_state, python_start,
                        recorded_versions, setuid_paths, versions_in_box)

LIBS = ["numpy", "pandas", "matplotlib", "PIL", "reportlab", "pypdf", "fpdf", "requests", "openpyxl", "xlsxwriter",
        "scipy"]


@pytest.fixture(scope="module")
def default_image():
    return ensure_default_image()


def test_every_library_imports(default_image):
    status, doc = box("import " + ", ".join(LIBS) + "\nprint('ok')")
    assert status == 0 and doc["stdout"] == "ok\n", doc
    assert doc["box"]["runtime"] == default_image["digest"]


def test_it_is_debian_13_with_the_versions_it_promises(default_image):
    """Python 3.13, Node 20, fpdf2, pandas 2.2, numpy 2.2, matplotlib 3.10,
    reportlab 4, pypdf 5 (issue 15), and the manifest says what the tree holds."""
    holds = default_image["holds"]
    assert holds["system"]["version_id"] == "13" and holds["source"]["suite"] == "trixie", holds["system"]
    got = versions_in_box(default_image, "default")
    assert got == recorded_versions(default_image), (got, recorded_versions(default_image))
    lib = got["libraries"]
    assert got["python"].startswith("3.13."), got
    assert got["node"].startswith("20."), got
    for dist, major in (("fpdf2", "2.8."), ("pandas", "2.2."), ("numpy", "2.2."), ("matplotlib", "3.10."),
                        ("reportlab", "4."), ("pypdf", "5.")):
        assert lib[dist].startswith(major), (dist, lib[dist])


def test_fpdf2_writes_a_unicode_pdf(default_image, tmp_path):
    """fpdf2 with the image's DejaVu font: text beyond Latin-1, read back with pypdf."""
    code = ("from fpdf import FPDF\nimport pypdf\n"
            "pdf = FPDF()\npdf.add_page()\n"
            "pdf.add_font('DejaVu', fname='/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf')\n"
            "pdf.set_font('DejaVu', size=14)\n"
            "pdf.multi_cell(0, 10, 'Quarterly report: \u0394 revenue +12 %, \u20ac 3400, \u041f\u0440\u0438\u0432\u0435\u0442')\n"
            "pdf.output('/out/r.pdf')\n"
            "print(pypdf.PdfReader('/out/r.pdf').pages[0].extract_text())\n")
    status, doc = box(code, out=tmp_path / "results")
    assert status == 0, doc
    assert "\u0394 revenue" in doc["stdout"] and "\u041f\u0440\u0438\u0432\u0435\u0442" in doc["stdout"], doc["stdout"]
    assert (tmp_path / "results" / "r.pdf").read_bytes()[:5] == b"%PDF-"


def test_no_setuid_or_setgid_file(default_image):
    assert setuid_paths(default_image) == []


def test_ls_and_doctor_show_its_versions(default_image):
    h = default_image["holds"]
    lib = h["python"]["libraries"]
    want = [f"Debian {h['system']['debian_version']} (trixie)", f"python {h['python']['version']}",
            f"node {h['node']['version']}", f"fpdf2 {lib['fpdf2']['version']}", f"pandas {lib['pandas']['version']}"]
    ls = image_cmd("ls").stdout.decode()
    line = next(ln for ln in ls.splitlines() if ln.startswith(default_image["digest"]))
    for w in want:
        assert w in line, (w, line)
    env = dict(os.environ, AIRLOCK_STATE=str(CACHE))
    p = subprocess.run([str(AIRLOCK), "doctor"], capture_output=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    text = p.stdout.decode()
    held = text[text.index("image:   " + default_image["digest"]):].splitlines()[1]
    for w in want:
        assert w in held, (w, held)
    p = subprocess.run([str(AIRLOCK), "doctor", "--json"], capture_output=True, timeout=60, env=env)
    images = {e["digest"]: e for e in json.loads(p.stdout)["images"]}
    assert images[default_image["digest"]]["holds"]["python"]["libraries"]["fpdf2"] == lib["fpdf2"]


def test_node_runs(default_image):
    status, doc = box("console.log([1,2,3].map(x => x * 2).join(','))", "node")
    assert status == 0 and doc["stdout"] == "2,4,6\n", doc


def test_python_starts_without_a_failing_import(default_image):
    """Debian's sitecustomize imports Ubuntu's apport_python_hook, a failed
    import that walked all of sys.path at every start (0.3 ms of it); the
    recipe leaves the module empty, byte-compiled against its hash."""
    names, hashed = python_start()
    assert "sitecustomize" in names and "site" in names, names
    assert "apport_python_hook" not in names, names
    assert hashed


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
    svc = Service(images_state(tmp_path)).start()
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
