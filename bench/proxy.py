#!/usr/bin/python3
"""Egress proxy benchmark: a download and small requests through a box's
proxy against the same requests made directly, both to the network tests'
loopback test hosts (tests/integration/net_util.py: a network namespace
joined by a veth pair, Python's HTTP server).

The client is the same Python script in both cases; it times only the
requests (not interpreter or box start): throughput of a SIZE download
(MB/s) and the latency of small GETs, each over a fresh connection. The
proxied run is a box with --net internet and 2 CPUs like the direct client; since the test hosts sit on the
benchmarking range, it uses a release build with test hooks (build-hooks/,
made here if missing). Rounds alternate direct and proxied; medians.

Usage: /usr/bin/python3 bench/proxy.py [--rounds N] [--mib N] [--gets N] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
BUILD = ROOT / "build-hooks"

CLIENT = r'''
import json, sys, time, socket
mib, gets = int(sys.argv[1]), int(sys.argv[2])
import urllib.request
opener = urllib.request.build_opener()          # honours HTTP_PROXY when it is set
t = time.perf_counter()
n = 0
with opener.open(f"http://198.18.0.3/bytes?n={mib << 20}", timeout=60) as r:
    while True:
        b = r.read(1 << 16)
        if not b:
            break
        n += len(b)
dl = time.perf_counter() - t
assert n == mib << 20, n
lat = []
for i in range(gets):
    t = time.perf_counter()
    with opener.open("http://198.18.0.3/small", timeout=10) as r:
        r.read()
    lat.append(time.perf_counter() - t)
lat.sort()
print(json.dumps({"mb_s": n / dl / 1e6, "get_ms": lat[len(lat) // 2] * 1000}))
'''


def ensure_build():
    if not (BUILD / "build.ninja").exists():
        subprocess.run(["meson", "setup", str(BUILD), "-Dtest_hooks=true"], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", str(BUILD)], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--gets", type=int, default=50)
    ap.add_argument("--json")
    a = ap.parse_args()
    ensure_build()
    os.environ.setdefault("AIRLOCK_MUST_WORK", "1")
    from net_util import NetHosts
    hosts = NetHosts().start()
    env = hosts.env(AIRLOCK_PROXY_MAX_BYTES="64G")
    env.pop("ASAN_OPTIONS"), env.pop("UBSAN_OPTIONS")
    direct, proxied = [], []
    try:
        for i in range(a.rounds):
            for kind in (("direct", "proxied") if i % 2 == 0 else ("proxied", "direct")):
                if kind == "direct":
                    p = subprocess.run(["/usr/bin/python3", "-c", CLIENT, str(a.mib), str(a.gets)],
                                       capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
                    if p.returncode != 0:
                        sys.exit(f"direct run failed: {p.stderr[-2000:]}")
                    direct.append(json.loads(p.stdout))
                else:
                    p = subprocess.run([str(BUILD / "airlock"), "run", "--net", "internet", "--timeout", "300",
                                        "--memory", "256M", "--cpus", "2", "--lang", "python", "-c", CLIENT,
                                        str(a.mib), str(a.gets)], capture_output=True, text=True, env=env)
                    if p.returncode != 0:
                        sys.exit(f"proxied run failed: {p.stderr[-2000:]}")
                    proxied.append(json.loads(p.stdout))
    finally:
        hosts.stop()
    # what a proxied box costs to start: the listener, the proxy's fork
    start = {"offline": [], "internet": []}
    for i in range(a.rounds * 4):
        for net in (("offline", "internet") if i % 2 == 0 else ("internet", "offline")):
            t = time.perf_counter()
            subprocess.run([str(BUILD / "airlock"), "run", "--net", net, "--lang", "bash", "-c", "true"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            start[net].append((time.perf_counter() - t) * 1000)
    s_off, s_net = statistics.median(start["offline"]), statistics.median(start["internet"])
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    d_mb, p_mb = med(direct, "mb_s"), med(proxied, "mb_s")
    d_ms, p_ms = med(direct, "get_ms"), med(proxied, "get_ms")
    out = {"rounds": a.rounds, "mib": a.mib, "gets": a.gets,
           "direct": {"mb_s": round(d_mb, 1), "get_ms": round(d_ms, 3)},
           "proxied": {"mb_s": round(p_mb, 1), "get_ms": round(p_ms, 3)},
           "throughput_ratio": round(p_mb / d_mb, 3), "latency_ratio": round(p_ms / d_ms, 3),
           "added_latency_ms": round(p_ms - d_ms, 3),
           "start_ms": {"offline": round(s_off, 2), "internet": round(s_net, 2)}}
    print(f"download of {a.mib} MiB, median of {a.rounds}: direct {d_mb:.1f} MB/s, through the proxy {p_mb:.1f} MB/s "
          f"(ratio {p_mb / d_mb:.2f})")
    print(f"small GET, fresh connection, median of {a.gets}x{a.rounds}: direct {d_ms:.3f} ms, through the proxy "
          f"{p_ms:.3f} ms (ratio {p_ms / d_ms:.2f}, +{p_ms - d_ms:.3f} ms)")
    print(f"airlock run bash -c true, median of {a.rounds * 4}: offline {s_off:.2f} ms, with the proxy {s_net:.2f} ms "
          f"(+{s_net - s_off:.2f} ms)")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")


main()
