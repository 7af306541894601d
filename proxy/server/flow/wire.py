"""OpenAI wire format: request validation, chat.completion bodies, SSE chunks, error bodies.

Follows the OpenAI Chat Completions API reference (``POST /v1/chat/completions``; streaming as
``chat.completion.chunk`` server-sent events ending with ``data: [DONE]``; usage in a final
chunk with empty ``choices`` when ``stream_options.include_usage`` is true).
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from proxy.guardrails.fields import (
    AudioFormat,
    Base64,
    Identifier,
    ImageUrl,
    LogitBias,
    Payload,
    ReasoningEffort,
    Token,
)
from proxy.server.errors import param_path

#: Request fields forwarded to the provider unchanged (everything else is the proxy's business).
PASSTHROUGH = (
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "presence_penalty",
    "frequency_penalty", "seed", "tools", "tool_choice", "response_format", "user", "logit_bias",
    "parallel_tool_calls", "logprobs", "top_logprobs", "reasoning_effort",
)


class _Wire(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class _ImageUrl(_Wire):
    url: ImageUrl
    detail: Literal["auto", "low", "high"] | None = None


class _InputAudio(_Wire):
    data: Base64
    format: AudioFormat


class _File(_Wire):
    file_data: Payload | None = None
    file_id: Identifier | None = None
    filename: str | None = None


class TextPart(_Wire):
    """``{"type": "text", "text": ...}``: text in any role's content."""

    type: Literal["text"]
    text: str


class RefusalPart(_Wire):
    """``{"type": "refusal", "refusal": ...}``: an assistant's refusal as a content part."""

    type: Literal["refusal"]
    refusal: str


class ImagePart(_Wire):
    """``{"type": "image_url", "image_url": {"url", "detail"?}}`` (user messages)."""

    type: Literal["image_url"]
    image_url: _ImageUrl


class AudioPart(_Wire):
    """``{"type": "input_audio", "input_audio": {"data", "format"}}`` (user messages)."""

    type: Literal["input_audio"]
    input_audio: _InputAudio


class FilePart(_Wire):
    """``{"type": "file", "file": {"file_data"?, "file_id"?, "filename"?}}`` (user messages)."""

    type: Literal["file"]
    file: _File


#: Content part models by ``type`` (OpenAI Chat Completions API reference, "messages").
PART_TYPES: dict[str, type[_Wire]] = {
    "text": TextPart, "refusal": RefusalPart, "image_url": ImagePart, "input_audio": AudioPart, "file": FilePart,
}
_TEXT_ONLY = frozenset({"text"})
_USER_PARTS = frozenset({"text", "image_url", "input_audio", "file"})
#: The message fields and content part types of each role (OpenAI chat schema); anything else is a 400.
ROLE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "refusal", "audio", "tool_calls", "function_call"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
    "function": frozenset({"role", "content", "name"}),
}
ROLE_PARTS: dict[str, frozenset[str]] = {
    "system": _TEXT_ONLY, "developer": _TEXT_ONLY, "user": _USER_PARTS,
    "assistant": frozenset({"text", "refusal"}), "tool": _TEXT_ONLY, "function": _TEXT_ONLY,
}


class FunctionCall(_Wire):
    """``{"name", "arguments"}``; ``arguments`` is a JSON text written by the model (or the client)."""

    name: str
    arguments: str


class CustomCall(_Wire):
    """A custom tool's call: ``{"name", "input"}`` (free text)."""

    name: str
    input: str


class ToolCall(_Wire):
    """One entry of an assistant message's ``tool_calls``: a function call or a custom tool call."""

    id: Identifier
    type: Literal["function", "custom"]
    function: FunctionCall | None = None
    custom: CustomCall | None = None

    @model_validator(mode="after")
    def _matches_type(self) -> "ToolCall":
        if getattr(self, self.type) is None or (self.function is not None and self.custom is not None):
            raise ValueError(f"a tool call of type '{self.type}' carries exactly the '{self.type}' object")
        return self


class AssistantAudio(_Wire):
    """``{"id"}``: a previous audio answer of the model, by id."""

    id: Identifier


class ChatMessage(_Wire):
    """A chat message with only the fields OpenAI's chat schema gives its role (:data:`ROLE_FIELDS`).

    ``content`` is a string, a list of content parts (the types :data:`ROLE_PARTS` allows the
    role, each with only its own fields) or null (assistant tool calls). An unknown key is
    rejected by pydantic (``messages.N.key``: "Extra inputs are not permitted"); a known key
    outside the role's schema, or a bad content part, by the validators below (ValueError →
    400 ``invalid_value``).
    """

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: Identifier | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None
    refusal: str | None = None
    audio: AssistantAudio | None = None

    @field_validator("name", "tool_call_id", "tool_calls", "function_call", "refusal", "audio")
    @classmethod
    def _field_of_role(cls, value: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if value is not None and role is not None and info.field_name not in ROLE_FIELDS[role]:
            raise ValueError(f"'{info.field_name}' is not a field of a {role} message")
        return value

    @field_validator("content")
    @classmethod
    def _parts_of_role(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list):
            allowed = ROLE_PARTS.get(info.data.get("role") or "user", _USER_PARTS)
            for i, part in enumerate(value):
                _check_part(i, part, allowed)
        return value

    @model_validator(mode="after")
    def _content_required(self) -> "ChatMessage":
        """``content`` is required (not null) except in an assistant message carrying
        ``tool_calls``, ``function_call``, ``refusal`` or ``audio`` (OpenAI's chat schema)."""
        if self.content is None and not (self.role == "assistant" and (
                self.tool_calls or self.function_call or self.refusal is not None or self.audio)):
            raise ValueError(f"'content' is required in a {self.role} message")
        return self


def _check_part(index: int, part: dict[str, Any], allowed: frozenset[str]) -> None:
    """Validate content part ``index`` against its type's model; ValueError naming the bad key."""
    kind = part.get("type")
    if not isinstance(kind, str) or kind not in allowed:
        shown = repr(kind) if isinstance(kind, str) and kind in PART_TYPES else "an unknown type"  # a client's own string is not echoed
        raise ValueError(f"content part {index} has type {shown}; this role accepts {sorted(allowed)}")
    try:
        PART_TYPES[kind].model_validate(part)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = param_path((index, *first["loc"]))
        raise ValueError(f"'content.{where}': {first['msg']}") from None


class StreamOptions(_Wire):
    """``stream_options``: ``include_usage`` adds a final usage chunk to the stream."""

    include_usage: bool = False


class ChatCompletionRequest(_Wire):
    """The accepted request body.

    The fields below are validated; any other top-level field (``top_k``, ``verbosity``,
    ``service_tier``, ``prompt_cache_key``, the next field OpenAI adds) is kept in
    ``model_extra`` and passed to the provider through litellm's ``extra_body`` (see
    :meth:`upstream_params`), unless the operator forbids it (``server.forbidden_params``) or it
    carries free text (:func:`proxy.guardrails.fields.free_text_path`); both checks are the gateway's (400).
    """

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=2048)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    metadata: dict[str, str] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = None
    logit_bias: LogitBias | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    reasoning_effort: ReasoningEffort | None = None

    def upstream_params(self) -> dict[str, Any]:
        """Provider parameters the client set (None values dropped); fields the proxy does not
        know go in ``extra_body``, which litellm forwards in the provider's request body without
        reading it (so a client cannot set litellm's own arguments such as ``api_base``)."""
        params = {k: getattr(self, k) for k in PASSTHROUGH if getattr(self, k) is not None}
        if self.model_extra:
            params["extra_body"] = dict(self.model_extra)
        return params

    def message_dicts(self) -> list[dict[str, Any]]:
        """The messages as plain JSON dicts (exactly the fields the client sent)."""
        return [m.model_dump(exclude_unset=True) for m in self.messages]


class EmbeddingRequest(_Wire):
    """The accepted ``POST /v1/embeddings`` body (OpenAI Embeddings API).

    ``input``: a string or a list of 1 to 2,048 strings (or, as OpenAI also accepts, token arrays:
    validated here, refused by the gateway since token ids cannot be screened). ``encoding_format``
    ``float`` (default) or ``base64`` (little-endian float32, as OpenAI sends it); ``dimensions``
    and ``user`` go to the provider. Other top-level fields are kept in ``model_extra`` and
    passed through like chat completions' (:meth:`upstream_params`).
    """

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, max_length=256)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1, le=65536)
    user: Token | None = None

    @field_validator("input", mode="wrap")
    @classmethod
    def _bounded(cls, value: Any, handler: Any) -> Any:
        try:
            value = handler(value)
        except ValidationError:  # one message naming `input`, not one per member of the union
            raise ValueError("input must be a string or a list of strings (or token arrays: a list of "
                             "integers or of lists of integers)") from None
        if isinstance(value, list) and not 1 <= len(value) <= EMBEDDING_MAX_INPUTS:
            raise ValueError(f"input must hold 1 to {EMBEDDING_MAX_INPUTS} items")
        return value

    def texts(self) -> list[str] | None:
        """The input strings in order (a single string as a list of one); None for token arrays."""
        if isinstance(self.input, str):
            return [self.input]
        if all(isinstance(item, str) for item in self.input):
            return list(self.input)  # type: ignore[arg-type]
        return None

    def upstream_params(self) -> dict[str, Any]:
        """Provider parameters the client set (``dimensions``, ``user``; unknown fields in
        ``extra_body``). ``dimensions`` is also named in litellm's ``allowed_openai_params``: the
        provider, not litellm's model-name check, accepts or rejects it. ``encoding_format`` is not
        among them: the provider is always asked for floats and the proxy encodes
        (:func:`embedding_body`)."""
        params: dict[str, Any] = {k: getattr(self, k) for k in ("dimensions", "user")
                                  if getattr(self, k) is not None}
        if self.dimensions is not None:  # litellm refuses it for OpenAI models it does not know
            params["allowed_openai_params"] = ["dimensions"]
        if self.model_extra:
            params["extra_body"] = dict(self.model_extra)
        return params


#: Most inputs one embeddings request may hold (OpenAI's limit).
EMBEDDING_MAX_INPUTS = 2048


def embedding_body(*, model: str, vectors: list[list[float]], encoding_format: str | None,
                   usage: dict[str, int]) -> dict[str, Any]:
    """OpenAI's embeddings list: ``{"object": "list", "data": [{"object": "embedding", "index",
    "embedding"}], "model", "usage": {"prompt_tokens", "total_tokens"}}``. With ``encoding_format``
    ``base64`` each embedding is the base64 of its little-endian float32 bytes (what OpenAI returns
    and its SDK decodes)."""
    def encode(vector: list[float]) -> list[float] | str:
        if encoding_format != "base64":
            return vector
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")

    return {"object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": encode(v)} for i, v in enumerate(vectors)],
            "model": model,
            "usage": {"prompt_tokens": int(usage.get("prompt_tokens") or 0),
                      "total_tokens": int(usage.get("total_tokens") or usage.get("prompt_tokens") or 0)}}


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def new_completion_id() -> str:
    """A fresh ``chatcmpl-…`` id for responses the proxy writes itself."""
    return "chatcmpl-sonate-" + uuid.uuid4().hex


def completion_body(*, model: str, content: str | None, finish_reason: str, usage: dict[str, int] | None = None,
                    completion_id: str | None = None, created: int | None = None,
                    tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``chat.completion`` object with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": completion_id or new_completion_id(),
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def sse_event(data: dict[str, Any] | str) -> bytes:
    """One server-sent event line pair: ``data: <json>\\n\\n`` (or a literal like ``[DONE]``)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def stream_events(body: dict[str, Any], chunks: list[str], include_usage: bool) -> list[bytes]:
    """The SSE events that carry ``body`` (a chat.completion) as ``chat.completion.chunk``s.

    ``chunks`` split the content into deltas: the provider's own when they still join to the
    content, else (a guardrail changed the text) word-sized chunks of the final content; the
    role comes in the first chunk, ``finish_reason`` in the last choice chunk, then an optional
    usage chunk with empty choices, then ``[DONE]``.
    """
    choice = body["choices"][0]
    message = choice["message"]
    content = message.get("content") or ""
    if "".join(chunks) != content:
        chunks = re.findall(r"\s*\S+\s*", content) or ([content] if content else [])
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": text}) for text in chunks]
    if message.get("tool_calls"):
        calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        events.append(event({"tool_calls": calls}))
    events.append(event({}, choice.get("finish_reason") or "stop"))
    if include_usage:
        events.append(sse_event({**base, "choices": [], "usage": body.get("usage")}))
    events.append(sse_event("[DONE]"))
    return events
