#!/usr/bin/python3
"""Warm boxes (issue 14) against cold ones and bare processes, side by side.

Two `airlock serve` of this tree on the default image: warm_pool = 2 (the
default image's preloads: numpy, pandas, matplotlib with pyplot, PIL) and
warm_pool = 0, both at the default limits (0.5 CPU, 512 MiB).

1. Trivial Python, request to result (POST /v1/runs?wait=true of `pass`),
   warm and cold, interleaved with bare `python3 -c pass` on the host.
2. The chart script's first line: POST of `import pandas,
   matplotlib.pyplot; print(...)` and its events followed (SSE) until the
   first stdout event, warm and cold.
   The same for Node (`0`), against bare `node -e 0`.
3. Throughput with 16 clients of trivial Python, warm and cold, against
   bare `python3 -c pass` processes with 16 at once: each kept busy for
   --seconds, the three interleaved, --rounds times; medians.
4. Memory: what one idle warm box of each language holds (its cgroup's
   usage, as the pool shows it).

Each latency is measured with the warm service's three shapes (Python
without preloads, with them, Node) holding a ready box and none starting,
so that no refill's imports run beside it. Medians; the machine is shared.

Usage: /usr/bin/python3 bench/pool.py [--runs N] [--seconds S] [--rounds N]
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))
os.environ.setdefault("AIRLOCK_BIN", str(ROOT / "build" / "airlock"))

from image_util import ensure_default_image  # noqa: E402
from service_util import image_service  # noqa: E402

CHART = ("import pandas as pd, matplotlib.pyplot as plt\nprint('first line', flush=True)\n"
         "plt.plot([1, 2, 3], [3, 1, 2]); plt.savefig('/out/chart.png')")


def service(tmp, name, **config):
    return image_service(tmp / name, config)


def api(svc, language="python"):
    t = time.monotonic()
    doc = svc.run("pass" if language == "python" else "0", language=language, image="default")
    assert doc["state"] == "succeeded", doc
    return (time.monotonic() - t) * 1000, doc["result"]["box"].get("warm", False)


def first_line(svc):
    t = time.monotonic()
    status, _, doc = svc.post_run(CHART, image="default")
    assert status == 201, doc
    for _, ev, data, _ in svc.stream(doc["id"], timeout=120):
        if ev == "stdout":
            dt = (time.monotonic() - t) * 1000
            break
    else:
        raise AssertionError("no stdout event")
    run = svc.wait_state(doc["id"], {"succeeded", "failed", "error", "timed_out", "killed"}, timeout=120)
    assert run["state"] == "succeeded", run
    return dt, run["result"]["box"].get("warm", False)


def bare(cmd=("/usr/bin/python3", "-c", "pass")):
    t = time.monotonic()
    subprocess.run(list(cmd), check=True)
    return (time.monotonic() - t) * 1000, None


def wait_ready(svc, n=1, timeout=120, shapes=1):
    """Until SHAPES shapes hold N ready boxes each, and none is starting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = svc.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]
        if sum(sh["idle"] >= n and sh["starting"] == 0 for sh in st["shapes"]) >= shapes:
            return st
        time.sleep(0.05)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=5.0, help="how long each throughput window lasts")
    ap.add_argument("--rounds", type=int, default=3, help="throughput windows per variant")
    args = ap.parse_args()
    ensure_default_image()
    tmp = Path(tempfile.mkdtemp(prefix="airlock-bench-pool-"))
    warm = service(tmp, "warm", warm_pool=2, per_person_concurrency=16, max_concurrent=16)
    cold = service(tmp, "cold", warm_pool=0, per_person_concurrency=16, max_concurrent=16)
    out = {}
    try:
        # teach the warm service its shapes (`pass` gets a box without the
        # preloads, the chart one with them, and Node), then let it fill
        api(warm)
        first_line(warm)
        api(warm, "node")
        wait_ready(warm, 1, shapes=3)
        lat = {"bare python3 -c pass": [], "API pass, warm": [], "API pass, cold": [],
               "bare node -e 0": [], "API node 0, warm": [], "API node 0, cold": []}
        fl = {"chart first line, warm": [], "chart first line, cold": []}
        hits = {"API pass, warm": 0, "chart first line, warm": 0, "API node 0, warm": 0}
        for i in range(args.runs):
            for name, fn in [("bare python3 -c pass", bare), ("API pass, cold", lambda: api(cold)),
                             ("chart first line, cold", lambda: first_line(cold)),
                             ("bare node -e 0", lambda: bare(("/usr/bin/node", "-e", "0"))),
                             ("API node 0, cold", lambda: api(cold, "node"))]:
                # each measured with the warm service's refills done (a
                # preloaded box's imports take a second of CPU)
                wait_ready(warm, 1, shapes=3)
                dt, _ = fn()
                (lat if name in lat else fl)[name].append(dt)
            # the warm ones with a box ready, as an agent's next run finds it
            wait_ready(warm, 1, shapes=3)
            dt, w = api(warm)
            lat["API pass, warm"].append(dt)
            hits["API pass, warm"] += bool(w)
            wait_ready(warm, 1, shapes=3)
            dt, w = first_line(warm)
            fl["chart first line, warm"].append(dt)
            hits["chart first line, warm"] += bool(w)
            wait_ready(warm, 1, shapes=3)
            dt, w = api(warm, "node")
            lat["API node 0, warm"].append(dt)
            hits["API node 0, warm"] += bool(w)
        for name, xs in {**lat, **fl}.items():
            out[name] = statistics.median(xs)
            extra = f"   warm {hits[name]}/{len(xs)}" if name in hits else ""
            print(f"{name:<28} median {out[name]:8.1f} ms   min {min(xs):8.1f} ms{extra}")
        print(f"chart first line: cold / warm = {out['chart first line, cold'] / out['chart first line, warm']:.0f}x "
              f"(target >= 50x and warm <= 25 ms)")
        print(f"API pass warm / bare python3 -c pass = {out['API pass, warm'] / out['bare python3 -c pass']:.2f} "
              f"(target <= 1.0)")
        print(f"API node warm / bare node -e 0 = {out['API node 0, warm'] / out['bare node -e 0']:.2f}; "
              f"cold / warm = {out['API node 0, cold'] / out['API node 0, warm']:.2f}")

        # memory of idle warm boxes: what each said when ready (its cgroup's usage)
        st = wait_ready(warm, 1, shapes=3) or warm.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]
        for sh in st["shapes"]:
            mib = sh["box_bytes"] / 2 ** 20
            what = sh["language"] + (" preloaded" if sh["preload"] else "")
            if mib:
                print(f"idle warm box, {what:<17} (memory limit {sh['memory_bytes'] >> 20} MiB): {mib:.1f} MiB,"
                      f" about {int(24 * 1024 / mib)} fit in 24 GiB")
                out[f"idle_box_mib_{what.replace(' ', '_')}"] = mib

        # throughput, 16 clients
        def sustained(fn, seconds):
            """Runs per second with 16 clients each starting its next as
            its last ends, until SECONDS are up (a steady state, not a
            burst's ramp)."""
            t0 = time.monotonic()
            counts = [0] * 16

            def client(i):
                while time.monotonic() - t0 < seconds:
                    fn()
                    counts[i] += 1
            with cf.ThreadPoolExecutor(16) as ex:
                list(ex.map(client, range(16)))
            return sum(counts) / (time.monotonic() - t0)
        # thousands of runs: the organisation's credits for them
        for svc in (warm, cold):
            org = re.search(r"id=(org_[0-9a-z]+)", svc.admin("list")).group(1)
            svc.admin("credits", "grant", "--org", org, "1000000")
        rates = {"bare python3 -c pass": [], "API pass, cold": [], "API pass, warm": []}
        for _ in range(args.rounds):
            rates["bare python3 -c pass"].append(sustained(bare, args.seconds))
            rates["API pass, cold"].append(sustained(lambda: api(cold), args.seconds))
            rates["API pass, warm"].append(sustained(lambda: api(warm), args.seconds))
        tp = {k: statistics.median(v) for k, v in rates.items()}
        for k, v in tp.items():
            print(f"throughput, 16 clients, {k:<22} {v:6.1f} /s   (rounds: {', '.join('%.1f' % x for x in rates[k])})")
        print(f"warm throughput / bare = {tp['API pass, warm'] / tp['bare python3 -c pass']:.2f} (target >= 0.9)")
        st = warm.ok("GET", "/operator/status", key=None)["badges"]["pool"]["state"]
        print("pool:", json.dumps({k: st[k] for k in ("hits", "misses", "idle", "starting")}))
        out["throughput"] = tp
    finally:
        warm.stop()
        cold.stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
