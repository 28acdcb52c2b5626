"""The store's C test suite (tests/unit/test_store.c) on both backends: a
temporary SQLite file, and a fresh database of a real PostgreSQL cluster.
Several handles stand for several nodes (each its own connection)."""
import subprocess

import pg_util
from conftest import BUILD


def _store_tests(target):
    proc = subprocess.run([str(BUILD / "tests" / "unit" / "store-tests"), target], capture_output=True, timeout=300)
    out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, out
    assert " 0 failed" in out, out
    return out


def test_store_functions_on_sqlite():
    assert "on sqlite" in _store_tests("sqlite")


def test_store_functions_on_postgresql():
    c = pg_util.cluster()
    assert "on postgresql" in _store_tests(c.uri(c.new_database("storetest")))
