"""Hostile battery, group E: supervisor, terminal, IPC, identity leakage (SECURITY.md 5.E)."""
import errno
import fcntl
import json
import os
import resource
import socket
import subprocess
import termios
import time
import tty
import uuid
from pathlib import Path

from battery_util import (AIRLOCK, CONTROL_ENV, CONTROL_UID, NOBODY, ON_DOCKER, ON_GVISOR, ON_KUBE, assert_kube_uid, wait_kube_idle, PY, LiveRun, as_uid,
                          assert_exited, box_bash, box_py, descendants, harness, host_py, in_child_pidns,
                          pids_with_marker, proc_status, uniq, wait_for, plain_workdir, outdir)  # noqa: F401


def _last(doc_or_proc):
    text = doc_or_proc["stdout"] if isinstance(doc_or_proc, dict) else doc_or_proc.stdout.decode()
    return json.loads(text.strip().splitlines()[-1])


def _alive(pid):
    st = proc_status(pid)
    return st is not None and not st.get("State", "").startswith("Z")


E1_PY = r'''
import ctypes, errno, json, os, signal
HOSTPIDS = @PIDS@
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def en(e):
    return errno.errorcode.get(e, str(e))
out = {"visible": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
for p in HOSTPIDS:
    r = {}
    try:
        os.kill(p, 0); r["kill0"] = "ok"
    except OSError as e:
        r["kill0"] = en(e.errno)
    ctypes.set_errno(0)
    fd = libc.syscall(ctypes.c_long(434), ctypes.c_long(p), ctypes.c_long(0))      # pidfd_open
    r["pidfd_open"] = "ok" if fd >= 0 else en(ctypes.get_errno())
    if fd >= 0:
        ctypes.set_errno(0)
        s = libc.syscall(ctypes.c_long(424), ctypes.c_long(fd), ctypes.c_long(0), None, ctypes.c_long(0))
        r["pidfd_send_signal0"] = "ok" if s == 0 else en(ctypes.get_errno())
    out[str(p)] = r
try:
    os.kill(1, signal.SIGTERM); out["kill1"] = "ok"
except OSError as e:
    out["kill1"] = en(e.errno)
try:
    os.kill(-1, signal.SIGKILL); out["kill-1"] = "ok"
except OSError as e:
    out["kill-1"] = en(e.errno)
print(json.dumps(out), flush=True)
'''


def test_e1_signals_and_pidfds_stay_inside():
    sentinels = {
        "root": subprocess.Popen(["sleep", "60"]),
        "nobody": subprocess.Popen(as_uid(["sleep", "60"], NOBODY)),
        "control_uid": subprocess.Popen(as_uid(["sleep", "60"], CONTROL_UID)),
    }
    try:
        time.sleep(0.2)
        # control: same uid as the victim, unconfined -> pidfd_open works and kill(-1) kills it
        ctrl_victim = sentinels["control_uid"].pid
        ctrl = host_py(E1_PY.replace("@PIDS@", str([ctrl_victim])), uid=CONTROL_UID)
        c = _last(ctrl)
        sentinels["control_uid"].wait(timeout=5)
        harness(c[str(ctrl_victim)]["pidfd_open"] == "ok" and not _alive(ctrl_victim),
                f"control: kill(-1)/pidfd did not reach a same-uid process: {c}")

        victims = [sentinels["root"].pid, sentinels["nobody"].pid, os.getpid()]
        doc = box_py(E1_PY.replace("@PIDS@", str(victims)))
        assert doc.get("reason") == "exited", f"daemon did not report the run: {doc}"
        r = _last(doc)
        for name in ("root", "nobody"):
            assert _alive(sentinels[name].pid), f"host {name} process was killed from the box"
        for p in victims:
            got = r[str(p)]
            assert got["kill0"] != "ok" and got["pidfd_open"] != "ok", \
                f"host pid {p} reachable from the box: {got}"
        assert all(p < 100 for p in r["visible"]), f"host pids visible in the box: {r['visible']}"
    finally:
        for p in sentinels.values():
            p.kill()
            p.wait()


E2_PY = r'''
import errno, json, os, socket, stat
ABSTRACT, PATHS = @ABSTRACT@, @PATHS@
def conn(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(addr); return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
out = {}
try:
    out["proc_net_unix"] = open("/proc/net/unix").read()
except OSError as e:
    out["proc_net_unix"] = ""
names = set()
for line in out["proc_net_unix"].splitlines()[1:]:
    parts = line.split()
    if len(parts) >= 8:
        names.add(parts[7])
out["abstract"] = {a: conn("\0" + a) for a in ABSTRACT + ["/containerd-shim/x.sock", "daemon"]}
out["listed"] = {n: conn(("\0" + n[1:]) if n.startswith("@") else n) for n in names}
found = []
for top in ("/", "/run", "/var/run", "/tmp", "/work", "/out", "/dev"):
    if not os.path.isdir(top):
        continue
    for d, dirs, files in os.walk(top):
        if d.startswith("/proc") or d.startswith("/usr"):
            dirs[:] = []
            continue
        for n in files + dirs:
            p = os.path.join(d, n)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode):
                    found.append(p)
            except OSError:
                pass
out["found"] = {p: conn(p) for p in found}
out["paths"] = {p: conn(p) for p in PATHS + ["/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"]}
print(json.dumps(out))
'''


def test_e2_no_host_or_daemon_sockets(plain_workdir):
    tag = uuid.uuid4().hex[:10]
    abstract = f"airlock-battery-{tag}"
    paths = [f"/run/airlock-battery-{tag}.sock", f"/tmp/airlock-battery-{tag}.sock"]
    listeners = []
    try:
        a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        a.bind("\0" + abstract)
        a.listen(16)
        listeners.append(a)
        for p in paths:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(p)
            os.chmod(p, 0o777)
            s.listen(16)
            listeners.append(s)
        code = E2_PY.replace("@ABSTRACT@", json.dumps([abstract])).replace("@PATHS@", json.dumps(paths))
        c = _last(host_py(code, uid=NOBODY, cwd=str(plain_workdir.path)))
        harness(c["abstract"][abstract] == "ok" and all(c["paths"][p] == "ok" for p in paths),
                f"control (nobody): host sockets not reachable unconfined: {c['abstract']} {c['paths']}")
        doc = box_py(code)
        assert_exited(doc)
        r = _last(doc)
        reached = {k: v for k, v in {**r["abstract"], **r["listed"], **r["found"], **r["paths"]}.items()
                   if v == "ok"}
        assert not reached, f"sockets reachable from the box: {reached}"
        assert abstract not in r["proc_net_unix"], "host abstract socket listed in the box's /proc/net/unix"
    finally:
        for s in listeners:
            s.close()
        for p in paths:
            Path(p).unlink(missing_ok=True)


E3_PY = r'''
import errno, fcntl, json, os, sys, termios
out = {}
payload = b"echo INJECTED-@TAG@\n"
def sti(fd):
    try:
        for ch in payload:
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
for fd in (0, 1, 2):
    out[f"fd{fd}"] = sti(fd)
    try:
        out[f"fd{fd}_tty"] = os.ttyname(fd)
    except OSError as e:
        out[f"fd{fd}_tty"] = errno.errorcode.get(e.errno, "?")
try:
    t = os.open("/dev/tty", os.O_RDWR)
    out["/dev/tty"] = sti(t)
    try:
        fcntl.ioctl(t, 0x541C, bytes([6]))
        out["tioclinux"] = "ok"
    except OSError as e:
        out["tioclinux"] = errno.errorcode.get(e.errno, "?")
except OSError as e:
    out["/dev/tty"] = "open:" + errno.errorcode.get(e.errno, "?")
sys.stdout.write("\x1b]52;c;SU5KRUNURUQ=\x07\x1b]0;pwned-title\x07\x1b[2J")
sys.stderr.write("\x1b]52;c;SU5KRUNURUQ=\x07\x1b]0;pwned-title\x07")
sys.stdout.write("\n" + json.dumps(out) + "\n")
'''


def _run_on_pty(argv):
    """Run argv as a session leader with a pty as controlling tty on fd 0 and 2.
    Returns (stdout bytes, bytes waiting in the tty's input queue, bytes the terminal got)."""
    m, s = os.openpty()
    tty.setraw(s)

    def pre():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(argv, stdin=s, stdout=subprocess.PIPE, stderr=s, preexec_fn=pre,
                         env=CONTROL_ENV)
    out, _ = p.communicate(timeout=60)
    time.sleep(0.1)
    os.set_blocking(s, False)
    os.set_blocking(m, False)
    injected = b""
    try:
        injected = os.read(s, 65536)
    except OSError:
        pass
    screen = b""
    try:
        while True:
            chunk = os.read(m, 65536)
            if not chunk:
                break
            screen += chunk
    except OSError:
        pass
    os.close(m)
    os.close(s)
    return out, injected, screen


def test_e3_no_terminal_injection_or_raw_escapes(plain_workdir):
    tag = uuid.uuid4().hex[:8]
    code = E3_PY.replace("@TAG@", tag)
    f = plain_workdir / "e3.py"
    f.write_text(code)
    out, injected, _ = _run_on_pty([PY, str(f)])
    harness(f"INJECTED-{tag}".encode() in injected,
            f"control: TIOCSTI on the controlling tty did not inject: {out[-300:]!r} {injected!r}")

    out, injected, screen = _run_on_pty([str(AIRLOCK), "run", "--json", "--lang", "python", "-c", code])
    doc = json.loads(out)
    assert_exited(doc)
    assert f"INJECTED-{tag}".encode() not in injected, f"input was injected into the parent's terminal: {injected!r}"
    r = json.loads(doc["stdout"].strip().splitlines()[-1])
    assert not any(v == "ok" for k, v in r.items() if k in ("fd0", "fd1", "fd2", "/dev/tty", "tioclinux")), r
    assert all(not str(r.get(f"fd{i}_tty", "")).startswith("/dev/") for i in range(3)), \
        f"the box has a terminal on its standard fds: {r}"
    assert b"\x1b" not in out, "raw escape sequences in the --json output"
    assert b"\x1b]52" not in screen and b"pwned-title" not in screen, \
        f"the script's escapes reached the user's terminal raw: {screen[:300]!r}"


E4_PY = r'''
import json, os
def rd(p):
    try:
        return open(p, "rb").read().decode(errors="replace")
    except OSError as e:
        return "errno:%d" % e.errno
print(json.dumps({"env": dict(os.environ), "self_environ": rd("/proc/self/environ"),
                  "pid1_environ": rd("/proc/1/environ"), "pid1_cmdline": rd("/proc/1/cmdline"),
                  "hosts": rd("/etc/hosts"), "resolv": rd("/etc/resolv.conf")}))
'''
# the allow-list of docs/cli.md ("Inside the box")
ENV_ALLOWED = {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "MPLCONFIGDIR",
               "AIRLOCK_NETWORK", "PIP_RETRIES"}


def test_e4_environment_and_identity_leakage(outdir, plain_workdir):
    secret = "s3cr3t" + uuid.uuid4().hex
    env = dict(CONTROL_ENV, AWS_SECRET_ACCESS_KEY=secret, AWS_ACCESS_KEY_ID="AKIA" + secret,
               GITHUB_TOKEN=secret, OPENAI_API_KEY=secret, SSH_AUTH_SOCK="/tmp/ssh-" + secret,
               HTTPS_PROXY=f"http://user:{secret}@proxy.internal:3128", AIRLOCK_DAEMON_URL="http://10.0.0.1:7777/" + secret,
               AIRLOCK_DAEMON_TOKEN=secret)
    f = plain_workdir / "e4.py"
    f.write_text(E4_PY)
    ctrl = subprocess.run([PY, str(f)], capture_output=True, env=env, timeout=30)
    harness(secret in ctrl.stdout.decode(), "control: the secret environment is not visible unconfined")

    path_token = "hostpath" + uuid.uuid4().hex
    host_out = outdir / ("private-" + path_token)
    proc = subprocess.run([str(AIRLOCK), "run", "--json", "--out", str(host_out), "--lang", "python", "-c", E4_PY],
                          capture_output=True, env=env, timeout=60)
    doc = json.loads(proc.stdout)
    assert_exited(doc)
    r = json.loads(doc["stdout"].strip().splitlines()[-1])
    leaks = [k for k, v in r.items() if secret in json.dumps(v)]
    assert not leaks, f"host secrets visible in the box through: {leaks}"
    host_ns = [l.split()[1] for l in Path("/etc/resolv.conf").read_text().splitlines()
               if l.startswith("nameserver") and len(l.split()) > 1]
    assert not any(ns in r["resolv"] for ns in host_ns), f"host resolver in the box: {r['resolv']!r}"
    for line in r["hosts"].splitlines():
        if line.strip() and not line.startswith("#"):
            assert line.split()[0] in ("127.0.0.1", "::1", "127.0.1.1"), f"host entry in /etc/hosts: {line!r}"
    assert path_token not in r["pid1_cmdline"], \
        f"/proc/1/cmdline in the box exposes the host command line: {r['pid1_cmdline'][:300]!r}"
    extra = set(r["env"]) - ENV_ALLOWED
    assert not extra, f"environment beyond the documented allow-list (cli.md): { {k: r['env'][k] for k in extra} }"


E5_CREATE = r'''
import ctypes, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
KEY = @KEY@
out = {"shm": libc.shmget(KEY, 4096, 0o1666), "msg": libc.msgget(KEY, 0o1666), "sem": libc.semget(KEY, 1, 0o1666)}
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    out["mq"] = rt.mq_open(b"/airlock-battery-@TAG@", os.O_CREAT | os.O_RDWR, 0o666, None)
except OSError:
    out["mq"] = "no librt"
open("/dev/shm/airlock-battery-@TAG@", "w").write("x")
out["cgroup"] = open("/proc/self/cgroup").read()
libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
ctypes.set_errno(0)
out["sethostname"] = libc.sethostname(b"x", 1)
out["sethostname_errno"] = ctypes.get_errno()
print(json.dumps(out), flush=True)
time.sleep(@SLEEP@)
'''
E5_LOOK = r'''
import ctypes, json, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
KEY = @KEY@
out = {"ipcs": subprocess.run(["ipcs", "-a"], capture_output=True, text=True).stdout,
       "shm": libc.shmget(KEY, 0, 0), "msg": libc.msgget(KEY, 0), "sem": libc.semget(KEY, 0, 0),
       "devshm": os.listdir("/dev/shm")}
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    out["mq"] = rt.mq_open(b"/airlock-battery-@TAG@", os.O_RDWR)
except OSError:
    out["mq"] = -1
print(json.dumps(out))
'''


def test_e5_ipc_cgroup_hostname(plain_workdir):
    tag = uuid.uuid4().hex[:8]
    ctrl_key = 0x5EED0000 + int(tag[:4], 16)
    box_key = ctrl_key + 1
    # control: two unconfined processes of one uid share IPC
    creator = subprocess.Popen(as_uid([PY, "-c", E5_CREATE.replace("@KEY@", str(ctrl_key))
                                       .replace("@TAG@", tag + "c").replace("@SLEEP@", "3")], NOBODY),
                               stdout=subprocess.PIPE, env=CONTROL_ENV)
    try:
        creator.stdout.readline()
        look = host_py(E5_LOOK.replace("@KEY@", str(ctrl_key)).replace("@TAG@", tag + "c"), uid=NOBODY,
                       cwd=str(plain_workdir.path))
        c = _last(look)
        harness(c["shm"] >= 0 and c["msg"] >= 0 and c["sem"] >= 0 and f"airlock-battery-{tag}c" in c["devshm"],
                f"control: IPC objects not shared between unconfined processes: {c}")
    finally:
        creator.kill()
        creator.wait()
        subprocess.run(["ipcrm", "-M", hex(ctrl_key), "-Q", hex(ctrl_key), "-S", hex(ctrl_key)], capture_output=True)
        Path(f"/dev/shm/airlock-battery-{tag}c").unlink(missing_ok=True)
        Path(f"/dev/mqueue/airlock-battery-{tag}c").unlink(missing_ok=True)

    marker = uniq("e5")
    a = LiveRun("--lang", "python", "-c", E5_CREATE.replace("@KEY@", str(box_key)).replace("@TAG@", tag)
                .replace("@SLEEP@", "4"), marker)

    def created():
        for pid in pids_with_marker(marker, boxed=True):
            for child in descendants(pid):
                try:
                    if Path(f"/proc/{child}/root/dev/shm/airlock-battery-{tag}").exists():
                        return True
                except OSError:
                    pass
        return False

    assert wait_for(created, timeout=15), "box A never created its objects"
    doc_b = box_py(E5_LOOK.replace("@KEY@", str(box_key)).replace("@TAG@", tag))
    doc_a = a.wait(timeout=60)
    assert_exited(doc_a)
    assert_exited(doc_b)
    ra = json.loads(doc_a["stdout"].strip().splitlines()[0])
    rb = _last(doc_b)
    assert ra["shm"] >= 0, f"box A could not even create SysV shm: {ra}"
    seen = {k: rb[k] for k in ("shm", "msg", "sem", "mq") if isinstance(rb[k], int) and rb[k] >= 0}
    assert not seen, f"box B sees box A's IPC objects: {seen}"
    assert f"airlock-battery-{tag}" not in rb["devshm"], "box B sees box A's /dev/shm file"
    assert hex(box_key)[2:] not in rb["ipcs"], f"box B's ipcs lists box A's key: {rb['ipcs']}"
    host_ipcs = subprocess.run(["ipcs", "-a"], capture_output=True, text=True).stdout
    assert hex(box_key)[2:] not in host_ipcs, f"box A's IPC objects outlive the run on the host: {host_ipcs}"
    bad_cg = [l for l in ra["cgroup"].splitlines() if l.split(":", 2)[-1] != "/"]
    assert not bad_cg, f"/proc/self/cgroup leaks host cgroup paths: {bad_cg}"
    assert ra["sethostname"] == -1 and ra["sethostname_errno"] == errno.EPERM, \
        f"sethostname in the box: {ra['sethostname']} errno {ra['sethostname_errno']}"


E6_PY = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 2000 and libc.inotify_init1(0o2000000) >= 0:
    n += 1
print(n)
'''


def _root_share_then_box(code, free, unshare=(), slack=0):
    """CODE, which prints how many of a per-user count it could take, run
    first as the control, in a user namespace of root's making (with
    UNSHARE's namespaces besides): it must take root's last FREE, give or
    take SLACK. Then in a box: what the box took."""
    ctrl = subprocess.run(["unshare", "--user", "--map-root-user", *unshare, PY, "-c", code], capture_output=True,
                          text=True, timeout=60)
    harness(ctrl.returncode == 0 and abs(int(ctrl.stdout) - free) <= slack,
            f"control: a root-made user namespace did not take root's last {free}: {ctrl.stdout!r} {ctrl.stderr!r}")
    doc = box_py(code)
    assert_exited(doc)
    _LAST_BOX["doc"] = doc
    return int(doc["stdout"])


_LAST_BOX = {}   # the last box's document of _root_share_then_box, for its badges


def test_e6_a_box_cannot_take_host_roots_inotify_budget():
    # A box's user namespace is created by host root, and what a process
    # in it opens is charged up to root's per-user counts: the inotify
    # instances (fs.inotify.max_user_instances) are one budget for every
    # box and the host's own root. Root is left FREE of its budget here,
    # by instances this test holds; a process in a user namespace of
    # root's making (the control) takes all of them, and a box must stop
    # short of them.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    held = []
    # (EMFILE is also this process's own fd limit: its instances must run
    # out at root's inotify budget, below it)
    with open("/proc/sys/fs/inotify/max_user_instances") as f:
        budget = int(f.read())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < budget + 64 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (budget + 64, hard))
    harness(budget + 64 <= resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            f"root's inotify budget {budget} is not below this process's fd limit")
    wait_kube_idle()
    try:
        while len(held) <= budget:
            fd = libc.inotify_init1(os.O_CLOEXEC)
            if fd < 0:
                break
            held.append(fd)
        harness(held and ctypes.get_errno() == errno.EMFILE, f"root's inotify budget not reached: {len(held)}")
        free = 20
        for fd in held[-free:]:
            os.close(fd)
        del held[-free:]
        n = _root_share_then_box(E6_PY, free)
        if ON_DOCKER or ON_KUBE:
            # a container's processes are its own host uid's, whose budget
            # this is (and gVisor's Sentry keeps its own): not root's; a
            # pod's are uid 65534's, shared by the node's pods (the badge)
            assert n > free, f"a container took from root's budget: {n}"
            if ON_KUBE:
                assert_kube_uid(_LAST_BOX["doc"])
        else:
            # each box's own namespace allows it 8 (setup.c)
            assert n == 8, f"a box opened {n} inotify instances of root's last {free}"
        # and root still has its own
        fd = libc.inotify_init1(os.O_CLOEXEC)
        assert fd >= 0, "root can open no inotify instance after the box's run"
        os.close(fd)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


E7_PY = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
attr = Attr(0, 10, 8192, 0)
n = 0
while n < 64 and libc.mq_open(b"/airlock-e7-%d" % n, os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr)) >= 0:
    n += 1
print(n)
'''


def test_e7_a_box_cannot_take_host_roots_message_queues():
    # POSIX message queues are charged, as inotify instances are (E6), up
    # to the per-user count of the user that made the box's user namespace:
    # host root's RLIMIT_MSGQUEUE (800 KiB by default, nine queues of the
    # default size) is one budget for every box and root. Root is left
    # room for FREE queues here; a process in a user namespace of root's
    # making (the control, in an IPC namespace of its own) gets exactly
    # those, and a box must get none of them.
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    names = [f"/airlock-e7-root-{os.getpid()}-{i}".encode() for i in range(64)]
    opened = []
    free = 2
    try:
        for name in names:
            fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600, None)
            if fd < 0:
                break
            opened.append((name, fd))
        harness(len(opened) > free and ctypes.get_errno() == errno.EMFILE,
                f"root's message-queue budget not reached: {len(opened)} queues, errno {ctypes.get_errno()}")
        for name, fd in opened[-free:]:
            os.close(fd)
            libc.mq_unlink(name)
        del opened[-free:]
        # (the control in an IPC namespace of its own, as a box)
        n = _root_share_then_box(E7_PY, free, unshare=("--ipc",))
        if ON_DOCKER:
            # a container's processes are its own host uid's, whose budget
            # this is (gVisor's Sentry keeps its own): not root's
            assert n > free, f"a container took from root's message queues: {n}"
        else:
            # a box may queue no bytes (setup.c): none of root's
            assert n == 0, f"a box opened {n} message queues of root's last {free}"
        # and root still has its own
        name = f"/airlock-e7-root-{os.getpid()}-after".encode()
        fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600, None)
        assert fd >= 0, "root can open no message queue after the box's run"
        os.close(fd)
        libc.mq_unlink(name)
    finally:
        for name, fd in opened:
            os.close(fd)
            libc.mq_unlink(name)


E8_HOLD = r'''
import signal, sys, os
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
import ctypes
n = 0
libc = ctypes.CDLL(None, use_errno=True)
class V(ctypes.Union):
    _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
while libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(0)) == 0:
    n += 1
free = int(sys.argv[1])
for _ in range(free):
    signal.sigtimedwait([signal.SIGRTMIN], 0)
print(n, ctypes.get_errno(), flush=True)
sys.stdin.read()
'''

E8_PY = r'''
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
class V(ctypes.Union):
    _fields_ = [("i", ctypes.c_int), ("p", ctypes.c_void_p)]
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
n = 0
while n < 5000 and libc.sigqueue(os.getpid(), signal.SIGRTMIN, V(0)) == 0:
    n += 1
print(n)
'''


def test_e8_a_box_cannot_take_host_roots_queued_signals():
    # Queued signals (RLIMIT_SIGPENDING) are charged the same way: once, a
    # box queued all ~96,000 of root's and root could queue none while it
    # ran. A process of root's here (not this test's: a queued signal is
    # any thread's) holds all of root's but FREE; the control takes those
    # FREE, and a box only its own 256 (setup.c) of them.
    wait_kube_idle()
    free = 1000
    holder = subprocess.Popen([PY, "-c", E8_HOLD, str(free)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        held, err = map(int, holder.stdout.readline().split())
        harness(held > free and err == errno.EAGAIN, f"root's queued-signal budget not reached: {held}, errno {err}")
        # (give or take what root's other processes have pending meanwhile:
        # a SIGCHLD counts while it waits, though it is never refused)
        n = _root_share_then_box(E8_PY, free, slack=64)
        if ON_GVISOR:
            # the Sentry queues a container's signals itself (32 of them),
            # none of them the host kernel's
            assert n > 0, f"a gVisor container queued no signal: {n}"
        elif ON_DOCKER or ON_KUBE:
            # a container's own uid's budget (a pod's: uid 65534's, shared
            # by the node's pods, as the badge says)
            assert n > free, f"a container took from root's queued signals: {n}"
            if ON_KUBE:
                assert_kube_uid(_LAST_BOX["doc"])
        else:
            assert n == 256, f"a box queued {n} signals of root's last {free}"
    finally:
        holder.stdin.close()
        holder.wait(30)
