"""Adjudication items: blind two-pass review of apologies and guardrail decisions.

The workflow around the pure rules of :mod:`proxy.kpi.adjudication` (item lifecycle, outcomes,
Gwet's AC1): items are queued at request time (a :attr:`proxy.server.flow.pipeline.Gateway.sealed_hooks`
hook: every apology and guardrail trigger, and allowed requests sampled at ``review.sample_rate``),
each reviewer pass and the lead's tie-break is a compare-and-set decision on the store's
``"adjudications"`` queue (:class:`proxy.server.flow.review.queue.DecisionQueue`) and is receipted
(``guardrail_action: "adjudicate"``, actor = the reviewer). A pass receipt carries a salted
commitment to the verdict (:func:`proxy.kpi.adjudication.verdict_commitment`: a fresh 32-byte
nonce kept with the item), not the verdict, so nobody can recover it from the ledger before the
other pass is given; the second pass's receipt reveals both verdicts and nonces, and the receipt
that makes an item final carries the outcome.

Reviewers see only what the model saw: the pipeline hands the hook masked messages and the
masked answer (:meth:`proxy.server.flow.pipeline.Gateway._review_view`), and a reviewer reads only the
items and receipts assigned to them (:func:`proxy.kpi.adjudication.assigned`,
:meth:`Adjudications.may_read_receipt`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from proxy.kpi.adjudication import (
    FINAL_STATUSES,
    OPEN_STATUSES,
    PASSES,
    AdjudicationError,
    Verdict,
    agreement_intervals,
    assigned,
    new_item,
    own_request,
    record_pass,
    resolve,
    reveal,
    reviewer_view,
)
from proxy.primitives.canonical import json_hash
from proxy.receipts.receipt import utc_timestamp
from proxy.server.errors import Caller, GatewayError, ledger_unavailable
from proxy.server.flow.receipting import Receipting, review_receipt
from proxy.server.flow.review.queue import DecisionQueue
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerError, LedgerStore

__all__ = ["QUEUE", "Adjudications"]

QUEUE = "adjudications"
#: Attempts at a pass when concurrent passes keep moving the item.
_ATTEMPTS = 20
#: Store pages read at most to fill one page of a reviewer's to-do list (bounded work per request).
_MAX_SCANS = 10
#: Items per store page when a whole queue is read (agreement).
_PAGE = 1000


class Adjudications:
    """Queues items, records passes and lead resolutions, receipts them and counts them.

    ``sample_rate``: the share (0..1) of allowed requests queued as samples, drawn with ``rng``
    (``random.Random()`` by default). ``policy_ids``: the loaded policies' ids, the only values
    a reviewer's ``expected_policy_id`` may give the ``policy_id`` label of
    ``sonate_guardrail_misfires`` (any other text counts as ``other``: reviewer text never
    becomes a Prometheus series; docs/architecture.md "Metrics").
    """

    def __init__(self, store: LedgerStore, receipting: Receipting, metrics: Metrics, sample_rate: float,
                 rng: random.Random | None = None, policy_ids: frozenset[str] = frozenset()) -> None:
        """Bind the store, receipt path, metrics, sampling and the label set. No I/O."""
        self.queue = DecisionQueue(QUEUE, store, receipting)
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

    async def list_items(self, caller: Caller, *, status: str, reason: str | None, limit: int,
                         after: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of items for ``caller``, oldest first: ``status="todo"`` = open items they have
        not given a pass on (blind); any other status (or ``all``) the full items, for a lead.

        Returns ``(items, cursor)``: pass ``cursor`` as ``after`` for the next page; None when
        the queue holds nothing further. Reads at most ``_MAX_SCANS`` store pages of ``limit``
        (a page may hold fewer than ``limit`` items and still have a cursor). Raises GatewayError
        400 for an unknown ``after`` id, 503 when the store fails.
        """
        statuses = OPEN_STATUSES if status == "todo" else None if status == "all" else (status,)
        out: list[dict[str, Any]] = []
        cursor = after
        for _ in range(_MAX_SCANS):
            page, cursor = await self.queue.page(statuses, after=cursor, limit=limit)
            for n, item in enumerate(page):
                passed = any(p.get("reviewer") == caller.actor for p in item.get("passes", {}).values()) \
                    or own_request(item, caller.actor)  # not theirs to review
                if (status != "todo" or not passed) and (reason is None or reason in item.get("reasons", [])):
                    out.append(reviewer_view(item, caller.actor, lead=status != "todo"))
                if len(out) == limit:
                    more = n < len(page) - 1 or cursor is not None
                    return out, item["id"] if more else None
            if cursor is None:
                break
        return out, cursor

    async def get_item(self, caller: Caller, item_id: str, *, lead: bool) -> dict[str, Any]:
        """One item: the full item for a lead, the blind view for a reviewer it is assigned to
        (:func:`assigned`; 404 otherwise)."""
        item = await self.queue.get(item_id, "review item")
        if not lead and not assigned(item, caller.actor):
            raise GatewayError(404, "No review item with this id.", code="not_found")
        return reviewer_view(item, caller.actor, lead=lead)

    async def may_read_receipt(self, caller: Caller, receipt: dict[str, Any]) -> bool:
        """Whether reviewer ``caller`` may read ``receipt``: their own (actor), or one of the
        request receipts of an item assigned to them (:func:`assigned`). Another reviewer's pass
        receipt, and any request nobody queued for review, stay hidden. 503 when the store fails.
        """
        if receipt.get("actor") == caller.actor:
            return True
        request_id = receipt.get("request_id")
        if not isinstance(request_id, str):
            return False
        try:
            item = await self.queue.store.get_item(QUEUE, "adj_" + request_id.removeprefix("req_"))
        except LedgerError:
            raise ledger_unavailable() from None
        return (item is not None and receipt.get("receipt_id") in item.get("receipt_ids", [])
                and assigned(item, caller.actor))

    def check_verdict(self, verdict: Verdict) -> None:
        """Raise GatewayError 400 (param ``expected_policy_id``) unless the verdict's
        ``expected_policy_id`` is empty or names a loaded policy."""
        expected = verdict.expected_policy_id
        if expected and expected not in self.policy_ids:
            raise GatewayError(400, f"expected_policy_id {expected!r} is not a loaded policy; use one of "
                               f"{', '.join(sorted(self.policy_ids)) or '(none loaded)'}",
                               param="expected_policy_id", code="invalid_value")

    async def give_pass(self, caller: Caller, item_id: str, verdict: Verdict, requested_pass: str | None,
                        raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Record a pass (``requested_pass`` "A", "B" or None: the next free one), retried when a
        concurrent pass moved the item. Returns (the caller's blind view of the item, receipt id).

        Raises GatewayError 403/409 (:class:`AdjudicationError`), 404, 409 (kept changing), 503.
        """
        self.check_verdict(verdict)
        for _ in range(_ATTEMPTS):
            item = await self.queue.get(item_id, "review item")
            try:
                new, name = record_pass(item, reviewer=caller.actor, verdict=verdict, ts=utc_timestamp(),
                                        requested_pass=requested_pass)
            except AdjudicationError as exc:
                raise _refused(exc) from None
            commitment: dict[str, Any] = {"verdict_commitment": new["passes"][name]["commitment"]}
            if len(new["passes"]) == len(PASSES):  # the second pass: blindness is over, open both
                commitment["reveal"] = reveal(new)
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
        self.check_verdict(verdict)
        item = await self.queue.get(item_id, "review item")
        try:
            new = resolve(item, lead=caller.actor, verdict=verdict, ts=utc_timestamp())
        except AdjudicationError as exc:
            raise _refused(exc) from None
        receipt_id = await self._decide(item, new, caller, raw, stage="lead", evidence={})
        if receipt_id is None:
            raise GatewayError(409, f"Item '{item_id}' was resolved concurrently.", code="conflict")
        self.metrics.adjudication_verdicts.labels("lead", item["domain"]).inc()
        return new, receipt_id

    async def agreement(self) -> dict[str, Any]:
        """Gwet's AC1 per domain, with its interval, over every double-rated item (:func:`agreement_intervals`)."""
        rated: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:  # page by page; only double-rated items are kept
            page, cursor = await self.queue.page(("agreed", "disputed", "resolved"), after=cursor, limit=_PAGE)
            rated += page
            if cursor is None:
                return await asyncio.to_thread(agreement_intervals, rated)  # a bootstrap: off the event loop

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


def _refused(exc: AdjudicationError) -> GatewayError:
    """The API error of a refused review step (a 403 is a ``permission_error``)."""
    return GatewayError(exc.status, exc.message, "permission_error" if exc.status == 403 else "invalid_request_error",
                        exc.code)


def _receipt(item: dict[str, Any], caller: Caller, raw: dict[str, Any], stage: str, evidence: dict[str, Any],
             final: dict[str, Any] | None) -> dict[str, Any]:
    """The unsigned ``adjudicate`` receipt of ``item`` after a pass or resolution at ``stage``."""
    evidence = {"adjudication_id": item["id"], "adjudicated_receipt_id": item["receipt_id"], "stage": stage,
                "status": item["status"] if item["status"] != "disputed" else "passes_complete", **evidence}
    if final is not None:
        evidence["outcome"] = final["label"]
        evidence["decided_by"] = final["decided_by"]
        evidence["pass_commitments"] = {p: v["commitment"] for p, v in sorted(item["passes"].items())}
    return review_receipt(
        action="adjudicate", policy_id=item["policy_id"], actor=caller.actor, intent=item["domain"],
        inputs_hash=json_hash(raw), output={"id": item["id"], "status": item["status"]}, evidence=evidence,
        model=item.get("model"), provider="human", stratum={**item.get("stratum", {}), "provider": "human"})
