"""Hostile battery, group D: filesystem, /proc, /sys, devices, fds (SECURITY.md 5.D)."""
import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

from battery_util import (ON_DOCKER, ON_GVISOR, ON_KUBE, assert_kube_proc, RUNTIME, badge, AIRLOCK, NOBODY, LiveRun, assert_exited, box_bash, box_probe, box_py,
                          harness, host_bash, host_probe, host_py, probe_lines, sha256_file, uniq,
                          workdir, plain_workdir, outdir)  # noqa: F401


def _py(code):
    return "exec python3 - <<'EOF'\n" + code + "\nEOF\n"


def _last(doc_or_proc):
    text = doc_or_proc["stdout"] if isinstance(doc_or_proc, dict) else doc_or_proc.stdout.decode()
    return json.loads(text.strip().splitlines()[-1])


def _sacrificial(tag):
    """A world-writable tree under /usr: only the read-only bind can protect it."""
    d = Path("/usr/share") / uniq(f"airlock-battery-{tag}")
    (d / "sub").mkdir(parents=True)
    (d / "victim").write_text("original\n")
    (d / "sub" / "deep").write_text("deep\n")
    for p in (d, d / "sub"):
        os.chmod(p, 0o777)
    for p in (d / "victim", d / "sub" / "deep"):
        os.chmod(p, 0o666)
    return d


def _tree_state(d):
    state = {}
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = Path(root) / n
            st = p.lstat()
            state[str(p)] = (st.st_mode, sha256_file(p) if stat.S_ISREG(st.st_mode) else None)
    return state


D1_PY = r'''
import errno, json, os, subprocess, sys
D = sys.argv[1] if len(sys.argv) > 1 else "@D@"
def e(f):
    try:
        f()
        return "ok"
    except OSError as x:
        return errno.errorcode[x.errno]
out = {}
out["touch_etc"] = e(lambda: open("/etc/airlock-battery-x", "w").close())
out["overwrite_python3"] = e(lambda: os.open("/usr/bin/python3", os.O_WRONLY))
out["chmod_python3"] = e(lambda: os.chmod("/usr/bin/python3", 0o777))
out["ww_touch"] = e(lambda: open(D + "/newfile", "w").close())
out["ww_overwrite"] = e(lambda: open(D + "/victim", "w").write("pwned"))
out["ww_unlink"] = e(lambda: os.unlink(D + "/sub/deep"))
out["ww_rename"] = e(lambda: os.rename(D + "/victim", D + "/victim2"))
out["ww_chmod"] = e(lambda: os.chmod(D + "/victim", 0o4777))
out["mkdir_root"] = e(lambda: os.mkdir("/airlock-battery"))
r = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True)
out["remount_rw"] = r.returncode
if os.getuid() != 0:
    r = subprocess.run(["rm", "-rf", D, "/usr"], capture_output=True)
    out["rm_rf_usr"] = r.returncode
print(json.dumps(out))
'''


def test_d1_no_writes_outside_scratch(plain_workdir):
    ctrl_dir = _sacrificial("d1c")
    box_dir = _sacrificial("d1")
    hashes = {p: sha256_file(p) for p in ("/usr/bin/python3", "/usr/bin/bash", "/etc/passwd")}
    box_state = _tree_state(box_dir)
    try:
        # control: as nobody on the host, the world-writable tree is writable
        ctrl = host_py(D1_PY.replace("@D@", str(ctrl_dir)).replace('"/usr"]', '"/nonexistent-x"]'),
                       uid=NOBODY, cwd=str(plain_workdir.path))
        c = _last(ctrl)
        harness(all(c[k] == "ok" for k in ("ww_touch", "ww_overwrite", "ww_unlink", "ww_rename")),
                f"control: {c}")
        doc = box_bash(_py(D1_PY.replace("@D@", str(box_dir))))
        assert_exited(doc)
        r = _last(doc)
        bad = {}
        for k in ("ww_touch", "ww_overwrite", "ww_unlink", "ww_rename", "ww_chmod"):
            # on an image (docker) the host's world-writable tree is not in
            # the box at all: ENOENT is as contained as EROFS
            if r[k] != "EROFS" and not ((ON_DOCKER or ON_KUBE) and r[k] == "ENOENT"):
                bad[k] = r[k]
        for k in ("touch_etc", "overwrite_python3", "chmod_python3", "mkdir_root"):
            if r[k] not in ("EROFS", "EACCES", "EPERM", "ETXTBSY"):
                bad[k] = r[k]
        if r["remount_rw"] == 0 or r.get("rm_rf_usr") == 0:
            bad["remount/rm"] = r
        assert not bad, f"writes outside scratch in the box: {bad}"
        assert _tree_state(box_dir) == box_state, "the world-writable host tree under /usr changed"
        for p, h in hashes.items():
            assert sha256_file(p) == h, f"host file {p} changed"
        assert not Path("/etc/airlock-battery-x").exists() and not Path("/airlock-battery").exists()
    finally:
        shutil.rmtree(ctrl_dir, ignore_errors=True)
        shutil.rmtree(box_dir, ignore_errors=True)


D2_PY = r'''
import errno, json, os, signal, sys
WRITE = "@WRITE@" == "1"
T = {"/proc/sys/kernel/core_pattern": "|/tmp/airlock-battery-x", "/proc/sys/kernel/modprobe": "/tmp/airlock-battery-x",
     "/proc/sys/vm/drop_caches": "1", "/proc/sysrq-trigger": "h", "/proc/sys/kernel/ns_last_pid": "30000"}
out = {}
for p, v in T.items():
    try:
        fd = os.open(p, os.O_WRONLY)
    except OSError as e:
        out[p] = errno.errorcode[e.errno]
        continue
    try:
        if WRITE:
            os.write(fd, v.encode())
        out[p] = "ok"
    except OSError as e:
        out[p] = "write:" + errno.errorcode[e.errno]
    finally:
        os.close(fd)
pid = os.fork()
if pid == 0:
    os.abort()
_, st = os.waitpid(pid, 0)
out["crash_signal"] = os.WTERMSIG(st) if os.WIFSIGNALED(st) else None
print(json.dumps(out))
'''


def test_d2_proc_sys_and_sysrq_not_writable(plain_workdir):
    keep = {p: Path(p).read_text() for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe")
            if Path(p).exists()}
    ctrl = host_py(D2_PY.replace("@WRITE@", "0"), cwd=str(plain_workdir.path))
    c = _last(ctrl)
    harness(all(v == "ok" for k, v in c.items() if k.startswith("/proc") and Path(k).exists()),
            f"control (root, open for write only): {c}")
    try:
        doc = box_bash(_py(D2_PY.replace("@WRITE@", "1")))
        assert_exited(doc)
        r = _last(doc)
        bad = {k: v for k, v in r.items() if k.startswith("/proc") and v not in ("EROFS", "EACCES", "ENOENT")}
        assert not bad, f"/proc/sys or sysrq writable from the box: {bad}"
        for p, v in keep.items():
            assert Path(p).read_text() == v, f"host {p} changed!"
        assert not Path("/tmp/airlock-battery-x").exists(), "a host core handler ran"
    finally:
        for p, v in keep.items():
            if Path(p).read_text() != v:
                Path(p).write_text(v)


D3_PY = r'''
import errno, json, os, sys
MARK, HOSTPID = "@KRAM@"[::-1], @HOSTPID@   # reversed: the script text itself must not match
def rd(p, n=4096):
    try:
        if os.path.isdir(p):
            return {"dir": sorted(os.listdir(p))[:50]}
        with open(p, "rb") as f:
            return {"data": f.read(n).decode(errors="replace")}
    except OSError as e:
        return {"errno": errno.errorcode[e.errno]}
out = {p: rd(p) for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                          "/proc/kallsyms", "/sys/firmware", "/sys/kernel/debug")}
out["mountinfo"] = open("/proc/self/mountinfo").read()
pids = [p for p in os.listdir("/proc") if p.isdigit()]
out["pids"] = pids
seen = []
for p in pids:
    try:
        if MARK.encode() in open(f"/proc/{p}/cmdline", "rb").read():
            seen.append(p)
    except OSError:
        pass
out["marker_seen"] = seen
out["hostpid"] = rd(f"/proc/{HOSTPID}/cmdline")
print(json.dumps(out))
'''


def _mounts(text):
    res = []
    for line in text.splitlines():
        parts = line.split(" - ")[0].split()
        res.append({"root": parts[3], "point": parts[4], "opts": parts[5]})
    return res


def test_d3_proc_sys_masked_and_pids(plain_workdir):
    marker = uniq("d3")
    sentinel = subprocess.Popen(["bash", "-c", f"exec -a {marker} sleep 60"])
    try:
        code = D3_PY.replace("@KRAM@", marker[::-1]).replace("@HOSTPID@", str(sentinel.pid))
        time.sleep(0.2)
        ctrl = host_py(code, cwd=str(plain_workdir.path))
        c = _last(ctrl)
        harness(c["marker_seen"] and "data" in c["hostpid"] and "data" in c["/proc/kallsyms"]
                and "data" in c["/proc/timer_list"] and "dir" in c["/sys/firmware"],
                f"control (root): {str(c)[:800]}")
        doc = box_py(code)
        assert_exited(doc)
        r = _last(doc)
        bad = {}
        for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"):
            if r[p].get("data"):
                bad[p] = r[p]["data"][:200]
        ks = r["/proc/kallsyms"].get("data")
        if ks and any(l.split()[0].strip("0") for l in ks.splitlines() if l.strip()):
            bad["/proc/kallsyms"] = "non-zero addresses: " + ks[:200]
        for p in ("/sys/firmware", "/sys/kernel/debug"):
            if r[p].get("dir") or r[p].get("data"):
                bad[p] = r[p]
        if r["marker_seen"]:
            bad["host process visible"] = r["marker_seen"]
        if marker in r["hostpid"].get("data", ""):
            bad[f"/proc/{sentinel.pid}"] = r["hostpid"]
        assert not bad, f"host information readable in the box: {bad}"
        # mountinfo: every mount's root is "/" or the very path it is bound at
        # (Docker's own bind mounts name its data root: the four it always
        # makes, read-only or root's, and the isolation badge says so)
        docker_own = {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/usr/sbin/docker-init"}
        leaks = [m for m in _mounts(r["mountinfo"])
                 if m["root"] != "/" and m["root"] != m["point"]
                 and not (m["point"].startswith("/dev/") and m["root"] == "/" + Path(m["point"]).name)
                 and not (ON_DOCKER and m["point"] in docker_own)
                 and not (ON_DOCKER and m["point"].startswith("/proc/") and m["root"] in ("/null", m["point"][5:]))]
        if ON_DOCKER:
            assert "data root" in badge(doc, "tmpfs")[1], badge(doc, "tmpfs")
        if ON_KUBE:
            # a pod's mounts are the node's: the runtime's /etc files and
            # /proc masks, the pod's cgroup, the kubelet's Secret volumes; a
            # pod spec cannot hide them, and the badges say so (nothing else)
            node_own = {"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/airlock/in", "/airlock/stdin",
                        "/dev/termination-log"}
            leaks = [m for m in leaks if m["point"] not in node_own and not m["point"].startswith("/sys/fs/cgroup")
                     and not (m["point"].startswith("/proc/") and m["root"] in ("/null", m["point"][5:]))]
            assert "mountinfo names the node's paths" in badge(doc, "tmpfs")[1], badge(doc, "tmpfs")
            assert_kube_proc(doc)
        assert not leaks, f"mountinfo reveals host paths: {leaks}"
        assert len(r["pids"]) < 10, f"many pids visible in the box: {r['pids']}"
    finally:
        sentinel.kill()
        sentinel.wait()


D4_SH = r'''
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cgroup.subtree_control \
         /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max; do
  if (echo 0 > "$f") 2>/dev/null; then echo "write:$f=ok"; else echo "write:$f=fail"; fi
done
mkdir /sys/fs/cgroup/x 2>/dev/null && echo "mkdir=ok" || echo "mkdir=fail"
echo "release_agents=$(find / -name release_agent -not -path '/proc/*' 2>/dev/null | head -5 | tr '\n' ' ')"
'''


def _cg_limits():
    vals = {}
    for p in ("/sys/fs/cgroup/memory/airlock/memory.limit_in_bytes", "/sys/fs/cgroup/pids/airlock/pids.max",
              "/sys/fs/cgroup/cpu/airlock/cpu.cfs_quota_us", "/sys/fs/cgroup/unified/cgroup.procs",
              "/sys/fs/cgroup/memory/release_agent"):
        try:
            vals[p] = Path(p).read_text()
        except OSError:
            vals[p] = None
    return vals


def test_d4_cgroupfs_not_writable():
    harness(Path("/sys/fs/cgroup/memory/release_agent").exists() or
            Path("/sys/fs/cgroup/unified/cgroup.procs").exists(),
            "control: host has no cgroupfs to attack")
    before = _cg_limits()
    doc = box_bash(D4_SH)
    assert_exited(doc)
    out = doc["stdout"]
    assert "=ok" not in out, f"cgroupfs writable from the box: {out}"
    rel = [l for l in out.splitlines() if l.startswith("release_agents=")][0].split("=", 1)[1].strip()
    assert not rel, f"release_agent visible in the box: {rel}"
    after = _cg_limits()
    assert {k: v for k, v in before.items() if "procs" not in k} == \
        {k: v for k, v in after.items() if "procs" not in k}, "host cgroup limits changed"


D5_PY = r'''
import errno, json, os, stat
out = {}
for name, mode, dev in (("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)),
                        ("/tmp/sda", stat.S_IFBLK | 0o600, os.makedev(8, 0))):
    try:
        os.mknod(name, mode, dev)
        out["mknod " + name] = "ok"
        try:
            os.close(os.open(name, os.O_RDONLY))
            out["open " + name] = "ok"
        except OSError as e:
            out["open " + name] = errno.errorcode[e.errno]
        os.unlink(name)
    except OSError as e:
        out["mknod " + name] = errno.errorcode[e.errno]
import glob
devs = ["/dev/mem", "/dev/port", "/dev/kvm", "/dev/net/tun", "/dev/fuse", "/dev/vda", "/dev/tty0",
        "/dev/console", "/dev/vsock", "/dev/userfaultfd", "/dev/loop-control"] + glob.glob("/dev/sd*") + glob.glob("/dev/nvidia*")
for d in devs:
    try:
        os.close(os.open(d, os.O_RDONLY))
        out[d] = "ok"
    except OSError as e:
        out[d] = errno.errorcode[e.errno]
try:
    os.close(os.open("/dev/kmsg", os.O_WRONLY))
    out["/dev/kmsg(w)"] = "ok"
except OSError as e:
    out["/dev/kmsg(w)"] = errno.errorcode[e.errno]
out["listing"] = sorted(os.listdir("/dev"))
out["mountinfo"] = open("/proc/self/mountinfo").read()
print(json.dumps(out))
'''
DEV_ALLOWED = {"null", "zero", "full", "random", "urandom", "fd", "stdin", "stdout", "stderr", "shm",
               "tty", "pts", "ptmx"}


def test_d5_devices(plain_workdir):
    c = _last(host_py(D5_PY.replace("/tmp/mem", str(plain_workdir / "mem"))
                      .replace("/tmp/sda", str(plain_workdir / "sda")), cwd=str(plain_workdir.path)))
    # (which host devices exist is the host's: /dev/kvm is on some of
    # ours and not on others; root opens whichever of them are there)
    host_devs = [d for d, v in c.items() if d.startswith("/dev/") and v != "ENOENT"]
    harness(c[f"mknod {plain_workdir / 'mem'}"] == "ok" and c["/dev/kmsg(w)"] == "ok" and
            sum(c[d] == "ok" for d in host_devs) >= 3, f"control (root): {c}")
    doc = box_py(D5_PY)
    assert_exited(doc)
    r = _last(doc)
    if ON_GVISOR:
        # gVisor's tmpfs makes the nodes without CAP_MKNOD, but a node made
        # so opens only a device of gVisor's own: /dev/mem and a disk are
        # none (ENXIO), never this host's; the capabilities badge says so
        level, detail = badge(doc, "capabilities")
        assert "mknod" in detail and "never one of this host's" in detail, (level, detail)
        for n in ("/tmp/mem", "/tmp/sda"):
            assert r[f"mknod {n}"] == "EPERM" or r.get(f"open {n}") == "ENXIO", \
                f"device node {n} in the box: mknod {r[f'mknod {n}']}, open {r.get(f'open {n}')}"
    else:
        assert r["mknod /tmp/mem"] == "EPERM" and r["mknod /tmp/sda"] == "EPERM", \
            f"mknod of device nodes in the box: {r['mknod /tmp/mem']}, {r['mknod /tmp/sda']}"
    # gVisor's /dev holds its own fuse and net/tun, devices of its Sentry
    # (no host device): the capabilities badge lists them
    gvisor_own = {"/dev/fuse", "/dev/net/tun"} if ON_GVISOR else set()
    if ON_GVISOR:
        assert "gVisor's own fuse and net/tun" in badge(doc, "capabilities")[1], badge(doc, "capabilities")
    opened = {d: v for d, v in r.items() if d.startswith("/dev/") and v == "ok" and d not in gvisor_own}
    assert not opened, f"host devices reachable in the box: {opened}"
    # a container's /dev has its own IPC namespace's mqueue
    extra = set(r["listing"]) - DEV_ALLOWED - ({"mqueue"} if ON_DOCKER or ON_KUBE else set()) \
        - ({"fuse", "net"} if ON_GVISOR else set())
    assert not extra, f"unexpected entries in the box's /dev: {extra}"
    mounts = _mounts(r["mountinfo"])
    dev_mount = max((m for m in mounts if "/dev".startswith(m["point"].rstrip("/") or "/")
                     or m["point"] == "/dev"), key=lambda m: len(m["point"]))
    if ON_DOCKER:
        # Docker's /dev is a tmpfs without nodev, holding the standard nodes:
        # the devices cgroup and CapDrop ALL keep it to them (mknod and the
        # host's devices were refused above), and the badge says so;
        # gVisor's /dev is its own tmpfs, served by its Sentry
        want = "served by its Sentry" if ON_GVISOR else "devices cgroup"
        assert want in badge(doc, "capabilities")[1], badge(doc, "capabilities")
    elif ON_KUBE:
        # the same for a pod's container: the runtime's /dev, and the badge
        assert "the devices cgroup allowing no other" in badge(doc, "capabilities")[1], badge(doc, "capabilities")
    else:
        assert "nodev" in dev_mount["opts"].split(","), f"/dev is not on a nodev mount: {dev_mount}"


def test_d6_no_inherited_fds(probe, workdir):
    leak = os.open("/etc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        _, c = host_probe(workdir, "fds", pass_fds=(leak,))
        harness(c.get(f"{leak}:openat_dotdot", {}).get("ret", -1) >= 0
                and c.get(f"{leak}:fchdir", {}).get("ret") == 1,
                f"control: an inherited directory fd did not give a way out: {c}")
        # the leak is open in the test process too: airlock must not pass it on
        proc = subprocess.run([str(AIRLOCK), "run", "--json", "--in", str(probe), "--lang", "bash", "-c",
                               "[ -x ./probe ] || chmod +x ./probe; ./probe fds"],
                              capture_output=True, pass_fds=(leak,), timeout=60)
        doc = json.loads(proc.stdout)
    finally:
        os.close(leak)
    assert_exited(doc)
    r = probe_lines(doc["stdout"])
    fds = {rec["fd"]: rec for rec in r.values() if "fd" in rec and ":" not in rec["name"]}
    extra = {fd: rec for fd, rec in fds.items() if fd > 2}
    assert not extra, f"fds beyond 0-2 inside the box: {extra}"
    dirs = {fd: rec for fd, rec in fds.items() if rec.get("type") == "dir"}
    assert not dirs, f"directory fds inside the box: {dirs}"
    s = r["summary"]
    assert s["cwd"] == "/work" and s["root"] == "/", f"cwd/root: {s}"


def test_d6_standard_fds_are_open():
    """cli.md: stdin is /dev/null unless --stdin; a closed fd 0 would be reused by the next open()."""
    doc = box_py("import json, os, stat\nr = {}\nfor fd in (0, 1, 2):\n    try:\n        os.fstat(fd)\n"
                 "        r[fd] = os.readlink(f'/proc/self/fd/{fd}')\n    except OSError as e:\n"
                 "        r[fd] = 'closed (errno %d)' % e.errno\n"
                 "st = os.fstat(0)\nr['0_chr'] = stat.S_ISCHR(st.st_mode)\nr['0_read'] = os.read(0, 16).hex()\n"
                 "print(json.dumps(r))\n")
    assert_exited(doc)
    got = _last(doc)
    if ON_GVISOR and got.get("0", "").startswith("host:["):
        # under gVisor fd 0 is what Docker's exec hands runsc for no stdin,
        # shown by the Sentry as a host fd: open (never reused by the next
        # open()), a character device, at end of file
        assert got["0_chr"] and got["0_read"] == "", f"fd 0 in the box: {got}"
    else:
        assert got.get("0") == "/dev/null", f"fd 0 in the box is {got.get('0')!r} (cli.md: /dev/null): {got}"
    assert not got["1"].startswith("closed") and not got["2"].startswith("closed"), got


D7_PY = r'''
import errno, json, os, time
out = {}
def tryw(p):
    try:
        os.close(os.open(p, os.O_WRONLY))
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out["self"] = tryw("/proc/self/exe")
seen = {}
end = time.time() + 2
while time.time() < end:
    for p in os.listdir("/proc"):
        if p.isdigit():
            seen.setdefault(p, set()).add(tryw(f"/proc/{p}/exe"))
out["pids"] = {p: sorted(v) for p, v in seen.items()}
print(json.dumps(out))
'''


def test_d7_proc_exe_not_writable(plain_workdir):
    sleeper = plain_workdir / "sleep-copy"
    shutil.copy("/bin/sleep", sleeper)
    p = subprocess.Popen([str(sleeper), "30"])
    try:
        time.sleep(0.1)
        fd = os.open(f"/proc/{p.pid}/exe", os.O_RDONLY)
        os.close(fd)
        harness(os.readlink(f"/proc/{p.pid}/exe") == str(sleeper),
                "control: /proc/<pid>/exe does not reach the host binary")
    finally:
        p.kill()
        p.wait()
    bins = [AIRLOCK, Path("/usr/bin/python3.11"), Path("/usr/bin/bash")]
    before = {b: sha256_file(b) for b in bins}
    doc = box_py(D7_PY, timeout=60)
    assert_exited(doc)
    r = _last(doc)
    ok = {"ETXTBSY", "EACCES", "EROFS", "EPERM", "ENOENT"}
    assert r["self"] in {"ETXTBSY", "EACCES", "EROFS"}, f"/proc/self/exe O_WRONLY: {r['self']}"
    bad = {p: v for p, v in r["pids"].items() if set(v) - ok}
    assert not bad, f"/proc/<pid>/exe opened for write in the box: {bad}"
    for b in bins:
        assert sha256_file(b) == before[b], f"host binary {b} changed"


D8_SH = r'''
for d in /work /out /tmp /dev/shm; do
  for n in out work tmp etc proc dev usr sys shm null main.py main.sh cgroup core_pattern root passwd hosts \
           resolv.conf hostname x artifacts box-@UID@ airlock; do
    ln -sfn /proc/sys/kernel/core_pattern "$d/$n" 2>/dev/null
  done
  ln -sfn /etc "$d/etc-link"; ln -sfn / "$d/root-link"; mkdir -p "$d/deep" && ln -sfn /etc/passwd "$d/deep/passwd"
done
echo planted
'''


def test_d8_symlink_planting(outdir, plain_workdir):
    c = host_bash(D8_SH.replace("/work /out /tmp /dev/shm", str(plain_workdir.path)).replace("@UID@", "0"),
                  uid=NOBODY)
    harness("planted" in c.stdout.decode() and (plain_workdir / "etc-link").is_symlink(), f"control: {c}")
    watched = ["/etc/passwd", "/etc/hosts", "/etc/hostname", "/proc/sys/kernel/core_pattern"]
    before = {p: Path(p).read_bytes() for p in watched}
    doc = box_bash(D8_SH.replace("@UID@", "1900000001"), "--out", str(outdir))
    assert_exited(doc)
    assert "planted" in doc["stdout"]
    # globs, not ls: gVisor's statx refuses AT_NO_AUTOMOUNT (EINVAL), which
    # the image's coreutils ls passes
    doc2 = box_bash("echo second > /out/second.txt; for d in /work /out /tmp; do echo $d: $d/*; done",
                    "--out", str(outdir))
    assert_exited(doc2)
    assert "etc-link" not in doc2["stdout"] and "core_pattern" not in doc2["stdout"], \
        f"the first run's links are left in the second: {doc2['stdout']!r}"
    for p in watched:
        assert Path(p).read_bytes() == before[p], f"host {p} changed"
    links = [str(p) for p in outdir.rglob("*") if p.is_symlink()]
    assert not links, f"symlinks created on the host in --out: {links}"
    for p in outdir.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            assert data not in (before["/etc/passwd"], before["/proc/sys/kernel/core_pattern"]), \
                f"host content copied into artifacts: {p}"
