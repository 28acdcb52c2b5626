"""Hostile battery, group C: namespaces and kernel attack surface (SECURITY.md 5.C)."""
import json
import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from battery_util import (ON_DOCKER, ON_GVISOR, ON_KUBE, assert_kube_proc, RUNTIME, assert_sentry_serves, badge, KERNEL, NOBODY, LiveRun, assert_exited, box_bash, box_probe, harness,
                          host_bash, host_probe, host_py, pids_with_marker, sha256_file, uniq,
                          wait_for, workdir, plain_workdir)  # noqa: F401


def _py(code):
    return "exec python3 - <<'EOF'\n" + code + "\nEOF\n"


C1_SH = r'''
unshare -UrmC true 2>/tmp/unshare.err; echo "userns_mnt_cgroup=$?"; grep -q "Operation not permitted" /tmp/unshare.err && echo "unshare_eperm=1"
unshare -Urn true 2>/dev/null; echo "userns_net=$?"
unshare -UrmC sh -c 'mkdir -p /tmp/cg && mount -t cgroup -o rdma cgroup /tmp/cg && echo /tmp/x > /tmp/cg/release_agent' 2>/dev/null; echo "cgroup_chain=$?"
python3 - <<'EOF'
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctypes.set_errno(0)
fd = libc.syscall(ctypes.c_long(430), b"ext4", 0)
e = ctypes.get_errno()
print("fsopen=" + ("ok" if fd >= 0 else errno.errorcode[e]))
if fd >= 0:
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(431), fd, 1, b"source", b"/dev/null", 0)
    print("fsconfig=" + ("ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]))
    libc.close(fd)
EOF
if command -v nft >/dev/null; then unshare -Urn nft add table ip airlock_battery 2>/dev/null; echo "nft=$?"; fi
if [ -r /proc/sys/user/max_user_namespaces ]; then echo "max_userns=$(cat /proc/sys/user/max_user_namespaces)"; else echo "max_userns=absent"; fi
'''


def _kv(text):
    return dict(l.split("=", 1) for l in text.splitlines() if "=" in l)


def test_c1_userns_cgroup_fsconfig_chains(plain_workdir):
    # control, unprivileged: step 1 (a user namespace with mount/net) works on the host
    ctrl = host_bash("unshare -Urm true; echo userns_mnt=$?; unshare -Urn true; echo userns_net=$?",
                     uid=NOBODY, cwd=str(plain_workdir.path))
    c = _kv(ctrl.stdout.decode())
    harness(c.get("userns_mnt") == "0" and c.get("userns_net") == "0",
            f"control: unprivileged unshare -Urm/-Urn on the host: {ctrl.stdout!r} {ctrl.stderr!r}")
    ctrl = host_py("import ctypes\nlibc=ctypes.CDLL(None,use_errno=True)\nlibc.syscall.restype=ctypes.c_long\n"
                   "fd=libc.syscall(ctypes.c_long(430), b'ext4', 0)\nprint(fd)\n")
    harness(int(ctrl.stdout.decode().split()[-1]) >= 0, f"control: fsopen(ext4) as root: {ctrl.stdout!r}")
    host_max = Path("/proc/sys/user/max_user_namespaces").read_text().strip()
    harness(host_max != "0", "host max_user_namespaces is 0 already")

    doc = box_bash(C1_SH)
    assert_exited(doc)
    r = _kv(doc["stdout"])
    assert r.get("userns_mnt_cgroup") not in (None, "0"), f"unshare -UrmC worked in the box: {r}"
    assert r.get("unshare_eperm") == "1", f"unshare did not fail with EPERM at step 1: {r}"
    if ON_GVISOR:
        # no filter under this runsc: a user namespace with a network one
        # is made, but by gVisor's Sentry, of its own, and the badges say so;
        # the chain's later steps (cgroup mount, fsopen) still fail there
        assert_sentry_serves(doc)
    else:
        assert r.get("userns_net") not in (None, "0"), f"unshare -Urn worked in the box: {r}"
    assert r.get("cgroup_chain") not in (None, "0"), f"cgroup release_agent chain worked: {r}"
    assert r.get("fsopen") == "EPERM" or (ON_GVISOR and r.get("fsopen") == "ENOSYS"), \
        f"fsopen(ext4) in the box: {r.get('fsopen')} (want EPERM)"
    assert r.get("nft", "1") != "0", "nft add table worked in the box"
    if ON_KUBE:
        # the runtime's /proc/sys: the node's value, readable and read-only
        # (a pod cannot mask it, and the badge says so); no namespace is
        # made all the same: unshare failed above (the filter, no caps)
        assert r.get("max_userns") == host_max, r
        assert_kube_proc(doc)
    else:
        assert r.get("max_userns") in ("0", "absent"), \
            f"user.max_user_namespaces inside the box is {r.get('max_userns')} (want 0)"

    # from the host: the box's user namespace has max_user_namespaces = 0; the control is a
    # plain user namespace of the host, where the value is not 0
    sl = subprocess.Popen(["unshare", "-U", "sleep", "5"])
    try:
        time.sleep(0.3)
        cv = subprocess.run(["nsenter", "--user", "--preserve-credentials", "--target", str(sl.pid),
                             "cat", "/proc/sys/user/max_user_namespaces"], capture_output=True, text=True)
    finally:
        sl.kill()
        sl.wait()
    harness(cv.returncode == 0 and cv.stdout.strip() not in ("", "0"),
            f"control: nsenter read of a fresh userns's max_user_namespaces: {cv.stdout!r} {cv.stderr!r}")
    marker = uniq("c1")
    # the marker goes in the script's argv: PID 1's command line is blanked
    run = LiveRun("--lang", "bash", "-c", "sleep 3", marker)
    try:
        pids = wait_for(lambda: pids_with_marker(marker, boxed=True), timeout=10)
        assert pids, "could not find the box process on the host"
        seen = subprocess.run(["nsenter", "--user", "--preserve-credentials", "--target", str(pids[0]), "cat",
                               "/proc/sys/user/max_user_namespaces"], capture_output=True, text=True)
    finally:
        doc = run.wait(timeout=30)
    assert seen.returncode == 0, f"nsenter into the box userns failed: {seen.stderr}"
    assert seen.stdout.strip() == "0", \
        f"user.max_user_namespaces in the box's user namespace is {seen.stdout.strip()} (want 0)"


C2_PY = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def call(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(L(nr), *a)
    return r if r >= 0 else errno.errorcode[ctypes.get_errno()]
out = {
  "join_session": call(250, L(1), None),
  "add_key": call(248, b"user", b"airlock-battery", b"v", L(1), L(-3)),
  "request_key": call(249, b"user", b"airlock-battery-none", None, L(-3)),
}
for p in ("/proc/keys", "/proc/key-users"):
    try:
        out[p] = open(p).read()
    except OSError as e:
        out[p] = errno.errorcode[e.errno]
print(json.dumps(out))
'''


def test_c2_keyrings(plain_workdir):
    ctrl = host_py(C2_PY, uid=NOBODY, cwd=str(plain_workdir.path))
    c = json.loads(ctrl.stdout.decode().splitlines()[-1])
    harness(isinstance(c["join_session"], int) and isinstance(c["add_key"], int)
            and c["request_key"] == "ENOKEY" and "airlock-battery" in c["/proc/keys"],
            f"control (nobody): {c}")
    doc = box_bash(_py(C2_PY))
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    if ON_GVISOR:
        # no filter under this runsc (badges): the keyrings are the Sentry's,
        # not this host kernel's (not namespaced there), and it refuses them
        assert_sentry_serves(doc)
    for k in ("join_session", "add_key", "request_key"):
        assert r[k] == "EPERM" or (ON_GVISOR and r[k] in ("EACCES", "ENOSYS")), \
            f"{k} in the box: {r[k]} (want EPERM)"
    for p in ("/proc/keys", "/proc/key-users"):
        if ON_KUBE and p == "/proc/key-users":
            # the runtime masks /proc/keys but not key-users (counts per uid,
            # no key): a pod cannot mask it, and the badge says so
            assert_kube_proc(doc)
            continue
        assert r[p] in ("ENOENT", "EACCES", "") or not r[p].strip(), f"{p} readable in the box: {r[p][:300]!r}"


C3_PY = r'''
import ctypes, errno, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
ctypes.set_errno(0)
fd = libc.syscall(ctypes.c_long(425), ctypes.c_long(8), params)
print(json.dumps({"io_uring_setup": fd if fd >= 0 else errno.errorcode[ctypes.get_errno()]}))
'''
C3_NODE = r'''
const fs = require('fs');
fs.writeFileSync('/tmp/c3', 'x'.repeat(200000));
fs.promises.readFile('/tmp/c3').then(b => fs.promises.writeFile('/tmp/c3b', b))
  .then(() => fs.promises.stat('/tmp/c3b')).then(s => console.log('node_ok=' + s.size));
'''


def test_c3_io_uring_denied_runtimes_fall_back(plain_workdir):
    need_disabled = Path("/proc/sys/kernel/io_uring_disabled")
    ctrl = host_py(C3_PY, uid=NOBODY, cwd=str(plain_workdir.path))
    c = json.loads(ctrl.stdout.decode().splitlines()[-1])
    harness(isinstance(c["io_uring_setup"], int),
            f"control: io_uring_setup unconfined (io_uring_disabled="
            f"{need_disabled.read_text().strip() if need_disabled.exists() else '?'}): {c}")
    doc = box_bash(_py(C3_PY))
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    if ON_GVISOR:
        # no filter under this runsc: io_uring is gVisor's own (its Sentry
        # implements it), never this host kernel's, and the badges say so
        assert_sentry_serves(doc)
    else:
        assert r["io_uring_setup"] in ("EPERM", "ENOSYS"), f"io_uring_setup in the box: {r}"
    doc = box_bash("node -e " + shlex.quote(C3_NODE) + "; python3 -c \"open('/tmp/p','w').write('y'*9999); "
                   "print('py_ok=%d' % len(open('/tmp/p').read()))\"")
    assert_exited(doc)
    assert "node_ok=200000" in doc["stdout"] and "py_ok=9999" in doc["stdout"], \
        f"runtimes did not fall back cleanly: {doc['stdout']!r} {doc['stderr']!r}"


C4_PY = r'''
import ctypes, errno, json, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
def res(r):
    if r >= 0:
        os.close(r)
        return "ok"
    return errno.errorcode[ctypes.get_errno()]
out = {}
insns = struct.pack("<BBhi", 0xb7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)   # r0 = 0; exit
ibuf = ctypes.create_string_buffer(insns)
lic = ctypes.create_string_buffer(b"GPL")
attr = ctypes.create_string_buffer(struct.pack("<IIQQIIQI", 1, 2, ctypes.addressof(ibuf),
                                               ctypes.addressof(lic), 0, 0, 0, 0).ljust(128, b"\0"))
ctypes.set_errno(0)
out["bpf_prog_load"] = res(libc.syscall(L(321), L(5), attr, L(128)))
pattr = bytearray(128)
struct.pack_into("<IIQ", pattr, 0, 1, 128, 0)          # PERF_TYPE_SOFTWARE, size, SW_CPU_CLOCK
struct.pack_into("<Q", pattr, 40, (1 << 0) | (1 << 5) | (1 << 6))   # disabled, exclude_kernel, exclude_hv
pbuf = ctypes.create_string_buffer(bytes(pattr))
ctypes.set_errno(0)
out["perf_self"] = res(libc.syscall(L(298), pbuf, L(0), L(-1), L(-1), L(0)))
ctypes.set_errno(0)
out["perf_cpu0"] = res(libc.syscall(L(298), pbuf, L(-1), L(0), L(-1), L(0)))
ctypes.set_errno(0)
out["userfaultfd"] = res(libc.syscall(L(323), L(0)))
try:
    os.close(os.open("/dev/userfaultfd", os.O_RDWR))
    out["dev_userfaultfd"] = "ok"
except OSError as e:
    out["dev_userfaultfd"] = errno.errorcode[e.errno]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    ins = (ctypes.c_uint64 * 1)(0x0000ffff00000006)       # cBPF: ret #0xffff
    prog = struct.pack("HL", 1, ctypes.addressof(ins))
    s.setsockopt(socket.SOL_SOCKET, 26, prog)              # SO_ATTACH_FILTER (classic)
    out["so_attach_filter"] = "ok"
except OSError as e:
    out["so_attach_filter"] = errno.errorcode[e.errno]
try:
    s.setsockopt(socket.SOL_SOCKET, 50, struct.pack("i", -1))   # SO_ATTACH_BPF with no program
    out["so_attach_bpf"] = "ok"
except OSError as e:
    out["so_attach_bpf"] = errno.errorcode[e.errno]
print(json.dumps(out))
'''


def test_c4_bpf_perf_userfaultfd(plain_workdir):
    ctrl = host_py(C4_PY, cwd=str(plain_workdir.path))
    c = json.loads(ctrl.stdout.decode().splitlines()[-1])
    for k in ("bpf_prog_load", "perf_self", "perf_cpu0", "userfaultfd", "dev_userfaultfd"):
        harness(c[k] == "ok", f"control (root): {k} -> {c[k]}; all: {c}")
    doc = box_bash(_py(C4_PY))
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    if ON_GVISOR:
        # no filter under this runsc (badges): gVisor's Sentry has no eBPF,
        # perf or userfaultfd of its own to give and refuses each
        assert_sentry_serves(doc)
        bad = {k: r[k] for k in ("bpf_prog_load", "perf_self", "perf_cpu0", "userfaultfd")
               if r[k] not in ("EPERM", "ENOSYS", "ENODEV", "EINVAL", "EACCES")}
    else:
        bad = {k: r[k] for k in ("bpf_prog_load", "perf_self", "perf_cpu0", "userfaultfd") if r[k] != "EPERM"}
    if r["dev_userfaultfd"] not in ("ENOENT", "EACCES", "EPERM"):
        bad["dev_userfaultfd"] = r["dev_userfaultfd"]
    assert not bad, f"bpf/perf/userfaultfd in the box (want EPERM / ENOENT): {bad}; " \
                    f"classic SO_ATTACH_FILTER: {r['so_attach_filter']}"


C5_PY = r'''
import json, os
out = {}
for p in ("environ", "cmdline"):
    try:
        out[p] = open(f"/proc/1/{p}", "rb").read().decode(errors="replace")
    except OSError as e:
        out[p] = "errno:%d" % e.errno
fds = {}
try:
    for fd in os.listdir("/proc/1/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/1/fd/{fd}")
        except OSError as e:
            fds[fd] = "errno:%d" % e.errno
except OSError as e:
    fds = "errno:%d" % e.errno
out["fds"] = fds
try:
    out["exe"] = os.readlink("/proc/1/exe")
except OSError as e:
    out["exe"] = "errno:%d" % e.errno
print(json.dumps(out))
'''


def test_c5_ptrace_and_pid1(probe, workdir):
    _, c = host_probe(workdir, "ptrace")
    for k in ("traceme", "attach_sibling", "seize_sibling"):
        harness(c[k]["ret"] == 0, f"control (root): {k} -> {c[k]}")
    harness(c["process_vm_readv_sibling"]["ret"] == 8, f"control: {c['process_vm_readv_sibling']}")

    doc, r = box_probe(probe, "ptrace", "pid1")
    assert_exited(doc)
    bad = {}
    for k in ("traceme", "attach_sibling", "seize_sibling", "attach_pid1", "seize_pid1",
              "process_vm_readv_sibling"):
        rec = r.get(k)
        if ON_GVISOR and k in ("traceme", "attach_sibling", "seize_sibling", "process_vm_readv_sibling"):
            # no filter under this runsc (badges): ptrace of the script's
            # own sibling is gVisor's Sentry's, tracing a task of its own,
            # never a process of this host; PID 1 (not the script's uid)
            # is still refused below
            continue
        if rec is None or rec["ret"] != -1 or rec["err"] != "EPERM":
            bad[k] = rec
    if ON_GVISOR:
        assert_sentry_serves(doc)
    assert not bad, f"ptrace / process_vm in the box (want EPERM): {bad}"

    secret = "sekrit-" + uuid.uuid4().hex
    env = dict(os.environ, AIRLOCK_BATTERY_TOKEN=secret, AWS_SECRET_ACCESS_KEY=secret)
    proc = subprocess.run([str(__import__("conftest").AIRLOCK), "run", "--json", "--lang", "python",
                           "-c", C5_PY], capture_output=True, env=env, timeout=60)
    doc = json.loads(proc.stdout)
    assert_exited(doc)
    r = json.loads(doc["stdout"].splitlines()[-1])
    assert secret not in doc["stdout"], f"host secret visible through /proc/1: {r}"
    fds = r["fds"]
    if isinstance(fds, dict):
        host_paths = {fd: t for fd, t in fds.items()
                      if t.startswith("/") and not t.startswith(("/dev/null", "/work", "/out", "/tmp", "/proc"))}
        assert not host_paths, f"the box's pid 1 holds fds on host paths: {host_paths}"


def test_c6_dirty_pipe_dirty_cow_canary(probe, workdir):
    d = Path("/usr/share") / uniq("airlock-battery-c6")
    d.mkdir(mode=0o755)
    canary = d / "canary"
    canary.write_bytes(b"CANARY-" + uuid.uuid4().hex.encode() + b"\n" + b"c" * 8000)
    os.chmod(canary, 0o644)
    before = sha256_file(canary)
    try:
        ctrl, c = host_probe(workdir, "dirtypipe", canary, uid=NOBODY)
        harness(c.get("splice", {}).get("ret") == 1 and c.get("write", {}).get("ret") == 9,
                f"control: the Dirty Pipe steps did not run unconfined: {c}")
        if sha256_file(canary) != before:
            pytest.fail(f"CRITICAL FAIL: host kernel {KERNEL} is vulnerable to Dirty Pipe "
                        "(CVE-2022-0847), unconfined; seccomp cannot help")
        ctrl, c = host_probe(workdir, "dirtycow", canary, 2, uid=NOBODY)
        harness(c.get("after", {}).get("writes", 0) > 0, f"control: the Dirty COW race did not run: {c}")
        if sha256_file(canary) != before:
            pytest.fail(f"CRITICAL FAIL: host kernel {KERNEL} is vulnerable to Dirty COW (CVE-2016-5195)")

        if ON_DOCKER or ON_KUBE:
            # the host's /usr is not the box's (a container's, a pod's): the canary is a read-only
            # file of the image it runs on, checked from a fresh box after
            image_canary = "/usr/share/airlock/manifest.json"
            sums = lambda: box_bash(f"sha256sum {image_canary}")["stdout"]
            first = sums()
            doc, r = box_probe(probe, "dirtypipe", image_canary)
            assert_exited(doc)
            assert "open" not in r, f"canary not readable in the box: {r}"
            doc2, r2 = box_probe(probe, "dirtycow", image_canary, 3)
            assert_exited(doc2)
            assert sums() == first, f"the image's file changed: dirtypipe {r} dirtycow {r2}"
        else:
            doc, r = box_probe(probe, "dirtypipe", canary)
            assert_exited(doc)
            assert "open" not in r, f"canary not visible in the box through /usr: {r}"
            doc2, r2 = box_probe(probe, "dirtycow", canary, 3)
            assert_exited(doc2)
        after = sha256_file(canary)
        assert after == before, (f"CRITICAL FAIL: the canary changed on the host (kernel {KERNEL}): "
                                 f"dirtypipe {r} dirtycow {r2}")
        assert not r.get("after", {}).get("changed") and not r2.get("after", {}).get("changed")
    finally:
        shutil.rmtree(d, ignore_errors=True)
