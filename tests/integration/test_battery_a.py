"""Hostile battery, group A: identity, capabilities, privilege (SECURITY.md 5.A)."""
import json
import os
import time

from battery_util import (ON_DOCKER, ON_GVISOR, ON_KUBE, assert_kube_filter, RUNTIME, assert_sentry_serves, badge, NOBODY, LiveRun, assert_exited, box_bash, box_probe, describe,
                          descendants, harness, in_child_pidns, host_probe, host_py, pids_with_marker,
                          probe_cmd, proc_status, uniq, wait_for, workdir, plain_workdir)  # noqa: F401

ZERO_CAPS = "0000000000000000"
CAP_KEYS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def _map_lines(text):
    return [l.split() for l in (text or "").strip().splitlines() if l.strip()]


def test_a1_identity_caps_nnp_seccomp_maps(probe, workdir):
    _, c = host_probe(workdir, "status")
    cf = c["self"]["fields"]
    harness(cf.get("CapEff") not in (None, ZERO_CAPS) and cf.get("Seccomp") == "0",
            f"host root status should show capabilities and no seccomp: {cf}")

    doc, r = box_probe(probe, "status")
    assert_exited(doc)
    s = r["self"]
    f = s["fields"]
    assert s["uid"] != 0 and s["euid"] != 0 and s["gid"] != 0, f"root inside the box: {s}"
    for k in CAP_KEYS:
        # gVisor's status has no CapAmb line: it has no ambient set to raise
        # (A4: PR_CAP_AMBIENT is EINVAL there)
        if ON_GVISOR and k == "CapAmb" and k not in f:
            continue
        assert f.get(k) == ZERO_CAPS, f"{k} is {f.get(k)} inside the box (want all zero)"
    if ON_GVISOR and "NoNewPrivs" not in f:
        # gVisor's status has no NoNewPrivs line: prctl says
        assert s.get("no_new_privs") == 1, f"PR_GET_NO_NEW_PRIVS={s.get('no_new_privs')}"
    else:
        assert f.get("NoNewPrivs") == "1", f"NoNewPrivs={f.get('NoNewPrivs')}"
    if ON_GVISOR:
        # this runsc ignores the OCI seccomp profile: no filter, and the
        # badges say so and that gVisor's Sentry serves the system calls
        assert f.get("Seccomp") == "0", f"Seccomp={f.get('Seccomp')}"
        assert_sentry_serves(doc)
    else:
        assert f.get("Seccomp") == "2", f"Seccomp={f.get('Seccomp')}"
        assert int(f.get("Seccomp_filters", "0")) >= 1
    host_uid = doc["box"]["host_uid"]
    if ON_KUBE:
        # a pod: runAsUser 65534 as the contract's restricted profile has it
        # (no user namespace of airlock's, no uid of the run's own), and
        # the badges say so; caps, no_new_privs and a filter as above
        assert s["uid"] == NOBODY, s
        level, detail = badge(doc, "userns")
        assert level == "unconfirmed" and "uid 65534" in detail and "no user namespace" in detail, (level, detail)
        assert_kube_filter(doc)
        doc = box_bash("id -u; id -G")
        assert_exited(doc)
        assert doc["stdout"].split()[0] == str(NOBODY) and "0" not in doc["stdout"].split()[1:], doc["stdout"]
        return
    if ON_DOCKER:
        # no user namespace of the run's own: the box's uid is the host uid,
        # unique to the run, never root or nobody, and the badge says there
        # is no user namespace (runc) or that gVisor is the boundary (runsc)
        assert s["uid"] == host_uid and host_uid not in (0, NOBODY), (s, host_uid)
        level, detail = badge(doc, "userns")
        assert (level, RUNTIME) in (("applied", "runc"), ("boundary", "runsc")), (level, detail)
        assert "no user namespace" in detail or "gVisor" in detail, detail
    for key in (() if ON_DOCKER else ("uid_map", "gid_map")):
        lines = _map_lines(s.get(key))
        assert len(lines) == 1, f"{key} must be one line, is {s.get(key)!r}"
        inside, outside, count = map(int, lines[0])
        assert outside != 0, f"{key} maps to host root: {s.get(key)!r}"
        assert count == 1, f"{key} maps a range, not one id: {s.get(key)!r}"
        assert outside != NOBODY, f"{key} maps onto the shared host nobody: {s.get(key)!r}"
    if not ON_DOCKER and not doc["box"].get("forked"):
        assert int(_map_lines(s["uid_map"])[0][1]) == host_uid, \
            f"uid_map {s['uid_map']!r} disagrees with box.host_uid {host_uid}"
    elif not ON_DOCKER:
        # a forked box's namespace is its zygote's child: its map names one
        # of the zygote's ids (a slot, 1 to 32), which the zygote's map
        # sends to box.host_uid (test_warm_fork.py reads that from the host)
        assert 1 <= int(_map_lines(s["uid_map"])[0][1]) <= 32, s["uid_map"]
        assert host_uid >= 1900000000 and host_uid != NOBODY, host_uid
    if not ON_DOCKER:
        assert (s.get("setgroups") or "").strip() == "deny", f"setgroups={s.get('setgroups')!r}"

    doc = box_bash("id -u; id -G; id")
    assert_exited(doc)
    lines = doc["stdout"].splitlines()
    assert lines[0].strip() != "0" and "0" not in lines[1].split(), f"id: {doc['stdout']!r}"


A2_SCRIPT = r'''
import json, os, subprocess, sys, threading, time
MARK = "@MARK@"
KEYS = ("Uid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
def fields(text):
    d = {}
    for l in text.splitlines():
        k, _, v = l.partition(":")
        if k in KEYS:
            d[k] = v.strip()
    return d
lock = threading.Lock()
release = threading.Event()
threads = []
def worker():
    with lock:
        threads.append(fields(open("/proc/thread-self/status").read()))
    release.wait(8)
ts = [threading.Thread(target=worker) for _ in range(50)]
for t in ts:
    t.start()
cmds = []
for i in range(10):
    kind = ("sh", "python3", "node")[i % 3]
    if kind == "sh":
        cmds.append(["sh", "-c", "cat /proc/self/status; sleep 5; : " + MARK])
    elif kind == "python3":
        cmds.append(["python3", "-c", "import time; print(open('/proc/self/status').read(), flush=True); time.sleep(5) # " + MARK])
    else:
        cmds.append(["node", "-e", "console.log(require('fs').readFileSync('/proc/self/status','utf8')); setTimeout(()=>{},5000) // " + MARK])
kids = [subprocess.Popen(c, stdout=subprocess.PIPE) for c in cmds]
pr = subprocess.Popen(["./probe", "threads", "20", "5"], stdout=subprocess.PIPE)
children = []
for k, c in zip(kids, cmds):
    out = k.communicate()[0].decode()
    children.append({"cmd": c[0], "rc": k.returncode, "status": fields(out)})
probe_threads = [json.loads(l)["fields"] for l in pr.communicate()[0].decode().splitlines()
                 if '"thread' in l and '"fields"' in l]
release.set()
for t in ts:
    t.join()
print(json.dumps({"threads": threads, "children": children, "probe_threads": probe_threads,
                  "main": fields(open("/proc/self/status").read())}))
'''


def _check_status(f, where):
    bad = []
    if f.get("Seccomp") != "2":
        bad.append(f"Seccomp={f.get('Seccomp')}")
    if f.get("NoNewPrivs") != "1":
        bad.append(f"NoNewPrivs={f.get('NoNewPrivs')}")
    for k in CAP_KEYS:
        if f.get(k) != ZERO_CAPS:
            bad.append(f"{k}={f.get(k)}")
    return [f"{where}: {', '.join(bad)}"] if bad else []


def test_a2_every_thread_and_child_confined(probe, workdir):
    marker = uniq("a2")
    code = A2_SCRIPT.replace("@MARK@", marker)

    # control: unconfined, the script does see 50 threads, 10 children, 20 probe threads
    ctrl = host_py(code, uid=NOBODY, cwd=str(workdir.path), timeout=60)
    res = json.loads(ctrl.stdout.decode().strip().splitlines()[-1])
    harness(len(res["threads"]) == 50 and len(res["children"]) == 10
            and len(res["probe_threads"]) == 20
            and all(c["status"].get("Seccomp") == "0" for c in res["children"]),
            f"control: {ctrl.stderr[-500:]!r} {str(res)[:500]}")

    # box: while it runs, read /proc/<tid>/status of every task from the host
    run = LiveRun("--lang", "python", "--in", str(probe), "--pids", "512", "-c", code)
    host_seen = {}

    def sample():
        kids = pids_with_marker(marker, boxed=True)
        if len(kids) < 10:
            return False
        main = {int(proc_status(k)["PPid"]) for k in kids if proc_status(k)}
        main = {m for m in main if in_child_pidns(m)}
        for m in main:
            for pid in descendants(m):
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    st = proc_status(f"{pid}/task/{tid}")
                    if st:
                        host_seen[(pid, int(tid))] = st
        return len(host_seen) >= 50 + 1 + 10 + 20 + 1

    got = wait_for(sample, timeout=20, step=0.1)
    time.sleep(0.3)
    sample()
    doc = run.wait(timeout=60)
    assert_exited(doc)
    assert got, f"host saw only {len(host_seen)} box tasks while the box ran"
    res = json.loads(doc["stdout"].strip().splitlines()[-1])
    bad = _check_status(res["main"], "main")
    assert len(res["threads"]) == 50 and len(res["children"]) == 10 and len(res["probe_threads"]) == 20, \
        f"box run did not start every thread/child: {describe(doc)}"
    for i, f in enumerate(res["threads"]):
        bad += _check_status(f, f"python thread {i}")
    for i, f in enumerate(res["probe_threads"]):
        bad += _check_status(f, f"probe thread {i}")
    for c in res["children"]:
        assert c["rc"] == 0, f"child {c['cmd']} failed in the box: {c}"
        bad += _check_status(c["status"], f"child {c['cmd']}")
    host_uid = doc["box"]["host_uid"]
    for (pid, tid), st in host_seen.items():
        bad += _check_status(st, f"host view of task {pid}/{tid} ({st.get('Name')})")
        if str(host_uid) not in st.get("Uid", "").split():
            bad.append(f"host view of task {pid}/{tid}: Uid {st.get('Uid')} is not box uid {host_uid}")
    assert not bad, "unconfined tasks:\n" + "\n".join(bad[:40])


A3_SCRIPT = r'''
import json, os, signal, socket, stat, sys
# ssh-agent (setgid) waits for a client forever rather than exiting
LONG_RUNNING = {"ssh-agent"}
found = []
for top in ("/usr",):
    for d, dirs, files in os.walk(top):
        for n in files:
            p = os.path.join(d, n)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                found.append(p)
            elif stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                try:
                    os.getxattr(p, "security.capability", follow_symlinks=False)
                    found.append(p)
                except OSError:
                    pass
res = []
for b in sorted(found):
    if os.path.basename(b) in LONG_RUNNING:
        continue
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.dup2(os.open("/dev/null", os.O_RDWR), 0)
        os.dup2(w, 1); os.dup2(w, 2)
        signal.alarm(3)
        try:
            os.execv(b, [b, "--version"] if b.endswith("mount") else [b])
        except OSError:
            os._exit(127)
    os.close(w)
    while os.read(r, 65536):
        pass
    os.close(r)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)   # keep the zombie: its creds stay readable
    f = {}
    for l in open(f"/proc/{pid}/status").read().splitlines():
        k, _, v = l.partition(":")
        f[k] = v.strip()
    _, st = os.waitpid(pid, 0)
    res.append({"bin": b, "Uid": f.get("Uid"), "Gid": f.get("Gid"), "CapEff": f.get("CapEff"),
                "CapPrm": f.get("CapPrm"), "status": st})
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    raw = "ok"
except OSError as e:
    raw = e.errno
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "execs": res, "raw": raw}))
'''


def test_a3_setuid_binaries_and_file_caps_do_not_raise(plain_workdir):
    import errno
    ctrl = host_py(A3_SCRIPT, uid=NOBODY, cwd=str(plain_workdir.path), timeout=120)
    c = json.loads(ctrl.stdout.decode().strip().splitlines()[-1])
    escalated = [e for e in c["execs"] if e["Uid"] and e["Uid"].split()[1] == "0"]
    harness(escalated, f"no setuid-root binary raised euid in the unconfined control: {c['execs'][:5]}")

    doc = box_bash("exec python3 - <<'EOF'\n" + A3_SCRIPT + "\nEOF\n", timeout=120)
    assert_exited(doc)
    r = json.loads(doc["stdout"].strip().splitlines()[-1])
    ctrl_bins = {e["bin"] for e in escalated}
    box_bins = {e["bin"] for e in r["execs"]}
    if ON_DOCKER or ON_KUBE:
        # the box runs on airlock's image, which holds no setuid or setgid
        # file at all (test_image_default.py): nothing to raise with
        assert not box_bins, f"setuid binaries in the image: {box_bins}"
    else:
        assert ctrl_bins <= box_bins, f"setuid binaries not visible/executed in the box: {ctrl_bins - box_bins}"
    uid, gid = str(r["uid"]), str(r["gid"])
    bad = []
    for e in r["execs"]:
        if e["Uid"] is None or set(e["Uid"].split()) != {uid} or set(e["Gid"].split()) != {gid} \
                or e["CapEff"] != ZERO_CAPS or e["CapPrm"] != ZERO_CAPS:
            bad.append(e)
    assert not bad, f"privilege change through setuid/setgid/file caps in the box: {bad}"
    assert r["raw"] == errno.EPERM, f"socket(AF_INET, SOCK_RAW) in the box: {r['raw']} (want EPERM)"


def test_a4_identity_changes_denied(probe, workdir):
    _, c = host_probe(workdir, "identity")
    for k in ("setuid0", "setresuid000", "setgid0", "setgroups0", "capset_all", "ambient_raise_sys_admin"):
        harness(c[k]["ret"] == 0, f"host root control: {k} -> {c[k]}")
    harness(c["clear_no_new_privs"]["err"] == "EINVAL", f"{c['clear_no_new_privs']}")
    _, u = host_probe(workdir, "identity", "userns")
    harness(u["uid_map_write"]["ret"] == 6, f"control in a fresh userns: uid_map write -> {u['uid_map_write']}")

    doc, r = box_probe(probe, "identity")
    assert_exited(doc)
    bad = {}
    for k in ("uid_map_write", "setuid0", "setresuid000", "setgid0", "setgroups0", "capset_all",
              "ambient_raise_sys_admin"):
        # setuid(0)/setresuid(0..)/setgid(0) fail EINVAL when id 0 has no mapping in the
        # box's userns (no root mapping, A1): still DENIED, before any permission check.
        ok = {"EPERM", "EINVAL"} if k in ("setuid0", "setresuid000", "setgid0") else {"EPERM"}
        # gVisor has no ambient capabilities: PR_CAP_AMBIENT_RAISE is EINVAL
        # there, refused before any capability is looked at
        if ON_GVISOR and k == "ambient_raise_sys_admin":
            ok = {"EPERM", "EINVAL"}
        if r[k]["err"] not in ok:
            bad[k] = r[k]
    if r["clear_no_new_privs"]["err"] != "EINVAL":
        bad["clear_no_new_privs"] = r["clear_no_new_privs"]
    after = r["after"]
    assert not bad, f"identity changes not DENIED(EPERM) in the box: {bad}"
    assert after["uid"] != 0 and after["euid"] != 0 and after["no_new_privs"] == 1 \
        and after["cap_eff"] == ZERO_CAPS, f"identity changed: {after}"


def test_a5_stacked_seccomp_cannot_loosen(probe, workdir):
    _, c = host_probe(workdir, "seccomp")
    harness(c["install_flags_0"]["ret"] == 0 and c["allow:keyctl"]["err"] not in ("EPERM", "ENOSYS")
            and c["allow:mount"]["err"] == "EFAULT" and c["listener:unshare"]["err"] == "EINVAL",
            f"control: {c}")

    doc, r = box_probe(probe, "seccomp")
    assert_exited(doc)
    if ON_GVISOR:
        # no policy of airlock's to loosen: this runsc ignores the OCI
        # seccomp profile (the probe's own filters are the Sentry's), and
        # the badges say so
        assert_sentry_serves(doc)
        assert "install_flags_0" in r, f"the probe did not report: {r}"
        return
    bad = {}
    for pre in ("allow", "listener"):
        for call in ("keyctl", "unshare", "mount", "unshare_newuser"):
            rec = r.get(f"{pre}:{call}")
            if rec is None:
                child = r.get("allow_all_child" if pre == "allow" else "listener_child")
                assert child and not child.get("completed") and child.get("signal") == 31, \
                    f"{pre}: child neither reported nor was killed by SIGSYS: {child}"
                continue
            if rec["err"] not in ("EPERM", "ENOSYS"):
                bad[f"{pre}:{call}"] = rec
    assert not bad, f"a stacked allow-all filter loosened the policy: {bad}"
    for k in ("install_flags_0", "install_flags_8"):
        if k in r:
            assert r[k]["ret"] >= 0 or r[k]["err"] in ("EPERM", "EACCES", "EINVAL", "ENOSYS", "EBUSY"), r[k]
