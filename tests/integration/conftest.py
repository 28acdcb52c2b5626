"""Shared helpers for the integration suite: they drive the real binary."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("AIRLOCK_BUILD", ROOT / "build"))
AIRLOCK = Path(os.environ.get("AIRLOCK_BIN", BUILD / "airlock")).resolve()
# the probe is static, so always from the plain build (a sanitizer build cannot link it)
PROBE = Path(os.environ.get("AIRLOCK_PROBE", ROOT / "build" / "tests" / "probe" / "probe"))
MUST_WORK = os.environ.get("AIRLOCK_MUST_WORK") == "1"


def need(condition, reason):
    """Skip when the host lacks a feature, naming it; fail under AIRLOCK_MUST_WORK=1."""
    if condition:
        return
    if MUST_WORK:
        pytest.fail(f"host lacks a required feature (AIRLOCK_MUST_WORK=1): {reason}")
    pytest.skip(f"host lacks a feature: {reason}")


def airlock(*args, input=None, timeout=120, check=False, env=None):
    """Run the real airlock binary; returns CompletedProcess with bytes output."""
    proc = subprocess.run([str(AIRLOCK), *map(str, args)], input=input,
                          capture_output=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"airlock {args} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}")
    return proc


def run_json(*args, timeout=120, env=None):
    """`airlock run --json ARGS`; returns (exit status, parsed document)."""
    proc = airlock("run", "--json", *args, timeout=timeout, env=env)
    try:
        doc = json.loads(proc.stdout)
    except ValueError as e:
        raise AssertionError(f"not JSON (exit {proc.returncode}): {proc.stdout[:2000]!r} stderr={proc.stderr[:2000]!r}") from e
    return proc.returncode, doc


# The driver the box battery runs on: native, or AIRLOCK_TEST_DRIVER=docker
# with AIRLOCK_TEST_RUNTIME=runc|runsc (a container of the test dockerd, on
# the default image), or =forked: the native box forked by a zygote, as the
# warm pool's Python boxes are (`airlock run --fork`; a shell script is
# exec'd by the forked box's Python, so it runs under what that box holds).
# One battery for every driver (issue 13).
DRIVER = os.environ.get("AIRLOCK_TEST_DRIVER", "native")
RUNTIME = os.environ.get("AIRLOCK_TEST_RUNTIME", "runc")


def driver_args():
    """(extra `airlock run` arguments, environment) for the suite's driver."""
    if DRIVER == "kubernetes":
        # the API double, the registry and the default image pushed there
        # (kube_pass.py), once per session
        import kube_pass
        dargs, env = kube_pass.run_args()
        return dargs, dict(os.environ, **env)
    if DRIVER != "docker":
        return [], None
    import docker_util
    from image_util import CACHE, ensure_default_image
    docker_util.start()
    ensure_default_image()
    return ["--driver", "docker", "--runtime", RUNTIME], dict(docker_util.env(), AIRLOCK_STATE=str(CACHE))


def forked_code(lang, code, extra):
    """(lang, code, extra) of a run in a forked box: Python as it is, a shell
    script exec'd by it as `bash -c CODE main.sh ARGS...`; a run with a
    network policy is the made box's (a forked one is offline)."""
    net = [extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--net"]
    if any(n != "offline" for n in net) or lang not in ("python", "bash"):
        return lang, code, list(extra)
    if lang == "bash":
        code = f"import os, sys\nos.execv('/bin/bash', ['bash', '-c', {code!r}, 'main.sh'] + sys.argv[1:])"
    return "python", code, ["--fork", *extra]


def run_code(lang, code, *extra, timeout=120):
    """Run CODE in LANG with --json on the suite's driver; returns the parsed document."""
    if DRIVER == "forked":
        lang, code, extra = forked_code(lang, code, extra)
    dargs, env = driver_args()
    _, doc = run_json(*dargs, "--lang", lang, *extra, "-c", code, timeout=timeout, env=env)
    return doc


@pytest.fixture(scope="session")
def is_root():
    return os.geteuid() == 0


@pytest.fixture(scope="session", autouse=True)
def binary_exists():
    assert AIRLOCK.exists(), f"{AIRLOCK} not built (run `make build`)"


@pytest.fixture(scope="session")
def probe():
    assert PROBE.exists(), f"{PROBE} not built"
    return PROBE


@pytest.fixture(scope="session")
def dockerd():
    """A real dockerd (docker_util.py), started on first use and stopped at
    the session's end; the default image built (image_util.py)."""
    import docker_util
    from image_util import ensure_default_image
    sock = docker_util.start()
    image = ensure_default_image()
    yield {"socket": sock, "image": image}
    docker_util.stop()


@pytest.fixture(scope="session")
def kube_double():
    """The Kubernetes API double (kube_util.py) on the test dockerd, with the
    session's registry (registry_util.py), started on first use and stopped
    at the session's end, when it must have removed every container it made."""
    import docker_util
    import kube_util
    import registry_util
    docker_util.start()
    kube = kube_util.start(registry=registry_util.start())
    yield kube
    kube_util.stop()
    registry_util.stop()
    left = docker_util.docker("ps", "-aq", "--filter", f"label=kube-double={kube.port}").stdout.split()
    docker_util.stop()
    assert not left, f"the Kubernetes double left containers behind: {left}"


# ------------------------------------------------------------ the passes
# Which passes of `make check` run each module (scripts/check.sh; the budget
# and the reasons are docs/testing.md). A module runs once for each
# dimension it is about, not the whole suite again for each:
#
#   asan        the CLI's and the daemon's code: ASan+UBSan build, native
#               driver, SQLite (the default store, what `make serve` runs)
#   postgresql  what the store does: again, ASan+UBSan, on PostgreSQL
#   release     box code through the static `airlock` users run: the box
#               battery A-J and the default images, release build
#   docker      on the docker driver with runc: the battery, and the service's
#               runs, threads, network and skills
#   runsc       the same on gVisor: the battery, the service's runs and threads
#   forked      the battery in boxes forked by a zygote
#   warm        the service's runs, threads, events and queue with warm boxes
#   kubernetes  on the kubernetes driver, against the API double
#               (tests/kube_double) on the test dockerd: the driver's own
#               module (faults, cleanup, the sweep) and the service's runs
#
# and "serial" for a module that must have the host to itself: it counts
# boxes, cgroups or uids host-wide, starts the one test dockerd or the one
# test network namespace (alt-web), exhausts a host resource, or times what
# a busy neighbour would slow. The others run two at a time (pytest-xdist,
# one module per worker), as they mostly wait on boxes and services.
#
# A new module goes in this table, or the suite refuses to start: a module
# no pass names would never run.
PASSES = ("asan", "postgresql", "release", "docker", "runsc", "forked", "warm", "kubernetes")
BATTERY = ("release", "docker", "runsc", "forked")
MODULES = {
    # the box battery, A-J: box code, on every driver
    "test_battery_a.py": BATTERY + ("kubernetes",),
    "test_battery_b.py": BATTERY + ("kubernetes",),
    "test_battery_c.py": BATTERY + ("kubernetes",),
    "test_battery_d.py": BATTERY + ("kubernetes",),
    "test_battery_e.py": BATTERY + ("serial", "kubernetes"),     # E6 runs root's inotify instances out
    "test_battery_g.py": BATTERY + ("serial", "kubernetes"),     # resource exhaustion, and it times its deadlines
    "test_battery_h.py": BATTERY + ("kubernetes",),
    "test_battery_ij.py": BATTERY + ("serial", "kubernetes"),    # J: two boxes at once must get two host uids
    # the battery against the service and the CLI (K-O): the daemon's code
    "test_battery_k.py": ("asan",),
    "test_battery_l.py": ("asan",),
    "test_battery_m_approvals.py": ("asan", "postgresql"),
    "test_battery_m_governance.py": ("asan", "postgresql"),
    "test_battery_n_http.py": ("asan",),
    "test_battery_n_tenant.py": ("asan", "postgresql"),
    "test_battery_o_audit.py": ("asan", "postgresql"),       # an attacker writing the store
    "test_battery_o_lifetime.py": ("asan", "serial"),        # the test dockerd; host uids
    "test_battery_o_requests.py": ("asan",),
    "test_battery_o_service.py": ("asan", "postgresql"),     # two services on one store
    "test_battery_o_storage.py": ("asan", "postgresql"),     # what is stored, retention
    "test_battery_o_watch.py": ("asan", "serial"),           # watches every box on the host
    "test_cli.py": ("asan",),
    "test_console_auth.py": ("asan", "postgresql"),          # the console's sign-in: links, sessions, keys
    "test_core_end_of_run.py": ("postgresql", "serial"),     # two nodes, one killed; counts its runs' ends
    "test_daytona_double.py": ("asan",),                     # @daytonaio/sdk against the Daytona test double
    "test_driver_daytona.py": ("asan",),                     # driver = daytona against that double
    "test_driver_e2b.py": ("asan",),                         # driver = e2b against an E2B-compatible endpoint
    "test_deploy.py": ("asan",),                             # helm and kustomize, rendered and validated (no cluster)
    "test_docker.py": ("asan", "serial"),                    # the test dockerd
    "test_docker_pool.py": ("asan", "serial"),               # the test dockerd
    # the Kubernetes API double itself (issue 37), in the kubernetes pass
    "test_kube_double.py": ("kubernetes",),                  # the test dockerd, a registry, kubectl
    "test_e2b_control.py": ("asan", "postgresql"),           # the E2B SDK: control plane, files
    "test_console.py": ("asan",),                            # the web console: its files, and Chromium driving it (issue 36)
    "test_battery_p_e2b.py": ("asan", "postgresql"),       # the E2B API as an attacker uses it
    "test_folders.py": ("asan", "postgresql"),                # connected folders (issue 38): mounts a bind in its folder
    "test_folders_attack.py": ("asan",),                      # connected folders attacked: bind mounts, hard links, races
    "test_fuzz_findings.py": ("asan",),
    "test_governance_approvals.py": ("asan", "postgresql"),
    "test_governance_audit.py": ("asan", "postgresql"),
    "test_governance_credits.py": ("asan", "postgresql", "serial"),   # counts the host's boxes
    "test_governance_dlp.py": ("asan",),
    "test_governance_settings.py": ("asan", "postgresql"),
    "test_idempotency.py": ("asan", "postgresql"),
    "test_image.py": ("asan",),
    "test_kube_cli.py": ("asan",),
    "test_image_export.py": ("docker",),                     # the default image into a registry and a dockerd
    "test_image_bookworm.py": ("release", "serial"),         # a debootstrap build
    "test_image_default.py": ("release", "serial"),          # a debootstrap build
    "test_mcp.py": ("asan",),
    "test_e2b_commands.py": ("asan", "postgresql", "docker", "runsc"),  # the E2B SDKs: commands, runCode; /work on every driver
    "test_e2b_session.py": ("asan", "postgresql"),           # the E2B session box (native only)
    "test_e2b_code_image.py": ("release", "serial"),         # runCode's chart on the default image
    "test_network.py": ("asan", "serial"),                   # alt-web (its boxes: the ASan build always)
    "test_network_service.py": ("asan", "docker", "serial"),  # alt-web
    "test_nodes.py": ("postgresql", "serial"),
    "test_openapi.py": ("asan",),
    "test_packages.py": ("asan",),                           # issue 38: installs, layers, registries (CLI, helper)                            # the wire contract, every operation
    "test_openapi_client.py": ("asan",),                     # a typed client, tsc --strict               # many nodes on one PostgreSQL; counts boxes
    "test_ops_logs.py": ("asan",),
    "test_ops_unit.py": ("asan",),
    "test_packages_api.py": ("asan", "postgresql"),         # packages in the service (issue 38): settings, refusals, a thread's set
    "test_packages_gc.py": ("asan",),                       # package layers collected (issue 38): in use kept, age, LRU, the service's loop
    "test_packages_attack.py": ("asan",),                   # packages attacked (issue 38): file specs, key framing, install output DLP, tree, threads
    "test_piston.py": ("asan",),
    "test_piston_client.py": ("asan",),
    "test_service_events.py": ("asan", "warm"),
    "test_console_feeds.py": ("asan", "postgresql"),     # the console's reads (issue 36)
    "test_service_load.py": ("asan", "serial"),              # 1,000 runs from 16 clients
    "test_service_ops.py": ("asan", "postgresql", "serial"),  # kill -9 and recovery; counts boxes
    "test_service_runs.py": ("asan", "postgresql", "docker", "runsc", "warm", "kubernetes"),
    "test_kube_driver.py": ("kubernetes",),                  # the API double on the test dockerd
    "test_kube_docs.py": ("kubernetes",),                    # docs/operations.md's steps against the double
    "test_kube_smoke.py": ("kubernetes",),                   # the NetworkPolicy smoke test against the double
    "test_kube_attack.py": ("kubernetes",),                  # the driver attacked: a hostile script, a killed helper
    "test_kube_seccomp.py": ("kubernetes",),                 # airlock's seccomp profile as a Localhost profile
    "test_kube_server_image.py": ("kubernetes", "serial"),   # the chart's server (and its image) driving the double
    "test_service_sched.py": ("asan", "postgresql", "warm", "serial"),   # caps and the queue, timed
    "test_service_tenants.py": ("asan", "postgresql"),
    "test_service_threads.py": ("asan", "postgresql", "docker", "runsc", "warm"),
    "test_skills.py": ("asan", "docker"),
    "test_skills_lifecycle.py": ("asan", "postgresql"),
    "test_store_backends.py": ("postgresql",),
    "test_store_helpers.py": ("asan", "postgresql"),
    "test_store_history.py": ("asan", "postgresql"),
    # (the warm pool's modules count only their own services' boxes, told by
    # ancestry: two at a time with other modules they passed, 3 runs of 3,
    # the last the whole parallel part of the asan pass)
    "test_warm_fork.py": ("asan",),
    "test_warm_pool.py": ("asan",),
    "test_warm_python.py": ("asan",),
}


def pytest_sessionfinish(session, exitstatus):
    """The kubernetes pass's double, registry and dockerd, if it started them."""
    import sys
    if "kube_pass" in sys.modules:
        sys.modules["kube_pass"].stop()


def pytest_configure(config):
    for name in PASSES + ("serial",):
        config.addinivalue_line("markers", f"{name}: a module of make check's {name} pass (conftest.MODULES)")
    config.addinivalue_line("markers", "only_passes(*names): the test runs only in these of its module's passes")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Mark each test with its module's passes (so `-m asan` selects a pass)
    and refuse a module the table does not name."""
    here = Path(__file__).parent
    on_disk = {p.name for p in here.glob("test_*.py")}
    problems = [f"{m}: no pass runs it; add it to MODULES in {here / 'conftest.py'}"
                for m in sorted(on_disk - MODULES.keys())]
    problems += [f"{m}: in MODULES but not in {here}" for m in sorted(MODULES.keys() - on_disk)]
    problems += [f"{m}: names no pass of {PASSES}" for m, p in MODULES.items() if not set(p) & set(PASSES)]
    problems += [f"{m}: an unknown pass in {p}" for m, p in MODULES.items() if set(p) - set(PASSES) - {"serial"}]
    check = (ROOT / "scripts" / "check.sh").read_text()
    problems += [f"pass {p}: scripts/check.sh never runs it" for p in PASSES
                 if not re.search(rf'^\s*pass {p}\b|-m "?{p}\b', check, re.M)]
    if problems:
        raise pytest.UsageError("the passes of make check:\n" + "\n".join(problems))
    for item in items:
        # a test marked only_passes(...) runs in those of its module's passes
        # alone: deselected from the others, not skipped there
        only = item.get_closest_marker("only_passes")
        for name in MODULES.get(item.path.name, ()):
            if not only or name in only.args:
                item.add_marker(getattr(pytest.mark, name))
