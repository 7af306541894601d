"""``POST /v1/messages`` through the real proxy with the official anthropic SDK.

``client.messages.create`` sync and streaming (raw events and the SDK's ``messages.stream``
helper), the key sent as ``x-api-key``: the request reaches the stub provider as a chat
completion (system first, tool_use / tool_result as tool calls and tool messages, stop
sequences, top_k passed through), a harmful prompt is refused (a text block with the apology,
``stop_reason: "refusal"``, the provider not called), a PII prompt reaches the provider masked
(the stub records placeholders), a regulated prompt is escalated (the notice as text, the
escalation id in the headers), a long conversation is summarized; every answer has its receipt
(``evidence.endpoint: "messages"``). Errors are Anthropic's shape and status codes. Only the
provider is a stub.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import pytest

from proxy.primitives.canonical import json_hash
from proxy.receipts.signing import load_public_keys
from proxy.receipts.verify import verify_receipt
from tests.support.prompts import APOLOGY, HARMFUL, LEGAL, PII, TOXIC
from tests.support.proxy import CLIENT_KEY, RunningProxy
from tests.support.stub_upstream import Reply

#: Event types of a streamed one-block answer, in Anthropic's order (deltas collapsed).
TEXT_EVENTS = ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta",
               "message_stop"]


def http(proxy: RunningProxy, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(proxy.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def client(proxy: RunningProxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=CLIENT_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def keys(proxy: RunningProxy) -> dict[str, bytes]:
    return load_public_keys(http(proxy, "GET", "/v1/keys")[1])


def receipt(proxy: RunningProxy, receipt_id: str) -> dict:
    status, r = http(proxy, "GET", f"/v1/receipts/{receipt_id}", headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert status == 200 and r["evidence"]["endpoint"] == "messages"
    return r


def collapsed(types: list[str]) -> list[str]:
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_a_plain_request_reaches_the_provider_as_a_chat_completion_with_an_allow_receipt(proxy, client, upstream,
                                                                                           keys):
    raw = client.messages.with_raw_response.create(
        model="stub", max_tokens=64, system="Answer briefly.", messages=user("Name three prime numbers"),
        stop_sequences=["###"], extra_body={"temperature": 0.5, "top_k": 40})
    message = raw.parse()
    assert [(b.type, b.text) for b in message.content] == [("text", "Stub answer: Name three prime numbers")]
    assert message.stop_reason == "end_turn" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.usage.input_tokens > 0 and message.usage.output_tokens == 6
    (sent,) = upstream.received()
    assert sent["messages"] == [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "Name three prime numbers"}]
    assert (sent["max_tokens"], sent["stop"], sent["temperature"], sent["top_k"]) == (64, ["###"], 0.5, 40)
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["guardrail_action"]) == ("matrix", "allow")
    assert r["inputs_hash"] == json_hash({"model": "stub", "max_tokens": 64, "system": "Answer briefly.",
                                          "messages": user("Name three prime numbers"), "stop_sequences": ["###"],
                                          "temperature": 0.5, "top_k": 40})
    assert verify_receipt(r, keys) == []


def test_a_harmful_prompt_is_refused_with_stop_reason_refusal(proxy, client, upstream, keys):
    raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=user(HARMFUL))
    message = raw.parse()
    assert [(b.type, b.text) for b in message.content] == [("text", APOLOGY)]
    assert message.stop_reason == "refusal" and message.stop_details.type == "refusal"
    assert raw.headers["x-sonate-guardrail-action"] == "refuse"
    assert upstream.received() == []
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["guardrail_action"]) == ("safety.harm", "refuse")
    assert verify_receipt(r, keys) == []


def test_a_harmful_prompt_streamed_is_refused_with_stop_reason_refusal(proxy, client, upstream):
    with client.messages.stream(model="stub", max_tokens=64, messages=user(HARMFUL)) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == APOLOGY and message.stop_reason == "refusal" and message.stop_details.type == "refusal"
    assert upstream.received() == []


def test_pii_reaches_the_provider_masked_and_the_client_gets_it_back(proxy, client, upstream, keys):
    raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=user(PII))
    message = raw.parse()
    seen = upstream.received()[0]["messages"][0]["content"]
    for value in ("John Smith", "john.smith@example.com", "212-555-0187"):
        assert value not in seen
    assert "<EMAIL_ADDRESS_1>" in seen and "<PERSON_1>" in seen and "<PHONE_NUMBER_1>" in seen
    assert message.content[0].text == f"Stub answer: {PII}"  # the stub echoes what it saw; the proxy restores
    assert raw.headers["x-sonate-guardrail-action"] == "mask"
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["guardrail_action"] == "mask" and "john.smith@example.com" not in json.dumps(r)
    assert verify_receipt(r, keys) == []


def test_a_regulated_prompt_is_escalated_with_the_notice_as_text(proxy, client, upstream):
    raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=user(LEGAL))
    message = raw.parse()
    escalation_id = raw.headers["x-sonate-escalation-id"]
    assert escalation_id in message.content[0].text and message.stop_reason == "end_turn"
    assert raw.headers["x-sonate-guardrail-action"] == "escalate"
    assert upstream.received() == []
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["evidence"]["escalation_id"] == escalation_id and r["intent"] == "legal"


def test_a_long_conversation_is_summarized(proxy, client, upstream):
    turns = []
    for i in range(12):
        turns += [{"role": "user", "content": f"Part {i} of my travel story: " + "we walked along the river " * 60},
                  {"role": "assistant", "content": f"Noted part {i}."}]
    turns += user("What did I tell you about the river?")
    upstream.queue(Reply(text="The user told a long travel story about walking along a river."),
                   Reply(text="You walked along a river."))
    raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=turns)
    assert raw.parse().content[0].text == "You walked along a river."
    assert raw.headers["x-sonate-continuity"] == "summarized"
    assert receipt(proxy, raw.headers["x-sonate-receipt-id"])["guardrail_action"] == "summarize"


def test_streaming_sends_anthropic_events_in_order_and_a_receipt(proxy, client, upstream, keys):
    upstream.queue(Reply(text="Two plus two is four."))
    raw = client.messages.with_raw_response.create(model="stub", max_tokens=64, messages=user("What is 2 + 2?"),
                                                   stream=True)
    events = list(raw.parse())
    assert collapsed([e.type for e in events]) == TEXT_EVENTS
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == "Two plus two is four."
    delta = events[-2]
    assert delta.delta.stop_reason == "end_turn" and delta.usage.output_tokens == 5 and delta.usage.input_tokens > 0
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["guardrail_action"] == "allow" and r["evidence"]["stream"]["ended"] == "stop"
    assert verify_receipt(r, keys) == []


def test_toxic_output_streamed_stops_with_stop_reason_refusal(proxy, client, upstream):
    upstream.queue(Reply(chunks=TOXIC, chunk_delay=0.01))
    with client.messages.stream(model="stub", max_tokens=64, messages=user("Review my essay")) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert message.stop_reason == "refusal"
    assert "idiot" not in text and "Have a nice day" not in text
    assert text in ("Sure thing. You are a worthless fuck", APOLOGY)


def test_tool_use_and_tool_results_round_trip_as_chat_tool_calls(proxy, client, upstream):
    tools = [{"name": "get_weather", "description": "Weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    upstream.queue(Reply(text="", chunks=[], finish_reason="tool_calls", tool_calls=[
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]]))
    with client.messages.stream(model="stub", max_tokens=64, tools=tools, messages=user("Weather in Paris?")) as s:
        message = s.get_final_message()
    assert message.stop_reason == "tool_use"
    (block,) = message.content
    assert (block.type, block.id, block.name, block.input) == ("tool_use", "call_1", "get_weather", {"city": "Paris"})
    assert upstream.received()[0]["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "parameters": tools[0]["input_schema"], "description": "Weather of a city"}}]
    upstream.reset()
    follow_up = [*user("Weather in Paris?"), {"role": "assistant", "content": message.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny"}]}]
    client.messages.create(model="stub", max_tokens=64, tools=tools, messages=follow_up)
    sent = upstream.received()[0]["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}


def test_a_provider_failure_mid_stream_is_an_anthropic_error_event(proxy, client, upstream):
    upstream.queue(Reply(chunks=["Partial ", "answer "], chunk_delay=0.01, truncate=True))
    with pytest.raises(anthropic.APIStatusError) as caught:
        list(client.messages.create(model="stub", max_tokens=64, messages=user("Tell me something"), stream=True))
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "api_error"


@pytest.mark.parametrize("body, param", [
    ({"model": "stub", "messages": user("hi")}, "max_tokens"),
    ({"model": "stub", "max_tokens": 10, "messages": user("hi"), "thinking": {"type": "enabled"}}, "thinking"),
    ({"model": "stub", "max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}]}, "messages.0.content.0.type"),
    ({"model": "stub", "max_tokens": 10, "messages": user("hi"), "tools": [{"type": "web_search_20250305",
                                                                             "name": "web_search"}]}, "tools.0.type"),
])
def test_bad_and_unsupported_bodies_are_anthropic_400s_naming_the_field(proxy, client, upstream, body, param):
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.post("/v1/messages", body=body, cast_to=dict)
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert f"'{param}'" in caught.value.body["error"]["message"] or caught.value.body["error"]["message"].startswith(
        param)
    assert upstream.received() == []


def test_auth_and_unknown_models_answer_in_anthropic_format(proxy, upstream):
    with pytest.raises(anthropic.AuthenticationError) as caught:
        anthropic.Anthropic(base_url=proxy.url, api_key="sk-wrong", max_retries=0).messages.create(
            model="stub", max_tokens=10, messages=user("hi"))
    assert caught.value.body["error"]["type"] == "authentication_error"
    bearer = anthropic.Anthropic(base_url=proxy.url, auth_token=CLIENT_KEY, max_retries=0)  # Authorization: Bearer
    with pytest.raises(anthropic.NotFoundError) as caught:
        bearer.messages.create(model="no-such-model", max_tokens=10, messages=user("hi"))
    assert caught.value.body["type"] == "error" and caught.value.body["error"]["type"] == "not_found_error"
    assert set(caught.value.body["error"]) == {"type", "message"}
    status, body = http(proxy, "POST", "/v1/messages", b"{not json", {"x-api-key": CLIENT_KEY})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert upstream.received() == []
