# Two commands for a fresh machine (the fast test loop without ML models: docs/development.md):
#   make run    install (locked, hashed) and start the proxy on its embedded defaults
#   make test   install (locked, hashed, plus system packages the tests use) and run every test,
#               in random order (pytest-randomly), on every core (pytest-xdist: one worker per CPU,
#               each test file whole on one worker); the seed is printed: `make test SEED=N`
#               repeats an order, TEST_ARGS narrows the run (e.g. TEST_ARGS=tests/integration),
#               WORKERS=0 runs in this process (a debugger, -x, -s).
#               CI runs it with no service reachable at a default address: .ci/run
#               Python's bytecode cache stays on for the run even where the environment turns it
#               off: every worker and every proxy process would otherwise compile the package anew.
# Dependencies: pyproject.toml, the one list (the serving set, extras train, detoxify, eval, dev).
# `make install` installs every extra from requirements.lock; the container image only the serving
# set, from requirements-serve.lock (docs/development.md "Install variants").
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint install system-deps lock mutation serve-test image-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(BIN)/python -m proxy.evaluation.conversation.clustering  # umap's numba kernels, compiled once
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
WORKERS ?= auto

test: install system-deps
	@echo "test order: random, seed $(SEED) (repeat with: make test SEED=$(SEED))"
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --randomly-seed=$(SEED) $(TEST_ARGS)

# Static checks (configuration in pyproject.toml): the import layers and no import cycle
# (import-linter), lint rules and import order (ruff), types (mypy, strict on the trust core).
lint: install
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check proxy tests
	$(BIN)/mypy

# Re-resolve and re-hash every dependency after editing pyproject.toml: requirements.lock (every
# extra), then requirements-serve.lock (no extra) with the versions of the first. Pins already in a
# lock file are kept where they still satisfy pyproject.toml.
PIP_COMPILE = $(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
  --no-emit-find-links
lock: | $(BIN)/python
	$(BIN)/pip install --quiet pip-tools
	$(PIP_COMPILE) --all-extras -o requirements.lock pyproject.toml
	$(PIP_COMPILE) -c requirements.lock -o requirements-serve.lock pyproject.toml

# The serving install on its own: a fresh virtualenv (in $$TMPDIR) with requirements-serve.lock
# and this project, no extra; it must serve one chat completion (tests/support/smoke.py).
serve-test: install
	./scripts/serve-test.sh

# The container image: built with podman from a debootstrapped Debian base, served from its root
# filesystem (chroot, loopback), size printed and capped at 1.5 GB. Needs root; not in .ci/run
# (a cold build takes ~10 minutes): run it before a submission that changes what the image holds.
image-test: install
	./scripts/system-deps.sh image
	./scripts/image-test.sh

# Mutation testing (mutmut, scripts/mutation.sh) in a scratch copy ($$MUTATION_WORKDIR; verdicts
# cached there and in mutation/verdicts*.json). Not part of `make test` (hours for a whole scope).
# SCOPE=trust-core (default: receipts, tlog, primitives, kpi, decision precedence; mutation/setup.cfg)
# or SCOPE=request-path (guardrail engine, messages, stream, dialects, limits, policy runtime;
# mutation/request-path.cfg). Fails when a surviving mutant has no reason in the scope's baseline.
# MUTANTS narrows it by name: make mutation MUTANTS='proxy.kpi.*'
# CHANGED=<git ref> runs only the mutants of functions changed since the ref (committed or not):
# make mutation SCOPE=request-path CHANGED=main
MUTANTS ?=
SCOPE ?= trust-core
CHANGED ?=
mutation: install system-deps
	MUTATION_SCOPE=$(SCOPE) MUTATION_CHANGED=$(CHANGED) ./scripts/mutation.sh $(MUTANTS)
