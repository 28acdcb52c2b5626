"""What a run's packages cost (issue 38): the first run that installs a
small npm package (left-pad, from registry.npmjs.org through the egress
proxy) against a later run of the same set, which reuses its layer; and a
run with a layer mounted against the same run without one (start time).

    /usr/bin/python3 bench/packages.py [BINARY] [RUNS]

Needs the default and installer images in AIRLOCK_IMAGES (else
/var/cache/airlock-tests/state/images: `airlock image build installer`).
Layers go to a fresh state directory, so the first run always installs.
The registry's address is read here and given as its range (it resolves
into a reserved range on some networks, which the proxy refuses otherwise).

Prints: the install's wall time and its install_ms, the reuse's, their
ratio; the median wall time of RUNS runs with the layer and RUNS without,
and their ratio (the layer's bind is an overlay mount: the cost a mounted
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


def main():
    addr = socket.getaddrinfo("registry.npmjs.org", 443, socket.AF_INET)[0][4][0]
    pkg = ["--package", "node:left-pad@1.3.0", "--package-registries", f"registry.npmjs.org={addr}/32"]
    state = tempfile.mkdtemp(prefix="airlock-bench-packages-")
    try:
        measure(state, pkg)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def measure(state, pkg):
    w1, d1, err = run(state, *pkg)
    assert d1.get("exit_code") == 0 and d1["stdout"] == "001\n", (d1.get("error"), err[-2000:])
    w2, d2, _ = run(state, *pkg)
    assert d2["packages"]["reused"] and d2["stdout"] == "001\n"
    print(f"install: {w1:8.1f} ms wall, install_ms {d1['packages']['install_ms']}")
    print(f"reuse:   {w2:8.1f} ms wall, install_ms {d2['packages']['install_ms']}")
    print(f"install / reuse (wall): {w1 / w2:.1f}x")
    # a run with the layer against the same run without it (left-pad
    # required in both: the second from the run's own /work)
    with_layer, without = [], []
    for _ in range(RUNS):
        with_layer.append(run(state, *pkg)[0])
        w, d, _ = run(state)
        # without the layer the require fails: the box start is what is timed
        assert d["reason"] == "exited"
        without.append(w)
    a, b = statistics.median(with_layer), statistics.median(without)
    print(f"with the layer:    median {a:7.1f} ms over {RUNS} runs")
    print(f"without a layer:   median {b:7.1f} ms over {RUNS} runs")
    print(f"with / without: {a / b:.2f}x")


if __name__ == "__main__":
    main()
