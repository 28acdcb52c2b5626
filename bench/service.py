#!/usr/bin/env python3
"""Service benchmark: a trivial Python run through the API against `airlock run`.

1. Latency: request-to-result of POST /v1/runs?wait=true with `pass`,
   interleaved with `airlock run --lang python -c pass` and bare
   `python3 -c pass`; medians and the ratio API / CLI.
2. Throughput: runs per second through the API at saturation (16 clients,
   N runs), against the ceiling of bare `python3 -c pass` processes per
   second with the same client concurrency on this machine.

Starts its own service on a free loopback port with its own state dir.
usage: /usr/bin/python3 bench/service.py [--runs 30] [--load 200]
"""
import argparse
import concurrent.futures as cf
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.path.join(ROOT, "build", "airlock")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post_run(base, key, code):
    req = urllib.request.Request(base + "/v1/runs?wait=true", method="POST",
                                 data=json.dumps({"language": "python", "code": code}).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        doc = json.load(r)
    if doc["state"] != "succeeded":
        sys.exit(f"run did not succeed: {doc['state']} {doc.get('error')}")
    return doc


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--load", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="airlock-bench-")
    out = subprocess.run([AIRLOCK, "admin", "--state", state, "bootstrap"], capture_output=True, text=True, check=True).stdout
    key = next(w for w in out.split() if w.startswith("al_"))
    port = free_port()
    cfg = os.path.join(state, "airlock.conf")
    with open(cfg, "w") as f:
        # throughput is the point: let the scheduler use every slot
        f.write(f"max_concurrent = {args.clients}\nper_person_concurrency = {args.clients}\n")
    log = open(os.path.join(state, "serve.log"), "w")
    srv = subprocess.Popen([AIRLOCK, "serve", "--config", cfg, "--listen", f"127.0.0.1:{port}", "--state", state],
                           stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        devnull = subprocess.DEVNULL
        variants = {
            "bare python3 -c pass": lambda: subprocess.run(["/usr/bin/python3", "-c", "pass"], stdout=devnull, check=True),
            "airlock run (CLI)": lambda: subprocess.run([AIRLOCK, "run", "--lang", "python", "-c", "pass"],
                                                        stdout=devnull, stderr=devnull, check=True),
            "API POST /v1/runs?wait=true": lambda: post_run(base, key, "pass"),
        }
        samples = {k: [] for k in variants}
        for i in range(3 + args.runs):
            for name, fn in variants.items():
                t = timed(fn)
                if i >= 3:
                    samples[name].append(t)
        print(f"uname -r: {os.uname().release}   cpus: {os.cpu_count()}   runs: {args.runs} (+3 warm-up), interleaved")
        print(f"{'variant':<30} {'median ms':>10} {'p90 ms':>8}")
        for name, xs in samples.items():
            xs.sort()
            print(f"{name:<30} {statistics.median(xs):10.2f} {xs[int(0.9 * (len(xs) - 1))]:8.2f}")
        api, cli = statistics.median(samples["API POST /v1/runs?wait=true"]), statistics.median(samples["airlock run (CLI)"])
        print(f"API / CLI latency ratio: {api / cli:.2f}  (API adds {api - cli:.1f} ms over the CLI)")

        def rate(fn, n):
            t = time.perf_counter()
            with cf.ThreadPoolExecutor(args.clients) as ex:
                list(ex.map(lambda _: fn(), range(n)))
            return n / (time.perf_counter() - t)

        bare_rate = rate(variants["bare python3 -c pass"], args.load)
        api_rate = rate(lambda: post_run(base, key, "pass"), args.load)
        print(f"\nthroughput with {args.clients} clients, {args.load} runs each:")
        print(f"  bare python3 -c pass: {bare_rate:7.1f} processes/s (the ceiling)")
        print(f"  API runs:             {api_rate:7.1f} runs/s  ({api_rate / bare_rate:.2f} of the ceiling)")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
