"""Text access to OpenAI chat messages (string content or a list of content parts)."""

from __future__ import annotations

import copy
from typing import Any, Callable


def message_text(message: dict[str, Any]) -> str:
    """The text a model reads in one message: the string content, or its text parts joined by
    newlines; non-text parts (images, audio) contribute nothing. Missing content → ""."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def text_parts(message: dict[str, Any]) -> list[str]:
    """Each text piece of a message, in order: the string content, or each text part's text.

    :func:`map_text` visits the same pieces in the same order.
    """
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p["text"] for p in content
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
    return []


def map_text(message: dict[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    """A deep copy of ``message`` with ``fn`` applied to each text (string content or text part)."""
    out = copy.deepcopy(message)
    content = out.get("content")
    if isinstance(content, str):
        out["content"] = fn(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                part["text"] = fn(part["text"])
    return out


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """Text of the last ``user`` message ("" when there is none): the request's intent."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message)
    return ""
