"""The pure translations of the Responses and Messages APIs (proxy.server.dialects.responses,
proxy.server.dialects.messages): request bodies to chat-completion bodies (valid for the chat wire
model), chat answers back to native bodies and event streams, checked against the official SDKs'
own types (``openai.types.responses``, ``anthropic.types``) so every shape is one a client parses.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

from proxy.server.dialects import messages as messages_api
from proxy.server.dialects import responses as responses_api
from proxy.server.dialects.base import Strict, bad_field, named_sse_event, parse_field
from proxy.server.dialects.messages import MessagesRequest, MessagesStream
from proxy.server.dialects.responses import ResponsesRequest, ResponsesStream
from proxy.server.errors import GatewayError
from proxy.server.flow.wire import ChatCompletionRequest

OPENAI_EVENT = TypeAdapter(ResponseStreamEvent)
ANTHROPIC_EVENT = TypeAdapter(RawMessageStreamEvent)
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def responses(**body: Any) -> dict[str, Any]:
    """The chat body for a Responses body (model "m"), checked valid for the chat wire model."""
    chat = responses_api.chat_request(ResponsesRequest.model_validate_json(json.dumps({"model": "m", **body})))
    ChatCompletionRequest.model_validate_json(json.dumps(chat))
    return chat


def messages(**body: Any) -> dict[str, Any]:
    """The chat body for a Messages body (model "m", max_tokens 64), checked valid for the chat wire model."""
    chat = messages_api.chat_request(MessagesRequest.model_validate_json(json.dumps(
        {"model": "m", "max_tokens": 64, **body})))
    ChatCompletionRequest.model_validate_json(json.dumps(chat))
    return chat


def completion(content: str | None, finish: str = "stop", tool_calls: list | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": USAGE}


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


# -- Responses: requests ----------------------------------------------------------------------------

def test_a_string_input_with_instructions_becomes_a_system_and_a_user_message():
    chat = responses(input="Hi", instructions="Be brief.", max_output_tokens=20, temperature=0.3, user="u1",
                     metadata={"complexity": "simple"}, reasoning={"effort": "low"})
    assert chat["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert (chat["max_tokens"], chat["temperature"], chat["user"], chat["reasoning_effort"]) == (20, 0.3, "u1", "low")
    assert chat["metadata"] == {"complexity": "simple"} and chat["stream"] is False


def test_items_become_chat_messages_with_tool_calls_and_tool_results():
    chat = responses(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check.",
                                                               "annotations": []}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"}])
    assert chat["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}], "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}]


def test_a_function_call_right_after_the_user_message_is_its_own_assistant_turn():
    """The SDK's usual tool flow, ``[user, function_call, function_call_output]`` (a response whose
    output is only the call, sent back): the call never attaches to the user message."""
    chat = responses(input=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Noon"}])
    assert chat["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Noon"}]


def test_a_function_call_output_given_as_parts_keeps_every_part():
    chat = responses(input=[
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [
            {"type": "input_text", "text": "Sunny, "}, {"type": "input_text", "text": "18 degrees, "},
            {"type": "input_text", "text": "light wind"}]}])
    assert chat["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                    "content": "Sunny, 18 degrees, light wind"}


def test_function_tools_text_format_and_streaming_translate():
    chat = responses(input="x", stream=True, tool_choice={"type": "function", "name": "f"},
                     tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
                     text={"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}},
                           "verbosity": "low"}, prompt_cache_key="team-42")
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                                "strict": True}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "s",
                                                                              "schema": {"type": "object"}}}
    assert chat["stream_options"] == {"include_usage": True}
    assert (chat["verbosity"], chat["prompt_cache_key"]) == ("low", "team-42")  # passed through as chat fields


@pytest.mark.parametrize("body, param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"include": ["reasoning.encrypted_content"]}, "include"),
    ({"reasoning": {"effort": "low", "summary": "auto"}}, "reasoning"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"type": "function", "name": "f", "defer_loading": True}]}, "tools.0.defer_loading"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]}, "input.0.content.0.type"),
    ({"input": [{"type": "reasoning", "id": "rs_1"}]}, "input.0.type"),
    ({"input": [{"type": ["message"]}]}, "input.0.type"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input.0.arguments"),
    ({"text": {"format": {"type": "nope"}}}, "text.format"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages"),
])
def test_unsupported_or_bad_fields_are_a_400_naming_the_field(body, param):
    with pytest.raises(GatewayError) as caught:
        responses(**{"input": "x", **body})
    assert caught.value.status == 400 and caught.value.param == param
    assert param.split(".")[0] in caught.value.message


def test_a_long_string_input_is_one_user_message_and_an_empty_item_list_a_400():
    assert responses(input="x" * 5000)["messages"] == [{"role": "user", "content": "x" * 5000}]
    with pytest.raises(ValidationError):
        ResponsesRequest.model_validate_json('{"model": "m", "input": []}')


def test_a_client_written_type_or_key_is_not_echoed_in_the_error():
    secret = "call me at 212-555-0187"
    for body in ({"input": [{"type": secret}]}, {"tools": [{"type": secret}]}, {"text": {secret: 1}},
                 {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x", secret: 1}]}]}):
        with pytest.raises(GatewayError) as caught:
            responses(**{"input": "x", **body})
        assert "212" not in caught.value.message and "212" not in (caught.value.param or "")
    with pytest.raises(GatewayError) as caught:
        responses(input=[{"type": "input_image"}])
    assert "'input_image'" in caught.value.message  # a type name is shown


def test_store_false_is_accepted():
    assert responses(input="x", store=False)["messages"] == [{"role": "user", "content": "x"}]


# -- Responses: answers -----------------------------------------------------------------------------

REQ = ResponsesRequest.model_validate({"model": "m", "input": "x"})


def test_an_answer_becomes_a_completed_response_the_sdk_reads():
    body = responses_api.response_body(REQ, completion("Four.", "tool_calls", [CALL]))
    response = Response.model_validate(body)
    assert response.output_text == "Four." and response.status == "completed"
    assert [item.type for item in response.output] == ["message", "function_call"]
    call = response.output[1]
    assert (call.call_id, call.name, call.arguments) == ("call_1", "get_weather", '{"city": "Oslo"}')
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (7, 3, 10)


def test_a_guardrail_refusal_is_a_refusal_part_and_a_length_stop_is_incomplete():
    refused = Response.model_validate(responses_api.response_body(REQ, completion("Sorry.", "content_filter")))
    assert [(p.type, p.refusal) for p in refused.output[0].content] == [("refusal", "Sorry.")]
    assert refused.status == "completed" and refused.output_text == ""
    cut = Response.model_validate(responses_api.response_body(REQ, completion("Once upon", "length")))
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def events_of(stream: ResponsesStream | MessagesStream, steps: list[tuple]) -> list[dict[str, Any]]:
    """The events of ``stream`` for ``steps`` (method name, args...), start first."""
    events = stream.start()
    for name, *args in steps:
        events += getattr(stream, name)(*args)
    return events


def test_the_responses_stream_follows_openais_event_order_and_each_event_parses():
    events = events_of(ResponsesStream(REQ), [("text", "Hel"), ("text", "lo"),
                                              ("tool_call", 0, "call_1", "get_weather", '{"ci'),
                                              ("tool_call", 0, None, "", 'ty": "Oslo"}'),
                                              ("finish", "tool_calls", USAGE)])
    parsed = [OPENAI_EVENT.validate_python(e) for e in events]
    assert [e.type for e in parsed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    final = parsed[-1].response
    assert final.output_text == "Hello" and final.output[1].arguments == '{"city": "Oslo"}'
    assert final.output[1].status == "completed" and final.usage.total_tokens == 10


def test_a_streamed_refusal_is_a_refusal_part_and_a_refusal_after_text_is_incomplete():
    before = events_of(ResponsesStream(REQ), [("text", "Sorry.", True), ("finish", "content_filter", None)])
    assert [e["type"] for e in before][3:6] == ["response.content_part.added", "response.refusal.delta",
                                                "response.refusal.done"]
    assert OPENAI_EVENT.validate_python(before[-1]).response.status == "completed"
    after = events_of(ResponsesStream(REQ), [("text", "Sure thing. "), ("finish", "content_filter", None)])
    final = OPENAI_EVENT.validate_python(after[-1])
    assert final.type == "response.incomplete" and final.response.incomplete_details.reason == "content_filter"


def test_a_failed_stream_ends_with_an_error_and_response_failed():
    events = events_of(ResponsesStream(REQ), [("text", "Part"), ("fail", {"error": {
        "message": "The trust ledger is unavailable.", "type": "api_error", "code": "ledger_unavailable"}})])
    parsed = [OPENAI_EVENT.validate_python(e) for e in events]
    assert [e.type for e in parsed][-2:] == ["error", "response.failed"]
    assert parsed[-2].code == "ledger_unavailable" and parsed[-1].response.status == "failed"


# -- Messages: requests -----------------------------------------------------------------------------

def test_system_blocks_tool_use_and_tool_results_become_chat_messages():
    chat = messages(system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                    stop_sequences=["###"], top_k=40, metadata={"user_id": "u1"}, messages=[
                        {"role": "user", "content": "Weather in Oslo?"},
                        {"role": "assistant", "content": [
                            {"type": "text", "text": "Checking."},
                            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                        {"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text",
                                                                                           "text": "Sunny"}]},
                            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "timeout", "is_error": True},
                            {"type": "text", "text": "Thanks"}]}])
    assert chat["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": messages_api.TOOL_ERROR_PREFIX + "timeout"},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}]
    assert (chat["max_tokens"], chat["stop"], chat["top_k"], chat["user"]) == (64, ["###"], 40, "u1")


@pytest.mark.parametrize("choice, chat_choice", [
    ({"type": "auto"}, {"tool_choice": "auto"}),
    ({"type": "any", "disable_parallel_tool_use": True}, {"tool_choice": "required", "parallel_tool_calls": False}),
    ({"type": "tool", "name": "f"}, {"tool_choice": {"type": "function", "function": {"name": "f"}}}),
    ({"type": "none"}, {"tool_choice": "none"}),
    ({"type": "auto", "disable_parallel_tool_use": True}, {"tool_choice": "auto", "parallel_tool_calls": False}),
    ({"type": "tool", "name": "f", "disable_parallel_tool_use": True},
     {"tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": False}),
])
def test_tools_and_tool_choice_translate(choice, chat_choice):
    chat = messages(messages=[{"role": "user", "content": "x"}], tool_choice=choice,
                    tools=[{"name": "f", "description": "F.", "input_schema": {"type": "object"}}])
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                                "description": "F."}}]
    assert {k: chat[k] for k in chat_choice} == chat_choice


@pytest.mark.parametrize("body, param", [
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"mcp_servers": []}, "mcp_servers"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"system": [{"type": "image"}]}, "system.0.type"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools.0.type"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"tool_choice": {"type": "bogus"}}, "tool_choice"),
    ({"tool_choice": {"type": ["auto"]}}, "tool_choice"),
    ({"tool_choice": {"type": "auto", "name": "f"}}, "tool_choice"),
    ({"tool_choice": {"type": "none", "disable_parallel_tool_use": True}}, "tool_choice"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages.0.content.0.text"),
    ({"system": [{"type": "text", "text": 5}]}, "system.0.text"),
    ({"metadata": {"session": "s"}}, "metadata"),
    ({"n": 2}, "n"),
])
def test_unsupported_or_bad_messages_fields_are_a_400_naming_the_field(body, param):
    with pytest.raises(GatewayError) as caught:
        messages(**{"messages": [{"role": "user", "content": "x"}], **body})
    assert caught.value.status == 400 and caught.value.param == param
    assert caught.value.message.startswith(param)


# -- Messages: answers and errors -------------------------------------------------------------------

MREQ = MessagesRequest.model_validate({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "x"}]})


@pytest.mark.parametrize("finish, reason", [("stop", "end_turn"), ("length", "max_tokens"),
                                            ("tool_calls", "tool_use"), ("content_filter", "refusal")])
def test_an_answer_becomes_a_message_the_sdk_reads(finish, reason):
    message = Message.model_validate(messages_api.message_body(MREQ, completion("Four.", finish)))
    assert [(b.type, b.text) for b in message.content] == [("text", "Four.")]
    assert message.stop_reason == reason and (message.usage.input_tokens, message.usage.output_tokens) == (7, 3)
    assert (message.stop_details is not None) == (reason == "refusal")


def test_tool_calls_become_tool_use_blocks():
    message = Message.model_validate(messages_api.message_body(MREQ, completion(None, "tool_calls", [CALL])))
    (block,) = message.content
    assert (block.type, block.id, block.name, block.input) == ("tool_use", "call_1", "get_weather", {"city": "Oslo"})


def test_the_messages_stream_follows_anthropics_event_order_and_each_event_parses():
    events = events_of(MessagesStream(MREQ), [("text", "Hel"), ("text", "lo"),
                                              ("tool_call", 0, "call_1", "get_weather", '{"city"'),
                                              ("tool_call", 0, None, "", ': "Oslo"}'), ("finish", "tool_calls", USAGE)])
    parsed = [ANTHROPIC_EVENT.validate_python(e) for e in events]
    assert [e.type for e in parsed] == ["message_start", "content_block_start", "content_block_delta",
                                        "content_block_delta", "content_block_stop", "content_block_start",
                                        "content_block_delta", "content_block_delta", "content_block_stop",
                                        "message_delta", "message_stop"]
    assert [e.index for e in parsed if e.type == "content_block_start"] == [0, 1]
    assert parsed[-2].delta.stop_reason == "tool_use" and parsed[-2].usage.output_tokens == 3


def test_a_stream_without_content_still_has_one_text_block_and_a_refusal_stop():
    events = events_of(MessagesStream(MREQ), [("finish", "content_filter", None)])
    parsed = [ANTHROPIC_EVENT.validate_python(e) for e in events]
    assert [e.type for e in parsed] == ["message_start", "content_block_start", "content_block_stop",
                                        "message_delta", "message_stop"]
    assert parsed[-2].delta.stop_reason == "refusal"


@pytest.mark.parametrize("finish, details", [("content_filter", {"type": "refusal", "category": None,
                                                                 "explanation": None}), ("stop", None)])
def test_a_streamed_refusal_carries_the_same_stop_details_as_the_message_body(finish, details):
    refused = finish == "content_filter"
    events = events_of(MessagesStream(MREQ), [("text", "Sorry.", refused), ("finish", finish, USAGE)])
    (delta,) = [ANTHROPIC_EVENT.validate_python(e) for e in events if e["type"] == "message_delta"]
    body = messages_api.message_body(MREQ, completion("Sorry.", finish))
    assert body["stop_details"] == details
    got = delta.delta.stop_details
    assert (got.model_dump() if got is not None else None) == details


@pytest.mark.parametrize("status, code, kind", [
    (400, "invalid_value", "invalid_request_error"), (401, "invalid_api_key", "authentication_error"),
    (403, "insufficient_role", "permission_error"), (404, "model_not_found", "not_found_error"),
    (413, "request_too_large", "request_too_large"), (429, "rate_limited", "rate_limit_error"),
    (503, "overloaded", "overloaded_error"), (503, "ledger_unavailable", "api_error"), (502, None, "api_error"),
    (422, None, "invalid_request_error"),
])
def test_errors_take_anthropics_types_by_status(status, code, kind):
    assert messages_api.error_body(status, "No.", code) == {"type": "error", "error": {"type": kind, "message": "No."}}


# -- edges of the request and answer translations ---------------------------------------------------

def test_responses_sampling_and_parallel_calls_pass_through():
    chat = responses(input="x", top_p=0.9, parallel_tool_calls=False)
    assert (chat["top_p"], chat["parallel_tool_calls"]) == (0.9, False)


def test_a_function_call_as_the_first_item_is_its_own_assistant_turn():
    chat = responses(input=[{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                            {"type": "function_call_output", "call_id": "call_1", "output": "done"}])
    assert chat["messages"] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"}]


def test_a_function_call_output_part_of_another_type_is_a_400_naming_it():
    with pytest.raises(GatewayError) as caught:
        responses(input=[{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                         {"type": "function_call_output", "call_id": "call_1",
                          "output": [{"type": "refusal", "refusal": "no"}]}])
    assert caught.value.status == 400 and caught.value.param == "input.1.output.0.type"


def test_a_response_carries_its_creation_and_completion_times_and_item_ids():
    body = responses_api.response_body(REQ, completion("Four.", "tool_calls", [CALL]))
    assert body["created_at"] == 1700000000 and isinstance(body["completed_at"], int)
    message, call = body["output"]
    assert message["id"].startswith("msg_") and message["content"] == [
        {"type": "output_text", "text": "Four.", "annotations": [], "logprobs": []}]
    assert call["status"] == "completed"
    assert "completed_at" not in responses_api.response_body(REQ, completion("Once upon", "length"))


def test_a_response_has_a_message_item_unless_the_answer_is_only_tool_calls():
    only_calls = responses_api.response_body(REQ, completion(None, "tool_calls", [CALL]))
    assert [item["type"] for item in only_calls["output"]] == ["function_call"]
    empty = Response.model_validate(responses_api.response_body(REQ, completion(None)))
    assert [item.type for item in empty.output] == ["message"] and empty.output_text == ""


def test_messages_sampling_passes_through():
    chat = messages(messages=[{"role": "user", "content": "x"}], temperature=0.2, top_p=0.8)
    assert (chat["temperature"], chat["top_p"]) == (0.2, 0.8)


def test_a_system_string_stays_a_string():
    assert messages(system="Be brief.", messages=[{"role": "user", "content": "x"}])["messages"][0] == {
        "role": "system", "content": "Be brief."}


def test_turns_of_text_only_tool_results_only_or_nothing():
    chat = messages(messages=[
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
        {"role": "assistant", "content": []},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"city": "Zürich"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "Sunny, "}, {"type": "text", "text": "18 degrees"}]}]}])
    assert chat["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": '{"city": "Zürich"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny, 18 degrees"}]


def test_a_tool_result_block_of_another_type_is_a_400_naming_it():
    with pytest.raises(GatewayError) as caught:
        messages(messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}])
    assert caught.value.status == 400 and caught.value.param == "messages.0.content.0.content.0.type"


def test_a_message_keeps_text_beside_tool_use_and_names_calls_without_id_or_name():
    nameless = {"type": "function", "function": {"arguments": ""}}
    body = messages_api.message_body(MREQ, completion("Checking.", "tool_calls", [CALL, nameless]))
    assert body["stop_sequence"] is None and "stop_sequence" in body
    text, block, anonymous = body["content"]
    assert text == {"type": "text", "text": "Checking."} and block["id"] == "call_1"
    assert anonymous["id"].startswith("toolu_") and (anonymous["name"], anonymous["input"]) == ("", {})
    assert Message.model_validate(body).stop_reason == "tool_use"


# -- shared pieces (proxy.server.dialects.base) ---------------------------------------------------------

def test_a_named_event_is_compact_json_under_its_type():
    event = {"type": "response.output_text.delta", "delta": "café, 1: 2"}
    assert named_sse_event(event) == (
        'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"café, 1: 2"}\n\n'
    ).encode()


def test_a_bad_nested_field_is_an_invalid_value_400_in_openais_wording():
    with pytest.raises(GatewayError) as caught:
        responses(input="x", tools=[{"type": "function", "name": "f", "nameX": 1}])
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "invalid_value", "tools.0.nameX")
    assert error.message.startswith("Invalid value for 'tools.0.nameX': ")
    assert bad_field("p", "m").code == "invalid_value"


class _Pair(Strict):
    a: int


def test_a_nested_object_of_the_wrong_type_is_named_by_where_it_is():
    with pytest.raises(GatewayError) as caught:
        parse_field(_Pair, ["not", "an", "object"], "tools.3")
    assert caught.value.param == "tools.3" and caught.value.message.startswith("Invalid value for 'tools.3': ")
    with pytest.raises(GatewayError) as caught:
        parse_field(_Pair, {"a": "1"}, "tools.3")
    assert caught.value.param == "tools.3.a"
    assert parse_field(_Pair, {"a": 1}, "tools.3") == _Pair(a=1)


def test_a_tools_strict_flag_passes_to_the_function():
    chat = messages(messages=[{"role": "user", "content": "x"}],
                    tools=[{"name": "f", "input_schema": {"type": "object"}, "strict": True}])
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                                "strict": True}}]


def test_tool_call_arguments_that_are_not_a_json_object_become_an_empty_input():
    for arguments in ("[1, 2]", '"text"', "not json", ""):
        call = {**CALL, "function": {"name": "f", "arguments": arguments}}
        message = Message.model_validate(messages_api.message_body(MREQ, completion(None, "tool_calls", [call])))
        assert message.content[0].input == {}


# -- Responses: exact shapes -------------------------------------------------------------------------

def stable(value: Any, seen: dict[str, str] | None = None) -> Any:
    """``value`` with generated ids (``msg_…``, ``fc_…``, ``call_…``, ``toolu_…`` of 32 hex digits)
    numbered by first appearance and timestamps (``created_at``, ``completed_at``) checked and
    set to 0, so a whole event list can be compared exactly."""
    seen = {} if seen is None else seen
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in ("created_at", "completed_at"):
                assert isinstance(v, int) and (v == 1700000000 or abs(v - time.time()) < 60)  # completion() or now
                v = 0
            out[k] = stable(v, seen)
        return out
    if isinstance(value, list):
        return [stable(v, seen) for v in value]
    if isinstance(value, str) and re.fullmatch(r"(msg|fc|call|toolu)_[0-9a-f]{32}", value):
        prefix = value.split("_")[0]
        return seen.setdefault(value, f"{prefix}_{sum(s.startswith(prefix) for s in seen.values()) + 1}")
    return value


RESPONSE = {"id": "resp_1", "object": "response", "created_at": 0, "status": "in_progress", "background": False,
            "error": None, "incomplete_details": None, "instructions": None, "max_output_tokens": None, "model": "m",
            "output": [], "parallel_tool_calls": True, "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None}, "store": False, "temperature": None,
            "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": None,
            "truncation": "disabled", "usage": None, "user": None, "metadata": {}}
TEXT = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
RUSAGE = {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
          "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10}


def test_the_responses_stream_events_are_exactly_openais():
    events = stable(events_of(ResponsesStream(REQ, "resp_1"), [
        ("text", "Hel"), ("text", "lo"), ("tool_call", 0, "call_w", "get_", '{"ci'),
        ("tool_call", 0, None, "weather", 'ty": "Oslo"}'), ("tool_call", 1, None, "f", ""),
        ("finish", "tool_calls", USAGE)]))
    ids = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
               "content": [{**TEXT, "text": "Hello"}]}
    call = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_w", "name": "get_weather",
            "arguments": '{"city": "Oslo"}'}
    other = {"id": "fc_2", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "f",
             "arguments": ""}
    assert events == [
        {"type": "response.created", "sequence_number": 0, "response": RESPONSE},
        {"type": "response.in_progress", "sequence_number": 1, "response": RESPONSE},
        {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
         "item": {**message, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "sequence_number": 3, **ids, "part": TEXT},
        {"type": "response.output_text.delta", "sequence_number": 4, **ids, "delta": "Hel", "logprobs": []},
        {"type": "response.output_text.delta", "sequence_number": 5, **ids, "delta": "lo", "logprobs": []},
        {"type": "response.output_text.done", "sequence_number": 6, **ids, "text": "Hello", "logprobs": []},
        {"type": "response.content_part.done", "sequence_number": 7, **ids, "part": {**TEXT, "text": "Hello"}},
        {"type": "response.output_item.done", "sequence_number": 8, "output_index": 0, "item": message},
        {"type": "response.output_item.added", "sequence_number": 9, "output_index": 1,
         "item": {**call, "status": "in_progress", "name": "get_", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "sequence_number": 10, "item_id": "fc_1",
         "output_index": 1, "delta": '{"ci'},
        {"type": "response.function_call_arguments.delta", "sequence_number": 11, "item_id": "fc_1",
         "output_index": 1, "delta": 'ty": "Oslo"}'},
        {"type": "response.function_call_arguments.done", "sequence_number": 12, "item_id": "fc_1",
         "output_index": 1, "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        {"type": "response.output_item.done", "sequence_number": 13, "output_index": 1, "item": call},
        {"type": "response.output_item.added", "sequence_number": 14, "output_index": 2,
         "item": {**other, "status": "in_progress"}},
        {"type": "response.function_call_arguments.done", "sequence_number": 15, "item_id": "fc_2",
         "output_index": 2, "name": "f", "arguments": ""},
        {"type": "response.output_item.done", "sequence_number": 16, "output_index": 2, "item": other},
        {"type": "response.completed", "sequence_number": 17, "response": {
            **RESPONSE, "status": "completed", "output": [message, call, other], "usage": RUSAGE,
            "completed_at": 0}},
    ]


def test_a_streamed_refusal_after_text_is_its_own_item_and_the_response_is_incomplete():
    events = stable(events_of(ResponsesStream(REQ, "resp_1"), [
        ("text", "Sure. "), ("text", "Sorry", True), ("text", ".", True), ("finish", "content_filter", None)]))
    text = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{**TEXT, "text": "Sure. "}]}
    refusal = {"id": "msg_2", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "refusal", "refusal": "Sorry."}]}
    ids = {"item_id": "msg_2", "output_index": 1, "content_index": 0}
    assert events[8:] == [
        {"type": "response.output_item.added", "sequence_number": 8, "output_index": 1,
         "item": {**refusal, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "sequence_number": 9, **ids, "part": {"type": "refusal",
                                                                                      "refusal": ""}},
        {"type": "response.refusal.delta", "sequence_number": 10, **ids, "delta": "Sorry"},
        {"type": "response.refusal.delta", "sequence_number": 11, **ids, "delta": "."},
        {"type": "response.refusal.done", "sequence_number": 12, **ids, "refusal": "Sorry."},
        {"type": "response.content_part.done", "sequence_number": 13, **ids,
         "part": {"type": "refusal", "refusal": "Sorry."}},
        {"type": "response.output_item.done", "sequence_number": 14, "output_index": 1, "item": refusal},
        {"type": "response.incomplete", "sequence_number": 15, "response": {
            **RESPONSE, "status": "incomplete", "incomplete_details": {"reason": "content_filter"},
            "output": [text, refusal], "usage": {**RUSAGE, "input_tokens": 0, "output_tokens": 0,
                                                 "total_tokens": 0}}},
    ]


def test_a_failed_responses_stream_is_exactly_an_error_and_response_failed():
    events = stable(events_of(ResponsesStream(REQ, "resp_1"), [("fail", {"error": {
        "message": "The trust ledger is unavailable.", "code": "ledger_unavailable", "param": None}})]))
    assert events[2:] == [
        {"type": "error", "sequence_number": 2, "code": "ledger_unavailable",
         "message": "The trust ledger is unavailable.", "param": None},
        {"type": "response.failed", "sequence_number": 3, "response": {
            **RESPONSE, "status": "failed", "error": {"code": "server_error",
                                                      "message": "The trust ledger is unavailable."}}},
    ]
    blank = events_of(ResponsesStream(REQ, "resp_1"), [("text", "x"), ("fail", {})])
    assert blank[-2]["message"] == "The response failed." and blank[-2]["code"] is None
    assert blank[-1]["response"]["output"][0]["status"] == "completed"  # the open item was closed


def test_a_response_echoes_every_setting_of_the_request():
    req = ResponsesRequest.model_validate({
        "model": "m", "input": "x", "instructions": "Be brief.", "max_output_tokens": 50,
        "parallel_tool_calls": False, "reasoning": {"effort": "low"}, "temperature": 0.5, "top_p": 0.9,
        "text": {"format": {"type": "json_object"}}, "tool_choice": "required", "user": "u1",
        "tools": [{"type": "function", "name": "f"}], "metadata": {"k": "v"}})
    body = stable(responses_api.response_body(req, completion("Hi.", "stop"), "resp_1"))
    assert body == {**RESPONSE, "status": "completed", "instructions": "Be brief.", "max_output_tokens": 50,
                    "parallel_tool_calls": False, "reasoning": {"effort": "low", "summary": None},
                    "temperature": 0.5, "top_p": 0.9, "text": {"format": {"type": "json_object"}},
                    "tool_choice": "required", "tools": [{"type": "function", "name": "f"}], "user": "u1",
                    "metadata": {"k": "v"}, "usage": RUSAGE, "completed_at": 0,
                    "output": [{"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                                "content": [{**TEXT, "text": "Hi."}]}]}


def test_usage_carries_cached_and_reasoning_tokens_and_sums_a_missing_total():
    assert responses_api.usage({"prompt_tokens": 7, "completion_tokens": 3,
                                "prompt_tokens_details": {"cached_tokens": 4},
                                "completion_tokens_details": {"reasoning_tokens": 2}}) == {
        "input_tokens": 7, "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 10}
    assert responses_api.usage(None)["total_tokens"] == 0
    assert responses_api.usage({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 5})["total_tokens"] == 5


# -- Messages: exact shapes --------------------------------------------------------------------------

def test_the_messages_stream_events_are_exactly_anthropics():
    events = stable(events_of(MessagesStream(MREQ, "msg_1"), [
        ("text", "Hel"), ("text", ""), ("text", "lo"), ("tool_call", 0, "toolu_w", "get_weather", '{"ci'),
        ("tool_call", 0, None, "", 'ty": "Oslo"}'), ("tool_call", 1, None, "f", ""), ("text", "Done."),
        ("finish", "tool_calls", USAGE)]))
    text = {"type": "text", "text": ""}
    assert events == [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                              "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": {"input_tokens": 0, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": text},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_w",
                                                                      "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"ci'}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": 'ty": "Oslo"}'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1",
                                                                      "name": "f", "input": {}}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": text},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "Done."}},
        {"type": "content_block_stop", "index": 3},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 3, "input_tokens": 7}},
        {"type": "message_stop"},
    ]
    assert MessagesStream(MREQ).message["id"].startswith("msg_")


@pytest.mark.parametrize("error, body", [
    ({"error": {"message": "Busy.", "code": "overloaded"}}, {"type": "overloaded_error", "message": "Busy."}),
    ({"error": {"message": "No ledger.", "code": "ledger_unavailable"}}, {"type": "api_error",
                                                                           "message": "No ledger."}),
    ({"error": {"message": "Broke.", "code": "upstream_error"}}, {"type": "api_error", "message": "Broke."}),
    ({}, {"type": "api_error", "message": "The message failed."}),
])
def test_a_failed_messages_stream_is_one_error_event_in_anthropics_shape(error, body):
    stream = MessagesStream(MREQ)
    stream.start()
    assert stream.fail(error) == [{"type": "error", "error": body}]
    assert messages_api.error_body(503, "x") == {"type": "error", "error": {"type": "api_error", "message": "x"}}


def test_a_custom_tool_translates_and_a_refused_field_is_an_unsupported_parameter():
    chat = messages(messages=[{"role": "user", "content": "x"}],
                    tools=[{"type": "custom", "name": "f", "input_schema": {"type": "object"}}])
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(GatewayError) as caught:
        messages(messages=[{"role": "user", "content": "x"}], thinking={"type": "enabled", "budget_tokens": 1024})
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", "thinking")


def test_stop_reason_and_usage_of_a_missing_or_unknown_value():
    assert messages_api.stop_reason(None) == "end_turn" and messages_api.stop_reason("weird") == "end_turn"
    assert messages_api.usage(None) == {"input_tokens": 0, "output_tokens": 0}
    assert messages_api.usage({"prompt_tokens": None}) == {"input_tokens": 0, "output_tokens": 0}


# -- Responses: request fields one by one ----------------------------------------------------------------

@pytest.mark.parametrize("text, chat", [
    (None, {}), ({}, {}), ({"verbosity": None, "format": None}, {}),
    ({"verbosity": "low"}, {"verbosity": "low"}),
    ({"format": {"type": "text"}}, {"response_format": {"type": "text"}}),
    ({"format": {"type": "json_object"}}, {"response_format": {"type": "json_object"}}),
    ({"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "description": "S.",
                 "strict": True}},
     {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"},
                                                                 "description": "S.", "strict": True}}}),
])
def test_the_text_setting_becomes_the_response_format(text, chat):
    body = responses(input="x", text=text)
    assert {k: body[k] for k in ("response_format", "verbosity") if k in body} == chat


@pytest.mark.parametrize("text, param, code", [
    ({"format": {"type": "text", "name": "s"}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_object", "schema": {}}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_schema", "name": "s"}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_schema", "schema": {}}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_schema", "name": 5, "schema": {}}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_schema", "name": "s", "schema": []}}, "text.format", "invalid_value"),
    ({"format": {"type": "json_schema", "name": "s", "schema": {}, "extra": 1}}, "text.format", "invalid_value"),
    ({"format": "text"}, "text.format", "invalid_value"),
    ({"format": {"type": "text"}, "b": 1, "a": 2}, "text.a", "unsupported_parameter"),
])
def test_a_text_setting_that_is_not_translated_is_a_400_naming_it(text, param, code):
    with pytest.raises(GatewayError) as caught:
        responses(input="x", text=text)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)
    assert caught.value.message.startswith(f"'{param}' is not supported" if code == "unsupported_parameter"
                                           else "Invalid value for 'text.format': expected ")


@pytest.mark.parametrize("choice, chat", [
    ("none", "none"), ("auto", "auto"), ("required", "required"),
    ({"type": "function", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
])
def test_a_tool_choice_translates(choice, chat):
    assert responses(input="x", tool_choice=choice)["tool_choice"] == chat
    assert "tool_choice" not in responses(input="x")


@pytest.mark.parametrize("choice", ["any", {"type": "function"}, {"type": "function", "name": 5},
                                    {"type": "function", "name": "f", "strict": True},
                                    {"type": "custom", "name": "f"}, {"type": "allowed_tools"}])
def test_a_tool_choice_that_is_not_served_is_a_400(choice):
    with pytest.raises(GatewayError) as caught:
        responses(input="x", tool_choice=choice)
    assert (caught.value.param, caught.value.code) == ("tool_choice", "unsupported_parameter")
    assert caught.value.message.startswith("'tool_choice' is not supported by this gateway's Responses API: only ")


def test_a_function_tool_keeps_each_field_it_has():
    chat = responses(input="x", tools=[{"type": "function", "name": "f", "description": "F."},
                                       {"type": "function", "name": "g", "parameters": {"type": "object"},
                                        "strict": False}])
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "description": "F."}},
                             {"type": "function", "function": {"name": "g", "parameters": {"type": "object"},
                                                               "strict": False}}]
    assert "tools" not in responses(input="x")


def test_content_parts_become_chat_parts_by_role():
    chat = responses(input=[
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello", "annotations": []},
                                          {"type": "refusal", "refusal": "No."}]},
        {"role": "user", "content": "Again"}])
    assert chat["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}, {"type": "refusal", "refusal": "No."}]},
        {"role": "user", "content": "Again"}]


@pytest.mark.parametrize("role, part", [
    ("user", {"type": "refusal", "refusal": "No."}), ("user", {"type": "output_text", "text": "x"}),
    ("assistant", {"type": "input_image", "image_url": "https://example.com/a.png"}),
    ("user", {"text": "x"}), ("user", {"type": 5}),
])
def test_a_content_part_not_translated_for_its_role_is_a_400_naming_it(role, part):
    with pytest.raises(GatewayError) as caught:
        responses(input=[{"role": role, "content": [{"type": "input_text", "text": "a"}, part]}])
    assert (caught.value.param, caught.value.code) == ("input.0.content.1.type", "unsupported_parameter")
    assert f"in a {role} message is not translated" in caught.value.message


@pytest.mark.parametrize("body, param, code", [
    ({"store": True}, "store", "unsupported_parameter"),
    ({"background": True}, "background", "unsupported_parameter"),
    ({"truncation": "auto"}, "truncation", "unsupported_parameter"),
    ({"stream_options": {"include_obfuscation": True}}, "stream_options", "unsupported_parameter"),
    ({"reasoning": {"summary": "auto"}}, "reasoning", "unsupported_parameter"),
    ({"reasoning": {"generate_summary": "concise"}}, "reasoning", "unsupported_parameter"),
    ({"reasoning": {"effort": "low", "budget": 5}}, "reasoning", "unsupported_parameter"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value"),
    *[({name: "x"}, name, "unsupported_parameter") for name in responses_api.UNSUPPORTED],
])
def test_each_field_the_gateway_cannot_honour_is_a_400_naming_it(body, param, code):
    with pytest.raises(GatewayError) as caught:
        responses(input="x", **body)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_the_settings_the_gateway_honours_as_sent_are_accepted():
    chat = responses(input="x", store=False, background=False, truncation="disabled",
                     stream_options={"include_obfuscation": False}, reasoning={"effort": "high", "summary": None,
                                                                                 "generate_summary": None},
                     previous_response_id=None)
    assert chat["reasoning_effort"] == "high" and "previous_response_id" not in chat


def test_a_tool_call_without_a_name_yet_gets_it_from_a_later_delta():
    stream = ResponsesStream(REQ, "resp_1")
    added = stream.tool_call(0, "call_w", "", "")
    assert added[0]["item"]["name"] == ""
    stream.tool_call(0, None, "f", "{}")
    assert stream.finish("tool_calls", None)[-1]["response"]["output"][0]["name"] == "f"
    body = responses_api.response_body(REQ, completion(None, "tool_calls", [{"id": "c", "type": "function",
                                                                           "function": {"arguments": "{}"}}]))
    assert body["output"][0]["name"] == ""


def test_a_response_id_is_a_fresh_resp_id_and_a_failed_stream_names_the_bad_param():
    first, second = ResponsesStream(REQ).response["id"], responses_api.response_body(REQ, completion("x"))["id"]
    assert re.fullmatch(r"resp_[0-9a-f]{32}", first) and re.fullmatch(r"resp_[0-9a-f]{32}", second)
    assert first != second
    events = ResponsesStream(REQ).fail({"error": {"message": "Bad.", "code": "invalid_value", "param": "tools"}})
    assert (events[0]["type"], events[0]["param"], events[0]["code"]) == ("error", "tools", "invalid_value")
