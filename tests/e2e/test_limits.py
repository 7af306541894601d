"""Per-key limits ("Bounded regex work"), against the real proxy with tiny limits.

The proxy allows each key a burst of 2 requests refilled at 0.25 request/s and 1 request in
flight. Over a limit the real `openai` client (no retries) gets a 429 in OpenAI's error shape
(`rate_limit_exceeded`, type `requests`) with an integer `Retry-After`; after waiting that long
the key is served again. A refused request writes no receipt (nothing was screened or
forwarded) and is counted as `sonate_requests_total{result="rate_limited"}`.
Only the LLM provider is a stub (tests/support/stub_upstream.py).
"""

from __future__ import annotations

import re
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from tests.support.ledger import receipt_count, sqlite_url
from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    OTHER_KEY,
    ROOT,
    RunningProxy,
    fork_serve,
    serve_proxy,
    start_proxy,  # noqa: F401  (conftest marks a module importing a launcher `models`)
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import free_port
from tests.support.stub_upstream import Reply, StubUpstream

LIMITS = {"max_concurrent_per_key": 1, "requests_per_second": 0.25, "burst": 2}
CAROL_KEY = "sk-test-carol-0009-padded-to-32-chars"
ROUTE = "/v1/chat/completions"


def _limited_config(directory: Path, stub: StubUpstream, policies: Path | None = None) -> tuple[Path, str, int]:
    port = free_port()
    server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 65536, "upstream_timeout_seconds": 10,
              "limits": LIMITS}
    ledger = sqlite_url(directory / "ledger.db")
    config = write_config(directory, stub.url, ledger, port, policies=policies, overrides={"server": server},
                          extra_keys=[{"key": CAROL_KEY, "actor": "carol", "role": "client"}])
    return config, ledger, port


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    directory = tmp_path_factory.mktemp("limited")
    config, ledger, port = _limited_config(directory, stub)
    running = wait_until_up(serve_proxy(config, ledger, directory / "keys" / "signing-key.json", port),
                            "/readyz", timeout=180)
    yield running
    stop_proxy(running)


@pytest.fixture(scope="module")
def limited_process(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    """The same limits in a process of its own (a test reads its threads' priorities under
    /proc/<pid>), with the continuity policy alone: the lanes do not depend on the detectors, and
    the process then starts without loading a model."""
    directory = tmp_path_factory.mktemp("limited-process")
    policies = directory / "policies"
    policies.mkdir()
    shutil.copy(ROOT / "policies" / "continuity.yaml", policies / "continuity.yaml")
    config, ledger, port = _limited_config(directory, stub, policies)
    running = wait_until_up(fork_serve(config, ledger, directory / "keys" / "signing-key.json", port),
                            "/readyz", timeout=180)
    yield running
    stop_proxy(running)


def _client(proxy: RunningProxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=key, max_retries=0, timeout=30)


def _ask(client: openai.OpenAI, text: str = "What is the capital of Portugal?"):
    return client.chat.completions.create(model="stub", messages=[{"role": "user", "content": text}])


def _receipts(proxy: RunningProxy) -> int:
    return receipt_count(proxy.ledger_url)


def _requests_metric(proxy: RunningProxy, result: str) -> float:
    request = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        found = re.fullmatch(r"sonate_requests_total\{(.*)\} (\S+)", line)
        if found and set(found.group(1).split(",")) == {f'route="{ROUTE}"', f'result="{result}"'}:
            return float(found.group(2))
    return 0.0


def test_rate_limit_answers_429_with_retry_after_then_serves_again(limited: RunningProxy, upstream) -> None:
    client = _client(limited, CLIENT_KEY)
    _ask(client), _ask(client)  # the burst
    receipts, refused_before, forwarded = _receipts(limited), _requests_metric(limited, "rate_limited"), \
        len(upstream.received())
    with pytest.raises(openai.RateLimitError) as refused:
        _ask(client)
    response = refused.value.response
    assert response.status_code == 429
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("requests", "rate_limit_exceeded", None)
    assert "Rate limit reached" in error["message"]
    retry_after = response.headers["retry-after"]
    assert retry_after.isdigit() and 1 <= int(retry_after) <= 4  # one token per 4 s, rounded up
    assert _receipts(limited) == receipts  # no receipt for a refused request...
    assert len(upstream.received()) == forwarded  # ...which never reached the provider
    assert _requests_metric(limited, "rate_limited") == refused_before + 1
    time.sleep(int(retry_after))
    assert _ask(client).choices[0].message.content
    assert _receipts(limited) == receipts + 1


def test_second_concurrent_request_of_a_key_gets_429_and_other_keys_are_unaffected(
        limited: RunningProxy, upstream) -> None:
    released = threading.Event()  # bob's first request stays at the provider until the checks are done
    upstream.queue(Reply(text="A slow answer.", gate=released))
    bob = _client(limited, OTHER_KEY)
    slow: dict = {}
    in_flight = threading.Thread(target=lambda: slow.update(answer=_ask(bob, "Tell me slowly.")))
    in_flight.start()
    deadline = time.monotonic() + 10
    while not upstream.received() and time.monotonic() < deadline:  # bob's first request is at the provider
        time.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as refused:
        _ask(bob)
    assert refused.value.response.headers["retry-after"] == "1"
    assert "concurrent" in refused.value.response.json()["error"]["message"]
    assert _ask(_client(limited, CAROL_KEY)).choices[0].message.content  # carol is another key
    released.set()
    in_flight.join(30)
    assert slow["answer"].choices[0].message.content == "A slow answer."
    assert _ask(bob).choices[0].message.content  # the refusal took no token: bob's second one is left


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory):
    """A proxy with a 2,000-character screening budget and at most 4 messages per request over its own
    (fresh) stub provider."""
    own_stub = StubUpstream().start()
    directory = tmp_path_factory.mktemp("budgeted")
    port = free_port()
    server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 65536, "upstream_timeout_seconds": 10,
              "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0, "max_screen_chars": 2000,
                         "max_messages": 4}}
    ledger = sqlite_url(directory / "ledger.db")
    config = write_config(directory, own_stub.url, ledger, port, overrides={"server": server})
    running = wait_until_up(serve_proxy(config, ledger, directory / "keys" / "signing-key.json", port),
                            "/readyz", timeout=180)
    received_at_ready = own_stub.received()  # before any test sends anything (tests run in random order)
    yield running, own_stub, received_at_ready
    stop_proxy(running)
    own_stub.stop()


def test_start_up_warm_up_never_calls_the_provider(budgeted) -> None:
    _, _, received_at_ready = budgeted
    assert received_at_ready == []  # litellm was warmed with mocked answers only


def test_input_over_the_screening_budget_is_refused_413_unscreened_and_unforwarded(budgeted) -> None:
    proxy, own_stub, _ = budgeted
    own_stub.reset()
    client = _client(proxy, CLIENT_KEY)
    before = _receipts(proxy)
    with pytest.raises(openai.APIStatusError) as refused:
        _ask(client, "Please summarise this report. " + "The quarterly figures were reviewed. " * 80)
    assert refused.value.status_code == 413
    error = refused.value.body
    assert error["code"] == "input_too_large" and error["type"] == "invalid_request_error"
    assert "max_screen_chars" in error["message"]
    assert own_stub.received() == [] and _receipts(proxy) == before  # never forwarded, nothing performed
    answer = _ask(client, "Please summarise this report. " + "The quarterly figures were reviewed. " * 20)
    assert answer.choices[0].message.content and len(own_stub.received()) == 1


def _definitions(bulk: str, description: str) -> dict:
    """A request's ``tools`` or ``response_format`` whose description is ``description``."""
    if bulk == "tools":
        return {"tools": [{"type": "function", "function": {"name": "figures", "description": description,
                                                            "parameters": {"type": "object"}}}]}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "figures", "description": description,
                                                                       "schema": {"type": "object"}}}}


@pytest.mark.parametrize("bulk", ["tools", "response_format"])
def test_tool_definitions_count_in_the_screening_budget(budgeted, bulk) -> None:
    """Short messages with the bulk in the tool definitions: the budget counts every text the
    guardrails screen, so this is the same 413 as long messages, unforwarded."""
    proxy, own_stub, _ = budgeted
    own_stub.reset()
    client = _client(proxy, CLIENT_KEY)
    before = _receipts(proxy)
    messages = [{"role": "user", "content": "Summarise the figures."}]
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="stub", messages=messages,
                                       **_definitions(bulk, "Returns the quarterly figures. " * 80))
    assert refused.value.status_code == 413 and refused.value.body["code"] == "input_too_large"
    assert own_stub.received() == [] and _receipts(proxy) == before
    answer = client.chat.completions.create(model="stub", messages=messages,
                                            **_definitions(bulk, "Returns the quarterly figures. " * 20))
    assert answer.choices[0].message.content and len(own_stub.received()) == 1


def test_a_request_over_the_message_count_bound_is_refused_413_and_unforwarded(budgeted) -> None:
    proxy, own_stub, _ = budgeted
    own_stub.reset()
    client = _client(proxy, CLIENT_KEY)
    before = _receipts(proxy)
    turns = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}] * 2
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="stub", messages=turns + [{"role": "user", "content": "Bye."}])
    assert refused.value.status_code == 413
    assert refused.value.body["code"] == "too_many_messages" and refused.value.body["param"] == "messages"
    assert "server.limits.max_messages" in refused.value.body["message"]
    assert own_stub.received() == [] and _receipts(proxy) == before
    assert client.chat.completions.create(model="stub", messages=turns[:3]).choices[0].message.content


def _nice(stat: Path) -> int:
    """The nice value in a /proc stat file (field 19, proc(5)): the 17th field after "pid (comm)"
    (split after the command name, which may hold spaces)."""
    return int(stat.read_text().rsplit(")", 1)[1].split()[16])


def test_the_large_input_lane_runs_at_a_lower_priority(limited_process: RunningProxy) -> None:
    # server.limits.large_input_nice (default 10): only the large lane's thread (one) is reniced
    pid = limited_process.process.pid
    base = _nice(Path(f"/proc/{pid}/stat"))
    values = [_nice(stat) for stat in Path(f"/proc/{pid}/task").glob("*/stat")]
    assert len(values) > 3 and values.count(max(10, base)) == (1 if base < 10 else len(values))
    assert min(values) == base
