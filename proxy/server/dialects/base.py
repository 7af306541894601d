"""What another API served over the chat pipeline is made of: pure pieces shared by
:mod:`proxy.server.dialects.responses` and :mod:`proxy.server.dialects.messages` (no I/O; the serving is
:mod:`proxy.server.http.translated`, docs/api.md).

A :class:`Dialect` names one API's request model, its ``evidence.endpoint`` and its translations;
:class:`NativeStream` is what its stream translator answers; :func:`parse_field` validates one
nested object of a request and names the bad field in the 400; :func:`named_sse_event` frames an
event the way both OpenAI's Responses and Anthropic's Messages streams are framed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from proxy.server.errors import GatewayError, param_path

__all__ = ["Dialect", "NativeStream", "Strict", "bad_field", "chat_body", "named_sse_event", "parse_field", "shown"]

Part = TypeVar("Part", bound=BaseModel)


class Strict(BaseModel):
    """A nested request object: strict types, no unknown keys (an unknown key is a 400 naming it)."""

    model_config = ConfigDict(strict=True, extra="forbid")


def bad_field(param: str, message: str, code: str = "invalid_value") -> GatewayError:
    """A 400 naming ``param`` (``code``: ``invalid_value`` or ``unsupported_parameter``)."""
    return GatewayError(400, message, param=param, code=code)


def shown(value: Any) -> str:
    """``value`` quoted for an error message when it is an identifier-like string (a type name such
    as ``input_image``), else "an unrecognised value": a client's own text is never echoed (the rule
    of :func:`proxy.server.errors.param_path`)."""
    return repr(value) if isinstance(value, str) and param_path([value]) == value else "an unrecognised value"


def parse_field(model: type[Part], value: Any, where: str,
                template: str = "Invalid value for '{param}': {msg}") -> Part:
    """``value`` validated by ``model``; GatewayError 400 naming ``where.<path>`` of the first
    problem (``template``: the message, OpenAI's wording by default)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join([where, param_path(first["loc"])]).rstrip(".")
        raise bad_field(param, template.format(param=param, msg=first["msg"])) from None


def chat_body(model: str, messages: list[dict[str, Any]], stream: bool, fields: dict[str, Any],
              extras: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions body (JSON-ready): ``fields`` with their None values dropped, then the
    passed-through ``extras``; a stream asks for the usage chunk (``stream_options.include_usage``:
    the API's final event carries the usage)."""
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update({k: v for k, v in fields.items() if v is not None})
    body.update(extras)
    return body


class NativeStream(Protocol):
    """An API's stream translator (:class:`proxy.server.dialects.responses.ResponsesStream`,
    :class:`proxy.server.dialects.messages.MessagesStream`): each call returns the events to send."""

    def start(self) -> list[dict[str, Any]]: ...
    def text(self, piece: str, refusal: bool = False) -> list[dict[str, Any]]: ...
    def tool_call(self, index: int, call_id: str | None, name: str, arguments: str) -> list[dict[str, Any]]: ...
    def finish(self, finish_reason: str | None, chat_usage: dict[str, Any] | None) -> list[dict[str, Any]]: ...
    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Dialect:
    """One API served over the chat pipeline: its request model, ``evidence.endpoint`` name and
    pure translations (request → chat body; chat.completion → native body; a stream translator)."""

    endpoint: str
    request: type[BaseModel]
    to_chat: Callable[[Any], dict[str, Any]]
    to_body: Callable[[Any, dict[str, Any]], dict[str, Any]]
    stream: Callable[[Any], NativeStream]


def named_sse_event(event: dict[str, Any]) -> bytes:
    """One server-sent event named by the object's ``type``: ``event: <type>\\ndata: <json>\\n\\n``."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
