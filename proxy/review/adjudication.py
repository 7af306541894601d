"""Adjudication items: blind two-pass review of apologies and guardrail decisions.

The workflow around the pure rules of :mod:`proxy.kpi.adjudication` (item lifecycle, outcomes,
Gwet's AC1): items are queued at request time (a :attr:`proxy.server.pipeline.Gateway.sealed_hooks`
hook: every apology and guardrail trigger, and allowed requests sampled at ``review.sample_rate``),
each reviewer pass and the lead's tie-break is a compare-and-set decision on the store's
``"adjudications"`` queue (:class:`proxy.review.queue.DecisionQueue`) and is receipted
(``guardrail_action: "adjudicate"``, actor = the reviewer). A pass receipt carries a hash of the
verdict (a commitment), not the verdict, so the other reviewer cannot read it from the ledger
before giving their own; the receipt that makes an item final carries the outcome.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from proxy.kpi.adjudication import (
    FINAL_STATUSES,
    OPEN_STATUSES,
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
from proxy.review.queue import DecisionQueue
from proxy.server.errors import Caller, GatewayError
from proxy.server.metrics import Metrics
from proxy.server.sink import ReceiptSink
from proxy.storage.base import LedgerStore

__all__ = ["QUEUE", "Adjudications"]

QUEUE = "adjudications"
#: Attempts at a pass when concurrent passes keep moving the item.
_ATTEMPTS = 20


class Adjudications:
    """Queues items, records passes and lead resolutions, receipts them and counts them.

    ``sample_rate``: the share (0..1) of allowed requests queued as samples, drawn with ``rng``
    (``random.Random()`` by default). ``policy_ids``: the loaded policies' ids, the only values
    a reviewer's ``expected_policy_id`` may give the ``policy_id`` label of
    ``sonate_guardrail_misfires`` (any other text counts as ``other``: reviewer text never
    becomes a Prometheus series; docs/architecture.md "Metrics").
    """

    def __init__(self, store: LedgerStore, sink: ReceiptSink, metrics: Metrics, sample_rate: float,
                 rng: random.Random | None = None, policy_ids: frozenset[str] = frozenset()) -> None:
        """Bind the store, sink, metrics, sampling and the label set. No I/O."""
        self.queue = DecisionQueue(QUEUE, store, sink, metrics)
        self.metrics = metrics
        self.sample_rate = sample_rate
        self.rng = rng or random.Random()
        self.policy_ids = policy_ids

    async def enqueue(self, sealed: list[dict[str, Any]], messages: list[dict[str, Any]],
                      body: dict[str, Any], model_apology: bool) -> None:
        """Queue the interaction if it needs review (a :attr:`Gateway.sealed_hooks` hook)."""
        sampled = self.rng.random() < self.sample_rate
        choice = (body.get("choices") or [{}])[0]
        item = new_item(sealed, messages=messages, response=(choice.get("message") or {}).get("content"),
                        model_apology=model_apology, sampled=sampled, created=utc_timestamp())
        if item is None or not await self.queue.put(item):
            return  # nothing to review, or already queued (a retried request)
        for reason in item["reasons"]:
            self.metrics.review_items_queued.labels(reason).inc()

    async def list_items(self, caller: Caller, *, status: str, reason: str | None, limit: int) -> list[dict[str, Any]]:
        """Items for ``caller``: ``status="todo"`` = open items they have not given a pass on (blind);
        any other status (or ``all``) the full items, for a lead."""
        if status == "todo":
            items = [i for i in await self.queue.list() if i["status"] in OPEN_STATUSES
                     and all(p.get("reviewer") != caller.actor for p in i.get("passes", {}).values())]
        else:
            items = await self.queue.list(None if status == "all" else status)
        if reason:
            items = [i for i in items if reason in i.get("reasons", [])]
        return [reviewer_view(i, caller.actor, lead=status != "todo") for i in items[:limit]]

    async def get_item(self, caller: Caller, item_id: str, *, lead: bool) -> dict[str, Any]:
        """One item: the full item for a lead, the blind view for a reviewer."""
        return reviewer_view(await self.queue.get(item_id, "review item"), caller.actor, lead=lead)

    async def give_pass(self, caller: Caller, item_id: str, verdict: Verdict, requested_pass: str | None,
                        raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Record a pass (``requested_pass`` "A", "B" or None: the next free one), retried when a
        concurrent pass moved the item. Returns (the caller's blind view of the item, receipt id).

        Raises GatewayError 403/409 (:class:`AdjudicationError`), 404, 409 (kept changing), 503.
        """
        for _ in range(_ATTEMPTS):
            item = await self.queue.get(item_id, "review item")
            try:
                new, name = record_pass(item, reviewer=caller.actor, verdict=verdict, ts=utc_timestamp(),
                                        requested_pass=requested_pass)
            except AdjudicationError as exc:
                raise GatewayError(exc.status, exc.message, code=exc.code) from None
            commitment = {"verdict_hash": json_hash(new["passes"][name]["verdict"])}
            receipt_id = await self._decide(item, new, caller, raw, stage=name, evidence=commitment)
            if receipt_id is not None:
                self.metrics.adjudication_verdicts.labels(name, item["domain"]).inc()
                view = reviewer_view(new, caller.actor)
                view["status"] = new["status"] if new["status"] in OPEN_STATUSES else "passes_complete"
                return view, receipt_id
        raise GatewayError(409, f"Item '{item_id}' kept changing; try again.", code="conflict")

    async def resolve_item(self, caller: Caller, item_id: str, verdict: Verdict,
                           raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The lead's tie-break of a disputed item; returns (the full item, receipt id)."""
        item = await self.queue.get(item_id, "review item")
        try:
            new = resolve(item, lead=caller.actor, verdict=verdict, ts=utc_timestamp())
        except AdjudicationError as exc:
            raise GatewayError(exc.status, exc.message, code=exc.code) from None
        receipt_id = await self._decide(item, new, caller, raw, stage="lead", evidence={})
        if receipt_id is None:
            raise GatewayError(409, f"Item '{item_id}' was resolved concurrently.", code="conflict")
        self.metrics.adjudication_verdicts.labels("lead", item["domain"]).inc()
        return new, receipt_id

    async def agreement(self) -> dict[str, Any]:
        """Gwet's AC1 per domain over every double-rated item (:func:`agreement_by_domain`)."""
        return agreement_by_domain(await self.queue.list())

    async def _decide(self, old: dict[str, Any], new: dict[str, Any], caller: Caller, raw: dict[str, Any],
                      *, stage: str, evidence: dict[str, Any]) -> str | None:
        """Store ``new`` if ``old`` is unchanged and receipt it; None when another verdict won the race."""
        final = new.get("final") if new["status"] in FINAL_STATUSES else None
        sealed = await self.queue.decide(old, new, _receipt(new, caller, raw, stage, evidence, final))
        if sealed is None:
            return None
        if final is not None:
            self._count_final(new, final)
        return sealed["receipt_id"]

    def _count_final(self, item: dict[str, Any], final: dict[str, Any]) -> None:
        """Count a final outcome: adjudicated items, unnecessary apologies, guardrail misfires."""
        m, domain = self.metrics, item["domain"]
        for reason in item["reasons"]:
            m.adjudicated_items.labels(reason, domain).inc()
        if final["unnecessary_apology"]:
            m.unnecessary_apologies.labels(item["apology_source"] or "guardrail", domain,
                                           item.get("stratum", {}).get("complexity", "unknown")).inc()
        if final["false_positive"]:
            m.guardrail_misfires.labels("false_positive", item["policy_id"] or "none", domain).inc()
        if final["false_negative"]:
            m.guardrail_misfires.labels("false_negative", self._policy_label(final.get("expected_policy_id")),
                                        domain).inc()

    def _policy_label(self, expected: str | None) -> str:
        """The ``policy_id`` label of a false negative: a loaded policy's id, ``none`` or ``other``."""
        if not expected:
            return "none"
        return expected if expected in self.policy_ids else "other"


def _receipt(item: dict[str, Any], caller: Caller, raw: dict[str, Any], stage: str, evidence: dict[str, Any],
             final: dict[str, Any] | None) -> dict[str, Any]:
    """The unsigned ``adjudicate`` receipt of ``item`` after a pass or resolution at ``stage``."""
    evidence = {"adjudication_id": item["id"], "adjudicated_receipt_id": item["receipt_id"], "stage": stage,
                "status": item["status"] if item["status"] != "disputed" else "passes_complete", **evidence}
    if final is not None:
        evidence["outcome"] = final["label"]
        evidence["decided_by"] = final["decided_by"]
        evidence["pass_verdict_hashes"] = {p: json_hash(v["verdict"]) for p, v in item["passes"].items()}
    return new_receipt(
        request_id="req_" + uuid.uuid4().hex, actor=caller.actor, intent=item["domain"],
        inputs_hash=json_hash(raw), outputs_hash=json_hash({"id": item["id"], "status": item["status"]}),
        policy_id=item["policy_id"], guardrail_action="adjudicate", evidence=evidence,
        model=item.get("model"), provider="human", stratum={**item.get("stratum", {}), "provider": "human"})
