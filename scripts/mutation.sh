#!/usr/bin/env bash
# Mutation testing of the trust core: mutmut 3 over proxy/receipts, proxy/tlog, proxy/primitives,
# proxy/kpi, the KPI report and proxy/guardrails/decisions.py, driven by the fast tests named in
# mutation/setup.cfg. Not part of `make test`: the whole scope (~8,300 mutants) takes hours on
# two shared CPUs; verdicts are cached in the workspace, so a rerun only tests what changed.
#
#   scripts/mutation.sh                 every mutant in scope (incremental: results are cached)
#   scripts/mutation.sh 'proxy.kpi.*'   only mutants whose name matches (mutmut's glob)
#   MUTATION_WORKDIR=dir                scratch copy (default: $TMPDIR/sonate-mutation)
#   MUTATION_JOBS=N                     parallel workers (default: number of CPUs)
#   MUTATION_NICE=N                     nice level of the run (default 15)
#   MUTATION_SCOPE=request-path         the request path instead of the trust core: configuration
#                                       mutation/request-path.cfg, survivors in
#                                       mutation/baseline-request-path.md, verdicts in
#                                       mutation/verdicts-request-path.json, its own workspace
#   MUTATION_CHANGED=<git ref>          only the mutants of functions changed since the ref (commits
#                                       and uncommitted edits; scripts/mutation_changed.py), within
#                                       the scope; mutant names given as well narrow it further
#
# The working tree is copied into the scratch directory so mutmut's `mutants/` never lands in
# the repository. rsync --checksum rewrites only files whose content changed, and those get a
# new mtime, which is how mutmut notices a source newer than its mutants; unchanged files keep
# their cached verdicts on a rerun.
# Verdicts are also kept in mutation/verdicts.json (scripts/mutation_verdicts.py): restored into a
# fresh workspace before the run, merged back after it; commit the file with the baseline.
# Afterwards scripts/mutation_report.py compares the survivors with mutation/baseline.md and
# exits non-zero if a survivor is not listed there with a reason.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
MUTMUT="$(dirname "$PY")/mutmut"
SCOPE="${MUTATION_SCOPE:-trust-core}"
case "$SCOPE" in
  trust-core) CONFIG=mutation/setup.cfg BASELINE=mutation/baseline.md STORE=mutation/verdicts.json
              DEFAULT_WORK=sonate-mutation ;;
  request-path) CONFIG=mutation/request-path.cfg BASELINE=mutation/baseline-request-path.md
                STORE=mutation/verdicts-request-path.json DEFAULT_WORK=sonate-mutation-request-path ;;
  *) echo "MUTATION_SCOPE must be trust-core or request-path, not '$SCOPE'" >&2; exit 2 ;;
esac
WORK="${MUTATION_WORKDIR:-${TMPDIR:-/tmp}/$DEFAULT_WORK}"
JOBS="${MUTATION_JOBS:-$(nproc)}"
SELECT=("$@")
if [ -n "${MUTATION_CHANGED:-}" ]; then
  mapfile -t CHANGED < <("$PY" "$ROOT/scripts/mutation_changed.py" --root "$ROOT" --config "$ROOT/$CONFIG" \
                           --ref "$MUTATION_CHANGED" "$@")
  if [ "${#CHANGED[@]}" -eq 0 ]; then
    echo "mutation ($SCOPE): no function in scope changed since $MUTATION_CHANGED; 0 mutants selected"
    exit 0
  fi
  SELECT=("${CHANGED[@]}")
fi

mkdir -p "$WORK"
# proxy/ and tests/ as they are now; delete what was removed so a stale file cannot mask a change.
for d in proxy tests policies docs; do
  rsync -rlp --checksum --delete --exclude '__pycache__' "$ROOT/$d/" "$WORK/$d/"
done
cp -p "$ROOT/pyproject.toml" "$ROOT/config.yaml" "$WORK/"
cp -p "$ROOT/$CONFIG" "$WORK/setup.cfg"

cd "$WORK"
# One Redis for every mutant's test run (tests/conftest.py would start one per pytest session,
# i.e. per mutant); tests use fresh namespaces, so parallel mutants do not collide.
if [ -z "${SONATE_TEST_REDIS:-}" ]; then
  PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "$WORK/redis"
  redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK/redis" --save '' --appendonly no \
    --protected-mode no >"$WORK/redis/redis.log" 2>&1 &
  REDIS_PID=$!
  trap 'kill "$REDIS_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  export SONATE_TEST_REDIS="redis://127.0.0.1:$PORT/0"
fi
# Verdicts of earlier runs on any machine (mutation/verdicts.json): a mutant whose function is
# unchanged keeps its verdict, so a fresh workspace runs only what changed or was never checked.
"$PY" "$ROOT/scripts/mutation_verdicts.py" restore --workdir "$WORK" --store "$ROOT/$STORE"
nice -n "${MUTATION_NICE:-15}" "$MUTMUT" run --max-children "$JOBS" "${SELECT[@]}" || true
"$PY" "$ROOT/scripts/mutation_verdicts.py" save --workdir "$WORK" --store "$ROOT/$STORE"
# With a selection the report counts the selected mutants and checks only their survivors.
REPORT=(--workdir "$WORK" --baseline "$ROOT/$BASELINE")
for glob in "${SELECT[@]+"${SELECT[@]}"}"; do REPORT+=(--select "$glob"); done
"$PY" "$ROOT/scripts/mutation_report.py" "${REPORT[@]}"
