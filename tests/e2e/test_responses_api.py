"""``POST /v1/responses`` through the real proxy with the official openai SDK.

``client.responses.create`` sync, async and streaming: the request reaches the stub provider as a
chat completion (instructions first, tools as function tools), a harmful prompt is refused with
a ``refusal`` content part (the provider not called), a PII prompt reaches the provider masked
(the stub records placeholders; the client gets the originals back), a regulated prompt is
escalated (the notice as output text, the escalation id in the headers), a long conversation is
summarized; every answer has its receipt (``evidence.endpoint: "responses"``) and counts in the
request metrics. Unsupported fields are 400s naming the field. Only the provider is a stub.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import openai
import pytest

from proxy.primitives.canonical import json_hash
from proxy.receipts.signing import load_public_keys
from proxy.receipts.verify import verify_receipt
from tests.support.prompts import APOLOGY, HARMFUL, LEGAL, PII, TOXIC
from tests.support.proxy import ADMIN_KEY, CLIENT_KEY, RunningProxy
from tests.support.stub_upstream import Reply

#: Event types of a streamed text answer, in OpenAI's order (deltas collapsed).
TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta", "response.output_text.done",
               "response.content_part.done", "response.output_item.done", "response.completed"]


def get(proxy: RunningProxy, path: str, key: str = CLIENT_KEY) -> dict | str:
    req = urllib.request.Request(proxy.url + path, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read().decode()
    return json.loads(body) if body.startswith("{") else body


@pytest.fixture(scope="module")
def client(proxy: RunningProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def keys(proxy: RunningProxy) -> dict[str, bytes]:
    return load_public_keys(get(proxy, "/v1/keys"))


def receipt(proxy: RunningProxy, receipt_id: str) -> dict:
    r = get(proxy, f"/v1/receipts/{receipt_id}")
    assert r["evidence"]["endpoint"] == "responses"
    return r


def collapsed(types: list[str]) -> list[str]:
    """Event types with runs of the same type collapsed to one."""
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


def test_a_plain_request_reaches_the_provider_as_a_chat_completion_with_an_allow_receipt(proxy, client, upstream,
                                                                                           keys):
    raw = client.responses.with_raw_response.create(model="stub", input="Name three prime numbers",
                                                    instructions="Answer briefly.", max_output_tokens=50,
                                                    temperature=0.5)
    response = raw.parse()
    assert response.output_text == "Stub answer: Name three prime numbers"
    assert response.status == "completed" and response.object == "response" and response.id.startswith("resp_")
    assert response.usage.input_tokens > 0 and response.usage.output_tokens == 6
    (sent,) = upstream.received()
    assert sent["messages"] == [{"role": "system", "content": "Answer briefly."},
                                {"role": "user", "content": "Name three prime numbers"}]
    assert sent["max_tokens"] == 50 and sent["temperature"] == 0.5
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["guardrail_action"]) == ("matrix", "allow")
    assert r["inputs_hash"] == json_hash({"model": "stub", "input": "Name three prime numbers",
                                          "instructions": "Answer briefly.", "max_output_tokens": 50,
                                          "temperature": 0.5})
    assert verify_receipt(r, keys) == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_harmful_prompt_is_refused_with_a_refusal_part_and_the_model_not_called(proxy, client, upstream, keys,
                                                                                  stream):
    raw = client.responses.with_raw_response.create(model="stub", input=[{"role": "user", "content": HARMFUL}],
                                                    stream=stream)
    if stream:
        events = list(raw.parse())
        assert collapsed([e.type for e in events]) == [t.replace("output_text", "refusal") for t in TEXT_EVENTS]
        response = events[-1].response
    else:
        response = raw.parse()
    (message,) = response.output
    assert [(p.type, p.refusal) for p in message.content] == [("refusal", APOLOGY)]
    assert response.status == "completed" and response.output_text == ""
    assert raw.headers["x-sonate-guardrail-action"] == "refuse"
    assert upstream.received() == []
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert (r["policy_id"], r["guardrail_action"]) == ("safety.harm", "refuse")
    assert verify_receipt(r, keys) == []


def test_pii_reaches_the_provider_masked_and_the_client_gets_it_back(proxy, client, upstream, keys):
    raw = client.responses.with_raw_response.create(model="stub", input=[{"role": "user", "content": PII}])
    response = raw.parse()
    seen = upstream.received()[0]["messages"][0]["content"]
    for value in ("John Smith", "john.smith@example.com", "212-555-0187"):
        assert value not in seen
    assert "<EMAIL_ADDRESS_1>" in seen and "<PERSON_1>" in seen and "<PHONE_NUMBER_1>" in seen
    assert response.output_text == f"Stub answer: {PII}"  # the stub echoes what it saw; the proxy restores
    assert raw.headers["x-sonate-guardrail-action"] == "mask"
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["guardrail_action"] == "mask" and "john.smith@example.com" not in json.dumps(r)
    assert verify_receipt(r, keys) == []


def test_a_regulated_prompt_is_escalated_with_the_notice_as_output_text(proxy, client, upstream, keys):
    raw = client.responses.with_raw_response.create(model="stub", input=LEGAL)
    response = raw.parse()
    escalation_id = raw.headers["x-sonate-escalation-id"]
    assert escalation_id in response.output_text and response.status == "completed"
    assert raw.headers["x-sonate-guardrail-action"] == "escalate"
    assert upstream.received() == []
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["evidence"]["escalation_id"] == escalation_id and r["intent"] == "legal"
    case = get(proxy, f"/v1/escalations/{escalation_id}")
    assert case["status"] == "pending"


def test_toxic_model_output_becomes_a_refusal_part(proxy, client, upstream):
    upstream.queue(Reply(text="You are a worthless fucking idiot and a piece of shit, go to hell you stupid bitch."))
    raw = client.responses.with_raw_response.create(model="stub", input="Review my essay")
    response = raw.parse()
    assert [p.type for p in response.output[0].content] == ["refusal"]
    assert "idiot" not in raw.content.decode()
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["evidence"]["stage"] == "output" and r["guardrail_action"] == "refuse"


def test_toxic_output_streamed_stops_as_a_refusal_or_an_incomplete_response(proxy, client, upstream):
    upstream.queue(Reply(chunks=TOXIC, chunk_delay=0.01))
    events = list(client.responses.create(model="stub", input="Review my essay", stream=True))
    final = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert "idiot" not in text and "Have a nice day" not in text
    if text:  # the guardrail fired after a first window had left: OpenAI's incomplete response
        assert events[-1].type == "response.incomplete" and final.incomplete_details.reason == "content_filter"
        assert text == "Sure thing. You are a worthless fuck"
    else:
        assert final.status == "completed" and final.output[0].content[0].refusal == APOLOGY


def test_a_provider_failure_mid_stream_ends_with_error_and_response_failed(proxy, client, upstream):
    upstream.queue(Reply(chunks=["Partial ", "answer "], chunk_delay=0.01, truncate=True))
    with client.responses.with_streaming_response.create(model="stub", input="Tell me something", stream=True) as raw:
        headers = raw.headers
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-1]["response"]["status"] == "failed"
    r = receipt(proxy, headers["x-sonate-receipt-id"])
    assert r["evidence"]["stream"]["ended"] == "upstream_error"


def test_a_long_conversation_is_summarized(proxy, client, upstream):
    items = []
    for i in range(12):
        items.append({"role": "user", "content": f"Part {i} of my travel story: " + "we walked along the river " * 60})
        items.append({"role": "assistant", "content": f"Noted part {i}."})
    items.append({"role": "user", "content": "What did I tell you about the river?"})
    upstream.queue(Reply(text="The user told a long travel story about walking along a river."),
                   Reply(text="You walked along a river."))
    raw = client.responses.with_raw_response.create(model="stub", input=items)
    assert raw.parse().output_text == "You walked along a river."
    assert raw.headers["x-sonate-continuity"] == "summarized"
    summary_call, main_call = upstream.received()
    assert len(main_call["messages"]) == 1 + 4
    r = receipt(proxy, raw.headers["x-sonate-receipt-id"])
    assert r["guardrail_action"] == "summarize"


def test_streaming_sends_openai_events_in_order_and_a_receipt(proxy, client, upstream, keys):
    upstream.queue(Reply(text="Two plus two is four."))
    with client.responses.with_streaming_response.create(model="stub", input="What is 2 + 2?", stream=True) as raw:
        headers = raw.headers
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert collapsed(types) == TEXT_EVENTS
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Two plus two is four."
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["usage"]["output_tokens"] == 5
    assert final["output"][0]["content"][0]["text"] == "Two plus two is four."
    assert upstream.received()[0]["stream"] is True
    r = receipt(proxy, headers["x-sonate-receipt-id"])
    assert r["guardrail_action"] == "allow" and r["evidence"]["stream"]["ended"] == "stop"
    assert verify_receipt(r, keys) == []


def test_the_sdks_stream_helper_assembles_the_final_response(proxy, client, upstream):
    upstream.queue(Reply(text="Rivers flow to the sea."))
    with client.responses.stream(model="stub", input="Where do rivers flow?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Rivers flow to the sea."


def test_streamed_function_calls_become_function_call_items(proxy, client, upstream):
    tools = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    upstream.queue(Reply(text="", chunks=[], finish_reason="tool_calls", tool_calls=[
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"city": "Paris"}'}}]]))
    stream = client.responses.create(model="stub", input="Weather in Paris?", tools=tools, stream=True)
    events = list(stream)
    assert "response.function_call_arguments.delta" in [e.type for e in events]
    (call,) = events[-1].response.output
    assert (call.type, call.call_id, call.name, call.arguments) == ("function_call", "call_1", "get_weather",
                                                                   '{"city": "Paris"}')
    (sent,) = upstream.received()
    assert sent["tools"] == [{"type": "function", "function": {k: v for k, v in tools[0].items() if k != "type"}}]


def test_the_sdks_tool_flow_continues_without_an_assistant_message(proxy, client, upstream):
    """``input += response.output`` after an answer that is only a function call, then the call's
    output (as a string and as parts): ``[user, function_call, function_call_output]`` reaches the
    provider as a user message, an assistant tool call and the tool result, every part of it."""
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    upstream.queue(Reply(text="", chunks=[], finish_reason="tool_calls", tool_calls=[
        [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                       "arguments": '{"city": "Oslo"}'}}]]))
    with client.responses.stream(model="stub", input=[{"role": "user", "content": "Weather in Oslo?"}],
                                 tools=tools) as stream:
        first = stream.get_final_response()
    assert [item.type for item in first.output] == ["function_call"]
    history: list = [{"role": "user", "content": "Weather in Oslo?"}, *first.output]
    for output in ("Sunny, 18 degrees", [{"type": "input_text", "text": "Sunny, "},
                                         {"type": "input_text", "text": "18 degrees"}]):
        upstream.reset()
        upstream.queue(Reply(text="It is sunny in Oslo."))
        answer = client.responses.create(model="stub", tools=tools, input=[
            *history, {"type": "function_call_output", "call_id": "call_1", "output": output}])
        assert answer.output_text == "It is sunny in Oslo."
        (sent,) = upstream.received()
        assert sent["messages"] == [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "tool_calls": [  # (litellm leaves the null content out)
                {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 18 degrees"}]


def test_the_async_client_creates_and_streams(proxy, upstream):
    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0) as client:
            response = await client.responses.create(model="stub", input="Count to three")
            stream = await client.responses.create(model="stub", input="Count to four", stream=True)
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            return response.output_text, "".join(deltas)

    assert asyncio.run(run()) == ("Stub answer: Count to three", "Stub answer: Count to four")


@pytest.mark.parametrize("extra, param", [
    ({"previous_response_id": "resp_123"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x.test/a.png"}]}]},
     "input.0.content.0.type"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type"),
    ({"messages": []}, "messages"),
])
def test_unsupported_fields_are_a_400_naming_the_field(proxy, client, upstream, extra, param):
    body = {"model": "stub", "input": "hello", **extra}
    with pytest.raises(openai.BadRequestError) as caught:
        client.post("/responses", body=body, cast_to=dict)
    assert caught.value.body["param"] == param
    assert param.split(".")[0] in caught.value.body["message"]
    assert upstream.received() == []


def test_requests_are_counted_under_their_route(proxy, client, upstream):
    def count() -> float:
        text = get(proxy, "/metrics", ADMIN_KEY)
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("sonate_requests_total{") and 'route="/v1/responses"' in line
                   and 'result="ok"' in line)

    before = count()
    client.responses.create(model="stub", input="hello")
    assert count() == before + 1
