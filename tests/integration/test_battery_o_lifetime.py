"""Battery O2 (docs/security.md): a box outlives no one's deadline.

A box's deadline and its removal never depend on the life of the process
that asked for it, and a host uid is never free while anything runs as it.
Each case starts `airlock run` with a script that would run for minutes,
kills the CLI with SIGKILL mid-run (as `subprocess.run(timeout=...)` and
the OOM killer do), and then holds the host to three things:

- no process of the box survives (within a bound far below its deadline);
- a container of it is gone within a bound;
- the box's host uids are never free while anything runs as them: the test
  takes each uid's lock (/run/airlock/uids/UID) the moment it can, as a new
  box would, and finds no process of that uid at that moment.

Differential: the same script runs unconfined under a parent that is
killed the same way (the control), and survives it: what ends the box is
airlock's doing, not the script's or the kill's.
"""
import collections
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import AIRLOCK, need

UID_BASE = 1900000000
UID_COUNT = 65536
LOCKS = Path(os.environ.get("AIRLOCK_UID_LOCKS", "/run/airlock/uids"))
# how long after the kill the box may take to be gone (its wall clock is
# far longer: a survivor is the box outliving its asker, not its deadline)
GONE_S = 20
WALL_S = 120

SCRIPT = (
    "import os, sys, time\n"
    # processes of the box's own, as a script that forks leaves them, each
    # with memory of its own to give back: a box takes a while to die
    "for _ in range(24):\n"
    "    if os.fork() == 0:\n"
    "        b = bytearray(4 << 20); time.sleep(600); os._exit(0)\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


def proc_uids(pid):
    """(real, effective, saved, fs) uids of PID, or None once it is gone or
    a zombie (which runs nothing: this host's init reaps it when it will)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    if any(line.startswith("State:") and "Z" in line.split()[1] for line in lines):
        return None
    for line in lines:
        if line.startswith("Uid:"):
            return [int(x) for x in line.split()[1:5]]
    return None


def procs_of(uids):
    """{pid: uid} of every host process running as one of UIDS."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        u = proc_uids(int(d))
        if u and any(x in uids for x in u):
            found[int(d)] = next(x for x in u if x in uids)
    return found


def box_uids_of_tree(root):
    """Host uids of airlock's range that the processes under ROOT run as."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    uids, pending = set(), [root]
    while pending:
        p = pending.pop()
        for c in kids.get(p, []):
            pending.append(c)
            for x in proc_uids(c) or []:
                if UID_BASE <= x < UID_BASE + UID_COUNT:
                    uids.add(x)
    return uids


def watch_release(uids, bound_s, still_running=None):
    """Take each uid's lock the moment it is free, as a new box would, and
    say what still ran as it at that moment (its host processes, and what
    STILL_RUNNING(uid) says of the container that uid is the box of: a
    gVisor sandbox's processes are not this host's).
    Returns (violations, uids never freed within BOUND_S); the locks are let
    go at the end."""
    held, bad = {}, {}
    deadline = time.monotonic() + bound_s
    try:
        while len(held) < len(uids) and time.monotonic() < deadline:
            for u in uids - set(held):
                fd = os.open(LOCKS / str(u), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                held[u] = fd
                alive = procs_of({u})
                if not alive and still_running and still_running(u):
                    alive = {0: "the container"}
                if alive:
                    bad[u] = alive
            time.sleep(0.001)
        return bad, uids - set(held)
    finally:
        for fd in held.values():
            os.close(fd)


def wait_gone(uids, bound_s):
    """{pid: uid} of processes of UIDS still alive after BOUND_S."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        left = procs_of(uids)
        if not left:
            return {}
        time.sleep(0.1)
    return procs_of(uids)


def start_cli(args, env=None, wall_s=WALL_S):
    p = subprocess.Popen([str(AIRLOCK), "run", "--timeout", str(wall_s), *args, "--lang", "python", "-c", SCRIPT],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    line = p.stdout.readline()
    if line.strip() != b"up":
        p.kill()
        out, err = p.communicate(timeout=30)
        pytest.fail(f"the box did not start: {line!r} {out[-500:]!r} {err[-2000:]!r}")
    return p


def kill_and_reap(p):
    """SIGKILL the CLI, as subprocess.run(timeout=...) does; its pipes must
    reach their end at once (nothing it left behind holds them)."""
    os.kill(p.pid, signal.SIGKILL)
    t = time.monotonic()
    p.communicate(timeout=10)
    return time.monotonic() - t


def test_control_an_unconfined_script_outlives_its_killed_parent(tmp_path):
    """The control: the script's processes do not end with their parent on
    their own (it is airlock that must end a box whose asker is gone)."""
    parent = subprocess.Popen(["/bin/sh", "-c", '"$@" & wait', "sh", "/usr/bin/python3", "-c", SCRIPT],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert parent.stdout.readline().strip() == b"up"
        kids = [int(x) for x in subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True).stdout.split()]
        assert kids
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        time.sleep(1)
        assert all(Path(f"/proc/{k}").exists() for k in kids), "control: the script died with its parent"
    finally:
        os.killpg(parent.pid, signal.SIGKILL)


@pytest.mark.parametrize("kind", ["native", "forked"])
def test_a_box_dies_with_a_killed_cli_and_keeps_its_uid_until_then(is_root, kind):
    """A native box, and a box forked by a zygote (the zygote's 33 uids): a
    guard for the forked one, which held before the keeper too."""
    need(is_root, f"a {kind} box with a uid of its own is root's")
    args = []
    if kind == "forked":
        r = subprocess.run([str(AIRLOCK), "run", "--fork", "--lang", "python", "-c", "print(1)"], capture_output=True,
                           timeout=120)
        need(r.returncode == 0, f"--fork does not run here: {r.stderr.decode(errors='replace')[-300:]}")
        args = ["--fork"]
    p = start_cli(args)
    uids = box_uids_of_tree(p.pid)
    assert uids, "no process of the box runs as a host uid of airlock's range"
    kill_and_reap(p)
    bad, never = watch_release(uids, GONE_S)
    assert not bad, f"a box's host uid was free while processes still ran as it: {bad}"
    assert not never, f"the box's uids were still held {GONE_S} s after its CLI was killed: {never}"
    assert not wait_gone(uids, 1), "processes of the box survived its killed CLI"


def _container_uids(docker_util):
    """{container id: (holder uid, script uid)} of the airlock boxes on the test daemon."""
    got = {}
    for cid in docker_util.airlock_containers():
        ins = json.loads(docker_util.docker("inspect", cid).stdout)[0]
        holder = int(ins["Config"]["User"].split(":")[0])
        got[cid] = (holder, int(ins["Config"]["Labels"]["dev.airlock.uid"]))
    return got


@pytest.mark.parametrize("rt", ["runc", "runsc"])
def test_docker_box_ends_is_removed_and_keeps_its_uids_when_its_cli_is_killed(dockerd, rt):
    import docker_util
    from image_util import CACHE
    assert not docker_util.airlock_containers(), "containers of boxes left on the daemon before the case"
    env = dict(docker_util.env(), AIRLOCK_STATE=str(CACHE))
    p = start_cli(["--image", "default", "--driver", "docker", "--runtime", rt], env=env)
    boxes = _container_uids(docker_util)
    assert len(boxes) == 1, boxes
    (holder, uid), = boxes.values()
    uids = {holder, uid}
    # under runc the script is this host's process, as its uid
    if rt == "runc":
        assert procs_of({uid}), "the script does not run as its host uid"
    (cid,) = boxes

    def running(_uid):
        r = docker_util.docker("inspect", "-f", "{{.State.Running}}", cid, check=False)
        return r.returncode == 0 and r.stdout.strip() == b"true"

    took = kill_and_reap(p)
    assert took < 5, f"the killed CLI's pipes stayed open {took:.1f} s (something it left holds them)"
    bad, never = watch_release(uids, GONE_S, running)
    left = []
    deadline = time.monotonic() + GONE_S
    while time.monotonic() < deadline:
        left = docker_util.airlock_containers()
        if not left:
            break
        time.sleep(0.2)
    # (gone before it is asserted on: a case that fails leaves no box behind)
    for cid in left:
        docker_util.docker("rm", "-f", cid, check=False)
    assert not bad, f"a box's host uid was free while processes still ran as it: {bad}"
    assert not never, f"the box's uids were still held {GONE_S} s after its CLI was killed: {never}"
    assert not left, f"the container outlived its killed CLI by {GONE_S} s: {left}"
    assert not wait_gone(uids, 1), "processes of the box survived its killed CLI"


def test_a_killed_services_idle_pooled_containers_keep_their_uids_and_are_removed(dockerd, tmp_path_factory):
    """`airlock serve` (docker driver, a pool) killed with -9: its idle
    containers, made ahead of need, run a holder (tini and sleep) as a uid
    of their own. Before, their uids' locks died with the service, free while
    the holders ran, and the containers stayed until the next start's sweep
    (or the holder's end, 300 s and the wall clock later); now each has a
    keeper that holds its uids until it is gone and removes it at once."""
    from test_docker_pool import box_uids, containers, make, wait_idle
    svc = make(tmp_path_factory, "o2_pool_killed", docker_pool="2")
    try:
        svc.run("pass")
        wait_idle(svc, 2)
        idle = containers()
        assert len(idle) == 2, idle
        box_of = {int(u): c for c in idle for u in box_uids(c)}
        uids = set(box_of)
        holders = {p for p, u in procs_of(uids).items()}
        assert holders, "the idle containers' holders do not run as their uids"
        svc.kill9()

        def running(uid):
            # the container that uid is the box of, not any of them: one
            # keeper removing its container and letting its uids go while
            # the other's still stands is what it should do (this read any
            # idle container still there as the freed uid's, a false
            # failure when the two keepers ended some ms apart)
            return box_of[uid] in containers()

        bad, never = watch_release(uids, GONE_S, running)
        deadline = time.monotonic() + GONE_S
        while idle & containers() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = idle & containers()
        assert not bad, f"a pooled container's uid was free while it ran: {bad}"
        assert not never, f"the pooled containers' uids were still held {GONE_S} s after the kill: {never}"
        assert not left, f"the killed service's idle containers outlived it by {GONE_S} s: {left}"
    finally:
        svc.stop()


# the keeper's grace past a box's deadline (src/box/uidpool.h AL_KEEPER_GRACE_MS)
KEEPER_GRACE_S = 30


@pytest.mark.parametrize("driver", ["native", "docker", "forked"])
def test_a_stopped_cli_does_not_hold_its_box_past_its_deadline(is_root, request, driver):
    """The CLI alive but not running (SIGSTOP: a debugger, a frozen cgroup,
    a stuck call): before, its box ran on as long as it stayed stopped, its
    deadline being the CLI's to enforce; now the keeper ends it at its
    deadline and the keeper's grace."""
    need(is_root, "a box with a uid of its own is root's")
    wall = 2
    env, args = None, []
    if driver == "docker":
        request.getfixturevalue("dockerd")
        import docker_util
        from image_util import CACHE
        env = dict(docker_util.env(), AIRLOCK_STATE=str(CACHE))
        args = ["--image", "default", "--driver", "docker", "--runtime", "runc"]
    if driver == "forked":
        # a forked box's PID 1 ends it (its uids are its zygote's helper's,
        # so no keeper of its own): the box's own processes are the most of
        # one uid (the script's 24 children), the zygote's are not its
        args = ["--fork"]
    t0 = time.monotonic()
    p = start_cli(args, env=env, wall_s=wall)
    try:
        if driver == "docker":
            (holder, uid), = _container_uids(docker_util).values()
            uids = {holder, uid}
        else:
            uids = box_uids_of_tree(p.pid)
            if driver == "forked":
                deadline = time.monotonic() + 10
                while len(procs_of(uids)) < 25 and time.monotonic() < deadline:
                    time.sleep(0.05)
                uids = {collections.Counter(procs_of(uids).values()).most_common(1)[0][0]}
        assert procs_of(uids), "the box does not run as its host uids"
        os.kill(p.pid, signal.SIGSTOP)
        bound = wall + KEEPER_GRACE_S + 10 - (time.monotonic() - t0)
        left = wait_gone(uids, bound)
        assert not left, f"the box of a stopped CLI ran {wall + KEEPER_GRACE_S + 10} s past its start: {left}"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
    if driver == "docker":
        deadline = time.monotonic() + GONE_S
        while docker_util.airlock_containers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not docker_util.airlock_containers(), "the container outlived its CLI"
