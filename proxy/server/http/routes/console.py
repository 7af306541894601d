"""The reviewer console: static files of ``proxy/web/review`` at ``/review/``, and the case views it reads.

Routes::

    GET /review                          301 to /review/
    GET /review/                         the console (index.html); no data, no authentication
    GET /review/{path}                   its script and stylesheet
    GET /v1/review/escalations           escalation cases as a reviewer reads them (admin)
        ?status=pending|drafted|resolved|aborted|all (default pending)  ?domain=<domain>
        ?older_than=S ?newer_than=S (age in seconds)  ?limit=N (1..1000, default 100)  ?after=<last_id>
    GET /v1/review/escalations/{id}      one case as a reviewer reads it (admin)

The page is static and holds no data: the reviewer types their API key, which the page keeps in the
tab's memory and sends as a bearer token to the review APIs (no cookie, no storage). Files are
served like the verifier page's (:func:`proxy.server.http.routes.verifier.web_file`: same-origin CSP,
no inline script or style).

A case view (:func:`case_view`) is the stored case without its sealed mapping (the reviewer cannot
open it), with ``age_seconds`` and the escalation policy's ``evidence``: the classifier's domain,
its scores, the thresholds of the policy as loaded now, the detector's name and version. Messages,
draft and answer carry Privacy's placeholders, never the personal data.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from proxy.server.errors import GatewayError, ledger_unavailable
from proxy.server.flow.review.escalations import STATUSES
from proxy.server.http.requests import ADMIN, caller, services
from proxy.server.http.routes.review import list_page, page_query
from proxy.server.http.routes.verifier import web_file
from proxy.storage.base import LedgerError

__all__ = ["case_view", "register"]

#: Store pages read at most to fill one filtered page (bounded work per request).
_MAX_SCANS = 10
#: The detector settings of a compliance policy shown as its thresholds.
_THRESHOLDS = ("threshold", "margin", "ambiguous")


def _age_seconds(created: str | None, now: datetime) -> int | None:
    """Whole seconds since the RFC 3339 timestamp ``created``; None when absent or malformed."""
    try:
        then = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((now - then).total_seconds())


def _seconds(request: web.Request, name: str) -> int | None:
    """The query parameter ``name`` as whole seconds (None when absent); GatewayError 400 naming it."""
    raw = request.query.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 10):
        raise GatewayError(400, f"{name} must be a whole number of seconds", param=name, code="invalid_value")
    return int(raw)


def _thresholds(request: web.Request, receipt: dict[str, Any]) -> dict[str, Any]:
    """The detector thresholds of the receipt's policy in the serving policy set it names ({} if gone)."""
    snapshot = services(request).policy_runtime.current()
    evidence = receipt.get("evidence") or {}
    policy_set: Any = evidence.get("policy_set")  # a JSON value: str, or absent (None)
    policy_id: Any = receipt.get("policy_id")
    active = snapshot.sets.get(policy_set) or snapshot.default
    policy = active.policies.get(policy_id)
    detector = getattr(policy, "detector", None) or {}
    return {k: detector[k] for k in _THRESHOLDS if k in detector}


async def case_view(request: web.Request, case: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The reviewer's view of ``case`` (see the module docstring); 503 when the store fails."""
    try:
        receipt = await services(request).find_receipt(case["receipt_id"]) or {}
    except LedgerError:
        raise ledger_unavailable() from None
    evidence = receipt.get("evidence") or {}
    view = {k: v for k, v in case.items() if k != "sealed_mapping"}
    view["age_seconds"] = _age_seconds(case.get("created"), now)
    view["evidence"] = {
        "policy_id": receipt.get("policy_id"), "domain": evidence.get("domain", case.get("domain")),
        "confidence": evidence.get("confidence"), "ambiguous": evidence.get("ambiguous"),
        "scores": evidence.get("scores", {}), "thresholds": _thresholds(request, receipt),
        "detector": evidence.get("detector"), "policy_version": evidence.get("policy_version"),
    }
    return view


def _matches(case: dict[str, Any], domain: str | None, older: int | None, newer: int | None, now: datetime) -> bool:
    """Whether ``case`` passes the domain and age filters."""
    if domain is not None and case.get("domain") != domain:
        return False
    age = _age_seconds(case.get("created"), now)
    if age is None:  # unknown age: passes only when no age filter is set
        return older is None and newer is None
    return (older is None or age >= older) and (newer is None or age <= newer)


async def list_cases(request: web.Request) -> web.Response:
    """``GET /v1/review/escalations``: one filtered page, oldest first, OpenAI list style."""
    caller(request, ADMIN)
    status = request.query.get("status", "pending")
    if status not in (*STATUSES, "all"):
        raise GatewayError(400, "status must be pending, drafted, resolved, aborted or all", param="status",
                           code="invalid_value")
    domain = request.query.get("domain") or None
    older, newer = _seconds(request, "older_than"), _seconds(request, "newer_than")
    limit, cursor = page_query(request)
    escalations, now = services(request).gateway.escalations, datetime.now(timezone.utc)
    found: list[dict[str, Any]] = []
    for _ in range(_MAX_SCANS):
        page, cursor = await escalations.list(None if status == "all" else status, after=cursor, limit=limit)
        for n, case in enumerate(page):
            if _matches(case, domain, older, newer, now):
                found.append(case)
            if len(found) == limit:
                cursor = case["id"] if n < len(page) - 1 or cursor is not None else None
                break
        if cursor is None or len(found) == limit:
            break
    views = await asyncio.gather(*(case_view(request, case, now) for case in found))
    return web.json_response(list_page(list(views), cursor))


async def get_case(request: web.Request) -> web.Response:
    """``GET /v1/review/escalations/{id}``: one case view; 404 when unknown."""
    caller(request, ADMIN)
    case = await services(request).gateway.escalations.get(request.match_info["case_id"])
    return web.json_response(await case_view(request, case, datetime.now(timezone.utc)))


async def console_redirect(request: web.Request) -> web.Response:
    """``GET /review``: redirect to ``/review/`` so the page's relative asset URLs resolve."""
    raise web.HTTPMovedPermanently("/review/")


async def console_page(request: web.Request) -> web.FileResponse:
    """``GET /review/``: the console page."""
    return web_file("review/index.html")


async def console_asset(request: web.Request) -> web.FileResponse:
    """``GET /review/{path}``: a script or stylesheet of the console (404 outside ``web/review``)."""
    path = request.match_info["path"]
    if ".." in path.split("/"):
        raise web.HTTPNotFound()
    return web_file(f"review/{path}")


def register(app: web.Application) -> None:
    """Add the console page and its case views to ``app``."""
    app.router.add_get("/review", console_redirect)
    app.router.add_get("/review/", console_page)
    app.router.add_get("/review/{path:.+}", console_asset)
    app.router.add_get("/v1/review/escalations", list_cases)
    app.router.add_get("/v1/review/escalations/{case_id}", get_case)
