#!/usr/bin/python3
"""The kubernetes driver's run, request to result, beside its peers.

One run: POST /v1/runs?wait=true of `pass` in Python on the default image,
to `airlock serve` with driver = kubernetes against the API double
(tests/kube_double: the default image exported and pushed to a loopback
registry, as tests/integration/kube_pass.py does). Beside it, in the same
loop, interleaved round-robin with the order rotated each round so that the
machine's noise hits them alike:

  - the same request through the docker driver on the same dockerd
    (docker_pool 2 and 0);
  - `docker run --rm` of the same image, as hardened as the docker driver's
    container (bench/docker.py's flags);
  - the native box through the same API;
  - "raw double": the API calls the driver makes for one run (create the
    Secret, create the Pod, watch it until main starts, follow main's log,
    watch it to its end, follow collect's log, delete the Pod and the
    Secret), issued by a small Python client against the double with no
    airlock in it, on the very Secret and Pod the driver sent (captured from
    the double during a first run, renamed per run). It separates the
    double's own cost from the driver's; its per-call times are the phase
    split.

The double is a Python program driving dockerd: its figures say nothing of a
real cluster, where a pod's start is scheduling, an image pull and a CRI
sandbox (seconds, not milliseconds).

--late W1,W2 (default 5,30; empty to skip): a pod created BEFORE its Secret,
the Secret created W s later; the time from the Secret's creation to main's
start, against the ordinary order (Secret, then Pod: from the Pod's creation
to main's start). This is what a warm pod (kubernetes_pool) would do. The
double's kubelet retries a missing Secret volume every 1 s flat; a real
kubelet backs off (see docs/kubernetes.md, "Speed").

Usage: /usr/bin/python3 bench/kube.py [--runs N] [--warmup N] [--late 5,30] [--late-reps N] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
os.environ.setdefault("AIRLOCK_TEST_DOCKER_RUN", "/run/airlock-bench-kube")
os.environ.setdefault("AIRLOCK_TEST_DOCKER_DATA", "/var/cache/airlock-tests/docker-kbench")
os.environ.setdefault("AIRLOCK_BIN", str(ROOT / "build" / "airlock"))

import docker_util  # noqa: E402
import kube_pass  # noqa: E402
from image_util import CACHE, ensure_default_image  # noqa: E402
from service_util import image_service  # noqa: E402

BODY = {"language": "python", "code": "pass"}


def api_run(svc, body, docs=None):
    t = time.monotonic()
    status, _, doc = svc.request("POST", "/v1/runs", json=body, query={"wait": "true"}, timeout=120)
    dt = (time.monotonic() - t) * 1000
    assert status == 200 and doc["state"] == "succeeded", (status, doc)
    if docs is not None:
        docs.append(doc)
    return dt, doc["result"].get("box", {}).get("pooled")


def docker_run(cmd, env):
    t = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.monotonic() - t) * 1000, None


# ---------------------------------------------------------------- the raw client
def capture(kube, run):
    """The Secret and the Pod the driver sends, read from the double while RUN() makes one."""
    ns = kube.namespace
    got, stop = {}, threading.Event()

    def poll():
        while not stop.is_set() and len(got) < 2:
            for kind in ("secrets", "pods"):
                if kind not in got:
                    st, _, doc = kube.call("GET", f"/api/v1/namespaces/{ns}/{kind}")
                    if st == 200 and doc.get("items"):
                        got[kind] = doc["items"][0]
            time.sleep(0.005)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    run()
    time.sleep(0.2)
    stop.set()
    th.join()
    assert set(got) == {"secrets", "pods"}, f"captured only {sorted(got)}: the run was too fast to see"

    def clean(o):
        md = o["metadata"]
        o["metadata"] = {k: md[k] for k in ("name", "labels", "annotations") if k in md}
        o.pop("status", None)
        if "spec" in o:
            o["spec"].pop("nodeName", None)
        return o
    sec, pod = clean(got["secrets"]), clean(got["pods"])
    assert sec["metadata"]["name"] == pod["metadata"]["name"], (sec["metadata"], pod["metadata"])
    return sec["metadata"]["name"], json.dumps(sec), json.dumps(pod)


class Raw:
    """The driver's calls for one run, by hand: each phase timed."""

    def __init__(self, kube, name, sec, pod):
        self.kube, self.old, self.sec, self.pod = kube, name, sec, pod
        self.base = f"/api/v1/namespaces/{kube.namespace}"
        self.n = 0

    def objects(self, deadline_extra=0):
        self.n += 1
        name = f"bench-raw-{os.getpid()}-{self.n}"
        sec, pod = (json.loads(s.replace(self.old, name)) for s in (self.sec, self.pod))
        if deadline_extra and "activeDeadlineSeconds" in pod["spec"]:
            pod["spec"]["activeDeadlineSeconds"] += deadline_extra
        return name, sec, pod

    def create(self, kind, obj):
        st, _, doc = self.kube.call("POST", f"{self.base}/{kind}?fieldValidation=Strict", obj)
        assert st == 201, (kind, st, doc)
        return doc["metadata"]["resourceVersion"]

    def watch(self, name, rv, enough):
        """Watch the pod from RV until ENOUGH(pod); the last resourceVersion."""
        q = urllib.parse.urlencode({"watch": "1", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv,
                                    "allowWatchBookmarks": "true"})
        while True:
            with self.kube.stream(f"{self.base}/pods?{q}", timeout=120) as r:
                for line in r:
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        raise AssertionError(f"watch: {ev}")
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] != "BOOKMARK" and enough(ev["object"]):
                        return ev["object"]
            q = urllib.parse.urlencode({"watch": "1", "fieldSelector": f"metadata.name={name}", "resourceVersion": rv,
                                        "allowWatchBookmarks": "true"})

    def log(self, name, container):
        with self.kube.stream(f"{self.base}/pods/{name}/log?container={container}&follow=true", timeout=120) as r:
            return r.read()

    def delete(self, kind, name):
        st, _, doc = self.kube.call("DELETE", f"{self.base}/{kind}/{name}",
                                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
        assert st in (200, 202, 404), (kind, st, doc)

    def run(self, phases=None):
        t0 = time.monotonic()
        marks = []

        def mark(what):
            marks.append((what, time.monotonic()))
        name, sec, pod = self.objects()
        self.create("secrets", sec)
        mark("secret")
        rv = self.create("pods", pod)
        mark("pod")
        rv = self.watch(name, rv, lambda p: main_state(p) in ("running", "terminated"))["metadata"]["resourceVersion"]
        mark("main started (watch)")
        self.log(name, "main")
        mark("main's log")
        self.watch(name, rv, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"))
        mark("pod ended (watch)")
        self.log(name, "collect")
        mark("collect's log")
        self.delete("pods", name)
        self.delete("secrets", name)
        mark("deletes")
        if phases is not None:
            prev = t0
            for what, t in marks:
                phases.setdefault(what, []).append((t - prev) * 1000)
                prev = t
        return (time.monotonic() - t0) * 1000, None

    def late(self, wait_s):
        """Pod first, Secret WAIT_S later: ms from the Secret's creation to main's start, and the pod's wait."""
        name, sec, pod = self.objects(deadline_extra=int(wait_s) + 5)
        rv = self.create("pods", pod)
        time.sleep(wait_s)
        st, _, p = self.kube.call("GET", f"{self.base}/pods/{name}")
        waiting = [c.get("state", {}).get("waiting", {}) for c in p.get("status", {}).get("containerStatuses") or []]
        t = time.monotonic()
        self.create("secrets", sec)
        rv = self.watch(name, rv, lambda p: main_state(p) in ("running", "terminated"))["metadata"]["resourceVersion"]
        dt = (time.monotonic() - t) * 1000
        self.log(name, "main")
        self.watch(name, rv, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"))
        self.log(name, "collect")
        self.delete("pods", name)
        self.delete("secrets", name)
        return dt, waiting[:1]

    def ordinary(self):
        """Secret then Pod: ms from the Pod's creation to main's start."""
        name, sec, pod = self.objects()
        self.create("secrets", sec)
        t = time.monotonic()
        rv = self.create("pods", pod)
        rv = self.watch(name, rv, lambda p: main_state(p) in ("running", "terminated"))["metadata"]["resourceVersion"]
        dt = (time.monotonic() - t) * 1000
        self.log(name, "main")
        self.watch(name, rv, lambda p: p.get("status", {}).get("phase") in ("Succeeded", "Failed"))
        self.log(name, "collect")
        self.delete("pods", name)
        self.delete("secrets", name)
        return dt


def main_state(pod):
    for c in pod.get("status", {}).get("containerStatuses") or []:
        if c.get("name") == "main":
            return next(iter(c.get("state") or {"waiting": 1}))
    return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs) + 0.5) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--late", default="5,30", help="seconds a pod waits for its Secret (comma-separated; '' skips)")
    ap.add_argument("--late-reps", type=int, default=2)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    sock = docker_util.start()
    digest = ensure_default_image()["digest"].split(":")[-1]
    denv = docker_util.env()
    img = "airlock-image:" + digest
    kube, _, _ = kube_pass.cluster()
    # the docker driver loads the image into this daemon on its first run
    subprocess.run([os.environ["AIRLOCK_BIN"], "run", "--driver", "docker", "--lang", "python", "-c", "pass"],
                   env=dict(denv, AIRLOCK_STATE=str(CACHE)), check=True, stdout=subprocess.DEVNULL)
    hard = ["--rm", "--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--user", "1900099999:1900099999", "--tmpfs", "/tmp", "--memory", "512m", "--pids-limit", "256", "--cpus", "0.5",
            "--init"]

    tmp = Path(tempfile.mkdtemp(prefix="airlock-bench-kube-"))
    services = {}

    def service(name, **config):
        services[name] = image_service(tmp / name, config)
        return services[name]

    kdocs = []
    ks = service("kubernetes", **kube_pass.service_config())
    name0, sec, pod = capture(kube, lambda: api_run(ks, BODY))
    raw = Raw(kube, name0, sec, pod)
    variants = [("API, kubernetes driver (double)", "kube", lambda: api_run(ks, BODY, kdocs))]
    for pool in (2, 0):
        s = service(f"docker-pool{pool}", driver="docker", docker_socket=str(sock), runtime="runc", docker_pool=pool)
        variants.append((f"API, docker driver runc, pool {pool}", f"docker-pool{pool}", lambda s=s: api_run(s, BODY)))
    cmd = ["docker", "run", *hard, img, "python3", "-c", "pass"]
    variants.append(("docker run --rm (runc) python3 -c pass", "docker-run", lambda: docker_run(cmd, denv)))
    nat = service("native", driver="native")
    variants.append(("API, native box, same image", "native", lambda: api_run(nat, dict(BODY, image="default"))))
    phases = {}
    variants.append(("raw double: the driver's calls, no airlock", "raw", lambda: raw.run(phases)))

    samples = {v[0]: [] for v in variants}
    n = len(variants)
    t0 = time.monotonic()
    late = {}
    try:
        for it in range(args.warmup + args.runs):
            if it == args.warmup:
                phases.clear()
                kdocs.clear()
            for j in range(n):
                name, _, fn = variants[(it + j) % n]
                dt, _ = fn()
                if it >= args.warmup:
                    samples[name].append(dt)
        trace = ks.ok("GET", f"/v1/runs/{kdocs[-1]['id']}/trace") if kdocs else None
        waits = [float(w) for w in args.late.split(",") if w.strip()]
        if waits:
            late["ordinary"] = [raw.ordinary() for _ in range(max(args.late_reps, 3))]
            for w in waits:
                late[w] = [raw.late(w) for _ in range(args.late_reps)]
    finally:
        for s in services.values():
            s.stop()
        kube_pass.stop()
    elapsed = time.monotonic() - t0

    print(f"runs: {args.runs} (+{args.warmup} warm-up), interleaved round-robin, total {elapsed:.1f} s, "
          f"load average now {os.getloadavg()[0]:.1f}")
    w = max(len(v[0]) for v in variants)
    stats = {}
    for name, kind, _ in variants:
        xs = samples[name]
        stats[kind] = {"name": name, "median_ms": statistics.median(xs), "p99_ms": pct(xs, 99), "min_ms": min(xs),
                       "samples_ms": xs}
        print(f"{name:<{w}}  median {stats[kind]['median_ms']:7.1f} ms   p99 {stats[kind]['p99_ms']:7.1f} ms   "
              f"min {min(xs):7.1f} ms")
    k = stats["kube"]["median_ms"]
    ratios = {f"kubernetes/{o}": k / stats[o]["median_ms"] for o in ("docker-pool2", "docker-pool0", "docker-run", "raw")}
    print("\nratios of medians: " + ", ".join(f"{a} {b:.2f}" for a, b in ratios.items()))
    print("\nraw double, per call (median ms): " + ", ".join(f"{a} {statistics.median(b):.0f}"
                                                          for a, b in phases.items()))
    walls = [d["result"].get("wall_ms") for d in kdocs if d.get("result")]
    if walls and all(x is not None for x in walls):
        print(f"kubernetes runs' result.wall_ms (main started to ended, from the pod's status): median "
              f"{statistics.median(walls):.0f} ms")
    if trace is not None:
        print("one kubernetes run's trace, keys:", sorted(trace) if isinstance(trace, dict) else type(trace))
    if late:
        o = late["ordinary"]
        print(f"\nSecret then Pod: Pod created -> main started: median {statistics.median(o):.0f} ms ({len(o)} runs)")
        for wt, xs in late.items():
            if wt == "ordinary":
                continue
            ds = [x[0] for x in xs]
            print(f"Pod first, Secret {wt:g} s later: Secret created -> main started: "
                  + ", ".join(f"{d:.0f}" for d in ds) + f" ms; the pod waited as {xs[0][1]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"stats": stats, "ratios": ratios, "phases_ms": phases,
                                               "walls_ms": walls, "trace": trace,
                                               "late": {str(a): b for a, b in late.items()},
                                               "elapsed_s": elapsed}, indent=1, default=str))


if __name__ == "__main__":
    main()
