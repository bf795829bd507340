# floe: `make run` (quickstart) and `make test` (everything) are the two commands a new
# user needs; both install what they use.

CARGO      ?= cargo
GO         ?= go
# Python packages live in a virtual environment in .venv, made by the first target that
# needs them from the system's python3; nothing is installed into the system Python.
# Recipes, and the tests they start (which run `python3`), find the venv's Python first.
SYSTEM_PYTHON ?= python3
VENV       := $(CURDIR)/.venv
PYTHON     := $(VENV)/bin/python
export PATH := $(VENV)/bin:$(PATH)
export PYTHON
PREFIX     ?= /usr/local
CBINDGEN_VERSION := 0.29.2
FLOE_BIN   := go-shim/cmd/floe/floe
FLOE_FP_BIN := go-shim/cmd/floe/floe-failpoints
SINKBENCH  := go-shim/cmd/sinkbench/sinkbench
GO_PEER    := bench-configs/peers/iceberg-go/iceberg-go-append
LIB        := target/release/libfloe.a
# A debug libfloe with armable failpoints, for the Go binding's panic-safety test only.
FAILPOINT_LIB := target/failpoints/libfloe.a
E2E        := e2e
# Go links libfloe.a by -l, and does not hash it: after a Rust-only change `go build`
# keeps the old binary and `go test` its cached test binary. A stamp of the library's
# contents in the link flags makes every change relink.
# `floe --version` names floe's version (Cargo.toml's) and the commit built.
FLOE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
FLOE_COMMIT  := $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- || c=$$c+changes; echo $$c; })
FLOE_DATE    := $(shell git log -1 --format=%cs 2>/dev/null)
VERSION_FLAGS = -X=main.floeVersion=$(FLOE_VERSION) -X=main.floeCommit=$(FLOE_COMMIT) -X=main.floeDate=$(FLOE_DATE)
LIB_STAMP   = -ldflags="-X=main.libfloeStamp=$(shell sha256sum $(LIB) | cut -c1-16) $(VERSION_FLAGS)"
FP_STAMP    = -ldflags="-X=main.libfloeStamp=$(shell sha256sum $(FAILPOINT_LIB) | cut -c1-16) $(VERSION_FLAGS)"

.PHONY: run test lib bin install docs go-deps bench-py-deps rust-test-then-go-deps header header-check py-deps rust-test abi-test go-test e2e-test reliability lint fmt clean \
	bench bench-quick bench-deps bench-components bench-kafka bench-scale-out bench-kafka-group bench-many-tables

# Only the static library: the release profile's fat LTO then optimises floe and every
# dependency as one module (the quickstart took 4% less CPU than with the library
# `cargo build --release` makes, whose dependencies stay separate objects because the
# rlib is built beside it), and cargo builds the dependencies as bitcode only, without
# machine code of their own. It builds outside make's job server (MAKEFLAGS emptied):
# under `make -j2` beside another job, cargo would take the second job slot as its only
# one and compile one crate at a time.
$(LIB): Cargo.toml Cargo.lock $(shell find src -name '*.rs')
	MAKEFLAGS= $(CARGO) rustc --release --lib --crate-type staticlib

lib: $(LIB)

$(FAILPOINT_LIB): Cargo.toml Cargo.lock $(shell find src -name '*.rs')
	$(CARGO) build --lib --features failpoints
	mkdir -p $(dir $@) && cp target/debug/libfloe.a $@

$(FLOE_BIN): $(LIB) $(shell find go-shim -name '*.go') go-shim/go.mod include/floe.h
	cd go-shim && $(GO) build $(LIB_STAMP) -o cmd/floe/floe ./cmd/floe

# The host on the failpoints library, for crash trials at named points (e2e/crash_trials.py).
$(FLOE_FP_BIN): $(FAILPOINT_LIB) $(shell find go-shim -name '*.go') go-shim/go.mod include/floe.h
	cd go-shim && $(GO) build $(FP_STAMP) -tags floe_failpoints -o cmd/floe/floe-failpoints ./cmd/floe

bin: $(FLOE_BIN)

## docs: the component reference pages (docs/components/*.md), from the registered specs.
docs: $(FLOE_BIN)
	./$(FLOE_BIN) docs --dir docs/components

## install: the floe binary into $(PREFIX)/bin (default /usr/local; DESTDIR is honoured).
install: $(FLOE_BIN)
	install -D -m 755 $(FLOE_BIN) $(DESTDIR)$(PREFIX)/bin/floe

# The Go that does not need libfloe: the host's packages and their dependencies, and
# the standard library under cgocheck2 for the binding's tests, compiled into Go's build
# cache, and fake-gcs-server for the GCS tests. `make test` builds it while the release
# library builds, so that only floe's own packages compile after it.
GO_DEPS = $(GO) list -deps $(1) | grep -v '^github.com/floe-dev/floe' | grep -v ' '
go-deps:
	cd go-shim && $(GO) build $$($(call GO_DEPS,-test ./...))
	cd go-shim && GOEXPERIMENT=cgocheck2 $(GO) build $$($(call GO_DEPS,-test ./floe/))
	cd $(E2E) && $(PYTHON) -c 'import services; services.fake_gcs_binary()'

$(PYTHON):
	$(SYSTEM_PYTHON) -m venv $(VENV)

py-deps: $(PYTHON)
	$(PYTHON) $(E2E)/install_python_deps.py

$(SINKBENCH): $(LIB) $(shell find go-shim -name '*.go') include/floe.h
	cd go-shim && $(GO) build $(LIB_STAMP) -o cmd/sinkbench/sinkbench ./cmd/sinkbench

$(GO_PEER): $(wildcard bench-configs/peers/iceberg-go/*.go) bench-configs/peers/iceberg-go/go.mod
	cd bench-configs/peers/iceberg-go && $(GO) build -o iceberg-go-append .

bench-py-deps: py-deps
	$(PYTHON) $(E2E)/install_python_deps.py --bench

bench-deps: bin $(SINKBENCH) $(GO_PEER) bench-py-deps

## bench: the whole sweep (pipelines on both catalogs, sinks against peers; about an hour
## on 2 cores); SWEEP_ARGS adds options (bench-configs/sweep --help).
bench: bench-deps
	$(PYTHON) bench-configs/sweep $(SWEEP_ARGS)

## bench-quick: a small grid in a few minutes.
bench-quick: bench-deps
	$(PYTHON) bench-configs/sweep --quick $(SWEEP_ARGS)

## bench-kafka: Kafka → Iceberg, floe against Kafka Connect's Iceberg sink on the same
## broker, topic and services (1M records; about 20 minutes); ARGS passes options on.
bench-kafka: bin py-deps
	$(PYTHON) bench-configs/kafka_vs_connect.py $(ARGS)

## bench-scale-out: 1–32 writer processes on one table, appends and merge-on-read
## upserts, against the catalog's own commit rate (about 25 minutes); ARGS passes options
## on, e.g. ARGS="--writers 1,4,16 --plot scale-out.png".
bench-scale-out: bin bench-py-deps
	$(PYTHON) bench-configs/scale_out.py $(ARGS)

## bench-kafka-group: a consumer group of floe hosts growing 1 → 4 → 8 and back under
## load, exactly-once (about 5 minutes); ARGS passes options on.
bench-kafka-group: bin bench-py-deps
	$(PYTHON) bench-configs/kafka_group.py $(ARGS)

## bench-many-tables: one process routing to 10, 100 and 1,000 tables; ARGS passes
## options on.
bench-many-tables: bin bench-py-deps
	$(PYTHON) bench-configs/many_tables.py $(ARGS)

## bench-components: the fast loop for shred / encode / commit; ARGS="--baseline FILE" compares.
bench-components:
	$(CARGO) bench --bench components -- $(ARGS)

## run: build everything, write 1,000,000 events into quickstart.events in ./warehouse (the
## table an earlier run wrote is dropped first; other tables there stay), read them back.
run: bin py-deps
	$(PYTHON) $(E2E)/show_quickstart.py --drop ./warehouse quickstart.events
	./$(FLOE_BIN) run bench-configs/quickstart.yaml
	$(PYTHON) $(E2E)/show_quickstart.py ./warehouse quickstart.events

## header: regenerate include/floe.h with the pinned cbindgen.
header:
	@command -v cbindgen >/dev/null && cbindgen --version | grep -q $(CBINDGEN_VERSION) || \
		$(CARGO) install cbindgen --version $(CBINDGEN_VERSION) --locked
	cbindgen --config cbindgen.toml --crate floe --output include/floe.h 2>/dev/null

## header-check: fail when include/floe.h is not what cbindgen generates from src/ffi.
header-check:
	@command -v cbindgen >/dev/null && cbindgen --version | grep -q $(CBINDGEN_VERSION) || \
		$(CARGO) install cbindgen --version $(CBINDGEN_VERSION) --locked
	cbindgen --config cbindgen.toml --crate floe --output target/floe.h.check 2>/dev/null
	diff -u include/floe.h target/floe.h.check
	@if grep -E '^(typedef|struct|enum) ' include/floe.h | grep -vE 'floe_|FLOE_'; then \
		echo "include/floe.h exposes a type that is not floe's (exclude it in cbindgen.toml)"; exit 1; fi
	@awk '(prev !~ /^\/\// && /^\/\/$$/) || (prev == "" && /^[a-z].*\(/) { \
		print "include/floe.h:" NR ": a declaration without a summary line"; bad = 1 } \
		{ prev = $$0 } END { exit bad }' include/floe.h

# The many-small-commits test runs 1,000 commits here (about a minute in a debug
# build); `make reliability` runs its full 10,000 in release.
rust-test: py-deps
	FLOE_TEST_COMMITS=1000 $(CARGO) test --all-targets

## abi-test: every function of floe.h driven from C (tests/c/abi_test.c): the shipped
## library under AddressSanitizer + UBSan, and an unoptimised build under valgrind
## memcheck; any finding fails. (Memcheck on the LTO build reports a conditional jump on
## uninitialised stack bytes inside the write call that the same code unoptimised does
## not: see docs/embedding.md.)
ABI_CFLAGS := -std=c11 -Wall -Wextra -Werror -g -O1 -fno-omit-frame-pointer -Iinclude
ABI_SYS    := -lm -ldl -lpthread
abi-test: $(LIB)
	@command -v valgrind >/dev/null || { echo "valgrind missing: installing Debian's package"; \
		(apt-get install -y valgrind || (apt-get update && apt-get install -y valgrind)) >/dev/null; } || \
		{ echo "make abi-test needs valgrind (apt-get install valgrind)"; exit 1; }
	$(CARGO) build --lib
	mkdir -p target/c
	$(CC) $(ABI_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		tests/c/abi_test.c $(LIB) $(ABI_SYS) -o target/c/abi_test_asan
	$(CC) $(ABI_CFLAGS) tests/c/abi_test.c target/debug/libfloe.a $(ABI_SYS) -o target/c/abi_test
	rm -rf target/c/asan-warehouse target/c/valgrind-warehouse
	mkdir -p target/c/asan-warehouse target/c/valgrind-warehouse
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 target/c/abi_test_asan $(CURDIR)/target/c/asan-warehouse
	valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect \
		--show-leak-kinds=definite,indirect target/c/abi_test $(CURDIR)/target/c/valgrind-warehouse

# Only the binding (go-shim/floe) holds cgo and unsafe code, so only its tests run under
# cgocheck2, which checks every write of a Go pointer into C memory: the experiment
# changes the runtime, so each package it covers compiles again, the host's dependencies
# included.
GO_PLAIN_PKGS = $$($(GO) list ./... | grep -v '/floe$$')
go-test: $(LIB) $(FAILPOINT_LIB)
	cd go-shim && $(GO) test $(LIB_STAMP) -count=1 $(GO_PLAIN_PKGS)
	cd go-shim && GOEXPERIMENT=cgocheck2 $(GO) test $(LIB_STAMP) -count=1 ./floe/
	cd go-shim && GOEXPERIMENT=cgocheck2 $(GO) test $(FP_STAMP) -count=1 -tags floe_failpoints -run Failpoint ./floe/

# The sweep's test runs pyiceberg as the only peer: the iceberg-go peer (5 minutes of CPU
# to build) is built by `make bench`, whose sweep reads its tables back like every other.
e2e-test: bin $(SINKBENCH) bench-py-deps $(FLOE_FP_BIN)
	$(PYTHON) -m pytest -q --durations=25 $(E2E)

## reliability: 10,000 small commits on one table (metadata stays bounded), the upsert
## model runs at 100 times their `make test` seeds (typed keys, per-key order, the model on REST + S3, copy-on-write's
## page splice: ~4 hours), the crash trials' full matrix (50 trials per kill point, catalog and mode;
## about 25 minutes; ARGS passes options on), the fault matrix (every fault, both modes,
## 2 trials each; about an hour), five minutes of overload against a bandwidth-capped S3
## and a one-hour soak, written to reliability/.
reliability: bin $(FLOE_FP_BIN) py-deps
	FLOE_TEST_COMMITS=10000 $(CARGO) test --release --test committer metadata_stays_bounded_over_many_small_commits -- --nocapture
	FLOE_MODEL_SEEDS=300 FLOE_ORDER_SEEDS=600 $(CARGO) test --release --test upsert_typed_keys --test upsert_order
	FLOE_MODEL_SEEDS=100 $(CARGO) test --release --test upsert_model_rest
	FLOE_MODEL_SEEDS=300 FLOE_SPLICE_SEEDS=30000 $(CARGO) test --release --test upsert_splice_model --test splice_model
	$(PYTHON) $(E2E)/crash_trials.py $(ARGS)
	$(PYTHON) $(E2E)/fault_matrix.py --trials 2
	$(PYTHON) $(E2E)/overload.py --minutes 5 --report reliability
	$(PYTHON) bench-configs/long_run.py --minutes 60 --report reliability

lint:
	python3 scripts/layers.py --check
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) clippy --lib --features failpoints -- -D warnings
	test -z "$$(gofmt -l go-shim bench-configs/peers)"
	cd go-shim && $(GO) vet ./...
	cd go-shim && $(GO) vet -tags floe_failpoints ./floe/
	cd bench-configs/peers/iceberg-go && $(GO) vet ./...

## test: every Rust, Go and end-to-end test, installing and starting what they need.
# The Rust tests are built first; then the release library builds while they run (the
# tests mostly wait on services and readers), and the Go dependencies compile once they
# are done (the library's last step, fat link-time optimisation, runs on one core).
# Building the debug and release Rust at once was slower: two compilers fought over the
# two cores.
test: header-check py-deps
	$(CARGO) test --all-targets --no-run
	$(MAKE) -j2 lib rust-test-then-go-deps
	$(MAKE) abi-test go-test e2e-test

rust-test-then-go-deps: rust-test
	$(MAKE) go-deps

clean:
	$(CARGO) clean
	rm -f $(FLOE_BIN) $(FLOE_FP_BIN) $(SINKBENCH) $(GO_PEER)
