"""Request fields that are not text: identifiers, enum values, token ids and payloads, validated, not read.

The guardrails read every field a client writes (:mod:`proxy.guardrails.messages` walks the
messages and the tool definitions; docs/security.md "What the guardrails read" lists them per
API), except the fields this module types: a value that can only be an identifier, one of a few
keywords or a token id carries no prose, so it is checked at parse time and never screened. A
value that fails the check is a 400 naming the field (pydantic's ``ValidationError`` turned into
OpenAI's error object by :func:`proxy.server.http.requests.validation_error`).

- :data:`Identifier`: ids the client echoes back (``tool_calls[].id``, ``tool_call_id``,
  ``audio.id``, ``file.file_id``, Responses ``call_id``, Messages ``tool_use.id``/``tool_use_id``):
  1 to :data:`IDENTIFIER_MAX` characters of ``[A-Za-z0-9_.:-]`` (no ``@``, no whitespace: an
  e-mail address or a sentence cannot be an id).
- :data:`ReasoningEffort`, :data:`AudioFormat`: the values the OpenAI API reference allows.
- :data:`TokenId`: a ``logit_bias`` key, a token id written in decimal.
- :data:`Base64`, :data:`Payload`, :data:`ImageUrl`: payloads no detector reads (audio data, file
  data, a ``data:`` image URL) must be base64 (a data URL's media type a ``type/subtype`` token),
  so that no text travels inside them.
- :data:`Token`: a short string without whitespace (embeddings ``user``), read by Privacy only.
- :func:`free_text_path`: the first place in a passed-through field (one the proxy does not
  know) that holds free text or a key that is not an identifier.
"""

from __future__ import annotations

import binascii
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, StringConstraints

__all__ = ["AUDIO_FORMATS", "AudioFormat", "BAD_NAME", "Base64", "IDENTIFIER_MAX", "Identifier", "ImageUrl",
           "LogitBias", "PASSTHROUGH_MAX_STRING", "Payload", "REASONING_EFFORTS", "ReasoningEffort", "Token",
           "TokenId", "base64_payload", "data_url", "free_text_path", "identifier", "is_identifier", "token"]

#: Longest identifier accepted (OpenAI's own ids are at most a few tens of characters).
IDENTIFIER_MAX = 128
_IDENTIFIER = re.compile(rf"[A-Za-z0-9_.:-]{{1,{IDENTIFIER_MAX}}}")

#: ``reasoning_effort`` (Chat Completions) and ``reasoning.effort`` (Responses), OpenAI API reference.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
#: ``input_audio.format`` of a chat content part (OpenAI API reference).
AudioFormat = Literal["wav", "mp3"]
AUDIO_FORMATS: tuple[str, ...] = get_args(AudioFormat)

#: Longest string a passed-through (unknown) field may hold: identifiers and enum values, not prose.
PASSTHROUGH_MAX_STRING = 128


def is_identifier(value: Any) -> bool:
    """True for a string of 1 to :data:`IDENTIFIER_MAX` characters of ``[A-Za-z0-9_.:-]``."""
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def identifier(value: str) -> str:
    """``value`` unchanged when :func:`is_identifier`; ValueError (a pydantic validation error in a
    model, hence a 400 naming the field) otherwise. The message never repeats the value."""
    if not is_identifier(value):
        raise ValueError(f"an identifier is 1 to {IDENTIFIER_MAX} characters of letters, digits and '_.:-'")
    return value


Identifier = Annotated[str, AfterValidator(identifier)]

_DATA_URL = re.compile(r"data:[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+(;[A-Za-z0-9_.+-]+=[A-Za-z0-9_.+-]+)*;base64,",
                       re.IGNORECASE)


def base64_payload(value: str) -> str:
    """``value`` unchanged when it is standard base64 (RFC 4648 section 4, padded, no whitespace);
    ValueError otherwise."""
    try:
        binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
        raise ValueError("expected base64 data (RFC 4648, padded, no whitespace)") from None
    return value


def data_url(value: str) -> str:
    """``value`` unchanged when it is ``data:<type>/<subtype>[;param=value]*;base64,<base64>``;
    ValueError otherwise."""
    head = _DATA_URL.match(value)
    if head is None:
        raise ValueError("expected a data URL 'data:<type>/<subtype>;base64,<base64 data>'")
    base64_payload(value[head.end():])
    return value


def _payload(value: str) -> str:
    return data_url(value) if value[:5].lower() == "data:" else base64_payload(value)


def _image_url(value: str) -> str:
    return data_url(value) if value[:5].lower() == "data:" else value


Base64 = Annotated[str, AfterValidator(base64_payload)]
#: A file's data: base64, or a base64 data URL.
Payload = Annotated[str, AfterValidator(_payload)]
#: An image URL: a link (text, read by the guardrails) or a base64 data URL (validated here).
ImageUrl = Annotated[str, AfterValidator(_image_url)]
TokenId = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,10}$")]
#: ``logit_bias``: token id → bias in [-100, 100] (OpenAI API reference).
LogitBias = dict[TokenId, Annotated[int, Field(ge=-100, le=100)]]


#: What :func:`free_text_path` returns when the field's own name is not an identifier.
BAD_NAME = "(field name)"


def _free(text: str) -> bool:
    return len(text) > PASSTHROUGH_MAX_STRING or any(c.isspace() for c in text)


def token(value: str) -> str:
    """``value`` unchanged when it is no free text (at most :data:`PASSTHROUGH_MAX_STRING`
    characters, no whitespace); ValueError otherwise."""
    if _free(value):
        raise ValueError(f"expected at most {PASSTHROUGH_MAX_STRING} characters without whitespace")
    return value


#: A short token (an end-user id, an e-mail address): Privacy reads it, Safety need not.
Token = Annotated[str, AfterValidator(token)]


def free_text_path(value: Any, path: str) -> str | None:
    """The path of the first place in ``value`` (a passed-through field named ``path``) that the
    gateway would forward unread, else None.

    Such a place is a string leaf that reads as free text (longer than
    :data:`PASSTHROUGH_MAX_STRING` characters or containing whitespace), or an object key, the
    field's own name included, that is not an identifier (:func:`is_identifier`: a key is never
    screened, so an e-mail address as a key would pass). String values that are short tokens
    are screened by Privacy with the other client text. ``value`` is parsed JSON, already bounded
    in depth by ``server.limits.max_json_depth``; the walk is iterative. Paths look like
    ``prediction.content`` or ``modalities[0]``; a bad key is named by its object's path (the key
    itself is client text, not echoed), a bad field name by :data:`BAD_NAME`.
    """
    if not is_identifier(path):
        return BAD_NAME
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if _free(node):
                return where
        elif isinstance(node, dict):
            for k, v in node.items():
                if not is_identifier(k):
                    return where
                stack.append((v, f"{where}.{k}"))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(node))
    return None
