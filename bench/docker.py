#!/usr/bin/python3
"""The docker driver through the service, against `docker run --rm`.

One run, request to result: POST /v1/runs?wait=true of `pass` in Python on
the default image, to `airlock serve` with driver = docker (runc and runsc),
with its containers made ahead of need (docker_pool = 2, the default) and
without (docker_pool = 0); beside it `docker run --rm` of the same image, as
hardened as the driver's container (read-only, no network, no capabilities,
its own uid, memory, pids and CPU caps as the driver sets by default, an init), and the native box through the
same API on the same image. Every variant runs in one loop, interleaved
round-robin with the order rotated each round, so the machine's noise hits
them alike; medians are quoted. The dockerd is the tests' helper
(tests/integration/docker_util.py) on a data root and socket of the bench's
own; nothing is pulled.

Between two runs of one service the other variants run, so its pool has
had time to refill: the figure is a run that finds a container ready (the
service's /healthz says how many did: hits and misses). --burst N adds N
back-to-back runs per service at the end, where the pool cannot keep up.

Usage: /usr/bin/python3 bench/docker.py [--runs N] [--warmup N] [--burst N] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
os.environ.setdefault("AIRLOCK_TEST_DOCKER_RUN", "/run/airlock-bench-docker")
os.environ.setdefault("AIRLOCK_TEST_DOCKER_DATA", "/var/cache/airlock-bench-docker")
os.environ.setdefault("AIRLOCK_BIN", str(ROOT / "build" / "airlock"))

import docker_util  # noqa: E402
from image_util import CACHE, ensure_default_image  # noqa: E402
from service_util import image_service  # noqa: E402


def api_run(svc, body):
    t = time.monotonic()
    status, _, doc = svc.request("POST", "/v1/runs", json=body, query={"wait": "true"}, timeout=120)
    dt = (time.monotonic() - t) * 1000
    assert status == 200 and doc["state"] == "succeeded", (status, doc)
    return dt, doc["result"].get("box", {}).get("pooled")


def docker_run(cmd, env):
    t = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.monotonic() - t) * 1000, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--burst", type=int, default=0)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    sock = docker_util.start()
    digest = ensure_default_image()["digest"].split(":")[-1]
    denv = docker_util.env()
    img = "airlock-image:" + digest
    # the driver loads the image into this daemon on its first run
    subprocess.run([str(ROOT / "build" / "airlock"), "run", "--driver", "docker", "--lang", "python", "-c", "pass"],
                   env=dict(denv, AIRLOCK_STATE=str(CACHE)), check=True, stdout=subprocess.DEVNULL)
    hard = ["--rm", "--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--user", "1900099999:1900099999", "--tmpfs", "/tmp", "--memory", "512m", "--pids-limit", "256", "--cpus", "0.5",
            "--init"]

    tmp = Path(tempfile.mkdtemp(prefix="airlock-bench-docker-"))
    services = {}

    def service(name, **config):
        services[name] = image_service(tmp / name, config)
        return services[name]

    body = {"language": "python", "code": "pass"}
    variants = []
    for rt in ("runc", "runsc"):
        for pool in (2, 0):
            s = service(f"{rt}-pool{pool}", driver="docker", docker_socket=str(sock), runtime=rt, docker_pool=pool)
            variants.append((f"API, docker driver {rt}, pool {pool}", rt, f"pool{pool}",
                             lambda s=s: api_run(s, body)))
        cmd = ["docker", "run", *(["--runtime", "runsc"] if rt == "runsc" else []), *hard, img, "python3", "-c", "pass"]
        variants.append((f"docker run --rm ({rt}) python3 -c pass", rt, "docker-run",
                         lambda cmd=cmd: docker_run(cmd, denv)))
    nat = service("native", driver="native")
    variants.append(("API, native box, same image", "native", "native",
                     lambda: api_run(nat, dict(body, image="default"))))

    samples = {v[0]: [] for v in variants}
    pooled = {v[0]: [] for v in variants}
    n = len(variants)
    t0 = time.monotonic()
    try:
        for it in range(args.warmup + args.runs):
            for j in range(n):
                name, _, _, fn = variants[(it + j) % n]
                dt, p = fn()
                if it >= args.warmup:
                    samples[name].append(dt)
                    pooled[name].append(p)
        bursts = {}
        for name, s in services.items():
            if args.burst and name.endswith("pool2"):
                xs = [api_run(s, body) for _ in range(args.burst)]
                bursts[name] = {"median_ms": statistics.median(x[0] for x in xs),
                                "pooled": sum(1 for x in xs if x[1])}
        pools = {name: s.ok("GET", "/operator/status", key=None)["badges"].get("pool", {}).get("state")
                 for name, s in services.items() if "pool" in name}
    finally:
        for s in services.values():
            s.stop()
        docker_util.stop()
    elapsed = time.monotonic() - t0

    print(f"runs: {args.runs} (+{args.warmup} warm-up), interleaved round-robin, total {elapsed:.1f} s, "
          f"load average now {os.getloadavg()[0]:.1f}")
    w = max(len(v[0]) for v in variants)
    stats = {}
    for name, rt, kind, _ in variants:
        xs = samples[name]
        stats[name] = {"runtime": rt, "kind": kind, "median_ms": statistics.median(xs), "min_ms": min(xs),
                       "samples_ms": xs, "pooled_runs": sum(1 for p in pooled[name] if p)}
        extra = f"   pooled {stats[name]['pooled_runs']}/{len(xs)}" if kind.startswith("pool") else ""
        print(f"{name:<{w}}  median {stats[name]['median_ms']:7.1f} ms   min {min(xs):7.1f} ms{extra}")

    def med(rt, kind):
        return next(s["median_ms"] for s in stats.values() if s["runtime"] == rt and s["kind"] == kind)

    print()
    key = {}
    for rt in ("runc", "runsc"):
        ref = med(rt, "docker-run")
        on, off = med(rt, "pool2"), med(rt, "pool0")
        key[rt] = {"docker_run_ms": ref, "pool_ms": on, "no_pool_ms": off, "ratio_pool": on / ref,
                   "ratio_no_pool": off / ref}
        verdict = "OK" if on / ref <= 0.5 else "ABOVE TARGET"
        print(f"{rt:<6} docker run --rm {ref:7.1f} ms   driver, pool {on:7.1f} ms (ratio {on / ref:4.2f}, target <= 0.5: "
              f"{verdict})   no pool {off:7.1f} ms (ratio {off / ref:4.2f})")
    print(f"native box through the same API: {med('native', 'native'):7.1f} ms")
    for name, b in bursts.items():
        print(f"burst of {args.burst} back-to-back, {name}: median {b['median_ms']:.1f} ms, pooled {b['pooled']}")
    print("pools:", json.dumps(pools))
    if args.json:
        Path(args.json).write_text(json.dumps({"stats": stats, "key": key, "bursts": bursts, "pools": pools,
                                               "elapsed_s": elapsed}, indent=1))


if __name__ == "__main__":
    main()
