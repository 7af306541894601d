"""The reviewer API: blind two-pass adjudication of apologies and guardrail decisions.

Routes (role ``reviewer`` or ``admin``; the lead is an ``admin``)::

  GET  /v1/review/items                      items the caller can still give a pass on (blind)
       ?reason=apology|trigger|sample  ?limit=N (default 100, max 1000)
       ?status=disputed|agreed|resolved|all  (admin only: the full items with every verdict)
  GET  /v1/review/items/{id}                 one item (blind for reviewers)
  POST /v1/review/items/{id}/verdicts        {"pass"?: "A"|"B", "breach", "intent_permissible",
                                              "content_harmful", "expected_policy_id"?, "note"?}
  POST /v1/review/items/{id}/resolve         lead tie-break of a disputed item (admin), same body
                                              without "pass"
  GET  /v1/review/agreement                  Gwet's AC1 between passes, per domain (admin)

Items are queued at request time (a :attr:`Gateway.sealed_hooks` hook): every apology and
guardrail trigger, and allowed requests sampled at ``review.sample_rate``. Verdicts are stored
with the item in the ledger store (``*_review_item``) and each is receipted
(``guardrail_action: "adjudicate"``, actor = the reviewer). A pass receipt carries a hash of
the verdict (a commitment), not the verdict, so the other reviewer cannot read it from the
ledger before giving their own; the receipt that makes an item final carries the outcome.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import Any

from aiohttp import web
from pydantic import ConfigDict, Field

from proxy.kpi.adjudication import (
    AdjudicationError,
    Verdict,
    agreement_by_domain,
    new_item,
    record_pass,
    resolve,
    reviewer_view,
)
from proxy.receipts.canonical import json_hash
from proxy.receipts.receipt import new_receipt, utc_timestamp
from proxy.storage.base import LedgerConflict, LedgerError
from proxy.server import requests as http
from proxy.server.pipeline import Caller, GatewayError

log = logging.getLogger("sonate.review")
REVIEWERS = ("admin", "reviewer")
LEADS = ("admin",)
_ATTEMPTS = 20


class PassRequest(Verdict):
    """Body of POST /v1/review/items/{id}/verdicts: a :class:`Verdict` plus an optional pass."""

    model_config = ConfigDict(strict=True, extra="forbid")
    pass_: str | None = Field(None, alias="pass", pattern="^[AB]$")


def _unavailable() -> GatewayError:
    return GatewayError(503, "The review store is unavailable.", "api_error", "ledger_unavailable",
                        result="ledger_error")


class ReviewService:
    """Queues items, records passes and lead resolutions, receipts them and counts them.

    ``services`` is the app's :class:`proxy.server.app.Services`; ``rng`` draws the sample of
    allowed requests (``random.Random()`` by default).
    """

    def __init__(self, services: Any, rng: random.Random | None = None) -> None:
        self.services = services
        self.store = services.store
        self.metrics = services.metrics
        self.rng = rng or random.Random()

    async def enqueue(self, sealed: list[dict[str, Any]], messages: list[dict[str, Any]],
                      body: dict[str, Any], model_apology: bool) -> None:
        """Queue the interaction if it needs review (a :attr:`Gateway.sealed_hooks` hook)."""
        sampled = self.rng.random() < self.services.config.review.sample_rate
        choice = (body.get("choices") or [{}])[0]
        item = new_item(sealed, messages=messages, response=(choice.get("message") or {}).get("content"),
                        model_apology=model_apology, sampled=sampled, created=utc_timestamp())
        if item is None:
            return
        try:
            await self.store.put_review_item(item)
        except LedgerConflict:
            return  # already queued (a retried request)
        for reason in item["reasons"]:
            self.metrics.review_items_queued.labels(reason).inc()

    async def _get(self, item_id: str) -> dict[str, Any]:
        try:
            item = await self.store.get_review_item(item_id)
        except LedgerError:
            raise _unavailable() from None
        if item is None:
            raise GatewayError(404, f"No review item with id '{item_id}'.", code="not_found")
        return item

    async def list_items(self, caller: Caller, *, status: str, reason: str | None, limit: int) -> list[dict[str, Any]]:
        """Items for ``caller``: ``status="todo"`` = open items they have not given a pass on (blind)."""
        try:
            if status == "todo":
                items = [i for i in await self.store.list_review_items()
                         if i["status"] in ("pending", "awaiting_a", "awaiting_b")
                         and all(p.get("reviewer") != caller.actor for p in i.get("passes", {}).values())]
            else:
                items = await self.store.list_review_items(None if status == "all" else status)
        except LedgerError:
            raise _unavailable() from None
        if reason:
            items = [i for i in items if reason in i.get("reasons", [])]
        lead = status != "todo"
        return [reviewer_view(i, caller.actor, lead=lead) for i in items[:limit]]

    async def get_item(self, caller: Caller, item_id: str) -> dict[str, Any]:
        """One item: the full item for a lead (admin), the blind view for a reviewer."""
        return reviewer_view(await self._get(item_id), caller.actor, lead=caller.role in LEADS)

    async def give_pass(self, caller: Caller, item_id: str, body: PassRequest, raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Record a pass (compare-and-set on the status, retried on a concurrent pass).

        Returns (the caller's blind view of the new item, receipt id).
        """
        verdict = Verdict(**body.model_dump(exclude={"pass_"}))
        for _ in range(_ATTEMPTS):
            item = await self._get(item_id)
            try:
                new, name = record_pass(item, reviewer=caller.actor, verdict=verdict, ts=utc_timestamp(),
                                        requested_pass=body.pass_)
            except AdjudicationError as exc:
                raise GatewayError(exc.status, exc.message, code=exc.code) from None
            receipt_id = await self._commit(item, new, caller, raw, stage=name,
                                            evidence={"verdict_hash": json_hash(new["passes"][name]["verdict"])})
            if receipt_id is not None:
                self.metrics.adjudication_verdicts.labels(name, item["domain"]).inc()
                view = reviewer_view(new, caller.actor)
                view["status"] = new["status"] if new["status"] in ("awaiting_a", "awaiting_b") else "passes_complete"
                return view, receipt_id
        raise GatewayError(409, f"Item '{item_id}' kept changing; try again.", code="conflict")

    async def resolve_item(self, caller: Caller, item_id: str, verdict: Verdict, raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The lead's tie-break; returns (the full item, receipt id)."""
        item = await self._get(item_id)
        try:
            new = resolve(item, lead=caller.actor, verdict=verdict, ts=utc_timestamp())
        except AdjudicationError as exc:
            raise GatewayError(exc.status, exc.message, code=exc.code) from None
        receipt_id = await self._commit(item, new, caller, raw, stage="lead", evidence={})
        if receipt_id is None:
            raise GatewayError(409, f"Item '{item_id}' was resolved concurrently.", code="conflict")
        self.metrics.adjudication_verdicts.labels("lead", item["domain"]).inc()
        return new, receipt_id

    async def _commit(self, old: dict[str, Any], new: dict[str, Any], caller: Caller, raw: dict[str, Any],
                      *, stage: str, evidence: dict[str, Any]) -> str | None:
        """Store ``new`` if ``old`` is unchanged, then receipt it; None when another verdict won the race."""
        final = new.get("final") if new["status"] in ("agreed", "resolved") else None
        evidence = {"adjudication_id": new["id"], "adjudicated_receipt_id": new["receipt_id"], "stage": stage,
                    "status": new["status"] if new["status"] != "disputed" else "passes_complete", **evidence}
        if final is not None:
            evidence["outcome"] = final["label"]
            evidence["decided_by"] = final["decided_by"]
            evidence["pass_verdict_hashes"] = {p: json_hash(v["verdict"]) for p, v in new["passes"].items()}
        stratum = {**new.get("stratum", {}), "provider": "human"}
        receipt = new_receipt(
            request_id="req_" + uuid.uuid4().hex, actor=caller.actor, intent=new["domain"],
            inputs_hash=json_hash(raw), outputs_hash=json_hash({"id": new["id"], "status": new["status"]}),
            policy_id=new["policy_id"], guardrail_action="adjudicate", evidence=evidence,
            model=new.get("model"), provider="human", stratum=stratum)
        try:
            await self.store.update_review_item(new, expected_status=old["status"])
        except LedgerConflict:
            return None
        except LedgerError:
            raise _unavailable() from None
        try:
            sealed = await self.services.ledger.append([receipt])
        except LedgerError:
            try:  # release: the verdict is not recorded without its receipt
                await self.store.update_review_item(old, expected_status=new["status"])
            except LedgerError:
                log.error("review item %s changed but its receipt was not written", new["id"])
            raise GatewayError(503, "The trust ledger is unavailable; the verdict was not recorded.",
                               "api_error", "ledger_unavailable", result="ledger_error") from None
        self.metrics.actions.labels("adjudicate").inc()
        self.metrics.receipts_written.labels("adjudicate").inc()
        if final is not None:
            self._count_final(new, final)
        return sealed[0]["receipt_id"]

    def _count_final(self, item: dict[str, Any], final: dict[str, Any]) -> None:
        m, domain = self.metrics, item["domain"]
        for reason in item["reasons"]:
            m.adjudicated_items.labels(reason, domain).inc()
        if final["unnecessary_apology"]:
            m.unnecessary_apologies.labels(item["apology_source"] or "guardrail", domain,
                                           item.get("stratum", {}).get("complexity", "unknown")).inc()
        if final["false_positive"]:
            m.guardrail_misfires.labels("false_positive", item["policy_id"] or "none", domain).inc()
        if final["false_negative"]:
            m.guardrail_misfires.labels("false_negative", final.get("expected_policy_id") or "none", domain).inc()

    async def agreement(self) -> dict[str, Any]:
        """AC1 per domain over every double-rated item."""
        try:
            items = await self.store.list_review_items()
        except LedgerError:
            raise _unavailable() from None
        return agreement_by_domain(items)


def _service(request: web.Request) -> ReviewService:
    return request.app["review"]


async def list_items(request: web.Request) -> web.Response:
    caller = http.caller(request, REVIEWERS)
    status = request.query.get("status", "todo")
    if status not in ("todo", "disputed", "agreed", "resolved", "pending", "awaiting_a", "awaiting_b", "all"):
        raise GatewayError(400, "status must be todo, pending, awaiting_a, awaiting_b, disputed, agreed, "
                           "resolved or all", param="status", code="invalid_value")
    if status != "todo" and caller.role not in LEADS:
        raise GatewayError(403, "Only a lead (role admin) may list items with their verdicts; reviewers see "
                           "status=todo.", type="permission_error", code="insufficient_role", result="auth_error")
    reason = request.query.get("reason")
    if reason not in (None, "apology", "trigger", "sample"):
        raise GatewayError(400, "reason must be apology, trigger or sample", param="reason", code="invalid_value")
    try:
        limit = int(request.query.get("limit", "100"))
        if not 1 <= limit <= 1000:
            raise ValueError
    except ValueError:
        raise GatewayError(400, "limit must be an integer from 1 to 1000", param="limit", code="invalid_value") from None
    items = await _service(request).list_items(caller, status=status, reason=reason, limit=limit)
    return web.json_response({"object": "list", "data": items})


async def get_item(request: web.Request) -> web.Response:
    caller = http.caller(request, REVIEWERS)
    return web.json_response(await _service(request).get_item(caller, request.match_info["item_id"]))


async def post_verdict(request: web.Request) -> web.Response:
    caller = http.caller(request, REVIEWERS)
    body, raw = await http.read_model(request, PassRequest)
    view, receipt_id = await _service(request).give_pass(caller, request.match_info["item_id"], body, raw)
    return web.json_response(view, status=201, headers={"x-sonate-receipt-id": receipt_id,
                                                        "x-sonate-guardrail-action": "adjudicate"})


async def post_resolve(request: web.Request) -> web.Response:
    caller = http.caller(request, LEADS)
    verdict, raw = await http.read_model(request, Verdict)
    item, receipt_id = await _service(request).resolve_item(caller, request.match_info["item_id"], verdict, raw)
    return web.json_response(item, headers={"x-sonate-receipt-id": receipt_id,
                                            "x-sonate-guardrail-action": "adjudicate"})


async def get_agreement(request: web.Request) -> web.Response:
    http.caller(request, LEADS)
    return web.json_response({"coefficient": "gwet_ac1", "data": await _service(request).agreement()})


def register(app: web.Application) -> None:
    """Add the reviewer routes to ``app`` and queue reviewable interactions from its gateway."""
    services = app["services"]
    service = ReviewService(services)
    app["review"] = service
    services.gateway.sealed_hooks.append(service.enqueue)
    app.router.add_get("/v1/review/items", list_items)
    app.router.add_get("/v1/review/items/{item_id}", get_item)
    app.router.add_post("/v1/review/items/{item_id}/verdicts", post_verdict)
    app.router.add_post("/v1/review/items/{item_id}/resolve", post_resolve)
    app.router.add_get("/v1/review/agreement", get_agreement)
