"""The pure translations of the Responses and Messages APIs (proxy.server.dialects.responses,
proxy.server.dialects.messages): request bodies to chat-completion bodies (valid for the chat wire
model), chat answers back to native bodies and event streams, checked against the official SDKs'
own types (``openai.types.responses``, ``anthropic.types``) so every shape is one a client parses.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter, ValidationError

from proxy.server.dialects import messages as messages_api
from proxy.server.dialects import responses as responses_api
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
