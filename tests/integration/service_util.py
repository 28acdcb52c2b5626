"""Fixtures and helpers for the service suite (test_service_*.py): a real
`airlock serve` on a free loopback port with its own state directory, driven
over HTTP with the standard library only.  See docs/api.md.
"""
import atexit
import base64
import copy
import glob
import http.client
import json as jsonlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from conftest import AIRLOCK
import pg_util

_BIN = None


def service_binary():
    """A private copy of the airlock binary, taken once per session: the service
    re-executes /proc/self/exe's path for its helper, so a rebuild of build/airlock
    while the suite runs would otherwise pair an old service with a new helper."""
    global _BIN
    if _BIN is None:
        d = Path(tempfile.mkdtemp(prefix="airlock-bin-"))
        _BIN = d / "airlock"
        shutil.copy2(AIRLOCK, _BIN)
        # `airlock serve` and `airlock admin` hand over to airlock-server beside it
        shutil.copy2(AIRLOCK.parent / "airlock-server", d / "airlock-server")
        atexit.register(shutil.rmtree, d, True)
    return _BIN

_HOOKS_BIN = None


def hooks_binary(build):
    """The same, from the test-hooks build (build-asan): for services whose
    runs must reach the network tests' hosts (net_util.py)."""
    global _HOOKS_BIN
    if _HOOKS_BIN is None:
        d = Path(tempfile.mkdtemp(prefix="airlock-hooks-bin-"))
        _HOOKS_BIN = d / "airlock"
        shutil.copy2(Path(build) / "airlock", _HOOKS_BIN)
        shutil.copy2(Path(build) / "airlock-server", d / "airlock-server")
        atexit.register(shutil.rmtree, d, True)
    return _HOOKS_BIN


BOX_UID_MIN = 1900000000

# what ASan, LeakSanitizer and UBSan print when they find something
SANITIZER_REPORT = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: |"
                              r"SUMMARY: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer)")
TERMINAL = {"succeeded", "failed", "timed_out", "killed", "canceled", "error"}
LIVE = {"queued", "provisioning", "running"}
STATES = TERMINAL | LIVE
ERROR_HTTP = {
    "unauthorized": 401, "not_found": 404, "bad_request": 400, "payload_too_large": 413,
    "queue_full": 429, "quota_exceeded": 507, "driver_disabled": 503,
    "method_not_allowed": 405, "conflict": 409,
}
RUN_FIELDS = {
    "id", "state", "language", "thread_id", "description", "created_at", "started_at",
    "finished_at", "limits", "network", "result", "error", "artifacts", "previews", "skipped",
}
RESULT_FIELDS = {
    "exit_code", "signal", "reason", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
    "wall_ms", "cpu_ms", "peak_memory_bytes", "controls",
}
ARTIFACT_FIELDS = {"id", "thread_id", "run_id", "path", "version", "size", "sha256", "content_type", "created_at"}
_DEFAULT = object()


def b64(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


# ------------------------------------------------------------ host state


# Service processes this pytest started (every start, killed ones included).
OUR_PIDS = set()
# Box cgroups that existed before any service of this session started (not
# ours), each as (path, inode): a box cgroup is named by its box's host uid,
# which a later box of ours may be given once that one has ended (another
# test run's, or another xdist worker's), and is then a new cgroup at the
# same path, which is ours.
_BASELINE_CGROUPS = None


def _status(pid):
    """(ppid, max uid, exe basename) of PID, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        ppid = int(fields["PPid"].split()[0])
        uid = max(int(u) for u in fields["Uid"].split())
    except (OSError, KeyError, ValueError):
        return None
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    return ppid, uid, exe


def _own_ancestors():
    out, pid = set(), os.getpid()
    while pid > 0:
        out.add(pid)
        st = _status(pid)
        if st is None:
            break
        pid = st[0]
    return out


def _foreign(pid):
    """A box process of someone else: another test run on this host (`airlock run`
    from another pytest).  Ours: its first ancestor that is neither a box process
    nor an airlock binary is one of our services, this pytest, one of our own
    ancestors, or init (an orphan: a box leaked by a killed service)."""
    own = _own_ancestors() | OUR_PIDS | {1}
    st = _status(pid)
    if os.environ.get("AIRLOCK_TEST_WARM_POOL", "0") != "0" and _idle_warm(pid):
        return True   # a running service's idle warm box: not a leftover
    seen = 0
    while st is not None and seen < 64:
        ppid = st[0]
        if ppid in own or ppid <= 1:
            return False
        pst = _status(ppid)
        if pst is None:
            return False
        if pst[1] >= BOX_UID_MIN or pst[2].startswith("airlock"):
            st = pst
            seen += 1
            continue
        return True
    return False


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


# a warm start's hand-off socket (src/box/box.h's AL_BOX_WARM_FD)
WARM_FD = 63


def _waiting_start(pid):
    """Whether PID is a warm start's interpreter (python3 main.py, node
    main.js) that still holds its socket at WARM_FD (its hand-off's, or a
    zygote's requests)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        chan = os.readlink(f"/proc/{pid}/fd/{WARM_FD}")
    except OSError:
        return False
    return cmd[:2] in ([b"/usr/bin/python3", b"main.py"], [b"/usr/bin/node", b"main.js"]) and chan.startswith("socket:")


def _idle_warm(pid):
    """Whether PID is of a warm box waiting for its run, under a live service:
    the box is its init and one interpreter of a warm start that still holds
    its hand-off socket at WARM_FD (it closes it once it has its run) and has
    started nothing; or of a zygote (its init and interpreter, under its
    helper) or a box it forked that is so waiting (beneath the zygote's
    interpreter: the box's PID 1 and its one interpreter)."""
    chain, init, seen = [pid], pid, 0
    while seen < 64:
        st = _status(init)
        if st is None:
            return False
        pst = _status(st[0])
        if pst is None or pst[1] < BOX_UID_MIN:
            break
        init, seen = st[0], seen + 1
        chain.append(init)
    helper = _status(init)
    if helper is None or _status(helper[0]) is None or _status(helper[0])[0] not in OUR_PIDS:
        return False
    kids = _children(init)
    if len(kids) != 1 or not _waiting_start(kids[0]):
        return False
    if not _children(kids[0]):
        return True
    # a zygote: itself, or one of its boxes that waits for its run
    if pid in (init, kids[0]):
        return True
    box = chain[-3] if len(chain) >= 3 else None   # the forked box's PID 1
    inner = _children(box) if box else []
    return len(inner) == 1 and not _children(inner[0]) and _waiting_start(inner[0])


def box_processes(mine_only=True):
    """Host processes whose real or effective uid is a box uid: [(pid, uid, cmdline)].
    MINE_ONLY leaves out boxes of other test runs on this host (see _foreign)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        st = _status(int(d))
        if st is None or st[1] < BOX_UID_MIN:
            continue
        if mine_only and _foreign(int(d)):
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "?"
        found.append((int(d), st[1], cmd.strip()))
    return found


def _all_box_cgroups():
    return sorted(glob.glob("/sys/fs/cgroup/*/airlock/box-*") + glob.glob("/sys/fs/cgroup/airlock/box-*"))


def _inode(path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def box_cgroups(mine_only=True):
    """Box cgroup directories, without those that predate our services or belong
    to another test run's live box (MINE_ONLY)."""
    cgs = _all_box_cgroups()
    if not mine_only:
        return cgs
    foreign_uids = {str(uid) for pid, uid, _ in box_processes(mine_only=False) if _foreign(pid)}
    base = set(_BASELINE_CGROUPS or ())
    cgs = [c for c in cgs if (c, _inode(c)) not in base]
    # (a forked box's is named box-UID-HELPER-N)
    return [c for c in cgs if c.rsplit("box-", 1)[-1].split("-")[0] not in foreign_uids]


def box_cgroups_of(uids):
    """The box cgroups of boxes with these host uids, each as (path, inode).
    A uid freed by a box's end is soon another box's (another xdist
    worker's), whose cgroup has the same path and another inode: a test that
    waits for a killed service's cgroups to go watches these exact ones."""
    names = {str(u) for u in uids}
    # (a forked box's is named box-UID-HELPER-N)
    return {(c, _inode(c)) for c in _all_box_cgroups() if c.rsplit("box-", 1)[-1].split("-")[0] in names}


def cgroups_left(seen):
    """Which of SEEN ((path, inode) pairs) are still there, as the same directory."""
    return sorted(c for c, ino in seen if ino is not None and _inode(c) == ino)


def wait_no_boxes(timeout=15.0):
    """Wait until none of our box processes and box cgroups is left; returns what is left."""
    deadline = time.monotonic() + timeout
    while True:
        procs, cgs = box_processes(), box_cgroups()
        if (not procs and not cgs) or time.monotonic() > deadline:
            return procs, cgs
        time.sleep(0.2)


def reap_boxes():
    """Kill our leftover box processes (by pid) and remove our leftover box
    cgroups, so that one failure does not spill into the next test."""
    for pid, _, _ in box_processes():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while box_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    for cg in sorted(box_cgroups(), key=len, reverse=True):
        try:
            os.rmdir(cg)
        except OSError:
            pass


def assert_no_boxes(timeout=15.0, what=""):
    procs, cgs = wait_no_boxes(timeout)
    if procs or cgs:
        reap_boxes()
    assert not procs, f"box processes left {what}: {procs}"
    assert not cgs, f"box cgroups left {what}: {cgs}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def parse_time(s):
    from datetime import datetime
    assert isinstance(s, str) and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", s), f"not RFC 3339: {s!r}"
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def assert_error(status, doc, code, http_status=None):
    """The JSON error shape of docs/api.md with CODE (and its HTTP status)."""
    want = http_status or ERROR_HTTP[code]
    assert status == want, f"want HTTP {want} {code}, got {status}: {doc!r}"
    assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), f"not the JSON error shape: {doc!r}"
    assert doc["error"].get("code") == code, f"want error code {code}: {doc!r}"
    assert isinstance(doc["error"].get("message"), str) and doc["error"]["message"], f"empty message: {doc!r}"


# ------------------------------------------------------------ the service


def store_sql(store, sqlite_db, query, params=()):
    """One statement straight on a service's database, behind its back: on
    STORE (a postgresql:// address), or else in the SQLite file SQLITE_DB;
    `?` placeholders on either backend. Its rows, as tuples, and how many
    rows it changed."""
    if store:
        import psycopg2
        db = psycopg2.connect(store)
        db.autocommit = True
        if params:
            # psycopg2's own placeholders; a literal % then must be doubled
            query = query.replace("%", "%%").replace("?", "%s")
    else:
        import sqlite3
        db = sqlite3.connect(str(sqlite_db), timeout=30)
    try:
        cur = db.cursor()
        # no parameters: the statement as it is (psycopg2 would read its % signs)
        cur.execute(query, params) if params else cur.execute(query)
        rows = cur.fetchall() if cur.description else []
        db.commit()
        return rows, cur.rowcount
    finally:
        db.close()


class Tenant:
    def __init__(self, svc, org, workspace, person, key):
        self.org, self.workspace, self.person, self.key = org, workspace, person, key
        self.client = svc.with_key(key)


class Service:
    """One `airlock serve` process and an HTTP client bound to one API key."""

    def __init__(self, state, config=None, key=None, bootstrap=True, extra_env=None, binary=None, store=None):
        self.binary = binary or service_binary()
        self.state = Path(state)
        self.state.mkdir(parents=True, exist_ok=True)
        # the store this service runs on: the suite's (AIRLOCK_TEST_STORE), a
        # fresh database of its own on the test cluster for postgresql; or
        # STORE given (a postgresql:// address several nodes share)
        self.store = store
        if self.store is None and pg_util.test_store() == "postgresql":
            self.store = pg_util.cluster().uri(pg_util.cluster().new_database())
        # the driver its runs take: the suite's (AIRLOCK_TEST_DRIVER=docker
        # runs them in containers of the test dockerd, on the default
        # image, with AIRLOCK_TEST_RUNTIME's runtime), unless the test's
        # config names one
        if os.environ.get("AIRLOCK_TEST_DRIVER") == "kubernetes" and "driver" not in (config or {}):
            import kube_pass
            from image_util import CACHE
            config = dict(config or {}, **kube_pass.service_config())
            if not (self.state / "images").exists():
                (self.state / "images").symlink_to(CACHE / "images")
        if os.environ.get("AIRLOCK_TEST_DRIVER") == "docker" and "driver" not in (config or {}):
            import docker_util
            from image_util import CACHE, ensure_default_image
            docker_util.start()
            ensure_default_image()
            config = dict(config or {}, driver="docker", docker_socket=str(docker_util.SOCKET),
                          runtime=os.environ.get("AIRLOCK_TEST_RUNTIME", "runc"))
            if not (self.state / "images").exists():
                (self.state / "images").symlink_to(CACHE / "images")
        # warm Python and Node boxes: on in the product (sized by demand); the suite's
        # services keep none unless the test asks (test_warm_pool) or
        # AIRLOCK_TEST_WARM_POOL=N gives every service N, because its checks
        # that no box is left read every box on the host, idle warm ones
        # of the services still running included
        if "warm_pool" not in (config or {}):
            config = dict(config or {}, warm_pool=os.environ.get("AIRLOCK_TEST_WARM_POOL", "0"))
        # a stop drains for stop_grace_s (30 s in the product): the suite's
        # services end their runs at once unless the test asks
        # (test_battery_o_service.py), so that stop() within its timeout
        # stops them as before
        if "stop_grace_s" not in (config or {}):
            config = dict(config or {}, stop_grace_s="0")
        self.config = config
        self.extra_env = extra_env or {}
        self.port = free_port()
        self.host = "127.0.0.1"
        self.base_url = f"http://{self.host}:{self.port}"
        self.log_path = self.state / "serve.log"
        self.proc = None
        self.key = key
        self.starts = 0
        if bootstrap and key is None:
            out = self.admin("bootstrap")
            m = re.search(r"\b(al_[A-Za-z0-9_\-]+)", out)
            assert m, f"`airlock admin bootstrap` printed no al_ key: {out!r}"
            self.key = m.group(1)

    # -------------------------------------------------------- process

    def store_args(self):
        """`--state DIR` and, on PostgreSQL, `--store ADDRESS`: where this service keeps its store."""
        return ["--state", str(self.state)] + (["--store", self.store] if self.store else [])

    def admin_run(self, *args, timeout=60, **kw):
        """`airlock admin` on this service's store: the CompletedProcess."""
        return subprocess.run([str(self.binary), "admin", *self.store_args(), *map(str, args)],
                              capture_output=True, timeout=timeout, **kw)

    def store_db(self):
        """The name of this service's database on the test cluster (PostgreSQL only)."""
        assert self.store, "the service runs on SQLite: no database on the cluster"
        return self.store.split("/")[3].split("?")[0]

    def sql(self, query, *params):
        """One statement straight on the service's database, behind its back
        (`?` placeholders on either backend): the rows, as tuples."""
        return self._sql(query, params)[0]

    def sql_count(self, query, *params):
        """The same, for a write: how many rows it changed."""
        return self._sql(query, params)[1]

    def _sql(self, query, params):
        return store_sql(self.store, self.state / "airlock.db", query, params)

    # The store's engine-specific tricks the tests play behind the service's
    # back, written for each backend: the same failure, the same row.

    def fail_inserts(self, table, name, when=None, message="injected"):
        """Make the store refuse INSERTs into TABLE (only of the rows for which
        WHEN, a condition on NEW, holds) with MESSAGE, as a broken table or a
        full disk would: a trigger called NAME, until drop_trigger(NAME).
        SQLite: a BEFORE INSERT trigger that RAISE(ABORT)s; PostgreSQL: a
        function NAME() that RAISEs EXCEPTION and a BEFORE INSERT ... FOR EACH
        ROW trigger that calls it."""
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name) and re.fullmatch(r"[a-z_][a-z0-9_]*", table), (name, table)
        msg = message.replace("'", "''")
        if self.store:
            self.sql(f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
                     f"$fail$ BEGIN RAISE EXCEPTION '{msg.replace('%', '%%')}'; END $fail$")
            self.sql(f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW "
                     f"{f'WHEN ({when}) ' if when else ''}EXECUTE FUNCTION {name}()")
        else:
            self.sql(f"CREATE TRIGGER {name} BEFORE INSERT ON {table} {f'WHEN {when} ' if when else ''}"
                     f"BEGIN SELECT RAISE(ABORT, '{msg}'); END")

    def drop_trigger(self, name):
        """Undo fail_inserts(..., NAME): the store takes those INSERTs again."""
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name), name
        if self.store:
            self.sql(f"DROP FUNCTION {name}() CASCADE")   # and the trigger that calls it
        else:
            self.sql(f"DROP TRIGGER {name}")

    def columns(self, table):
        """The column names of TABLE in the store, in order ([] when there is no such table)."""
        if self.store:
            return [r[0] for r in self.sql("SELECT column_name FROM information_schema.columns "
                                           "WHERE table_schema = current_schema() AND table_name = ? "
                                           "ORDER BY ordinal_position", table)]
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", table), table
        return [r[1] for r in self.sql(f"PRAGMA table_info({table})")]

    def stored_bytes(self):
        """Everything this service stores, for a test that asserts something is
        stored nowhere: (where, bytes) of every file under its state directory
        (the SQLite store's among them); each table's rows as text, on either
        backend (a value too long for one page is split across SQLite's
        overflow pages, and compressed out of line by PostgreSQL's TOAST); and
        on PostgreSQL, after a CHECKPOINT, the database's files on the cluster
        (rows deleted or overwritten but not yet vacuumed away included)."""
        for root, _, files in os.walk(self.state):
            for f in files:
                p = os.path.join(root, f)
                try:
                    with open(p, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                yield p, data
        if self.store:
            tables = [r[0] for r in self.sql("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")]
        else:
            tables = [r[0] for r in self.sql("SELECT name FROM sqlite_master WHERE type = 'table'")]
        def text(v):
            return bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode()

        for t in tables:
            rows = self.sql(f'SELECT * FROM "{t}"')
            yield f"store table {t}", b"\n".join(b"|".join(text(v) for v in r) for r in rows)
        if not self.store:
            return
        [(oid,)] = self.sql("SELECT oid FROM pg_database WHERE datname = current_database()")
        self.sql("CHECKPOINT")
        for root, _, files in os.walk(pg_util.cluster().data / "base" / str(oid)):
            for f in files:
                p = os.path.join(root, f)
                try:
                    with open(p, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                yield p, data

    def write_untyped(self, table, column, text, where, *params):
        """Store TEXT in TABLE.COLUMN of the rows WHERE (a condition, `?`
        PARAMS) whatever the column's declared type: a value that is not
        what the column should hold. SQLite keeps text in an INTEGER column
        as it is; PostgreSQL refuses it, so there the column becomes TEXT
        first. Returns how many rows changed."""
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", table) and re.fullmatch(r"[a-z_][a-z0-9_]*", column)
        if self.store:
            self.sql(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE TEXT")
        return self.sql_count(f"UPDATE {table} SET {column} = ? WHERE {where}", text, *params)

    def admin(self, *args, check=True):
        proc = self.admin_run(*args)
        out = proc.stdout.decode(errors="replace")
        if check:
            assert proc.returncode == 0, (
                f"airlock admin {args} exited {proc.returncode}: stdout={out!r} "
                f"stderr={proc.stderr.decode(errors='replace')!r}")
        return out

    def admin_id(self, *args):
        out = self.admin(*args).split()
        assert out, f"airlock admin {args} printed nothing"
        return out[-1]

    def new_tenant(self, name):
        """A second organisation with its own workspace, person and key."""
        org = self.admin_id("org", "create", name)
        ws = self.admin_id("workspace", "create", "--org", org, name + "-ws")
        person, key = self.new_person(ws, name + "-person")
        return Tenant(self, org, ws, person, key)

    def new_person(self, workspace, name):
        person = self.admin_id("person", "create", "--workspace", workspace, name)
        out = self.admin("key", "create", "--person", person)
        m = re.search(r"\b(al_[A-Za-z0-9_\-]+)", out)
        assert m, f"`airlock admin key create` printed no al_ key: {out!r}"
        return person, m.group(1)

    def start(self, timeout=30.0):
        args = [str(self.binary), "serve", "--listen", f"{self.host}:{self.port}", *self.store_args()]
        if self.config is not None:
            cfg = self.state.parent / f"{self.state.name}.conf"
            # (a key set to None is left to the product's default)
            cfg.write_text("".join(f"{k} = {v}\n" for k, v in self.config.items() if v is not None))
            args += ["--config", str(cfg)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
        env.update(self.extra_env)
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== start {self.starts}: {' '.join(args)}\n".encode())
        log.flush()
        global _BASELINE_CGROUPS
        if _BASELINE_CGROUPS is None:
            _BASELINE_CGROUPS = {(c, _inode(c)) for c in _all_box_cgroups()}
        self.log_start = self.log_path.stat().st_size
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        OUR_PIDS.add(self.proc.pid)
        log.close()
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"airlock serve exited {self.proc.returncode} at start\n{self.log_tail()}")
            try:
                status, _, doc = self.request("GET", "/healthz", key=None, timeout=2)
                if status == 200:
                    return self
                last = (status, doc)
            except (OSError, http.client.HTTPException) as e:
                last = e
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"airlock serve did not answer /healthz in {timeout}s (last: {last!r})\n{self.log_tail()}")

    def stop(self, timeout=20.0):
        """SIGTERM, then SIGKILL; returns the exit status. Under a sanitizer
        build any report in this start's log fails the caller."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                self.check_sanitizers()
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            status = "SIGKILL"
        self.check_sanitizers()
        return status

    def helpers(self):
        """The pids of this service's run helpers (`airlock helper`) now,
        not the docker pool's keepers (helpers named airlock-keeper)."""
        out = []
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and ppid(int(d)) == self.proc.pid and \
                        b"helper" in open(f"/proc/{d}/cmdline", "rb").read() and \
                        open(f"/proc/{d}/comm", "rb").read().strip() != b"airlock-keeper":
                    out.append(int(d))
            except OSError:
                pass  # it ended meanwhile
        return out

    def kill9(self):
        self.proc.kill()
        self.proc.wait(10)
        self.check_sanitizers()

    def check_sanitizers(self):
        """ASan, LeakSanitizer and UBSan reports of the service and of its
        helpers (their stderr is this log) since the last start. Checked
        once per start."""
        start = getattr(self, "log_start", None)
        if start is None:
            return
        self.log_start = None
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
        except OSError:
            return
        m = SANITIZER_REPORT.search(text)
        if m:
            at = max(0, m.start() - 200)
            raise AssertionError(f"a sanitizer report in {self.log_path}:\n{text[at:at + 6000]}")

    def log_tail(self, lines=80):
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return f"----- {self.log_path} (last {lines} lines)\n" + "\n".join(text[-lines:])

    def with_key(self, key):
        other = copy.copy(self)
        other.key = key
        return other

    # -------------------------------------------------------- HTTP

    def _headers(self, key, headers):
        h = {"Host": f"{self.host}:{self.port}"}
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        return h

    def request(self, method, path, json=None, key=_DEFAULT, body=None, headers=None, timeout=90, query=None):
        """One request; returns (status, headers as a lowercase dict, parsed JSON or bytes)."""
        if key is _DEFAULT:
            key = self.key
        if query:
            path = path + ("&" if "?" in path else "?") + urlencode(query)
        h = self._headers(key, headers)
        if json is not None:
            body = jsonlib.dumps(json).encode()
            h.setdefault("Content-Type", "application/json")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            status = resp.status
        finally:
            conn.close()
        ctype = hdrs.get("content-type", "")
        if "json" in ctype:
            try:
                return status, hdrs, jsonlib.loads(raw)
            except ValueError:
                pass
        return status, hdrs, raw

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def ok(self, method, path, want=200, **kw):
        status, _, doc = self.request(method, path, **kw)
        assert status == want, f"{method} {path}: want {want}, got {status}: {doc!r}"
        return doc

    def post_run(self, code, language="python", wait=False, timeout_s=None, key=_DEFAULT, **fields):
        body = {"language": language, "code": code, **fields}
        query = {}
        if wait:
            query["wait"] = "true"
        if timeout_s is not None:
            query["timeout_s"] = str(timeout_s)
        return self.request("POST", "/v1/runs", json=body, key=key, query=query, timeout=300)

    def run(self, code, language="python", wait=True, key=_DEFAULT, **fields):
        """POST /v1/runs (?wait=true by default); returns the run object."""
        status, _, doc = self.post_run(code, language, wait=wait, key=key, **fields)
        want = 200 if wait else 201
        assert status == want, f"POST /v1/runs{'?wait=true' if wait else ''}: want {want}, got {status}: {doc!r}"
        assert isinstance(doc, dict) and str(doc.get("id", "")).startswith("run_"), doc
        if wait:
            assert doc["state"] in TERMINAL, f"?wait=true answered a run that has not ended: {doc!r}"
        return doc

    def get_run(self, run_id, key=_DEFAULT):
        return self.ok("GET", f"/v1/runs/{run_id}", key=key)

    def wait_state(self, run_id, states, timeout=60.0, key=_DEFAULT):
        """Poll GET /v1/runs/{id} until its state is one of STATES; returns the run."""
        states = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        while True:
            run = self.get_run(run_id, key=key)
            if run["state"] in states:
                return run
            assert time.monotonic() < deadline, f"run {run_id} never reached {states}: {run!r}"
            time.sleep(0.05)

    def cancel(self, run_id, key=_DEFAULT):
        return self.request("POST", f"/v1/runs/{run_id}/cancel", key=key)

    def content(self, art_id, key=_DEFAULT):
        status, hdrs, raw = self.request("GET", f"/v1/artifacts/{art_id}/content", key=key)
        assert status == 200, f"GET /v1/artifacts/{art_id}/content: {status} {raw!r}"
        if not isinstance(raw, (bytes, bytearray)):   # a JSON artifact got parsed: take the bytes again
            raw = jsonlib.dumps(raw).encode()
        return hdrs, raw

    def content_bytes(self, art_id, key=_DEFAULT):
        """The exact bytes of an artifact (never parsed)."""
        if key is _DEFAULT:
            key = self.key
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("GET", f"/v1/artifacts/{art_id}/content", headers=self._headers(key, None))
            resp = conn.getresponse()
            raw = resp.read()
            assert resp.status == 200, f"GET /v1/artifacts/{art_id}/content: {resp.status} {raw[:500]!r}"
            return {k.lower(): v for k, v in resp.getheaders()}, raw
        finally:
            conn.close()

    def list_runs(self, key=_DEFAULT, limit=200, **filters):
        """Every run of GET /v1/runs, following next_cursor; returns the list (with duplicates)."""
        out, cursor, pages = [], None, 0
        while True:
            q = {"limit": str(limit), **filters}
            if cursor:
                q["cursor"] = cursor
            doc = self.ok("GET", "/v1/runs", key=key, query=q)
            assert set(doc) >= {"runs", "next_cursor"}, doc
            assert len(doc["runs"]) <= limit
            out.extend(doc["runs"])
            cursor = doc["next_cursor"]
            pages += 1
            assert pages < 10000
            if not cursor:
                return out

    # -------------------------------------------------------- SSE

    def stream(self, run_id, last_event_id=None, key=_DEFAULT, timeout=120):
        """Yield (id, event, data, monotonic time received) from /v1/runs/{id}/events until it ends."""
        if key is _DEFAULT:
            key = self.key
        h = self._headers(key, {"Accept": "text/event-stream"})
        if last_event_id is not None:
            h["Last-Event-ID"] = str(last_event_id)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", f"/v1/runs/{run_id}/events", headers=h)
            resp = conn.getresponse()
            if resp.status != 200:
                raise AssertionError(f"GET /v1/runs/{run_id}/events: {resp.status} {resp.read()[:1000]!r}")
            ctype = resp.getheader("Content-Type", "")
            assert ctype.startswith("text/event-stream"), f"events Content-Type {ctype!r}"
            ev_id, ev_type, data = None, "message", []
            while True:
                line = resp.readline()
                if not line:
                    if data:
                        raise AssertionError(f"stream ended inside an event: {ev_id} {ev_type} {data}")
                    return
                line = line.decode("utf-8").rstrip("\n").rstrip("\r")
                if line == "":
                    if data or ev_id is not None:
                        text = "\n".join(data)
                        try:
                            parsed = jsonlib.loads(text)
                        except ValueError as e:
                            raise AssertionError(f"event {ev_id} {ev_type}: data not JSON: {text[:500]!r}") from e
                        yield (int(ev_id) if ev_id is not None else None), ev_type, parsed, time.monotonic()
                    ev_id, ev_type, data = None, "message", []
                    continue
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "id":
                    ev_id = value
                elif field == "event":
                    ev_type = value
                elif field == "data":
                    data.append(value)
        finally:
            conn.close()

    def events(self, run_id, last_event_id=None, key=_DEFAULT, timeout=120):
        """Every event of the run's stream until it ends: [(id, event, data)]."""
        return [(i, e, d) for i, e, d, _ in self.stream(run_id, last_event_id, key=key, timeout=timeout)]


def ppid(pid):
    """PID's parent, or None once it is gone."""
    st = _status(pid)
    return st[0] if st else None


def image_service(state, config=None, **kw):
    """A started Service whose state links the tests' image cache (its runs
    may name the default image), CONFIG's values written as strings."""
    from image_util import CACHE
    state = Path(state)
    state.mkdir(parents=True, exist_ok=True)
    if not (state / "images").exists():
        (state / "images").symlink_to(CACHE / "images")
    svc = Service(state, config={k: None if v is None else str(v) for k, v in (config or {}).items()}, **kw)
    svc.start()
    return svc


def stop_checked(*svcs):
    """Stop SVCS and assert that no box of ours is left."""
    for s in svcs:
        s.stop()
    procs, cgs = wait_no_boxes(15)
    if procs or cgs:
        reap_boxes()
    assert not procs and not cgs, (procs, cgs)


def start_service(tmp_root, name, config=None, **kw):
    state = Path(tmp_root) / name
    svc = Service(state, config=config, **kw)
    return svc.start()


def shutdown(svc, check_boxes=True):
    """Stop the service and assert that it left no box behind."""
    svc.stop()
    if check_boxes:
        procs, cgs = wait_no_boxes(15)
        if procs or cgs:
            sys.__stderr__.write(svc.log_tail() + "\n")
            reap_boxes()
        assert not procs, f"box processes left after the service stopped: {procs}"
        assert not cgs, f"box cgroups left after the service stopped: {cgs}"


class ServiceSet:
    """A temp root for services a module starts itself; stops them all at teardown."""

    def __init__(self, request):
        self.root = Path(tempfile.mkdtemp(prefix="airlock-svc-"))
        self.request = request
        self.services = []
        self.failed_before = request.session.testsfailed
        self.closed = False
        # stopped at the end of the request's scope even where its maker
        # forgets to close it: a service left running keeps its warm boxes,
        # which every later test then finds left over
        request.addfinalizer(self.close)

    def start(self, name, config=None, **kw):
        svc = start_service(self.root, name, config, **kw)
        self.services.append(svc)
        return svc

    def close(self):
        if self.closed:
            return
        self.closed = True
        failed = self.request.session.testsfailed > self.failed_before
        for svc in self.services:
            svc.stop()
        if failed:
            for svc in self.services:
                sys.__stderr__.write("\n" + svc.log_tail(120) + "\n")
            sys.__stderr__.write(f"(service state kept in {self.root})\n")
        procs, cgs = wait_no_boxes(15)
        if procs or cgs:
            reap_boxes()
        if not failed and not procs and not cgs:
            shutil.rmtree(self.root, ignore_errors=True)
        assert not procs, f"box processes left after the services stopped: {procs}"
        assert not cgs, f"box cgroups left after the services stopped: {cgs}"


# The main service: generous global cap so that the per-person cap (default 3) is what bites.
MAIN_CONFIG = {"max_concurrent": 8}


@pytest.fixture(scope="module")
def service(request):
    """The module's service (bootstrap tenant's key); stopped at the end of the module.

    Module scope (not session) because a fixture imported into several test
    modules from here would be instantiated once per module anyway."""
    ss = ServiceSet(request)
    svc = ss.start("main", MAIN_CONFIG)
    yield svc
    ss.close()


@pytest.fixture
def services(request):
    """Start extra services in a test: services.start(name, config) -> Service."""
    ss = ServiceSet(request)
    yield ss
    ss.close()


@pytest.fixture
def fresh(service):
    """A client of the shared service with a tenant of its own (new org, workspace, person, key)."""
    t = service.new_tenant(f"t{time.monotonic_ns() % 10**12}")
    return t.client


# ------------------------------------------------------------ governance (docs/api.md "Governance")
# Helpers for test_governance_*.py: roles, per-workspace settings, approvals,
# credits, the audit trail, DLP and the tool allow-list.

GOV_TERMINAL = TERMINAL | {"denied"}
ROLES = ("admin", "approver", "member")
AUDIT_FIELDS = {"seq", "kind", "person_id", "run_id", "data", "created_at", "prev_hash", "hash"}
LEDGER_FIELDS = {"id", "kind", "amount", "run_id", "balance_after", "created_at"}
CARD_FIELDS = {"id", "code", "language", "runtime", "network", "limits", "risk", "description", "hash",
               "requested_at", "expires_at"}
SETTINGS_KEYS = {"driver", "network", "network_allowed", "timeout_s", "max_timeout_s", "memory_mb", "cpus", "concurrency",
                 "approval_policy", "approval_ttl_s", "price_per_run", "tools", "dlp_patterns", "secrets",
                 "run_retention_s", "sandbox_max_timeout_s", "e2b_session_box"}


def _one_id(out, prefix, what):
    m = re.findall(rf"\b({prefix}_[A-Za-z0-9]+)", out)
    assert m, f"{what} printed no {prefix}_ id: {out!r}"
    return m[-1]


def new_role_person(svc, workspace, name, role=None):
    """`airlock admin person create --workspace WS NAME [--role ROLE]` and a key for it:
    (person id, client bound to its key)."""
    args = ["person", "create", "--workspace", workspace, name]
    if role is not None:
        args += ["--role", role]
    person = _one_id(svc.admin(*args), "per", f"airlock admin {' '.join(args)}")
    out = svc.admin("key", "create", "--person", person)
    m = re.search(r"\b(al_[A-Za-z0-9_\-]+)", out)
    assert m, f"`airlock admin key create` printed no al_ key: {out!r}"
    return person, svc.with_key(m.group(1))


class GovTenant:
    """An organisation of its own with a workspace and an admin person (`client`);
    `person(role)` adds people, `workspace2()` another workspace of the same organisation."""

    def __init__(self, svc, name):
        self.svc, self.name = svc, name
        self.org = _one_id(svc.admin("org", "create", name), "org", "airlock admin org create")
        self.workspace = self.add_workspace(name + "-ws")
        self.person, self.client = new_role_person(svc, self.workspace, name + "-admin", "admin")
        self.key = self.client.key

    def add_workspace(self, wsname):
        return _one_id(self.svc.admin("workspace", "create", "--org", self.org, wsname), "ws",
                       "airlock admin workspace create")

    def person_in(self, role, workspace=None, name=None):
        """(person id, client) of a new person with ROLE in this tenant's (or WORKSPACE's) workspace."""
        name = name or f"{self.name}-{role}-{time.monotonic_ns() % 10**9}"
        return new_role_person(self.svc, workspace or self.workspace, name, role)


def gov_tenant(svc, prefix="gov"):
    return GovTenant(svc, f"{prefix}{time.monotonic_ns() % 10**12}")


def get_settings(client):
    return client.ok("GET", "/v1/settings")


def put_settings(client, want=200, **fields):
    """PUT /v1/settings with FIELDS; returns the answer (asserting its status is WANT)."""
    status, _, doc = client.request("PUT", "/v1/settings", json=fields, timeout=30)
    assert status == want, f"PUT /v1/settings {fields!r}: want {want}, got {status}: {doc!r}"
    return doc


def set_price(svc, workspace, amount):
    """A workspace's price per run is the operator's: `airlock admin price set`."""
    svc.admin("price", "set", "--workspace", workspace, str(amount))


def audit_events(client, limit=None, **filters):
    """Every event of GET /v1/audit (following next_cursor), oldest first by seq."""
    out, cursor, pages = [], None, 0
    while True:
        q = {k: str(v) for k, v in filters.items()}
        if limit is not None:
            q["limit"] = str(limit)
        if cursor:
            q["cursor"] = cursor
        doc = client.ok("GET", "/v1/audit", query=q)
        assert isinstance(doc, dict) and isinstance(doc.get("events"), list) and "next_cursor" in doc, doc
        out.extend(doc["events"])
        cursor = doc["next_cursor"]
        pages += 1
        assert pages < 5000, "GET /v1/audit pages never end"
        if not cursor:
            break
    return sorted(out, key=lambda e: e["seq"])


def usage(client, **query):
    doc = client.ok("GET", "/v1/usage", query={k: str(v) for k, v in query.items()} or None)
    assert isinstance(doc, dict) and {"balance", "ledger", "runs"} <= set(doc), f"GET /v1/usage shape: {doc!r}"
    return doc


def balance(client):
    return usage(client)["balance"]


def ledger_by_run(entries):
    """{run_id: {"charge": [amounts], "refund": [amounts]}} of ledger ENTRIES (amounts as positive numbers)."""
    out = {}
    for e in entries:
        if e.get("run_id") and e["kind"] in ("charge", "refund"):
            out.setdefault(e["run_id"], {"charge": [], "refund": []})[e["kind"]].append(abs(e["amount"]))
    return out


def wait_gov_state(client, run_id, states, timeout=60.0):
    """Like Service.wait_state, for the governance states too (pending_approval, denied)."""
    return client.wait_state(run_id, states, timeout=timeout)


def walk_json(doc):
    """Every dict inside DOC (DOC included)."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield x
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
