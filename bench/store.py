#!/usr/bin/env python3
"""Store benchmark: the same service on SQLite, on PostgreSQL, and as two
nodes on one PostgreSQL database, side by side.

For each store: runs per second of trivial Python (`pass`) through the API
with 16 clients (POST /v1/runs?wait=true), request-to-result latency of one
client, and the store's own cost per run from the daemon's /metrics
(airlock_store_statements_total, airlock_store_busy_seconds_total: statements
the store sent and the time spent in it, waits for a connection of its
pool included). Its target: the store costs at most 10% of a run's end-to-end time.

PostgreSQL is a real cluster started here (tests/integration/pg_util.py:
Debian's postgresql-15, socket only, fsync off as in the tests; say so when
quoting). Rounds alternate between the stores; medians are quoted.
With --against OTHER_BINARY (e.g. a build of main), the same rounds also
run OTHER_BINARY's service on its own stores, alternating with this one's:
a before and after measured side by side on the same machine at the same
time. With --history N, each store first holds N finished runs of the
person the clients run as (written straight into it, as
test_store_history.py does: tests/integration/history_util.py), the past of
a service that has been in use for a while.
usage: /usr/bin/python3 bench/store.py [--load 200] [--clients 16] [--rounds 3] [--history N] [--airlock BIN]
                                       [--against BIN]
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.path.join(ROOT, "build", "airlock")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import pg_util  # noqa: E402
from history_util import past_runs  # noqa: E402
from service_util import store_sql  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One `airlock serve`; with PEER, another node on PEER's store and state."""

    def __init__(self, store, clients, peer=None, airlock=AIRLOCK):
        self.store = store
        self.state = peer.state if peer else tempfile.mkdtemp(prefix="airlock-bench-store-")
        self.store_args = ["--state", self.state] + (["--store", store] if store else [])
        self.port = free_port()
        cfg = os.path.join(self.state, f"airlock-{self.port}.conf")
        with open(cfg, "w") as f:
            f.write(f"max_concurrent = {clients}\nper_person_concurrency = {clients}\n")
        if peer:
            self.key = peer.key
        else:
            out = subprocess.run([airlock, "admin", *self.store_args, "bootstrap"], capture_output=True, text=True,
                                 check=True).stdout
            self.key = next(w for w in out.split() if w.startswith("al_"))
            # credits are not what is measured: enough for every run
            org = re.search(r"\borg_\w+", subprocess.run([airlock, "admin", *self.store_args, "list"],
                                                           capture_output=True, text=True, check=True).stdout).group(0)
            subprocess.run([airlock, "admin", *self.store_args, "credits", "grant", "--org", org, "1000000"],
                           capture_output=True, check=True)
        self.log = open(os.path.join(self.state, f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen([airlock, "serve", "--config", cfg, "--listen", f"127.0.0.1:{self.port}",
                                      *self.store_args], stdout=self.log, stderr=self.log)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=1).read()
                return
            except OSError:
                time.sleep(0.05)
        sys.exit(f"the service on {store or 'sqlite'} did not start: see {self.state}/serve.log")

    def run(self):
        req = urllib.request.Request(self.base + "/v1/runs?wait=true", method="POST",
                                     data=json.dumps({"language": "python", "code": "pass"}).encode(),
                                     headers={"Authorization": "Bearer " + self.key,
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            doc = json.load(r)
        if doc["state"] != "succeeded":
            sys.exit(f"run did not succeed: {doc['state']} {doc.get('error')}")
        return doc["id"]

    def sql(self, query, *params):
        """One statement on the node's store, behind its back: the rows."""
        return store_sql(self.store, os.path.join(self.state, "airlock.db"), query, params)[0]

    def store_cost(self):
        text = urllib.request.urlopen(self.base + "/metrics", timeout=10).read().decode()
        got = {}
        for name in ("airlock_store_statements_total", "airlock_store_busy_seconds_total"):
            m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
            if not m:
                sys.exit(f"/metrics has no {name}")
            got[name] = float(m.group(1))
        return got["airlock_store_statements_total"], got["airlock_store_busy_seconds_total"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def cost(group):
    """Statements and store seconds, summed over the nodes of GROUP."""
    st, busy = 0.0, 0.0
    for n in group:
        a, b = n.store_cost()
        st, busy = st + a, busy + b
    return st, busy


def measure(group, load, clients):
    """GROUP: the nodes of one store; clients spread over them."""
    st0, busy0 = cost(group)
    t = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        list(ex.map(lambda i: group[i % len(group)].run(), range(load)))
    wall = time.perf_counter() - t
    st1, busy1 = cost(group)
    lat = []
    for i in range(20):
        t = time.perf_counter()
        group[i % len(group)].run()
        lat.append((time.perf_counter() - t) * 1000)
    st2, busy2 = cost(group)
    return {"rate": load / wall, "stmts": (st1 - st0) / load, "busy_ms": (busy1 - busy0) * 1000 / load,
            "latency": statistics.median(lat), "busy_ms_1": (busy2 - busy1) * 1000 / 20,
            "stmts_1": (st2 - st1) / 20}


def groups_for(cluster, airlock, clients):
    """The three stores of one binary: SQLite, PostgreSQL, two nodes on one PostgreSQL."""
    pg1 = Node(cluster.uri(cluster.new_database("bench")), clients, airlock=airlock)
    uri2 = cluster.uri(cluster.new_database("bench"))
    pg2a = Node(uri2, clients, airlock=airlock)
    pg2b = Node(uri2, clients, peer=pg2a, airlock=airlock)
    # each node's own box capacity is the clients' half: the two together
    # have what the single node has
    return {"sqlite": [Node(None, clients, airlock=airlock)], "postgresql": [pg1], "pg 2 nodes": [pg2a, pg2b]}


def report(label, results):
    if label:
        print(f"-- {label}")
    print(f"{'store':<11} {'runs/s':>7} {'stmts/run':>9} {'1-client ms':>11} {'stmts/run':>9} {'store ms/run':>12} "
          f"{'store share':>11}")
    for name, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        # the store's share of one run's end-to-end time, one client at a time
        share = med["busy_ms_1"] / med["latency"]
        print(f"{name:<11} {med['rate']:7.1f} {med['stmts']:9.1f} {med['latency']:11.1f} {med['stmts_1']:9.1f} "
              f"{med['busy_ms_1']:12.2f} {share:10.1%}")
    r = {k: statistics.median(x["rate"] for x in v) for k, v in results.items()}
    print(f"PostgreSQL / SQLite throughput: {r['postgresql'] / r['sqlite']:.2f}; two PostgreSQL nodes / one: "
          f"{r['pg 2 nodes'] / r['postgresql']:.2f} (both nodes share this machine's cores)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--history", type=int, default=0, help="finished runs each store holds before the rounds")
    ap.add_argument("--airlock", default=AIRLOCK, help="the airlock binary measured (default: build/airlock)")
    ap.add_argument("--against", help="another airlock binary, measured in the same rounds, alternating")
    args = ap.parse_args()
    cluster = pg_util.cluster()
    binaries = {args.airlock: groups_for(cluster, args.airlock, args.clients)}
    if args.against:
        binaries[args.against] = groups_for(cluster, args.against, args.clients)
    results = {b: {k: [] for k in g} for b, g in binaries.items()}
    try:
        for groups in binaries.values():  # warm-up
            for g in groups.values():
                for i in range(6):
                    last = g[i % len(g)].run()
                if args.history:
                    past_runs(g[0].sql, g[0].store, last, args.history)
        for rnd in range(args.rounds):
            # which binary goes first alternates too
            order = list(binaries.items())
            if rnd % 2:
                order.reverse()
            for b, groups in order:
                for name, g in groups.items():
                    results[b][name].append(measure(g, args.load, args.clients))
    finally:
        for groups in binaries.values():
            for g in groups.values():
                for n in g:
                    n.stop()
    print(f"uname -r: {os.uname().release}   cpus: {os.cpu_count()}   {args.rounds} rounds of {args.load} runs, "
          f"{args.clients} clients, medians; PostgreSQL 15 on a local socket, fsync off"
          + (f"; each store first held {args.history} finished runs of the clients' person" if args.history else ""))
    print("runs/s and the first stmts/run: the 16 clients; the rest: one client at a time")
    for b, res in results.items():
        report(b if args.against else "", res)


if __name__ == "__main__":
    main()
