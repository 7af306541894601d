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
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["TextPiece", "text_pieces", "text_parts", "map_text", "map_tool_calls", "message_text",
           "screened_text", "last_user_text"]

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
    except ValueError:
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
