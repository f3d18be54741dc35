# Every target that needs Python builds the virtual environment under .venv first (once).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean venv

venv: $(STAMP)

# torch first, pinned to the local CPU build, so the project's `torch>=2.5` extra is already met.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[torch,dev,dask]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check seqpack_cli tests benchmarks examples
	$(BIN)/ruff format --check seqpack_cli tests benchmarks examples
	$(BIN)/mypy seqpack_cli

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis demo_out bench_out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
