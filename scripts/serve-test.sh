#!/usr/bin/env bash
# `make serve-test`: the serving install on its own. A fresh virtualenv (removed afterwards) gets
# requirements-serve.lock (hashed) and this project without extras; it must hold no torch,
# transformers or sentence-transformers, and its `sonate serve` must answer one chat completion
# through the stub provider with a verified receipt (tests/support/smoke.py, run by .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work="$(mktemp -d "${TMPDIR:-/tmp}/sonate-serve-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
pip=("$work/venv/bin/pip" --quiet --disable-pip-version-check)
"$PYTHON" -m venv "$work/venv"
"${pip[@]}" install --require-hashes -r requirements-serve.lock
"${pip[@]}" install --no-deps --no-build-isolation .
"$work/venv/bin/pip" check
for module in torch transformers sentence_transformers; do
  if "$work/venv/bin/python" -c "import $module" 2>/dev/null; then
    echo "serve-test: $module is installed in the serving virtualenv" >&2; exit 1
  fi
done
echo "serve-test: serving virtualenv $(du -sh "$work/venv" | cut -f1)"
"${SMOKE_PYTHON:-.venv/bin/python}" -m tests.support.smoke --dir "$work/run" -- "$work/venv/bin/sonate" serve
