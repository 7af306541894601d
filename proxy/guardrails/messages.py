"""Text access to OpenAI chat requests: every text a client writes, read and rewritten in one order.

This module is the one definition of what the guardrails read of a Chat Completions request (the
Responses and Messages APIs are translated to one first, embeddings read their inputs and
passed-through fields the same way). Everything a client writes is read here, except values
:mod:`proxy.guardrails.fields` validates at parse time as identifiers, enum values, token ids or
numbers; docs/security.md "What the guardrails read" is the table, field by field.

A message's texts (the fields are those of the OpenAI Chat Completions API reference,
``messages``), in the order :func:`text_pieces` lists them and :func:`map_text` rewrites them:

1. ``content``: the string, or per content part its ``text`` (type ``text``), ``refusal``
   (type ``refusal``), ``file.filename`` (type ``file``) or ``image_url.url`` when it is a link
   (not a ``data:`` URL); image data, audio data and file data carry no text (their parts are
   counted by :func:`unreadable_parts`);
2. ``refusal`` (assistant);
3. ``name``;
4. per ``tool_calls`` entry: ``function.name`` and ``function.arguments``, or ``custom.name``
   and ``custom.input``;
5. the deprecated ``function_call``: ``name`` and ``arguments``.

Function arguments are a JSON text: each object key, string value and number of the parsed
JSON is a piece of its own, so a rewrite (masking) keeps the arguments valid JSON; arguments
that do not parse are one piece. Empty strings are not pieces. Functions here never mutate
their argument.

The request's other client-written fields (:data:`DEFINITION_KEYS`) are client text too;
:func:`definition_pieces` lists and :func:`map_definitions` rewrites them, in this order:

1. per ``tools`` entry: ``function.name``, ``function.description``, then inside
   ``function.parameters`` (a JSON Schema, :func:`_walk_schema`); or ``custom.name``,
   ``custom.description`` and ``custom.format.grammar.definition``;
2. ``tool_choice``: the function or custom tool's ``name`` (also inside ``allowed_tools.tools``);
   a string ``auto``, ``none`` or ``required`` is a keyword, not text;
3. ``response_format.json_schema``: ``name``, ``description``, then inside ``schema``;
4. ``user``, ``stop`` (a string or a list) and the passed-through fields (``extra_body``).

In these objects a key the walker does not know is read, its name and its value (any JSON); a
``type``, ``syntax`` or ``mode`` whose value is one of the API's keywords, and a boolean
``strict``, are left alone (any other value is read).

In a JSON Schema the texts are the values of ``title``, ``description`` and ``$comment``, every
string and number inside ``enum``, ``const``, ``default`` and ``examples``, the names mapped by
``properties``, ``$defs``/``definitions``, ``patternProperties`` and ``dependentSchemas``, the
entries of ``required`` and ``dependentRequired`` (so a masked name stays consistent: the same
text gets the same placeholder), the values of ``pattern``, ``$ref``, ``$id``, ``$anchor`` and the
other reference keywords, and any keyword the walker does not know (name and value). Left alone,
so that a rewrite keeps the schema valid: the numeric and boolean bounds when they are numbers or
booleans, and ``type``, ``format`` and ``$schema`` when their value is one JSON Schema defines
(any other value is read). The field of a piece inside a schema is the schema's place
(``tools.0.function.parameters``, ``response_format.json_schema.schema``), never the client's
property names.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["TextPiece", "text_pieces", "text_parts", "map_text", "map_tool_calls", "message_text",
           "screened_text", "judged_texts", "last_user_text", "DEFINITION_KEYS", "definition_pieces",
           "definition_texts", "map_definitions", "UNREADABLE_PART_TYPES", "unreadable_parts"]

#: The keys of a message whose only text is its string ``content`` (``role`` is never screened).
_PLAIN_KEYS = frozenset({"role", "content"})

#: ``fn(field, text) -> new text``: the rewrite the walker applies to each piece.
_Rewrite = Callable[[str, str], str]


@dataclass(frozen=True)
class TextPiece:
    """One text of a message: ``field`` is its place as a dotted path inside the message
    (``"content"``, ``"content.1.text"``, ``"tool_calls.0.function.arguments"``: positions and
    field names only, never client text), ``text`` the text itself."""

    field: str
    text: str


def _text(value: Any, field: str, fn: _Rewrite) -> Any:
    """``fn`` applied to a non-empty string; anything else unchanged."""
    return fn(field, value) if isinstance(value, str) and value else value


def _json_value(value: Any, field: str, fn: _Rewrite) -> Any:
    """``value`` (parsed JSON) with ``fn`` applied to every key, string and number inside it.

    A number whose text ``fn`` changes becomes a string (the rewritten text).
    """
    if isinstance(value, dict):
        return {_text(k, field, fn): _json_value(v, field, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v, field, fn) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        literal = json.dumps(value)
        rewritten = fn(field, literal)
        return value if rewritten == literal else rewritten
    return _text(value, field, fn)


def _json_text(value: Any, field: str, fn: _Rewrite) -> Any:
    """A JSON text (function arguments) with ``fn`` applied inside it; byte-identical when ``fn``
    changes nothing; not JSON → one piece."""
    if not isinstance(value, str) or not value:
        return value
    try:
        parsed = json.loads(value)
        # a JSON text may spell lone surrogates ("\\ud800"): not encodable text, so one plain piece
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except ValueError:  # UnicodeEncodeError included
        return fn(field, value)
    changed = False

    def tracking(where: str, text: str) -> str:
        nonlocal changed
        out = fn(where, text)
        changed = changed or out != text
        return out

    rewritten = _json_value(parsed, field, tracking)
    return json.dumps(rewritten, ensure_ascii=False) if changed else value


def _walk_content(message: dict[str, Any], fn: _Rewrite) -> None:
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = _text(content, "content", fn)
    elif isinstance(content, list):
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("text", "refusal") and kind in part:
                part[kind] = _text(part[kind], f"content.{i}.{kind}", fn)
            elif kind == "file" and isinstance(part.get("file"), dict) and "filename" in part["file"]:
                part["file"]["filename"] = _text(part["file"]["filename"], f"content.{i}.file.filename", fn)
            elif kind == "image_url" and isinstance(part.get("image_url"), dict) \
                    and _is_link(part["image_url"].get("url")):
                part["image_url"]["url"] = _text(part["image_url"]["url"], f"content.{i}.image_url.url", fn)


def _is_link(url: Any) -> bool:
    """True for an image URL the provider fetches (text), False for a ``data:`` URL (a payload)."""
    return isinstance(url, str) and url[:5].lower() != "data:"


def _walk_call(call: Any, field: str, fn: _Rewrite, text_key: str, json_args: bool) -> None:
    """A ``{"name", <text_key>}`` object: the name, then the arguments (JSON) or input (text)."""
    if not isinstance(call, dict):
        return
    if "name" in call:
        call["name"] = _text(call["name"], f"{field}.name", fn)
    if text_key in call:
        rewrite = _json_text if json_args else _text
        call[text_key] = rewrite(call[text_key], f"{field}.{text_key}", fn)


def _walk(message: dict[str, Any], fn: _Rewrite) -> dict[str, Any]:
    """Apply ``fn`` to every text of ``message`` in place (the module docstring's order)."""
    _walk_content(message, fn)
    for key in ("refusal", "name"):
        if key in message:
            message[key] = _text(message[key], key, fn)
    for j, call in enumerate(message.get("tool_calls") or []):
        if isinstance(call, dict):
            _walk_call(call.get("function"), f"tool_calls.{j}.function", fn, "arguments", True)
            _walk_call(call.get("custom"), f"tool_calls.{j}.custom", fn, "input", False)
    _walk_call(message.get("function_call"), "function_call", fn, "arguments", True)
    return message


def text_pieces(message: dict[str, Any]) -> list[TextPiece]:
    """Every non-empty text of ``message``, in the order :func:`map_text` rewrites them."""
    content = message.get("content")
    if isinstance(content, str) and message.keys() <= _PLAIN_KEYS:  # most chat turns: no walk, no copy
        return [TextPiece("content", content)] if content else []
    pieces: list[TextPiece] = []

    def collect(field: str, text: str) -> str:
        pieces.append(TextPiece(field, text))
        return text

    _walk(copy.deepcopy(message), collect)
    return pieces


#: Content-part types whose payload no detector reads: an image (URL or data URL), base64 audio,
#: a file's data or id (a file part's ``filename`` is text and screened like any other).
UNREADABLE_PART_TYPES = ("image_url", "input_audio", "file")


def unreadable_parts(message: dict[str, Any]) -> list[str]:
    """The type of each content part of ``message`` that carries a payload no detector reads
    (:data:`UNREADABLE_PART_TYPES`; a ``file`` part only with ``file_data`` or ``file_id``), in
    order; ``[]`` for string content."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    kinds = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "file":
            payload = part.get("file")
            if isinstance(payload, dict) and (payload.get("file_data") or payload.get("file_id")):
                kinds.append(kind)
        elif kind in UNREADABLE_PART_TYPES:
            kinds.append(kind)
    return kinds


def text_parts(message: dict[str, Any]) -> list[str]:
    """The texts of :func:`text_pieces` (without their fields)."""
    return [p.text for p in text_pieces(message)]


def map_text(message: dict[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    """A deep copy of ``message`` with ``fn`` applied to each text of :func:`text_pieces`, in
    that order (function arguments stay valid JSON: ``fn`` sees their keys and values)."""
    return _walk(copy.deepcopy(message), lambda _field, text: fn(text))


def map_tool_calls(tool_calls: list[dict[str, Any]] | None, fn: Callable[[str], str]) -> list[dict[str, Any]] | None:
    """A deep copy of an answer's ``tool_calls`` with ``fn`` applied to names and inside arguments."""
    if not tool_calls:
        return tool_calls
    return map_text({"role": "assistant", "tool_calls": tool_calls}, fn)["tool_calls"]


def message_text(message: dict[str, Any]) -> str:
    """The content a model reads in one message: the string content, or its text parts joined by
    newlines; non-text parts (images, audio) contribute nothing. Missing content → ""."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def screened_text(message: dict[str, Any]) -> str:
    """All texts of ``message`` (:func:`text_pieces`) joined by newlines: what Safety judges."""
    return "\n".join(text_parts(message))


def _is_sentence(text: str) -> bool:
    """More than one word: a text Safety judges on its own too (a name or an id is one word)."""
    return len(text.split()) > 1


def judged_texts(message: dict[str, Any]) -> list[str]:
    """What Safety should judge of ``message``: :func:`screened_text`, then every piece with more
    than one word on its own; blank and repeated texts left out (a message of one piece is one text).

    As for :func:`definition_texts`, joining alone is not enough: a message's other pieces (its
    text, names, file names, links, tool-call arguments) dilute an instruction written in one of
    them (the canary instruction as a user message's ``name`` passed joined; tests/e2e/test_canaries.py).
    """
    texts = [screened_text(message), *(t for t in text_parts(message) if _is_sentence(t))]
    return [t for t in dict.fromkeys(texts) if t.strip()]


#: A sentence: text up to a full stop, question mark, exclamation mark, semicolon or line break.
_SENTENCE = re.compile(r"[^.?!;\n]*(?:[.?!;]+|\n|$)")


def is_question(text: str) -> bool:
    """True when ``text`` asks something: more than three words and a question mark."""
    return "?" in text and len(text.split()) > 3


def asked_questions(text: str) -> list[str]:
    """The sentences of ``text`` that ask something, in order, stripped: questions
    (:func:`is_question`) and requests that start with "please" ("Please diagnose my rash.").

    What Compliance judges of a system or developer message: instructions describe how to answer,
    and the regulated-domain classifier reads a shop's policies as regulated ("Policies: refunds
    within 30 days of delivery with the receipt" scores legal 0.71), which would escalate every
    request of the deployment; a question or request written into them is judged.
    """
    out = []
    for sentence in _SENTENCE.findall(text):
        words = sentence.split()
        if is_question(sentence) or (len(words) > 2 and words[0].lower().strip(",:") == "please"):
            out.append(sentence.strip())
    return out


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """Text of the last ``user`` message ("" when there is none): the request's intent."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


# ---- tool definitions (tools, tool_choice, response_format, stop, ...) ----------------------------

#: The top-level request fields that define tools and output schemas, and the other client-written
#: fields the provider reads (the end-user id, stop sequences, passed-through fields).
DEFINITION_KEYS = ("tools", "tool_choice", "response_format", "user", "stop", "extra_body")

#: ``fn(value, field, rewrite) -> value``: how one field of the definitions is walked.
_Walker = Callable[[Any, str, _Rewrite], Any]

#: JSON Schema keywords whose string value is text for the model (JSON Schema 2020-12, "Meta-Data").
_SCHEMA_TEXT = frozenset({"title", "description", "$comment"})
#: Keywords whose value is an instance (any JSON): every key, string and number inside is text.
_SCHEMA_INSTANCES = frozenset({"enum", "const", "default", "examples"})
#: Keywords whose value is one subschema.
_SCHEMA_ONE = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains",
                         "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"})
#: Keywords whose value is a list of subschemas.
_SCHEMA_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
#: Keywords whose value maps names (text: a ``$defs`` name, a regex) to subschemas.
_SCHEMA_MAP = frozenset({"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
#: Keywords whose value is a number or a boolean: left alone when it is one, else read as text.
_SCHEMA_NUMBERS = frozenset({
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength",
    "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "minContains", "maxContains",
    "readOnly", "writeOnly", "deprecated", "nullable", "strict",
})
#: Keywords whose value is one of a few names: left alone when it is one of them (``type`` also as
#: a list of them), else read as text. ``format``: JSON Schema 2020-12 "Defined Formats" and the
#: OpenAPI ones.
_SCHEMA_NAMES: dict[str, frozenset[str]] = {
    "type": frozenset({"null", "boolean", "object", "array", "number", "string", "integer"}),
    "format": frozenset({
        "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4", "ipv6",
        "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
        "relative-json-pointer", "regex", "int32", "int64", "float", "double", "byte", "binary", "password"}),
    "$schema": frozenset({
        "https://json-schema.org/draft/2020-12/schema", "https://json-schema.org/draft/2019-09/schema",
        "http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-04/schema#"}),
}
#: Keywords whose name is structure, its value still read as the sets above say (the value of
#: a ref, an anchor, a pattern is read as text); any other key of a schema is read, name and value.
_SCHEMA_KEYWORDS = (_SCHEMA_TEXT | _SCHEMA_INSTANCES | _SCHEMA_ONE | _SCHEMA_LIST | _SCHEMA_MAP | _SCHEMA_NUMBERS
                    | frozenset(_SCHEMA_NAMES) | frozenset({
                        "required", "dependentRequired", "pattern", "$ref", "$id", "$anchor", "$dynamicRef",
                        "$dynamicAnchor", "$vocabulary", "contentEncoding", "contentMediaType", "contentSchema"}))
#: Keys of the definitions' objects (tools, ``tool_choice``, ``response_format``) whose value is
#: a keyword when it is one of these names; any other value of theirs is read as text.
_KEYWORDS: dict[str, frozenset[str]] = {
    "type": frozenset({"function", "custom", "text", "grammar", "json_schema", "json_object", "allowed_tools"}),
    "syntax": frozenset({"lark", "regex"}),
    "mode": frozenset({"auto", "required"}),
}
#: ``tool_choice`` as a string: a keyword, not text (any other string is read as text).
_CHOICE_KEYWORDS = frozenset({"auto", "none", "required"})


def _named(value: Any, names: frozenset[str]) -> bool:
    """True when ``value`` is one of ``names`` (or a non-empty list of them)."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, str) and v in names for v in value)
    return isinstance(value, str) and value in names


def _names(value: Any, field: str, fn: _Rewrite) -> Any:
    """A list of property names (``required``) with ``fn`` applied to each."""
    return [_json_value(v, field, fn) for v in value] if isinstance(value, list) else _json_value(value, field, fn)


def _schema_keyword(key: str, value: Any, field: str, fn: _Rewrite) -> Any:
    """The value of schema keyword ``key`` with ``fn`` applied to its texts (module docstring)."""
    if key in _SCHEMA_NUMBERS and isinstance(value, (int, float)):  # bool included
        return value
    if key in _SCHEMA_NAMES and _named(value, _SCHEMA_NAMES[key]):
        return value
    if key in _SCHEMA_MAP and isinstance(value, dict):
        return {_text(k, field, fn): _walk_schema(v, field, fn) for k, v in value.items()}
    if key == "required":
        return _names(value, field, fn)
    if key == "dependentRequired" and isinstance(value, dict):
        return {_text(k, field, fn): _names(v, field, fn) for k, v in value.items()}
    if key in _SCHEMA_ONE and isinstance(value, (dict, bool)):
        return _walk_schema(value, field, fn)
    if key in _SCHEMA_LIST and isinstance(value, list):
        return [_walk_schema(v, field, fn) for v in value]
    # text keywords, instances, refs, anchors, patterns, vendor extensions, any value of the wrong shape
    return _json_value(value, field, fn)


def _walk_schema(schema: Any, field: str, fn: _Rewrite) -> Any:
    """A JSON Schema (parsed) with ``fn`` applied to each of its texts; keywords untouched.

    Every piece gets ``field`` (the schema's place in the request). A keyword the walker does not
    know is read, its name and its value. Booleans are schemas without text; any other
    non-object is read as JSON. Depth is bounded by the request parser's JSON depth.
    """
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return _json_value(schema, field, fn)
    return {(key if key in _SCHEMA_KEYWORDS else _text(key, field, fn)): _schema_keyword(key, value, field, fn)
            for key, value in schema.items()}



def _object(texts: tuple[str, ...] = (), schemas: tuple[str, ...] = (),
            nested: dict[str, _Walker] | None = None) -> _Walker:
    """The walker of one kind of object: ``texts`` keys read as text (any JSON inside), ``schemas``
    keys as JSON Schemas, ``nested`` keys by their own walker, a :data:`_KEYWORDS` key left alone
    when its value is one of its names; every other key is read, its name and its value (as JSON).
    A piece's field is the object's place plus a known key, never a client's key. A value that is
    not an object is read as JSON."""
    inner = nested or {}

    def walk(value: Any, field: str, fn: _Rewrite) -> Any:
        if not isinstance(value, dict):
            return _json_value(value, field, fn)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in texts:
                out[key] = _json_value(item, f"{field}.{key}", fn)
            elif key in schemas:
                out[key] = _walk_schema(item, f"{field}.{key}", fn)
            elif key in inner:
                out[key] = inner[key](item, f"{field}.{key}", fn)
            elif key in _KEYWORDS and isinstance(item, str) and item in _KEYWORDS[key]:
                out[key] = item
            elif key == "strict" and isinstance(item, bool):
                out[key] = item
            else:
                out[_text(key, field, fn)] = _json_value(item, field, fn)
        return out
    return walk


def _each(walker: _Walker) -> _Walker:
    """The walker of a list whose entries ``walker`` walks (entry ``i`` at ``field.i``)."""
    def walk(value: Any, field: str, fn: _Rewrite) -> Any:
        if not isinstance(value, list):
            return _json_value(value, field, fn)
        return [walker(v, f"{field}.{i}", fn) for i, v in enumerate(value)]
    return walk


def _walk_choice(choice: Any, field: str, fn: _Rewrite) -> Any:
    """``tool_choice``: a keyword string, or the chosen tool's name (also in ``allowed_tools``)."""
    if isinstance(choice, str) and choice in _CHOICE_KEYWORDS:
        return choice
    return _CHOICE(choice, field, fn)


_NAMED = _object(("name",))
_CHOICE = _object(nested={"function": _NAMED, "custom": _NAMED,
                          "allowed_tools": _object(nested={"tools": _each(_walk_choice)})})
_TOOL = _object(nested={
    "function": _object(("name", "description"), ("parameters",)),
    "custom": _object(("name", "description"), nested={
        "format": _object(nested={"grammar": _object(("definition",))})}),
})
_RESPONSE_FORMAT = _object(nested={"json_schema": _object(("name", "description"), ("schema",))})


def _walk_extra(extra: Any, field: str, fn: _Rewrite) -> Any:
    """Passed-through fields (names are identifiers: proxy.guardrails.fields.free_text_path), each
    read as JSON at ``extra_body.<name>``."""
    if not isinstance(extra, dict):
        return _json_value(extra, field, fn)
    return {name: _json_value(value, f"{field}.{name}", fn) for name, value in extra.items()}


#: How each of :data:`DEFINITION_KEYS` is walked, in that order: the one definition of what the
#: guardrails read of the request's fields outside the messages.
_DEFINITIONS: dict[str, _Walker] = {
    "tools": _each(_TOOL),
    "tool_choice": _walk_choice,
    "response_format": _RESPONSE_FORMAT,
    "user": _json_value,
    "stop": _json_value,
    "extra_body": _walk_extra,
}


def _walk_definitions(definitions: dict[str, Any], fn: _Rewrite) -> dict[str, Any]:
    """``definitions`` with ``fn`` applied to every text (the module docstring's order); a key that
    is not one of :data:`DEFINITION_KEYS` is read as JSON too."""
    walked = {key: _DEFINITIONS[key](definitions[key], key, fn) for key in _DEFINITIONS if key in definitions}
    walked.update({key: _json_value(value, key, fn) for key, value in definitions.items() if key not in _DEFINITIONS})
    return {k: v for k, v in walked.items() if v is not None}


def definition_pieces(definitions: dict[str, Any] | None) -> list[TextPiece]:
    """Every non-empty text of a request's tool definitions (``{"tools", "tool_choice",
    "response_format"}``, any subset; None → []), in the order :func:`map_definitions` rewrites them."""
    pieces: list[TextPiece] = []

    def collect(field: str, text: str) -> str:
        pieces.append(TextPiece(field, text))
        return text

    if definitions:
        # no copy: the walk builds new containers and ``collect`` returns each text as it was
        _walk_definitions(definitions, collect)
    return pieces


def definition_texts(definitions: dict[str, Any] | None) -> list[str]:
    """What Safety judges of the definitions: every piece with more than one word on its own (a
    description judged as a user message would be), then one text per tool, one for
    ``tool_choice`` and one for ``response_format`` (the newline-joined texts of its pieces: names
    and single words, and an instruction split across fields); blank and repeated texts left out.

    Joining alone is not enough: the schema's names dilute a harmful description (an AdvBench goal
    as a tool description scored 0.56 harmful_intent joined, 0.9995 alone; docs/operations.md).
    """
    groups: dict[str, list[str]] = {}
    sentences: list[str] = []
    for piece in definition_pieces(definitions):
        head = piece.field.split(".")
        groups.setdefault(".".join(head[:2]) if head[0] == "tools" else head[0], []).append(piece.text)
        if _is_sentence(piece.text):
            sentences.append(piece.text)
    texts = [*sentences, *("\n".join(g) for g in groups.values())]
    return [t for t in dict.fromkeys(texts) if t.strip()]


def map_definitions(definitions: dict[str, Any] | None, fn: Callable[[str], str]) -> dict[str, Any] | None:
    """A deep copy of ``definitions`` with ``fn`` applied to each text of :func:`definition_pieces`,
    in that order (JSON Schemas stay valid: keywords are never passed to ``fn``)."""
    if not definitions:
        return definitions
    return _walk_definitions(copy.deepcopy(definitions), lambda _field, text: fn(text))
