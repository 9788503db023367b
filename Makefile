# weir: `make demo` and `make test` work on a fresh clone; both install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
WEIR    = $(VENV)/bin/weir
PYTEST  = $(PY) -m pytest
BENCH_ARGS ?=
#: More pytest options for the test targets, e.g. PYTEST_ARGS="--durations=0 -x".
PYTEST_ARGS ?=

.PHONY: install demo test test-more chaos lint proto bench docs docs-check docs-build web clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $@

demo: install
	@bash deploy/demo.sh

# `make test`: the unit tests and a representative set of real-process tests (about 10
# minutes on 2 cores). `make test-more`: the other tests CI runs (marked `extended`), none
# of those `make test` ran. `make chaos`: everything, `slow` and `chaos` tests included.
test: install
	$(PYTEST) -q --durations=25 -m "not chaos and not slow and not extended" $(PYTEST_ARGS) tests

test-more: install
	$(PYTEST) -q --durations=25 -m "extended and not chaos and not slow" $(PYTEST_ARGS) tests

chaos: install
	$(PYTEST) -q -m "" $(PYTEST_ARGS) tests

# mypy runs on a mirror of the installed layout (.ci/typecheck), with pyproject's [tool.mypy].
lint: install
	$(VENV)/bin/ruff check .
	$(PY) .ci/typecheck

# The .proto files live in proto/ but are compiled as weir/proto/*.proto, so that the
# generated modules import each other as weir.proto.* (the installed package name).
proto: install
	@rm -rf build/protoc && mkdir -p build/protoc/weir && ln -s "$(CURDIR)/proto" build/protoc/weir/proto
	$(PY) -m grpc_tools.protoc -Ibuild/protoc --python_out=build/protoc --pyi_out=build/protoc \
		--grpc_python_out=build/protoc build/protoc/weir/proto/*.proto
	@rm -rf build/protoc

bench: install
	$(PY) benchmarks/bench_wordcount.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_shuffle.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_state.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_checkpoint.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_recovery.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_changelog.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_lifecycle.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_dashboard.py $(BENCH_ARGS)
	$(PY) benchmarks/bench_nexmark.py $(BENCH_ARGS)

# The reference tables in docs/ (configuration, metrics, PyFlink names) are generated from
# the code: `docs` rewrites them, `docs-check` fails when one is stale, `docs-build` checks
# and builds the site strictly (broken links, anchors or nav entries fail), offline.
docs: install
	$(PY) -m weir.docgen

docs-check: install
	$(PY) -m weir.docgen --check

docs-build: docs-check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The dashboard's browser libraries, pinned in jobmaster/rest/web/package-lock.json: `web`
# installs exactly those (no install scripts run) in build/web and copies their distributed
# files into jobmaster/rest/web/static/vendor/ with a MANIFEST.json of their sha256; the
# copies are committed, so installing weir needs no Node.js.
WEB = jobmaster/rest/web
web:
	rm -rf build/web && mkdir -p build/web
	cp $(WEB)/package.json $(WEB)/package-lock.json build/web/
	cd build/web && npm ci --ignore-scripts --no-audit --no-fund
	node $(WEB)/vendor.mjs build/web/node_modules $(WEB)/static/vendor

clean:
	rm -rf build .pytest_cache
