#!/bin/sh
# Every test, in an order that fails fast: the CLI and every daemon-facing
# module under the ASan+UBSan build first, on PostgreSQL (a sanitizer report
# in a service's log fails the test that stopped it: service_util.py), then
# the other drivers, then the whole suite under the release build on the
# embedded SQLite store (what `make serve` runs), whose pytest summary
# closes the log.
set -eu
cd "$(dirname "$0")/.."
PY=/usr/bin/python3

if [ "$(id -u)" -ne 0 ]; then
    echo "check: the integration tests need root (namespaces, cgroups, uid maps)" >&2
    exit 1
fi

# The box battery (A-J) and the proxy's own network cases drive the same box
# code as test_cli.py, which does run under the sanitizers; test_image_default
# is a debootstrap build. The release pass below runs all of them.
#
# The daemon here is on PostgreSQL: every module that starts a service runs
# with each service on a fresh database of a real cluster that the tests
# start themselves (tests/integration/pg_util.py), and test_nodes.py (many
# nodes on one PostgreSQL) with them; the release pass at the end runs all
# of it again on the embedded SQLite store, the default. The SQLite store's
# own functions run under the sanitizers here too, in the store's C suite
# (test_store_backends.py, on both backends).
echo "== integration tests under ASan+UBSan: the CLI and the daemon, on PostgreSQL =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
AIRLOCK_TEST_STORE=postgresql AIRLOCK_BIN=build-asan/airlock $PY -m pytest -q -p no:cacheprovider \
    --ignore-glob='tests/integration/test_battery_[a-j]*.py' \
    --ignore=tests/integration/test_network.py --ignore=tests/integration/test_image_default.py \
    --ignore=tests/integration/test_image_bookworm.py \
    tests/integration

# The box battery (A-J) once more on the docker driver with runc, and the
# service's run, limit, artifact, thread, network and skill tests with
# driver = docker: each run in a container of a real dockerd that the tests start
# themselves (tests/integration/docker_util.py). A case a container cannot
# hold as the native box does asserts that the driver's badge says so.
echo "== the box battery on the docker driver (runc) =="
AIRLOCK_TEST_DRIVER=docker AIRLOCK_TEST_RUNTIME=runc $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_battery_[a-j]*.py

# And on gVisor (runsc): where it cannot hold a case as the native box does
# (this runsc ignores the OCI seccomp profile; its Sentry serves the calls),
# the case asserts that the badges say so.
echo "== the box battery on the docker driver (runsc) =="
AIRLOCK_TEST_DRIVER=docker AIRLOCK_TEST_RUNTIME=runsc $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_battery_[a-j]*.py

# And in boxes forked by a zygote, as the warm pool's Python boxes are
# (`airlock run --fork`; a shell case's script exec'd by the forked
# box's Python): a forked box must hold every case a made one holds.
echo "== the box battery in boxes forked by a zygote =="
AIRLOCK_TEST_DRIVER=forked $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_battery_[a-j]*.py

echo "== the service's runs, threads, network and skills on the docker driver =="
AIRLOCK_TEST_DRIVER=docker $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_service_runs.py tests/integration/test_service_threads.py \
    tests/integration/test_network_service.py tests/integration/test_skills.py

# And the service's runs and threads under gVisor (runsc): its network
# policies are refused there by design (offline only), which
# test_docker.py and the badges check.
echo "== the service's runs and threads on the docker driver (runsc) =="
AIRLOCK_TEST_DRIVER=docker AIRLOCK_TEST_RUNTIME=runsc $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_service_runs.py tests/integration/test_service_threads.py

# And the service's runs, threads, events and scheduling with warm boxes
# (on in the product, sized by demand; the other passes' services keep
# none, because their checks that no box is left read every box on the
# host): a Python run is handed a warm box wherever its shape has one.
echo "== the service's runs, threads, events and queue with warm boxes =="
AIRLOCK_TEST_WARM_POOL=2 $PY -m pytest -q -p no:cacheprovider \
    tests/integration/test_service_runs.py tests/integration/test_service_threads.py \
    tests/integration/test_service_events.py tests/integration/test_service_sched.py

echo "== all integration tests =="
exec $PY -m pytest -v -p no:cacheprovider tests/integration
