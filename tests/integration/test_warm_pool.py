"""The native driver's warm boxes (issue 14; src/drivers/warm_pool.c): with
warm_pool = N, `airlock serve` keeps per shape of Python run (image,
limits, whether its code names a preload module) N boxes whose interpreter
has started and, for code that names them, imported the preload modules;
a run of that shape is handed one, which ends with it. The
reference is the same service with warm_pool = 0: a warm run must behave
as a cold one, in the box, through the API."""
import hashlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import ROOT, need
from service_util import b64, box_cgroups, box_cgroups_of, box_processes, cgroups_left, hooks_binary, image_service, service_binary, stop_checked
from test_warm_python import ARGS, CORPUS, STDIN

# the interpreter's half is held to a cold start on the host by
# test_warm_python.py; these run the same corpus in the box, through the
# service, with light preloads (each warm box is ready in a fraction of a
# second) and, below, a few with the default image's own
LIGHT = "json,decimal,fractions,statistics,csv,email.message"


def make(tmp_path_factory, name, **config):
    return image_service(tmp_path_factory.mktemp(name) / "state", config)


def pool(svc):
    """The pool's live state: the operator's view (/operator/status, from loopback); a
    tenant's /v1/settings does not carry it (test_battery_o_requests.py)."""
    return svc.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]


def names_a_preload(code, preload):
    """Whether CODE names one of PRELOAD's packages as a word: its shape's
    boxes import them (warm_pool.c's names_a_preload)."""
    return any(re.search(r"(?<![A-Za-z0-9_])" + re.escape(m.split(".")[0]) + r"(?![A-Za-z0-9_])", code)
               for m in preload.split(",") if m)


def shape_key(limits=None, preloads=False):
    """(memory_bytes, timeout_s, pids, preloads) of a run's shape, as the pool names it."""
    limits = limits or {}
    return (limits.get("memory_mb", 512) << 20, limits.get("timeout_s", 60), limits.get("pids", 256), preloads)


def key_of(sh):
    return (sh["memory_bytes"], sh["timeout_s"], sh["pids"], sh["preload"] != "")


def wait_idle(svc, n=1, key=None, timeout=120, language="python"):
    """Wait until the pool holds N ready boxes (of shape KEY, if given)."""
    deadline = time.monotonic() + timeout
    while True:
        st = pool(svc)
        if any(sh["idle"] >= n and sh["language"] == language and
               (key is None or key_of(sh) == key) for sh in st["shapes"]):
            return st
        assert time.monotonic() < deadline, f"no warm box became ready: {st}"
        time.sleep(0.1)


def grow(svc, n, **fields):
    """Demand for N warm boxes of a shape: bursts of N runs at once, until the
    pool keeps N (a run that finds none ready raises the shape's size by one)."""
    key = shape_key(fields.get("limits"))
    for _ in range(10):
        ids = [svc.run("import time; time.sleep(0.5)", wait=False, image="default", **fields)["id"]
               for _ in range(n + 1)]
        for i in ids:
            svc.wait_state(i, "succeeded", timeout=60)
        if any(key_of(sh) == key and sh["want"] >= n for sh in pool(svc)["shapes"]):
            return wait_idle(svc, n, key)
    raise AssertionError(f"the pool never kept {n}: {pool(svc)}")


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    """A warm service, a cold one, and one whose warm boxes are each made
    and started, none forked by a zygote (as on a host that cannot fork
    them: cgroup v2); stopped together, so that the check that no box is
    left sees none of another's."""
    warm = make(tmp_path_factory, "warm", warm_pool=2, warm_preload=LIGHT)
    cold = make(tmp_path_factory, "cold", warm_pool=0)
    classic = make(tmp_path_factory, "classic", warm_pool=2, warm_preload=LIGHT, warm_fork="false")
    yield warm, cold, classic
    stop_checked(warm, cold, classic)


@pytest.fixture(scope="module")
def pair(services):
    return services[:2]


@pytest.fixture(scope="module")
def classic(services):
    return services[2]


def body(name):
    b = {"image": "default"}
    if name in ARGS:
        b["args"] = ARGS[name]
    if name in STDIN:
        b["stdin"] = STDIN[name].decode()
    return b


def teach(svc, code, limits=None):
    """The key of the shape of CODE's runs, taught to SVC's pool if it
    had not learnt it (the first run of a shape goes cold and teaches the
    pool the shape: a script of nothing, or of a comment naming a preload
    module if CODE names one)."""
    preload = pool(svc)["preload"]
    heavy = names_a_preload(code, preload)
    key = shape_key(limits, heavy)
    if not any(key_of(sh) == key for sh in pool(svc)["shapes"]):
        teach = "pass  # " + preload.split(",")[0].split(".")[0] if heavy else "pass"
        svc.run(teach, image="default", **({"limits": limits} if limits else {}))
    return key


def warm_run(svc, code, **fields):
    """A run that is handed a warm box."""
    heavy = names_a_preload(code, pool(svc)["preload"])
    wait_idle(svc, 1, teach(svc, code, fields.get("limits")))
    doc = svc.run(code, **fields)
    assert doc["result"]["box"].get("warm") is True, doc["result"]["box"]
    # Python's boxes without preloads are forked by the shape's zygote,
    # where the service forks them (warm_fork, and a host that can)
    forks = pool(svc)["fork"] and not heavy and fields.get("language", "python") == "python"
    assert doc["result"]["box"].get("forked", False) == forks, (forks, doc["result"]["box"])
    return doc


def outcome(doc):
    r = doc["result"]
    return {"state": doc["state"], "exit_code": r["exit_code"], "signal": r["signal"], "reason": r["reason"],
            "stdout": r["stdout"], "stderr": r["stderr"], "artifacts": [(a["path"], a["sha256"]) for a in doc["artifacts"]]}


# the corpus's scripts that print their environment print the box's
# (the service's), and its multiprocessing cases fork inside the box
@pytest.mark.parametrize("kind", ["forked", "made"])
@pytest.mark.parametrize("name", sorted(n for n in CORPUS if n != "coding_cookie"))
def test_a_warm_run_behaves_as_a_cold_one(pair, classic, kind, name):
    warm, cold = pair
    svc = warm if kind == "forked" else classic
    if kind == "forked":
        need(pool(warm)["fork"], "boxes cannot be forked by a zygote here (root and cgroup v1)")
    want = outcome(cold.run(CORPUS[name], **body(name)))
    got = outcome(warm_run(svc, CORPUS[name], **body(name)))
    assert got == want


def test_a_warm_box_is_used_once_and_has_seen_nothing(pair):
    warm, _ = pair
    probe = ("import os, json\nprint(json.dumps({'work': sorted(os.listdir('/work')), 'out': os.listdir('/out'),"
             " 'tmp': sorted(f for f in os.listdir('/tmp') if not f.startswith('.')), 'uid': os.getuid()}))\n"
             "open('/tmp/left-by-run', 'w').write('x'); open('/out/mine.txt', 'w').write('m')")
    seen = []
    for _ in range(3):
        doc = warm_run(warm, probe, image="default")
        p = json.loads(doc["result"]["stdout"])
        # its /work holds the run's script alone (not the warm start), and
        # nothing an earlier run left is anywhere in it
        assert p["work"] == ["main.py"] and p["out"] == [] and p["tmp"] == [], p
        assert [a["path"] for a in doc["artifacts"]] == ["mine.txt"]
        seen.append(p["uid"])
    st = pool(warm)
    assert st["hits"] >= 3, st


def test_the_runs_limits_hold_from_its_first_instruction(pair):
    warm, _ = pair
    # the wall clock starts at the hand-off
    t0 = time.monotonic()
    doc = warm_run(warm, "import time; time.sleep(30)", image="default", limits={"timeout_s": 2})
    assert doc["state"] == "timed_out" and doc["result"]["reason"] == "timeout", doc["result"]
    assert doc["result"]["wall_ms"] < 5000 and time.monotonic() - t0 < 60
    # (a box that has waited longer than the run's timeout: its clock
    # had not started)
    wait_idle(warm, 1, shape_key({"timeout_s": 2}))
    time.sleep(3)
    doc = warm_run(warm, "import time; time.sleep(1.5); print('in time')", image="default", limits={"timeout_s": 2})
    assert doc["state"] == "succeeded" and 1500 <= doc["result"]["wall_ms"] < 2000, doc["result"]
    # memory: the box's cgroup is the run's
    doc = warm_run(warm, "x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096])", image="default",
                   limits={"memory_mb": 128})
    assert doc["result"]["reason"] == "memory", doc["result"]
    # output caps as a cold run's
    doc = warm_run(warm, "import sys\nwhile True: sys.stdout.write('x' * 65536)", image="default")
    assert doc["result"]["reason"] == "output_limit", doc["result"]
    # its CPU time is its own, not the warm start's
    doc = warm_run(warm, "pass", image="default")
    assert doc["result"]["cpu_ms"] < 200, doc["result"]


def test_a_warm_runs_inputs_are_staged_at_its_hand_off(pair):
    # the run's files and its thread's artifacts come into the warm box's
    # fresh /work at the hand-off, as into a cold box's: by name, as the
    # box's uid, no link followed
    warm, cold = pair
    probe = ("import os, json\nst = {}\nfor d, dirs, files in os.walk('/work'):\n    for n in dirs + files:\n"
             "        p = os.path.join(d, n)\n        st[p] = (os.lstat(p).st_uid == os.getuid(), os.path.islink(p))\n"
             "print(json.dumps([sorted(st.items()), open('/work/data.csv').read(),"
             " open('/work/documents/a.txt').read()]))")
    outs = []
    for svc, w in ((warm, True), (cold, False)):
        thread = f"warm-inputs-{os.getpid()}-{int(w)}"
        first = (warm_run if w else lambda s, c, **f: s.run(c, **f))(
            svc, "open('/out/a.txt', 'w').write('from the thread')", image="default", thread_id=thread)
        assert first["state"] == "succeeded" and [a["path"] for a in first["artifacts"]] == ["a.txt"], first
        doc = (warm_run if w else lambda s, c, **f: s.run(c, **f))(
            svc, probe, image="default", thread_id=thread, files=[{"name": "data.csv", "content_base64": b64(b"x,y\n1,2\n")}])
        outs.append(outcome(doc))
    assert outs[0] == outs[1]
    listing, data, doc = json.loads(outs[0]["stdout"])
    assert [p for p, _ in listing] == ["/work/data.csv", "/work/documents", "/work/documents/a.txt", "/work/main.py"]
    assert all(own and not link for _, (own, link) in listing if not _.endswith("/documents")), listing
    assert (data, doc) == ("x,y\n1,2\n", "from the thread")


@pytest.mark.parametrize("kind", ["forked", "made"])
def test_a_run_whose_files_shadow_a_loaded_module_runs_as_a_cold_one(pair, classic, kind):
    # /work comes first on a cold run's sys.path: its own ctypes.py (which
    # a forked box's zygote imported) or decimal.py (a preload) is what its
    # import gets. A warm box has them loaded already, so such a run is not
    # taken: it runs cold, with the same result. (A made warm box's own
    # imports are all either a cold start's too or built into the image's
    # interpreter, which no file shadows: nothing of its own to shadow.)
    warm, cold = pair
    svc = warm if kind == "forked" else classic
    files = [{"name": "ctypes.py", "content_base64": b64(b"WHO = 'own ctypes'")},
             {"name": "decimal.py", "content_base64": b64(b"WHO = 'own decimal'")}]
    # (the first names no preload: a box without them, forked in the warm
    # service, whose zygote imported ctypes itself)
    codes = ["import decimal; print(decimal.WHO)"]
    if kind == "forked":
        codes.insert(0, "print(__import__('cty' + 'pes').WHO)")
    for code in codes:
        want = outcome(cold.run(code, image="default", files=files))
        assert want["stdout"] in ("own ctypes\n", "own decimal\n"), want
        wait_idle(svc, 1, teach(svc, code))
        doc = svc.run(code, image="default", files=files)
        assert doc["result"]["box"].get("warm") is not True, doc["result"]["box"]
        assert outcome(doc) == want, code
    # a file named after a module built into every CPython (gc, which the
    # warm start imports) shadows nothing, cold or warm: warm. (And a box
    # without preloads has not imported json, as a cold start has not: its
    # name spelled so that the run does not get a preloaded box, where json
    # is one here.)
    code = "import gc, sys; print(hasattr(gc, 'WHO'), 'js' 'on' in sys.modules)"
    own = [{"name": "gc.py", "content_base64": b64(b"WHO = 'own gc'")}]
    assert outcome(cold.run(code, image="default", files=own))["stdout"] == "False False\n"
    doc = warm_run(svc, code, image="default", files=own)
    assert doc["result"]["stdout"] == "False False\n", doc["result"]
    # a run with files that shadow nothing loaded is warm still
    doc = warm_run(svc, "import mine; print(mine.X)", image="default",
                   files=[{"name": "mine.py", "content_base64": b64(b"X = 1")}])
    assert doc["result"]["stdout"] == "1\n", doc["result"]


def test_a_run_with_a_network_policy_or_other_limits_is_not_given_another_shapes_box(pair):
    warm, _ = pair
    wait_idle(warm, 1)
    # a pooled box is offline: a run with a policy starts cold, with its proxy
    doc = warm.run("print('net')", image="default", network="packages")
    assert doc["state"] == "succeeded" and doc["result"]["box"].get("warm") is not True, doc["result"]
    # a run's own pids limit is its box's: a fork bomb under 32 meets it warm
    bomb = "import os, time\nfor _ in range(200):\n    try:\n        os.fork() or time.sleep(30)\n    except OSError:\n        pass\ntime.sleep(30)"
    doc = warm_run(warm, bomb, image="default", limits={"pids": 32, "timeout_s": 20})
    assert doc["result"]["reason"] == "pids", doc["result"]


def interpreters():
    """The pids of every warm start's Python interpreter (the warm boxes'
    and the zygotes')."""
    return {pid for pid, uid, cmd in box_processes() if cmd.startswith("/usr/bin/python3 main.py")}


def kill_interpreters():
    """Every warm start's Python interpreter, killed from outside; how many."""
    killed = interpreters()
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    return len(killed)


@pytest.mark.parametrize("kind", ["forked", "made"])
def test_a_warm_box_that_died_idle_is_replaced_and_runs_never_fail(pair, classic, kind):
    svc = pair[0] if kind == "forked" else classic
    grow(svc, 2)
    killed = interpreters()
    assert kill_interpreters() >= 2, box_processes()
    doc = svc.run("print('still runs')", image="default")
    assert doc["state"] == "succeeded" and doc["result"]["stdout"] == "still runs\n", (doc["error"], doc["result"])
    # the dead are replaced by new boxes (not only counted idle), and the
    # next run is handed one
    deadline = time.monotonic() + 60
    while len(interpreters() - killed) < 2 or sum(sh["idle"] for sh in pool(svc)["shapes"]
                                                  if key_of(sh) == shape_key()) < 2:
        assert time.monotonic() < deadline, (pool(svc), box_processes())
        time.sleep(0.1)
    assert warm_run(svc, "print('warm again')", image="default")["result"]["stdout"] == "warm again\n"


def test_only_code_that_names_a_preload_gets_a_box_with_them(pair):
    # a script that names none of the preload modules gets a box without
    # them (a preloaded interpreter's end costs more than a bare start); one
    # that names one, even in a comment, gets them; both run as cold
    warm, cold = pair
    probe = "import sys\nprint(sorted(m for m in ('deci' + 'mal', 'frac' + 'tions') if m in sys.modules))"
    light = warm_run(warm, probe, image="default")
    heavy = warm_run(warm, probe + "  # decimal", image="default")
    assert light["result"]["stdout"] == "[]\n", light["result"]
    assert heavy["result"]["stdout"] == "['decimal', 'fractions']\n", heavy["result"]
    assert cold.run(probe, image="default")["result"]["stdout"] == "[]\n"
    shapes = {sh["preload"] for sh in pool(warm)["shapes"] if sh["language"] == "python" and key_of(sh)[:3] == shape_key()[:3]}
    assert shapes == {"", LIGHT}, pool(warm)
    # a word only: "decimals" or "my_decimal" names none
    doc = warm_run(warm, "decimals = my_decimal = 1\n" + probe, image="default")
    assert doc["result"]["stdout"] == "[]\n", doc["result"]


@pytest.mark.parametrize("bad", ["numpy,,pandas", "a..b", ".numpy", "numpy.", "1abc", "x" * 64, "pan das"])
def test_a_preload_list_that_is_not_module_names_is_refused(tmp_path, bad):
    # an empty part would make every script's code "name" a preload
    conf = tmp_path / "bad.conf"
    conf.write_text(f"warm_preload = {bad}\n")
    proc = subprocess.run([str(service_binary()), "serve", "--listen", "127.0.0.1:1", "--state", str(tmp_path / "s"),
                           "--config", str(conf)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "warm_preload" in proc.stderr and "module names" in proc.stderr, \
        (proc.returncode, proc.stderr)


def test_the_pool_is_shown(pair):
    warm, cold = pair
    st = pool(warm)
    assert st["per_shape"] == 2 and st["preload"] == LIGHT and st["hits"] > 0, st
    for sh in st["shapes"]:
        assert {"language", "image", "memory_bytes", "idle", "starting", "hits", "misses", "preload"} <= set(sh), sh
    assert pool(cold)["per_shape"] == 0 and pool(cold)["shapes"] == []
    # /metrics says what the badge says: size, boxes, hits, misses, memory
    # (read between two equal badges: a refill may be under way)
    wait_idle(warm, 2)
    for _ in range(50):
        before = pool(warm)
        status, _, text = warm.request("GET", "/metrics", key=None)
        st = pool(warm)
        if st == before:
            break
        time.sleep(0.2)
    assert status == 200
    text = text.decode() if isinstance(text, bytes) else str(text)
    m = dict(re.findall(r"^(airlock_pool_[a-z_]+(?:\{[^}]*\})?) (\d+)$", text, re.M))
    assert {k: int(m.get(k, -1)) for k in ('airlock_pool_per_shape', 'airlock_pool_shapes', 'airlock_pool_boxes{state="idle"}',
                                          'airlock_pool_boxes{state="starting"}', 'airlock_pool_memory_bytes{of="held"}',
                                          'airlock_pool_memory_bytes{of="budget"}', 'airlock_pool_runs_total{result="hit"}',
                                          'airlock_pool_runs_total{result="miss"}')} == \
        {'airlock_pool_per_shape': 2, 'airlock_pool_shapes': len(st["shapes"]), 'airlock_pool_boxes{state="idle"}': st["idle"],
         'airlock_pool_boxes{state="starting"}': st["starting"], 'airlock_pool_memory_bytes{of="held"}': st["memory_bytes"],
         'airlock_pool_memory_bytes{of="budget"}': st["memory_budget_bytes"],
         'airlock_pool_runs_total{result="hit"}': st["hits"], 'airlock_pool_runs_total{result="miss"}': st["misses"]}, text
    assert st["idle"] >= 2 and st["memory_bytes"] > 0, st
    # /healthz, which asks for no key, says only that there is a pool
    status, _, doc = warm.request("GET", "/healthz", key=None)
    assert status == 200 and "state" not in doc["badges"]["pool"], doc["badges"]["pool"]
    # and `airlock doctor --url` asks the service, with a key
    url = f"http://{warm.host}:{warm.port}"
    doctor = [str(warm.binary), "doctor", "--url", url]
    out = subprocess.run(doctor + ["--key", warm.key, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    st = pool(warm)
    assert doc["service"] == url and doc["driver"] == "native" and doc["controls"]["pool"]["level"], doc
    assert {k: doc["pool"][k] for k in ("per_shape", "preload", "memory_budget_bytes")} == \
        {k: st[k] for k in ("per_shape", "preload", "memory_budget_bytes")}, (doc["pool"], st)
    assert sorted(map(key_of, doc["pool"]["shapes"])) == sorted(map(key_of, st["shapes"])), (doc["pool"], st)
    out = subprocess.run(doctor, capture_output=True, text=True, timeout=60, env={**os.environ, "AIRLOCK_API_KEY": warm.key})
    assert out.returncode == 0, out.stderr
    assert "pool:    at most 2 per shape;" in out.stdout and "MiB of 1024 MiB" in out.stdout, out.stdout
    assert out.stdout.count("shape:   python on ") == sum(sh["language"] == "python" for sh in st["shapes"]), out.stdout
    assert "hits" in out.stdout and "a box holds" in out.stdout, out.stdout
    # a wrong key is the service's 401, said; no key is asked for; a key
    # with a line break (a header of its own) is refused before any request
    out = subprocess.run(doctor + ["--key", "al_wrong"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "HTTP 401" in out.stderr, (out.returncode, out.stderr)
    out = subprocess.run(doctor + ["--key", warm.key + "\r\nX-Injected: 1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "control character" in out.stderr, (out.returncode, out.stderr)
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_API_KEY"}
    out = subprocess.run(doctor, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 125 and "AIRLOCK_API_KEY" in out.stderr, (out.returncode, out.stderr)


# Node: the runtime's own start is paid ahead (nothing is preloaded). Each
# script runs cold and warm; their results must be the same.
NODE = {
    "argv_env": "console.log(JSON.stringify([process.argv.slice(1), __filename, __dirname, require.main === module,"
                " process.cwd(), Object.keys(process.env).sort(), process.execArgv]))",
    "globals": "console.log(Object.keys(globalThis).sort().join(','), typeof module.parent, module.id,"
               " Object.keys(require.cache).length)",
    "exit_code": "console.log('a'); process.exitCode = 3",
    "exit_now": "setTimeout(() => console.log('never'), 10000); process.stdout.write('b\\n'); process.exit(7)",
    "exit_handler": "process.on('exit', c => console.log('exit', c)); console.log('main')",
    "async_order": "setTimeout(() => console.log('timeout'), 5); Promise.resolve().then(() => console.log('micro'));"
                   " process.nextTick(() => console.log('tick')); setImmediate(() => console.log('immediate'));"
                   " console.log('sync')",
    "uncaught": "function f() { throw new Error('boom') }\nf()",
    "rejection": "Promise.reject(new Error('nope')); setTimeout(() => console.log('after'), 50)",
    "signal": "process.kill(process.pid, 'SIGTERM'); setTimeout(() => {}, 1000)",
    "artifact": "require('fs').writeFileSync('/out/n.txt', 'from node ' + process.argv.length)",
    "child": "console.log(require('child_process').execSync('echo hi; pwd').toString().trim())",
    "stderr_big": "for (let i = 0; i < 20000; i++) console.error('line ' + i)",
    "esm_syntax": "import fs from 'fs'\nconsole.log(1)",
    "strict_this": "console.log(this === module.exports, typeof require, typeof exports)",
    # the runtime's own fds are where a cold start puts them, and the first
    # the script opens gets the number it would cold
    "fds": "const fs = require('fs'); console.log(fs.readdirSync('/proc/self/fd').map(Number).sort((a, b) => a - b)"
           ".join(','), fs.openSync('/tmp/f', 'w'))",
}


def node_ready(svc):
    """A Node warm box ready (the first Node run teaches the pool its shape)."""
    if not any(sh["language"] == "node" for sh in pool(svc)["shapes"]):
        svc.run("0", language="node", image="default")
    wait_idle(svc, 1, language="node")


def _node_trace(text):
    # the one frame beneath the run's: Node's tick for a warm start, where a
    # cold one has run_main_module (a known difference, docs/operations.md)
    return "\n".join(line for line in text.split("\n")
                     if "node:internal/main/run_main_module" not in line and "processTicksAndRejections" not in line)


@pytest.mark.parametrize("name", sorted(NODE))
def test_a_warm_node_run_behaves_as_a_cold_one(pair, name):
    warm, cold = pair
    code = NODE[name]
    node_ready(warm)
    got = warm.run(code, language="node", image="default", args=["x", "y z"])
    assert got["result"]["box"].get("warm") is True, got["result"]["box"]
    want = outcome(cold.run(code, language="node", image="default", args=["x", "y z"]))
    got = outcome(got)
    got["stderr"], want["stderr"] = _node_trace(got["stderr"]), _node_trace(want["stderr"])
    assert got == want


@pytest.mark.parametrize("language", ["python", "node"])
def test_a_large_hand_off_and_none_are_read_whole(pair, language):
    # the run's arguments go to a warm box's interpreter on a stream socket
    # (src/box/box.c's warm_message): 200 arguments of multi-byte text,
    # some 400 KB, more than the socket holds at once, so sent and read
    # in parts; and no argument at all. Warm as cold, and as sent.
    warm, cold = pair
    code = {"python": "import sys, hashlib\nprint(len(sys.argv) - 1, "
                      "hashlib.sha256('\\0'.join(sys.argv[1:]).encode()).hexdigest())",
            "node": "const a = process.argv.slice(2)\nconsole.log(a.length, "
                    "require('crypto').createHash('sha256').update(a.join('\\0')).digest('hex'))"}[language]
    for args in (["%03d " % i + "\u00e9\u4e2d" * 400 for i in range(200)], []):
        want = "%d %s\n" % (len(args), hashlib.sha256("\0".join(args).encode()).hexdigest())
        if language == "node":
            node_ready(warm)
            doc = warm.run(code, language="node", image="default", args=args)
            assert doc["result"]["box"].get("warm") is True, doc["result"]["box"]
        else:
            doc = warm_run(warm, code, image="default", args=args)
        assert doc["result"]["stdout"] == want, doc["result"]
        assert cold.run(code, language=language, image="default", args=args)["result"]["stdout"] == want


def test_a_warm_node_run_reads_its_own_package_json(pair):
    # the warm start was loaded from /work before the run's files came:
    # a package.json among them still decides how main.js loads (an ES module)
    warm, cold = pair
    node_ready(warm)
    code = "import fs from 'fs'\nconsole.log(typeof fs.readFileSync, import.meta.url)"
    files = [{"name": "package.json", "content_base64": b64(b'{"type": "module"}')}]
    got = warm.run(code, language="node", image="default", files=files)
    assert got["result"]["box"].get("warm") is True, got["result"]["box"]
    want = cold.run(code, language="node", image="default", files=files)
    assert outcome(got) == outcome(want) and want["result"]["stdout"] == "function file:///work/main.js\n", want["result"]


def test_a_node_run_with_stdin_goes_cold(pair):
    warm, cold = pair
    node_ready(warm)
    code = "let d = ''; process.stdin.on('data', c => d += c); process.stdin.on('end', () => console.log(d.length, d))"
    doc = warm.run(code, language="node", image="default", stdin="some input\n")
    assert doc["result"]["box"].get("warm") is not True and doc["result"]["stdout"] == "11 some input\n\n", doc["result"]


def test_the_pool_is_sized_by_demand(tmp_path_factory):
    svc = make(tmp_path_factory, "demand", warm_pool=3, warm_preload=LIGHT)
    tight = make(tmp_path_factory, "tight", warm_pool=3, warm_preload=LIGHT, warm_pool_memory_mb=1)
    try:
        # a service that has run no Python keeps no warm box
        mine = descendants(svc.proc.pid)
        assert pool(svc)["shapes"] == [] and not [p for p, _, _ in box_processes() if p in mine]
        # its first run teaches it the shape: one box, and runs one at a time
        # find it each time (hits), so it keeps one
        svc.run("pass", image="default")
        wait_idle(svc, 1)
        for _ in range(4):
            wait_idle(svc, 1)
            assert warm_run(svc, "print(1)", image="default")["result"]["stdout"] == "1\n"
        st = pool(svc)
        assert [sh["want"] for sh in st["shapes"]] == [1] and st["hits"] >= 4, st
        assert st["memory_bytes"] > 0 and st["shapes"][0]["box_bytes"] > 0, st
        # runs at once that find none raise it, up to warm_pool
        st = grow(svc, 3)
        assert [sh["want"] for sh in st["shapes"]] == [3] and st["shapes"][0]["idle"] == 3, st
        # past the memory budget no box is made, and runs go cold, never fail
        for _ in range(3):
            doc = tight.run("print('cold')", image="default")
            assert doc["state"] == "succeeded" and doc["result"]["box"].get("warm") is not True, doc
        time.sleep(1)
        st = pool(tight)
        assert st["memory_budget_bytes"] == 1 << 20 and st["idle"] == 0 and st["starting"] == 0, st
        # held back by the budget, not by a busy CPU
        assert [sh.get("held_back") for sh in st["shapes"]] == ["the memory budget (warm_pool_memory_mb)"], st
    finally:
        # (the module's other services keep their warm boxes meanwhile)
        theirs = descendants(svc.proc.pid) | descendants(tight.proc.pid)
        svc.stop()
        tight.stop()
        deadline = time.monotonic() + 15
        while [p for p, _, _ in box_processes() if p in theirs] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p, _, _ in box_processes() if p in theirs], box_processes()


def test_a_tenant_that_varies_its_limits_cannot_churn_the_pool(tmp_path_factory):
    # each new shape costs the host a box only runs of that shape can use:
    # a tenant whose every run had other limits would have the pool make a
    # box per run that no run takes, and push out the shapes others use.
    # The pool learns at most 8 shapes a minute and never pushes out one
    # asked for in the last minute (src/drivers/shape_admit.h): the 9th and
    # 10th shapes here run cold and cost nothing ahead, and the first
    # shape (another tenant's, say) keeps its box.
    svc = make(tmp_path_factory, "churn", warm_pool=2, warm_preload=LIGHT)
    try:
        for mb in range(200, 210):
            doc = svc.run("pass", image="default", limits={"memory_mb": mb})
            assert doc["state"] == "succeeded", doc
        st = pool(svc)
        learnt = sorted(sh["memory_bytes"] >> 20 for sh in st["shapes"])
        assert learnt == list(range(200, 208)), st
        wait_idle(svc, 1, shape_key({"memory_mb": 200}))
        doc = svc.run("pass", image="default", limits={"memory_mb": 200})
        assert doc["result"]["box"].get("warm") is True, doc["result"]["box"]
        # a shape not learnt still runs, cold
        doc = svc.run("print('cold')", image="default", limits={"memory_mb": 209})
        assert doc["result"]["stdout"] == "cold\n" and doc["result"]["box"].get("warm") is not True, doc
    finally:
        svc.stop()


def test_the_pool_shrinks_and_forgets_without_demand(tmp_path_factory):
    # each SHRINK_S (two minutes; seconds in this test build) without a run
    # that found no box lowers a shape's size by one, to one; a shape no run
    # asked for in FORGET_S (ten minutes; seconds here) keeps none
    svc = image_service(tmp_path_factory.mktemp("shrink") / "state",
                        {"warm_pool": "3", "warm_preload": LIGHT}, binary=hooks_binary(ROOT / "build-asan"),
                        extra_env={"AIRLOCK_TEST_WARM_SHRINK_S": "5", "AIRLOCK_TEST_WARM_FORGET_S": "25"})
    try:
        # bursts of runs that find no box raise it to three (grow() would
        # wait for three ready, which a size shrinking meanwhile never keeps)
        for _ in range(10):
            ids = [svc.run("import time; time.sleep(0.5)", wait=False, image="default")["id"] for _ in range(4)]
            for i in ids:
                svc.wait_state(i, "succeeded", timeout=60)
            if [sh["want"] for sh in pool(svc)["shapes"]] == [3]:
                break
        assert [sh["want"] for sh in pool(svc)["shapes"]] == [3], pool(svc)
        mine = descendants(svc.proc.pid)
        deadline = time.monotonic() + 30
        while True:
            st = pool(svc)
            if [(sh["want"], sh["idle"] + sh["starting"]) for sh in st["shapes"]] == [(1, 1)]:
                break
            assert time.monotonic() < deadline, f"the pool did not come down to one box: {st}"
            time.sleep(0.2)
        deadline = time.monotonic() + 40
        while pool(svc)["shapes"]:
            assert time.monotonic() < deadline, f"an unasked shape was kept: {pool(svc)}"
            time.sleep(0.2)
        deadline = time.monotonic() + 15
        while [p for p, _, _ in box_processes() if p in descendants(svc.proc.pid) | mine] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p, _, _ in box_processes() if p in descendants(svc.proc.pid) | mine], box_processes()
        assert pool(svc)["memory_bytes"] == 0, pool(svc)
    finally:
        svc.stop()


def descendants(pid):
    """Every process beneath PID now."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, pending = set(), [pid]
    while pending:
        for k in kids.get(pending.pop(), []):
            out.add(k)
            pending.append(k)
    return out


def test_a_killed_service_leaves_no_warm_box(tmp_path_factory):
    svc = make(tmp_path_factory, "killed", warm_pool=2, warm_preload=LIGHT)
    grow(svc, 2)
    # its own warm boxes (the module's other services have theirs)
    mine = descendants(svc.proc.pid)
    its = {pid for pid, _, _ in box_processes() if pid in mine}
    uids = {uid for pid, uid, _ in box_processes() if pid in mine}
    assert len(its) >= 4, box_processes()   # two boxes: each an init and its interpreter
    cgs = box_cgroups_of(uids)
    assert cgs, box_cgroups()
    svc.kill9()
    # each warm helper sees its service's end and kills its box, and
    # removes its cgroup (a helper killed outright would leave that)
    deadline = time.monotonic() + 20
    while (its & {pid for pid, _, _ in box_processes()} or cgroups_left(cgs)) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in box_processes() if p[0] in its]
    assert not left, left
    left = cgroups_left(cgs)
    assert not left, f"cgroups of the killed service's warm boxes left: {left}"


def test_with_the_default_images_preloads(tmp_path_factory):
    # numpy, pandas, matplotlib (pyplot) and PIL imported ahead: the chart
    # script's first line comes at once, and the result is a cold run's
    svc = make(tmp_path_factory, "heavy", warm_pool=1)
    cold = make(tmp_path_factory, "heavy-cold", warm_pool=0)
    try:
        chart = ("import sys, pandas as pd, matplotlib.pyplot as plt\nprint('first line', sys.argv[1:], flush=True)\n"
                 "df = pd.DataFrame({'x': [1, 2, 3], 'y': [3, 1, 2]})\nplt.plot(df.x, df.y)\n"
                 "plt.savefig('/out/chart.png')\nprint(sorted(k for k in globals() if not k.startswith('__')))")
        got = outcome(warm_run(svc, chart, image="default", args=["a"]))
        want = outcome(cold.run(chart, image="default", args=["a"]))
        # the same run; the PNG's bytes may differ only if matplotlib's are
        # not reproducible, which they are with the same version and font
        assert got == want
        for code in (CORPUS["main_guard_fork"], CORPUS["namespace"], CORPUS["uncaught"], CORPUS["warnings"],
                     "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; print(plt.get_backend())"):
            assert outcome(warm_run(svc, code, image="default")) == outcome(cold.run(code, image="default")), code
        # the run's memory limit is its own from its first instruction,
        # the preloads (some 60 MiB) counted in it as a cold run's imports
        # of them are: a script that fits cold fits warm, and one that does
        # not is stopped warm too (the box's limit was the run's plus the
        # preloads, and this one ran to its end warm)
        alloc = "import pandas\nx = bytearray(%d << 20); x[::4096] = b'1' * len(x[::4096]); print('done')"
        small = {"memory_mb": 160}
        for mib, reason in ((40, "exited"), (130, "memory")):
            want = outcome(cold.run(alloc % mib, image="default", limits=small))
            assert want["reason"] == reason, want
            assert outcome(warm_run(svc, alloc % mib, image="default", limits=small)) == want, mib
        # a limit below what the preloads hold: its shape keeps no box
        # (each would be over the run's limit before its first
        # instruction), and its runs go cold, as they end cold
        tiny = {"memory_mb": 32}
        code = "import pandas; print('imported')"
        key = teach(svc, code, tiny)
        deadline = time.monotonic() + 120
        while not any(key_of(sh) == key and sh.get("held_back") == "its boxes hold more than its runs' memory limit"
                      and sh["idle"] == 0 for sh in pool(svc)["shapes"]):
            assert time.monotonic() < deadline, pool(svc)
            time.sleep(0.2)
        want = outcome(cold.run(code, image="default", limits=tiny))
        assert want["reason"] == "memory", want
        doc = svc.run(code, image="default", limits=tiny)
        assert doc["result"]["box"].get("warm") is not True and outcome(doc) == want, doc["result"]
    finally:
        svc.stop()
        cold.stop()


def test_warm_boxes_are_on_by_default(pair, tmp_path_factory):
    # `airlock serve` with nothing said of the pool: two boxes per shape,
    # forked where the host can (as the module's warm service, which says
    # nothing of warm_fork), and the second run of a shape is warm
    svc = make(tmp_path_factory, "default-pool", warm_pool=None)
    try:
        st = pool(svc)
        assert st["per_shape"] == 2 and st["fork"] == pool(pair[0])["fork"], st
        assert st["preload"] == "numpy,pandas,matplotlib,matplotlib.pyplot,PIL", st
        doc = warm_run(svc, "print('warm')", image="default")
        assert doc["result"]["stdout"] == "warm\n"
    finally:
        svc.stop()
