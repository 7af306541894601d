"""Privacy on output across stream windows, through the real proxy with the shipped policies,
Privacy screening outputs too.

A streamed answer is screened in windows that close at a sentence end or after 400 characters (at a
white space). Masked window by window without overlap, an IBAN starting ~22 characters before a
cut reached the client in clear, and cards and phone numbers leaked whole or in part at other
offsets. Here each identifier is streamed cut in its middle by the first window's end, in 1- and
7-character chunks (every offset around it, in 1-, 5- and 7-character chunks, is swept at unit
level: tests/unit/guardrails/test_stream_output.py), and none of its parts may reach the client;
the same masker numbers the placeholders across windows. Only the LLM provider is a stub
(tests/support/stub_upstream.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from proxy.guardrails.stream import MAX_WINDOW_CHARS
from tests.support.proxy import CLIENT_KEY, ROOT, RunningProxy, start_proxy, stop_proxy
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url
from tests.support.stream_answers import FILLER, IDENTIFIERS, answer_with
from tests.support.stub_upstream import Reply, StubUpstream


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("policies-privacy-output")
    for source in (ROOT / "policies").glob("*.yaml"):
        (directory / source.name).write_text(source.read_text())
    text = (directory / "privacy.yaml").read_text()
    assert "stages: [input]" in text
    (directory / "privacy.yaml").write_text(text.replace("stages: [input]", "stages: [input, output]", 1))
    return directory


@pytest.fixture(scope="module")
def masking(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream, policies: Path) -> RunningProxy:
    ledger_url = redis_namespace_url("stream-privacy")
    running = start_proxy(tmp_path_factory.mktemp("masking"), stub.url, ledger_url, policies=policies)
    yield running
    stop_proxy(running)
    delete_redis_namespace(ledger_url)


def streamed(proxy: RunningProxy, upstream: StubUpstream, answer: str, chunk: int) -> str:
    """The content the client receives when the provider streams ``answer`` in ``chunk``-character deltas."""
    upstream.queue(Reply(chunks=[answer[i:i + chunk] for i in range(0, len(answer), chunk)]))
    body = {"model": "stub", "messages": [{"role": "user", "content": "Tell me."}], "stream": True}
    content = []
    with httpx.stream("POST", proxy.v1 + "/chat/completions", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            data = line.removeprefix("data: ")
            if line.startswith("data: ") and data != "[DONE]":
                event = json.loads(data)
                assert "error" not in event, event
                content += [c["delta"].get("content") or "" for c in event["choices"]]
    return "".join(content)


@pytest.mark.parametrize("kind", IDENTIFIERS)
def test_an_identifier_across_a_window_cut_never_reaches_the_client(
        masking: RunningProxy, upstream: StubUpstream, kind: str) -> None:
    # Each identifier cut in its middle by the first window's end, in 1- and 7-character chunks;
    # every offset around the cut is swept at unit level (test_stream_output.py).
    label, identifier, parts = IDENTIFIERS[kind]
    leaked = []
    for offset in (MAX_WINDOW_CHARS - len(identifier) // 2,):
        answer = answer_with(label, identifier, offset)
        for chunk in (1, 7):
            delivered = streamed(masking, upstream, answer, chunk)
            assert "is what you need." in delivered
            if any(part in delivered for part in parts) or not re.search(r"<[A-Z_]+_1>", delivered):
                leaked.append((offset, chunk, delivered[offset - 20:offset + len(identifier) + 5]))
    assert leaked == []


def test_one_masker_numbers_placeholders_across_windows(masking: RunningProxy, upstream: StubUpstream) -> None:
    first, second = "jane.doe@example.com", "john.roe@example.org"
    answer = (f"write to {first} today. " + FILLER[:MAX_WINDOW_CHARS] + f". Or write to {second} or again to "
              f"{first} tomorrow. " + FILLER[:MAX_WINDOW_CHARS] + f". Last, write to {second}. Bye.")
    for chunk in (1, 7):
        delivered = streamed(masking, upstream, answer, chunk)
        assert first not in delivered and second not in delivered
        assert re.findall(r"<EMAIL_ADDRESS_\d+>", delivered) == ["<EMAIL_ADDRESS_1>", "<EMAIL_ADDRESS_2>",
                                                                 "<EMAIL_ADDRESS_1>", "<EMAIL_ADDRESS_2>"]


def test_a_phone_number_split_by_a_sentence_end_is_masked_as_in_a_json_answer(
        masking: RunningProxy, upstream: StubUpstream) -> None:
    answer = "Call 020 7946. 0958 is the number to call about it."
    upstream.queue(Reply(text=answer))
    body = {"model": "stub", "messages": [{"role": "user", "content": "Tell me."}]}
    whole = httpx.post(masking.v1 + "/chat/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {CLIENT_KEY}"}).json()["choices"][0]["message"]["content"]
    assert "7946" not in whole
    for chunk in (1, 5, 7):
        assert streamed(masking, upstream, answer, chunk) == whole
