"""What a run's packages cost (issue 38): the first run that installs a
small npm package (left-pad, from registry.npmjs.org through the egress
proxy) against a later run of the same set, which reuses its layer; and a
run with a layer mounted against the same run without one (start time).

    /usr/bin/python3 bench/packages.py [BINARY] [RUNS] [INSTALLS]

Needs the default and installer images in AIRLOCK_IMAGES (else
/var/cache/airlock-tests/state/images: `airlock image build installer`).
Layers go to a fresh state directory, so the first run always installs.
The registry's address is read here and given as its range (it resolves
into a reserved range on some networks, which the proxy refuses otherwise).

Prints, as medians and p99 (interleaved rounds, INSTALLS of them, each with
a fresh layer store): the first run's wall time and its install step, the
second run's (reusing the layer), and the peer beside them, a bare `npm
install` of the same package on the host (no box, no proxy) and its
require; then RUNS runs with the layer against RUNS without, and the ratios (the layer's bind is an overlay mount: the cost a mounted
layer adds to a cold box's start)."""
import json
import shutil
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/airlock"
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
INSTALLS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
IMAGES = os.environ.get("AIRLOCK_IMAGES", "/var/cache/airlock-tests/state/images")
CODE = 'console.log(require("left-pad")("1", 3, "0"))'


def run(state, *extra):
    env = dict(os.environ, AIRLOCK_STATE=state, AIRLOCK_IMAGES=IMAGES)
    t = time.monotonic()
    p = subprocess.run([BIN, "run", "--json", "--image", "default", *extra, "--lang", "node", "-c", CODE],
                       capture_output=True, env=env, timeout=600)
    wall = (time.monotonic() - t) * 1000
    doc = json.loads(p.stdout)
    return wall, doc, p.stderr.decode(errors="replace")


def p99(xs):
    """The 99th percentile (nearest rank): with fewer than 100 samples, the
    largest."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, -(-99 * len(xs) // 100) - 1))]


def line(name, xs):
    print(f"{name:34s} median {statistics.median(xs):8.1f} ms  p99 {p99(xs):8.1f} ms  (n={len(xs)})")


def bare_npm():
    """The peer: npm on the host, unboxed, no proxy, installing the same
    package into a fresh prefix and then requiring it (what an agent's
    `npm install` in a plain container costs, without any isolation)."""
    d = tempfile.mkdtemp(prefix="airlock-bench-npm-")
    try:
        t = time.monotonic()
        subprocess.run(["npm", "install", "--prefix", d, "--no-audit", "--no-fund", "--no-bin-links",
                        "--cache", os.path.join(d, ".cache"), "left-pad@1.3.0"],
                       check=True, capture_output=True, timeout=300)
        out = subprocess.run(["node", "-e", CODE], cwd=d, check=True, capture_output=True, timeout=60,
                             env=dict(os.environ, NODE_PATH=os.path.join(d, "node_modules")))
        assert out.stdout == b"001\n", out
        return (time.monotonic() - t) * 1000
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    addr = socket.getaddrinfo("registry.npmjs.org", 443, socket.AF_INET)[0][4][0]
    pkg = ["--package", "node:left-pad@1.3.0", "--package-registries", f"registry.npmjs.org={addr}/32"]
    installs, install_ms, reuses, peers = [], [], [], []
    # interleaved: each round a fresh layer store (so the first run
    # installs), its reuse, and the bare host npm beside them
    for _ in range(INSTALLS):
        state = tempfile.mkdtemp(prefix="airlock-bench-packages-")
        try:
            w1, d1, err = run(state, *pkg)
            assert d1.get("exit_code") == 0 and d1["stdout"] == "001\n", (d1.get("error"), err[-2000:])
            assert not d1["packages"]["reused"]
            w2, d2, _ = run(state, *pkg)
            assert d2["packages"]["reused"] and d2["stdout"] == "001\n"
            installs.append(w1)
            install_ms.append(d1["packages"]["install_ms"])
            reuses.append(w2)
            peers.append(bare_npm())
            if len(installs) == 1:
                with_without(state, pkg)
        finally:
            shutil.rmtree(state, ignore_errors=True)
    line("first run, installs (wall)", installs)
    line("  of which the install step", install_ms)
    line("second run, reuses the layer", reuses)
    line("peer: bare npm install + node", peers)
    print(f"install / reuse (medians): {statistics.median(installs) / statistics.median(reuses):.1f}x")
    print(f"install step / bare npm install (medians): "
          f"{statistics.median(install_ms) / statistics.median(peers):.2f}x")


def with_without(state, pkg):
    """A run with the layer against the same run without it, interleaved
    (left-pad required in both: without the layer the require fails, and
    the box's start is what is timed)."""
    with_layer, without = [], []
    for _ in range(RUNS):
        with_layer.append(run(state, *pkg)[0])
        w, d, _ = run(state)
        assert d["reason"] == "exited"
        without.append(w)
    line("run with the layer", with_layer)
    line("run without a layer", without)
    print(f"with / without (medians): {statistics.median(with_layer) / statistics.median(without):.2f}x")


if __name__ == "__main__":
    main()
