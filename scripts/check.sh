#!/bin/sh
# Every test, in an order that fails fast: the integration suite under the
# ASan+UBSan build first (the CLI surface), then the whole suite under the
# release build, whose pytest summary closes the log.
set -eu
cd "$(dirname "$0")/.."
PY=/usr/bin/python3

if [ "$(id -u)" -ne 0 ]; then
    echo "check: the integration tests need root (namespaces, cgroups, uid maps)" >&2
    exit 1
fi

echo "== integration tests under ASan+UBSan =="
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
AIRLOCK_BIN=build-asan/airlock $PY -m pytest -q -p no:cacheprovider tests/integration/test_cli.py

echo "== all integration tests =="
exec $PY -m pytest -v -p no:cacheprovider tests/integration
