# Two commands for a fresh machine (the fast test loop without ML models: docs/development.md):
#   make run    install (locked, hashed) and start the proxy on its embedded defaults
#   make test   install (locked, hashed, plus system packages the tests use) and run every test,
#               in random order (pytest-randomly); the seed is printed: `make test SEED=N` repeats
#               an order, TEST_ARGS narrows the run (e.g. TEST_ARGS=tests/integration).
#               CI runs it with no service reachable at a default address: .ci/run
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint install system-deps lock mutation

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/sonate serve

system-deps:
	./scripts/system-deps.sh

ifndef SEED
SEED := $(shell od -An -N2 -tu2 /dev/urandom | tr -d ' ')
endif
TEST_ARGS ?=

test: install system-deps
	@echo "test order: random, seed $(SEED) (repeat with: make test SEED=$(SEED))"
	$(BIN)/python -m pytest -q --randomly-seed=$(SEED) $(TEST_ARGS)

# Static checks: the import layers and no import cycle (import-linter; contracts in pyproject.toml).
lint: install
	$(BIN)/lint-imports --no-cache

# Re-resolve and re-hash every dependency after editing requirements.in.
lock: | $(BIN)/python
	$(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
	  --no-emit-find-links -o requirements.lock requirements.in

# Mutation testing of the trust core (issue 16): mutmut over proxy/receipts, proxy/tlog, proxy/kpi
# and guardrails/decisions.py, with the fast tests named in mutation/setup.cfg, in a scratch copy
# ($$MUTATION_WORKDIR, default $$TMPDIR/sonate-mutation; verdicts cached there). Not part of
# `make test` (hours for the whole scope). Fails when a surviving mutant has no reason in
# mutation/baseline.md. MUTANTS narrows it: make mutation MUTANTS='proxy.kpi.*'
# Verdicts carry over between machines in mutation/verdicts.json (scripts/mutation_verdicts.py).
MUTANTS ?=
mutation: install system-deps
	./scripts/mutation.sh $(MUTANTS)
