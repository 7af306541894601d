"""End to end: streams pass through the real proxy chunk by chunk with the output guardrails
enforced. The official openai client (and, where the exact SSE lines matter,
httpx) against a running proxy, the stub provider streaming with pauses between chunks, a real
Redis ledger. Ordering is observed through the stub's record of what it had sent, never through
wall-clock thresholds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest
import redis

from proxy.primitives.canonical import json_hash
from proxy.receipts.signing import load_public_keys
from proxy.receipts.verify import verify_receipt
from tests.support.faults import start_proxy_with
from tests.support.proxy import CLIENT_KEY, ROOT, stop_proxy
from tests.support.redis_server import RedisServer
from tests.support.stub_upstream import Reply

TOXIC = ["Sure thing. ", "You are a worthless fuck", "ing idiot and a piece of shit, go to hell you stupid bitch. ",
         "Have a nice day."]


@pytest.fixture(scope="module")
def client(proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)


def get_receipt(proxy, receipt_id: str) -> tuple[int, dict]:
    r = httpx.get(f"{proxy.v1}/receipts/{receipt_id}", headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=10)
    return r.status_code, r.json()


def sse(proxy, content: str, **extra) -> tuple[httpx.Response, list]:
    """POST a streamed request with httpx; (response, the data of each event: JSON or "[DONE]"), and
    for "[DONE]" the receipt's status at the moment that line was read, as ("[DONE]", status)."""
    body = {"model": "stub", "messages": [{"role": "user", "content": content}], "stream": True, **extra}
    events = []
    with httpx.stream("POST", proxy.v1 + "/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                events.append(("[DONE]", get_receipt(proxy, response.headers["x-sonate-receipt-id"])[0]))
            else:
                events.append(json.loads(data))
    return response, events


def content_of(events: list) -> str:
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                   if isinstance(e, dict) and e.get("choices"))


def assembled(response: httpx.Response, events: list, model: str = "stub") -> dict:
    """The chat.completion the chunks assemble to (docs/receipts.md: what outputs_hash covers)."""
    chunks = [e for e in events if isinstance(e, dict)]
    choices = [e["choices"][0] for e in chunks if e.get("choices")]
    usage = next((e["usage"] for e in chunks if e.get("usage")), None)
    return {"id": chunks[0]["id"], "object": "chat.completion", "created": chunks[0]["created"], "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content_of(events)},
                         "finish_reason": [c["finish_reason"] for c in choices if c["finish_reason"]][-1]}],
            "usage": usage}


def test_first_chunk_arrives_before_the_provider_has_finished(client, upstream):
    """Longer than Safety's default hold-back (24 tokens): what is past it leaves while the
    provider is still sending."""
    words = [f"word{i} " for i in range(40)]
    upstream.queue(Reply(chunks=words, chunk_delay=0.05))
    stream = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "Count slowly"}],
                                            stream=True)
    sent_at_first = None
    parts = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if sent_at_first is None:
                sent_at_first = len(upstream.sent)
            parts.append(chunk.choices[0].delta.content)
    total = len(upstream.sent)  # role chunk + 40 content chunks + finish chunk
    assert "".join(parts) == "".join(words)
    assert sent_at_first is not None and sent_at_first < total - 6  # the provider was still sending


def test_receipt_is_appended_before_done_and_hashes_what_was_delivered(proxy, upstream):
    public_keys = load_public_keys(httpx.get(proxy.v1 + "/keys", timeout=10).json())
    upstream.queue(Reply(chunks=["Rivers ", "flow ", "to ", "the ", "sea."], chunk_delay=0.01))
    response, events = sse(proxy, "Where do rivers go?", stream_options={"include_usage": True})
    assert response.headers["x-sonate-guardrail-action"] == "allow"
    assert events[-1] == ("[DONE]", 200)  # GET /v1/receipts/{id} answered 200 when [DONE] was read
    status, receipt = get_receipt(proxy, response.headers["x-sonate-receipt-id"])
    assert content_of(events) == "Rivers flow to the sea."
    assert receipt["outputs_hash"] == json_hash(assembled(response, events))
    assert receipt["evidence"]["stream"] == {"ended": "stop", "delivered_chars": len("Rivers flow to the sea.")}
    assert verify_receipt(receipt, public_keys) == []


def test_toxic_phrase_split_across_chunks_stops_the_stream(proxy, client, upstream):
    upstream.queue(Reply(chunks=TOXIC, chunk_delay=0.01))
    raw = client.chat.completions.with_raw_response.create(
        model="stub", messages=[{"role": "user", "content": "Review my essay"}], stream=True)
    chunks = [c for c in raw.parse() if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "content_filter"
    assert "idiot" not in text and "Have a nice day" not in text  # the window that fired never left
    assert text in ("Sure thing. You are a worthless fuck", "I'm sorry, but I can't help with that request.")
    status, receipt = get_receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert status == 200 and receipt["guardrail_action"] == "refuse"
    assert receipt["policy_id"] == "safety.harm" and receipt["evidence"]["stage"] == "output"
    assert receipt["evidence"]["stream"]["ended"] == "content_filter"


def test_placeholder_split_across_chunks_is_restored(client, upstream):
    """The model writes the placeholder it saw in two chunks (``<EMAIL_`` + ``ADDRESS_1>``): the
    client gets the original back, and no chunk carries a piece of a placeholder."""
    upstream.queue(Reply(chunks=["I will write to ", "<EMAIL_", "ADDRESS_1>", " today, ", "thanks."], chunk_delay=0.01))
    stream = client.chat.completions.create(
        model="stub", stream=True,
        messages=[{"role": "user", "content": "Please write to ada.lovelace@example.com about my order."}])
    deltas = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "<EMAIL_ADDRESS_1>" in upstream.received()[0]["messages"][0]["content"]  # the model saw the placeholder
    assert "".join(deltas) == "I will write to ada.lovelace@example.com today, thanks."
    assert not any("<" in d for d in deltas)


def test_tool_call_deltas_and_usage_chunk_pass_through(client, upstream):
    calls = [[{"index": 0, "id": "call_9", "type": "function", "function": {"name": "weather", "arguments": ""}}],
             [{"index": 0, "function": {"arguments": "{\"city\":"}}], [{"index": 0, "function": {"arguments": "\"Oslo\"}"}}]]
    upstream.queue(Reply(chunks=[], tool_calls=calls, finish_reason="tool_calls", chunk_delay=0.01))
    stream = client.chat.completions.create(model="stub", messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert [d[0].index for d in deltas] == [0, 0, 0] and deltas[0][0].id == "call_9"
    assert [d[0].function.arguments for d in deltas] == ["", "{\"city\":", "\"Oslo\"}"]
    assert deltas[0][0].function.name == "weather"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 3


def test_provider_error_mid_stream_is_an_error_event_after_the_receipt(proxy, upstream):
    """A provider that cuts the stream after some chunks: an error event, no [DONE], and the
    receipt of what was delivered is in the ledger."""
    upstream.queue(Reply(chunks=["Partial ", "answer "], chunk_delay=0.01, status=200, truncate=True))
    response, events = sse(proxy, "Tell me something")
    assert "[DONE]" not in [e[0] if isinstance(e, tuple) else None for e in events]
    assert "error" in events[-1]
    status, receipt = get_receipt(proxy, response.headers["x-sonate-receipt-id"])
    assert status == 200 and receipt["evidence"]["stream"]["ended"] == "upstream_error"
    assert receipt["evidence"]["stream"]["delivered_chars"] == len(content_of(events))


def test_client_that_goes_away_still_gets_a_receipt_of_what_it_received(proxy, upstream):
    """The client closes the connection after the first content chunk: the proxy stops reading the
    provider and appends the receipt of what had been written (``ended: client_disconnected``).
    The answer is longer than Safety's default hold-back (24 tokens), so content leaves mid-stream."""
    upstream.queue(Reply(chunks=[f"part{i} " for i in range(40)], chunk_delay=0.1))
    body = {"model": "stub", "messages": [{"role": "user", "content": "Go slowly"}], "stream": True}
    with httpx.stream("POST", proxy.v1 + "/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
        receipt_id = response.headers["x-sonate-receipt-id"]
        for line in response.iter_lines():
            if line.startswith("data: ") and "part" in line:
                break  # leave: the connection closes with the block
    deadline = time.monotonic() + 30
    while (status := get_receipt(proxy, receipt_id)[0]) != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200
    receipt = get_receipt(proxy, receipt_id)[1]
    assert receipt["evidence"]["stream"]["ended"] == "client_disconnected"
    assert receipt["evidence"]["stream"]["delivered_chars"] < len("".join(f"part{i} " for i in range(40)))


def test_a_client_that_goes_away_mid_stream_leaves_one_log_line_and_no_traceback(proxy, upstream):
    upstream.queue(Reply(chunks=[f"piece{i} " for i in range(50)], chunk_delay=0.05))  # past the hold-back
    body = {"model": "stub", "messages": [{"role": "user", "content": "Go slowly again"}], "stream": True}
    before = len(proxy.log())
    with httpx.stream("POST", proxy.v1 + "/chat/completions", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
        receipt_id = response.headers["x-sonate-receipt-id"]
        for line in response.iter_lines():
            if line.startswith("data: ") and "piece" in line:
                break  # leave while the proxy still writes
    deadline = time.monotonic() + 30
    while get_receipt(proxy, receipt_id)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert get_receipt(proxy, receipt_id)[1]["evidence"]["stream"]["ended"] == "client_disconnected"
    deadline = time.monotonic() + 10  # the handler ends at its next write after the receipt
    while "client closed the connection" not in proxy.log()[before:] and time.monotonic() < deadline:
        time.sleep(0.2)
    log = proxy.log()[before:]
    assert "client closed the connection" in log
    assert "Traceback" not in log and "unhandled error" not in log


# ---- fail_closed: the append is refused after the stream started (Redis ACL, as tests/e2e/test_faults.py)

LEDGER_USER, LEDGER_PASSWORD = "sonate-ledger", "ledger-user-password-for-tests"


def test_append_refused_under_fail_closed_ends_with_an_error_event(tmp_path: Path, upstream):
    """The ledger refuses the append (its ACL drops ``@scripting`` once the stream has started):
    the client gets the chunks sent so far, then an error event ``ledger_unavailable`` instead of
    ``[DONE]``; the openai client raises APIError; nothing is stored."""
    policies = tmp_path / "policies"
    policies.mkdir()
    for source in (ROOT / "policies").glob("*.yaml"):
        if source.name != "safety.yaml":  # no model loads: this test is about the ledger
            (policies / source.name).write_text(source.read_text())
    server = RedisServer(tmp_path / "redis", aof=False).start()
    admin = redis.Redis(port=server.port, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", LEDGER_USER, "reset", "on", f">{LEDGER_PASSWORD}", "~*", "&*", "+@all")
    url = f"redis://{LEDGER_USER}:{LEDGER_PASSWORD}@127.0.0.1:{server.port}/0?namespace=streams"
    proxy = start_proxy_with(tmp_path / "proxy", upstream.url, url, policies=policies,
                             ledger={"on_unavailable": "fail_closed", "audit_interval_seconds": 0})
    try:
        upstream.queue(Reply(chunks=["one ", "two ", "three ", "four"], chunk_delay=0.2))
        body = {"model": "stub", "messages": [{"role": "user", "content": "Count"}], "stream": True}
        lines = []
        with httpx.stream("POST", proxy.v1 + "/chat/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    lines.append(line.removeprefix("data: "))
                    if len(lines) == 2:  # the role chunk and the first content chunk have arrived
                        admin.execute_command("ACL", "SETUSER", LEDGER_USER, "-@scripting")
        assert response.status_code == 200 and "[DONE]" not in lines
        error = json.loads(lines[-1])["error"]
        assert error["code"] == "ledger_unavailable" and error["type"] == "api_error"
        delivered = "".join((json.loads(x)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
                            for x in lines[:-1])
        assert delivered == "one two three four"
        assert get_receipt(proxy, response.headers["x-sonate-receipt-id"])[0] == 404  # nothing stored

        upstream.queue(Reply(chunks=["a ", "b"]))
        client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=30)
        with pytest.raises(openai.APIError) as caught:
            list(client.chat.completions.create(model="stub", messages=body["messages"], stream=True))
        assert "ledger" in str(caught.value).lower()
    finally:
        stop_proxy(proxy)
        admin.close()
        server.stop()
