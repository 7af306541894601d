"""Bounded work counts everything screened: numbers, keys and short strings, through the real
proxy over the stub provider.

Privacy reads each JSON string, key and number of the messages, tool-call arguments, tool schemas and
passed-through fields as a text of its own, and its cost is mostly per text: a 129 KB request of
20,000 numbers took 28 s and gigabytes. Here such requests are refused with 413 ``input_too_large``
naming ``server.limits.max_screen_pieces`` before any detector runs (nothing forwarded, no receipt:
nothing was decided); a request under the bound but large by its count of texts is screened in the
large-input lane (``sonate_guardrail_screens_total{lane="large"}``), masked as before; and a screen
that outlasts ``screen_timeout_seconds`` stops at its next group of texts, so its lane is free again
long before the work would have ended (the second proxy: no bounds, a 3 s budget). Only the LLM
provider is a stub.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.ledger import receipt_count, sqlite_url
from tests.support.proxy import (
    ADMIN_KEY,
    CLIENT_KEY,
    RunningProxy,
    serve_proxy,
    start_proxy,  # noqa: F401  (conftest marks a module importing a launcher `models`)
    stop_proxy,
    wait_until_up,
    write_config,
)
from tests.support.redis_server import free_port
from tests.support.stub_upstream import StubUpstream

MAX_PIECES = 2_500  # the shipped server.limits.max_screen_pieces
LARGE_PIECES = 500  # the shipped server.limits.large_input_pieces
UNBOUNDED_LARGE_PIECES = 50  # the unbounded proxy's: a large request that screens in well under its budget


def _proxy(directory: Path, stub: StubUpstream, limits: dict) -> RunningProxy:
    port = free_port()
    server = {"host": "127.0.0.1", "port": port, "max_body_bytes": 1 << 20, "upstream_timeout_seconds": 10,
              "limits": {"requests_per_second": 0, "max_concurrent_per_key": 0, **limits}}
    ledger = sqlite_url(directory / "ledger.db")
    config = write_config(directory, stub.url, ledger, port, overrides={"server": server})
    return wait_until_up(serve_proxy(config, ledger, directory / "keys" / "signing-key.json", port),
                         "/readyz", timeout=180)


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    """The shipped bounds (no time budget: a loaded test machine could reach it)."""
    running = _proxy(tmp_path_factory.mktemp("bounded"), stub, {"screen_timeout_seconds": 0})
    yield running
    stop_proxy(running)


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> RunningProxy:
    """No bound on characters or texts, a 3 s time budget, a large lane of one thread and no queue
    that takes requests of 50 texts or more (:data:`UNBOUNDED_LARGE_PIECES`), its thread at the
    server's own priority.

    The budget leaves room for the 50 numbers of a large request (~0.1 s on an idle machine);
    20,000 numbers take ~50 s. The lane's thread keeps nice 0
    (``large_input_nice``, default 10, tested in test_limits.py): at nice 10 beside two busy
    processes it gets ~5% of a CPU, and the large request's time would follow the other processes' load."""
    running = _proxy(tmp_path_factory.mktemp("unbounded"), stub,
                     {"max_screen_chars": 0, "max_screen_pieces": 0, "screen_timeout_seconds": 3,
                      "large_input_pieces": UNBOUNDED_LARGE_PIECES,
                      "large_input_threads": 1, "max_queued_large_screens": 0, "large_input_nice": 0})
    yield running
    stop_proxy(running)


def post(proxy: RunningProxy, path: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(proxy.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {CLIENT_KEY}",
                                              "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def chat(**extra) -> dict:
    return {"model": "stub", "messages": [{"role": "user", "content": "hi"}], **extra}


def receipts(proxy: RunningProxy) -> int:
    return receipt_count(proxy.ledger_url)


def metric(proxy: RunningProxy, name: str, **labels: str) -> float:
    request = urllib.request.Request(proxy.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def assert_refused_for_pieces(status: int, error: dict, pieces: int) -> None:
    assert status == 413
    assert (error["type"], error["code"]) == ("invalid_request_error", "input_too_large")
    assert f"holds {pieces} separately screened texts" in error["message"]
    assert f"at most {MAX_PIECES}" in error["message"] and "server.limits.max_screen_pieces" in error["message"]


@pytest.mark.parametrize("field, values", [
    ("x_list", list(range(20_000))),  # 129 KB: 28 s and +1.9 GB before
    ("x_strings", [f"w{i}" for i in range(3_000)]),
])
def test_many_passed_through_values_are_refused_413_before_any_detector_runs(
        bounded: RunningProxy, upstream: StubUpstream, field: str, values: list) -> None:
    before = receipts(bounded)
    status, body = post(bounded, "/v1/chat/completions", chat(**{field: values}))
    assert_refused_for_pieces(status, body["error"], 1 + len(values))  # "hi" and every value
    assert upstream.received() == [] and receipts(bounded) == before


def test_tool_call_arguments_count_every_value_inside_their_json(bounded: RunningProxy, upstream: StubUpstream) -> None:
    arguments = json.dumps({"ids": list(range(MAX_PIECES))})  # one string on the wire, 2,501 texts screened
    messages = [{"role": "user", "content": "look these up"},
                {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                      "function": {"name": "lookup", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "done"},
                {"role": "user", "content": "thanks"}]
    status, body = post(bounded, "/v1/chat/completions", {"model": "stub", "messages": messages})
    # three contents, the function's name, the arguments' key and values
    assert_refused_for_pieces(status, body["error"], 3 + 1 + 1 + MAX_PIECES)
    assert upstream.received() == []


def test_a_messages_tool_schema_enum_of_12000_numbers_is_refused_in_anthropic_shape(
        bounded: RunningProxy, upstream: StubUpstream) -> None:
    tool = {"name": "pick", "description": "Pick a number.",
            "input_schema": {"type": "object", "properties": {"n": {"type": "integer", "enum": list(range(12_000))}}}}
    status, body = post(bounded, "/v1/messages", {"model": "stub", "max_tokens": 64, "tools": [tool],
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert status == 413 and body["type"] == "error"
    assert body["error"]["type"] == "request_too_large"
    assert "server.limits.max_screen_pieces" in body["error"]["message"]
    assert upstream.received() == []


def test_embeddings_count_their_inputs_and_passed_through_values(bounded: RunningProxy, upstream: StubUpstream) -> None:
    status, body = post(bounded, "/v1/embeddings", {"model": "stub", "input": ["hello"] * 10,
                                                    "x_tags": [f"t{i}" for i in range(MAX_PIECES)]})
    assert_refused_for_pieces(status, body["error"], 10 + MAX_PIECES)
    assert upstream.received_embeddings() == []


def test_many_values_under_the_bound_are_screened_in_the_large_lane_and_still_masked(
        bounded: RunningProxy, upstream: StubUpstream) -> None:
    values = [f"w{i}" for i in range(LARGE_PIECES)]
    values[321] = "jane.doe@example.com"  # screened in its group of texts, masked in its place
    large, small = metric(bounded, "sonate_guardrail_screens_total", lane="large"), \
        metric(bounded, "sonate_guardrail_screens_total", lane="small")
    status, body = post(bounded, "/v1/chat/completions", chat(x_strings=values))
    assert status == 200, body
    assert metric(bounded, "sonate_guardrail_screens_total", lane="large") == large + 1  # the input screen
    assert metric(bounded, "sonate_guardrail_screens_total", lane="small") > small  # the (short) output screen
    (sent,) = upstream.received()
    assert sent["x_strings"][321] == "<EMAIL_ADDRESS_1>"
    assert sent["x_strings"][:321] == values[:321] and sent["x_strings"][322:] == values[322:]
    assert "jane.doe" not in json.dumps(sent)


def test_a_timed_out_screen_stops_and_frees_its_lane_long_before_its_work_would_end(
        unbounded: RunningProxy, upstream: StubUpstream) -> None:
    # 20,000 numbers: ~50 s of Safety and Privacy work on one core, far over the 3 s budget
    status, body = post(unbounded, "/v1/chat/completions", chat(x_list=list(range(20_000))))
    assert status == 503 and body["error"]["code"] == "guardrail_timeout"
    deadline = time.monotonic() + 30  # an abandoned screen stops at its next pause point (< 1 s apart)
    while metric(unbounded, "sonate_guardrail_lane_busy", lane="large") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(unbounded, "sonate_guardrail_lane_busy", lane="large") == 0
    # the lane (one thread, no queue) takes the next large request: it would answer 503 overloaded while busy
    large = metric(unbounded, "sonate_guardrail_screens_total", lane="large")
    status, body = post(unbounded, "/v1/chat/completions", chat(x_list=list(range(UNBOUNDED_LARGE_PIECES))))
    assert status == 200, body
    assert metric(unbounded, "sonate_guardrail_screens_total", lane="large") == large + 1
    assert upstream.received()[-1]["x_list"] == list(range(UNBOUNDED_LARGE_PIECES))
