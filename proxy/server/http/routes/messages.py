"""``POST /v1/messages``: the Anthropic Messages API through the guardrail pipeline (docs/api.md).

The body is translated to a chat completion (:mod:`proxy.server.dialects.messages`) and answered by
:meth:`proxy.server.flow.pipeline.Gateway.chat` (same guardrails, receipts with ``evidence.endpoint:
"messages"``, metrics); the answer is a ``message`` object, or Anthropic's streaming events when
``stream`` is true. The key may come as ``x-api-key`` (what the anthropic SDK sends) or
``Authorization: Bearer``. Errors take Anthropic's shape (``{"type": "error", "error": {"type",
"message"}}``, :func:`proxy.server.dialects.messages.error_body`, applied by the error middleware).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.server.dialects import messages as messages_api
from proxy.server.dialects.base import Dialect
from proxy.server.errors import Caller
from proxy.server.http.middleware import ERROR_BODIES
from proxy.server.http.requests import admitted
from proxy.server.http.translated import answer

__all__ = ["DIALECT", "messages", "register"]

DIALECT = Dialect(messages_api.ENDPOINT, messages_api.MessagesRequest, messages_api.chat_request,
                  messages_api.message_body, messages_api.MessagesStream)


async def messages(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``: authenticate (``x-api-key``, else ``Authorization: Bearer``), admit
    under the caller's limits (429 ``Retry-After``, as chat completions), then answer."""
    key = request.headers.get("x-api-key")
    if key and not request.headers.get("Authorization"):  # Anthropic's header, as the proxy's own
        headers = request.headers.copy()
        headers["Authorization"] = f"Bearer {key}"
        request = request.clone(headers=headers)
    return await admitted(request, _answer)


async def _answer(request: web.Request, who: Caller) -> web.StreamResponse:
    return await answer(request, who, DIALECT)


def register(app: web.Application) -> None:
    """Add the Messages route to ``app``; errors on it take Anthropic's shape."""
    app.router.add_post(messages_api.PATH, messages)
    app.setdefault(ERROR_BODIES, {})[messages_api.PATH] = _error_body


def _error_body(status: int, message: str, type: str, code: str | None, param: str | None) -> dict[str, Any]:
    return messages_api.error_body(status, message, code)
