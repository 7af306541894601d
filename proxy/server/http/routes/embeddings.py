"""``POST /v1/embeddings``: OpenAI embeddings with the inputs screened and receipted.

Privacy masks every input string before it leaves (the vectors are those of the masked text);
Safety judges the inputs when ``server.embeddings_safety`` is on (a refusal is a 400
``content_policy_violation`` carrying the receipt headers). Every answer carries
``x-sonate-receipt-id``, ``x-sonate-guardrail-action`` and ``x-sonate-request-id``. The work is
:meth:`proxy.server.flow.embeddings.Embeddings.embed`.
"""

from __future__ import annotations

from aiohttp import web

from proxy.server.errors import Caller
from proxy.server.flow.embeddings import Embeddings
from proxy.server.flow.wire import EmbeddingRequest
from proxy.server.http.requests import admitted, read_model, services

__all__ = ["embeddings", "register"]


async def embeddings(request: web.Request) -> web.Response:
    """``POST /v1/embeddings``: authenticate, admit under the caller's limits (429 ``Retry-After``,
    as chat completions), then :func:`_answer`."""
    return await admitted(request, _answer)


async def _answer(request: web.Request, who: Caller) -> web.Response:
    """Parse the body, run the embeddings step, send the embeddings list as JSON."""
    req, raw = await read_model(request, EmbeddingRequest)
    result = await Embeddings(services(request).gateway).embed(raw, req, who,
                                                               request.headers.get("x-sonate-complexity"))
    return web.json_response(result.body, headers={"x-sonate-receipt-id": result.receipt_id,
                                                   "x-sonate-guardrail-action": result.action, **result.headers})


def register(app: web.Application) -> None:
    """Add the embeddings route to ``app``."""
    app.router.add_post("/v1/embeddings", embeddings)
