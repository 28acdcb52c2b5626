"""deploy/airlock.service: its hardening as systemd scores it (offline; PID 1
here is not systemd, so the unit itself is never started), every option
either set or kept off with its reason, and the real service run under what
of the unit can be reproduced without systemd: no_new_privs, the unit's
capability bounding set, its seccomp options (tests/tools/unit_seccomp.c), a
read-only file system but for the state and /run/airlock, mounts over trees
a box does not take (as ProtectHome= makes), a /proc with hidepid. The
options kept off for what they would do to boxes are shown doing it. And
Delegate=yes: the service started in a unit's own cgroups keeps its boxes'
cgroups beneath them."""
import base64
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, need, run_json
from service_util import Service, put_settings, service_binary

UNIT = ROOT / "deploy" / "airlock.service"
# systemd 252 scored the unit 9.2 UNSAFE before it was hardened
EXPOSURE_MAX = 5.0

# Every option `systemd-analyze security` weighs for a root service: each is
# set in the unit or named in one of its comments with why it is off.
OPTIONS = [
    "NoNewPrivileges", "CapabilityBoundingSet", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
    "PrivateMounts", "PrivateUsers", "PrivateNetwork", "ProtectKernelModules", "ProtectKernelTunables",
    "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname", "ProtectProc", "ProcSubset",
    "RestrictNamespaces", "RestrictAddressFamilies", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
    "SystemCallArchitectures", "SystemCallFilter", "MemoryDenyWriteExecute", "IPAddressDeny", "Delegate", "UMask",
]


def unit_settings():
    """The unit's [Service] settings: {name: value} (the last of each)."""
    out, section = {}, None
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            out[k] = v
    return out


def analyze():
    need(shutil.which("systemd-analyze"), "systemd-analyze (package systemd)")
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(UNIT)],
                          capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for airlock\.service: ([0-9.]+) (\w+)", proc.stdout)
    assert m, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    return float(m.group(1)), proc.stdout


def test_unit_scores_below_threshold():
    score, text = analyze()
    assert score <= EXPOSURE_MAX, f"exposure {score} > {EXPOSURE_MAX}:\n{text}"


def test_unit_sets_the_key_options():
    s = unit_settings()
    want = {
        "NoNewPrivileges": "yes", "Delegate": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "ProtectClock": "yes", "SystemCallArchitectures": "native",
        "LockPersonality": "yes", "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "PrivateTmp": "yes",
        "KillMode": "mixed", "RuntimeDirectoryPreserve": "yes", "ProtectProc": "invisible",
    }
    for k, v in want.items():
        assert s.get(k) == v, (k, s.get(k))
    assert set(s["RestrictAddressFamilies"].split()) == {"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"}, s
    caps = set(s["CapabilityBoundingSet"].split())
    assert caps <= {"CAP_SETUID", "CAP_SETGID", "CAP_DAC_OVERRIDE", "CAP_SYS_ADMIN", "CAP_MKNOD",
                    "CAP_NET_BIND_SERVICE"}, caps
    assert s["SystemCallFilter"].startswith("~"), s


def test_every_option_is_set_or_said_why_not():
    text = UNIT.read_text()
    s = unit_settings()
    comments = "\n".join(l for l in text.splitlines() if l.lstrip().startswith("#"))
    for opt in OPTIONS:
        assert opt in s or re.search(rf"\b{opt}=", comments), f"{opt}: neither set nor said why it is off"


def test_syscall_filter_takes_nothing_a_box_may_use():
    """The unit's SystemCallFilter= is inherited by every box: no syscall it
    denies is on the box's own allow-list (src/box/seccomp_policy.c), so a
    box sees the same EPERM it saw before."""
    need(shutil.which("systemd-analyze"), "systemd-analyze (package systemd)")
    groups = unit_settings()["SystemCallFilter"].lstrip("~").split()
    src = (ROOT / "src" / "box" / "seccomp_policy.c").read_text()
    allowed = set(re.findall(r'"([a-z0-9_]+)"', src[src.index("allowed[] = {"):src.index("};", src.index("allowed[] = {"))]))
    assert "read" in allowed and "execve" in allowed, sorted(allowed)[:20]
    denied = set()
    for g in groups:
        out = subprocess.run(["systemd-analyze", "syscall-filter", g], capture_output=True, text=True, timeout=30).stdout
        names = {l.strip() for l in out.splitlines()[1:] if l.strip() and not l.strip().startswith("#")}
        assert names, (g, out)
        denied |= {n.lstrip("@") for n in names}
    assert not denied & allowed, sorted(denied & allowed)


# ------------------------------------------------------ the unit reproduced

WRAPPER = r"""#!/bin/sh
# airlock under what of deploy/airlock.service can be had without systemd
# (test_ops_unit.py): a mount namespace of its own whose mounts are all
# read-only but /proc, /sys and /dev (ProtectSystem=strict), the state
# directory and /run/airlock made writable again (StateDirectory=,
# RuntimeDirectory=), mounts over /home and /root (ProtectHome=), a /proc
# of its own with hidepid=invisible (ProtectProc=); EXTRA may add a mount
# (an option kept off, to show why); then
# no_new_privs, the unit's capability bounding set and its seccomp filters
# (tests/tools/unit_seccomp.c). Under the sanitizer build, LeakSanitizer
# is off in here: it stops the process's threads with ptrace, which the
# unit's filter refuses (@debug), and dies saying so; AddressSanitizer and
# UBSan still watch.
set -e
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
state=
prev=
for a in "$@"; do
    [ "$prev" = --state ] && state=$a
    prev=$a
done
mkdir -p /run/airlock
exec unshare -m --propagation private /bin/sh -e -c '
    bin=$1; state=$2; shift 2
    for m in $(awk "{print \$5}" /proc/self/mountinfo | sort -u); do
        case "$m" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
        mount -o remount,bind,ro "$m" 2>/dev/null || true
    done
    for rw in "$state" /run/airlock; do
        [ -n "$rw" ] || continue
        mount --bind "$rw" "$rw"
        mount -o remount,bind,rw "$rw"
    done
    mount -t tmpfs -o mode=000 tmpfs /home
    mount -t tmpfs -o mode=000 tmpfs /root
    mount -t proc -o hidepid=invisible proc /proc
    @EXTRA@
    exec setpriv --no-new-privs --bounding-set=@CAPS@ @SECCOMP@ "$bin" "$@"
' sh @BIN@ "$state" "$@"
"""


UNIT_SECCOMP = ROOT / "build" / "tests" / "tools" / "unit-seccomp"


def group_names(group):
    """The syscalls of systemd's GROUP (@clock), as systemd-analyze lists them."""
    out = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True, timeout=30).stdout
    names = [l.strip() for l in out.splitlines()[1:] if l.strip() and not l.strip().startswith("#")]
    assert names, (group, out)
    return names


def seccomp_args(extra=()):
    """unit-seccomp and its arguments for the unit's seccomp options (and EXTRA's)."""
    need(shutil.which("systemd-analyze"), "systemd-analyze (package systemd)")
    assert UNIT_SECCOMP.exists(), f"{UNIT_SECCOMP}: build it (ninja -C build)"
    s = unit_settings()
    assert (s["SystemCallArchitectures"], s["LockPersonality"], s["RestrictRealtime"], s["RestrictSUIDSGID"],
            s["ProtectClock"]) == ("native", "yes", "yes", "yes", "yes"), "unit-seccomp installs these always"
    fams = ",".join(str(int(getattr(socket, f))) for f in s["RestrictAddressFamilies"].split())
    deny = set(group_names("@clock"))
    for g in s["SystemCallFilter"].lstrip("~").split():
        deny |= set(group_names(g))
    # a group may name another (@clock inside @privileged): its members are listed too
    return [str(UNIT_SECCOMP), "--families", fams] + [a for n in sorted(deny) if not n.startswith("@")
                                                         for a in ("--deny", n)] + list(extra) + ["--"]


def wrapper(tmp, extra="", seccomp=(), drop_caps=()):
    need(shutil.which("setpriv") and shutil.which("unshare"), "setpriv and unshare (util-linux)")
    need(os.geteuid() == 0, "root")
    keep = [c for c in unit_settings()["CapabilityBoundingSet"].split() if c not in drop_caps]
    caps = ",".join(["-all"] + ["+" + c[len("CAP_"):].lower() for c in keep])
    bin_dir = Path(service_binary()).parent
    path = Path(tmp) / "airlock-unit"
    path.write_text(WRAPPER.replace("@EXTRA@", extra).replace("@CAPS@", caps).replace("@BIN@", str(bin_dir / "airlock"))
                    .replace("@SECCOMP@", " ".join(seccomp_args(seccomp))))
    path.chmod(0o755)
    # `airlock serve` hands over to airlock-server beside the binary it was
    # started as: the wrapper's directory has one
    (Path(tmp) / "airlock-server").symlink_to(bin_dir / "airlock-server")
    return path


# a 32-bit personality, a setuid file: a box may without the unit (errno 0)
CHANGED = ("import ctypes, errno, os\n"
           "libc = ctypes.CDLL(None, use_errno=True)\n"
           "r = libc.personality(0x0008)\n"
           "print('personality', 0 if r >= 0 else ctypes.get_errno())\n"
           "open('/tmp/f', 'w').close()\n"
           "try:\n    os.chmod('/tmp/f', 0o4755); print('suid', 0)\n"
           "except OSError as e:\n    print('suid', e.errno)\n")

RUNS = [
    ("python", "import os\nopen('/out/r.txt', 'w').write('py')\nprint(os.getuid())", "65534"),
    ("node", "console.log(process.getuid())", "65534"),
    ("bash", "id -u; echo sh > /out/s.txt", "65534"),
]


def test_service_runs_under_the_units_restrictions():
    """The real service, started as the unit would be (as far as it can be
    without systemd), runs Python, Node and shell, cold and warm, and
    collects their files; its own view is read-only and without
    privileges to gain."""
    tmp = Path(tempfile.mkdtemp(prefix="airlock-unit-"))
    svc = Service(tmp / "st", config={"warm_pool": "1"}, binary=wrapper(tmp))
    svc.start()
    try:
        for lang, code, uid in RUNS * 2:
            run = svc.run(code, language=lang)
            assert run["state"] == "succeeded", run
            assert run["result"]["stdout"].strip() == uid, run
            assert run["result"]["controls"]["cgroup"]["memory"]["level"] != "not-enforced", run["result"]["controls"]
        names = {a["path"] for a in svc.run(RUNS[0][1])["artifacts"]}
        assert names == {"r.txt"}, names
        # what the unit's filters take from a box (docs/operations.md), and
        # what a box has without them (differential: `airlock run`)
        status, bare = run_json("--lang", "python", "-c", CHANGED)
        assert status == 0 and bare["stdout"].split() == ["personality", "0", "suid", "0"], bare
        run = svc.run(CHANGED)
        assert run["result"]["stdout"].split() == ["personality", "1", "suid", "1"], run
        # a box killed at its deadline (its processes are another uid's)
        run = svc.run("import time\nprint('x', flush=True)\ntime.sleep(30)", limits={"timeout_s": 1})
        assert run["state"] == "timed_out", run
        # a run with the egress proxy (its listener made inside the box's namespace)
        put_settings(svc, network_allowed=["offline", "internet"])
        run = svc.run("import socket\nsocket.create_connection(('127.0.0.1', 3128), timeout=5)\nprint('proxy')",
                      network="internet")
        assert run["state"] == "succeeded" and run["result"]["stdout"] == "proxy\n", run
        # a file staged in, an artifact of one run staged into the next of its thread
        first = svc.run("print(open('/work/in.txt').read()); open('/out/a.txt', 'w').write('from one')",
                        files=[{"name": "in.txt", "content_base64": base64.b64encode(b"staged").decode()}],
                        thread_id="t1")
        assert first["state"] == "succeeded" and first["result"]["stdout"] == "staged\n", first
        second = svc.run("print(open('/work/documents/a.txt').read())", thread_id="t1")
        assert second["state"] == "succeeded" and second["result"]["stdout"] == "from one\n", second
        # a service killed with a box running: the next start recovers, and runs
        status, _, doc = svc.post_run("import time; time.sleep(60)")
        svc.wait_state(doc["id"], {"running"})
        svc.kill9()
        svc.start()
        assert svc.wait_state(doc["id"], {"error"})["error"]["code"] == "lost"
        assert svc.run("print('again')")["result"]["stdout"] == "again\n"
        pid = svc.proc.pid
        status = Path(f"/proc/{pid}/status").read_text()
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
        assert re.search(r"^Seccomp:\s+2$", status, re.M), status  # a filter
        bnd = int(re.search(r"^CapBnd:\s+([0-9a-f]+)$", status, re.M).group(1), 16)
        # CAP_SYS_MODULE, CAP_SYS_TIME, CAP_KILL, CAP_CHOWN, CAP_NET_ADMIN
        assert not bnd & (1 << 16 | 1 << 25 | 1 << 5 | 1 << 0 | 1 << 12), hex(bnd)
        with open(f"/proc/{pid}/mountinfo") as f:
            root = [l for l in f if l.split()[4] == "/"][0]
        assert " ro," in root or " ro " in root, root
    finally:
        assert svc.stop() == 0, svc.log_tail()
        log = svc.log_path.read_text(errors="replace")
        assert '"level":"error"' not in log, log[-3000:]
    shutil.rmtree(tmp, ignore_errors=True)


# Options kept off, each with what it does that can be done here, and what
# then becomes of a run: differential with the test above, whose only
# difference is that mount.
KEPT_OFF = {
    # a read-only /proc/sys: the box cannot set its namespace's limit
    "ProtectKernelTunables": dict(mount="mount --bind -o ro /proc/sys /proc/sys", state="error",
                                  message="max_user_namespaces"),
    # a mount over /proc/kmsg: the box may not mount a /proc of its own
    "ProtectKernelLogs": dict(mount="mount --bind /dev/null /proc/kmsg", state="error", message="fsmount proc"),
    # /sys/fs/cgroup read-only: the run goes ahead with no cgroup limits
    "ProtectControlGroups": dict(mount='for m in $(awk "{print \\$5}" /proc/self/mountinfo | grep ^/sys/fs/cgroup); '
                                       'do mount -o remount,bind,ro $m; done', state="succeeded"),
    # a mount inside /usr, as it makes over /usr/lib/modules (this host has
    # none: another tree of /usr stands in): the box's /usr cannot be taken
    "ProtectKernelModules": dict(mount="mount -t tmpfs -o mode=000 tmpfs /usr/share/doc", state="error",
                                 message="clone"),
    # it takes CAP_MKNOD: the box's parent cannot make its /dev nodes
    "PrivateDevices": dict(drop_caps=("CAP_MKNOD",), state="error", message="mknod"),
    # its filter refuses sethostname(): the box sets its own
    "ProtectHostname": dict(seccomp=("--deny", "sethostname", "--deny", "setdomainname"), state="error",
                            message="sethostname"),
    # its filter refuses writable executable memory: Node's JIT needs it
    "MemoryDenyWriteExecute": dict(seccomp=("--mdwe",), state="node"),
}


@pytest.mark.parametrize("option", sorted(KEPT_OFF))
def test_option_kept_off_would_break_boxes(option):
    spec = KEPT_OFF[option]
    state, message = spec["state"], spec.get("message")
    assert re.search(rf"^# {option}=no:", UNIT.read_text(), re.M), option
    tmp = Path(tempfile.mkdtemp(prefix="airlock-unit-"))
    svc = Service(tmp / "st", binary=wrapper(tmp, extra=spec.get("mount", ""), seccomp=spec.get("seccomp", ()),
                                             drop_caps=spec.get("drop_caps", ())))
    svc.start()
    try:
        if state == "node":
            # Python runs; Node, whose JIT maps writable executable memory, does not
            assert svc.run("print(1)")["state"] == "succeeded"
            run = svc.run("console.log(1)", language="node")
            assert run["state"] == "failed" and "V8_Fatal" in run["result"]["stderr"], run
            return
        run = svc.run("print(1)")
        assert run["state"] == state, run
        if message:
            assert message in run["error"]["message"], run
        else:
            assert run["result"]["controls"]["cgroup"]["memory"]["level"] == "not-enforced", run["result"]["controls"]
    finally:
        svc.stop()
    shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------ Delegate=yes

DELEGATE_WRAPPER = r"""#!/bin/sh
# airlock started in a unit's own cgroups, as systemd starts a unit with
# Delegate=yes (test_ops_unit.py): this process enters each, then execs it.
for d in @DIRS@; do echo $$ > "$d/cgroup.procs"; done
exec @BIN@ "$@"
"""

V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")


def _cgroup_lines():
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctls, path = line.split(":", 2)
        for c in (ctls.split(",") if ctls else [""]):
            out[c] = path
    return out


def _v1_mounts():
    """{controller: mount point} of the v1 hierarchies airlock uses."""
    out = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _, opts = post.split()[:3]
        if fstype == "cgroup":
            for c in V1_CONTROLLERS:
                if c in opts.split(","):
                    out.setdefault(c, pre.split()[4])
    return out


def _delegation(mode, unit):
    """(the unit's cgroups to enter, where its boxes' cgroups must appear,
    the v2 leaf the daemon must move into or None, extra environment,
    whether limits can hold) for MODE."""
    lines = _cgroup_lines()
    if mode == "host":
        v1 = _v1_mounts()
        if "memory" in v1 and "pids" in v1:
            # each hierarchy: the unit beneath this process's own cgroup (a slice)
            tops = [Path(m + lines.get(c, "/").rstrip("/")) / unit for c, m in v1.items()]
            return tops, Path(v1["memory"] + lines.get("memory", "/").rstrip("/")) / unit / "airlock", None, {}, True
        root = Path("/sys/fs/cgroup")
        ctl = root / "cgroup.controllers"
        need(ctl.exists() and {"memory", "pids"} <= set(ctl.read_text().split()),
             "cgroup v1 memory and pids, or cgroup v2 with them at /sys/fs/cgroup")
        # v2: at the root, which alone may hold processes and give controllers
        return [root / unit], root / unit / "airlock", root / unit / "daemon", {}, True
    # "v2-bare": a hybrid host's cgroup2 (no controllers: they are bound to
    # v1), the v2 backend forced onto it: the move into the leaf and the
    # rooting of the helpers' boxes run, the limits cannot
    root = Path("/sys/fs/cgroup/unified")
    need((root / "cgroup.procs").exists() and lines.get("", "/") == "/",
         "a hybrid host's cgroup2 at /sys/fs/cgroup/unified with this process at its root (a pure v2 host runs "
         "the host case on v2)")
    env = {"AIRLOCK_CGROUP": "v2", "AIRLOCK_CGROUP_ROOT": str(root)}
    return [root / unit], root / unit / "airlock", root / unit / "daemon", env, False


@pytest.mark.parametrize("mode", ["host", "v2-bare"])
def test_a_delegated_unit_keeps_its_boxes_cgroups_in_its_own_subtree(tmp_path, mode):
    """With AIRLOCK_CGROUP_PARENT=self (the unit's Environment=) the boxes'
    cgroups are made beneath the service's own cgroup (what systemd's
    Delegate=yes gives a unit), not at the root of the hierarchy; on v2 the
    daemon first moves into a leaf of its own; the limits hold there, and
    nothing is left when the service stops. Here the unit's cgroup is made
    by the test, as systemd would make it."""
    assert unit_settings().get("Environment") == "AIRLOCK_CGROUP_PARENT=self", unit_settings()
    need(os.geteuid() == 0, "root")
    unit = f"airlock-test-{os.getpid()}.service"
    tops, boxes_under, leaf, env, limits = _delegation(mode, unit)
    made = []
    try:
        for d in tops:
            d.mkdir(exist_ok=True)
            made.append(d)
        script = tmp_path / "airlock-delegated"
        bin_dir = Path(service_binary()).parent
        script.write_text(DELEGATE_WRAPPER.replace("@DIRS@", " ".join(f'"{d}"' for d in tops))
                          .replace("@BIN@", str(bin_dir / "airlock")))
        script.chmod(0o755)
        (tmp_path / "airlock-server").symlink_to(bin_dir / "airlock-server")
        svc = Service(tmp_path / "st", binary=script, extra_env={"AIRLOCK_CGROUP_PARENT": "self", **env})
        svc.start()
        try:
            if leaf:
                assert str(svc.proc.pid) in leaf.joinpath("cgroup.procs").read_text().split(), \
                    (leaf, leaf.joinpath("cgroup.procs").read_text())
            status, _, doc = svc.post_run("import time\nprint('up', flush=True)\ntime.sleep(3)")
            assert status == 201, doc
            svc.wait_state(doc["id"], {"running"})
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not list(boxes_under.glob("box-*")):
                time.sleep(0.05)
            assert list(boxes_under.glob("box-*")), (boxes_under, list(tops[0].iterdir()))
            assert svc.wait_state(doc["id"], {"succeeded"})["state"] == "succeeded"
            if limits:
                run = svc.run("x = []\nfor i in range(40):\n    x.append(bytearray(16 << 20))\nprint('survived')",
                              limits={"memory_mb": 64})
                assert run["state"] == "killed" and run["result"]["reason"] == "memory", run
        finally:
            assert svc.stop() == 0, svc.log_tail()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and list(boxes_under.glob("box-*")):
            time.sleep(0.1)
        assert not list(boxes_under.glob("box-*")), list(boxes_under.glob("box-*"))
    finally:
        for d in reversed(made):
            for sub in sorted(d.rglob("*"), key=lambda p: -len(p.parts)):
                if sub.is_dir():
                    sub.rmdir()
            d.rmdir()


def test_unit_parses_cleanly(tmp_path):
    """systemd-analyze verify has nothing to say of the unit (an unknown or
    misspelt option would be ignored by systemd, silently weakening it),
    its binary's path pointed at this build's."""
    need(shutil.which("systemd-analyze"), "systemd-analyze (package systemd)")
    unit = tmp_path / "airlock.service"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/airlock", str(service_binary())))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip() and not proc.stdout.strip(), (proc.stdout, proc.stderr)
