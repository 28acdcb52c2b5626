"""The docker driver's containers made ahead of need (src/drivers/docker_pool.c):
`airlock serve` with driver = docker keeps, for each shape of run it has
seen (image, limits), docker_pool started containers that no script has
run in; a run of that shape is handed one, and it is removed after that run.
Each is used once. The reference is the same service with docker_pool = 0:
a pooled run must behave exactly as a cold one."""
import json
import os
import sys
import time

import pytest

import docker_util
from image_util import CACHE
from service_util import image_service, stop_checked

# what a run can see of its container: its uid, its cwd, what is in its
# scratch, the processes beside it, its limits as the kernel shows them
PROBE = r"""
import json, os, sys
def ls(d):
    return sorted(os.listdir(d))
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            st = open(f"/proc/{p}/status").read()
            uid = int([l for l in st.splitlines() if l.startswith("Uid:")][0].split()[1])
            comm = open(f"/proc/{p}/comm").read().strip()
            procs.append((uid, comm))
        except OSError:
            pass
print(json.dumps({"uid": os.getuid(), "cwd": os.getcwd(), "argv": sys.argv, "name": __name__,
                  "work": ls("/work"), "out": ls("/out"), "tmp": [f for f in ls("/tmp") if not f.startswith(".")],
                  "others": sorted({c for u, c in procs if u != os.getuid()}),
                  "mine": sorted(c for u, c in procs if u == os.getuid())}))
open("/tmp/left-by-run", "w").write("x")
open("/out/result.txt", "w").write("made in the box\n")
sys.stderr.write("to stderr\n")
sys.exit(3)
"""


def make(tmp_path_factory, name, **config):
    return image_service(tmp_path_factory.mktemp(name) / "state",
                         dict({"driver": "docker", "docker_socket": docker_util.SOCKET}, **config))


def pool_state(svc):
    """The pool's live state: the operator's view (/operator/status, from loopback); a
    tenant's /v1/settings does not carry it (test_battery_o_requests.py)."""
    return svc.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]


def wait_idle(svc, n, memory_mb=512, timeout=60):
    """Wait until the pool holds N idle containers for runs of MEMORY_MB
    (and the default limits otherwise); its state."""
    deadline = time.monotonic() + timeout
    while True:
        st = pool_state(svc)
        if any(sh["idle"] >= n and sh["memory_bytes"] == memory_mb << 20 for sh in st["shapes"]):
            return st
        assert time.monotonic() < deadline, f"the pool did not fill: {st}"
        time.sleep(0.2)


def containers():
    return set(docker_util.airlock_containers())


def uid_lock_free(uid):
    """Whether no process holds the lock of host uid UID (src/box/uidpool.c)."""
    import fcntl
    try:
        fd = os.open(f"/run/airlock/uids/{uid}", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def box_uids(container):
    """The host uids of a box's container: its script's and its holder's."""
    ins = engine("GET", f"/containers/{container}/json")[1]
    return [ins["Config"]["Labels"]["dev.airlock.uid"], ins["Config"]["User"].split(":")[0]]


def uids_held_while_there(container, uids, what, timeout=30):
    """Until CONTAINER is gone, UIDS' locks are held. The locks are looked
    at first: free, with the container still there after, means they were
    free while it was there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        free = [uid_lock_free(u) for u in uids]
        if engine("GET", f"/containers/{container}/json")[0] == 404:
            return
        assert not any(free), f"{what}: a uid was let go while its container was there: {uids}, {free}"
        time.sleep(0.005)


def until(cond, timeout=30):
    """Poll COND until it holds or TIMEOUT seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.2)
    return cond()


# these start services of their own, before the module's pair: they count
# every container of boxes on the daemon
def test_stop_removes_the_pool_and_a_kill_leaves_it_to_its_keepers(dockerd, tmp_path_factory):
    svc = make(tmp_path_factory, "lifecycle", docker_pool="2")
    try:
        svc.run("pass")
        wait_idle(svc, 2)
        assert len(containers()) == 2
        svc.stop()
        assert not containers(), "the pool's containers outlived the service"
        svc.start()
        svc.run("pass")
        wait_idle(svc, 2)
        left = containers()
        assert len(left) == 2
        # killed with -9: each idle one's keeper (test_battery_o_lifetime.py)
        # removes it, holding its uids until it is gone
        svc.kill9()
        assert until(lambda: not (containers() & left)), "what a killed service's pool left was not removed"
        svc.start()
    finally:
        svc.stop()
    assert not containers()


def test_a_killed_services_pooled_run_removes_its_own_container(dockerd, tmp_path_factory):
    # the service, the owner of a pooled container, removes it after its run;
    # killed with -9 it never will. The run's helper sees its job pipe end,
    # kills the script and removes that container itself, and until it has,
    # the container's uid stays locked: the service passed its lock to the
    # helper, so a start after the kill can neither take the uid (whose
    # container it would delete as a dead airlock's) nor sweep the
    # container. The idle ones' keepers remove them (their uids held until
    # then: their holders run as them).
    svc = make(tmp_path_factory, "owner_killed", docker_pool="2")
    try:
        svc.run("pass")
        idle = set(wait_idle(svc, 2) and containers())
        assert len(idle) == 2
        status, _, doc = svc.post_run("print('up', flush=True)\nimport time\ntime.sleep(60)")
        assert status == 201, doc
        for _, ev, _, _ in svc.stream(doc["id"], timeout=60):
            if ev == "stdout":
                break
        assert pool_state(svc)["in_use"] == 1
        used = [c for c in idle if engine("GET", f"/containers/{c}/json")[1]["ExecIDs"]]
        assert len(used) == 1, used
        uids = box_uids(used[0])
        svc.kill9()
        uids_held_while_there(used[0], uids, "the killed service's pooled run")
        assert until(lambda: not (containers() & idle)), "the killed service's pool left containers"
        svc.start()
    finally:
        svc.stop()
    assert not containers()


def kill_helper_and_watch_uids(svc):
    """Start a sleeping run on SVC, kill its helper with -9 once it runs,
    and check that its container's two uids stay locked while the container
    is there, and that the container is removed."""
    status, _, doc = svc.post_run("print('up', flush=True)\nimport time\ntime.sleep(60)")
    assert status == 201, doc
    for _, ev, _, _ in svc.stream(doc["id"], timeout=60):
        if ev == "stdout":
            break
    ins = {c: engine("GET", f"/containers/{c}/json")[1] for c in containers()}
    running = [c for c, i in ins.items() if i["State"]["Running"] and i["ExecIDs"]]
    assert len(running) == 1, running
    box = running[0]
    uids = box_uids(box)
    helpers = svc.helpers()
    assert len(helpers) == 1, helpers
    os.kill(helpers[0], 9)
    uids_held_while_there(box, uids, "the killed helper's container")
    assert engine("GET", f"/containers/{box}/json")[0] == 404, "the killed helper's container was not removed"
    run = svc.wait_state(doc["id"], {"error", "failed", "succeeded"}, timeout=30)
    assert run["state"] == "error" and run["error"]["code"] == "helper", run
    return uids


def test_a_killed_helpers_container_keeps_its_uids_until_it_is_removed(dockerd, tmp_path_factory):
    # a cold run's helper killed outright (an operator, the OOM killer)
    # leaves its container running the script until its holder ends; its
    # uids' locks, had the helper alone held them, would go with it, and
    # another box could take a uid that container still runs as (SECURITY.md
    # J2). The service holds them too (passed to the helper), and lets them
    # go only once that container is removed.
    svc = make(tmp_path_factory, "helper_killed", docker_pool="0")
    try:
        uids = kill_helper_and_watch_uids(svc)
        assert until(lambda: all(uid_lock_free(u) for u in uids)), "the uids were kept after their container went"
    finally:
        svc.stop()
    assert not containers()


def test_so_does_one_made_in_place_of_an_unfit_pooled_container(dockerd, tmp_path_factory):
    # a run handed a pooled container that died idle makes its own, of the
    # uids the service holds for the pooled one: killed, its helper leaves
    # that one to the service too
    svc = make(tmp_path_factory, "helper_killed_pooled", docker_pool="1")
    try:
        svc.run("pass")
        wait_idle(svc, 1)
        for c in containers():
            docker_util.docker("kill", c, check=False)
        kill_helper_and_watch_uids(svc)
    finally:
        svc.stop()
    assert not containers()


def test_a_tenant_that_varies_its_limits_cannot_churn_the_pool(dockerd, tmp_path_factory):
    # as the native warm pool (src/drivers/shape_admit.h): at most 8 shapes
    # learnt a minute, and none asked for in the last minute pushed out, so
    # runs that each have other limits cannot have a container made for
    # every one of them, nor take the first shape's container away
    svc = make(tmp_path_factory, "churn", docker_pool="1")
    try:
        for mb in range(200, 210):
            doc = svc.run("pass", limits={"memory_mb": mb})
            assert doc["state"] == "succeeded", doc
        st = pool_state(svc)
        assert sorted(sh["memory_bytes"] >> 20 for sh in st["shapes"]) == list(range(200, 208)), st
        wait_idle(svc, 1, memory_mb=200)
        doc = svc.run("pass", limits={"memory_mb": 200})
        assert doc["result"]["box"].get("pooled") is True, doc["result"]["box"]
    finally:
        svc.stop()
    assert not containers()


def test_under_gvisor_too(dockerd, tmp_path_factory):
    svc = make(tmp_path_factory, "gvisor", docker_pool="1", runtime="runsc")
    try:
        a = warm_run(svc, PROBE)
        r = a["result"]
        assert r["box"]["engine_runtime"] == "runsc" and r["exit_code"] == 3, r
        p = json.loads(r["stdout"])
        assert p["work"] == ["main.py"] and p["tmp"] == [] and p["cwd"] == "/work", p
        assert [x["path"] for x in a["artifacts"]] == ["result.txt"]
    finally:
        svc.stop()
    assert not containers()


def engine(method, path, body=None):
    """One call of the test daemon's Engine API: (status, document)."""
    import http.client
    import socket as so

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = so.socket(so.AF_UNIX, so.SOCK_STREAM)
            self.sock.connect(str(docker_util.SOCKET))

    c = Conn("docker", timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def helper_run(dockerd, tmp_path, box):
    """`airlock-server helper` (the run's own process) handed BOX as the
    container made ahead of need: its result."""
    from conftest import AIRLOCK
    image = dockerd["image"]
    digest = image["digest"].split(":")[-1]
    tmp_path.mkdir(parents=True, exist_ok=True)
    # the service passes its locks of the box's two uids (the helper checks
    # they are those uids' lock files): here the same files, opened
    locks = [os.open(f"/run/airlock/uids/{box[k]}", os.O_RDWR) for k in ("holder", "uid")]
    job = {"language": "python", "code": "import os; print(os.getuid(), os.uname().nodename)", "out_dir": str(tmp_path),
           "image_dir": str(CACHE / "images" / f"sha256-{digest}"), "image_digest": digest, "driver": "docker",
           "docker_runtime": "runc", "docker_socket": str(docker_util.SOCKET),
           "docker_box": dict(box, lock_fds=locks)}
    import subprocess
    # its stdin stays open while it runs: its end is the service's death
    p = subprocess.Popen([str(AIRLOCK.parent / "airlock-server"), "helper"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=locks)
    for fd in locks:
        os.close(fd)
    p.stdin.write(json.dumps(job).encode() + b"\n")
    p.stdin.flush()
    events = []
    for line in p.stdout:
        events.append(json.loads(line))
        if events[-1].get("type") in ("result", "error"):
            break
    p.stdin.close()
    p.wait(60)
    results = [e["result"] for e in events if e.get("type") == "result"]
    err = p.stderr.read().decode(errors="replace")
    if not results:
        sys.__stderr__.write(err)
    assert results, (p.returncode, events, err[-3000:])
    return results[0]


def test_a_container_not_hardened_as_the_runs_own_is_never_used(dockerd, tmp_path_factory, tmp_path):
    # copies of a container the pool made, by the daemon's own record of
    # it: the faithful copy is used; one with any setting of a run's own
    # changed (a hardening taken away, a capability or group added, a host
    # namespace, the environment) is not, and the run makes its own
    before = containers()
    svc = make(tmp_path_factory, "copies", docker_pool="1")
    made = []
    try:
        svc.run("pass")
        wait_idle(svc, 1)
        (orig,) = containers() - before
        status, ins = engine("GET", f"/containers/{orig}/json")
        assert status == 200
        cfg = {k: ins["Config"][k] for k in ("Image", "Cmd", "User", "WorkingDir", "Env", "Labels", "Tty", "OpenStdin",
                                             "NetworkDisabled")}
        box = {"holder": int(ins["Config"]["User"].split(":")[0]), "uid": int(ins["Config"]["Labels"]["dev.airlock.uid"]),
               "image_id": ins["Image"], "hold_until": int(time.time()) + 600}
        # (HostConfig changes, Config changes) of each copy
        variants = {
            "faithful": ({}, {}),
            "no seccomp, no no_new_privs": ({"SecurityOpt": []}, {}),
            "writable root": ({"ReadonlyRootfs": False}, {}),
            "capabilities kept": ({"CapDrop": []}, {}),
            "the host's network": ({"NetworkMode": "host"}, {}),
            "a capability added": ({"CapAdd": ["SYS_PTRACE"]}, {}),
            "/proc unmasked": ({"MaskedPaths": []}, {}),
            "group 0 added": ({"GroupAdd": ["0"]}, {}),
            "no ulimits": ({"Ulimits": []}, {}),
            "the host's uts": ({"UTSMode": "host"}, {}),
            "the host's cgroup namespace": ({"CgroupnsMode": "host"}, {}),
            "no init": ({"Init": False}, {}),
            "OOM killer off": ({"OomKillDisable": True}, {}),
            "a sysctl": ({"Sysctls": {"net.ipv4.ip_unprivileged_port_start": "0"}}, {}),
            "another shm size": ({"ShmSize": 1 << 30}, {}),
            "an environment variable added": ({}, {"Env": ins["Config"]["Env"] + ["LD_PRELOAD=/tmp/x.so"]}),
        }
        used = {}
        for name, (change, cchange) in variants.items():
            hc = dict(ins["HostConfig"], **change)
            status, doc = engine("POST", f"/containers/create?name=airlock-copy-{len(made)}",
                                 dict(cfg, **cchange, HostConfig=hc))
            assert status == 201, doc
            made.append(doc["Id"])
            status, doc = engine("POST", f"/containers/{doc['Id']}/start")
            assert status == 204, doc
            r = helper_run(dockerd, tmp_path / name.replace(" ", "_").replace(",", ""), dict(box, id=made[-1]))
            assert r["exit_code"] == 0 and r["reason"] == "exited", (name, r.get("error"), r["stderr"], r["reason"])
            used[name] = r["box"]["pooled"]
            # the script ran in the copy (its hostname, Docker's default of
            # the id) only when it was used; and as the held uid either way:
            # the container made instead takes the uids the service holds
            uid, host = r["stdout"].split()
            assert (host == made[-1][:12]) == used[name], (name, r["stdout"], made[-1])
            assert int(uid) == box["uid"], (name, r["stdout"], box)
        assert used == {name: name == "faithful" for name in variants}, used
        # and one that ran an exec before it was handed over is not used
        status, doc = engine("POST", f"/containers/create?name=airlock-copy-{len(made)}", dict(cfg, HostConfig=ins["HostConfig"]))
        made.append(doc["Id"])
        engine("POST", f"/containers/{doc['Id']}/start")
        status, ex = engine("POST", f"/containers/{doc['Id']}/exec", {"Cmd": ["true"], "User": ins["Config"]["User"]})
        assert status == 201, ex
        r = helper_run(dockerd, tmp_path / "exec_ran", dict(box, id=made[-1]))
        assert r["box"]["pooled"] is False, r["box"]
    finally:
        for c in made:
            engine("DELETE", f"/containers/{c}?force=1")
        svc.stop()
    assert not containers()


@pytest.fixture(scope="module")
def pair(dockerd, tmp_path_factory):
    """A service with the pool (2 per shape) and the same without."""
    pooled = make(tmp_path_factory, "pooled", docker_pool="2")
    cold = make(tmp_path_factory, "cold", docker_pool="0")
    yield pooled, cold
    stop_checked(pooled, cold)


def warm_run(svc, code, **fields):
    """A run that is handed a container from the pool (the first run of a
    shape teaches the pool the shape, and makes its own)."""
    mb = fields.get("limits", {}).get("memory_mb", 512)
    if not any(sh["memory_bytes"] == mb << 20 for sh in pool_state(svc)["shapes"]):
        svc.run("pass", **fields)
    wait_idle(svc, 1, mb)
    doc = svc.run(code, **fields)
    assert doc["result"]["box"]["pooled"] is True, doc["result"]["box"]
    return doc


def test_a_pooled_run_behaves_as_a_cold_one(pair):
    pooled, cold = pair
    a = warm_run(pooled, PROBE, args=["one", "two"])
    b = cold.run(PROBE, args=["one", "two"])
    assert b["result"]["box"]["pooled"] is False
    ra, rb = a["result"], b["result"]
    for k in ("exit_code", "signal", "reason", "stderr"):
        assert ra[k] == rb[k], (k, ra[k], rb[k])
    assert ra["exit_code"] == 3 and ra["stderr"] == "to stderr\n"
    pa, pb = json.loads(ra["stdout"]), json.loads(rb["stdout"])
    # the same view of the box; its uid is a run's own (one no other live
    # run has: a uid freed by an ended run may be the next one's)
    assert pa["uid"] >= 1900000000 and pb["uid"] >= 1900000000, (pa["uid"], pb["uid"])
    for k in ("cwd", "argv", "name", "work", "out", "tmp", "others", "mine"):
        assert pa[k] == pb[k], (k, pa[k], pb[k])
    assert pa["work"] == ["main.py"] and pa["out"] == [] and pa["tmp"] == [], pa
    # beside the script only the holder (tini and its sleep, another uid)
    assert pa["mine"] == ["python3"], pa
    assert set(pa["others"]) <= {"docker-init", "sleep"}, pa
    assert [x["path"] for x in a["artifacts"]] == [x["path"] for x in b["artifacts"]] == ["result.txt"]
    assert a["artifacts"][0]["sha256"] == b["artifacts"][0]["sha256"]


def test_each_container_serves_one_run_and_is_then_removed(pair):
    pooled, _ = pair
    for _ in range(3):
        wait_idle(pooled, 2)
        before = containers()
        doc = warm_run(pooled, PROBE)
        # what the last run left in /tmp is in no later run's box
        assert json.loads(doc["result"]["stdout"])["tmp"] == [], doc["result"]["stdout"]
        # the one it ran in is removed, and never handed out again
        deadline = time.monotonic() + 30
        while not (before - containers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert before - containers(), "the container of a finished run is still there"
    wait_idle(pooled, 2)
    assert len(containers()) == 2, containers()
    st = pool_state(pooled)
    assert st["in_use"] == 0 and sum(sh["hits"] for sh in st["shapes"]) >= 3, st


def test_a_run_of_other_limits_makes_its_own_then_gets_a_pool(pair):
    pooled, _ = pair
    wait_idle(pooled, 1)
    doc = pooled.run("print(1)", limits={"memory_mb": 300})
    assert doc["state"] == "succeeded" and doc["result"]["box"]["pooled"] is False
    # a container made for 512 MiB is never handed to a 300 MiB run
    wait_idle(pooled, 1, 300)
    # and the one it is then handed holds the run to 300 MiB
    doc = warm_run(pooled, "x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096]); print('kept')",
                   limits={"memory_mb": 300})
    assert doc["result"]["reason"] == "memory", doc["result"]
    doc = warm_run(pooled, "x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096]); print('kept')")
    assert doc["result"]["reason"] == "exited" and doc["result"]["stdout"] == "kept\n", doc["result"]


def test_a_pooled_container_that_died_idle_is_not_used_and_is_replaced(pair):
    pooled, _ = pair
    pooled.run("pass")
    wait_idle(pooled, 2)
    idle = containers()
    assert idle
    for c in idle:
        docker_util.docker("kill", c, check=False)
    doc = pooled.run("import os\nprint('still runs')\nprint(os.uname().nodename)")
    assert doc["state"] == "succeeded" and doc["result"]["stdout"].startswith("still runs\n")
    # the dead one is checked and set aside: this run made its own, or got
    # one the pool made after its check, every 2 s, found them dead (it may
    # have run meanwhile); never a dead one (its hostname, Docker's default,
    # is its container's id)
    ran_in = doc["result"]["stdout"].split()[-1]
    assert not any(c.startswith(ran_in) for c in idle), (ran_in, idle, doc["result"]["box"])
    # and the pool fills again with live ones, the dead ones removed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = containers()
        if not (now & idle) and any(sh["idle"] >= 2 for sh in pool_state(pooled)["shapes"]):
            break
        time.sleep(0.3)
    assert not (containers() & idle), "the dead containers were not removed"
    doc = warm_run(pooled, "print(2)")
    assert doc["result"]["stdout"] == "2\n"


def test_the_pool_is_shown_and_can_be_turned_off(pair):
    pooled, cold = pair
    st = pool_state(pooled)
    assert st["per_shape"] == 2 and st["idle_s"] > 0
    for sh in st["shapes"]:
        assert {"image", "memory_bytes", "cpu_millis", "pids", "timeout_s", "idle", "hits", "misses"} <= set(sh)
    off = pool_state(cold)
    cold.run("pass")
    off = pool_state(cold)
    assert off["per_shape"] == 0 and off["shapes"] == [] and off["idle"] == 0, off
    # and /metrics: gauges of its boxes and counters of the runs that found one
    import re
    for svc, want_hits in ((pooled, st["hits"]), (cold, 0)):
        status, _, text = svc.request("GET", "/metrics", key=None)
        assert status == 200
        text = text.decode() if isinstance(text, bytes) else str(text)
        hits = re.search(r'^airlock_pool_runs_total\{result="hit"\} (\d+)$', text, re.M)
        idle = re.search(r'^airlock_pool_boxes\{state="idle"\} (\d+)$', text, re.M)
        assert hits and idle, text[-800:]
        assert int(hits.group(1)) >= want_hits and (svc is pooled or int(idle.group(1)) == 0)

