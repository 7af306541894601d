"""Escalated requests: a client's view of its own case, and the admins' review queue.

Routes::

  GET  /v1/escalations/{id}                 status of one's own escalated request (no messages)
  GET  /v1/admin/escalations                review queue (admin)   ?status=pending|resolved|aborted|all
                                            ?limit=N (1..1000, default 100) ?after=<id of the last case seen>
  POST /v1/admin/escalations/{id}/resolve   record a reviewer decision (admin), receipted

The workflow is :mod:`proxy.review.escalations`.
"""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from proxy.review.escalations import STATUSES
from proxy.server.errors import GatewayError
from proxy.server.requests import ADMIN, caller, read_model, services
from proxy.server.routes.review import list_page, page_query

__all__ = ["ResolveRequest", "register"]


class ResolveRequest(BaseModel):
    """Body of POST /v1/admin/escalations/{id}/resolve."""

    model_config = ConfigDict(strict=True, extra="forbid")
    decision: Literal["approve", "reject"]
    note: str = Field("", max_length=4000)


async def get_escalation(request: web.Request) -> web.Response:
    """``GET /v1/escalations/{id}``: admins read every case, anyone else (clients, reviewers) only the
    cases of their own requests; 404 otherwise (issue 13: a reviewer read any client's case)."""
    who = caller(request)
    case_id = request.match_info["case_id"]
    case = await services(request).gateway.escalations.get(case_id)
    if who.role != "admin" and case.get("actor") != who.actor:
        raise GatewayError(404, "No escalation with this id.", code="not_found")  # ids are not echoed (issue 13)
    return web.json_response({k: v for k, v in case.items() if k != "messages"})


async def list_escalations(request: web.Request) -> web.Response:
    """``GET /v1/admin/escalations?status=&limit=&after=``: one page of the cases with that status
    (default pending), OpenAI list style."""
    caller(request, ADMIN)
    status = request.query.get("status", "pending")
    if status not in (*STATUSES, "all"):
        raise GatewayError(400, "status must be pending, resolved, aborted or all", param="status")
    limit, after = page_query(request)
    cases, cursor = await services(request).gateway.escalations.list(
        None if status == "all" else status, after=after, limit=limit)
    return web.json_response(list_page(cases, cursor))


async def resolve_escalation(request: web.Request) -> web.Response:
    """``POST /v1/admin/escalations/{id}/resolve``: the resolved case, its receipt id in a header."""
    who = caller(request, ADMIN)
    body, raw = await read_model(request, ResolveRequest)
    case, receipt_id = await services(request).gateway.escalations.resolve(
        request.match_info["case_id"], who, body.decision, body.note, raw)
    return web.json_response(case, headers={"x-sonate-receipt-id": receipt_id,
                                            "x-sonate-guardrail-action": "resolve"})


def register(app: web.Application) -> None:
    """Add the escalation routes to ``app``."""
    app.router.add_get("/v1/escalations/{case_id}", get_escalation)
    app.router.add_get("/v1/admin/escalations", list_escalations)
    app.router.add_post("/v1/admin/escalations/{case_id}/resolve", resolve_escalation)
