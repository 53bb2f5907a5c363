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

# A pytest killed in native code leaves .pytest-fault.log (tests/fixtures/crashes.py): print
# the test that was running and the crashing thread's stack, which end up far from the tail of
# faulthandler's own dump.
unit: $(STAMP)
	@rm -f .pytest-fault.log
	$(BIN)/pytest -q || { rc=$$?; if [ -s .pytest-fault.log ]; then \
	  echo "pytest died (exit $$rc); the test that was running and the crashing thread:"; \
	  awk 'NR == 1 || /^Fatal Python error/ { print; next } /^Current thread/ { p = 1 } \
	    p && /^$$/ { p = 0 } p && !/\/(_pytest|pluggy)\// { print }' .pytest-fault.log; fi; exit $$rc; }

test: lint typecheck imports unit

bench-small: $(STAMP)
	for b in benchmarks/*.py; do $(BIN)/python $$b --small || exit 1; done

clean:
	rm -rf $(VENV) .quarry .pytest_cache .mypy_cache .ruff_cache
