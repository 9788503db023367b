# weir: `make demo` and `make test` work on a fresh clone; both install what they need.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
WEIR    = $(VENV)/bin/weir
PYTEST  = $(PY) -m pytest
BENCH_ARGS ?=

.PHONY: install demo test chaos lint proto bench docs clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $@

demo: install
	@bash deploy/demo.sh

test: install
	$(PYTEST) -q tests

chaos: install
	$(PYTEST) -q -m "" tests

lint: install
	$(VENV)/bin/ruff check .

proto: install
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. proto/*.proto

bench: install
	$(PY) benchmarks/wordcount.py $(BENCH_ARGS)
	$(PY) benchmarks/shuffle.py $(BENCH_ARGS)
	$(PY) benchmarks/state.py $(BENCH_ARGS)

docs: install
	$(PY) -m weir.docgen

clean:
	rm -rf build .pytest_cache
