#!/usr/bin/python3
"""Startup-latency benchmark: bare vs bubblewrap vs airlock (vs docker if present).

All variants are measured in one run, interleaved round-robin per iteration
(the order is rotated each iteration) so machine noise hits every variant alike.
Wall-clock time of one subprocess.run() per sample, stdout/stderr to DEVNULL,
each run asserted to exit 0.

With --docker, a dockerd of its own (tests/integration/docker_util.py: Debian's
docker.io with runsc, its own data root and socket) and python -c pass on the
default image five ways: the native box, the docker driver with runc and with
runsc, and `docker run --rm` of the same image (as hardened as the driver's
container: read-only, no network, no capabilities) with runc and with runsc.

With --compare BIN, another airlock binary (say the build of the commit
before a change, copied aside) runs the same two commands in the same
rotation, so a before and an after are measured side by side.

Usage: /usr/bin/python3 bench/startup.py [--runs N] [--warmup N] [--json FILE] [--docker] [--compare BIN]
"""
import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AIRLOCK = os.path.join(ROOT, "build", "airlock")

BASH_TRUE = ["/bin/bash", "-c", "exec /bin/true"]
PY_PASS = ["/usr/bin/python3", "-c", "pass"]
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent",
         "--ro-bind", "/usr", "/usr",
         "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
         "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
         "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
         "--new-session", "--"]


def ensure_bwrap():
    if shutil.which("bwrap"):
        return
    print("bwrap missing: installing bubblewrap with apt-get", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "install", "-y", "-q", "bubblewrap"], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    if not shutil.which("bwrap"):
        sys.exit("bwrap still not found after apt-get install bubblewrap")


def docker_available():
    if not shutil.which("docker"):
        return False
    try:
        r = subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=15)
    except (subprocess.TimeoutExpired, OSError):
        return False
    if r.returncode != 0:
        return False
    # Make sure the image is local so the pull is not timed.
    r = subprocess.run(["docker", "image", "inspect", "debian:12"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode != 0:
        r = subprocess.run(["docker", "pull", "-q", "debian:12"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


NOCG_ENV = dict(os.environ, AIRLOCK_CGROUP="none")


def run_once(cmd, env=None):
    t0 = time.perf_counter_ns()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=env)
    dt = (time.perf_counter_ns() - t0) / 1e6
    if r.returncode != 0:
        # Re-run with output visible to say why, then fail.
        r2 = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                            text=True)
        sys.exit(f"variant failed (exit {r.returncode}): {cmd}\n"
                 f"stderr: {r2.stderr.strip()[:2000]}")
    return dt


def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--docker", action="store_true", help="add the docker driver and docker run (its own dockerd)")
    ap.add_argument("--compare", metavar="BIN", help="another airlock binary, measured side by side")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")

    if not os.access(AIRLOCK, os.X_OK):
        sys.exit(f"{AIRLOCK} not built (ninja -C {ROOT}/build)")
    ensure_bwrap()

    # (name, command, group, kind) — group pairs variants running the same command.
    variants = [
        ("bare    /bin/true", ["/bin/true"], "true", "bare"),
        ("bwrap   /bin/true", BWRAP + ["/bin/true"], "true", "bwrap"),
        ("bare    bash -c 'exec /bin/true'", BASH_TRUE, "bash", "bare"),
        ("bwrap   bash -c 'exec /bin/true'", BWRAP + BASH_TRUE, "bash", "bwrap"),
        ("airlock bash -c 'exec /bin/true'",
         [AIRLOCK, "run", "--lang", "bash", "-c", "exec /bin/true"], "bash", "airlock"),
        ("bare    python3 -c pass", PY_PASS, "python", "bare"),
        ("bwrap   python3 -c pass", BWRAP + PY_PASS, "python", "bwrap"),
        ("airlock python -c pass",
         [AIRLOCK, "run", "--lang", "python", "-c", "pass"], "python", "airlock"),
        # Like for like with bwrap, which sets no resource limits: the same
        # box without its cgroup (memory, pids, cpu are then not enforced).
        ("airlock-nocg bash -c 'exec /bin/true'",
         [AIRLOCK, "run", "--lang", "bash", "-c", "exec /bin/true"], "bash", "airlock-nocg"),
        ("airlock-nocg python -c pass",
         [AIRLOCK, "run", "--lang", "python", "-c", "pass"], "python", "airlock-nocg"),
    ]
    if args.compare:
        if not os.access(args.compare, os.X_OK):
            sys.exit(f"--compare {args.compare}: not an executable")
        variants += [
            ("compare bash -c 'exec /bin/true'",
             [args.compare, "run", "--lang", "bash", "-c", "exec /bin/true"], "bash", "compare"),
            ("compare python -c pass",
             [args.compare, "run", "--lang", "python", "-c", "pass"], "python", "compare"),
        ]
    docker = docker_available()
    if docker:
        variants.append(("docker  run --rm --network none debian:12 true",
                         ["docker", "run", "--rm", "--network", "none",
                          "debian:12", "true"], "true", "docker"))

    envs = {}
    if args.docker:
        # the tests' dockerd helper, on a data root and socket of the bench's own
        os.environ.setdefault("AIRLOCK_TEST_DOCKER_RUN", "/run/airlock-bench-docker")
        os.environ.setdefault("AIRLOCK_TEST_DOCKER_DATA", "/var/cache/airlock-bench-docker")
        sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
        import docker_util
        from image_util import CACHE, ensure_default_image
        docker_util.start()
        digest = ensure_default_image()["digest"].split(":")[-1]
        denv = dict(docker_util.env(), AIRLOCK_STATE=str(CACHE))
        # the driver loads the image into this daemon on its first run
        subprocess.run([AIRLOCK, "run", "--driver", "docker", "--lang", "python", "-c", "pass"], env=denv,
                       check=True, stdout=subprocess.DEVNULL)
        hard = ["--rm", "--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt",
                "no-new-privileges", "--user", "1900099999:1900099999", "--tmpfs", "/tmp", "--memory", "512m",
                "--pids-limit", "256", "--init"]
        img = "airlock-image:" + digest
        for name, cmd, kind in [
            ("airlock --image default python -c pass", [AIRLOCK, "run", "--image", "default"], "airlock"),
            ("airlock --driver docker (runc) python -c pass", [AIRLOCK, "run", "--driver", "docker"], "driver-runc"),
            ("airlock --driver docker --runtime runsc python -c pass",
             [AIRLOCK, "run", "--driver", "docker", "--runtime", "runsc"], "driver-runsc"),
        ]:
            variants.append((name, cmd + ["--lang", "python", "-c", "pass"], "image", kind))
        variants.append(("docker run --rm (runc) python3 -c pass",
                         ["docker", "run", *hard, img, "python3", "-c", "pass"], "image", "docker-runc"))
        variants.append(("docker run --rm --runtime runsc python3 -c pass",
                         ["docker", "run", "--runtime", "runsc", *hard, img, "python3", "-c", "pass"], "image",
                         "docker-runsc"))
        for v in variants:
            if v[2] == "image":
                envs[v[0]] = denv

    samples = {v[0]: [] for v in variants}
    n = len(variants)
    t_start = time.monotonic()
    for it in range(args.warmup + args.runs):
        rot = it % n  # rotate start so no variant always runs first/last
        for j in range(n):
            name, cmd, _, kind = variants[(rot + j) % n]
            dt = run_once(cmd, NOCG_ENV if kind == "airlock-nocg" else envs.get(name))
            if it >= args.warmup:
                samples[name].append(dt)
    elapsed = time.monotonic() - t_start

    uname = subprocess.run(["uname", "-r"], capture_output=True, text=True).stdout.strip()
    print(f"uname -r: {uname}   cpus: {os.cpu_count()}   python: {platform.python_version()}")
    print(f"runs: {args.runs} (+{args.warmup} warm-up), interleaved round-robin, "
          f"total {elapsed:.1f} s")
    if not docker:
        print("docker: not available (no engine)")
    print()
    w = max(len(v[0]) for v in variants)
    print(f"{'variant':<{w}}  {'median ms':>9}  {'p90 ms':>8}  {'min ms':>7}")
    stats = {}
    for name, cmd, group, kind in variants:
        xs = samples[name]
        st = {"median_ms": statistics.median(xs), "p90_ms": pct(xs, 90),
              "min_ms": min(xs), "group": group, "kind": kind, "cmd": cmd,
              "samples_ms": xs}
        stats[name] = st
        print(f"{name:<{w}}  {st['median_ms']:9.2f}  {st['p90_ms']:8.2f}  {st['min_ms']:7.2f}")

    def med(group, kind):
        for s in stats.values():
            if s["group"] == group and s["kind"] == kind:
                return s["median_ms"]
        return None

    print()
    key = {}
    for group, label in (("bash", "bash -c 'exec /bin/true'"), ("python", "python -c pass")):
        bare = med(group, "bare")
        ao = med(group, "airlock") - bare
        bo = med(group, "bwrap") - bare
        ratio = ao / bo if bo > 0 else float("inf")
        an = med(group, "airlock-nocg") - bare
        ratio_nocg = an / bo if bo > 0 else float("inf")
        key[group] = {"airlock_overhead_ms": ao, "bwrap_overhead_ms": bo,
                      "ratio_airlock_over_bwrap": ratio,
                      "airlock_nocg_overhead_ms": an, "ratio_airlock_nocg_over_bwrap": ratio_nocg}
        verdict = "OK" if ratio <= 1.0 else "ABOVE TARGET"
        print(f"{label:<26} airlock overhead {ao:7.2f} ms   bwrap overhead {bo:7.2f} ms   "
              f"ratio {ratio:5.2f}  (target <= 1.0, aim 0.5: {verdict})")
        print(f"{'':<26} without cgroups  {an:7.2f} ms   ratio {ratio_nocg:5.2f}  (isolation alone, like bwrap)")
        if args.compare:
            co = med(group, "compare") - bare
            key[group].update({"compare_overhead_ms": co, "ratio_compare_over_bwrap": co / bo if bo > 0 else float("inf")})
            print(f"{'':<26} --compare        {co:7.2f} ms   ratio {co / bo if bo > 0 else float('inf'):5.2f}  ({args.compare})")
    bo_true = med("true", "bwrap") - med("true", "bare")
    key["true"] = {"bwrap_overhead_ms": bo_true}
    print(f"{'/bin/true':<26} bwrap overhead {bo_true:7.2f} ms (reference; airlock cannot exec it directly)")
    if docker:
        do = med("true", "docker") - med("true", "bare")
        key["true"]["docker_overhead_ms"] = do
        print(f"{'/bin/true':<26} docker overhead {do:7.2f} ms")

    if args.docker:
        for rt in ("runc", "runsc"):
            drv, ref = med("image", "driver-" + rt), med("image", "docker-" + rt)
            key["docker_" + rt] = {"driver_ms": drv, "docker_run_ms": ref, "ratio": drv / ref}
            verdict = "OK" if drv / ref <= 0.5 else "ABOVE TARGET"
            print(f"{'docker driver ' + rt:<26} {drv:7.1f} ms   docker run --rm {ref:7.1f} ms   "
                  f"ratio {drv / ref:5.2f}  (target <= 0.5: {verdict})")
        print(f"{'native box, same image':<26} {med('image', 'airlock'):7.1f} ms")
        docker_util.stop()

    if args.json:
        doc = {"uname_r": uname, "cpus": os.cpu_count(), "runs": args.runs,
               "warmup": args.warmup, "elapsed_s": elapsed,
               "docker": "available" if docker else "not available (no engine)",
               "variants": stats, "key": key}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
