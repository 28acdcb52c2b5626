#!/bin/sh
# The integration suite, each module once for each dimension it is about
# (tests/integration/conftest.py's MODULES names a module's passes; the
# budget and the reasons are docs/testing.md), in an order that fails fast:
#
#   asan        every module of the CLI and the daemon under ASan+UBSan, on
#               SQLite (the default store); a sanitizer report in a service's
#               log fails the test that stopped it (service_util.py)
#   postgresql  the modules about the store, again under ASan+UBSan, on
#               PostgreSQL (a real cluster the tests start: pg_util.py)
#   docker, runsc, forked, warm
#               the box battery and the service's runs on the other drivers
#   release     the box battery on the release build (the static binary
#               users run) and the default images; its pytest summary
#               closes the log
#
# Each pass runs its modules two at a time (pytest-xdist, a module per
# worker: they mostly wait on boxes and services), then those marked
# serial alone (they count the host's boxes, start the one test dockerd or
# network namespace, or exhaust or time the host). AIRLOCK_TEST_JOBS sets
# how many at a time (1: all serially).
set -eu
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
JOBS=${AIRLOCK_TEST_JOBS:-2}

if [ "$(id -u)" -ne 0 ]; then
    echo "check: the integration tests need root (namespaces, cgroups, uid maps)" >&2
    exit 1
fi

# run_tests COMMAND...: a pytest, where selecting no test (its exit status
# 5: a pass with no serial module) is not a failure
run_tests() {
    rc=0
    "$@" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || exit "$rc"
}

# PASS [ENV...]: the modules of PASS, those that may two at a time, then
# the serial ones; ENV (NAME=VALUE) for both.
pass() {
    name=$1
    shift
    echo "== the $name pass: $(date -u +%H:%M:%S) =="
    if [ "$JOBS" -gt 1 ]; then
        run_tests env "$@" $PY -m pytest -q -p no:cacheprovider -n "$JOBS" --dist loadfile \
            -m "$name and not serial" tests/integration
        echo "== the $name pass, serial modules: $(date -u +%H:%M:%S) =="
        run_tests env "$@" $PY -m pytest -q -p no:cacheprovider -m "$name and serial" tests/integration
    else
        run_tests env "$@" $PY -m pytest -q -p no:cacheprovider -m "$name" tests/integration
    fi
}

SANITIZERS="ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
# (AIRLOCK_BUILD: the store's C suite, test_store_backends.py, from it too)
ASAN_BUILD="AIRLOCK_BIN=build-asan/airlock AIRLOCK_BUILD=build-asan"

# shellcheck disable=SC2086
pass asan $SANITIZERS $ASAN_BUILD
# shellcheck disable=SC2086
pass postgresql $SANITIZERS $ASAN_BUILD AIRLOCK_TEST_STORE=postgresql

# The other drivers, on the release build. One test dockerd serves a
# session (docker_util.py), so the docker passes run serially. A case a
# container cannot hold as the native box does asserts that the driver's
# badge says so; runsc's network policies are refused by design (offline
# only), which test_docker.py and the badges check.
echo "== the docker pass (runc): $(date -u +%H:%M:%S) =="
AIRLOCK_TEST_DRIVER=docker AIRLOCK_TEST_RUNTIME=runc $PY -m pytest -q -p no:cacheprovider -m docker tests/integration
echo "== the runsc pass (gVisor): $(date -u +%H:%M:%S) =="
AIRLOCK_TEST_DRIVER=docker AIRLOCK_TEST_RUNTIME=runsc $PY -m pytest -q -p no:cacheprovider -m runsc tests/integration
# The kubernetes driver against the API double (tests/kube_double) on the
# test dockerd, serially like the docker passes (one dockerd, one double,
# one registry a session; the default image exported and pushed once).
echo "== the kubernetes pass (the API double): $(date -u +%H:%M:%S) =="
AIRLOCK_TEST_DRIVER=kubernetes $PY -m pytest -q -p no:cacheprovider -m kubernetes tests/integration
# A forked box (`airlock run --fork`, as the warm pool's Python boxes are;
# a shell case's script exec'd by the forked box's Python) must hold every
# case a made one holds.
pass forked AIRLOCK_TEST_DRIVER=forked
# Warm boxes: on in the product; the other passes' services keep none,
# because their checks that no box is left read every box on the host.
pass warm AIRLOCK_TEST_WARM_POOL=2

# The release pass last: its serial modules' pytest summary closes the log.
echo "== the release pass: $(date -u +%H:%M:%S) =="
if [ "$JOBS" -gt 1 ]; then
    run_tests $PY -m pytest -v -p no:cacheprovider -n "$JOBS" --dist loadfile -m "release and not serial" tests/integration
    echo "== the release pass, serial modules: $(date -u +%H:%M:%S) =="
    exec $PY -m pytest -v -p no:cacheprovider -m "release and serial" tests/integration
fi
exec $PY -m pytest -v -p no:cacheprovider -m release tests/integration
