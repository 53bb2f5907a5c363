# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck imports unit bench-small settings-doc clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/quarry demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The import rules of docs/architecture.md, as contracts in pyproject.toml.
imports: $(STAMP)
	$(BIN)/lint-imports --no-cache

# docs/settings.md, generated from the settings models (a test fails when it is stale).
settings-doc: $(STAMP)
	$(BIN)/python -m quarry.settings_doc

unit: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck imports unit

bench-small: $(STAMP)
	for b in benchmarks/*.py; do $(BIN)/python $$b --small || exit 1; done

clean:
	rm -rf $(VENV) .quarry .pytest_cache .mypy_cache .ruff_cache
