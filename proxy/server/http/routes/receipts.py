"""Receipts and the keys that verify them.

Routes::

  GET /v1/receipts/{receipt_id}[?bundle=1]   a trust receipt (clients: their own; reviewers: their own
                                             and those of review items assigned to them; admins: all);
                                             202 while it waits in the spool; ?bundle=1: the offline
                                             bundle (:func:`proxy.server.http.routes.ledger.bundle_response`)
  GET /v1/keys                               public verify keys by key_id, with validity windows
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from proxy.receipts.signing import public_key_entry
from proxy.server.errors import Caller, GatewayError, ledger_unavailable
from proxy.server.http.requests import caller, services
from proxy.server.http.routes import ledger as ledger_routes
from proxy.server.http.routes.review import ADJUDICATIONS
from proxy.storage.base import LedgerError

__all__ = ["get_keys", "get_receipt", "public_key_entries", "register"]


def public_key_entries(svc: Any) -> list[dict[str, Any]]:
    """The key entries ``GET /v1/keys`` publishes: the keyring's (with validity windows) when the
    services carry one, else the current signer's entry."""
    keyring = getattr(svc, "keyring", None)
    if keyring is not None:
        return keyring.entries()
    return [public_key_entry(svc.signer)]


async def _may_read(request: web.Request, who: Caller, receipt: dict[str, Any]) -> bool:
    """Admins read every receipt, clients their own, reviewers their own and the receipts of review
    items assigned to them (:meth:`proxy.server.flow.review.adjudication.Adjudications.may_read_receipt`)."""
    if who.role == "admin" or receipt.get("actor") == who.actor:
        return True
    adjudications = request.app.get(ADJUDICATIONS)
    return who.role == "reviewer" and adjudications is not None and await adjudications.may_read_receipt(who, receipt)


async def get_receipt(request: web.Request) -> web.Response:
    """``GET /v1/receipts/{receipt_id}``: 404 for an unknown id or one the caller may not read."""
    who = caller(request)
    receipt_id = request.match_info["receipt_id"]
    bundle = ledger_routes.wants_bundle(request)
    svc = services(request)
    try:
        receipt = await svc.find_receipt(receipt_id)  # whichever ledger holds it
    except LedgerError:
        raise ledger_unavailable() from None
    if receipt is None:  # fault policy "spool": still waiting in this process's spool?
        pending = svc.gateway.sink.pending(receipt_id)
        if pending is not None and await _may_read(request, who, pending):
            return web.json_response({"receipt_id": receipt_id, "status": "pending", "receipt": pending},
                                     status=202, headers={"x-sonate-receipt-status": "pending"})
    if receipt is None or not await _may_read(request, who, receipt):
        raise GatewayError(404, "No receipt with this id.", code="not_found")  # ids are not echoed
    if bundle:
        return await ledger_routes.bundle_response(request, receipt, public_key_entries(svc))
    return web.json_response(receipt)


async def get_keys(request: web.Request) -> web.Response:
    """``GET /v1/keys``: ``{"keys": [...]}``, every key ever used (no authentication)."""
    return web.json_response({"keys": public_key_entries(services(request))})


def register(app: web.Application) -> None:
    """Add the receipt and key routes to ``app``."""
    app.router.add_get("/v1/receipts/{receipt_id}", get_receipt)
    app.router.add_get("/v1/keys", get_keys)
