# Thin wrapper over meson. `make check` and `make serve` install what is
# missing (scripts/deps.sh), build, and then test or run.
BUILD      ?= build
ASAN_BUILD ?= build-asan
PYTEST     ?= /usr/bin/python3 -m pytest

.PHONY: all deps web build asan check unit integration bench demo serve image server-image clean fuzz fuzz-merge fuzz-coverage

all: build

deps:
	sh scripts/deps.sh

# the web console's highlight.js (npm ci when missing or stale) into web/vendor/
web:
	sh scripts/web.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD)

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dtest_hooks=true

build: deps web $(BUILD)/build.ninja
	ninja -C $(BUILD)

asan: deps web $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)

unit: build asan
	meson test -C $(BUILD) --print-errorlogs
	meson test -C $(ASAN_BUILD) --print-errorlogs

# Every test: C unit tests (and the layering check) under both builds, then
# the integration suite (the real binary, as root), each module once for
# each dimension it is about: build, store, driver (scripts/check.sh; the
# budget, 40 minutes on 2 cores, is docs/testing.md).
check: unit
	sh scripts/check.sh

# Coverage-guided fuzzing (clang's libFuzzer, ASan+UBSan): every target for
# FUZZ_SECONDS (default 60) each, FUZZ_JOBS at once; fails on any report.
# `make check` only replays the committed corpora (fast, deterministic).
fuzz:
	sh scripts/fuzz.sh run

# Keep what the fuzz runs found that reaches new code in tests/fuzz/corpus.
fuzz-merge:
	sh scripts/fuzz.sh merge

# Line coverage of each target's source files by its corpus and runs.
fuzz-coverage:
	sh scripts/fuzz.sh coverage

bench: build
	/usr/bin/python3 bench/startup.py
	/usr/bin/python3 bench/service.py
	/usr/bin/python3 bench/proxy.py
	/usr/bin/python3 bench/mcp.py
	@echo "(bench/image.py needs a built default image: make image, then AIRLOCK_STATE=... bench/image.py)"

# The service on 127.0.0.1:8080 with its SQLite store in $(STATE):
# creates the first organisation, workspace, person and key if none exist.
serve: build
	sh scripts/serve.sh

# The default runtime image (debootstrap; about two minutes) into $(STATE).
image: build
	./$(BUILD)/airlock image --state $${STATE:-/var/lib/airlock} build

# The server's container image (image/server + this build's binaries + the
# box images of $(STATE) exported for Kubernetes, as reference entries) as
# an OCI layout in $(BUILD)/server-image; its digest is printed
# (docs/kubernetes.md "The two images").
server-image: build
	STATE=$${STATE:-/var/lib/airlock} BUILD=$(BUILD) sh scripts/server-image.sh

# Run an example script through the sandbox, no service needed.
demo: build
	./$(BUILD)/airlock run --out /tmp/airlock-demo examples/hello.py
	@echo "artifacts in /tmp/airlock-demo:"; ls -l /tmp/airlock-demo

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-fuzz build-cov
