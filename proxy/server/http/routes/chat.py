"""``POST /v1/chat/completions``: OpenAI chat completions through the guardrail pipeline.

Answers the chat.completion as JSON, or as server-sent events when ``stream`` is true; every
answer carries ``x-sonate-receipt-id`` and ``x-sonate-guardrail-action`` (plus the headers of
:attr:`proxy.server.flow.pipeline.ChatResult.headers`). The work is :meth:`Gateway.chat`; a forwarded
stream's headers leave before its first chunk, then its events as they come
(:class:`proxy.server.flow.streaming.StreamedAnswer`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing

from aiohttp import web

from proxy.server.errors import Caller
from proxy.server.flow.wire import ChatCompletionRequest, stream_events
from proxy.server.http.requests import admitted, read_model, send_events, services, start_event_stream

__all__ = ["chat_completions", "register"]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: authenticate, admit under the caller's limits (429 with
    ``Retry-After``, :class:`proxy.server.admission.limits.KeyLimiter`; the slot is held until the answer is
    sent), then :func:`_answer`. A refused request writes no receipt: nothing was screened or forwarded."""
    return await admitted(request, _answer)


async def _answer(request: web.Request, who: Caller) -> web.StreamResponse:
    """Parse the body, run :meth:`Gateway.chat`, send JSON or SSE."""
    req, raw = await read_model(request, ChatCompletionRequest)
    result = await services(request).gateway.chat(raw, req, who, request.headers.get("x-sonate-complexity"))
    headers = {"x-sonate-receipt-id": result.receipt_id, "x-sonate-guardrail-action": result.action,
               **result.headers}
    if not result.stream:
        return web.json_response(result.body, headers=headers)
    response = await start_event_stream(request, headers, result)
    if result.events is None:
        return await send_events(request, response, _each(stream_events(result.body, result.chunks,
                                                                         result.include_usage)))
    async with aclosing(result.events.events()) as events:  # a gone client still gets its receipts
        return await send_events(request, response, events)


async def _each(events: Iterable[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event


def register(app: web.Application) -> None:
    """Add the chat completions route to ``app``."""
    app.router.add_post("/v1/chat/completions", chat_completions)
