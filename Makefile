# The two set-up commands of the README. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE := data/sample

.PHONY: demo test clean

$(BIN)/.installed: setup.py requirements.txt requirements-nodeps.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

## Main job: fit a whitening on the sample sentences and encode them with it.
demo: $(BIN)/.installed
	$(BIN)/python scripts/demo.py

## Test suite (what CI runs). PYTEST_ARGS="-m 'not slow'" skips the real-model tests.
test: $(BIN)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
