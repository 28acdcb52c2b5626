"""Connected folders attacked (issue 38): what an operator's mistake, a
folder's other users and a tenant can do with a lent directory, each shown
working against a control (the host itself reading the same path) and
failing against airlock, at once and naming the rule. What held without a
change is in docs/security.md ("Connected folders")."""
import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import time

import pytest

from service_util import gov_tenant, put_settings, service  # noqa: F401
from test_mcp import Mcp


def sha(data):
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def ws(service, tmp_path_factory):
    """A workspace with folder "lent" on a host directory, and a second one (approval always) lent the same."""
    t = gov_tenant(service, "fatk")
    base = tmp_path_factory.mktemp("fatk")
    t.root = base / "lent"
    t.root.mkdir()
    (t.root / "ok.csv").write_bytes(b"a,b\n")
    t.outside = base / "outside"
    t.outside.mkdir()
    service.admin("folder", "add", "--workspace", t.workspace, "lent", str(t.root))
    return t


def refused(client, folders, *words):
    t0 = time.monotonic()
    status, _, doc = client.post_run("print(1)", folders=folders)
    assert status == 400, (status, doc)
    msg = doc["error"]["message"]
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    assert time.monotonic() - t0 < 10
    return msg


def add_refused(service, ws, path, *words, name="x"):
    """`folder add` of PATH fails saying WORDS (and nothing is registered)."""
    p = service.admin_run("folder", "add", "--workspace", ws.workspace, name, str(path))
    err = p.stderr.decode() if isinstance(p.stderr, bytes) else p.stderr
    if p.returncode == 0:   # lent: taken back, so that the next case is not refused for its name
        service.admin("folder", "rm", "--workspace", ws.workspace, name)
    assert p.returncode != 0, (path, p.stdout)
    for w in words:
        assert w in err, (w, err)
    return err


def listed(ws, sub=""):
    doc = ws.client.ok("GET", "/v1/folders/lent/entries", query={"path": sub} if sub else None)
    return [e["name"] for e in doc["entries"]]


def box_listing(ws, path="."):
    """The folder (or PATH of it) imported whole: the names the box sees beneath /work/documents/lent."""
    code = ("import os\nfor r, d, f in os.walk('/work/documents/lent'):\n"
            "    for n in f: print(repr(os.path.relpath(os.path.join(r, n), '/work/documents/lent')))")
    status, _, run = ws.client.post_run(code, wait=True, folders=[{"folder": "lent", "paths": [path]}])
    assert status == 200 and run["state"] == "succeeded", run
    return sorted(eval(x) for x in run["result"]["stdout"].split("\n") if x)  # noqa: S307 (repr of str)


# ------------------------------------------------------------ hard links


def test_a_hard_link_to_a_file_outside_is_never_read(service, ws):
    secret = ws.outside / "secret.txt"
    secret.write_bytes(b"outside the folder\n")
    os.link(secret, ws.root / "innocent.csv")
    # the service's own state, when it shares the folder's filesystem
    key = service.state / "audit.key"
    state_link = ws.root / "key.csv"
    if key.exists() and os.stat(key).st_dev == os.stat(ws.root).st_dev:
        os.link(key, state_link)
    try:
        # the control: on the host the link reads as a plain file, the secret's bytes
        assert (ws.root / "innocent.csv").read_bytes() == secret.read_bytes()
        assert (ws.root / "innocent.csv").is_file() and not (ws.root / "innocent.csv").is_symlink()
        refused(ws.client, [{"folder": "lent", "paths": ["innocent.csv"]}], "innocent.csv", "hard link")
        if state_link.exists():
            assert state_link.read_bytes() == key.read_bytes()
            refused(ws.client, [{"folder": "lent", "paths": ["key.csv"]}], "key.csv", "hard link")
        assert "innocent.csv" not in listed(ws) and "key.csv" not in listed(ws)
        assert box_listing(ws) == ["ok.csv"]
    finally:
        (ws.root / "innocent.csv").unlink()
        if state_link.exists():
            state_link.unlink()


# -------------------------------------------------- the operator's mistakes


def test_the_state_directory_through_a_bind_mount_is_refused(service, ws, tmp_path):
    view, inner = tmp_path / "view", tmp_path / "inner"
    view.mkdir()
    inner.mkdir()
    subprocess.run(["mount", "--bind", str(service.state.parent), str(view)], check=True)
    subprocess.run(["mount", "--bind", str(service.state / "runs"), str(inner)], check=True)
    try:
        # the control: through the bind the host reads every tenant's store and the audit key
        assert (view / service.state.name / "airlock.db").is_file()
        assert (view / service.state.name / "audit.key").read_bytes() == (service.state / "audit.key").read_bytes()
        add_refused(service, ws, view, "holds the service's state directory")
        add_refused(service, ws, view / service.state.name, "state directory")
        add_refused(service, ws, inner, "is inside the service's state directory")
        # a bind of the state's inside, lent deeper: the same
        add_refused(service, ws, view / service.state.name / "runs", "is inside the service's state directory")
        assert [f["name"] for f in ws.client.ok("GET", "/v1/folders")["folders"]] == ["lent"]
    finally:
        subprocess.run(["umount", str(view)], check=True)
        subprocess.run(["umount", str(inner)], check=True)


def test_kernel_filesystems_and_paths_through_links_are_refused(service, ws, tmp_path):
    # the control: /proc and /sys are directories the host lists, and a directory of files is lent
    assert str(os.getpid()) in os.listdir("/proc") and os.path.isdir("/sys/kernel")
    good = tmp_path / "good"
    good.mkdir()
    service.admin("folder", "add", "--workspace", ws.workspace, "good", str(good))
    service.admin("folder", "rm", "--workspace", ws.workspace, "good")
    add_refused(service, ws, "/proc", "proc filesystem")
    add_refused(service, ws, f"/proc/{os.getpid()}", "proc filesystem")
    add_refused(service, ws, "/sys/kernel", "sysfs filesystem")
    # a path each start would open again through a link (a magic one here)
    add_refused(service, ws, f"/proc/{os.getpid()}/cwd", "symbolic link")
    os.symlink(tmp_path, tmp_path / "via")
    add_refused(service, ws, tmp_path / "via" / "good", "symbolic link", f"register its real path, {good}")
    add_refused(service, ws, f"{tmp_path}//good", f"register its real path, {good}")
    assert "x" not in [f["name"] for f in ws.client.ok("GET", "/v1/folders")["folders"]]


# ------------------------------------------------------------ names


BAD_NAMES = [b"bad\xff\xfe.csv", b"nl\nx.csv", b"esc\x1b[31mred.csv", "rlo\u202evsc.exe".encode(), b"del\x7f.csv"]


def test_names_that_are_not_text_are_left_out_and_refused(ws):
    d = ws.root / "names"
    d.mkdir()
    for n in BAD_NAMES + [b"n" * 255]:
        with open(os.path.join(os.fsencode(d), n), "wb") as f:
            f.write(b"x")
    try:
        # the control: the host holds every one of them as a file
        assert len(os.listdir(os.fsencode(d))) == len(BAD_NAMES) + 1
        assert listed(ws, "names") == ["n" * 255]
        assert box_listing(ws, "names") == ["names/" + "n" * 255]
        for n in BAD_NAMES[1:]:
            refused(ws.client, [{"folder": "lent", "paths": ["names/" + n.decode()]}],
                    "control or bidirectional-override")
        # a path of 4096 bytes (the host's PATH_MAX) is refused before anything is opened
        refused(ws.client, [{"folder": "lent", "paths": ["/".join(["n" * 255] * 16)]}], "longer than 1024 bytes")
    finally:
        shutil.rmtree(d)


# ------------------------------------------------------------ cost


@pytest.fixture
def fast_dir(tmp_path):
    """A directory on tmpfs when there is one (21,000 files take seconds on a loaded disk)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="fatk-", dir="/dev/shm") if os.path.isdir("/dev/shm") else str(tmp_path)
    yield type(tmp_path)(d)
    shutil.rmtree(d, ignore_errors=True)


def test_a_walk_reads_a_bounded_number_of_names(service, ws, fast_dir):
    root = fast_dir / "many"
    for k in range(3):
        (root / f"d{k}").mkdir(parents=True)
        for i in range(7000):
            os.close(os.open(root / f"d{k}" / f"f{i}.txt", os.O_CREAT | os.O_WRONLY, 0o644))
    service.admin("folder", "add", "--workspace", ws.workspace, "many", str(root), "--glob", "*.csv")
    try:
        # the control: the tree holds 21,000 names, each directory under the 10,000 a directory
        assert sum(len(f) for _, _, f in os.walk(root)) == 21000
        # two of its directories (14,000 names, no file the glob allows): walked, nothing taken
        status, _, run = ws.client.post_run("print(1)", folders=[{"folder": "many", "paths": ["d0", "d1"]}])
        assert status == 201 and run.get("imports", []) == [], run
        t0 = time.monotonic()
        refused(ws.client, [{"folder": "many", "paths": ["."]}], "20000 names in all")
        assert time.monotonic() - t0 < 5
    finally:
        service.admin("folder", "rm", "--workspace", ws.workspace, "many")


def test_a_sparse_file_of_a_terabyte_is_refused_unread(ws):
    big = ws.root / "sparse.bin"
    with open(big, "wb") as f:
        f.truncate(1 << 40)
    try:
        # the control: it says it holds a terabyte and holds no block
        assert big.stat().st_size == 1 << 40 and big.stat().st_blocks == 0
        refused(ws.client, [{"folder": "lent", "paths": ["sparse.bin"]}], "sparse.bin", "64 MiB")
    finally:
        big.unlink()


# ------------------------------------------------------------ races


def _exchange(a, b):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), 2) != 0:   # AT_FDCWD, RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), "renameat2")


def test_a_component_swapped_for_a_link_never_leaves_the_folder(ws):
    (ws.root / "d").mkdir()
    (ws.root / "d" / "f.txt").write_bytes(b"safe\n")
    (ws.outside / "f.txt").write_bytes(b"SECRET\n")
    os.symlink(ws.outside, ws.root / "swap")
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            _exchange(ws.root / "d", ws.root / "swap")

    t = threading.Thread(target=flip)
    t.start()
    try:
        # the control: the host reading d/f.txt by its path reads the secret now and then
        seen = set()
        for _ in range(20000):
            try:
                seen.add(open(ws.root / "d" / "f.txt", "rb").read())
            except OSError:
                pass
            if b"SECRET\n" in seen:
                break
        assert b"SECRET\n" in seen, seen
        got = []
        for _ in range(25):
            status, _, doc = ws.client.post_run("print(1)", folders=[{"folder": "lent", "paths": ["d/f.txt"]}])
            if status == 201:
                got.append(doc["imports"][0]["sha256"])
            else:
                assert status == 400 and ("symbolic link" in doc["error"]["message"]
                                          or "does not exist" in doc["error"]["message"]), doc
        assert sha(b"SECRET\n") not in got and set(got) <= {sha(b"safe\n")}, got
    finally:
        stop.set()
        t.join()
        shutil.rmtree(ws.root / "d") if not (ws.root / "d").is_symlink() else (ws.root / "d").unlink()
        shutil.rmtree(ws.root / "swap") if not (ws.root / "swap").is_symlink() else (ws.root / "swap").unlink()


# ------------------------------------------------------------ re-registered


def test_a_glob_narrowed_after_the_request_binds_the_waiting_run(service, ws, tmp_path):
    t = gov_tenant(service, "fatkappr")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    root = tmp_path / "g"
    root.mkdir()
    (root / "secret.txt").write_bytes(b"no longer lent\n")
    service.admin("folder", "add", "--workspace", t.workspace, "g", str(root))
    status, _, run = t.client.post_run("print(open('/work/documents/g/secret.txt').read())",
                                       folders=[{"folder": "g", "paths": ["secret.txt"]}])
    assert status == 201 and run["state"] == "pending_approval", run
    # the operator narrows what is lent: only *.csv from now on
    service.admin("folder", "rm", "--workspace", t.workspace, "g")
    service.admin("folder", "add", "--workspace", t.workspace, "g", str(root), "--glob", "*.csv")
    # the control: a new request for it is refused at once
    refused(t.client, [{"folder": "g", "paths": ["secret.txt"]}], "glob")
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = t.client.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "error" and done["error"]["code"] == "folder", done
    assert "secret.txt is not allowed by the folder's glob (*.csv) any more" in done["error"]["message"], done


def test_re_registered_elsewhere_or_retried_the_approved_bytes_hold(service, ws, tmp_path):
    """What held: the card binds bytes, not a path; a retry is the same run, not a second read."""
    t = gov_tenant(service, "fatkmove")
    put_settings(t.client, approval_policy="always", approval_ttl_s=600)
    _, approver = t.person_in("approver")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "r.txt").write_bytes(b"approved\n")
    (b / "r.txt").write_bytes(b"elsewhere\n")
    service.admin("folder", "add", "--workspace", t.workspace, "m", str(a))
    _, _, run = t.client.post_run("print(open('/work/documents/m/r.txt').read())",
                                  folders=[{"folder": "m", "paths": ["r.txt"]}])
    service.admin("folder", "rm", "--workspace", t.workspace, "m")
    service.admin("folder", "add", "--workspace", t.workspace, "m", str(b))
    approver.ok("POST", f"/v1/runs/{run['id']}/approve", json={"hash": run["approval"]["hash"]})
    done = t.client.wait_state(run["id"], {"succeeded", "failed", "error"})
    assert done["state"] == "error" and done["error"]["code"] == "folder_changed", done
    # an Idempotency-Key retry after the file changed: the same run, its pinned bytes
    body = {"language": "python", "code": "print(1)", "folders": [{"folder": "lent", "paths": ["ok.csv"]}]}
    key = {"Idempotency-Key": f"fatk-{time.monotonic_ns()}"}
    s1, _, r1 = ws.client.request("POST", "/v1/runs", json=body, headers=key)
    (ws.root / "ok.csv").write_bytes(b"changed\n")
    try:
        s2, _, r2 = ws.client.request("POST", "/v1/runs", json=body, headers=key)
        assert s1 == 201 and s2 in (200, 201) and r2["id"] == r1["id"], (s1, s2, r1, r2)
        assert r2["imports"] == r1["imports"] and r1["imports"][0]["sha256"] == sha(b"a,b\n"), r2
    finally:
        (ws.root / "ok.csv").write_bytes(b"a,b\n")


# ------------------------------------------------------------ tenants


def test_another_workspaces_folder_and_e2b_metadata(service, ws):
    other = gov_tenant(service, "fatkother")
    refused(other.client, [{"folder": "lent", "paths": ["ok.csv"]}], "no folder named lent", "GET /v1/folders")
    # a refusal says where to look, for an agent that guessed a name
    refused(ws.client, [{"folder": "lent", "paths": ["nope.csv"]}], "nope.csv does not exist",
            "GET /v1/folders/lent/entries")
    status, _, _ = other.client.get("/v1/folders/lent/entries")
    assert status == 404
    # E2B's metadata are strings: the array itself is refused saying what to send
    for md, words in [({"airlock_folders": [{"folder": "lent", "paths": ["ok.csv"]}]}, "JSON text"),
                      ({"airlock_folders": "[[[[[[[[]]]]]]]]"}, "folders[0] must be"),
                      ({"airlock_folders": "x" * 70000}, "longer than 65536 bytes")]:
        status, _, doc = ws.client.request("POST", "/sandboxes", json={"templateID": "base", "metadata": md},
                                           key=None, headers={"X-API-Key": ws.client.key})
        assert status == 400 and words in doc["message"], (md if len(str(md)) < 200 else "big", doc)


# ------------------------------------------------------------ a new agent


def test_an_mcp_agent_is_told_the_workspace_s_folders(service, ws):
    """An MCP client has no GET /v1/folders: code_execution's description names them."""
    def folders_doc(client):
        tools = Mcp(service, key=client.key).request("tools/list")[2]["result"]["tools"]
        ce = next(t for t in tools if t["name"] == "code_execution")
        return ce["inputSchema"]["properties"]["folders"]["description"]
    service.admin("folder", "add", "--workspace", ws.workspace, "reports", str(ws.outside), "--glob", "*.pdf")
    try:
        doc = folders_doc(ws.client)
        assert "This workspace's folders: lent, reports (only files matching *.pdf)." in doc, doc
        assert "This workspace has no connected folder." in folders_doc(gov_tenant(service, "fatknone").client)
    finally:
        service.admin("folder", "rm", "--workspace", ws.workspace, "reports")
