"""Shared helpers for the integration suite: they drive the real binary."""
import json
import os
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
