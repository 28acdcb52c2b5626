"""@daytonaio/sdk from npm, unchanged, against the Daytona test double
(daytona_double.py; tests/e2e/daytona_double.test.mjs): the double airlock's
daytona driver is tested against speaks what the real SDK expects. Then the
calls the double logged: what the driver tests will assert on."""
import json
import os
import shutil
import urllib.error
import urllib.request

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


def call(d, method, url, body=None, ctype="application/json", key=None):
    data = json.dumps(body).encode() if ctype == "application/json" and body is not None else body
    req = urllib.request.Request(url, method=method, data=data, headers={
        "Authorization": f"Bearer {key or d.key}", "Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_what_a_driver_may_send_beyond_the_sdk(tmp_path):
    """A raw-body upload (upload-v2 and the legacy /files/upload take one, as
    the daemon does), names a driver must skip as they come back from a
    listing and a bulk download, a symlink out of the tree refused, and a
    deleted sandbox's toolbox gone."""
    need(os.geteuid() == 0 and shutil.which("unshare") and shutil.which("chroot"),
         "root, unshare and chroot (the double runs each command in a private mount namespace)")
    d = start_daytona_double(tmp_path)
    try:
        st, body = call(d, "POST", d.url + "/sandbox", {"env": {}, "labels": {}})
        sb = json.loads(body)
        tb = f"{sb['toolboxProxyUrl']}/{sb['id']}"
        st, body = call(d, "POST", tb + "/files/upload-v2?path=/work/raw.bin", b"\x00\x01raw", "application/octet-stream")
        assert (st, json.loads(body)) == (200, {"name": "raw.bin", "path": "/work/raw.bin", "type": "file"})
        st, _ = call(d, "POST", tb + "/files/upload?path=/work/legacy.txt", b"legacy", "application/octet-stream")
        assert st == 200
        assert call(d, "GET", tb + "/files/download?path=/work/raw.bin") == (200, b"\x00\x01raw")
        script = ("import os\n"
                  "for n in ['a\\nb', 'q\"uote', 'back\\\\slash', 'ok.txt']:\n"
                  "    open('/out/' + n, 'w').write(n)\n"
                  "os.symlink('/etc/hostname', '/out/link')\n"
                  "print(sorted(os.listdir('/work')))\n")
        call(d, "POST", tb + "/files/upload-v2?path=/work/s.py", script.encode(), "application/octet-stream")
        st, body = call(d, "POST", tb + "/process/execute", {"command": "python3 /work/s.py"})
        assert (st, json.loads(body)) == (200, {"exitCode": 0, "result": "['legacy.txt', 'raw.bin', 's.py']\n"})
        st, body = call(d, "GET", tb + "/files?path=/out")
        assert sorted(f["name"] for f in json.loads(body)) == ["a\nb", "back\\slash", "link", "ok.txt", 'q"uote']
        st, body = call(d, "POST", tb + "/files/bulk-download", {"paths": ["/out/ok.txt", "/out/q\"uote", "/out/nope"]})
        assert st == 200 and b'name="file"; filename="/out/ok.txt"' in body and b'filename="/out/q\\"uote"' in body
        assert b'name="error"; filename="/out/nope"' in body and b"FILE_NOT_FOUND" in body
        # an absolute link, resolved on the host, points out of the tree: refused, no host file leaks
        st, body = call(d, "GET", tb + "/files/download?path=/out/link")
        assert st == 403 and json.loads(body)["code"] == "FILE_ACCESS_DENIED", body
        assert call(d, "POST", tb + "/process/execute", {"command": "true"}, key="wrong")[0] == 401
        assert call(d, "DELETE", d.url + f"/sandbox/{sb['id']}")[0] == 200
        assert call(d, "POST", tb + "/process/execute", {"command": "true"})[0] == 404
        assert not (tmp_path / "daytona" / sb["id"]).exists()
    finally:
        d.stop()
