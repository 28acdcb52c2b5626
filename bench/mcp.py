#!/usr/bin/env python3
"""MCP benchmark: the same trivial Python run (`pass`) through MCP tools/call
and through REST POST /v1/runs?wait=true, interleaved, on one service.

Variants: REST ?wait=true; MCP tools/call answered as JSON (Accept:
application/json); MCP tools/call answered as an event stream (Accept:
application/json, text/event-stream, as the official SDK sends it). Each MCP
call reuses one session made by initialize, as a client does. Prints medians
and p90 and the ratio MCP / REST.

Starts its own service on a free loopback port with its own state dir.
usage: /usr/bin/python3 bench/mcp.py [--runs 30]
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.path.join(ROOT, "build", "airlock")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="airlock-bench-mcp-")
    out = subprocess.run([AIRLOCK, "admin", "--state", state, "bootstrap"], capture_output=True, text=True, check=True).stdout
    key = next(w for w in out.split() if w.startswith("al_"))
    port = free_port()
    log = open(os.path.join(state, "serve.log"), "w")
    srv = subprocess.Popen([AIRLOCK, "serve", "--listen", f"127.0.0.1:{port}", "--state", state], stdout=log, stderr=log)
    auth = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        st, hdrs, _ = post(port, "/mcp", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}, auth)
        assert st == 200, st
        mcp = dict(auth, **{"Mcp-Session-Id": hdrs["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"})
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "code_execution", "arguments": {"language": "python", "code": "pass"}}}

        def rest():
            st, _, b = post(port, "/v1/runs?wait=true", {"language": "python", "code": "pass"}, auth)
            assert st == 200 and json.loads(b)["state"] == "succeeded", b

        def mcp_json():
            st, h, b = post(port, "/mcp", call, dict(mcp, Accept="application/json"))
            assert st == 200 and json.loads(b)["result"]["isError"] is False, b

        def mcp_sse():
            st, h, b = post(port, "/mcp", call, dict(mcp, Accept="application/json, text/event-stream"))
            assert st == 200 and h["content-type"] == "text/event-stream" and b'"isError":false' in b, b

        variants = {"REST POST /v1/runs?wait=true": rest, "MCP tools/call (JSON)": mcp_json,
                    "MCP tools/call (SSE)": mcp_sse}
        samples = {k: [] for k in variants}
        for i in range(3 + args.runs):
            for name, fn in variants.items():
                t = time.perf_counter()
                fn()
                if i >= 3:
                    samples[name].append((time.perf_counter() - t) * 1000)
        print(f"uname -r: {os.uname().release}   cpus: {os.cpu_count()}   runs: {args.runs} (+3 warm-up), interleaved")
        print(f"{'variant':<30} {'median ms':>10} {'p90 ms':>8}")
        for name, xs in samples.items():
            xs.sort()
            print(f"{name:<30} {statistics.median(xs):10.2f} {xs[int(0.9 * (len(xs) - 1))]:8.2f}")
        rest_m = statistics.median(samples["REST POST /v1/runs?wait=true"])
        for name in ("MCP tools/call (JSON)", "MCP tools/call (SSE)"):
            m = statistics.median(samples[name])
            print(f"{name} / REST: {m / rest_m:.2f}  ({m - rest_m:+.1f} ms)")
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
