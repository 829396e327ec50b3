# Two commands on a fresh machine with python3 (3.11+), make and git:
#   make demo   set up, then run the whole pipeline on a small generated dataset
#   make test   set up, then lint and run the test suite (not the slow tests)
#   make test-all   the same with the slow tests
#   make lint   ruff (lint and format), the import layers and the type checker (mypy; its cache lives under
#               the user's cache folder)
# Setup happens once; a second run skips it unless pyproject.toml or uv.lock changed. The tests run in
# TEST_WORKERS pytest-xdist workers (default 2; 0 runs them in this process).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.strata-installed
TEST_WORKERS ?= 2
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON_DOWNLOADS := never
export UV_COMPILE_BYTECODE := 1
export UV_LINK_MODE := copy

.PHONY: setup demo lint test test-all bench bench-gpu clean

setup: $(STAMP)

$(BIN)/uv:
	@$(PYTHON) -c 'import sys; sys.exit("Python >= 3.11 is needed, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check "uv>=0.9,<0.14"

$(STAMP): $(BIN)/uv pyproject.toml uv.lock
	$(BIN)/uv sync --frozen --python $(BIN)/python
	$(BIN)/python -m warehouse.storage.duckdb_ext
	@touch $@

demo: setup
	$(BIN)/strata demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	cache=$$($(BIN)/python -m warehouse.settings cache-dir) && $(BIN)/mypy --cache-dir "$$cache/mypy"

test: lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow" --durations=15

test-all: lint
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

bench: setup
	$(BIN)/python -m benchmarks.harness $(BENCH)

bench-gpu: setup
	STRATA_BENCH_PROVIDER=cuda $(BIN)/python -m benchmarks.harness scoring

clean:
	rm -rf $(VENV) .strata .pytest_cache
