"""Anthropic Messages API (``POST /v1/messages``) ⇄ Chat Completions: pure translations, no I/O.

The proxy serves the Messages API over its chat pipeline (docs/api.md): :func:`chat_request`
turns a Messages create body into a chat-completions body, :func:`message_body` turns the
pipeline's chat.completion into a ``message`` object, :class:`MessagesStream` turns the pipeline's
stream into Anthropic's streaming events (``message_start``, ``content_block_start``,
``content_block_delta``, ``content_block_stop``, ``message_delta``, ``message_stop``) and
:func:`error_body` gives Anthropic's error shape. Shapes follow Anthropic's API reference
("Messages", "Streaming Messages", "Errors") and the official SDK's types (``anthropic.types``:
``Message``, ``TextBlock``, ``ToolUseBlock``, ``StopReason``, ``RefusalStopDetails``, the
``Raw*Event`` classes).

What the translation supports: ``system`` (a string or text blocks), ``messages`` whose content is
a string or ``text`` / ``tool_use`` / ``tool_result`` blocks, ``max_tokens`` (required),
``stop_sequences``, ``temperature``, ``top_p``, ``top_k`` (passed through), custom ``tools``,
``tool_choice``, ``metadata.user_id`` (→ ``user``), ``stream``. ``cache_control`` marks are
accepted and have no effect (a caching hint; the answer does not depend on it). Images,
documents, thinking blocks, server tools and the fields in :data:`UNSUPPORTED` are a 400 naming
the field, never dropped silently.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.guardrails.fields import Identifier
from proxy.server.dialects.base import Strict, bad_field, chat_body, parse_field, shown
from proxy.server.errors import GatewayError
from proxy.server.flow.wire import ChatCompletionRequest

__all__ = ["ENDPOINT", "PATH", "MessagesRequest", "MessagesStream", "UNSUPPORTED", "chat_request", "error_body",
           "message_body", "stop_reason"]

#: ``evidence.endpoint`` of the receipts of a ``POST /v1/messages`` request.
ENDPOINT = "messages"
#: The route whose errors take Anthropic's shape (proxy.server.http.middleware).
PATH = "/v1/messages"

#: Messages create fields this gateway does not serve, and why (a 400 names the field).
UNSUPPORTED: dict[str, str] = {
    "thinking": "extended thinking is not translated to the chat providers behind this gateway",
    "container": "code-execution containers run on Anthropic's servers",
    "mcp_servers": "the MCP connector runs on Anthropic's servers",
    "context_management": "server-side context editing is not run by this gateway",
    "service_tier": "Anthropic's service tiers do not map to the chat providers behind this gateway",
    "output_config": "output configuration is not translated",
    "inference_geo": "inference geography is specific to Anthropic's servers",
    "speed": "speed modes are specific to Anthropic's servers",
    "diagnostics": "diagnostics are specific to Anthropic's servers",
    "user_profile_id": "Anthropic user profiles do not exist behind this gateway; send metadata.user_id",
    "workspace_id": "Anthropic workspaces do not exist behind this gateway",
}

#: Anthropic's error ``type`` by HTTP status ("Errors" in Anthropic's API reference); other 4xx
#: are ``invalid_request_error``, other 5xx ``api_error`` (``overloaded_error`` for the proxy's
#: ``overloaded`` 503).
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}

#: Wording of a 400 about a field, as Anthropic words them ("messages.0.content: Field required").
MESSAGE = "{param}: {msg}"

#: Chat ``finish_reason`` → Anthropic ``stop_reason``.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}



class MessagesRequest(BaseModel):
    """The accepted ``POST /v1/messages`` body (the fields the translation reads; other fields stay
    in ``model_extra``: :data:`UNSUPPORTED` ones are refused, the rest, e.g. ``top_k``, passed through)."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, max_length=256)
    max_tokens: int = Field(ge=1)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=2048)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream: bool = False
    cache_control: dict[str, Any] | None = None


class _Text(Strict):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None
    citations: None = None


class _ToolUse(Strict):
    type: Literal["tool_use"]
    id: Identifier
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None
    caller: None = None  # a tool_use block replayed from an SDK Message object carries these as null
    toolset_name: None = None


class _ToolResult(Strict):
    type: Literal["tool_result"]
    tool_use_id: Identifier
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None


class _Message(Strict):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class _Tool(Strict):
    name: str = Field(min_length=1)
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None
    strict: bool | None = None
    cache_control: dict[str, Any] | None = None


_BLOCKS: dict[str, dict[str, type[Strict]]] = {
    "user": {"text": _Text, "tool_result": _ToolResult},
    "assistant": {"text": _Text, "tool_use": _ToolUse},
}
#: Prefix of a tool result the client marked ``is_error`` (chat tool messages have no such flag).
TOOL_ERROR_PREFIX = "[tool error] "


def _unsupported(param: str, why: str) -> GatewayError:
    return bad_field(param, f"{param}: not supported by this gateway's Messages API: {why}.", "unsupported_parameter")


def _block(block: dict[str, Any], role: str, where: str) -> Any:
    kind = block.get("type")
    allowed = _BLOCKS[role]
    if not isinstance(kind, str) or kind not in allowed:
        raise _unsupported(f"{where}.type", f"content blocks of type {shown(kind)} in a {role} message are not "
                           f"translated ({', '.join(sorted(allowed))} are)")
    return parse_field(allowed[kind], block, where, template=MESSAGE)


def _text_blocks(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    """Text blocks (system, tool results) as chat text parts; any other block is a 400."""
    parts = []
    for i, block in enumerate(blocks):
        if block.get("type") != "text":
            raise _unsupported(f"{where}.{i}.type", f"content blocks of type {shown(block.get('type'))} are not "
                               "translated here (text is)")
        parts.append({"type": "text", "text": parse_field(_Text, block, f"{where}.{i}", template=MESSAGE).text})
    return parts


def _turn(message: _Message, i: int) -> list[dict[str, Any]]:
    """One Messages turn as chat messages: a user turn's ``tool_result`` blocks become ``tool``
    messages (in order) before its text; an assistant turn's ``tool_use`` blocks its ``tool_calls``."""
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for j, raw in enumerate(message.content):
        where = f"messages.{i}.content.{j}"
        block = _block(raw, message.role, where)
        if isinstance(block, _Text):
            texts.append({"type": "text", "text": block.text})
        elif isinstance(block, _ToolUse):
            calls.append({"id": block.id, "type": "function",
                          "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}})
        else:
            content = block.content
            text = content if isinstance(content, str) else "".join(
                p["text"] for p in _text_blocks(content or [], f"{where}.content"))
            tools.append({"role": "tool", "tool_call_id": block.tool_use_id,
                          "content": TOOL_ERROR_PREFIX + text if block.is_error else text})
    if message.role == "assistant":
        return [{"role": "assistant", "content": texts or None, **({"tool_calls": calls} if calls else {})}] \
            if texts or calls else [{"role": "assistant", "content": ""}]
    return tools + ([{"role": "user", "content": texts}] if texts or not tools else [])


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Custom tools as chat function tools; a server tool (``web_search_…``, ``bash_…``) is a 400."""
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") not in (None, "custom"):
            raise _unsupported(f"tools.{i}.type", f"tool type {shown(tool.get('type'))} is a tool Anthropic runs or "
                               "defines; only custom tools (name, description, input_schema) are served")
        t = parse_field(_Tool, tool, f"tools.{i}", template=MESSAGE)
        function = {"name": t.name, "parameters": t.input_schema,
                    **{k: v for k, v in (("description", t.description), ("strict", t.strict)) if v is not None}}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any] | None) -> dict[str, Any]:
    """Anthropic ``tool_choice`` → chat ``tool_choice`` (and ``parallel_tool_calls``)."""
    if choice is None:
        return {}
    kind = choice.get("type")
    allowed = {"auto": {"type", "disable_parallel_tool_use"}, "any": {"type", "disable_parallel_tool_use"},
               "tool": {"type", "name", "disable_parallel_tool_use"}, "none": {"type"}}
    if not isinstance(kind, str) or kind not in allowed or not set(choice) <= allowed[kind] or (
            kind == "tool" and not isinstance(choice.get("name"), str)) or not isinstance(
            choice.get("disable_parallel_tool_use", False), bool):
        raise bad_field("tool_choice", "tool_choice: expected {'type': 'auto' | 'any' | 'none'} or "
                                  "{'type': 'tool', 'name': …} (with disable_parallel_tool_use?)")
    out: dict[str, Any] = {"tool_choice": {"auto": "auto", "any": "required", "none": "none"}.get(kind) or {
        "type": "function", "function": {"name": choice.get("name")}}}
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def _user(metadata: dict[str, Any] | None) -> str | None:
    if not metadata:
        return None
    if set(metadata) - {"user_id"} or not isinstance(metadata.get("user_id"), (str, type(None))):
        raise bad_field("metadata", "metadata: only 'user_id' (a string) is accepted")
    return metadata.get("user_id")


def chat_request(req: MessagesRequest) -> dict[str, Any]:
    """The chat-completions body (JSON-ready dict) that serves ``req``.

    ``system`` → a first system message; ``stop_sequences`` → ``stop``; ``metadata.user_id`` →
    ``user``; a stream asks for the usage chunk (``message_delta`` carries the usage). Raises
    GatewayError 400 naming the field: an :data:`UNSUPPORTED` field, an image/document/thinking
    block, a server tool, a field of the Chat Completions API that is not one of the Messages API.
    """
    extras = {k: v for k, v in (req.model_extra or {}).items() if v is not None}
    for name in extras:
        if name in UNSUPPORTED:
            raise _unsupported(name, UNSUPPORTED[name])
        if name in ChatCompletionRequest.model_fields:
            raise bad_field(name, f"{name}: a Chat Completions parameter, not one of the Messages API.",
                       "unsupported_parameter")
    messages: list[dict[str, Any]] = []
    if req.system is not None:
        messages.append({"role": "system", "content": req.system if isinstance(req.system, str)
                         else _text_blocks(req.system, "system")})
    for i, raw in enumerate(req.messages):
        messages += _turn(parse_field(_Message, raw, f"messages.{i}", template=MESSAGE), i)
    fields = {"max_tokens": req.max_tokens, "stop": req.stop_sequences, "temperature": req.temperature,
              "top_p": req.top_p, "tools": _tools(req.tools), "user": _user(req.metadata),
              **_tool_choice(req.tool_choice)}
    return chat_body(req.model, messages, req.stream, fields, extras)


# -- answers --------------------------------------------------------------------------------------

def new_message_id() -> str:
    """A fresh ``msg_…`` id."""
    return "msg_" + uuid.uuid4().hex


def stop_reason(finish_reason: str | None) -> str:
    """Anthropic ``stop_reason`` of a chat ``finish_reason`` (:data:`STOP_REASONS`; else ``end_turn``).
    A guardrail refusal (``content_filter``) is ``refusal``, the value Anthropic documents for
    "streaming classifiers intervene to handle potential policy violations"."""
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def _stop_details(reason: str) -> dict[str, Any] | None:
    """``stop_details`` of a refusal (``RefusalStopDetails``; the gateway's policies have no
    Anthropic category), None otherwise."""
    return {"type": "refusal", "category": None, "explanation": None} if reason == "refusal" else None


def usage(chat_usage: dict[str, Any] | None) -> dict[str, int]:
    """Chat ``usage`` as Anthropic ``usage`` (``input_tokens``, ``output_tokens``)."""
    u = chat_usage or {}
    return {"input_tokens": int(u.get("prompt_tokens") or 0), "output_tokens": int(u.get("completion_tokens") or 0)}


def _tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as a ``tool_use`` block's ``input`` object (``{}`` when the
    model wrote something that is not a JSON object)."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def message_body(req: MessagesRequest, chat: dict[str, Any], message_id: str | None = None) -> dict[str, Any]:
    """The ``message`` object for the pipeline's chat.completion ``chat``: a ``text`` block (the
    answer, the guardrail's apology or the escalation notice) unless the answer is only tool calls,
    then one ``tool_use`` block per tool call; ``stop_reason`` per :func:`stop_reason`."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    calls = message.get("tool_calls") or []
    text = message.get("content") or ""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text or not calls else []
    content += [{"type": "tool_use", "id": c.get("id") or "toolu_" + uuid.uuid4().hex,
                 "name": (c.get("function") or {}).get("name") or "",
                 "input": _tool_input((c.get("function") or {}).get("arguments") or "")} for c in calls]
    reason = stop_reason(choice.get("finish_reason"))
    return {"id": message_id or new_message_id(), "type": "message", "role": "assistant", "model": req.model,
            "content": content, "stop_reason": reason, "stop_sequence": None, "stop_details": _stop_details(reason),
            "usage": usage(chat.get("usage"))}


def error_body(status: int, message: str, code: str | None = None) -> dict[str, Any]:
    """Anthropic's error object: ``{"type": "error", "error": {"type", "message"}}`` (type by
    :data:`ERROR_TYPES`)."""
    kind = "overloaded_error" if code == "overloaded" else ERROR_TYPES.get(status) or (
        "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessagesStream:
    """Anthropic streaming events for one answer, fed with what the chat pipeline streams.

    Calls, in order: :meth:`start`, then :meth:`text` / :meth:`tool_call` as deltas come,
    :meth:`finish` (or :meth:`fail`). Each returns the event objects to send (``type`` is also the
    SSE ``event:`` name). Order (Anthropic's): ``message_start``; per content block
    ``content_block_start``, ``content_block_delta``… (``text_delta`` or ``input_json_delta``),
    ``content_block_stop``; ``message_delta`` (``stop_reason``, usage); ``message_stop``. A failure
    after the start is an ``error`` event (:meth:`fail`).
    """

    def __init__(self, req: MessagesRequest, message_id: str | None = None) -> None:
        """No I/O; ``message_id`` defaults to a fresh ``msg_…``."""
        self.message: dict[str, Any] = {"id": message_id or new_message_id(), "type": "message", "role": "assistant",
                        "model": req.model, "content": [], "stop_reason": None, "stop_sequence": None,
                        "usage": {"input_tokens": 0, "output_tokens": 0}}
        self.blocks = 0
        #: The block being streamed: "text" or ("tool", chat index); None between blocks.
        self.open: Any = None

    def start(self) -> list[dict[str, Any]]:
        """``message_start``."""
        return [{"type": "message_start", "message": self.message}]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        self.open = None
        return [{"type": "content_block_stop", "index": self.blocks - 1}]

    def text(self, piece: str, refusal: bool = False) -> list[dict[str, Any]]:
        """Events for a content delta (a refusal's text is a text block too: the ``refusal``
        ``stop_reason`` marks it)."""
        events: list[dict[str, Any]] = []
        if self.open != "text":
            events += self._close()
            events.append({"type": "content_block_start", "index": self.blocks,
                           "content_block": {"type": "text", "text": ""}})
            self.open, self.blocks = "text", self.blocks + 1
        if piece:
            events.append({"type": "content_block_delta", "index": self.blocks - 1,
                           "delta": {"type": "text_delta", "text": piece}})
        return events

    def tool_call(self, index: int, call_id: str | None, name: str, arguments: str) -> list[dict[str, Any]]:
        """Events for a tool-call delta of the chat stream (its first delta carries id and name)."""
        events: list[dict[str, Any]] = []
        if self.open != ("tool", index):
            events += self._close()
            events.append({"type": "content_block_start", "index": self.blocks, "content_block": {
                "type": "tool_use", "id": call_id or "toolu_" + uuid.uuid4().hex, "name": name, "input": {}}})
            self.open, self.blocks = ("tool", index), self.blocks + 1
        if arguments:
            events.append({"type": "content_block_delta", "index": self.blocks - 1,
                           "delta": {"type": "input_json_delta", "partial_json": arguments}})
        return events

    def finish(self, finish_reason: str | None, chat_usage: dict[str, Any] | None) -> list[dict[str, Any]]:
        """``content_block_stop`` of the last block, ``message_delta`` and ``message_stop``."""
        events = self._close() if self.blocks else [*self.text(""), *self._close()]
        reason = stop_reason(finish_reason)
        delta: dict[str, Any] = {"stop_reason": reason, "stop_sequence": None}
        if (details := _stop_details(reason)) is not None:
            delta["stop_details"] = details
        u = usage(chat_usage)
        return [*events, {"type": "message_delta", "delta": delta,
                          "usage": {"output_tokens": u["output_tokens"], "input_tokens": u["input_tokens"]}},
                {"type": "message_stop"}]

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """An ``error`` event in Anthropic's shape (the OpenAI error object's message)."""
        detail = error.get("error") or {}
        code = detail.get("code")
        return [error_body(503 if code in ("overloaded", "ledger_unavailable") else 500,
                           str(detail.get("message") or "The message failed."), code)]
