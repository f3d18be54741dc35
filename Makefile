# Every target that needs Python builds the virtual environment under .venv first (once).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint bench docs clean venv

venv: $(STAMP)

# torch first, pinned to the local CPU build, so the project's `torch>=2.5` extra is already met.
# The distribution was called `seqpack` before `seqpack-cli` (the registry's seqpack is another
# project): an older .venv's install of it goes first, as uninstalling it later would take the
# `seqpack` command with it.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	if $(BIN)/pip show --quiet seqpack 2>/dev/null; then $(BIN)/pip uninstall --quiet --yes seqpack; fi
	$(BIN)/pip install --quiet -e '.[torch,dev,dask]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# The inner loop: every test not marked slow. `make test-all` runs them all, as CI does (.ci/run).
test: $(STAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

test-all: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check seqpack_cli tests benchmarks examples
	$(BIN)/ruff format --check seqpack_cli tests benchmarks examples
	$(BIN)/mypy seqpack_cli

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

# docs/benchmarks.md is the benchmarks' printed output (quick sizes), never copied by hand.
docs: $(STAMP)
	$(BIN)/python benchmarks/run_all.py --write-docs

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis demo_out bench_out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
