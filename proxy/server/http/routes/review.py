"""The reviewer API: blind two-pass adjudication of apologies and guardrail decisions.

Routes (role ``reviewer`` or ``admin``; the lead is an ``admin``)::

  GET  /v1/review/items                      items the caller can still give a pass on (blind)
       ?reason=apology|trigger|sample  ?limit=N (default 100, max 1000)  ?after=<last_id of the previous page>
       ?status=disputed|agreed|resolved|all  (admin only: the full items with every verdict)
  GET  /v1/review/items/{id}                 one item (blind; reviewers: only items assigned to them)
  POST /v1/review/items/{id}/verdicts        {"pass"?: "A"|"B", "breach", "intent_permissible",
                                              "content_harmful", "expected_policy_id"?, "note"?}
  POST /v1/review/items/{id}/resolve         lead tie-break of a disputed item (admin), same body
                                              without "pass"
  GET  /v1/review/agreement                  Gwet's AC1 between passes, per domain (admin)

Lists are pages in OpenAI's list style, paginated in the store (never the whole queue):
``{"object": "list", "data": [...], "first_id", "last_id", "has_more"}``; pass ``last_id`` as
``after`` for the next page while ``has_more``.

The workflow (queueing, passes, receipts) is :mod:`proxy.server.flow.review.adjudication`; this module only
authenticates, validates and answers.
"""

from __future__ import annotations

from aiohttp import web
from pydantic import ConfigDict, Field

from proxy.kpi.adjudication import Verdict
from proxy.server.errors import GatewayError
from proxy.server.flow.review.adjudication import Adjudications
from proxy.server.http.requests import ADMIN, REVIEWERS, SERVICES, caller, read_model
from proxy.storage.base import MAX_PAGE

__all__ = ["ADJUDICATIONS", "PassRequest", "list_page", "page_query", "register"]

ADJUDICATIONS: web.AppKey[Adjudications] = web.AppKey("adjudications", Adjudications)
"""The app's adjudication workflow (set by :func:`register`)."""

_STATUSES = ("todo", "disputed", "agreed", "resolved", "pending", "awaiting_a", "awaiting_b", "all")


class PassRequest(Verdict):
    """Body of POST /v1/review/items/{id}/verdicts: a :class:`Verdict` plus an optional pass."""

    model_config = ConfigDict(strict=True, extra="forbid")
    pass_: str | None = Field(None, alias="pass", pattern="^[AB]$")


def _list_query(request: web.Request, lead: bool) -> tuple[str, str | None, int, str | None]:
    """(status, reason, limit, after) of ``GET /v1/review/items``; 400 when bad, 403 for a reviewer's status."""
    status = request.query.get("status", "todo")
    if status not in _STATUSES:
        raise GatewayError(400, "status must be todo, pending, awaiting_a, awaiting_b, disputed, agreed, "
                           "resolved or all", param="status", code="invalid_value")
    if status != "todo" and not lead:
        raise GatewayError(403, "Only a lead (role admin) may list items with their verdicts; reviewers see "
                           "status=todo.", type="permission_error", code="insufficient_role", result="auth_error")
    reason = request.query.get("reason")
    if reason not in (None, "apology", "trigger", "sample"):
        raise GatewayError(400, "reason must be apology, trigger or sample", param="reason", code="invalid_value")
    limit, after = page_query(request)
    return status, reason, limit, after


def page_query(request: web.Request) -> tuple[int, str | None]:
    """(limit, after) of a paginated list: ``limit`` 1..1000 (default 100), ``after`` an item id
    of at most 200 characters (None: from the start). GatewayError 400 naming the parameter."""
    raw_limit = request.query.get("limit", "100")
    if not (len(raw_limit) <= 4 and raw_limit.isascii() and raw_limit.isdigit() and 1 <= int(raw_limit) <= MAX_PAGE):
        raise GatewayError(400, f"limit must be an integer from 1 to {MAX_PAGE}", param="limit", code="invalid_value")
    after = request.query.get("after")
    if after is not None and not 1 <= len(after) <= 200:
        raise GatewayError(400, "after must be the last_id of the previous page", param="after", code="invalid_value")
    return int(raw_limit), after


def list_page(data: list[dict], cursor: str | None) -> dict:
    """An OpenAI-style list page: ``{"object": "list", "data", "first_id", "last_id", "has_more"}``;
    ``last_id`` is the cursor to pass as ``after`` (the last entry read, which a filtered page
    may not show)."""
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": cursor if cursor is not None else (data[-1]["id"] if data else None),
            "has_more": cursor is not None}


async def list_items(request: web.Request) -> web.Response:
    """``GET /v1/review/items``."""
    who = caller(request, REVIEWERS)
    status, reason, limit, after = _list_query(request, lead=who.role in ADMIN)
    items, cursor = await request.app[ADJUDICATIONS].list_items(who, status=status, reason=reason, limit=limit,
                                                                after=after)
    return web.json_response(list_page(items, cursor))


async def get_item(request: web.Request) -> web.Response:
    """``GET /v1/review/items/{id}``."""
    who = caller(request, REVIEWERS)
    item = await request.app[ADJUDICATIONS].get_item(who, request.match_info["item_id"], lead=who.role in ADMIN)
    return web.json_response(item)


async def post_verdict(request: web.Request) -> web.Response:
    """``POST /v1/review/items/{id}/verdicts``: 201 with the caller's blind view of the item."""
    who = caller(request, REVIEWERS)
    body, raw = await read_model(request, PassRequest)
    verdict = Verdict(**body.model_dump(exclude={"pass_"}))
    view, receipt_id = await request.app[ADJUDICATIONS].give_pass(
        who, request.match_info["item_id"], verdict, body.pass_, raw)
    return web.json_response(view, status=201, headers={"x-sonate-receipt-id": receipt_id,
                                                        "x-sonate-guardrail-action": "adjudicate"})


async def post_resolve(request: web.Request) -> web.Response:
    """``POST /v1/review/items/{id}/resolve``: the lead's tie-break."""
    who = caller(request, ADMIN)
    verdict, raw = await read_model(request, Verdict)
    item, receipt_id = await request.app[ADJUDICATIONS].resolve_item(who, request.match_info["item_id"], verdict, raw)
    return web.json_response(item, headers={"x-sonate-receipt-id": receipt_id,
                                            "x-sonate-guardrail-action": "adjudicate"})


async def get_agreement(request: web.Request) -> web.Response:
    """``GET /v1/review/agreement``: Gwet's AC1 per domain."""
    caller(request, ADMIN)
    return web.json_response({"coefficient": "gwet_ac1", "data": await request.app[ADJUDICATIONS].agreement()})


def register(app: web.Application) -> None:
    """Add the reviewer routes to ``app`` and queue reviewable interactions from its gateway."""
    svc = app[SERVICES]
    adjudications = Adjudications(svc.store, svc.gateway.receipting, svc.metrics, svc.config.review.sample_rate,
                                  policy_ids=frozenset(p.id for p in svc.engine.policies))
    app[ADJUDICATIONS] = adjudications
    svc.gateway.sealed_hooks.append(adjudications.enqueue)
    app.router.add_get("/v1/review/items", list_items)
    app.router.add_get("/v1/review/items/{item_id}", get_item)
    app.router.add_post("/v1/review/items/{item_id}/verdicts", post_verdict)
    app.router.add_post("/v1/review/items/{item_id}/resolve", post_resolve)
    app.router.add_get("/v1/review/agreement", get_agreement)
