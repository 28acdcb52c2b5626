"""A client typed from docs/openapi.json alone (issue 34): openapi-typescript
(npm, pinned in tests/e2e/package-lock.json) makes its types from the spec
now, tsc --strict compiles tests/e2e/typed/client.ts (openapi-fetch) with them
and must report no error, and the client, run by node, makes a run against
the real service, reads its result through the typed fields, lists it and
changes a setting."""
import json
import shutil
import subprocess
import tempfile

import pytest

from node_util import E2E, npm_ci
from service_util import service  # noqa: F401

TYPED = E2E / "typed"
BIN = E2E / "node_modules" / ".bin"


def sh(*args, timeout=300):
    p = subprocess.run([str(a) for a in args], cwd=E2E, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, (p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"))


@pytest.fixture(scope="module")
def compiled():
    """The client compiled against types made of the spec now, in a directory
    of its own beneath tests/e2e/typed (so that node finds tests/e2e's
    packages); removed after."""
    npm_ci()
    out = tempfile.mkdtemp(prefix=".out-", dir=TYPED)
    try:
        rc, log = sh(BIN / "openapi-typescript", E2E.parent.parent / "docs" / "openapi.json", "-o", f"{out}/openapi.d.ts")
        assert rc == 0, f"openapi-typescript failed:\n{log}"
        shutil.copy(TYPED / "client.ts", out)
        with open(f"{out}/tsconfig.json", "w") as f:
            json.dump({"extends": "../tsconfig.json", "compilerOptions": {"outDir": "."},
                       "files": ["client.ts", "openapi.d.ts"]}, f)
        rc, log = sh(BIN / "tsc", "-p", f"{out}/tsconfig.json", "--strict")
        assert rc == 0 and "error TS" not in log, f"tsc --strict reports errors:\n{log}"
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_the_typed_client_makes_a_run_and_lists_it(service, compiled):
    p = subprocess.run(["node", f"{compiled}/client.js"], cwd=E2E, capture_output=True, timeout=300, stdin=subprocess.DEVNULL,
                       env={"PATH": "/usr/bin:/bin", "AIRLOCK_URL": service.base_url, "AIRLOCK_KEY": service.key})
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"the typed client failed ({p.returncode}):\n{out}\n{err}"
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["state"] == "succeeded" and seen["exit_code"] == 0 and seen["ended"] == "exited", seen
    assert seen["stdout"] == "42\n" and seen["stderr"] == "w\n" and seen["again"] == "42\n", seen
    assert seen["truncated"] is False and seen["wall_ms"] >= 0 and seen["seccomp"] in ("boundary", "applied", "not-enforced"), seen
    assert seen["listed"] == {"state": "succeeded", "exit_code": 0}, seen
    assert ["n.txt", 2] in seen["artifacts"], seen
    settings = service.ok("GET", "/v1/settings")
    assert seen["timeout_s"] == settings["timeout_s"] and seen["approval_policy"] == settings["approval_policy"], seen
    assert seen["missing"] == [404, "not_found"], seen
