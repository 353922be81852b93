# The two set-up commands of the README. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE := data/sample

.PHONY: demo test lint verify-hf mutation clean

$(BIN)/.installed: setup.py requirements.txt requirements-nodeps.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

## Main job: fit, evaluate and export a whitening of the built-in model on the sample pairs.
demo: $(BIN)/.installed
	$(BIN)/python scripts/demo.py

## Test suite (what CI runs), in two processes (pytest-xdist). PYTEST_ARGS="-m 'not slow'" skips the real-model tests.
test: $(BIN)/.installed
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

## Lint (what CI runs before the tests): ruff's formatter, then pyflakes, pycodestyle, isort and bugbear rules (pyproject.toml).
lint: $(BIN)/.installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

## Hidden states of every layer vs Hugging Face transformers (torch in a separate .venv-torch).
verify-hf: $(BIN)/.installed
	$(BIN)/python scripts/verify_against_transformers.py

## Mutation testing of the numpy modules (mutmut, from requirements-dev.txt); not part of `test`.
mutation: $(BIN)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python scripts/mutation.py $(MODULES)

clean:
	rm -rf $(VENV) .venv-torch build *.egg-info
