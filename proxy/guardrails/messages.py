"""Text access to OpenAI chat messages: every text a message carries, read and rewritten in one order.

A message's texts (issue 15, "Screen everything the client supplies"; the fields are those of
the OpenAI Chat Completions API reference, ``messages``), in the order :func:`text_pieces`
lists them and :func:`map_text` rewrites them:

1. ``content``: the string, or per content part its ``text`` (type ``text``), ``refusal``
   (type ``refusal``) or ``file.filename`` (type ``file``); images and audio carry no text;
2. ``refusal`` (assistant);
3. ``name``;
4. per ``tool_calls`` entry: ``function.name`` and ``function.arguments``, or ``custom.name``
   and ``custom.input``;
5. the deprecated ``function_call``: ``name`` and ``arguments``.

Function arguments are a JSON text: each object key, string value and number of the parsed
JSON is a piece of its own, so a rewrite (masking) keeps the arguments valid JSON; arguments
that do not parse are one piece. Empty strings are not pieces. Functions here never mutate
their argument.

A request's tool definitions (the top-level ``tools``, ``tool_choice`` and ``response_format``
of the Chat Completions request) are client text too; :func:`definition_pieces` lists and
:func:`map_definitions` rewrites them, in this order:

1. per ``tools`` entry: ``function.name``, ``function.description``, then inside
   ``function.parameters`` (a JSON Schema, :func:`_walk_schema`); or ``custom.name``,
   ``custom.description`` and ``custom.format.grammar.definition``; any other key of a tool
   or of its ``function``/``custom`` object (not ``type``/``strict``/``syntax``) as JSON values;
2. ``tool_choice``: the function or custom tool's ``name`` (also inside ``allowed_tools.tools``);
   a string (``auto``, ``none``, ``required``) is a keyword, not text;
3. ``response_format.json_schema``: ``name``, ``description``, then inside ``schema``.

In a JSON Schema the texts are the values of ``title``, ``description`` and ``$comment``, every
string and number inside ``enum``, ``const``, ``default`` and ``examples``, property names
(keys of ``properties``) with the entries of ``required`` and ``dependentRequired`` (so a
masked property name stays consistent: the same text gets the same placeholder), and any
keyword the walker does not know (vendor extensions, as JSON values). Keywords and their
structural values (``type``, ``format``, ``pattern``, ``$ref``, numeric bounds, names in
``$defs``) are not text: a rewrite never touches them, so the schema stays valid. The field of
a piece inside a schema is the schema's place (``tools.0.function.parameters``,
``response_format.json_schema.schema``), never the client's property names.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["TextPiece", "text_pieces", "text_parts", "map_text", "map_tool_calls", "message_text",
           "screened_text", "last_user_text", "DEFINITION_KEYS", "definition_pieces", "definition_texts",
           "map_definitions", "UNREADABLE_PART_TYPES", "unreadable_parts"]

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


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """Text of the last ``user`` message ("" when there is none): the request's intent."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""


# ---- tool definitions (tools, tool_choice, response_format) --------------------------------------

#: The top-level request fields that define tools and output schemas: client text the provider reads.
DEFINITION_KEYS = ("tools", "tool_choice", "response_format", "user", "extra_body")

#: JSON Schema keywords whose string value is text for the model (JSON Schema 2020-12, "Meta-Data").
_SCHEMA_TEXT = frozenset({"title", "description", "$comment"})
#: Keywords whose value is an instance (any JSON): every key, string and number inside is text.
_SCHEMA_INSTANCES = frozenset({"enum", "const", "default", "examples"})
#: Keywords whose value is one subschema.
_SCHEMA_ONE = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains",
                         "propertyNames", "unevaluatedItems", "unevaluatedProperties", "additionalItems"})
#: Keywords whose value is a list of subschemas.
_SCHEMA_LIST = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
#: Keywords whose value maps names that are not text (refs, regexes, property names) to subschemas.
_SCHEMA_MAP = frozenset({"$defs", "definitions", "patternProperties", "dependentSchemas"})
#: Keywords with structural values: neither read nor rewritten.
_SCHEMA_STRUCTURE = frozenset({
    "type", "format", "pattern", "$ref", "$schema", "$id", "$anchor", "$dynamicRef", "$dynamicAnchor",
    "$vocabulary", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
    "maxLength", "minItems", "maxItems", "uniqueItems", "minProperties", "maxProperties", "minContains",
    "maxContains", "contentEncoding", "contentMediaType", "readOnly", "writeOnly", "deprecated", "nullable",
    "strict",
})


#: Keys of a tool definition object whose value is a keyword, not text.
_NOT_TEXT = ("type", "strict", "syntax")


def _names(value: Any, field: str, fn: _Rewrite) -> Any:
    """A list of property names (``required``) with ``fn`` applied to each."""
    return [_text(v, field, fn) for v in value] if isinstance(value, list) else value


def _schema_keyword(key: str, value: Any, field: str, fn: _Rewrite) -> Any:
    """The value of schema keyword ``key`` with ``fn`` applied to its texts (module docstring)."""
    if key in _SCHEMA_STRUCTURE:
        return value
    if key in _SCHEMA_TEXT:
        return _text(value, field, fn)
    if key == "properties" and isinstance(value, dict):
        return {_text(k, field, fn): _walk_schema(v, field, fn) for k, v in value.items()}
    if key == "required":
        return _names(value, field, fn)
    if key == "dependentRequired" and isinstance(value, dict):
        return {_text(k, field, fn): _names(v, field, fn) for k, v in value.items()}
    if key in _SCHEMA_ONE:
        return _walk_schema(value, field, fn)
    if key in _SCHEMA_LIST and isinstance(value, list):
        return [_walk_schema(v, field, fn) for v in value]
    if key in _SCHEMA_MAP and isinstance(value, dict):
        return {k: _walk_schema(v, field, fn) for k, v in value.items()}
    return _json_value(value, field, fn)  # instance keywords, vendor extensions


def _walk_schema(schema: Any, field: str, fn: _Rewrite) -> Any:
    """A JSON Schema (parsed) with ``fn`` applied to each of its texts; keywords untouched.

    Every piece gets ``field`` (the schema's place in the request). Booleans and other
    non-objects are schemas without text. Depth is bounded by the request parser's JSON depth.
    """
    if not isinstance(schema, dict):
        return schema
    return {key: _schema_keyword(key, value, field, fn) for key, value in schema.items()}


def _walk_object(obj: dict[str, Any], field: str, fn: _Rewrite, texts: tuple[str, ...],
                 schemas: tuple[str, ...] = ()) -> None:
    """``obj`` in place: ``texts`` keys as text, ``schemas`` keys as JSON Schemas, then every other
    key except the keywords ``type``/``strict``/``syntax`` as JSON values (field: ``field`` itself,
    no client key)."""
    for key in texts:
        if key in obj:
            obj[key] = _text(obj[key], f"{field}.{key}", fn)
    for key in schemas:
        if key in obj:
            obj[key] = _walk_schema(obj[key], f"{field}.{key}", fn)
    for key in [k for k in obj if k not in texts and k not in schemas and k not in _NOT_TEXT]:
        if not isinstance(obj[key], dict) or key not in ("function", "custom", "format", "grammar"):
            obj[key] = _json_value(obj[key], field, fn)


def _walk_tool(tool: Any, field: str, fn: _Rewrite) -> None:
    """One ``tools`` entry in place: a function tool, a custom tool, or another type's JSON values."""
    if not isinstance(tool, dict):
        return
    function, custom = tool.get("function"), tool.get("custom")
    if isinstance(function, dict):
        _walk_object(function, f"{field}.function", fn, ("name", "description"), ("parameters",))
    if isinstance(custom, dict):
        _walk_object(custom, f"{field}.custom", fn, ("name", "description"))
        grammar = custom.get("format", {}).get("grammar") if isinstance(custom.get("format"), dict) else None
        if isinstance(grammar, dict):
            _walk_object(grammar, f"{field}.custom.format.grammar", fn, ("definition",))
    _walk_object(tool, field, fn, ())


def _walk_choice(choice: Any, field: str, fn: _Rewrite) -> None:
    """``tool_choice`` in place: the chosen function/custom tool's name (also in ``allowed_tools``)."""
    if not isinstance(choice, dict):
        return
    for kind in ("function", "custom"):
        if isinstance(choice.get(kind), dict) and "name" in choice[kind]:
            choice[kind]["name"] = _text(choice[kind]["name"], f"{field}.{kind}.name", fn)
    allowed = choice.get("allowed_tools")
    if isinstance(allowed, dict) and isinstance(allowed.get("tools"), list):
        for j, tool in enumerate(allowed["tools"]):
            _walk_choice(tool, f"{field}.allowed_tools.tools.{j}", fn)


def _walk_definitions(definitions: dict[str, Any], fn: _Rewrite) -> dict[str, Any]:
    """Apply ``fn`` to every text of ``definitions`` in place (the module docstring's order)."""
    for i, tool in enumerate(definitions.get("tools") or []):
        _walk_tool(tool, f"tools.{i}", fn)
    _walk_choice(definitions.get("tool_choice"), "tool_choice", fn)
    schema = (definitions.get("response_format") or {}).get("json_schema") \
        if isinstance(definitions.get("response_format"), dict) else None
    if isinstance(schema, dict):
        _walk_object(schema, "response_format.json_schema", fn, ("name", "description"), ("schema",))
    # the end-user id (often an e-mail) and passed-through fields the proxy does not interpret
    # (short tokens only: proxy.server.flow.wire.free_text_path) are client text the provider receives
    definitions["user"] = _text(definitions.get("user"), "user", fn)
    extra = definitions.get("extra_body")
    if isinstance(extra, dict):
        for name in extra:
            extra[name] = _json_value(extra[name], f"extra_body.{name}", fn)
    return {k: v for k, v in definitions.items() if v is not None}


def definition_pieces(definitions: dict[str, Any] | None) -> list[TextPiece]:
    """Every non-empty text of a request's tool definitions (``{"tools", "tool_choice",
    "response_format"}``, any subset; None → []), in the order :func:`map_definitions` rewrites them."""
    pieces: list[TextPiece] = []

    def collect(field: str, text: str) -> str:
        pieces.append(TextPiece(field, text))
        return text

    if definitions:
        _walk_definitions(copy.deepcopy(definitions), collect)
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
        if len(piece.text.split()) > 1:
            sentences.append(piece.text)
    texts = [*sentences, *("\n".join(g) for g in groups.values())]
    return [t for t in dict.fromkeys(texts) if t.strip()]


def map_definitions(definitions: dict[str, Any] | None, fn: Callable[[str], str]) -> dict[str, Any] | None:
    """A deep copy of ``definitions`` with ``fn`` applied to each text of :func:`definition_pieces`,
    in that order (JSON Schemas stay valid: keywords are never passed to ``fn``)."""
    if not definitions:
        return definitions
    return _walk_definitions(copy.deepcopy(definitions), lambda _field, text: fn(text))
