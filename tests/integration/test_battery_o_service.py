"""Battery group O1 (issue 33): a service owns its state and its port, the
CLI says what it did not do, and a stop drains and never charges what
airlock itself ended. Each case shows its ingredient working (a second
service really can start, two services really can share a port when asked,
a run really is ended by the stop) and then what airlock does about it."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

import pg_util
from conftest import AIRLOCK
from service_util import TERMINAL, Service, free_port, services  # noqa: F401  (fixture)


def _serve(state, port, *extra, store=None, env=None):
    args = [str(AIRLOCK), "serve", "--listen", f"127.0.0.1:{port}", "--state", str(state),
            "--stop_grace_s", "0", "--warm_pool", "0", *extra]
    if store:
        args += ["--store", store]
    e = {k: v for k, v in os.environ.items() if not k.startswith("AIRLOCK_")}
    e.update(env or {})
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=e)


def _healthy(port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                c.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                if c.recv(64).startswith(b"HTTP/1."):
                    return True
        except OSError:
            time.sleep(0.1)
    return False


def _stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.stdout.read().decode(errors="replace")


def _admin(state, *args, store=None):
    pre = ["--state", str(state)] + (["--store", store] if store else [])
    return subprocess.run([str(AIRLOCK), "admin", *pre, *map(str, args)], capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


# ------------------------------------------------------ one service per state

def test_a_second_service_on_one_state_is_refused_and_the_first_goes_on(tmp_path):
    state = tmp_path / "st"
    assert _admin(state, "bootstrap").returncode == 0
    p1, p2 = free_port(), free_port()
    first = _serve(state, p1)
    try:
        assert _healthy(p1), "the first service did not start"
        second = _serve(state, p2)
        try:
            rc = second.wait(20)
        except subprocess.TimeoutExpired:
            second.kill()
            pytest.fail("a second service on the same state directory started: " + _stop(second)[-2000:])
        out = second.stdout.read().decode(errors="replace")
        assert rc == 125, out
        assert f"already served by pid {first.pid}" in out, out
        # the first one was not fenced: it still serves, minutes of leases later
        time.sleep(2.5)
        assert first.poll() is None, "the first service stopped: " + _stop(first)[-2000:]
        assert _healthy(p1, 5)
    finally:
        log = _stop(first)
    assert "node.fenced" not in log, log[-2000:]
    # the lock goes with its holder: a start after the first stopped is fine
    again = _serve(state, p2)
    try:
        assert _healthy(p2), "a service could not start after the one before it stopped"
        time.sleep(0.5)
        assert again.poll() is None
    finally:
        _stop(again)


def test_a_killed_service_leaves_no_lock(tmp_path):
    state = tmp_path / "st"
    assert _admin(state, "bootstrap").returncode == 0
    port = free_port()
    first = _serve(state, port)
    assert _healthy(port)
    first.kill()
    first.wait(10)
    again = _serve(state, port)
    try:
        assert _healthy(port)
        time.sleep(0.5)
        assert again.poll() is None, _stop(again)[-2000:]
    finally:
        _stop(again)


# ------------------------------------------------------ one service per port

def _connect_status(port, key):
    """GET /v1/settings with KEY on a fresh connection: its status."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(f"GET /v1/settings HTTP/1.0\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
        head = c.recv(64)
    return int(head.split()[1])


def _key(state):
    out = _admin(state, "bootstrap").stdout.decode()
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("api key: "))


@pytest.mark.parametrize("shared", [True, False], ids=["listen_shared", "default"])
def test_a_port_is_one_service_s_unless_the_operator_shares_it(tmp_path, shared):
    a, b = tmp_path / "a", tmp_path / "b"
    key_a = _key(a)
    _key(b)
    port = free_port()
    extra = ["--listen_shared", "true"] if shared else []
    first = _serve(a, port, *extra)
    second = None
    try:
        assert _healthy(port)
        second = _serve(b, port, *extra)
        if shared:
            # the ingredient: with SO_REUSEPORT both listen, and the kernel
            # hands some of the first one's clients to the second, whose
            # store has never heard of their key
            assert _healthy(port)
            time.sleep(1)
            assert second.poll() is None, _stop(second)[-2000:]
            codes = [_connect_status(port, key_a) for _ in range(24)]
            assert 401 in codes and 200 in codes, codes
        else:
            rc = second.wait(20)
            out = second.stdout.read().decode(errors="replace")
            assert rc == 125, out
            assert f"cannot listen on 127.0.0.1:{port}: another program listens there" in out, out
            assert all(_connect_status(port, key_a) == 200 for _ in range(12))
    finally:
        _stop(first)
        if second is not None:
            _stop(second)


# ------------------------------------------------------ admin on a store that is not there

@pytest.mark.parametrize("cmd", [["list"], ["audit", "verify"], ["credits", "show", "--org", "org_x"],
                                 ["key", "revoke", "key_x"]])
def test_admin_on_a_wrong_state_says_so_and_creates_nothing(tmp_path, cmd):
    wrong = tmp_path / "typo"
    p = _admin(wrong, *cmd)
    err = p.stderr.decode()
    assert p.returncode == 125, (p.returncode, p.stdout, err)
    assert f"no airlock store at {wrong}/airlock.db" in err, err
    assert not wrong.exists(), "a store was created by a command that only reads"
    assert b"no audit events yet" not in p.stdout and b"intact" not in p.stdout
    # bootstrap, and only it, makes one
    assert _admin(wrong, "bootstrap").returncode == 0
    assert _admin(wrong, "list").returncode == 0


def test_admin_on_an_empty_postgresql_database_says_so_and_creates_nothing():
    pg = pg_util.cluster()
    db = pg.new_database()
    uri = pg.uri(db)
    p = _admin("/nonexistent-state", "audit", "verify", store=uri)
    assert p.returncode == 125, (p.stdout, p.stderr)
    assert b"no airlock store in that database" in p.stderr, p.stderr
    tables = pg.psql(db, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
    assert tables.strip() == "0", tables
    assert _admin("/nonexistent-state", "bootstrap", store=uri).returncode == 0
    assert _admin("/nonexistent-state", "audit", "verify", store=uri).returncode == 0


# ------------------------------------------------------ options are not silently ignored

@pytest.mark.parametrize("args, said", [
    (["admin", "--state", "{s}", "list", "--state", "/elsewhere"], "--state goes before the command"),
    (["admin", "--state", "{s}", "list", "--bogus"], 'unexpected argument "--bogus"'),
    (["admin", "--state", "{s}", "org", "create", "x", "y"], 'unexpected argument "y"'),
    (["admin", "--state", "{s}", "person", "create", "--workspace", "w", "n", "--rolex"], 'unexpected argument'),
    (["image", "ls", "--state", "{s}"], "--state goes before the command"),
    (["image", "ls", "--bogus"], 'unexpected arguments from "--bogus"'),
    (["image", "verify", "a", "b"], 'unexpected arguments from "a"'),
    (["version", "extra"], "version takes no arguments"),
    (["serve", "--state", "{s}", "--bogus", "1"], 'unknown setting "bogus"'),
])
def test_unknown_and_misplaced_options_are_refused(tmp_path, args, said):
    state = tmp_path / "st"
    assert _admin(state, "bootstrap").returncode == 0
    args = [a.replace("{s}", str(state)) for a in args]
    p = subprocess.run([str(AIRLOCK), *args], capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
                       env=dict(os.environ, AIRLOCK_IMAGES=str(tmp_path / "images")))
    assert p.returncode == 125, (args, p.returncode, p.stdout[-500:], p.stderr[-500:])
    assert said in p.stderr.decode(), p.stderr.decode()


# ------------------------------------------------------ images: their own directory, named in every hint

def test_images_have_their_own_directory_and_hints_name_it(tmp_path, services):
    images = tmp_path / "imgs"
    # the run names an image this service's directory lacks: the hint names
    # the directory searched (before: "airlock image ls", which read another)
    svc = services.start("img", {"images": str(images)})
    status, _, doc = svc.post_run("print(1)", image="default")
    assert status == 400, doc
    msg = doc["error"]["message"]
    assert f'no image named "default" in {images}' in msg and f"airlock image --images {images} ls" in msg, msg
    # and the CLI reads the same directory when told, and says where it looked
    p = subprocess.run([str(AIRLOCK), "image", "--images", str(images), "ls"], capture_output=True, timeout=30)
    assert p.returncode == 0 and f"no images in {images}".encode() in p.stdout, p.stdout
    p = subprocess.run([str(AIRLOCK), "run", "--image", "nope", "--lang", "python", "-c", "print(1)"],
                       capture_output=True, timeout=30, env=dict(os.environ, AIRLOCK_IMAGES=str(images)))
    assert p.returncode == 125 and f'no image named "nope" in {images}'.encode() in p.stderr, p.stderr
    # and what to do about it (the CLI takes no --images: the environment names the directory)
    assert b"`airlock image build` makes the default image there; AIRLOCK_IMAGES=DIR" in p.stderr, p.stderr
    # the service said at its start that it had none, and where it looked
    log = svc.log_path.read_text()
    assert '"event":"images.none"' in log and f'"looked":"{images}"' in log, log[-2000:]


def test_a_missing_skills_directory_is_said_at_start(tmp_path, services):
    svc = services.start("noskills", {"skills_dir": str(tmp_path / "no-skills-here")})
    log = svc.log_path.read_text()
    assert '"event":"skills.none"' in log and str(tmp_path / "no-skills-here") in log, log[-2000:]
    # the ingredient: the bundled ones are found where they are
    svc2 = services.start("skills", {"skills_dir": str(Path(__file__).resolve().parents[2] / "skills")})
    assert '"event":"skills.none"' not in svc2.log_path.read_text()


# ------------------------------------------------------ a stop drains

def _balance(svc):
    org = svc.sql("SELECT id FROM orgs")[0][0]
    return svc.sql("SELECT credit_balance FROM orgs WHERE id = ?", org)[0][0]


def test_a_stop_lets_running_runs_finish_and_keeps_the_queue(services):
    svc = services.start("drain", {"stop_grace_s": "20", "max_concurrent": "1", "per_person_concurrency": "1"})
    running = svc.run("import time; time.sleep(3); print('finished')", wait=False)["id"]
    svc.wait_state(running, {"running"}, timeout=30)
    queued = svc.run("print('after the restart')", wait=False)["id"]
    assert svc.get_run(queued)["state"] == "queued"
    t0 = time.monotonic()
    svc.proc.send_signal(signal.SIGTERM)
    # while it drains, HTTP answers and the run goes on
    time.sleep(0.5)
    assert svc.proc.poll() is None, "the stop did not wait for the running run"
    assert svc.get_run(running)["state"] == "running"
    assert svc.proc.wait(30) == 0
    assert time.monotonic() - t0 >= 1.5, "the stop did not wait for the run"
    assert svc.sql("SELECT state FROM runs WHERE id = ?", running) == [("succeeded",)]
    assert svc.sql("SELECT state, node_id FROM runs WHERE id = ?", queued) == [("queued", None)]
    svc.start()
    assert svc.get_run(running)["result"]["stdout"] == "finished\n"
    q = svc.wait_state(queued, TERMINAL, timeout=60)
    assert q["state"] == "succeeded" and q["result"]["stdout"] == "after the restart\n", q


def test_what_the_stop_ends_is_airlock_s_error_and_not_charged(services):
    svc = services.start("grace", {"stop_grace_s": "1"})
    before = _balance(svc)
    rid = svc.run("import time; time.sleep(60)", wait=False)["id"]
    svc.wait_state(rid, {"running"}, timeout=30)
    # the ingredient: it was charged
    assert _balance(svc) < before
    t0 = time.monotonic()
    assert svc.stop(timeout=30) == 0
    assert time.monotonic() - t0 < 15
    svc.start()
    run = svc.get_run(rid)
    assert run["state"] == "error" and run["error"]["code"] == "service_stopped", run
    assert "stopped" in run["error"]["message"]
    assert run["result"]["reason"] == "service_stopped", run["result"]
    assert _balance(svc) == before, "a run airlock's own stop ended was charged"
    log = svc.log_path.read_text()
    assert '"event":"service.drain_ended"' in log, log[-2000:]


def test_a_second_signal_ends_the_drain_at_once(services):
    svc = services.start("twice", {"stop_grace_s": "120"})
    rid = svc.run("import time; time.sleep(60)", wait=False)["id"]
    svc.wait_state(rid, {"running"}, timeout=30)
    svc.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    assert svc.proc.poll() is None
    t0 = time.monotonic()
    svc.proc.send_signal(signal.SIGTERM)
    assert svc.proc.wait(30) == 0
    assert time.monotonic() - t0 < 15
    svc.start()
    run = svc.get_run(rid)
    assert run["state"] == "error" and run["error"]["code"] == "service_stopped", run
    assert '"event":"service.stop_now"' in svc.log_path.read_text()


def test_a_canceled_run_is_still_canceled_and_charged(services):
    """The guard beside the one above: a cancel its requester asked for is a
    cancel, as before."""
    svc = services.start("cancel", {"stop_grace_s": "0"})
    before = _balance(svc)
    rid = svc.run("import time; time.sleep(60)", wait=False)["id"]
    svc.wait_state(rid, {"running"}, timeout=30)
    assert svc.cancel(rid)[0] in (200, 202)
    run = svc.wait_state(rid, TERMINAL, timeout=30)
    assert run["state"] == "canceled", run
    assert _balance(svc) < before


def test_kill9_under_load_cancels_nothing_and_charges_nothing_it_lost(services):
    """The finding: after kill -9 under 16-client load, a run nobody canceled
    ended `canceled`. Every run the kill lost ends `lost` (error, refunded),
    every other one runs; none is `canceled`; the ledger holds no charge
    without its run having run."""
    import concurrent.futures
    import threading
    svc = services.start("kill9load", {"max_concurrent": "4", "per_person_concurrency": "4"})
    made, lock, stop = [], threading.Lock(), threading.Event()

    def client(i):
        n = 0
        while not stop.is_set() and n < 40:
            try:
                status, _, doc = svc.post_run(f"import time; time.sleep(0.2); print({i})", wait=False)
            except OSError:
                time.sleep(0.05)
                continue
            if status == 201:
                with lock:
                    made.append(doc["id"])
            n += 1
            time.sleep(0.02)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futs = [pool.submit(client, i) for i in range(16)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and svc.sql("SELECT count(*) FROM runs WHERE state = 'running'")[0][0] < 3:
            time.sleep(0.05)
        time.sleep(0.5)
        svc.kill9()
        stop.set()
        for f in futs:
            f.result()
    assert made, "no run was made before the kill"
    svc.start()
    ended = {rid: svc.wait_state(rid, TERMINAL, timeout=180) for rid in made}
    states = {rid: r["state"] for rid, r in ended.items()}
    lost = [rid for rid, r in ended.items() if r["state"] == "error"]
    assert lost, f"the kill lost no run (the ingredient): {states}"
    assert all(ended[rid]["error"]["code"] == "lost" for rid in lost), [ended[rid]["error"] for rid in lost]
    assert not [rid for rid, st in states.items() if st == "canceled"], states
    assert set(states.values()) <= {"succeeded", "error"}, states
    rows = svc.sql("SELECT run_id, kind FROM ledger WHERE run_id IS NOT NULL")
    charged = {r for r, k in rows if k == "charge"}
    refunded = {r for r, k in rows if k == "refund"}
    assert set(lost) <= refunded, set(lost) - refunded
    assert refunded <= charged
