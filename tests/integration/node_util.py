"""Real clients from npm for the end-to-end tests (tests/e2e): installed by
`npm ci` from tests/e2e/package-lock.json (pinned versions) on first use, and
run with Node's own test runner. A Node test file that fails fails the
pytest test that ran it, with Node's report in the message."""
import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, need

E2E = ROOT / "tests" / "e2e"


def npm_ci():
    """Install tests/e2e's pinned packages unless the installed ones match the lock file.
    One install at a time: the parallel passes' workers each call this, and two
    `npm ci` in one directory remove each other's files (ENOTEMPTY)."""
    need(shutil.which("node") and shutil.which("npm"), "node and npm (scripts/deps.sh installs them)")
    lock = E2E / "package-lock.json"
    stamp = E2E / "node_modules" / ".package-lock.json"   # npm writes it on every install
    with open(E2E / ".npm-ci.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.exists() and stamp.stat().st_mtime >= lock.stat().st_mtime:
            return
        _install()


def _install():
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=E2E,
                       capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"npm ci in tests/e2e failed:\n{p.stdout.decode()[-3000:]}\n{p.stderr.decode()[-3000:]}"


def node_test(file, env, expect, timeout=600, pattern=None):
    """`node --test FILE` with ENV added; fails with Node's report unless its
    EXPECT tests all ran and passed. PATTERN: only the tests whose names
    match it run (the others are counted as skipped): EXPECT of them."""
    full = dict(os.environ, **env)
    only = [f"--test-name-pattern={pattern}"] if pattern else []
    p = subprocess.run(["node", "--test", "--test-reporter=spec", "--test-concurrency=1", *only, str(E2E / file)],
                       cwd=E2E, env=full, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    if p.returncode != 0:
        pytest.fail(f"node --test {file} exited {p.returncode}:\n{out[-12000:]}", pytrace=False)
    # a file that ran fewer tests than it has has not tested everything
    ran = f"ℹ pass {expect}\n" in out and "ℹ fail 0\n" in out
    assert ran and (pattern or f"ℹ tests {expect}\n" in out), out[-3000:]
    return out
