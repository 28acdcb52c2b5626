"""Boxes forked by a zygote (issue 14; box.h's al_box_zygote, src/lang/warm/
zygote.py): the warm pool's Python boxes without preloads are clones of a
zygote of their shape, not each made and started. What a fork could share
must not be shared: each box its own uid (the zygote's map sends it to a
host uid of its own), its own namespaces, nothing of another box's or the
zygote's to reach, nothing left for the box after it. Each hostile case is
differential: the control shows the attack working outside a box. The
corpus of test_warm_pool.py holds a forked run to a cold one, and the
battery runs in forked boxes too (AIRLOCK_TEST_DRIVER=forked)."""
import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import AIRLOCK, airlock, need
from image_util import box
from service_util import box_cgroups, box_cgroups_of, box_processes, cgroups_left, image_service, stop_checked
from test_warm_pool import descendants, kill_interpreters, pool, wait_idle

BOX_UID_MIN = 1900000000


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    s = image_service(tmp_path_factory.mktemp("fork") / "state",
                      {"warm_pool": "2", "per_person_concurrency": "8", "max_concurrent": "8"})
    need(pool(s)["fork"], "boxes cannot be forked by a zygote here (root and cgroup v1)")
    yield s
    stop_checked(s)


def forked_run(svc, code, **fields):
    """CODE's run in a forked box (the first run of a shape goes cold and
    teaches the pool the shape, whose zygote then starts)."""
    key = fields.get("limits")
    if not any(sh["preload"] == "" and sh["language"] == "python" and sh["zygote"]["running"]
               for sh in pool(svc)["shapes"]):
        svc.run("pass", image="default", **({"limits": key} if key else {}))
        deadline = time.monotonic() + 30
        while not any(sh["zygote"]["running"] for sh in pool(svc)["shapes"]):
            assert time.monotonic() < deadline, pool(svc)
            time.sleep(0.1)
    doc = svc.run(code, image="default", **fields)
    assert doc["result"]["box"].get("forked") is True, doc["result"]["box"]
    return doc


def test_what_a_forked_box_got_from_its_zygote_is_immortal_and_what_it_makes_is_not(svc):
    # the zygote makes its objects immortal before it forks (zygote.py's
    # _immortalize, CPython 3.12 and 3.13: the default image's 3.13), so
    # that a box's interpreter writes none of their reference counts (a
    # copied page each); the run's own objects are counted and freed as
    # a cold start's. A cold box counts both.
    code = ("import os, sys, weakref\nclass C: pass\nc = C(); gone = []\n"
            "r = weakref.ref(c, lambda _: gone.append(1)); del c\n"
            "print(sys.getrefcount(os) >= 2 ** 32 - 1, bool(gone), sys.version_info[:2] in ((3, 12), (3, 13)))")
    status, cold = box(code)
    need(cold.get("stdout", "").endswith(" True\n"), "the default image's Python is not 3.12 or 3.13, whose "
         "objects the zygote makes immortal")
    assert status == 0 and cold["stdout"] == "False True True\n", cold
    doc = forked_run(svc, code)
    assert doc["result"]["stdout"] == "True True True\n", doc["result"]


def at_once(svc, codes):
    """CODES' runs started together; their run objects, in order."""
    ids = [svc.run(c, image="default", wait=False)["id"] for c in codes]
    return [svc.wait_state(i, ("succeeded", "failed", "error", "timed_out"), timeout=60) for i in ids]


def test_a_forked_box_holds_what_a_made_one_holds(svc):
    # what the box's kernel state says of it, forked and cold: identity,
    # capabilities, no_new_privs, filter, its processes, its hostname
    probe = ("import fcntl, json, os, socket, subprocess\nst = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
             " if ':\\t' in l)\nkeep = ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',"
             " 'NoNewPrivs', 'Seccomp', 'Seccomp_filters', 'NSpid', 'PPid')\n"
             "print(json.dumps({'status': {k: st.get(k, '').strip() for k in keep}, 'pids': sorted(int(p) for p in"
             " os.listdir('/proc') if p.isdigit()), 'host': socket.gethostname(), 'cwd': os.getcwd(),"
             " 'init': open('/proc/1/cmdline').read().rstrip('\\0'), 'fds': sorted(os.listdir('/proc/self/fd')),"
             " 'net': sorted(l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]),"
             " 'setgroups': open('/proc/self/setgroups').read().strip(),"
             # stdio open across exec (a program the script starts reads
             # its stdin), and what PID 1 handles or ignores
             " 'cloexec': [fcntl.fcntl(i, fcntl.F_GETFD) for i in range(3)],"
             " 'cat': subprocess.run(['cat'], capture_output=True).returncode,"
             # (a forked box's PID 1 catches SIGCHLD for its wait, and a
             # sanitizer build's made one SIGBUS, SIGFPE and SIGSEGV)
             " 'init_signals': {l.split(':')[0]: int(l.split()[1], 16) & ~(1 << 16 | 1 << 6 | 1 << 7 | 1 << 10)"
             "  for l in open('/proc/1/status') if l.startswith(('SigCgt', 'SigIgn'))}}))")
    forked = json.loads(forked_run(svc, probe)["result"]["stdout"])
    cold = svc.run(probe, image="default", limits={"memory_mb": 511})  # another shape: made, no pool box yet
    assert cold["result"]["box"].get("forked") is not True, cold["result"]["box"]
    cold = json.loads(cold["result"]["stdout"])
    assert forked == cold
    s = forked["status"]
    assert s["Uid"].split() == ["65534"] * 4 and s["CapEff"] == s["CapPrm"] == s["CapBnd"] == "0" * 16, s
    assert s["NoNewPrivs"] == "1" and s["Seccomp"] == "2" and forked["pids"] == [1, 2], forked
    assert forked["cloexec"] == [0, 0, 0] and forked["cat"] == 0, forked


def test_concurrent_forked_boxes_are_each_their_own(svc):
    # four boxes of one zygote at once: each a host uid of its own, which the
    # host sees its map send 65534 to; each sees only its own processes
    hold = ("import os, time, json\nprint(json.dumps({'uid': os.getuid(), 'pids': sorted(int(p) for p in"
            " os.listdir('/proc') if p.isdigit())}), flush=True)\ntime.sleep(3)")
    wait_idle(svc, 1)
    seen = {}

    def watch():
        # while they run: each box process's map, read from the host
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(seen) < 4:
            for pid, uid, cmd in box_processes():
                if cmd.startswith("/usr/bin/python3 main.py"):
                    try:
                        m = open(f"/proc/{pid}/uid_map").read().split()
                        st = open(f"/proc/{pid}/status").read()
                    except OSError:
                        continue
                    if "Seccomp:\t2" in st and m[:1] == ["65534"]:
                        seen[uid] = m
            time.sleep(0.05)
    t = threading.Thread(target=watch)
    t.start()
    docs = at_once(svc, [hold] * 4)
    t.join()
    assert all(d["state"] == "succeeded" and d["result"]["box"].get("forked") for d in docs), \
        [(d["state"], d["result"] and d["result"]["box"]) for d in docs]
    for d in docs:
        p = json.loads(d["result"]["stdout"])
        assert p["uid"] == 65534 and p["pids"] == [1, 2], p
    # the control: the host's own view holds every process
    assert len([p for p in os.listdir("/proc") if p.isdigit()]) > 20
    # the host saw four boxes at once, each a host uid of its own, to which
    # its map (read from the host) sends its 65534
    assert len(seen) >= 4 and min(seen) >= BOX_UID_MIN, seen
    for u, m in seen.items():
        assert m == ["65534", str(u), "1"], (u, seen)


def test_a_forked_box_reaches_no_other_box(svc):
    # an abstract socket one box listens on, another tries to reach: the
    # control (two host processes) reaches it; two forked boxes do not
    name = "airlock-fork-" + uuid.uuid4().hex[:8]
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect("\0" + name)
    c.close()
    srv.close()
    listen = (f"import socket, time\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ns.bind('\\0{name}')\n"
              "s.listen(1)\nprint('listening', flush=True)\ntime.sleep(3)")
    reach = (f"import socket, time, os, signal\ntime.sleep(1)\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
             f"try:\n    s.connect('\\0{name}'); print('reached')\nexcept OSError as e:\n    print('refused', e.errno)\n"
             # every pid this box could name but its own two, signalled:
             # none exists (the zygote's and the other box's are not its)
             "n = 0\nfor p in range(3, 32768):\n    try:\n        os.kill(p, 0); n += 1\n    except OSError:\n        pass\n"
             "print('others', n)")
    a, b = at_once(svc, [listen, reach])
    assert a["result"]["stdout"].startswith("listening"), a["result"]
    out = b["result"]["stdout"].split("\n")
    assert out[0].startswith("refused"), b["result"]
    assert out[1] == "others 0", b["result"]
    assert a["result"]["box"].get("forked") and b["result"]["box"].get("forked")


def test_a_forked_box_leaves_nothing_for_the_next(svc):
    # a box that leaves a process behind, files in each scratch, and a uid's
    # worth of state: the next box of the zygote (often the same slot) finds
    # none of it, and on the host nothing of the first is left
    leave = ("import os, time\nfor d in ('/tmp', '/dev/shm', '/work', '/out'):\n    open(d + '/left', 'w').write('x')\n"
             "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execv('/bin/sleep', ['sleep', '61'])\n"
             "    os._exit(0)\ntime.sleep(0.5)\nprint(os.getuid())")
    look = ("import os, json\nprint(json.dumps({d: sorted(f for f in os.listdir(d) if not f.startswith('.'))"
            " for d in ('/tmp', '/dev/shm', '/work', '/out')}))\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))")
    # the control: an orphan a host process leaves outlives it
    subprocess.run(["/bin/sh", "-c", "sleep 61 & exit 0"], check=True)
    ctl = subprocess.run(["pgrep", "-x", "-f", "sleep 61"], capture_output=True)
    harness = ctl.stdout.split()
    subprocess.run(["pkill", "-x", "-f", "sleep 61"])
    assert harness, "control: the host's orphan did not outlive its parent"
    orphans = lambda: [p for p in box_processes(mine_only=False) if p[2].strip() == "sleep 61"]  # noqa: E731
    first = forked_run(svc, leave)
    assert first["result"]["stdout"] == "65534\n", first["result"]
    # the box's orphan died with it
    deadline = time.monotonic() + 10
    while orphans() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not orphans(), box_processes()
    nxt = forked_run(svc, look)
    listing, pids = nxt["result"]["stdout"].splitlines()
    assert json.loads(listing) == {"/tmp": [], "/dev/shm": [], "/work": ["main.py"], "/out": []}, nxt["result"]
    assert pids == "['1', '2']", pids


def test_one_box_s_processes_do_not_count_against_another_s(svc):
    # two boxes of one zygote at once: one holds nearly its pids limit in
    # sleepers; the other still forks all it asks for (were the zygote's
    # RLIMIT_NPROC set, the kernel would count both boxes' processes, of
    # any tenants, against that one budget: their user namespaces are its)
    forked_run(svc, "pass")
    hold = ("import os, time\nn = 0\nfor _ in range(235):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(6); os._exit(0)\n        n += 1\n    except OSError:\n        break\n"
            "print('held', n, flush=True)\ntime.sleep(6)")
    ask = ("import os, time\ntime.sleep(2.5)\nok = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n"
           "        if pid == 0:\n            time.sleep(1); os._exit(0)\n        ok += 1\n    except OSError as e:\n"
           "        print('refused', e.errno)\n        break\nprint('forked', ok)")
    a, b = at_once(svc, [hold, ask])
    assert a["result"]["box"].get("forked") and b["result"]["box"].get("forked"), (a["result"]["box"], b["result"]["box"])
    assert a["result"]["stdout"] == "held 235\n", a["result"]
    assert b["result"]["stdout"] == "forked 40\n", b["result"]


def test_a_zygote_killed_is_replaced_and_runs_never_fail(svc):
    forked_run(svc, "pass")
    wait_idle(svc, 1)
    # every interpreter of the pool's boxes and its zygotes, killed from outside
    assert kill_interpreters() >= 2, box_processes()
    for _ in range(5):
        doc = svc.run("print('still runs')", image="default")
        assert doc["state"] == "succeeded" and doc["result"]["stdout"] == "still runs\n", (doc["error"], doc["result"])
    # a zygote again, and boxes forked by it
    deadline = time.monotonic() + 30
    while True:
        doc = svc.run("print(1)", image="default")
        if doc["result"]["box"].get("forked"):
            break
        assert time.monotonic() < deadline, (doc["result"]["box"], pool(svc))
        time.sleep(0.5)
    shapes = [sh for sh in pool(svc)["shapes"] if sh["preload"] == "" and sh["language"] == "python"]
    assert shapes and all(sh["zygote"]["forks"] and sh["zygote"]["running"] for sh in shapes), pool(svc)


def test_misses_get_a_box_forked_for_them(svc):
    # more runs at once than the pool keeps: those that find none ready
    # still get a forked box, not a made one
    wait_idle(svc, 1)

    def counts():
        sh = [s for s in pool(svc)["shapes"] if s["preload"] == "" and s["language"] == "python"]
        return sum(s["misses"] for s in sh), sum(s["zygote"]["forked_for_misses"] for s in sh)
    before = counts()
    docs = at_once(svc, ["import time; time.sleep(0.5)"] * 6)
    assert all(d["state"] == "succeeded" and d["result"]["box"].get("forked") for d in docs), \
        [d["result"]["box"] for d in docs]
    after = counts()
    # every run that found no box ready had one forked for it
    assert after[0] - before[0] >= 1 and after[1] - before[1] == after[0] - before[0], (before, after)


def test_an_imported_image_gets_no_zygote(tmp_path):
    # a zygote's boxes are isolated by its own interpreter's code: on an
    # image whose files a tenant brought, the helper refuses to make one
    img = tmp_path / "img"
    (img / "rootfs").mkdir(parents=True)
    (img / "info.json").write_text(json.dumps({"imported_from": "/tmp/x.tar"}))
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = {"zygote": True, "zygote_fd": a.fileno(), "language": "python", "code": "", "image_dir": str(img),
           "image_digest": "0" * 64}
    p = subprocess.run([str(AIRLOCK), "helper"], input=(json.dumps(job) + "\n").encode(), capture_output=True,
                       pass_fds=(a.fileno(),), timeout=30)
    a.close()
    b.close()
    ev = json.loads(p.stdout.splitlines()[0])
    assert ev["type"] == "error" and "imported" in ev["error"]["message"], ev


def detached_tmpfs():
    """A detached tmpfs mount's fd (fsopen, fsconfig, fsmount: x86-64's
    430-432) holding the five nodes, standing in for the /dev a forked
    box's parent sends (al_mount_dev)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fs = libc.syscall(430, b"tmpfs", 1)  # FSOPEN_CLOEXEC
    assert fs >= 0 and libc.syscall(431, fs, 6, None, None, 0) == 0, ctypes.get_errno()  # FSCONFIG_CMD_CREATE
    m = libc.syscall(432, fs, 1, 0)  # FSMOUNT_CLOEXEC
    os.close(fs)
    assert m >= 0, ctypes.get_errno()
    for name, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
        assert libc.mknodat(m, name.encode(), 0o020666, os.makedev(1, minor)) == 0, ctypes.get_errno()
    return m


class Zygote:
    """A zygote of the host's runtime, as the pool starts one (`airlock
    helper` with a zygote job), and the other end of its request socket."""

    def __init__(self):
        a, self.req = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        job = {"zygote": True, "zygote_fd": a.fileno(), "language": "python", "code": ""}
        self.p = subprocess.Popen([str(AIRLOCK), "helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, pass_fds=(a.fileno(),))
        a.close()
        self.p.stdin.write((json.dumps(job) + "\n").encode())
        self.p.stdin.flush()
        ev = json.loads(self.p.stdout.readline() or b"{}")
        if ev.get("type") == "error" and "root" in ev["error"]["message"]:
            self.close()
            need(False, "boxes cannot be forked by a zygote here (root and cgroup v1)")
        assert ev.get("type") == "ready", ev

    def ask(self, n_fds=5, body=struct.pack("=5Q", 16 << 20, 1024, 64, 256, 0)):
        """A request (box.c's al_fork_request, then the box's sync socket,
        stdout and stderr pipes, warm start's socket and /dev, or the first
        N_FDS of them): our end of its sync socket."""
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        r, w = os.pipe()
        chan, chan_its = socket.socketpair()
        dev = detached_tmpfs()
        socket.send_fds(self.req, [body], [its.fileno(), w, w, chan_its.fileno(), dev, w][:n_fds])
        for f in (its, chan, chan_its):
            f.close()
        os.close(r)
        os.close(w)
        os.close(dev)
        mine.settimeout(10)
        return mine

    def close(self):
        self.req.close()
        self.p.kill()
        self.p.wait()


def answer(sock):
    """The first message on a box's sync socket: (type, step, errno, text),
    its fds closed (src/box/proto.h's al_msg)."""
    msg, fds, _, _ = socket.recv_fds(sock, 4096, 8)
    for fd in fds:
        os.close(fd)
    kind, _, step, err, text = struct.unpack("=Ii48si512s", msg)
    return kind, step.rstrip(b"\0").decode(), err, text.rstrip(b"\0").decode()


def test_a_request_the_zygote_cannot_read_is_answered_at_once():
    # the zygote's loop (src/box/zygote.c) answers a request that is not a
    # box's (four fds or six; a body of the wrong size) on the request's
    # sync socket, as a box's failed step is, instead of leaving its sender
    # to time out; it serves on, and the end of its request socket ends it
    z = Zygote()
    try:
        for n_fds, body in ((4, None), (6, None), (5, b"\0" * 10), (5, b"\0" * 48)):
            mine = z.ask(n_fds, body) if body else z.ask(n_fds)
            assert answer(mine) == (3, "zygote", 22, "a request the zygote cannot read"), n_fds
            mine.close()
        z.req.close()
        # its helper reports its end (no box of it is alive)
        out = z.p.communicate(timeout=30)[0]
        assert any(json.loads(l).get("type") == "result" for l in out.splitlines()), out
    finally:
        z.close()


def test_a_zygote_forks_one_box_per_uid_of_its_own_and_reuses_one_once_its_box_is_gone():
    # 32 boxes alive at once, each held at its second sync point (its
    # scratch sent, the parent's go not given), each on a uid of its own;
    # a 33rd request is refused, said on its sync socket; once one box is
    # gone (its parent's end closed: its PID 1 ends) its uid serves again
    z = Zygote()
    held = []
    try:
        for _ in range(32):
            mine = z.ask()
            assert answer(mine)[0] == 2  # AL_MSG_FDS: the box is up
            held.append(mine)
        mine = z.ask()
        assert answer(mine) == (3, "zygote", 11, "every uid of the zygote is in use")
        mine.close()
        held.pop().close()
        deadline = time.monotonic() + 15
        while True:
            mine = z.ask()
            got = answer(mine)
            if got[0] == 2:
                held.append(mine)
                break
            assert got == (3, "zygote", 11, "every uid of the zygote is in use") and time.monotonic() < deadline, got
            mine.close()
            time.sleep(0.2)
    finally:
        for m in held:
            m.close()
        z.close()


def test_airlock_run_fork_runs_a_file_as_main_py(tmp_path):
    # the forked box's interpreter started as `python3 main.py`: a FILE of
    # any name runs as /work/main.py, its arguments its own
    script = tmp_path / "report.py"
    script.write_text("import sys\nprint(__file__, sys.argv[0], sys.argv[1:])\n")
    p = airlock("run", "--fork", script, "a", "b")
    if p.returncode != 0 and b"--fork runs Python offline, as root" in p.stderr:
        need(False, "boxes cannot be forked by a zygote here (root and cgroup v1)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode() == "/work/main.py main.py ['a', 'b']\n", p.stdout


SIGNAL_PID1 = """import os, signal, time
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
    os.kill(1, s)
time.sleep(0.3)
print("alive", open("/proc/1/comm").read().strip(), os.getppid())
"""


def test_signals_from_the_script_leave_a_forked_box_s_pid1_as_a_made_one_s(tmp_path):
    # a box's PID 1 has no handler a signal from inside could run (the
    # kernel drops the rest): the script's own signals to it end nothing,
    # forked as made (a PID 1 that ran Python had its SIGINT handler, and
    # the box died with the script SIGKILLed)
    script = tmp_path / "main.py"
    script.write_text(SIGNAL_PID1)
    cold = airlock("run", script)
    forked = airlock("run", "--fork", script)
    if forked.returncode != 0 and b"--fork runs Python offline, as root" in forked.stderr:
        need(False, "boxes cannot be forked by a zygote here (root and cgroup v1)")
    assert cold.returncode == 0 and cold.stdout == b"alive airlock 1\n", (cold.stdout, cold.stderr)
    assert forked.returncode == 0 and forked.stdout == cold.stdout, (forked.stdout, forked.stderr)


SIGNALS_SEEN = ("import signal\n"
                "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,\n"
                "      [signal.getsignal(s) == signal.SIG_DFL for s in (signal.SIGHUP, signal.SIGQUIT)])\n")


def test_a_box_s_script_starts_with_default_signals_whatever_airlock_ignores(tmp_path):
    # a service started under nohup, or from a shell's background, ignores
    # SIGHUP, SIGINT and SIGQUIT, and an ignored signal stays ignored across
    # fork and exec: the control, a script started by such a process, has
    # no KeyboardInterrupt handler. A box's script starts as from a clean
    # start, made or forked (a made box's inherited them; CI launched from
    # a background job saw its PID 1 differ from a forked one's)
    script = tmp_path / "main.py"
    script.write_text(SIGNALS_SEEN)

    def ignoring(*argv):
        def ign():
            for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
                signal.signal(s, signal.SIG_IGN)
        return subprocess.run([str(a) for a in argv], preexec_fn=ign, capture_output=True, timeout=120)
    control = ignoring(sys.executable, script)
    assert control.stdout == b"False [False, False]\n", control
    made = ignoring(AIRLOCK, "run", script)
    assert made.returncode == 0 and made.stdout == b"True [True, True]\n", (made.stdout, made.stderr)
    forked = ignoring(AIRLOCK, "run", "--fork", script)
    if forked.returncode != 0 and b"--fork runs Python offline, as root" in forked.stderr:
        need(False, "boxes cannot be forked by a zygote here (root and cgroup v1)")
    assert forked.returncode == 0 and forked.stdout == made.stdout, (forked.stdout, forked.stderr)


def test_a_killed_service_leaves_no_zygote_and_no_forked_box(tmp_path_factory):
    s = image_service(tmp_path_factory.mktemp("fork-killed") / "state", {"warm_pool": "2"})
    need(pool(s)["fork"], "boxes cannot be forked by a zygote here (root and cgroup v1)")
    s.run("pass", image="default")
    wait_idle(s, 1)
    mine = descendants(s.proc.pid)
    procs = [p for p in box_processes() if p[0] in mine]
    uids = {u for _, u, _ in procs}
    # a zygote (its PID 1 and interpreter) and a forked box (its PID 1 and script)
    assert len(procs) >= 4, procs
    cgs = box_cgroups_of(uids)
    assert cgs, box_cgroups()
    s.kill9()
    deadline = time.monotonic() + 20

    # these processes and these cgroups (by inode: their uids, once free,
    # are soon other workers' boxes', at the same paths)
    def left():
        return [p for p in box_processes() if p[0] in mine], cgroups_left(cgs)
    got = left()
    while any(got) and time.monotonic() < deadline:
        time.sleep(0.1)
        got = left()
    assert got == ([], []), got


def fake_box(sync, uid, scratch):
    """A process standing for a forked box, as a zygote that gave it UID
    would clone it: on SYNC it sends its scratch directories (three in
    SCRATCH, the box's /work, /out and /tmp) and a pidfd of itself (the
    kernel adding its pid and uid), then reports on a pipe the type of the
    next message from the box's parent (0: none, the socket's end). Its pid
    and that pipe's read end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            # (opened first: the test's directory is root's alone)
            dirs = [os.open(scratch / d, os.O_RDONLY | os.O_DIRECTORY) for d in ("work", "out", "tmp")]
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            socket.send_fds(sync, [struct.pack("=Ii48si512s", 2, 0, b"", 0, b"")], dirs + [os.pidfd_open(os.getpid())])
            msg, fds, _, _ = socket.recv_fds(sync, 4096, 8)
            os.write(w, struct.pack("=I", struct.unpack_from("=I", msg)[0] if msg else 0))
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


@pytest.mark.parametrize("held", [True, False])
def test_a_forked_box_on_a_uid_no_live_airlock_holds_is_refused(tmp_path, held):
    # The helper of a forked box takes its pid and uid from the kernel
    # (SCM_CREDENTIALS) and holds them to a live zygote's: a uid that no
    # live airlock holds the lock of is no slot of one (its helper holds
    # each slot's while any box of it lives), and could be any box's next.
    # Here a fake zygote answers the helper's request with a box on a uid of
    # airlock's range: taken when the uid's lock is held (the control, held
    # by this test as a zygote's helper holds its slots'), refused at its
    # second sync point when nobody holds it.
    uid = 1900000000 + 60000 + os.getpid() % 5000
    os.makedirs("/run/airlock/uids", mode=0o700, exist_ok=True)
    lock = os.open(f"/run/airlock/uids/{uid}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if not held:
        os.close(lock)
    a, zygote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    (tmp_path / "artifacts").mkdir()
    job = {"language": "python", "code": "pass", "out_dir": str(tmp_path / "artifacts"), "fork_fd": a.fileno(),
           "limits": {"timeout_s": 10}}
    p = subprocess.Popen([str(AIRLOCK), "helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, pass_fds=(a.fileno(),))
    a.close()
    chan = None
    try:
        p.stdin.write((json.dumps(job) + "\n").encode())
        p.stdin.flush()
        ready, _, _ = select.select([zygote, p.stdout], [], [], 30)
        if zygote not in ready and p.stdout in ready:
            # (the box refused before any request: said, then run cold)
            need(b"made by root on cgroup v1" not in p.stdout.readline(),
                 "boxes cannot be forked by a zygote here (root and cgroup v1)")
        assert zygote in ready, "the helper sent its zygote no request"
        body, fds, _, _ = socket.recv_fds(zygote, 4096, 8)
        assert len(body) == 40 and len(fds) == 5, (len(body), fds)
        sync = socket.socket(fileno=fds[0])
        # (the warm start's socket kept open: its end would end the box)
        chan = fds[3]
        for fd in fds[1:3] + fds[4:]:
            os.close(fd)
        for d in ("work", "out", "tmp"):
            (tmp_path / d).mkdir()
            os.chown(tmp_path / d, uid, uid)
        pid, report = fake_box(sync, uid, tmp_path)
        sync.close()
        got = struct.unpack("=I", os.read(report, 4))[0]
        os.close(report)
        os.waitpid(pid, 0)
        if held:
            # past its identity check: the parent's go (sync 3)
            assert got == 1, got
        else:
            # the box's socket ends, and the helper says why
            assert got == 0, got
            ev = json.loads(p.stdout.readline())
            assert ev["type"] == "warm_lost" and "is not who it says" in ev["why"], ev
        # the end of its stdin (communicate closes it) cancels the run: the
        # helper cleans up after its box (SIGKILLed, the cold box it made
        # instead would leave its cgroups)
        p.communicate(timeout=30)
    finally:
        if held:
            os.close(lock)
        if chan is not None:
            os.close(chan)
        if p.poll() is None:
            p.kill()
            p.wait()
        zygote.close()


def test_two_boxes_of_one_zygote_cannot_watch_each_other(svc):
    # (docs/security.md, O5) the zygote's /usr and /dev are one inode each
    # for every box it forks: each box lays an overlay of its own over the
    # zygote's read-only trees and attaches a /dev its parent made for it.
    # Box A watches a module and /dev/null while box B, of the same
    # zygote, reads the one and writes the other: A sees nothing. (The
    # control, a watcher on the host that sees a host actor, is
    # test_battery_o_watch.py's.)
    from test_battery_o_watch import TARGET, actor, watcher
    forked_run(svc, "pass")
    a, b = at_once(svc, [watcher([TARGET, "/dev/null"], 4), actor(8)])
    assert a["state"] == b["state"] == "succeeded", (a["result"]["stderr"], b["result"]["stderr"])
    assert a["result"]["box"].get("forked") and b["result"]["box"].get("forked"), (a["result"]["box"], b["result"]["box"])
    seen = json.loads(a["result"]["stdout"].strip().splitlines()[-1])
    assert seen == {TARGET: 0, "/dev/null": 0}, seen
