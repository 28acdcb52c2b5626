"""@daytonaio/sdk from npm, unchanged, against the Daytona test double
(daytona_double.py; tests/e2e/daytona_double.test.mjs): the double airlock's
daytona driver is tested against speaks what the real SDK expects. Then the
calls the double logged: what the driver tests will assert on."""
import os
import shutil

from conftest import need
from daytona_double import start_daytona_double
from node_util import node_test, npm_ci


def test_daytona_sdk_against_the_double(tmp_path):
    need(os.geteuid() == 0 and shutil.which("unshare") and shutil.which("chroot"),
         "root, unshare and chroot (the double runs each command in a private mount namespace)")
    npm_ci()
    d = start_daytona_double(tmp_path)
    try:
        node_test("daytona_double.test.mjs", {"DAYTONA_DOUBLE_URL": d.url, "DAYTONA_DOUBLE_KEY": d.key}, expect=6)
    finally:
        d.stop()
    calls = d.calls()
    creates = [r for r in d.requests if (r["method"], r["path"]) == ("POST", "/api/sandbox")]
    assert [r["auth"] for r in creates] == [True, True, False], calls
    # every other call carried the key (the SDK's socket.io probe aside: the double has no events)
    assert all(r["auth"] for r in d.requests if r is not creates[2] and not r["path"].startswith("/api/socket.io/")), calls
    assert creates[0]["json"]["env"] == {"GREETING": "hello"}
    assert creates[0]["json"]["labels"] == {"suite": "airlock", "code-toolbox-language": "python"}
    assert creates[0]["json"]["target"] == "us"
    execs = [r["json"] for r in d.requests if r["path"].endswith("/process/execute")]
    assert execs[0] == {"command": 'sh -c "cd /home/daytona && python3 /work/main.py"', "timeout": 30,
                        "cwd": "/work", "envs": {"EXTRA": "x1"}}, execs
    uploads = [r["json"] for r in d.requests if r["path"].endswith("/files/bulk-upload")]
    assert uploads[0] == ["files[0].path", "files[0].file", "files[1].path", "files[1].file"], uploads
    assert any(r["path"].endswith("/files/bulk-download") for r in d.requests), calls
    assert sum(1 for c in calls if c.startswith("DELETE /api/sandbox/")) == 2, calls
    # nothing is left of the deleted sandboxes
    assert not any((tmp_path / "daytona").iterdir()), list((tmp_path / "daytona").iterdir())
