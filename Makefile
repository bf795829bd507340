# floe: `make run` (quickstart) and `make test` (everything) are the two commands a new
# user needs; both install what they use.

CARGO      ?= cargo
GO         ?= go
PYTHON     ?= python3
CBINDGEN_VERSION := 0.29.2
FLOE_BIN   := go-shim/cmd/floe/floe
LIB        := target/release/libfloe.a
E2E        := e2e

.PHONY: run test lib bin header header-check py-deps rust-test go-test e2e-test lint fmt clean

$(LIB): Cargo.toml Cargo.lock $(shell find src -name '*.rs')
	$(CARGO) build --release

lib: $(LIB)

$(FLOE_BIN): $(LIB) $(shell find go-shim -name '*.go') go-shim/go.mod include/floe.h
	cd go-shim && $(GO) build -o cmd/floe/floe ./cmd/floe

bin: $(FLOE_BIN)

py-deps:
	$(PYTHON) $(E2E)/install_python_deps.py

## run: build everything, write 1,000,000 events into ./warehouse, read the count back.
run: bin py-deps
	rm -rf ./warehouse
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

rust-test: py-deps
	$(CARGO) test --all-targets

go-test: $(LIB)
	cd go-shim && GOEXPERIMENT=cgocheck2 $(GO) test -count=1 ./...

e2e-test: bin py-deps
	$(PYTHON) -m pytest -q $(E2E)

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings
	test -z "$$(gofmt -l go-shim)"
	cd go-shim && $(GO) vet ./...

## test: every Rust, Go and end-to-end test, installing and starting what they need.
test: header-check rust-test go-test e2e-test

clean:
	$(CARGO) clean
	rm -f $(FLOE_BIN)
