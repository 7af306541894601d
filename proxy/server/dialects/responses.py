"""OpenAI Responses API (``POST /v1/responses``) ⇄ Chat Completions: pure translations, no I/O.

The proxy serves the Responses API over its chat pipeline (docs/api.md): :func:`chat_request`
turns a Responses create body into a chat-completions body, :func:`response_body` turns the
pipeline's chat.completion into a ``response`` object, and :class:`ResponsesStream` turns the
pipeline's stream into Responses streaming events (``response.created`` … ``response.completed``).
Shapes follow the OpenAI API reference ("Responses", "Streaming events") and the official SDK's
types (``openai.types.responses``: ``Response``, ``ResponseOutputMessage``,
``ResponseOutputText``, ``ResponseOutputRefusal``, ``ResponseFunctionToolCall``, the
``Response*Event`` classes).

What the translation supports: ``input`` as a string or a list of items (messages with text
parts, ``function_call``, ``function_call_output``), ``instructions``, ``max_output_tokens``,
``temperature``, ``top_p``, function ``tools``, ``tool_choice``, ``parallel_tool_calls``,
``text.format`` (→ ``response_format``), ``text.verbosity``, ``reasoning.effort``, ``metadata``,
``user``, ``stream``. Server-side state (``previous_response_id``, ``conversation``, ``store:
true``, ``background``), built-in tools (web search, file search, computer use…), images, files
and the other fields in :data:`UNSUPPORTED` are a 400 naming the field, never dropped silently.
Any other field the reference does not list is passed to the chat pipeline, where the
pass-through rules of chat completions apply (``server.forbidden_params``, no free text).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proxy.guardrails.fields import REASONING_EFFORTS, Identifier
from proxy.server.dialects.base import Strict, bad_field, chat_body, parse_field, shown
from proxy.server.errors import GatewayError, param_path
from proxy.server.flow.wire import ChatCompletionRequest

__all__ = ["ENDPOINT", "ResponsesRequest", "ResponsesStream", "UNSUPPORTED", "chat_request", "response_body"]

#: ``evidence.endpoint`` of the receipts of a ``POST /v1/responses`` request.
ENDPOINT = "responses"

#: Responses create fields this gateway does not serve, and why (a 400 names the field).
UNSUPPORTED: dict[str, str] = {
    "previous_response_id": "this gateway stores no responses; send the whole conversation in 'input'",
    "conversation": "this gateway stores no conversations; send the whole conversation in 'input'",
    "prompt": "stored prompt templates live on OpenAI's servers; send 'instructions' and 'input'",
    "include": "extra output data (reasoning content, logprobs, tool outputs) is not produced here",
    "max_tool_calls": "built-in tool loops are not run by this gateway",
    "top_logprobs": "log probabilities are not translated by this gateway",
    "context_management": "server-side compaction is not run by this gateway",
    "moderation": "this gateway's own guardrails screen every request",
    "prompt_cache_options": "prompt cache options are specific to OpenAI's servers",
}



class ResponsesRequest(BaseModel):
    """The accepted ``POST /v1/responses`` body (the fields the translation reads; any other
    field stays in ``model_extra``: :data:`UNSUPPORTED` ones are refused by :func:`chat_request`,
    the rest passed through)."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, max_length=256)
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1, max_length=2048)]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    store: bool | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None


class _InputText(Strict):
    type: Literal["input_text"]
    text: str


class _OutputText(Strict):
    type: Literal["output_text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class _Refusal(Strict):
    type: Literal["refusal"]
    refusal: str


class _Message(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None
    phase: str | None = None


class _FunctionCall(Strict):
    type: Literal["function_call"]
    call_id: Identifier
    name: str = Field(min_length=1)
    arguments: str
    id: str | None = None
    status: str | None = None


class _FunctionCallOutput(Strict):
    type: Literal["function_call_output"]
    call_id: Identifier
    output: str | list[dict[str, Any]]
    id: str | None = None
    status: str | None = None


class _FunctionTool(Strict):
    type: Literal["function"]
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


_ITEMS: dict[str, type[Strict]] = {"message": _Message, "function_call": _FunctionCall,
                                    "function_call_output": _FunctionCallOutput}
_PARTS: dict[str, type[Strict]] = {"input_text": _InputText, "output_text": _OutputText, "refusal": _Refusal}


def _unsupported(param: str, why: str) -> GatewayError:
    return bad_field(param, f"'{param}' is not supported by this gateway's Responses API: {why}.",
                     "unsupported_parameter")


def _parts(content: str | list[dict[str, Any]], role: str, where: str) -> str | list[dict[str, Any]]:
    """A message item's content as chat content: a string, or chat ``text`` / ``refusal`` parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content):
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in _PARTS or (kind == "refusal" and role != "assistant") or (
                kind == "output_text" and role != "assistant"):
            raise _unsupported(f"{where}.{i}.type", f"content part type {shown(kind)} in a {role} message is not "
                               "translated (text only: input_text; output_text and refusal in assistant messages)")
        parsed = parse_field(_PARTS[kind], part, f"{where}.{i}")
        if isinstance(parsed, _Refusal):
            parts.append({"type": "refusal", "refusal": parsed.refusal})
        else:
            assert isinstance(parsed, _InputText | _OutputText)
            parts.append({"type": "text", "text": parsed.text})
    return parts


def _messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """``instructions`` (a system message first) and ``input`` as chat messages; 400 naming the item."""
    messages: list[dict[str, Any]] = []
    if req.instructions is not None:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        return [*messages, {"role": "user", "content": req.input}]
    for i, item in enumerate(req.input):
        kind = item.get("type", "message")
        if not isinstance(kind, str) or kind not in _ITEMS:
            raise _unsupported(f"input.{i}.type", f"input items of type {shown(kind)} are not translated (messages, "
                               "function_call and function_call_output are)")
        parsed = parse_field(_ITEMS[kind], item, f"input.{i}")
        if isinstance(parsed, _Message):
            messages.append({"role": parsed.role, "content": _parts(parsed.content, parsed.role, f"input.{i}.content")})
        elif isinstance(parsed, _FunctionCall):
            call = {"id": parsed.call_id, "type": "function",
                    "function": {"name": parsed.name, "arguments": parsed.arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # one assistant turn: its text and its calls
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            assert isinstance(parsed, _FunctionCallOutput)
            output = parsed.output if isinstance(parsed.output, str) else _text_of(
                _parts(parsed.output, "user", f"input.{i}.output"))
            messages.append({"role": "tool", "tool_call_id": parsed.call_id, "content": output})
    return messages


def _text_of(parts: str | list[dict[str, Any]]) -> str:
    return parts if isinstance(parts, str) else "".join(p.get("text", "") for p in parts)


def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    """Function tools as chat tools; a built-in tool (web_search, file_search…) is a 400."""
    if req.tools is None:
        return None
    tools = []
    for i, tool in enumerate(req.tools):
        if tool.get("type") != "function":
            raise _unsupported(f"tools.{i}.type", f"tool type {shown(tool.get('type'))} is a tool OpenAI runs on its "
                               "servers; only function tools are served")
        t = parse_field(_FunctionTool, tool, f"tools.{i}")
        function = {"name": t.name, **{k: v for k, v in (("description", t.description), ("parameters", t.parameters),
                                                           ("strict", t.strict)) if v is not None}}
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str) \
            and set(choice) == {"type", "name"}:
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _unsupported("tool_choice", "only 'none', 'auto', 'required' or {'type': 'function', 'name': …} are served")


def _text_config(text: dict[str, Any] | None) -> dict[str, Any]:
    """``text`` → chat ``response_format`` (and ``verbosity``, a chat field too)."""
    if not text:
        return {}
    unknown = set(text) - {"format", "verbosity"}
    if unknown:
        raise _unsupported(param_path(["text", sorted(unknown)[0]]), "only 'format' and 'verbosity' are translated")
    out: dict[str, Any] = {}
    if text.get("verbosity") is not None:
        out["verbosity"] = text["verbosity"]
    fmt = text.get("format")
    if fmt is None:
        return out
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text" and set(fmt) == {"type"}:
        out["response_format"] = {"type": "text"}
    elif kind == "json_object" and set(fmt) == {"type"}:
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema" and isinstance(fmt.get("name"), str) and isinstance(fmt.get("schema"), dict) \
            and set(fmt) <= {"type", "name", "schema", "description", "strict"}:
        out["response_format"] = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    else:
        raise bad_field("text.format", "Invalid value for 'text.format': expected {'type': 'text'}, "
                        "{'type': 'json_object'} or {'type': 'json_schema', 'name', 'schema', 'description'?, 'strict'?}")
    return out


def _refuse_unsupported(req: ResponsesRequest) -> None:
    """400 for a field of :data:`UNSUPPORTED` (non-null) or a value the gateway cannot honour."""
    for name, why in UNSUPPORTED.items():
        if (req.model_extra or {}).get(name) is not None:
            raise _unsupported(name, why)
    if req.store:
        raise _unsupported("store", "this gateway stores no responses; send store: false or leave it out")
    if req.background:
        raise _unsupported("background", "responses are answered in the request, not in the background")
    if req.truncation == "auto":
        raise _unsupported("truncation", "the gateway does not truncate conversations; send 'disabled' or leave it out")
    if req.stream_options and any(v for v in req.stream_options.values()):
        raise _unsupported("stream_options", "no stream option is translated")
    reasoning = req.reasoning or {}
    if set(reasoning) - {"effort", "summary", "generate_summary"} or reasoning.get("summary") is not None \
            or reasoning.get("generate_summary") is not None:
        raise _unsupported("reasoning", "only 'effort' is translated (reasoning summaries are not produced)")
    if reasoning.get("effort") is not None and reasoning["effort"] not in REASONING_EFFORTS:
        raise bad_field("reasoning.effort",
                        f"Invalid value for 'reasoning.effort': expected one of {list(REASONING_EFFORTS)}")


def chat_request(req: ResponsesRequest) -> dict[str, Any]:
    """The chat-completions body (JSON-ready dict) that serves ``req``.

    ``max_output_tokens`` → ``max_tokens``; ``reasoning.effort`` → ``reasoning_effort``; a stream
    asks for the usage chunk (``stream_options.include_usage``: ``response.completed`` carries the
    usage). Raises GatewayError 400 (``unsupported_parameter`` or ``invalid_value``) naming the
    field: an :data:`UNSUPPORTED` field, a built-in tool, a non-text content part, an unknown item
    type, a field of the Chat Completions API that is not one of the Responses API (``messages``).
    """
    _refuse_unsupported(req)
    extras = {k: v for k, v in (req.model_extra or {}).items() if v is not None}
    for name in extras:
        if name in ChatCompletionRequest.model_fields:
            raise bad_field(name, f"'{name}' is a Chat Completions parameter, not one of the Responses API.",
                       "unsupported_parameter")
    fields = {"max_tokens": req.max_output_tokens, "temperature": req.temperature, "top_p": req.top_p,
              "tools": _tools(req), "tool_choice": _tool_choice(req.tool_choice),
              "parallel_tool_calls": req.parallel_tool_calls, "metadata": req.metadata, "user": req.user,
              "reasoning_effort": (req.reasoning or {}).get("effort"), **_text_config(req.text)}
    return chat_body(req.model, _messages(req), req.stream, fields, extras)


# -- answers --------------------------------------------------------------------------------------

def new_response_id() -> str:
    """A fresh ``resp_…`` id."""
    return "resp_" + uuid.uuid4().hex


def usage(chat_usage: dict[str, Any] | None) -> dict[str, Any]:
    """Chat ``usage`` (prompt/completion tokens) as Responses ``usage`` (input/output tokens)."""
    u = chat_usage or {}
    prompt, completion = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((u.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": int(u.get("total_tokens") or prompt + completion)}


def _skeleton(req: ResponsesRequest, response_id: str, created_at: int, status: str) -> dict[str, Any]:
    """A ``response`` object without output: the request's settings echoed as OpenAI does."""
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status,
            "background": False, "error": None, "incomplete_details": None, "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens, "model": req.model, "output": [],
            "parallel_tool_calls": req.parallel_tool_calls if req.parallel_tool_calls is not None else True,
            "previous_response_id": None, "reasoning": {"effort": (req.reasoning or {}).get("effort"), "summary": None},
            "store": False, "temperature": req.temperature, "text": req.text or {"format": {"type": "text"}},
            "tool_choice": req.tool_choice or "auto", "tools": req.tools or [], "top_p": req.top_p,
            "truncation": "disabled", "usage": None, "user": req.user, "metadata": req.metadata or {}}


def _status(finish_reason: str | None, text_sent: bool) -> tuple[str, dict[str, Any] | None]:
    """(``status``, ``incomplete_details``) for a chat ``finish_reason``: ``length`` → incomplete
    (``max_output_tokens``); ``content_filter`` after output text was sent (a guardrail stopped a
    streamed answer under way) → incomplete (``content_filter``); anything else completed (a
    refusal before any text is a completed response whose message holds a ``refusal`` part)."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "content_filter" and text_sent:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _message_item(item_id: str, part: dict[str, Any], status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": [part]}


def _function_call_item(call: dict[str, Any], status: str, item_id: str | None = None) -> dict[str, Any]:
    function = call.get("function") or {}
    return {"id": item_id or "fc_" + uuid.uuid4().hex, "type": "function_call", "status": status,
            "call_id": call.get("id") or "call_" + uuid.uuid4().hex, "name": function.get("name") or "",
            "arguments": function.get("arguments") or ""}


def response_body(req: ResponsesRequest, chat: dict[str, Any], response_id: str | None = None) -> dict[str, Any]:
    """The ``response`` object for the pipeline's chat.completion ``chat``.

    Output: one assistant message item (an ``output_text`` part; a ``refusal`` part when a
    guardrail refused, i.e. ``finish_reason: "content_filter"``) when there is text, then one
    ``function_call`` item per tool call. ``status`` per :func:`_status`.
    """
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    finish = choice.get("finish_reason")
    text = message.get("content") or ""
    output: list[dict[str, Any]] = []
    if text or not message.get("tool_calls"):
        part = {"type": "refusal", "refusal": text} if finish == "content_filter" else {
            "type": "output_text", "text": text, "annotations": [], "logprobs": []}
        output.append(_message_item("msg_" + uuid.uuid4().hex, part, "completed"))
    output += [_function_call_item(c, "completed") for c in message.get("tool_calls") or []]
    status, incomplete = _status(finish, text_sent=False)
    return {**_skeleton(req, response_id or new_response_id(), int(chat.get("created") or time.time()), status),
            "incomplete_details": incomplete, "output": output, "usage": usage(chat.get("usage")),
            **({"completed_at": int(time.time())} if status == "completed" else {})}


class ResponsesStream:
    """Responses streaming events for one answer, fed with what the chat pipeline streams.

    Calls, in order: :meth:`start`, then :meth:`text` / :meth:`tool_call` as deltas come,
    :meth:`finish` (or :meth:`fail`). Each returns the event objects to send (``type`` is also
    the SSE ``event:`` name; ``sequence_number`` counts from 0). Event order (OpenAI's):
    ``response.created``, ``response.in_progress``; per output item ``response.output_item.added``,
    for a message ``response.content_part.added``, ``response.output_text.delta``… (or
    ``response.refusal.delta``), ``response.output_text.done`` (``response.refusal.done``),
    ``response.content_part.done``; for a function call ``response.function_call_arguments.delta``…,
    ``response.function_call_arguments.done``; then ``response.output_item.done``; last
    ``response.completed`` (or ``response.incomplete``, see :func:`_status`; after :meth:`fail`,
    ``error`` and ``response.failed``).
    """

    def __init__(self, req: ResponsesRequest, response_id: str | None = None) -> None:
        """No I/O; ``response_id`` defaults to a fresh ``resp_…``."""
        self.response = _skeleton(req, response_id or new_response_id(), int(time.time()), "in_progress")
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        #: (kind, output index) of the item being streamed: "output_text", "refusal" or ("call", chat index).
        self.open: tuple[Any, int] | None = None
        self.text_sent = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=dict(self.response)),
                self._event("response.in_progress", response=dict(self.response))]

    def _close(self) -> list[dict[str, Any]]:
        """The done events of the item being streamed (if any)."""
        if self.open is None:
            return []
        _, index = self.open
        self.open = None
        item = self.output[index]
        item["status"] = "completed"
        if item["type"] == "function_call":
            return [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                name=item["name"], arguments=item["arguments"]),
                    self._event("response.output_item.done", output_index=index, item=dict(item))]
        part = item["content"][0]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        done = (self._event("response.refusal.done", **ids, refusal=part["refusal"]) if part["type"] == "refusal"
                else self._event("response.output_text.done", **ids, text=part["text"], logprobs=[]))
        return [done, self._event("response.content_part.done", **ids, part=dict(part)),
                self._event("response.output_item.done", output_index=index, item=dict(item))]

    def text(self, piece: str, refusal: bool = False) -> list[dict[str, Any]]:
        """Events for a content delta (``refusal``: the text is a guardrail's refusal)."""
        kind = "refusal" if refusal else "output_text"
        events: list[dict[str, Any]] = []
        if self.open is None or self.open[0] != kind:
            events += self._close()
            part: dict[str, Any] = {"type": "refusal", "refusal": ""} if refusal else {
                "type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item = _message_item("msg_" + uuid.uuid4().hex, part, "in_progress")
            self.output.append(item)
            self.open = (kind, len(self.output) - 1)
            events += [self._event("response.output_item.added", output_index=self.open[1],
                                   item={**item, "content": []}),
                       self._event("response.content_part.added", item_id=item["id"], output_index=self.open[1],
                                   content_index=0, part=dict(part))]
        index = self.open[1]
        item = self.output[index]
        part = item["content"][0]
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if refusal:
            part["refusal"] += piece
            events.append(self._event("response.refusal.delta", **ids, delta=piece))
        else:
            part["text"] += piece
            self.text_sent = self.text_sent or bool(piece)
            events.append(self._event("response.output_text.delta", **ids, delta=piece, logprobs=[]))
        return events

    def tool_call(self, index: int, call_id: str | None, name: str, arguments: str) -> list[dict[str, Any]]:
        """Events for a tool-call delta of the chat stream (``index``: the chat tool call's index;
        its first delta carries ``call_id`` and the name)."""
        events: list[dict[str, Any]] = []
        if self.open is None or self.open[0] != ("call", index):
            events += self._close()
            self.output.append(_function_call_item({"id": call_id, "function": {"name": name}}, "in_progress"))
            self.open = (("call", index), len(self.output) - 1)
            events.append(self._event("response.output_item.added", output_index=self.open[1],
                                      item=dict(self.output[-1])))
        else:
            self.output[self.open[1]]["name"] += name
        item = self.output[self.open[1]]
        if arguments:
            item["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", item_id=item["id"],
                                      output_index=self.open[1], delta=arguments))
        return events

    def finish(self, finish_reason: str | None, chat_usage: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The remaining done events and ``response.completed`` (or ``response.incomplete``)."""
        events = self._close()
        status, incomplete = _status(finish_reason, self.text_sent)
        self.response.update(status=status, incomplete_details=incomplete, usage=usage(chat_usage),
                             output=self.output)
        if status == "completed":
            self.response["completed_at"] = int(time.time())
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=self.response)]

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """An ``error`` event (the OpenAI error object's code and message) and ``response.failed``."""
        events = self._close()
        detail = error.get("error") or {}
        message = str(detail.get("message") or "The response failed.")
        self.response.update(status="failed", error={"code": "server_error", "message": message}, output=self.output)
        return [*events, self._event("error", code=detail.get("code"), message=message, param=detail.get("param")),
                self._event("response.failed", response=self.response)]
