#!/usr/bin/env python3
"""E2B benchmark: time to first output of a new sandbox through the official
e2b SDK (`Sandbox.create()` then `commands.run('echo hi')`, measured in the
client, bench/e2b_client.mjs), interleaved with the same work through
airlock's REST API (POST /v1/runs?wait=true, bash `echo hi`, request to
result), on one service; medians and p99, and the ratios to the peers'
published figures: ComputeSDK's independent 100-run benchmark (2026-04-01,
time from create to the first command's completion, client side) measured
E2B at 0.44 s median (p99 0.99 s) and Daytona at 0.11 s (p99 0.29 s).

Not like for like: the peers' figures are a client reaching their cloud
over the Internet (a round trip or more per call, and their sandboxes are
VMs or containers that stay up); these are airlock on loopback, where a
sandbox is a directory and each command one fresh box. The ratios say how
much of a budget airlock's own work leaves, not that a remote airlock would
beat them by as much.

Each iteration is one e2b sample then one REST sample, so a drift of the
machine's speed hits both alike. The Node process is started once (as an
application makes many sandboxes in one process); each sandbox is killed
after its sample, untimed.

Starts its own service on a free loopback port with its own state dir.
usage: /usr/bin/python3 bench/e2b.py [--runs 100] [--warmup 3]
(needs `npm ci` in tests/e2e once, and a build with the E2B API)
"""
import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.environ.get("AIRLOCK_BIN", os.path.join(ROOT, "build", "airlock"))
CLIENT = os.path.join(ROOT, "bench", "e2b_client.mjs")
# (median s, p99 s): ComputeSDK benchmarks, 2026-04-01, 100 iterations, create -> first command done
PEERS = {"E2B": (0.44, 0.99), "Daytona": (0.11, 0.29)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def p99(xs):
    """Nearest rank: with 100 samples, the 99th smallest."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(0.99 * len(xs)) - 1)]


def rest_echo(base, key):
    req = urllib.request.Request(base + "/v1/runs?wait=true", method="POST",
                                 data=json.dumps({"language": "bash", "code": "echo hi"}).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        doc = json.load(r)
    ms = (time.perf_counter() - t) * 1000
    if doc["state"] != "succeeded" or (doc.get("result") or {}).get("stdout") != "hi\n":
        sys.exit(f"REST run did not print hi: {doc['state']} {doc.get('error')} {doc.get('result')}")
    return ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("node") or not os.path.isdir(os.path.join(ROOT, "tests", "e2e", "node_modules", "e2b")):
        sys.exit("needs node and the e2b SDK: (cd tests/e2e && npm ci)")
    state = tempfile.mkdtemp(prefix="airlock-bench-e2b-")
    out = subprocess.run([AIRLOCK, "admin", "--state", state, "bootstrap"], capture_output=True, text=True, check=True).stdout
    key = next(w for w in out.split() if w.startswith("al_"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(os.path.join(state, "serve.log"), "w")
    srv = subprocess.Popen([AIRLOCK, "serve", "--listen", f"127.0.0.1:{port}", "--state", state], stdout=log, stderr=log)
    node = None
    ok = False
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        node = subprocess.Popen(["node", CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, AIRLOCK_URL=base, AIRLOCK_API_KEY=key))

        def e2b_once():
            node.stdin.write("run\n")
            node.stdin.flush()
            line = node.stdout.readline()
            doc = json.loads(line) if line else {"error": "the Node client exited"}
            if "error" in doc:
                sys.exit(f"e2b SDK sample failed: {doc['error']}\n(service log: {log.name})")
            return doc

        samples = {"first": [], "create": [], "total": [], "rest": []}
        streamed = 0
        for i in range(args.warmup + args.runs):
            e = e2b_once()
            r = rest_echo(base, key)
            if i < args.warmup:
                continue
            samples["first"].append(e["first_output_ms"])
            samples["create"].append(e["create_ms"])
            samples["total"].append(e["total_ms"])
            samples["rest"].append(r)
            streamed += bool(e["streamed"])
        print(f"uname -r: {os.uname().release}   cpus: {os.cpu_count()}   runs: {args.runs} (+{args.warmup} warm-up), "
              f"interleaved e2b / REST; {streamed} of {args.runs} e2b outputs came as a stdout frame before the end")
        rows = [("e2b SDK: create -> first output", "first"), ("e2b SDK: Sandbox.create() alone", "create"),
                ("e2b SDK: create -> command done", "total"), ("REST POST /v1/runs?wait=true", "rest")]
        print(f"{'variant':<36} {'median ms':>10} {'p99 ms':>9}")
        for name, k in rows:
            print(f"{name:<36} {statistics.median(samples[k]):10.1f} {p99(samples[k]):9.1f}")
        first, rest = statistics.median(samples["first"]), statistics.median(samples["rest"])
        print(f"e2b path / REST (median, first output): {first / rest:.2f}  (the E2B surface adds {first - rest:.1f} ms)")
        done_med, done_p99 = statistics.median(samples["total"]) / 1000, p99(samples["total"]) / 1000
        first_p99 = p99(samples["first"]) / 1000
        for peer, (med, tail) in PEERS.items():
            print(f"vs {peer} (ComputeSDK: {med:.2f} s median, {tail:.2f} s p99), airlock / {peer}: "
                  f"first output {first / 1000 / med:.3f} median ({med * 1000 / first:.1f}x faster), {first_p99 / tail:.3f} p99; "
                  f"command done {done_med / med:.3f} median, {done_p99 / tail:.3f} p99")
        ok = True
    finally:
        if node:
            node.stdin.close()
            node.wait(timeout=30)
        srv.terminate()
        srv.wait(timeout=30)
        if ok:      # a failed bench keeps its state dir: the service log is the reason
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
