"""Shared fixtures: the stub provider, and the real proxy started as `python -m proxy serve`."""

from __future__ import annotations

import pytest

from proxy import offline  # noqa: F401  (offline settings for in-process model loading)
from tests.support.proxy import RunningProxy, delete_redis_namespace, redis_namespace_url, start_proxy, stop_proxy
from tests.support.stub_upstream import StubUpstream


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
