#!/usr/bin/python3
"""Cold and forked start of two airlock binaries, side by side.

A before and an after of a change to the box (say the build of the commit
before it, copied aside, and this tree's): each round runs four variants in
a rotated order, so the machine's noise hits each alike.

- cold: `airlock run --lang python -c pass`, spawn to exit.
- forked: `airlock helper` with the run's job and `fork_fd`, as the warm
  pool starts one, against a zygote of the same binary (`airlock helper`
  with a zygote job, started once): spawn to its result line. Root and
  cgroup v1, as forked boxes are.

Usage: /usr/bin/python3 bench/fork_start.py OLD_BIN NEW_BIN [--runs N]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time


class Zygote:
    """A zygote of the host runtime (a pool's), and the other end of its request socket."""

    def __init__(self, binary):
        a, self.req = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.bin = binary
        job = {"zygote": True, "zygote_fd": a.fileno(), "language": "python", "code": ""}
        self.p = subprocess.Popen([binary, "helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, pass_fds=(a.fileno(),))
        a.close()
        self.p.stdin.write((json.dumps(job) + "\n").encode())
        self.p.stdin.flush()
        ev = json.loads(self.p.stdout.readline() or b"{}")
        if ev.get("type") != "ready":
            raise SystemExit(f"{binary}: no zygote here: {ev}")

    def run(self, out):
        job = {"language": "python", "code": "pass", "out_dir": out, "fork_fd": self.req.fileno(),
               "limits": {"timeout_s": 10}}
        t0 = time.perf_counter_ns()
        p = subprocess.Popen([self.bin, "helper"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, pass_fds=(self.req.fileno(),))
        p.stdin.write((json.dumps(job) + "\n").encode())
        p.stdin.flush()
        got = None
        for line in p.stdout:
            ev = json.loads(line)
            if ev.get("type") in ("result", "error"):
                got = ev
                break
        dt = (time.perf_counter_ns() - t0) / 1e6
        # (its stdin open until the result: its end is a cancel)
        p.stdin.close()
        p.wait()
        if not got or got["type"] != "result" or got["result"]["exit_code"] != 0 or not got["result"]["box"].get("forked"):
            raise SystemExit(f"{self.bin}: forked run failed: {got}")
        return dt

    def close(self):
        self.req.close()
        self.p.kill()
        self.p.wait()


def cold(binary):
    t0 = time.perf_counter_ns()
    r = subprocess.run([binary, "run", "--lang", "python", "-c", "pass"], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        raise SystemExit(f"{binary}: cold run failed ({r.returncode})")
    return (time.perf_counter_ns() - t0) / 1e6


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    zygotes = {"old": Zygote(os.path.abspath(args.old)), "new": Zygote(os.path.abspath(args.new))}
    out = tempfile.mkdtemp(prefix="airlock-bench-")
    variants = {"cold old": lambda: cold(args.old), "cold new": lambda: cold(args.new),
                "forked old": lambda: zygotes["old"].run(out), "forked new": lambda: zygotes["new"].run(out)}
    names = list(variants)
    try:
        for _ in range(args.warmup):
            for n in names:
                variants[n]()
        res = {n: [] for n in names}
        for i in range(args.runs):
            k = i % len(names)
            for n in names[k:] + names[:k]:
                res[n].append(variants[n]())
    finally:
        for z in zygotes.values():
            z.close()
    for n in names:
        print(f"{n:11s} median {statistics.median(res[n]):7.2f} ms   p99 {pct(res[n], 99):7.2f} ms   (n={len(res[n])})")


if __name__ == "__main__":
    main()
