"""Hostile battery, I1 (offline network) and group J: residue and cross-tenant isolation."""
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from battery_util import (ON_DOCKER, ON_GVISOR, ON_KUBE, assert_kube_uid, RUNTIME, badge, CONTROL_ENV, NOBODY, PY, LiveRun, as_uid, assert_box_gone, assert_exited,
                          box_py, descendants, harness, host_listening_tcp_ips, host_py, in_child_pidns,
                          pids_with_marker, uniq, wait_for, plain_workdir, outdir)  # noqa: F401


def _last(doc_or_proc):
    text = doc_or_proc["stdout"] if isinstance(doc_or_proc, dict) else doc_or_proc.stdout.decode()
    return json.loads(text.strip().splitlines()[-1])


I1_PY = r'''
import errno, json, os, socket, subprocess, time
TARGETS = @TARGETS@
def en(e):
    return errno.errorcode.get(e, str(e))
out = {}
for pnd in ("/proc/net/dev", "/proc/self/net/dev"):
    try:
        out["proc_net_dev"] = [l.split(":")[0].strip() for l in open(pnd).read().splitlines()[2:]]
        break
    except OSError as e:
        out["proc_net_dev"] = en(e.errno)
try:
    out["sys_class_net"] = sorted(os.listdir("/sys/class/net"))
except OSError as e:
    out["sys_class_net"] = en(e.errno)
try:
    r = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True)
    out["ip_link"] = [l.split(":")[1].strip().split("@")[0] for l in r.stdout.splitlines() if ":" in l]
except OSError as e:
    out["ip_link"] = en(e.errno)
res = {}
for fam, addr, port in TARGETS:
    s = socket.socket(socket.AF_INET6 if fam == "6" else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    t = time.monotonic()
    try:
        s.connect((addr, port)); r = "ok"
    except socket.timeout:
        r = "timeout"
    except OSError as e:
        r = en(e.errno)
    res[f"tcp {addr}:{port}"] = [r, round(time.monotonic() - t, 3)]
    s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t = time.monotonic()
try:
    u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("8.8.8.8", 53))
    r = "sent"
except OSError as e:
    r = en(e.errno)
res["udp 8.8.8.8:53"] = [r, round(time.monotonic() - t, 3)]
try:
    socket.getaddrinfo("example.com", 443)
    res["dns"] = ["resolved", 0]
except OSError as e:
    res["dns"] = ["failed", 0]
out["connect"] = res
print(json.dumps(out))
'''


def test_i1_offline_no_network(plain_workdir):
    own = host_listening_tcp_ips()
    targets = [("4", "1.1.1.1", 443), ("6", "2606:4700:4700::1111", 443), ("4", "169.254.169.254", 80)]
    targets += [(f, a, 22) for f, a in own]
    code = I1_PY.replace("@TARGETS@", json.dumps(targets))
    c = _last(host_py(code, uid=NOBODY, cwd=str(plain_workdir.path), timeout=60))
    host_reach = [k for k, (r, _) in c["connect"].items() if r != "ENETUNREACH"]
    harness(len(c["proc_net_dev"]) > 1 and own and any(a in k for k in host_reach for _, a in own),
            f"control: the host itself has no network to reach: {c}")
    doc = box_py(code, timeout=60)
    assert_exited(doc)
    r = _last(doc)
    assert r["proc_net_dev"] == ["lo"], f"interfaces in /proc/net/dev: {r['proc_net_dev']}"
    # an image without iproute2 (docker) has no `ip`; and its /sys is masked
    assert r["ip_link"] == ["lo"] or ((ON_DOCKER or ON_KUBE) and r["ip_link"] == "ENOENT"), f"ip link: {r['ip_link']}"
    assert r["sys_class_net"] in (["lo"], "ENOENT") or (ON_DOCKER and r["sys_class_net"] == []), \
        f"/sys/class/net: {r['sys_class_net']}"
    # under gVisor the box's network is its Sentry's own stack (the
    # isolation badge), which answers a connection with no route
    # EHOSTUNREACH where Linux says ENETUNREACH: refused all the same
    unreach = ("ENETUNREACH", "EHOSTUNREACH") if ON_GVISOR else ("ENETUNREACH",)
    if ON_KUBE:
        # a pod's network is its CNI's: the deny-all policy's pod here (the
        # double's stand-in for a CNI) has a loopback without IPv6, where an
        # IPv6 connect is refused at once with EADDRNOTAVAIL; the network
        # badge says the CNI enforces the policy
        unreach += ("EADDRNOTAVAIL",)
        level, detail = badge(doc, "network")
        assert "deny-all NetworkPolicy" in detail and "CNI" in detail, (level, detail)
    if ON_GVISOR:
        level, detail = badge(doc, "userns")
        assert level == "boundary" and "Sentry" in detail, (level, detail)
    bad = {k: v for k, v in r["connect"].items()
           if k != "dns" and (v[0] not in unreach or v[1] > 1.0)}
    assert not bad, f"connections not refused immediately with ENETUNREACH: {bad}"
    assert r["connect"]["dns"][0] == "failed", "DNS resolved inside an offline box"


J1_WRITE = r'''
import ctypes, os
M = "@M@"
for d in ("/tmp", "/work", os.environ.get("HOME", "/tmp"), "/dev/shm", "/out"):
    open(f"{d}/{M}", "w").write(M)
libc = ctypes.CDLL(None)
print("shm", libc.shmget(@KEY@, 4096, 0o1666), libc.msgget(@KEY@, 0o1666))
'''
J1_LOOK = r'''
import ctypes, json, os
M = "@M@"
found = [f"{d}/{M}" for d in ("/tmp", "/work", os.environ.get("HOME", "/tmp"), "/dev/shm", "/out")
         if os.path.exists(f"{d}/{M}")]
libc = ctypes.CDLL(None)
print(json.dumps({"found": found, "shm": libc.shmget(@KEY@, 0, 0), "msg": libc.msgget(@KEY@, 0)}))
'''


def test_j1_no_residue_between_runs(tmp_path, plain_workdir):
    m = uniq("j1")
    key = 0x6A310000 + (uuid.uuid4().int & 0xFFFF)
    w = J1_WRITE.replace("@M@", m).replace("@KEY@", str(key))
    look = J1_LOOK.replace("@M@", m).replace("@KEY@", str(key))
    # control: two unconfined runs of one uid do share /tmp, /dev/shm and SysV IPC
    wd = str(plain_workdir.path)
    host_py(w.replace('"/work", ', "").replace('"/out"', f'"{wd}"'), uid=NOBODY, cwd=wd)
    c = _last(host_py(look.replace('"/work", ', "").replace('"/out"', f'"{wd}"'), uid=NOBODY, cwd=wd))
    for p in ("/tmp", "/dev/shm"):
        Path(p, m).unlink(missing_ok=True)
    subprocess.run(["ipcrm", "-M", hex(key), "-Q", hex(key)], capture_output=True)
    harness(len(c["found"]) >= 2 and c["shm"] >= 0, f"control: {c}")

    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    d1 = box_py(w, "--out", str(out1))
    assert_exited(d1)
    assert (out1 / m).exists(), "run 1's /out was not delivered to run 1's owner"
    d2 = box_py(look, "--out", str(out2))
    assert_exited(d2)
    r = _last(d2)
    assert not r["found"] and r["shm"] == -1 and r["msg"] == -1, f"run 2 sees run 1's residue: {r}"
    assert not (out2 / m).exists(), "run 1's artifact delivered to run 2"
    host_ipcs = subprocess.run(["ipcs", "-a"], capture_output=True, text=True).stdout
    assert hex(key)[2:] not in host_ipcs, "run 1's IPC objects survive on the host"
    assert_box_gone(d1)


J2_B = r'''
import os, socket, time
TAG = "@TAG@"
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 8080)); t.listen(8)
u = socket.socket(socket.AF_UNIX); u.bind("\0airlock-j2-" + TAG); u.listen(8)
open("/tmp/bfile-" + TAG, "w").write("b")
open("/dev/shm/bfile-" + TAG, "w").write("b")
print("listening", flush=True)
time.sleep(@SLEEP@)
'''
J2_A = r'''
import ctypes, errno, json, os, socket
TAG, BPIDS = "@GAT@"[::-1], @BPIDS@
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def en(e):
    return errno.errorcode.get(e, str(e))
out = {"pids": {}}
for p in BPIDS:
    r = {}
    try:
        os.kill(p, 0); r["kill0"] = "ok"
    except OSError as e:
        r["kill0"] = en(e.errno)
    ctypes.set_errno(0)
    fd = libc.syscall(ctypes.c_long(434), ctypes.c_long(p), ctypes.c_long(0))
    r["pidfd_open"] = "ok" if fd >= 0 else en(ctypes.get_errno())
    ctypes.set_errno(0)
    pr = libc.syscall(ctypes.c_long(101), ctypes.c_long(16), ctypes.c_long(p), None, None)
    r["ptrace_attach"] = "ok" if pr == 0 else en(ctypes.get_errno())
    r["proc_visible"] = os.path.exists(f"/proc/{p}/cmdline") and TAG in open(f"/proc/{p}/cmdline").read()
    out["pids"][str(p)] = r
seen = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            if TAG.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                seen.append(p)
        except OSError:
            pass
out["tag_in_proc"] = seen
def conn(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
    try:
        s.connect(addr); return "ok"
    except OSError as e:
        return en(e.errno) if e.errno else "timeout"
    finally:
        s.close()
out["tcp"] = conn(socket.AF_INET, ("127.0.0.1", 8080))
out["abstract"] = conn(socket.AF_UNIX, "\0airlock-j2-" + TAG)
out["files"] = [f for f in ("/tmp/bfile-" + TAG, "/dev/shm/bfile-" + TAG) if os.path.exists(f)]
print(json.dumps(out))
'''


def test_j2_concurrent_boxes_isolated(plain_workdir):
    tag = uuid.uuid4().hex[:10]
    # control: two unconfined processes of the one shared uid (nobody) reach each other
    b = subprocess.Popen(as_uid([PY, "-c", J2_B.replace("@TAG@", tag + "c").replace("@SLEEP@", "5")], NOBODY),
                         stdout=subprocess.PIPE, env=CONTROL_ENV, cwd=str(plain_workdir.path))
    try:
        b.stdout.readline()
        c = _last(host_py(J2_A.replace("@GAT@", (tag + "c")[::-1]).replace("@BPIDS@", str([b.pid])),
                          uid=NOBODY, cwd=str(plain_workdir.path)))
    finally:
        b.kill()
        b.wait()
        for p in (f"/tmp/bfile-{tag}c", f"/dev/shm/bfile-{tag}c"):
            Path(p).unlink(missing_ok=True)
    harness(c["pids"][str(b.pid)]["kill0"] == "ok" and c["tcp"] == "ok" and c["abstract"] == "ok"
            and len(c["files"]) == 2, f"control: {c}")

    marker = uniq("j2b")
    brun = LiveRun("--lang", "python", "-c", J2_B.replace("@TAG@", tag).replace("@SLEEP@", "6"), marker)
    try:
        boxed = wait_for(lambda: [p for p in pids_with_marker(marker, boxed=True)], timeout=10)
        assert boxed, "box B did not start"
        time.sleep(0.5)
        bpids = sorted({d for p in boxed for d in descendants(p) if in_child_pidns(d)})
        doc_a = box_py(J2_A.replace("@GAT@", tag[::-1]).replace("@BPIDS@", str(bpids)))
    finally:
        doc_b = brun.wait(timeout=60)
    assert_exited(doc_a)
    assert_exited(doc_b)
    r = _last(doc_a)
    bad = {p: v for p, v in r["pids"].items()
           if v["kill0"] == "ok" or v["pidfd_open"] == "ok" or v["ptrace_attach"] == "ok" or v["proc_visible"]}
    assert not bad, f"box A reaches box B's processes: {bad}"
    assert not r["tag_in_proc"], f"box B's processes visible in box A's /proc: {r['tag_in_proc']}"
    assert r["tcp"] != "ok" and r["abstract"] != "ok", f"box A connects to box B: {r}"
    assert not r["files"], f"box A reads box B's files: {r['files']}"
    if ON_KUBE:
        # box A is a pod: uid 65534 on its node, no host uid of its own
        # (the badge); kept from box B above by its pod, not by a uid
        return assert_kube_uid(doc_a)
    ua, ub = doc_a["box"]["host_uid"], doc_b["box"]["host_uid"]
    assert ua != ub, f"two concurrent boxes share host uid {ua}"
    assert NOBODY not in (ua, ub) and 0 not in (ua, ub), f"host uids {ua}, {ub}: shared nobody/root"
