"""piston-client from npm, unchanged, against the Piston-compatible API of a
real `airlock serve` (tests/e2e/piston.test.mjs)."""
from node_util import node_test, npm_ci
from service_util import service  # noqa: F401


def test_piston_client(service):
    npm_ci()
    node_test("piston.test.mjs", {"AIRLOCK_URL": service.base_url, "AIRLOCK_API_KEY": service.key}, expect=9)
