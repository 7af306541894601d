"""``POST /v1/responses``: the OpenAI Responses API through the guardrail pipeline (docs/api.md).

The body is translated to a chat completion (:mod:`proxy.server.dialects.responses`) and answered by
:meth:`proxy.server.flow.pipeline.Gateway.chat` (same guardrails, receipts with ``evidence.endpoint:
"responses"``, metrics); the answer is a ``response`` object, or Responses streaming events when
``stream`` is true. Headers as chat completions (``x-sonate-receipt-id``,
``x-sonate-guardrail-action``, …); errors in OpenAI's format.
"""

from __future__ import annotations

from aiohttp import web

from proxy.server.dialects import responses as responses_api
from proxy.server.dialects.base import Dialect
from proxy.server.errors import Caller
from proxy.server.http.requests import admitted
from proxy.server.http.translated import answer

__all__ = ["DIALECT", "register", "responses"]

DIALECT = Dialect(responses_api.ENDPOINT, responses_api.ResponsesRequest, responses_api.chat_request,
                  responses_api.response_body, responses_api.ResponsesStream)


async def responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``: authenticate (``Authorization: Bearer``), admit under the caller's
    limits (429 ``Retry-After``, as chat completions), then answer."""
    return await admitted(request, _answer)


async def _answer(request: web.Request, who: Caller) -> web.StreamResponse:
    return await answer(request, who, DIALECT)


def register(app: web.Application) -> None:
    """Add the Responses route to ``app``."""
    app.router.add_post("/v1/responses", responses)
