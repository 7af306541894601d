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


COUNTED = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Héllo wörld ✓", "name": "bob"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "in parts"}]},
]


@pytest.mark.parametrize("model, target", [("plain", "openai/stub-model"), ("gpt-4o", "gpt-4o")])
def test_token_counts_are_litellms_and_a_resent_history_is_not_counted_again(monkeypatch, model: str,
                                                                              target: str) -> None:
    """Every prefix of a conversation counts what litellm counts for the whole list; the second
    time, every text-only message is answered from the cache (a content part list is not cached)."""
    import litellm

    monkeypatch.setenv("SONATE_TEST_STUB_KEY", "sk-from-env")
    upstream = Upstream(_config("http://127.0.0.1:9/v1"))
    for k in range(len(COUNTED) + 1):
        assert upstream.count_tokens(model, COUNTED[:k]) == litellm.token_counter(model=target, messages=COUNTED[:k])
    cache = upstream.token_counts
    hits, misses = cache.hits, cache.misses
    assert upstream.count_tokens(model, COUNTED) == litellm.token_counter(model=target, messages=COUNTED)
    # the priming, the 4 text-only messages, the priming again for the content part list (counted anew)
    assert (cache.hits - hits, cache.misses - misses) == (1 + 4 + 1, 0)
    changed = [{**COUNTED[1], "content": "Hello world"}]
    assert upstream.count_tokens(model, changed) == litellm.token_counter(model=target, messages=changed)
    assert cache.misses - misses == 1


def test_token_counts_cache_is_bounded(monkeypatch) -> None:
    """Least recently counted messages are evicted first: of ten turns through a cache of three
    entries (one of them the reply priming), the last two are answered from it, the first again counted."""
    from proxy.guardrails.cache import ScanCache

    monkeypatch.setenv("SONATE_TEST_STUB_KEY", "sk-from-env")
    upstream = Upstream(_config("http://127.0.0.1:9/v1"))
    upstream.token_counts = cache = ScanCache(max_entries=3)
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(10)]
    total = upstream.count_tokens("plain", turns)
    hits, misses = cache.hits, cache.misses
    assert upstream.count_tokens("plain", turns[-2:]) + 8 * (upstream.count_tokens("plain", turns[:1]) - 3) == total
    assert cache.hits - hits == 3 + 2  # the priming and the last two turns; the priming twice for the first
    assert cache.misses - misses == 1  # the first turn, evicted
