"""Session set-up and shared fixtures: the session's own Redis, the markers, the stub provider, the proxy.

Redis: ``pytest_configure`` starts a private ``redis-server`` on a free port (no persistence) and
exports ``SONATE_TEST_REDIS`` before any test module is imported, so module-level reads and
subprocesses see it; an explicitly set ``SONATE_TEST_REDIS`` is used instead.

Markers (registered in pyproject.toml), applied here by location so test files need not say so:
``e2e`` for everything under tests/e2e; ``models`` for the detector unit tests and every test that
starts a proxy (the ``proxy`` fixture or a launcher imported by its module); ``browser`` for the
chromium tests. The fast inner loop is ``pytest -m "not models and not e2e"``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from proxy import offline  # offline settings for in-process model loading
from tests.support.proxy import RunningProxy, start_proxy, stop_proxy
from tests.support.redis_server import ENV as REDIS_ENV
from tests.support.redis_server import RedisServer, delete_redis_namespace, redis_namespace_url
from tests.support.stub_upstream import StubUpstream

# As the server does at start: spaCy and presidio imported without torch and transformers, which they
# would otherwise import (seconds and hundreds of MB in every test process) to offer engines the
# proxy never uses. Tests that need torch (the sentence-transformers reference) import it afterwards.
offline.keep_torch_out_of_presidio()

TESTS = Path(__file__).resolve().parent
E2E = TESTS / "e2e"
MODEL_MODULES = {TESTS / "unit" / f"test_{name}.py"
                 for name in ("domain_classifier", "privacy_detector", "privacy_context", "safety_detectors",
                              "stream_output")}
BROWSER_MODULES = {E2E / "test_web_verifier.py", E2E / "test_review_console.py"}
BROWSER_WORD = "chromium"  # in a test's name: it drives a headless chromium
PROXY_LAUNCHERS = ("start_proxy", "start_proxy_with", "serve_proxy", "fork_serve", "spawn_proxy")
#: The test files that take longest (total time of their tests, measured with ``--durations=0``
#: under ``make test``), slowest first: run first (:func:`_slowest_files_first`). A file missing
#: here only costs balance between the workers, never a test.
SLOWEST_FILES = (
    "e2e/test_faults_extended.py", "unit/guardrails/detectors/test_safety.py", "e2e/test_workers.py",
    "e2e/test_eval_suite.py", "e2e/test_fuzz.py", "unit/guardrails/detectors/test_embeddings.py",
    "e2e/test_web_verifier.py", "unit/evaluation/test_kpi_report.py", "unit/repo/test_import_each_module.py",
    "unit/guardrails/test_stream_output.py", "e2e/test_eval_conversation.py",
    "unit/guardrails/detectors/test_privacy_names.py", "integration/test_serving_install.py",
    "e2e/test_review_console.py", "e2e/test_kpi_inputs.py", "e2e/test_faults.py", "unit/guardrails/test_models.py",
    "unit/guardrails/detectors/test_pii_bounded.py", "e2e/test_screen_bounds.py", "e2e/test_safe_defaults.py",
    "e2e/test_ledger_cluster.py", "e2e/test_policy_reload.py", "unit/repo/test_no_torch_at_run_time.py",
    "e2e/test_replay.py", "e2e/test_proxy_e2e.py", "e2e/test_streaming.py", "integration/test_kpi_report.py",
    "e2e/test_leaks.py", "e2e/test_limits.py", "e2e/test_canaries.py", "integration/test_keys.py",
    "unit/guardrails/detectors/test_recognizer_gate.py", "unit/guardrails/detectors/test_ner_gate.py",
)

_session_redis: RedisServer | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Start the session's redis-server unless SONATE_TEST_REDIS is set; export its URL."""
    global _session_redis
    _keep_file_order_under_xdist(config)
    if os.environ.get(REDIS_ENV) or _session_redis is not None:
        return
    if shutil.which("redis-server") is None:
        raise pytest.UsageError(f"redis-server not found: `make system-deps` installs it, or set {REDIS_ENV}")
    directory = Path(tempfile.mkdtemp(prefix="sonate-test-redis-"))
    _session_redis = RedisServer(directory, aof=False).start()
    os.environ[REDIS_ENV] = _session_redis.url


def _keep_file_order_under_xdist(config: pytest.Config) -> None:
    """Make ``--dist loadfile`` hand out files in collection order (:func:`_slowest_files_first`)
    instead of xdist's default, most tests first, which left the slow files of few tests to the end
    of a run, on one worker while the other sat idle."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the session's redis-server (if this session started one) and remove its directory."""
    global _session_redis
    if _session_redis is None:
        return
    _session_redis.stop()
    shutil.rmtree(_session_redis.directory, ignore_errors=True)
    os.environ.pop(REDIS_ENV, None)
    _session_redis = None


def _starts_a_proxy(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    imported = any(getattr(module, name, None) is not None for name in PROXY_LAUNCHERS)
    return imported or "proxy" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``e2e`` by directory, ``browser`` by module or name, ``models`` by module or proxy start."""
    for item in items:
        path = Path(item.path)
        if E2E in path.parents:
            item.add_marker(pytest.mark.e2e)
        if path in BROWSER_MODULES or BROWSER_WORD in item.name:
            item.add_marker(pytest.mark.browser)
        if path in MODEL_MODULES or _starts_a_proxy(item):
            item.add_marker(pytest.mark.models)
    _slowest_files_first(items)
    _fastest_first_under_mutmut(items)


def _slowest_files_first(items: list[pytest.Item]) -> None:
    """Move the tests of :data:`SLOWEST_FILES` to the front, slowest file first, each file's tests
    in the order they had (pytest-randomly's, whose hook runs before this one); the other files
    follow in theirs. ``--dist loadfile`` then starts the long files first and fills in with the
    short ones, so no long file is left to run alone at the end."""
    rank = {TESTS / name: index for index, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(Path(item.path), len(rank)))  # stable: each file's order kept


def _fastest_first_under_mutmut(items: list[pytest.Item]) -> None:
    """Under mutmut (``make mutation``) run a mutant's tests fastest first, by the durations mutmut
    recorded in ``mutmut-stats.json`` (its working directory), so that ``-x`` stops a killed mutant
    at its quickest failing test instead of after whichever slow test came first. Elsewhere: no-op."""
    stats = Path("mutmut-stats.json")
    if not os.environ.get("MUTANT_UNDER_TEST") or not stats.is_file():
        return
    durations = json.loads(stats.read_text())["duration_by_test"]
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


@pytest.fixture(scope="session")
def stub() -> StubUpstream:
    server = StubUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def proxy(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    """The real proxy over a Redis ledger (a fresh namespace), routes to the stub provider."""
    ledger_url = redis_namespace_url("e2e")
    running = start_proxy(tmp_path_factory.mktemp("proxy"), stub.url, ledger_url)
    yield running
    stop_proxy(running)
    delete_redis_namespace(ledger_url)


@pytest.fixture()
def upstream(stub: StubUpstream) -> StubUpstream:
    """The stub provider, emptied of earlier requests and scripted replies."""
    stub.reset()
    return stub
