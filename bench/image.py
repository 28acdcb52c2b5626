#!/usr/bin/env python3
"""Image benchmark: time to the first line of `import pandas, matplotlib.pyplot`
inside a box on an image (default: the default image; --image bookworm for
the Debian 12 one), against the same import run bare on the image's own tree
(chroot, no sandbox). Interleaved; medians.

usage: /usr/bin/python3 bench/image.py [--runs 7] [--state DIR] [--image NAME]
"""
import argparse
import json
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.path.join(ROOT, "build", "airlock")
CODE = "import pandas, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot\nprint('ready', flush=True)"


def first_line(cmd, env=None):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    line = p.stdout.readline()
    dt = (time.perf_counter() - t) * 1000
    p.wait()
    assert line == b"ready\n", (cmd, line)
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--state", default=os.environ.get("AIRLOCK_STATE", "/var/cache/airlock-tests/state"))
    ap.add_argument("--image", default="default", help="an image alias (default, bookworm)")
    a = ap.parse_args()
    ls = json.loads(subprocess.run([AIRLOCK, "image", "--state", a.state, "ls", "--json"],
                                   capture_output=True, check=True).stdout)
    img = next((e for e in ls if a.image in e["aliases"]), None)
    if img is None:
        raise SystemExit(f"no image {a.image!r} in {a.state} (airlock image --state {a.state} build {a.image})")
    rootfs = os.path.join(a.state, "images", "sha256-" + img["digest"][7:], "rootfs")
    env = dict(os.environ, AIRLOCK_STATE=a.state)
    box = [AIRLOCK, "run", "--image", a.image, "--memory", "1G", "--cpus", "2", "--lang", "python", "-c", CODE]
    # like for like: the box may use the machine's 2 CPUs, as the bare run
    # does (numpy's threads make a 1-CPU cap cost ~90 ms on this import)
    # bare: the same tree, the same matplotlib cache, no sandbox
    bare = ["chroot", rootfs, "/usr/bin/env", "-i", "HOME=/tmp", "MPLCONFIGDIR=/usr/share/airlock/matplotlib",
            "/usr/bin/python3", "-c", CODE]
    xs = {"box": [], "bare": []}
    for i in range(a.runs + 1):
        for k, cmd in (("bare", bare), ("box", box)):
            t = first_line(cmd, env)
            if i:
                xs[k].append(t)
    mb, mx = statistics.median(xs["bare"]), statistics.median(xs["box"])
    py = img.get("holds", {}).get("python", {})
    pandas = py.get("libraries", {}).get("pandas", {}).get("version", "?")
    print(f"image {a.image} {img['digest'][:19]}... (python {py.get('version', '?')}, pandas {pandas})  "
          f"runs: {a.runs}, interleaved, medians")
    print(f"bare (chroot on the image tree): {mb:8.1f} ms")
    print(f"{'airlock run --image ' + a.image + ':':32s} {mx:8.1f} ms")
    print(f"ratio {mx / mb:.2f}  (the box adds {mx - mb:.1f} ms; its own startup overhead is a few ms)")


if __name__ == "__main__":
    main()
