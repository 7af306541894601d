"""Escalated requests: a client's view of its own case and its outcome, and the admins' review queue.

Routes::

  GET  /v1/escalations/{id}                 one's own escalated request: status, and once resolved its
                                            answer or reason as ``response`` in the request's wire format
                                            ?wait=N (0..60 s): wait for the outcome (long poll)
                                            header x-sonate-escalation-key: restore the placeholders
  GET  /v1/admin/escalations                review queue (admin)   ?status=pending|drafted|resolved|aborted|all
                                            ?limit=N (1..1000, default 100) ?after=<id of the last case seen>
  POST /v1/admin/escalations/{id}/resolve   a reviewer decision (admin): approve, answer, edit, release,
                                            reject; every step receipted

The workflow is :mod:`proxy.server.flow.review.escalations`; docs/api.md "Escalations".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from proxy.guardrails.detectors.pii import restore_placeholders
from proxy.guardrails.messages import map_text
from proxy.server.errors import GatewayError
from proxy.server.flow.review.escalations import STATUSES, Decision
from proxy.server.flow.review.sealed_mapping import KEY_HEADER, open_mapping
from proxy.server.flow.wire import completion_body
from proxy.server.http.requests import ADMIN, caller, read_model, services
from proxy.server.http.routes import messages, responses
from proxy.server.http.routes.review import list_page, page_query

__all__ = ["ResolveRequest", "register"]

#: Longest ``?wait=`` a requester may ask for, in seconds.
MAX_WAIT_SECONDS = 60
#: How often a waiting requester's case is read again, in seconds (the store is shared by every
#: worker, so a decision taken in another worker is seen at the next read).
POLL_SECONDS = 0.25
#: Case fields only reviewers read: the masked request, the sealed mapping, an unreleased draft.
_REVIEW_ONLY = ("messages", "params", "sealed_mapping", "draft", "answer")
#: The dialects of the other APIs, by ``evidence.endpoint`` (chat completions need no translation).
_DIALECTS = {d.endpoint: d for d in (responses.DIALECT, messages.DIALECT)}


class ResolveRequest(BaseModel):
    """Body of POST /v1/admin/escalations/{id}/resolve (:class:`proxy.server.flow.review.escalations.Decision`)."""

    model_config = ConfigDict(strict=True, extra="forbid")
    decision: Literal["approve", "answer", "edit", "release", "reject"]
    note: str = Field("", max_length=4000)
    content: str | None = Field(None, min_length=1, max_length=100_000)
    reason: str | None = Field(None, min_length=1, max_length=4000)
    release: bool = True

    def checked(self) -> Decision:
        """The decision; GatewayError 400 naming the field a decision needs or cannot take."""
        if self.decision in ("answer", "edit") and self.content is None:
            raise GatewayError(400, f"'{self.decision}' needs the answer's text in 'content'.", param="content",
                               code="missing_required_parameter")
        if self.decision not in ("answer", "edit") and self.content is not None:
            raise GatewayError(400, f"'{self.decision}' takes no 'content' (answer or edit do).", param="content",
                               code="invalid_value")
        if self.decision != "reject" and self.reason is not None:
            raise GatewayError(400, "Only 'reject' takes a 'reason'.", param="reason", code="invalid_value")
        return Decision(self.decision, self.note, self.content, self.reason, self.release)


def _wait_seconds(request: web.Request) -> float:
    """``?wait=`` in seconds (0 when absent); GatewayError 400 (param ``wait``) when not 0..60."""
    raw = request.query.get("wait", "0")
    try:
        wait = float(raw) if raw.isascii() else -1.0
    except ValueError:
        wait = -1.0
    if not 0 <= wait <= MAX_WAIT_SECONDS:  # (NaN fails too)
        raise GatewayError(400, f"wait must be a number of seconds from 0 to {MAX_WAIT_SECONDS}", param="wait",
                           code="invalid_value")
    return wait


def _mapping(request: web.Request, case: dict[str, Any]) -> dict[str, str]:
    """The placeholder mapping the request's key opens ({} without a key); GatewayError 403 for a
    key that does not open this case."""
    key = request.headers.get(KEY_HEADER)
    if key is None or "sealed_mapping" not in case:
        return {}
    try:
        return open_mapping(case["sealed_mapping"], key)
    except ValueError:
        raise GatewayError(403, f"The {KEY_HEADER} header does not open this escalation.",
                           "permission_error", code="invalid_escalation_key") from None


def outcome_body(case: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any] | None:
    """A resolved case's outcome in its request's wire format (chat.completion, Responses
    ``response`` or Messages ``message``), placeholders of ``mapping`` restored; a rejection is the
    reason as a refusal (``finish_reason: "content_filter"``). None while unresolved."""
    if case.get("status") != "resolved":
        return None
    chat = case.get("answer") or completion_body(model=case["model"], content=case.get("reason", ""),
                                                 finish_reason="content_filter")
    if mapping:
        restore = lambda text: restore_placeholders(text, mapping)  # noqa: E731
        chat = {**chat, "choices": [{**c, "message": map_text(c.get("message") or {}, restore)}
                                    for c in chat.get("choices") or []]}
    dialect = _DIALECTS.get(case.get("api") or "chat")
    if dialect is None:
        return chat
    # the original request is not kept (it held the client's text): the settings it echoed are absent
    return dialect.to_body(dialect.request.model_construct(model=case["model"]), chat)


async def get_escalation(request: web.Request) -> web.Response:
    """``GET /v1/escalations/{id}``: admins read every case, anyone else (clients, reviewers) only the
    cases of their own requests; 404 otherwise (a reviewer never reads another client's case). The
    masked request and any unreleased draft are not shown; ``response`` holds the outcome once
    resolved (:func:`outcome_body`). ``?wait=`` holds the answer until the case leaves pending or
    drafted, or the time passes."""
    who = caller(request)
    case_id = request.match_info["case_id"]
    deadline = time.monotonic() + _wait_seconds(request)
    escalations = services(request).gateway.escalations
    case = await escalations.get(case_id)
    if who.role != "admin" and case.get("actor") != who.actor:
        raise GatewayError(404, "No escalation with this id.", code="not_found")  # ids are not echoed
    mapping = _mapping(request, case)
    while case["status"] in ("pending", "drafted") and time.monotonic() < deadline:
        await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        case = await escalations.get(case_id)
    view = {k: v for k, v in case.items() if k not in _REVIEW_ONLY}
    return web.json_response({**view, "response": outcome_body(case, mapping)})


async def list_escalations(request: web.Request) -> web.Response:
    """``GET /v1/admin/escalations?status=&limit=&after=``: one page of the cases with that status
    (default pending), OpenAI list style."""
    caller(request, ADMIN)
    status = request.query.get("status", "pending")
    if status not in (*STATUSES, "all"):
        raise GatewayError(400, "status must be pending, drafted, resolved, aborted or all", param="status")
    limit, after = page_query(request)
    cases, cursor = await services(request).gateway.escalations.list(
        None if status == "all" else status, after=after, limit=limit)
    return web.json_response(list_page(cases, cursor))


async def resolve_escalation(request: web.Request) -> web.Response:
    """``POST /v1/admin/escalations/{id}/resolve``: the case after the decision, the receipt id of
    its last step in a header."""
    who = caller(request, ADMIN)
    body, raw = await read_model(request, ResolveRequest)
    gateway = services(request).gateway
    case, receipt_id = await gateway.escalations.resolve(
        request.match_info["case_id"], who, body.checked(), raw, gateway.draft_escalation)
    return web.json_response(case, headers={"x-sonate-receipt-id": receipt_id,
                                            "x-sonate-guardrail-action": "resolve"})


def register(app: web.Application) -> None:
    """Add the escalation routes to ``app``."""
    app.router.add_get("/v1/escalations/{case_id}", get_escalation)
    app.router.add_get("/v1/admin/escalations", list_escalations)
    app.router.add_post("/v1/admin/escalations/{case_id}/resolve", resolve_escalation)
