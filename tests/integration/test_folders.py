"""Connected folders (issue 38, docs/api.md "Connected folders"): a directory of
the host lent to a workspace by `airlock admin folder add`, listed over REST,
imported by a run into /work/documents/FOLDER/..., read-only always; each file
read and hashed at the request, bound by the run's hash and its approval, read
again beneath the folder's root at the start and refused when it changed.

The attacks are differential: each shows what the host itself does with the
same path (a link read through, a FIFO that blocks, a mount point crossed), and
that airlock refuses it, at once and naming the path."""
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from conftest import ROOT
from node_util import node_test, npm_ci
from service_util import audit_events, gov_tenant, hooks_binary, put_settings, service, services  # noqa: F401

SECRET_FILE = "/etc/shadow"


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def ws(service, tmp_path_factory):
    """A workspace (admin and member clients) with folder "docs" on a host directory."""
    t = gov_tenant(service, "fold")
    t.member_id, t.member = t.person_in("member")
    root = tmp_path_factory.mktemp("folder") / "docs-root"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "a.csv").write_bytes(b"x,y\n1,2\n")
    (root / "sub" / "b.txt").write_bytes(b"bee\n")
    (root / "sub" / "deep" / "c.txt").write_bytes(b"sea\n")
    t.root = root
    service.admin("folder", "add", "--workspace", t.workspace, "docs", str(root))
    return t


def folder_run(client, code, folders, **fields):
    return client.post_run(code, wait=True, folders=folders, **fields)


def refused(client, folders, *words):
    """A run with FOLDERS is refused 400 at once, its message holding WORDS."""
    t0 = time.monotonic()
    status, _, doc = client.post_run("print(1)", folders=folders)
    took = time.monotonic() - t0
    assert status == 400, (status, doc)
    msg = doc["error"]["message"]
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert took < 10, f"the refusal took {took:.1f} s"
    return msg


# ------------------------------------------------------------ registration


def test_admin_folder_add_ls_rm(service, ws, tmp_path):
    d = tmp_path / "other"
    d.mkdir()
    (tmp_path / "file").write_text("x")
    os.symlink(d, tmp_path / "link")
    bad = [(["..", str(d)], "NAME"), (["ok", "relative/path"], "absolute"),
           (["ok", str(tmp_path / "missing")], "No such file"), (["ok", str(tmp_path / "file")], "Not a directory"),
           (["ok", str(tmp_path / "link")], "symbolic link"), (["docs", str(d)], "already has a folder named docs"),
           # the service's state (every tenant's files), what holds it, what is in it
           (["ok", str(service.state)], "state directory"), (["ok", "/"], "holds the service's state"),
           (["ok", str(service.state / "runs")], "is inside the service's state")]
    for args, words in bad:
        p = service.admin_run("folder", "add", "--workspace", ws.workspace, *args)
        assert p.returncode != 0, (args, p)
        assert words in p.stderr.decode(), (args, p.stderr)
    service.admin("folder", "add", "--workspace", ws.workspace, "other", str(d), "--glob", "*.md")
    out = service.admin("folder", "ls", "--workspace", ws.workspace)
    assert f"other\t{d}\tglob=*.md" in out and f"docs\t{ws.root}\tglob=*" in out, out
    service.admin("folder", "rm", "--workspace", ws.workspace, "other")
    assert "other" not in service.admin("folder", "ls", "--workspace", ws.workspace)
    p = service.admin_run("folder", "rm", "--workspace", ws.workspace, "other")
    assert p.returncode != 0 and b"no folder named other" in p.stderr
    kinds = [e["kind"] for e in audit_events(ws.client)]
    assert "folder.added" in kinds and "folder.removed" in kinds, kinds


def test_list_hides_the_host_path_from_members(ws):
    member = ws.member.ok("GET", "/v1/folders")["folders"]
    assert [f["name"] for f in member] == ["docs"] and "path" not in member[0], member
    admin = ws.client.ok("GET", "/v1/folders")["folders"]
    assert admin[0]["path"] == str(ws.root), admin
    # another workspace sees none of them
    other = gov_tenant(ws.svc, "fold2")
    assert other.client.ok("GET", "/v1/folders")["folders"] == []
    status, _, doc = other.client.get("/v1/folders/docs/entries")
    assert status == 404, (status, doc)


def test_entries(ws):
    doc = ws.member.ok("GET", "/v1/folders/docs/entries")
    names = {e["name"]: e for e in doc["entries"]}
    assert set(names) >= {"a.csv", "sub"} and doc["truncated"] is False, doc
    assert names["a.csv"]["type"] == "file" and names["a.csv"]["size"] == 8 and names["sub"]["type"] == "dir"
    assert names["a.csv"]["mtime"].endswith("Z")
    sub = ws.member.ok("GET", "/v1/folders/docs/entries", query={"path": "sub"})
    assert sorted(e["name"] for e in sub["entries"]) == ["b.txt", "deep"], sub
    for bad in ("../", "/etc", "sub/../..", "a.csv"):
        status, _, d = ws.member.get("/v1/folders/docs/entries", query={"path": bad})
        assert status in (400, 404), (bad, status, d)
    status, _, d = ws.member.get("/v1/folders/nope/entries")
    assert status == 404 and "no folder named nope" in d["error"]["message"], d


def test_entries_cap_and_glob(service, ws, tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    for i in range(1005):
        (big / f"f{i:04}.md").write_bytes(b"")
    (big / "skip.txt").write_bytes(b"")
    service.admin("folder", "add", "--workspace", ws.workspace, "big", str(big), "--glob", "*.md")
    doc = ws.member.ok("GET", "/v1/folders/big/entries")
    assert len(doc["entries"]) == 1000 and doc["truncated"] is True, len(doc["entries"])
    assert all(e["name"].endswith(".md") for e in doc["entries"])
    # a glob-denied file named alone: 400 naming the path and the glob
    refused(ws.client, [{"folder": "big", "paths": ["skip.txt"]}], "skip.txt", "glob", "*.md")
    # a directory of 1,005 files: over the 1,000 files a run imports
    refused(ws.client, [{"folder": "big", "paths": ["."]}], "1000 files")
    service.admin("folder", "rm", "--workspace", ws.workspace, "big")


# ------------------------------------------------------------ staging


def test_import_stages_read_only_copies(ws):
    code = ("import os\n"
            "for d, _, fs in sorted(os.walk('/work/documents')):\n"
            "    for f in sorted(fs):\n"
            "        p = os.path.join(d, f); print(p, open(p).read().strip())\n"
            "open('/work/documents/docs/a.csv', 'w').write('overwritten')\n")
    status, _, run = folder_run(ws.client, code, [{"folder": "docs", "paths": ["a.csv", "sub"]}])
    assert status == 200 and run["state"] == "succeeded", run
    out = run["result"]["stdout"].splitlines()
    assert out == ["/work/documents/docs/a.csv x,y", "1,2", "/work/documents/docs/sub/b.txt bee",
                   "/work/documents/docs/sub/deep/c.txt sea"], out
    # what the run wrote stayed in its box: the folder is read-only always
    assert (ws.root / "a.csv").read_bytes() == b"x,y\n1,2\n"
    # the run and its audit entry name each import with its hash
    assert [(i["path"], i["sha256"]) for i in run["imports"]] == [
        ("a.csv", sha(b"x,y\n1,2\n")), ("sub/b.txt", sha(b"bee\n")), ("sub/deep/c.txt", sha(b"sea\n"))], run["imports"]
    calls = [e for e in audit_events(ws.client, kind="tool.call") if e.get("run_id") == run["id"]]
    assert calls, "no tool.call event"
    imports = calls[-1]["data"]["imports"]
    assert {(i["folder"], i["path"], i["size"], i["sha256"]) for i in imports} == {
        ("docs", "a.csv", 8, sha(b"x,y\n1,2\n")), ("docs", "sub/b.txt", 4, sha(b"bee\n")),
        ("docs", "sub/deep/c.txt", 4, sha(b"sea\n"))}, imports


def test_bad_requests(ws):
    c = ws.client
    refused(c, [{"folder": "docs", "paths": ["../etc/passwd"]}], "paths[0]", "..")
    refused(c, [{"folder": "docs", "paths": ["/etc/passwd"]}], "absolute")
    refused(c, [{"folder": "docs", "paths": ["a\u0000b"]}], "NUL")
    refused(c, [{"folder": "nope", "paths": ["a"]}], "no folder named nope")
    refused(c, [{"folder": "docs", "paths": ["missing.csv"]}], "missing.csv", "does not exist")
    refused(c, [{"folder": "docs", "paths": ["a.csv"], "extra": 1}], "extra")
    refused(c, [{"folder": "docs", "paths": ["a.csv"]}, {"folder": "docs", "paths": ["sub"]}], "named twice")
    refused(c, [{"folder": f"f{i}", "paths": ["a"]} for i in range(17)], "16")
    refused(c, [{"folder": "docs", "paths": ["a.csv"] * 257}], "256 paths")


def test_over_the_byte_cap(ws):
    # sparse: 65 MiB on the host costs nothing; refused on its size, unread
    with open(ws.root / "huge.bin", "wb") as f:
        f.truncate(65 << 20)
    try:
        refused(ws.client, [{"folder": "docs", "paths": ["huge.bin"]}], "huge.bin", "64 MiB")
    finally:
        (ws.root / "huge.bin").unlink()


# ------------------------------------------------------------ attacks


def test_symlink_to_a_secret(ws):
    link = ws.root / "shadow"
    os.symlink(SECRET_FILE, link)
    os.symlink("/etc", ws.root / "etcdir")
    try:
        # the control: the host reads the secret through the link
        assert open(link, "rb").read() == open(SECRET_FILE, "rb").read()
        refused(ws.client, [{"folder": "docs", "paths": ["shadow"]}], "shadow", "symbolic link")
        refused(ws.client, [{"folder": "docs", "paths": ["etcdir/shadow"]}], "etcdir/shadow", "symbolic link")
        # listed: left out; the folder taken whole: left out of the copy
        names = [e["name"] for e in ws.member.ok("GET", "/v1/folders/docs/entries")["entries"]]
        assert "shadow" not in names and "etcdir" not in names, names
        status, _, run = folder_run(ws.client, "import os\nprint(sorted(os.listdir('/work/documents/docs')))",
                                    [{"folder": "docs", "paths": ["."]}])
        assert run["state"] == "succeeded", run
        assert run["result"]["stdout"].strip() == "['a.csv', 'sub']", run["result"]
    finally:
        link.unlink()
        (ws.root / "etcdir").unlink()


def test_fifo_never_blocks(ws):
    fifo = ws.root / "pipe"
    os.mkfifo(fifo)
    try:
        # the control: a plain open for reading blocks (no writer)
        p = subprocess.run(["timeout", "1", "cat", str(fifo)], capture_output=True)
        assert p.returncode == 124, p
        refused(ws.client, [{"folder": "docs", "paths": ["pipe"]}], "pipe", "FIFO")
        names = [e["name"] for e in ws.member.ok("GET", "/v1/folders/docs/entries")["entries"]]
        assert "pipe" not in names
    finally:
        fifo.unlink()


def test_socket_and_device_are_refused(ws):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(ws.root / "sock"))
    os.mknod(ws.root / "null", 0o600 | 0o020000, os.makedev(1, 3))
    try:
        refused(ws.client, [{"folder": "docs", "paths": ["sock"]}], "sock", "socket")
        refused(ws.client, [{"folder": "docs", "paths": ["null"]}], "null", "device")
    finally:
        sock.close()
        (ws.root / "sock").unlink()
        (ws.root / "null").unlink()


def test_mount_point_is_not_crossed(ws):
    mnt = ws.root / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "--bind", "/etc", str(mnt)], check=True)
    try:
        # the control: the host walks into the bind mount
        assert (mnt / "passwd").exists()
        refused(ws.client, [{"folder": "docs", "paths": ["mnt/passwd"]}], "mnt/passwd", "mount point")
        refused(ws.client, [{"folder": "docs", "paths": ["mnt"]}], "mnt", "mount point")
        names = [e["name"] for e in ws.member.ok("GET", "/v1/folders/docs/entries")["entries"]]
        assert "mnt" not in names
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
        mnt.rmdir()


def test_root_replaced_is_refused(service, ws, tmp_path):
    d = tmp_path / "moving"
    d.mkdir()
    (d / "x.txt").write_text("x")
    service.admin("folder", "add", "--workspace", ws.workspace, "moving", str(d))
    try:
        # another directory at the path (made while the first still exists:
        # a freed inode number could be handed to it again)
        d.rename(tmp_path / "was")
        d.mkdir()
        (d / "x.txt").write_text("x")
        shutil.rmtree(tmp_path / "was")
        status, _, doc = ws.client.post_run("print(1)", folders=[{"folder": "moving", "paths": ["x.txt"]}])
        assert status == 409 and doc["error"]["code"] == "folder_changed", (status, doc)
        assert "not the directory registered" in doc["error"]["message"], doc
    finally:
        service.admin("folder", "rm", "--workspace", ws.workspace, "moving")


# ------------------------------------------------------------ approval


@pytest.fixture(scope="module")
def appr(service, ws):
    """The same workspace's folder, in a second workspace that asks approval of every run."""
    t = gov_tenant(service, "foldappr")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    t.approver_id, t.approver = t.person_in("approver")
    service.admin("folder", "add", "--workspace", t.workspace, "docs", str(ws.root))
    return t


def test_approval_binds_the_imports(ws, appr):
    (ws.root / "bound.txt").write_bytes(b"as approved\n")
    status, _, run = appr.client.post_run("print(open('/work/documents/docs/bound.txt').read())",
                                          folders=[{"folder": "docs", "paths": ["bound.txt"]}])
    assert status == 201 and run["state"] == "pending_approval", run
    card = run["approval"]
    assert card["inputs"]["imports"] == [{"folder": "docs", "path": "bound.txt", "size": 12,
                                          "sha256": sha(b"as approved\n")}], card["inputs"]
    # the control: approved unchanged, it runs with what was approved
    appr.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    done = appr.client.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "succeeded" and done["result"]["stdout"].strip() == "as approved", done
    # the attack: the same file changed after the card was shown
    status, _, run = appr.client.post_run("print(open('/work/documents/docs/bound.txt').read())",
                                          folders=[{"folder": "docs", "paths": ["bound.txt"]}])
    card = run["approval"]
    (ws.root / "bound.txt").write_bytes(b"swapped!!!!\n")   # the same size
    appr.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": card["hash"]})
    done = appr.client.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "error", done
    assert done["error"]["code"] == "folder_changed", done["error"]
    assert done["error"]["message"].startswith("folder docs: bound.txt changed since it was approved"), done["error"]
    # swapped for a link to a secret after the card: refused the same way
    (ws.root / "bound.txt").write_bytes(b"as approved\n")
    status, _, run = appr.client.post_run("print(open('/work/documents/docs/bound.txt').read())",
                                          folders=[{"folder": "docs", "paths": ["bound.txt"]}])
    (ws.root / "bound.txt").unlink()
    os.symlink(SECRET_FILE, ws.root / "bound.txt")
    try:
        appr.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
        done = appr.client.wait_state(run["id"], {"succeeded", "failed", "error"})
        assert done["state"] == "error" and done["error"]["code"] == "folder_changed", done
        assert "symbolic link" in done["error"]["message"], done["error"]
    finally:
        (ws.root / "bound.txt").unlink()


def test_a_document_of_the_folders_name_is_refused(ws):
    thread = f"fold-{time.monotonic_ns()}"
    run = ws.client.run("import os\nos.makedirs('/out/docs')\nopen('/out/docs/n.txt','w').write('n')",
                        thread_id=thread)
    assert run["state"] == "succeeded", run
    status, _, doc = ws.client.post_run("print(1)", thread_id=thread, folders=[{"folder": "docs", "paths": ["a.csv"]}])
    assert status == 400 and "docs/n.txt" in doc["error"]["message"], doc


# ------------------------------------------------------------ MCP


def test_mcp_sdk_code_execution_with_folders(service, ws):
    """The official MCP SDK (tests/e2e/mcp_folders.test.mjs) against the same folder."""
    npm_ci()
    node_test("mcp_folders.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": ws.client.key,
                                       "AIRLOCK_FOLDER": "docs"}, expect=1)


# ------------------------------------------------------------ E2B


def test_e2b_sdk_sandbox_with_folders(service, ws):
    """The E2B SDK (tests/e2e/e2b_folders.test.mjs): metadata airlock_folders at create."""
    npm_ci()
    node_test("e2b_folders.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": ws.client.key,
                                       "AIRLOCK_FOLDER": "docs"}, expect=1)


def test_the_box_s_own_caps_bound_the_copy(service, ws, tmp_path):
    """1,000 files is the folders' cap, and the box's /work holds 1,000 entries in
    all, directories included: the run ends error naming the cap, not a box half staged."""
    full = tmp_path / "full"
    (full / "d").mkdir(parents=True)
    for i in range(1000):
        (full / "d" / f"{i:04}").write_bytes(b"")
    service.admin("folder", "add", "--workspace", ws.workspace, "full", str(full))
    try:
        status, _, run = folder_run(ws.client, "print(1)", [{"folder": "full", "paths": ["d"]}])
        assert status == 200 and run["state"] == "error", run
        assert run["error"]["code"] == "box" and "1000" in run["error"]["message"], run["error"]
    finally:
        service.admin("folder", "rm", "--workspace", ws.workspace, "full")


def test_a_folder_removed_before_the_start_ends_the_run(service, ws, appr, tmp_path):
    d = tmp_path / "gone"
    d.mkdir()
    (d / "g.txt").write_text("g")
    service.admin("folder", "add", "--workspace", appr.workspace, "gone", str(d))
    status, _, run = appr.client.post_run("print(1)", folders=[{"folder": "gone", "paths": ["g.txt"]}])
    assert status == 201 and run["approval"]["inputs"]["imports"][0]["path"] == "g.txt", run
    service.admin("folder", "rm", "--workspace", appr.workspace, "gone")
    appr.approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = appr.client.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "error" and done["error"]["code"] == "folder", done
    assert "folder gone was removed" in done["error"]["message"], done["error"]


def test_without_approval_a_change_before_the_start_is_refused(services, tmp_path):
    """No approval: the file is pinned at the request all the same, and read again
    at the start. The test build holds a claimed run 1.5 s before its start
    (AIRLOCK_TEST_CLAIM_PAUSE_MS): the file is changed inside that window."""
    svc = services.start("foldclaim", extra_env={"AIRLOCK_TEST_CLAIM_PAUSE_MS": "1500"},
                         binary=hooks_binary(ROOT / "build-asan"))
    ws_id = re.search(r"\b(ws_[a-z0-9]+)", svc.admin("list")).group(1)
    d = tmp_path / "live"
    d.mkdir()
    (d / "f.txt").write_bytes(b"request\n")
    svc.admin("folder", "add", "--workspace", ws_id, "live", str(d))
    code = "print(open('/work/documents/live/f.txt').read().strip())"
    # the control: unchanged, it runs with what was requested
    run = svc.run(code, folders=[{"folder": "live", "paths": ["f.txt"]}])
    assert run["state"] == "succeeded" and run["result"]["stdout"] == "request\n", run
    run = svc.run(code, wait=False, folders=[{"folder": "live", "paths": ["f.txt"]}])
    (d / "f.txt").write_bytes(b"changed\n")
    done = svc.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "error" and done["error"]["code"] == "folder_changed", done
    assert done["error"]["message"].startswith("folder live: f.txt changed since the run was requested"), done["error"]
