# The two set-up commands of the README. Each creates .venv and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SAMPLE := data/sample

.PHONY: demo test test-all lint verify-hf verify-train mutation clean

# pip installs uv, uv the rest: quicker than pip for the same packages (docs/performance.md; uv is told
# where pip would look: scripts/uv_options.py, written to a file first so that its failure stops make),
# their bytecode compiled on every core. The venv gets no pip of its own (ensurepip takes seconds):
# $(PYTHON)'s pip installs uv into it, or, where that pip is missing or older than 22.3 (no --python),
# the venv's own from ensurepip.
UV_VERSION := 0.13.9
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python $$(cat $(VENV)/uv-options)

$(BIN)/.installed: setup.py requirements.txt requirements-nodeps.txt scripts/uv_options.py
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) scripts/uv_options.py > $(VENV)/uv-options
	$(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check uv==$(UV_VERSION) \
	    || { $(BIN)/python -m ensurepip --default-pip && \
	         $(BIN)/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION); }
	$(UV_INSTALL) --compile-bytecode -r requirements.txt
	$(UV_INSTALL) --compile-bytecode --no-deps -r requirements-nodeps.txt
	$(UV_INSTALL) --compile-bytecode --no-deps -e .
	touch $@

## Main job: fit, evaluate and export a whitening of the built-in model on the sample pairs.
demo: $(BIN)/.installed
	$(BIN)/python scripts/demo.py

## Test suite without the slow tests, in two processes (pytest-xdist); test-all (what CI runs) runs every test,
## the real-model and whole-command tests (marked slow) included. PYTEST_ARGS passes anything to pytest.
## loadgroup: each test goes to the next free process, an xdist_group's tests to one process, the largest group first.
PYTEST = $(BIN)/python -m pytest -n 2 --dist loadgroup
test: $(BIN)/.installed
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-all: $(BIN)/.installed
	$(PYTEST) $(PYTEST_ARGS)

## Lint (what CI runs before the tests): ruff's formatter, then pyflakes, pycodestyle, isort and bugbear rules (pyproject.toml).
lint: $(BIN)/.installed
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

## Hidden states of every layer vs Hugging Face transformers (torch in a separate .venv-torch).
verify-hf: $(BIN)/.installed
	$(BIN)/python scripts/verify_against_transformers.py

## Fine-tuning vs sentence-transformers: 20 steps of each loss from the same start on the same batches.
verify-train: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_train.py --train-limit 640 --tolerance 1e-4

## Mutation testing of the numpy modules (mutmut, from requirements-dev.txt); not part of `test`.
mutation: $(BIN)/.installed
	$(UV_INSTALL) -r requirements-dev.txt
	$(BIN)/python scripts/mutation.py $(MODULES)

clean:
	rm -rf $(VENV) .venv-torch build *.egg-info
