"""The two ways a chat route reaches the provider (proxy/server/flow/upstream.py): ``litellm.acompletion``
directly for a route that holds only a provider call's own parameters, litellm's Router for a route
with Router settings. Both against the stub provider over HTTP, with the same answers and the same
OpenAI errors."""

from __future__ import annotations

import logging

import pytest

from proxy.config import Config
from proxy.server.flow.upstream import Upstream, UpstreamError, direct_params
from tests.support.stub_upstream import Reply, StubUpstream

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def _config(url: str) -> Config:
    plain = {"model": "openai/stub-model", "api_base": url, "api_key": "os.environ/SONATE_TEST_STUB_KEY"}
    return Config(model_list=[
        {"model_name": "plain", "litellm_params": plain},
        {"model_name": "limited", "litellm_params": {**plain, "rpm": 10_000}},
        {"model_name": "priced", "litellm_params": plain, "model_info": {"input_cost_per_token": 1e-6}},
    ], auth={"keys": [{"key": "sk-test-client-0001-padded-to-32-chars", "actor": "alice"}]})


def test_only_routes_without_router_settings_are_called_directly(monkeypatch) -> None:
    monkeypatch.setenv("SONATE_TEST_STUB_KEY", "sk-from-env")
    routes = {r.model_name: r for r in _config("http://127.0.0.1:9/v1").model_list}
    assert direct_params(routes["plain"]) == {"model": "openai/stub-model", "api_base": "http://127.0.0.1:9/v1",
                                              "api_key": "sk-from-env"}
    assert direct_params(routes["limited"]) is None  # rpm: the Router's rate limit
    assert direct_params(routes["priced"]) is None  # pricing in model_info: the Router's cost map


def test_an_unset_secret_of_a_route_is_named_at_start(monkeypatch, caplog) -> None:
    monkeypatch.delenv("SONATE_TEST_STUB_KEY", raising=False)
    with caplog.at_level(logging.WARNING, logger="sonate.upstream"):
        Upstream(_config("http://127.0.0.1:9/v1"))
    warned = [r.getMessage() for r in caplog.records if r.name == "sonate.upstream"]
    assert warned == [f"model_list route {name!r}: litellm_params.api_key is os.environ/SONATE_TEST_STUB_KEY, which "
                      "is not set: its calls will fail or use the provider's default variable instead"
                      for name in ("plain", "limited", "priced")]
    caplog.clear()
    monkeypatch.setenv("SONATE_TEST_STUB_KEY", "sk-from-env")
    with caplog.at_level(logging.WARNING, logger="sonate.upstream"):
        Upstream(_config("http://127.0.0.1:9/v1"))
    assert not [r for r in caplog.records if r.name == "sonate.upstream"]


@pytest.fixture
def both(monkeypatch, upstream: StubUpstream) -> Upstream:
    monkeypatch.setenv("SONATE_TEST_STUB_KEY", "sk-from-env")
    built = Upstream(_config(upstream.url))
    assert set(built.direct) == {"plain"}
    assert built.direct["plain"]["max_retries"] == 0 and built.direct["plain"]["timeout"] > 0
    return built


@pytest.mark.parametrize("route", ["plain", "limited"])
async def test_both_paths_answer_alike_and_send_the_same_request(both: Upstream, upstream: StubUpstream,
                                                                 route: str) -> None:
    upstream.queue(Reply(text="four"))
    result = await both.complete(route, MESSAGES, {"temperature": 0.0})
    assert result.response["choices"][0]["message"]["content"] == "four"
    (sent,) = upstream.received()
    assert sent["model"] == "stub-model" and sent["messages"] == MESSAGES and sent["temperature"] == 0.0

    upstream.reset()
    upstream.queue(Reply(text="two plus two is four"))
    stream = await both.open_stream(route, MESSAGES, {})
    deltas = [c["choices"][0]["delta"].get("content") or "" async for c in stream if c.get("choices")]
    assert "".join(deltas) == "two plus two is four"
    (sent,) = upstream.received()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("status, expected", [(401, 502), (429, 429), (400, 400), (503, 503)])
async def test_both_paths_map_provider_errors_alike(both: Upstream, upstream: StubUpstream, status: int,
                                                    expected: int) -> None:
    seen = []
    for route in ("plain", "limited"):
        upstream.queue(Reply(text="provider says no", status=status))
        with pytest.raises(UpstreamError) as caught:
            await both.complete(route, MESSAGES, {})
        seen.append((caught.value.status, caught.value.type, caught.value.code))
    assert seen[0] == seen[1] and seen[0][0] == expected
