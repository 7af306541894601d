"""Serve another API's wire format over the chat pipeline: ``POST /v1/responses`` (OpenAI Responses)
and ``POST /v1/messages`` (Anthropic Messages), docs/api.md.

A :class:`proxy.server.dialects.base.Dialect` names the pure translations of one API
(:mod:`proxy.server.dialects.responses`, :mod:`proxy.server.dialects.messages`). :func:`answer` reads and
validates the body, translates it to a chat-completions body, validates that with the chat wire
model, runs :meth:`Gateway.chat` (the same guardrails, provider call through litellm, receipts with
``evidence.endpoint`` and metrics as chat completions) and translates the result back: a JSON body,
or the API's own server-sent events
(``event: <type>`` + ``data: <json>``) built from the chat stream's chunks as they come.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any, AsyncGenerator

from aiohttp import web
from pydantic import ValidationError

from proxy.server.dialects.base import Dialect, NativeStream, named_sse_event
from proxy.server.errors import Caller
from proxy.server.flow.pipeline import ChatResult
from proxy.server.flow.wire import ChatCompletionRequest
from proxy.server.http.requests import read_model, send_events, services, start_event_stream, validation_error

__all__ = ["answer", "chat_chunks", "translate_stream"]


async def chat_chunks(result: ChatResult) -> AsyncGenerator[dict[str, Any], None]:
    """The chat stream of ``result`` as objects: ``chat.completion.chunk`` dicts, or an
    ``{"error": …}`` object (then nothing more). A forwarded stream's SSE events are parsed as the
    pipeline yields them (each is one ``data: <json>`` event; ``[DONE]`` ends it); an answer the
    gateway wrote itself (a refusal or escalation on input) is one chunk holding the whole answer."""
    if result.events is None:
        choice = (result.body.get("choices") or [{}])[0]
        message = choice.get("message") or {}
        calls = [{"index": i, **c} for i, c in enumerate(message.get("tool_calls") or [])]
        delta = {"content": message.get("content") or "", **({"tool_calls": calls} if calls else {})}
        yield {"choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason")}],
               "usage": result.body.get("usage")}
        return
    async with aclosing(result.events.events()) as events:  # a gone client still gets its receipts
        async for event in events:
            data = event.decode("utf-8").removeprefix("data: ").strip()
            if data == "[DONE]":
                return
            yield json.loads(data)


async def translate_stream(result: ChatResult, native: NativeStream) -> AsyncGenerator[dict[str, Any], None]:
    """``native``'s events for the chat stream of ``result``. Content in the chunk whose
    ``finish_reason`` is ``content_filter`` is a guardrail's refusal (the pipeline sends the
    policy's apology there, docs/operations.md "Streams")."""
    for event in native.start():
        yield event
    finish: str | None = None
    usage: dict[str, Any] | None = None
    async with aclosing(chat_chunks(result)) as chunks:  # closed (receipts appended) if the client goes
        async for chunk in chunks:
            if chunk.get("error") is not None:
                for event in native.fail(chunk):
                    yield event
                return
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                finish = choice.get("finish_reason") or finish
                events: list[dict[str, Any]] = []
                if delta.get("content"):
                    events += native.text(delta["content"], refusal=choice.get("finish_reason") == "content_filter")
                for call in delta.get("tool_calls") or []:
                    function = call.get("function") or {}
                    events += native.tool_call(int(call.get("index") or 0), call.get("id"),
                                               function.get("name") or "", function.get("arguments") or "")
                for event in events:
                    yield event
    for event in native.finish(finish, usage):
        yield event


async def answer(request: web.Request, who: Caller, dialect: Dialect) -> web.StreamResponse:
    """Parse and translate the body (400 naming the field), run :meth:`Gateway.chat` with
    ``endpoint=dialect.endpoint``, send the native JSON or event stream with the receipt headers
    of chat completions (``x-sonate-receipt-id``, ``x-sonate-guardrail-action``, …)."""
    req, raw = await read_model(request, dialect.request)
    try:
        chat = ChatCompletionRequest.model_validate_json(json.dumps(dialect.to_chat(req)))
    except ValidationError as exc:
        raise validation_error(exc) from None
    result = await services(request).gateway.chat(raw, chat, who, request.headers.get("x-sonate-complexity"),
                                                  endpoint=dialect.endpoint)
    headers = {"x-sonate-receipt-id": result.receipt_id, "x-sonate-guardrail-action": result.action,
               **result.headers}
    if not result.stream:
        return web.json_response(dialect.to_body(req, result.body), headers=headers)
    response = await start_event_stream(request, headers, result)
    async with aclosing(translate_stream(result, dialect.stream(req))) as events:  # a gone client: receipts too
        return await send_events(request, response, (named_sse_event(event) async for event in events))
