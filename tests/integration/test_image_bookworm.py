"""The bookworm image (issue 15): the Debian 12 recipe the default image was
until it moved to Debian 13, kept as image/bookworm for whoever depends on
the older libraries. A real build, once per machine and recipe (cached by
the recipe's hash like the default image: image_util.py); then a run and a
service run that name it, and what it holds beside the default."""
import os
import subprocess

import pytest

from conftest import AIRLOCK
from image_util import (CACHE, box, ensure_default_image, ensure_image, image_cmd, images_state, python_start,
                        recorded_versions, setuid_paths, versions_in_box)

LIBS = ["numpy", "pandas", "matplotlib", "PIL", "reportlab", "pypdf", "requests", "openpyxl", "xlsxwriter", "scipy"]


@pytest.fixture(scope="module")
def bookworm():
    return ensure_image("bookworm")


def test_it_is_debian_12_with_the_older_libraries(bookworm):
    holds = bookworm["holds"]
    assert holds["system"]["version_id"] == "12" and holds["source"]["suite"] == "bookworm", holds["system"]
    status, doc = box("import " + ", ".join(LIBS) + "\nprint('ok')", image="bookworm")
    assert status == 0 and doc["stdout"] == "ok\n", doc
    assert doc["box"]["runtime"] == bookworm["digest"]
    got = versions_in_box(bookworm, "bookworm")
    assert got == recorded_versions(bookworm), (got, recorded_versions(bookworm))
    assert got["python"].startswith("3.11.") and got["node"].startswith("18."), got
    assert got["libraries"]["pandas"].startswith("1.5.") and got["libraries"]["numpy"].startswith("1.24."), got


def test_no_package_manager_and_no_setuid_file(bookworm):
    status, doc = box("for c in pip pip3 apt apt-get dpkg npm npx corepack; do command -v $c && echo FOUND $c; done;"
                      "python3 -m pip --version 2>&1 | head -1; true", "bash", image="bookworm")
    assert status == 0 and "FOUND" not in doc["stdout"] and "No module named pip" in doc["stdout"], doc
    assert setuid_paths(bookworm) == []


def test_python_starts_without_a_failing_import(bookworm):
    names, hashed = python_start("bookworm")
    assert "sitecustomize" in names and "apport_python_hook" not in names and hashed, names


def test_both_images_are_listed_with_their_versions(bookworm):
    default = ensure_default_image()
    assert default["digest"] != bookworm["digest"]
    ls = image_cmd("ls").stdout.decode()
    p = subprocess.run([str(AIRLOCK), "doctor"], capture_output=True, timeout=60,
                       env=dict(os.environ, AIRLOCK_STATE=str(CACHE)))
    doctor = p.stdout.decode()
    for e, suite in ((default, "trixie"), (bookworm, "bookworm")):
        h = e["holds"]
        want = [f"Debian {h['system']['debian_version']} ({suite})", f"python {h['python']['version']}",
                f"node {h['node']['version']}", f"numpy {h['python']['libraries']['numpy']['version']}"]
        line = next(ln for ln in ls.splitlines() if ln.startswith(e["digest"]))
        held = doctor[doctor.index("image:   " + e["digest"]):].splitlines()[1]
        for w in want:
            assert w in line and w in held, (w, line, held)


def test_a_service_run_names_it(bookworm, tmp_path):
    """POST /v1/runs {"image": "bookworm"}: the run ran on its digest."""
    from service_util import Service
    svc = Service(images_state(tmp_path)).start()
    try:
        run = svc.run("import pandas, sys\nprint(pandas.__version__, sys.version_info[:2])", image="bookworm",
                      limits={"memory_mb": 1024, "cpus": 1})
        assert run["state"] == "succeeded", run
        assert run["result"]["stdout"].startswith("1.5."), run["result"]
        assert run["image"] == bookworm["digest"]
    finally:
        svc.stop()
