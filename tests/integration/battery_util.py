"""Helpers for the hostile battery (SECURITY.md section 5), test_battery_*.py.

Every case is differential: the same script or probe runs first unconfined
on the host (the control, `host_*`), where the attack must *work*, and then
in the box (`box_*`), where it must be contained.  A control that does not
show the attack working is a broken harness, never a pass (`harness()`).
"""
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import AIRLOCK, DRIVER, PROBE, RUNTIME, airlock, need, run_code, run_json  # noqa: F401

# The driver the battery runs on (conftest.py): where a driver cannot hold a
# case as the native box does, the case asserts that the driver's badge
# says so, rather than being skipped.
ON_DOCKER = DRIVER == "docker"


def badge(doc, control):
    """The result's badge of CONTROL: (level, detail)."""
    c = (doc.get("controls") or {}).get(control) or {}
    if not c and control in ("memory", "pids", "cpu"):
        c = ((doc.get("controls") or {}).get("cgroup") or {}).get(control) or {}
    return c.get("level"), c.get("detail") or ""


# The kubernetes driver (through the API double in make check): the pass
# runs every pod under airlock's own seccomp profile as a Localhost profile
# (kube_pass.SECCOMP, installed in the double's kubelet seccomp root), so
# the filter's cases hold through the pod as on docker; the badge names it.
ON_KUBE = DRIVER == "kubernetes"


def assert_kube_filter(doc):
    """On the kubernetes driver: which filter holds the script, by its badge.
    Under airlock's Localhost profile (the kubernetes pass installs
    `airlock seccomp-profile` in the double's seccomp root and names it:
    kube_pass.py) it is airlock's own policy, as on docker: False, and the
    case goes on to assert the filter's answers. Under RuntimeDefault the
    runtime's default filters it, not airlock's policy, and the cluster's
    enforcement is unconfirmed from here: the badge says so (asserted), and
    True: the case ends there."""
    level, detail = badge(doc, "seccomp")
    assert doc["box"]["driver"] == "kubernetes", doc["box"]
    if detail.startswith("seccompProfile Localhost ") and "airlock's profile" in detail:
        assert level in ("unconfirmed", "boundary-conditional"), (level, detail)
        return False
    assert level == "unconfirmed" and "RuntimeDefault" in detail and "not airlock's own policy" in detail, \
        (level, detail)
    return True


def assert_kube_proc(doc):
    """On the kubernetes driver: /proc and /sys are as the container runtime
    masks them (a pod spec cannot add a masked path: procMount is Default or
    Unmasked), not the native box's pid-only /proc; the isolation badge says
    that the node's /proc/sys and /proc/key-users are readable, read-only."""
    level, detail = badge(doc, "userns")
    assert "a pod cannot mask more" in detail and "/proc/sys" in detail and "/proc/key-users" in detail, \
        (level, detail)
    assert doc["box"]["driver"] == "kubernetes", doc["box"]


def assert_kube_uid(doc):
    """On the kubernetes driver: the pod's processes are uid 65534 on the
    node, in no user namespace of airlock's, shared by every sandbox pod of
    the node (runAsUser: the restricted profile's), not a uid of the run's
    own: no host uid is reported, and the isolation badge says so."""
    level, detail = badge(doc, "userns")
    assert "uid 65534" in detail and "no user namespace of airlock's" in detail and "a pod of its own" in detail, \
        (level, detail)
    assert not doc["box"].get("host_uid") and doc["controls"].get("host_uid_unique") is False, doc


def wait_kube_idle(timeout=30):
    """On the kubernetes driver: wait until the double holds no pod and the
    test dockerd no container of its. A pod is deleted as its run's result
    is reported (the badge), and its containers' runtime processes, root's
    on this host, end a moment later, giving back what they held of root's
    per-user counts: a case that measures those counts starts after them."""
    if not ON_KUBE:
        return
    import docker_util
    import kube_pass
    kube = kube_pass.cluster()[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = docker_util.docker("ps", "-aq", "--filter", f"label=kube-double={kube.port}").stdout.split()
        doc = kube.pods()
        pods = doc.get("pods", []) if isinstance(doc, dict) else doc
        if not pods and not left:
            time.sleep(0.5)    # the shims' own exit
            return
        time.sleep(0.2)
    raise AssertionError(f"the double's pods did not end in {timeout} s: {kube.pods()}")


# gVisor (docker with runsc): the script's system calls are served by
# gVisor's Sentry, and this runsc ignores the OCI seccomp profile, so
# airlock's filter is not there to refuse what the native box refuses.
ON_GVISOR = ON_DOCKER and RUNTIME == "runsc"


def assert_sentry_serves(doc):
    """Under gVisor: the badges say that airlock's seccomp policy is not
    loaded and that gVisor's Sentry, not this host's kernel, serves the
    script's system calls. A case the filter holds on the native box and
    runc asserts this instead of the filter's answer."""
    level, detail = badge(doc, "seccomp")
    assert level == "not-enforced" and "ignores the OCI seccomp profile" in detail, (level, detail)
    level, detail = badge(doc, "userns")
    assert level == "boundary" and "Sentry" in detail and "not by this host's kernel" in detail, (level, detail)

NOBODY = 65534
# A uid of its own for controls that signal "every process of my uid".
CONTROL_UID = 64321
KERNEL = platform.release()
CONTROL_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
PY = "/usr/bin/python3"

# errnos that mean "a syscall filter or missing privilege stopped it"
DENIED = {"EPERM", "ENOSYS"}


def harness(cond, msg):
    """Fail as a broken harness when the control run did not show the attack."""
    if not cond:
        pytest.fail(f"FAIL (harness): control run did not show the attack working: {msg}")


def uniq(prefix="airlock-battery"):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------ workdirs


class Workdir:
    """A world-writable scratch directory for control runs, holding ./probe."""

    def __init__(self, probe=None):
        self.path = Path(tempfile.mkdtemp(prefix="airlock-battery-"))
        os.chmod(self.path, 0o777)
        if probe is not None:
            dst = self.path / "probe"
            shutil.copy(probe, dst)
            os.chmod(dst, 0o755)

    def __truediv__(self, other):
        return self.path / other

    def __str__(self):
        return str(self.path)

    def __fspath__(self):
        return str(self.path)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


@pytest.fixture
def workdir(probe):
    w = Workdir(probe)
    yield w
    w.cleanup()


@pytest.fixture
def plain_workdir():
    w = Workdir()
    yield w
    w.cleanup()


@pytest.fixture
def outdir():
    d = Path(tempfile.mkdtemp(prefix="airlock-battery-out-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ----------------------------------------------------------- host side


def as_uid(argv, uid):
    if uid is None:
        return list(argv)
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv]


def host_run(argv, uid=None, cwd=None, env=None, timeout=60, input=None, pass_fds=()):
    """Run argv unconfined on the host (the control), as uid if given."""
    return subprocess.run(as_uid(argv, uid), cwd=cwd, env=env or CONTROL_ENV,
                          capture_output=True, timeout=timeout, input=input,
                          pass_fds=pass_fds)


def host_bash(script, uid=None, cwd=None, **kw):
    return host_run(["bash", "-c", script], uid=uid, cwd=cwd, **kw)


def host_py(code, uid=None, cwd=None, **kw):
    """Run a python script unconfined (control).  The file lives in cwd."""
    d = Path(cwd) if cwd else Path(tempfile.mkdtemp(prefix="airlock-battery-py-"))
    os.chmod(d, 0o777)
    f = d / f"control-{uuid.uuid4().hex[:8]}.py"
    f.write_text(code)
    os.chmod(f, 0o644)
    try:
        return host_run([PY, str(f)], uid=uid, cwd=str(d), **kw)
    finally:
        f.unlink(missing_ok=True)
        if not cwd:
            shutil.rmtree(d, ignore_errors=True)


def out_text(proc_or_doc):
    if isinstance(proc_or_doc, dict):
        return proc_or_doc.get("stdout") or ""
    return proc_or_doc.stdout.decode(errors="replace")


def last_json(text):
    """The last line of text that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise AssertionError(f"no JSON result line in output: {text[-3000:]!r}")


def probe_lines(text):
    """Probe output -> {name: record} (names are unique per sub-command)."""
    res = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        res[rec.get("name")] = rec
    return res


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def proc_status(pid):
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return {k: v.strip() for k, _, v in (l.partition(":") for l in text.splitlines())}


def host_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pids_of_uid(uid):
    """Host processes whose real, effective, saved or fs uid is uid."""
    found = []
    for pid in host_pids():
        st = proc_status(pid)
        if st and "Uid" in st and str(uid) in st["Uid"].split():
            found.append((pid, st.get("Name"), st.get("State")))
    return found


def in_child_pidns(pid):
    st = proc_status(pid)
    return bool(st) and len(st.get("NSpid", "").split()) > 1


def pids_with_marker(marker, boxed=False):
    """Host pids whose cmdline holds marker (only those in a child pid ns if boxed)."""
    found = []
    m = marker.encode()
    for pid in host_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if m in cmd and pid != os.getpid() and (not boxed or in_child_pidns(pid)):
            found.append(pid)
    return found


def descendants(root):
    """root and every host process below it (by PPid)."""
    children = {}
    for pid in host_pids():
        st = proc_status(pid)
        if st and "PPid" in st:
            children.setdefault(int(st["PPid"]), []).append(pid)
    out, pending = [], [root]
    while pending:
        p = pending.pop()
        out.append(p)
        pending.extend(children.get(p, []))
    return out


# ----------------------------------------------------------- box side


def box_bash(script, *extra, probe=None, timeout=120):
    """bash script in the box; probe (a path) is staged as ./probe."""
    args = []
    if probe is not None:
        args += ["--in", str(probe)]
    return run_code("bash", script, *args, *extra, timeout=timeout)


def box_py(code, *extra, timeout=120):
    return run_code("python", code, *extra, timeout=timeout)


def probe_cmd(*args):
    return "[ -x ./probe ] || chmod +x ./probe; ./probe " + " ".join(shlex.quote(str(a)) for a in args)


def box_probe(probe, *args, extra=(), timeout=120):
    doc = box_bash(probe_cmd(*args), *extra, probe=probe, timeout=timeout)
    return doc, probe_lines(doc.get("stdout") or "")


def host_probe(workdir, *args, uid=None, timeout=60, pass_fds=()):
    proc = host_run(["./probe", *map(str, args)], uid=uid, cwd=str(workdir.path),
                    timeout=timeout, pass_fds=pass_fds)
    return proc, probe_lines(proc.stdout.decode(errors="replace"))


def describe(doc):
    keep = {k: doc.get(k) for k in ("exit_code", "signal", "reason", "error", "wall_ms")}
    return (f"{keep} stdout={str(doc.get('stdout'))[-1500:]!r} "
            f"stderr={str(doc.get('stderr'))[-1500:]!r}")


def assert_exited(doc, code=0):
    assert doc.get("reason") == "exited" and doc.get("exit_code") == code, \
        f"box run did not exit {code} normally: {describe(doc)}"


def host_uid_of(doc):
    return (doc.get("box") or {}).get("host_uid")


def cgroup_paths(doc):
    """Absolute host paths of the run's cgroup(s), from doc['box']['cgroup']."""
    v = (doc.get("box") or {}).get("cgroup")
    flat = []

    def walk(x):
        if isinstance(x, str):
            flat.append(x)
        elif isinstance(x, dict):
            for y in x.values():
                walk(y)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)

    walk(v)
    out = []
    for p in flat:
        if p.startswith("/sys/fs/cgroup/"):
            rel = Path(p).relative_to("/sys/fs/cgroup")
            out.append(Path(p))
            # cgroup v1: the same box directory under every other hierarchy
            if len(rel.parts) > 1:
                for base in sorted(Path("/sys/fs/cgroup").iterdir()):
                    cand = base / Path(*rel.parts[1:])
                    if cand not in out:
                        out.append(cand)
        elif p.startswith("/"):
            for base in [Path("/sys/fs/cgroup")] + sorted(Path("/sys/fs/cgroup").glob("*")):
                out.append(base / p.lstrip("/"))
    return out


def _reused(pid, doc):
    """Whether PID, a process of a box's host uid after that box's run, is of
    a box another test run started since (another xdist worker's, another
    pytest's: box uids are taken lowest first, so the one just freed is the
    next given). Such a box, and the cgroup named by the uid, is not this
    run's leftover. Told by its ancestry (service_util._foreign); a leftover
    of ours is the orphan of its box or still under our own process. A box
    on docker (DOC's driver) is the container's processes, under its shim:
    there the check is left as it was (the docker passes run serially)."""
    if (doc.get("box") or {}).get("driver", "docker" if ON_DOCKER else "native") == "docker":
        return False
    import service_util
    return service_util._foreign(pid)


def assert_box_gone(doc, markers=()):
    """After a run: no process of the box's host uid, cgroup removed."""
    if (doc.get("box") or {}).get("driver") == "kubernetes":
        # a pod: no host uid or cgroup of airlock's to read (its containers
        # are the node's); what the run started must be gone all the same
        # (the double's containers are this host's processes)
        # what the run started must be gone all the same (the double's
        # containers are this host's processes): the pod is deleted at the
        # end and its kubelet kills what is left within seconds of the
        # result, not before it is reported, and the isolation badge says so
        level, detail = badge(doc, "userns")
        assert "the kubelet kills what is left within seconds of the result" in detail, (level, detail)
        deadline = time.monotonic() + 15
        for m in markers:
            while (lm := pids_with_marker(m)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not lm, f"processes carrying marker {m} survive the run's pod: {lm}"
        return
    uid = host_uid_of(doc)
    assert isinstance(uid, int) and uid > 0, f"box.host_uid missing or root: {doc.get('box')}"
    left = [p for p in pids_of_uid(uid) if not _reused(p[0], doc)]
    assert not left, f"processes of the box's host uid {uid} survive the run: {left}"
    for m in markers:
        lm = pids_with_marker(m)
        assert not lm, f"processes carrying marker {m} survive the run: {lm}"
    paths = cgroup_paths(doc)
    assert paths, f"box.cgroup does not name the run's cgroup: {doc.get('box')}"
    reused = any(_reused(p[0], doc) for p in pids_of_uid(uid))
    alive = [str(p) for p in paths if p.exists() and p != Path("/sys/fs/cgroup")
             and p.parent != Path("/sys/fs/cgroup") and not reused]
    assert not alive, f"the run's cgroup is not removed: {alive}"


def kill_pids(pids):
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


# ------------------------------------------------ live runs (Popen)


class LiveRun:
    """`airlock run --json ...` in the background, polling its VmHWM."""

    def __init__(self, *args, env=None, stdin=subprocess.DEVNULL, **popen_kw):
        self.argv = [str(AIRLOCK), "run", "--json", *map(str, args)]
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=stdin, env=env, **popen_kw)
        self.hwm_kb = 0
        self.t0 = time.monotonic()
        # drain both pipes while polling: the JSON document can exceed a pipe buffer
        self._out, self._err = [], []
        self._threads = [threading.Thread(target=self._drain, args=(self.proc.stdout, self._out), daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, self._err), daemon=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _drain(f, sink):
        for chunk in iter(lambda: f.read(65536), b""):
            sink.append(chunk)

    def poll_hwm(self):
        st = proc_status(self.proc.pid)
        if st and "VmHWM" in st:
            self.hwm_kb = max(self.hwm_kb, int(st["VmHWM"].split()[0]))

    def wait(self, timeout=120, poll=0.05, on_poll=None):
        """Wait for the run, polling airlock's VmHWM; returns the JSON doc."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.poll_hwm()
            if on_poll:
                on_poll()
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"airlock did not return within {timeout}s "
                                     f"(DAEMON-OK violated): {b''.join(self._err)[-2000:]!r}")
            time.sleep(poll)
        for t in self._threads:
            t.join()
        out, err = b"".join(self._out), b"".join(self._err)
        self.wall = time.monotonic() - self.t0
        self.stdout_raw = out
        self.stderr_raw = err
        try:
            return json.loads(out)
        except ValueError as e:
            raise AssertionError(f"not JSON (exit {self.proc.returncode}): {out[:2000]!r} "
                                 f"stderr={err[:2000]!r}") from e

    def communicate_with_hwm(self, timeout=120):
        return self.wait(timeout=timeout)


def wait_for(pred, timeout=10.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def host_listening_tcp_ips():
    """The host's own non-loopback addresses."""
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True).stdout
    ips = []
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            ips.append(("4", parts[parts.index("inet") + 1].split("/")[0]))
        if "inet6" in parts:
            ips.append(("6", parts[parts.index("inet6") + 1].split("/")[0]))
    return [(f, a) for f, a in ips if a not in ("127.0.0.1", "::1") and not a.startswith("fe80")]
