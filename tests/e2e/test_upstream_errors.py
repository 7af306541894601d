"""What a client and the log see when the provider fails or answers something hostile,
through the real proxy over the stub provider.

An error body names the kind of failure and the provider's HTTP status in a fixed sentence, never
the exception's text: litellm's can run to a traceback with the server's file paths (a provider
answering ``usage.prompt_tokens: 1e999`` produced one) or quote the request. A provider tool call
whose arguments spell a lone surrogate (``"\\ud800"``, not encodable text) is a handled error with
no traceback in the log, not a 500. Only the LLM provider is a stub.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.proxy import CLIENT_KEY, RunningProxy
from tests.support.stub_upstream import Reply, StubUpstream


def ask(proxy: RunningProxy, content: str = "What is the capital of Portugal?") -> httpx.Response:
    return httpx.post(proxy.v1 + "/chat/completions", timeout=60, headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                      json={"model": "stub", "messages": [{"role": "user", "content": content}]})


def completion(message: dict, usage: str = '{"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}') -> str:
    return ('{"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "stub-model", '
            f'"choices": [{{"index": 0, "message": {json.dumps(message)}, "finish_reason": "stop"}}], "usage": {usage}}}')


def assert_no_internals(text: str) -> None:
    for internal in ("Traceback", 'File "', ".py", "/usr/", "site-packages", "litellm", "Exception"):
        assert internal not in text, text


@pytest.mark.parametrize("status", [500, 502, 400])
def test_a_provider_error_is_named_by_kind_and_status_never_by_its_text(
        proxy: RunningProxy, upstream: StubUpstream, status: int) -> None:
    upstream.queue(Reply(status=status))
    response = ask(proxy)
    error = response.json()["error"]
    assert response.status_code == (400 if status == 400 else 502)
    assert f"(provider status {status})" in error["message"]
    assert "stub error" not in error["message"]  # the provider's own message
    assert_no_internals(error["message"])


def test_an_answer_litellm_cannot_read_is_a_fixed_502(proxy: RunningProxy, upstream: StubUpstream) -> None:
    upstream.queue(Reply(raw=completion({"role": "assistant", "content": "Lisbon."},
                                        usage='{"prompt_tokens": 1e999, "completion_tokens": 1, "total_tokens": 1e999}')))
    before = len(proxy.log())
    response = ask(proxy)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_error" and error["type"] == "api_error"
    assert error["message"].startswith("The model provider call failed")
    assert_no_internals(response.text)
    assert "Traceback" not in proxy.log()[before:]


def test_a_tool_call_with_a_lone_surrogate_is_a_handled_error_without_a_traceback(
        proxy: RunningProxy, upstream: StubUpstream) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "\ud800"}'}}
    raw = completion({"role": "assistant", "content": None, "tool_calls": [call]})
    assert '{\\"q\\": \\"\\ud800\\"}' in raw  # the body spells the escape; parsed, a lone surrogate
    upstream.queue(Reply(raw=raw))
    before = len(proxy.log())
    response = ask(proxy)
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "upstream_error" and "not valid Unicode text" in error["message"]
    assert_no_internals(response.text)
    assert "Traceback" not in proxy.log()[before:]


def test_a_streamed_tool_call_with_a_lone_surrogate_ends_the_stream_with_an_error_event(
        proxy: RunningProxy, upstream: StubUpstream) -> None:
    delta = [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "\ud800"}'}}]
    upstream.queue(Reply(text="Looking it up. ", tool_calls=[delta], finish_reason="tool_calls"))
    before = len(proxy.log())
    events = []
    with httpx.stream("POST", proxy.v1 + "/chat/completions", timeout=60, headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                      json={"model": "stub", "messages": [{"role": "user", "content": "Look it up."}],
                            "stream": True}) as response:
        assert response.status_code == 200
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_error" and "not valid Unicode text" in error["message"]
    assert "ud800" not in "".join(events[:-1])  # the call never reached the client
    receipt = httpx.get(f"{proxy.v1}/receipts/{response.headers['x-sonate-receipt-id']}", timeout=10,
                        headers={"Authorization": f"Bearer {CLIENT_KEY}"}).json()
    assert receipt.get("evidence", {}).get("stream", {}).get("ended") == "upstream_error", receipt
    assert "Traceback" not in proxy.log()[before:]
