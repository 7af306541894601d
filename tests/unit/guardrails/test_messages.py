"""Every text a client writes in a chat message, read and rewritten in one order, and
the wire schema that rejects message keys outside OpenAI's chat schema.

Pure functions over plain dicts: the masking rewrite here is a fake (upper-casing), the engine
tests (test_engine.py) and the e2e bypass tests (tests/e2e/test_bypass.py) use real masking.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from proxy.guardrails.messages import (
    TextPiece,
    asked_questions,
    definition_pieces,
    definition_texts,
    is_question,
    judged_texts,
    last_user_text,
    map_definitions,
    map_text,
    map_tool_calls,
    message_text,
    screened_text,
    text_parts,
    text_pieces,
    unreadable_parts,
)
from proxy.server.flow.wire import ChatCompletionRequest
from proxy.server.http.requests import validation_error

ASSISTANT = {
    "role": "assistant", "name": "helper", "refusal": "no way",
    "content": [{"type": "text", "text": "calling"}, {"type": "refusal", "refusal": "not that"}],
    "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "lookup", "arguments": '{"email": "ada@example.org", "tags": ["vip", 7], "ok": true}'}},
        {"id": "c2", "type": "custom", "custom": {"name": "grep", "input": "Ada's file"}},
    ],
    "function_call": {"name": "legacy", "arguments": "not json at all"},
}


def test_pieces_of_an_assistant_turn_in_order_with_their_fields():
    assert text_pieces(ASSISTANT) == [
        TextPiece("content.0.text", "calling"), TextPiece("content.1.refusal", "not that"),
        TextPiece("refusal", "no way"), TextPiece("name", "helper"),
        TextPiece("tool_calls.0.function.name", "lookup"),
        *[TextPiece("tool_calls.0.function.arguments", t) for t in ("email", "ada@example.org", "tags", "vip", "7",
                                                                     "ok")],
        TextPiece("tool_calls.1.custom.name", "grep"), TextPiece("tool_calls.1.custom.input", "Ada's file"),
        TextPiece("function_call.name", "legacy"), TextPiece("function_call.arguments", "not json at all"),
    ]


@pytest.mark.parametrize("message, texts", [
    ({"role": "user", "content": "hello", "name": "ada"}, ["hello", "ada"]),
    ({"role": "tool", "tool_call_id": "c1", "content": "result"}, ["result"]),
    ({"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                  {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                                  {"type": "file", "file": {"file_id": "f1", "filename": "ada-cv.pdf"}}]},
     ["see", "ada-cv.pdf"]),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]},
     ["https://example.com/a.png"]),  # a link is text the provider reads (fetches)
    ({"role": "assistant", "content": None, "tool_calls": []}, []),
    ({"role": "assistant", "content": ""}, []),
    ({"role": "user", "content": "plain"}, ["plain"]),  # the common turn: read without a walk
    ({"content": "no role"}, ["no role"]),
    ({"role": "user", "content": "hi", "refusal": "x"}, ["hi", "x"]),  # any other key: walked
])
def test_pieces_of_each_role(message, texts):
    assert text_parts(message) == texts


def test_map_text_rewrites_every_piece_and_keeps_arguments_valid_json():
    out = map_text(ASSISTANT, str.upper)
    assert out["content"] == [{"type": "text", "text": "CALLING"}, {"type": "refusal", "refusal": "NOT THAT"}]
    assert (out["refusal"], out["name"]) == ("NO WAY", "HELPER")
    assert out["tool_calls"][0]["function"]["name"] == "LOOKUP"
    assert json.loads(out["tool_calls"][0]["function"]["arguments"]) == {
        "EMAIL": "ADA@EXAMPLE.ORG", "TAGS": ["VIP", 7], "OK": True}
    assert out["tool_calls"][1]["custom"] == {"name": "GREP", "input": "ADA'S FILE"}
    assert out["function_call"] == {"name": "LEGACY", "arguments": "NOT JSON AT ALL"}
    assert out["tool_calls"][0]["id"] == "c1" and ASSISTANT["refusal"] == "no way"  # ids kept, input untouched
    assert text_pieces(out)[5:7] == [TextPiece("tool_calls.0.function.arguments", "EMAIL"),
                                     TextPiece("tool_calls.0.function.arguments", "ADA@EXAMPLE.ORG")]


def test_a_rewrite_with_quotes_still_yields_valid_json():
    message = {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"who": "<PERSON_1>"}'}}]}
    out = map_text(message, lambda t: t.replace("<PERSON_1>", 'Ada "the Countess" Lovelace\n'))
    assert json.loads(out["tool_calls"][0]["function"]["arguments"]) == {"who": 'Ada "the Countess" Lovelace\n'}


def test_unchanged_arguments_stay_byte_identical():
    arguments = '{ "b":1.50,  "a" : "\\u00e9t\\u00e9" }'
    message = {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}
    assert map_text(message, lambda t: t)["tool_calls"][0]["function"]["arguments"] == arguments


def test_a_number_the_rewrite_changes_becomes_a_string():
    message = {"role": "assistant", "function_call": {"name": "call", "arguments": '{"phone": 2125550187, "n": 2}'}}
    out = map_text(message, lambda t: "<PHONE_NUMBER_1>" if t == "2125550187" else t)
    assert json.loads(out["function_call"]["arguments"]) == {"phone": "<PHONE_NUMBER_1>", "n": 2}


def test_map_tool_calls_restores_inside_an_answer():
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"to": "<E_1>"}'}}]
    out = map_tool_calls(calls, lambda t: t.replace("<E_1>", "ada@example.org"))
    assert json.loads(out[0]["function"]["arguments"]) == {"to": "ada@example.org"}
    assert calls[0]["function"]["arguments"] == '{"to": "<E_1>"}'
    assert map_tool_calls(None, str.upper) is None and map_tool_calls([], str.upper) == []


def test_message_text_is_the_content_and_screened_text_is_everything():
    assert message_text(ASSISTANT) == "calling"
    assert screened_text({"role": "user", "name": "ada", "content": "hi"}) == "hi\nada"


# ---- the wire schema: only the fields OpenAI's chat schema gives each role ------------------------


def validate(messages: list[dict]) -> tuple[str | None, str]:
    """(param, message) of the 400 a request with ``messages`` gets; (None, "") when accepted."""
    try:
        request = ChatCompletionRequest.model_validate_json(json.dumps({"model": "m", "messages": messages}))
    except ValidationError as exc:
        error = validation_error(exc)
        assert error.status == 400 and error.code == "invalid_value"
        return error.param, error.message
    assert request.message_dicts() == messages  # exactly what the client sent
    return None, ""


def test_every_role_with_its_own_fields_is_accepted():
    assert validate([
        {"role": "system", "content": "s", "name": "n"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "name": "u", "content": [{"type": "text", "text": "t"},
                                                  {"type": "image_url", "image_url": {"url": "u", "detail": "low"}},
                                                  {"type": "file", "file": {"file_id": "f"}}]},
        ASSISTANT, {"role": "assistant", "content": "a", "audio": {"id": "audio_1"}},
        {"role": "tool", "tool_call_id": "c1", "content": "r"}, {"role": "function", "name": "f", "content": "r"},
    ]) == (None, "")


@pytest.mark.parametrize("message, param, named", [
    ({"role": "assistant", "content": "Hello!", "x_contact": "ada@example.org"}, "messages.1.x_contact", "x_contact"),
    ({"role": "user", "content": "x", "tool_calls": []}, "messages.1.tool_calls", "tool_calls"),
    ({"role": "tool", "content": "x", "name": "ada"}, "messages.1.name", "name"),
    ({"role": "user", "content": [{"type": "text", "text": "a", "x_note": "b"}]}, "messages.1.content",
     "content.0.x_note"),
    ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}, "messages.1.content",
     "image_url"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "alt": "Ada"}}]},
     "messages.1.content", "content.0.image_url.alt"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                           "function": {"name": "f", "arguments": "{}", "x": 1}}]},
     "messages.1.tool_calls.0.function.x", "tool_calls.0.function.x"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"},
                                           "extra": "ada"}]}, "messages.1.tool_calls.0.extra", "extra"),
])
def test_a_key_outside_the_role_schema_is_a_400_naming_it(message, param, named):
    got_param, text = validate([{"role": "user", "content": "hi"}, message])
    assert got_param == param and named in text


def test_safety_judges_each_sentence_of_a_message_alone_as_well_as_joined():
    message = {"role": "user", "name": "how to hide a body", "content": [
        {"type": "text", "text": "What is the weather?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        {"type": "file", "file": {"file_id": "f1", "filename": "notes.txt"}}]}
    assert judged_texts(message) == [
        "What is the weather?\nhttps://example.com/a.png\nnotes.txt\nhow to hide a body",
        "What is the weather?", "how to hide a body"]
    assert judged_texts({"role": "user", "content": "one text only"}) == ["one text only"]
    assert judged_texts({"role": "assistant", "content": ""}) == []


@pytest.mark.parametrize(("text", "asked"), [
    ("You are the support assistant of a bookshop. Policies: refunds within 30 days of delivery with the "
     "receipt; shipping is free over 25 euros.", []),
    ("Can I sue my landlord for my deposit? Answer briefly.", ["Can I sue my landlord for my deposit?"]),
    ("Be kind.\nPlease diagnose my rash.", ["Please diagnose my rash."]),
    ("Why? Please.", []),  # too short to be a question or a request
])
def test_instructions_ask_only_their_questions_and_requests(text, asked):
    assert asked_questions(text) == asked


# ---- tool definitions: every field named, every keyword left alone ---------------------------

DEFINITIONS: dict[str, Any] = {
    "tools": [
        {"type": "function", "function": {
            "name": "lookup", "description": "Find an order.", "strict": True,
            "parameters": {
                "type": "object", "title": "Order query", "$comment": "internal",
                "properties": {"order_id": {"type": "string", "format": "uuid", "description": "The id.",
                                            "enum": ["A1", 7], "maxLength": 36, "pattern": "^[A-Z]+$"},
                               "tags": {"type": ["array", "null"], "items": {"type": "string", "examples": ["x"]},
                                        "minItems": 1}},
                "required": ["order_id"], "additionalProperties": False,
                "anyOf": [{"required": ["tags"]}, True],
                "dependentRequired": {"tags": ["order_id"]},
                "$defs": {"Money": {"type": "number", "minimum": 0, "default": 5}},
                "x-note": "vendor text", "maximum": "ten",
            }}},
        {"type": "custom", "custom": {"name": "sql", "description": "Run SQL.",
                                       "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: WORD"}}}},
        {"type": "mystery", "extra": "free text"},
    ],
    "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "lookup"}}, "auto"]}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "description": "An answer.", "strict": False,
                                                                 "schema": {"type": "object", "properties": {"text": {"type": "string"}}}}},
    "user": "user-42",
    "stop": ["END", "STOP"],
    "extra_body": {"seed_tag": "abc", "weights": [1, 2.5]},
    "other": {"k": "v"},
}


def test_definition_pieces_name_each_place_and_skip_only_keywords():
    """Every text of tools, tool_choice, response_format, user, stop, passed-through and unknown fields, in
    rewrite order, with the field it sits in (a client's own keys never name a field); schema keywords,
    the known ``type``/``syntax``/``mode`` names and booleans are not text."""
    assert [(p.field, p.text) for p in definition_pieces(DEFINITIONS)] == [   ('tools.0.function.name', 'lookup'),
        ('tools.0.function.description', 'Find an order.'),
        ('tools.0.function.parameters', 'Order query'),
        ('tools.0.function.parameters', 'internal'),
        ('tools.0.function.parameters', 'order_id'),
        ('tools.0.function.parameters', 'The id.'),
        ('tools.0.function.parameters', 'A1'),
        ('tools.0.function.parameters', '7'),
        ('tools.0.function.parameters', '^[A-Z]+$'),
        ('tools.0.function.parameters', 'tags'),
        ('tools.0.function.parameters', 'x'),
        ('tools.0.function.parameters', 'order_id'),
        ('tools.0.function.parameters', 'tags'),
        ('tools.0.function.parameters', 'tags'),
        ('tools.0.function.parameters', 'order_id'),
        ('tools.0.function.parameters', 'Money'),
        ('tools.0.function.parameters', '5'),
        ('tools.0.function.parameters', 'x-note'),
        ('tools.0.function.parameters', 'vendor text'),
        ('tools.0.function.parameters', 'ten'),
        ('tools.1.custom.name', 'sql'),
        ('tools.1.custom.description', 'Run SQL.'),
        ('tools.1.custom.format.grammar.definition', 'start: WORD'),
        ('tools.2', 'mystery'),
        ('tools.2', 'type'),
        ('tools.2', 'free text'),
        ('tools.2', 'extra'),
        ('tool_choice.allowed_tools.tools.0.function.name', 'lookup'),
        ('response_format.json_schema.name', 'answer'),
        ('response_format.json_schema.description', 'An answer.'),
        ('response_format.json_schema.schema', 'text'),
        ('user', 'user-42'),
        ('stop', 'END'),
        ('stop', 'STOP'),
        ('extra_body.seed_tag', 'abc'),
        ('extra_body.weights', '1'),
        ('extra_body.weights', '2.5'),
        ('other', 'k'),
        ('other', 'v')]
    before = copy.deepcopy(DEFINITIONS)
    definition_pieces(DEFINITIONS)  # read without a copy: the walk must leave the request as it was
    assert DEFINITIONS == before


def test_map_definitions_rewrites_exactly_the_pieces_and_keeps_the_structure():
    before = copy.deepcopy(DEFINITIONS)
    assert map_definitions(DEFINITIONS, lambda text: f"<{text}>") == {   'tools': [   {   'type': 'function',
                         'function': {   'name': '<lookup>',
                                         'description': '<Find an order.>',
                                         'strict': True,
                                         'parameters': {   'type': 'object',
                                                           'title': '<Order query>',
                                                           '$comment': '<internal>',
                                                           'properties': {   '<order_id>': {   'type': 'string',
                                                                                               'format': 'uuid',
                                                                                               'description': '<The '
                                                                                                              'id.>',
                                                                                               'enum': [   '<A1>',
                                                                                                           '<7>'],
                                                                                               'maxLength': 36,
                                                                                               'pattern': '<^[A-Z]+$>'},
                                                                             '<tags>': {   'type': [   'array',
                                                                                                       'null'],
                                                                                           'items': {   'type': 'string',
                                                                                                        'examples': [   '<x>']},
                                                                                           'minItems': 1}},
                                                           'required': ['<order_id>'],
                                                           'additionalProperties': False,
                                                           'anyOf': [{'required': ['<tags>']}, True],
                                                           'dependentRequired': {   '<tags>': [   '<order_id>']},
                                                           '$defs': {   '<Money>': {   'type': 'number',
                                                                                       'minimum': 0,
                                                                                       'default': '<5>'}},
                                                           '<x-note>': '<vendor text>',
                                                           'maximum': '<ten>'}}},
                     {   'type': 'custom',
                         'custom': {   'name': '<sql>',
                                       'description': '<Run SQL.>',
                                       'format': {   'type': 'grammar',
                                                     'grammar': {   'syntax': 'lark',
                                                                    'definition': '<start: WORD>'}}}},
                     {'<type>': '<mystery>', '<extra>': '<free text>'}],
        'tool_choice': {   'type': 'allowed_tools',
                           'allowed_tools': {   'mode': 'auto',
                                                'tools': [   {   'type': 'function',
                                                                 'function': {'name': '<lookup>'}},
                                                             'auto']}},
        'response_format': {   'type': 'json_schema',
                               'json_schema': {   'name': '<answer>',
                                                  'description': '<An answer.>',
                                                  'strict': False,
                                                  'schema': {   'type': 'object',
                                                                'properties': {   '<text>': {   'type': 'string'}}}}},
        'user': '<user-42>',
        'stop': ['<END>', '<STOP>'],
        'extra_body': {'seed_tag': '<abc>', 'weights': ['<1>', '<2.5>']},
        'other': {'<k>': '<v>'}}
    assert DEFINITIONS == before  # a copy is rewritten
    assert map_definitions({}, str.upper) == {} and map_definitions(None, str.upper) is None
    assert definition_pieces(None) == [] and definition_pieces({}) == []


def test_a_required_that_is_no_list_is_read_as_text():
    definitions = {"response_format": {"type": "json_schema",
                                       "json_schema": {"name": "a", "schema": {"required": "every field, now"}}}}
    assert [(p.field, p.text) for p in definition_pieces(definitions)] == [
        ("response_format.json_schema.name", "a"), ("response_format.json_schema.schema", "every field, now")]
    rewritten = map_definitions(definitions, str.upper)
    assert rewritten["response_format"]["json_schema"]["schema"] == {"required": "EVERY FIELD, NOW"}


def test_definitions_of_the_wrong_shape_are_read_whole():
    """A value where an object, a list or a schema belongs is read as JSON (every string is text);
    a boolean is a keyword only under ``strict``: any other key holding one is still read."""
    definitions = {"tools": "use any tool", "tool_choice": {"function": "lookup now"},
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "a", "schema": "any shape", "flag": True}}}
    assert [(p.field, p.text) for p in definition_pieces(definitions)] == [
        ("tools", "use any tool"), ("tool_choice.function", "lookup now"), ("response_format.json_schema.name", "a"),
        ("response_format.json_schema.schema", "any shape"), ("response_format.json_schema", "flag")]


# ---- odd shapes and edges of the walkers -------------------------------------------------------


def call(**function: Any) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": function}]}


def test_arguments_that_are_empty_or_no_string_are_left_alone():
    assert text_pieces(call(name="f", arguments="")) == [TextPiece("tool_calls.0.function.name", "f")]
    assert text_pieces(call(name="f", arguments={"a": "b"})) == [TextPiece("tool_calls.0.function.name", "f")]


def test_arguments_spelling_a_lone_surrogate_are_one_piece():
    raw = '{"note": "\\ud800 broken"}'
    assert text_pieces(call(name="f", arguments=raw))[1:] == [TextPiece("tool_calls.0.function.arguments", raw)]


def test_rewritten_arguments_keep_their_characters_unescaped():
    masked = map_text(call(name="f", arguments='{"note": "für Ada"}'), lambda t: t.replace("Ada", "<PERSON_1>"))
    assert masked["tool_calls"][0]["function"]["arguments"] == '{"note": "für <PERSON_1>"}'


def test_a_custom_tool_calls_input_is_one_text_even_when_it_looks_like_json():
    message = {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom",
                                                   "custom": {"name": "g", "input": '{"a": "b"}'}}]}
    assert text_pieces(message) == [TextPiece("tool_calls.0.custom.name", "g"),
                                    TextPiece("tool_calls.0.custom.input", '{"a": "b"}')]


def test_file_names_and_image_links_are_read_and_rewritten_in_place():
    message = {"role": "user", "content": [
        "stray", {"type": "file", "file": {"file_id": "file-1"}}, {"type": "file", "file": {"filename": "ada.txt"}},
        {"type": "image_url", "image_url": {"url": "https://example.org/ada.png"}}]}
    assert text_pieces(message) == [TextPiece("content.2.file.filename", "ada.txt"),
                                    TextPiece("content.3.image_url.url", "https://example.org/ada.png")]
    masked = map_text(message, str.upper)
    assert masked["content"][2] == {"type": "file", "file": {"filename": "ADA.TXT"}}
    assert masked["content"][3] == {"type": "image_url", "image_url": {"url": "HTTPS://EXAMPLE.ORG/ADA.PNG"}}
    assert masked["content"][:2] == message["content"][:2]


def test_a_file_sent_by_id_is_unreadable_and_a_stray_part_is_not():
    message = {"role": "user", "content": ["stray", {"type": "file", "file": {"file_id": "file-1"}},
                                          {"type": "file", "file": {"filename": "notes.txt"}}]}
    assert unreadable_parts(message) == ["file"]


def test_message_text_joins_text_parts_by_lines_and_is_empty_without_content():
    parts = {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text"},
                                         {"type": "text", "text": "two"}]}
    assert message_text(parts) == "one\n\ntwo"
    assert message_text(call(name="f", arguments="{}")) == ""


def test_the_last_user_text_is_the_requests_intent():
    messages = [{"role": "user", "content": "first"}, {"role": "user", "content": [{"type": "text", "text": "last"}]},
                {"role": "assistant", "content": "answer"}]
    assert last_user_text(messages) == "last"
    assert last_user_text([{"role": "system", "content": "Be brief."}]) == ""


@pytest.mark.parametrize(("text", "question"), [("Is it ok?", False), ("Is it ok now?", True),
                                                ("Is it ok now", False)])
def test_a_question_has_more_than_three_words_and_a_question_mark(text, question):
    assert is_question(text) is question


def test_a_request_starts_with_please_and_has_more_than_two_words():
    assert asked_questions("Please stop. Please, check my rash. Please check rashes.") == [
        "Please, check my rash.", "Please check rashes."]


def test_passed_through_fields_of_any_shape_are_read_and_grouped_by_field():
    assert [(p.field, p.text) for p in definition_pieces({"extra_body": ["a b", "c"]})] == [
        ("extra_body", "a b"), ("extra_body", "c")]
    assert definition_texts({"extra_body": {"x": "one", "y": "two"}, "user": "alice"}) == ["alice", "one\ntwo"]


def test_every_field_of_a_tool_is_judged_with_the_tool():
    tools = [{"type": "function", "note": "HARM", "function": {"name": "f", "description": "Look up"}}]
    assert definition_texts({"tools": tools}) == ["Look up", "HARM\nnote\nf\nLook up"]


def test_a_schema_in_an_instance_keyword_is_read_as_json():
    """``default`` and ``examples`` hold instances, not schemas: their keys are text even when they
    spell keywords."""
    parameters = {"type": "object", "default": {"title": "Mr"}, "examples": [{"type": "vip"}]}
    definitions = {"tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}]}
    assert [p.text for p in definition_pieces(definitions)] == ["f", "title", "Mr", "type", "vip"]
