"""Escalation cases: a compliance policy escalated a request to a human, who resolves it.

open (at request time, with the escalation receipt) → resolve (a reviewer's approve/reject,
receipted with ``guardrail_action: "resolve"`` and the reviewer as actor), or abort (the
request's receipts could not be written, so the case never became visible to its client).
Cases live in the store's ``"escalations"`` queue (:class:`proxy.review.queue.DecisionQueue`)::

    {"id", "status": "pending"|"resolved"|"aborted", "created", "request_id", "actor", "model",
     "domain", "receipt_id", "messages", "resolution"?: {"decision", "note", "reviewer", "ts",
     "receipt_id"}}

``messages`` are the messages as the model would have seen them: Privacy's placeholders in
place of personal data (the placeholder mapping lives only in the request's memory; docs/security.md
"Review").
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from proxy.receipts.canonical import json_hash
from proxy.receipts.receipt import new_receipt, utc_timestamp
from proxy.review.queue import DecisionQueue
from proxy.server.errors import Caller, GatewayError, ledger_unavailable
from proxy.server.metrics import Metrics
from proxy.server.sink import ReceiptSink
from proxy.storage.base import LedgerError, LedgerStore

__all__ = ["QUEUE", "STATUSES", "Escalations"]

log = logging.getLogger("sonate.escalations")
QUEUE = "escalations"
#: The statuses a case can have.
STATUSES = ("pending", "resolved", "aborted")


class Escalations:
    """The escalation queue of ``store``; receipts go through ``sink``; counts in ``metrics``
    (``sonate_escalations_pending``)."""

    def __init__(self, store: LedgerStore, sink: ReceiptSink, metrics: Metrics,
                 allow_self_resolution: bool = False) -> None:
        """Bind the store, sink and metrics. No I/O. ``allow_self_resolution``: an admin may resolve
        an escalation of their own request (``review.allow_self_resolution``; default: refused)."""
        self.queue = DecisionQueue(QUEUE, store, sink, metrics)
        self.store = store
        self.metrics = metrics
        self.allow_self_resolution = allow_self_resolution

    async def open(self, case_id: str, *, request_id: str, caller: Caller, model: str, domain: str,
                   receipt_id: str, messages: list[dict[str, Any]]) -> None:
        """Queue a pending case for the escalated request (before its receipts are appended).

        Raises the 503 ``ledger_unavailable`` when the store fails.
        """
        case = {"id": case_id, "status": "pending", "created": utc_timestamp(), "request_id": request_id,
                "actor": caller.actor, "model": model, "domain": domain, "receipt_id": receipt_id,
                "messages": messages}
        try:
            await self.store.put_item(QUEUE, case)
        except LedgerError:
            raise ledger_unavailable("the request was not completed") from None
        self.metrics.escalations_pending.inc()

    async def abort(self, case_id: str) -> None:
        """Mark the case aborted (its request failed before answering); logs, never raises."""
        try:
            case = await self.store.get_item(QUEUE, case_id)
            if case:
                await self.store.update_item(QUEUE, {**case, "status": "aborted"})
                self.metrics.escalations_pending.dec()
        except LedgerError:
            log.error("could not mark case %s aborted", case_id)

    async def get(self, case_id: str) -> dict[str, Any]:
        """The case ``case_id``; GatewayError 404 when unknown, 503 when the store fails."""
        return await self.queue.get(case_id, "escalation")

    async def list(self, status: str | None = None, *, after: str | None = None,
                   limit: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        """One page of cases (with ``status`` if given), oldest first: ``(cases, cursor)``, the
        cursor (the last case's id) None when no case follows; 400 for an unknown ``after``, 503
        when the store fails."""
        return await self.queue.page(None if status is None else (status,), after=after, limit=limit)

    async def resolve(self, case_id: str, reviewer: Caller, decision: str, note: str,
                      raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """Record a reviewer's resolution of a pending case; returns (case, receipt id).

        The receipt names the compliance policy that escalated (``policy_id`` of the escalation
        receipt). Raises GatewayError 404 (unknown case), 409 (already or concurrently
        resolved), 403 ``own_escalation`` (the case was opened by the reviewer's own request and
        ``allow_self_resolution`` is off), 503 (store or ledger unavailable; the case stays pending).
        """
        case = await self.get(case_id)
        if case["status"] != "pending":
            raise GatewayError(409, f"Escalation '{case_id}' is already {case['status']}.", code="conflict")
        if case.get("actor") == reviewer.actor and not self.allow_self_resolution:
            raise GatewayError(403, f"Escalation '{case_id}' was opened by your own request; another admin must "
                                    "resolve it (review.allow_self_resolution).", "permission_error", "own_escalation")
        resolved = {**case, "status": "resolved", "resolution": {
            "decision": decision, "note": note, "reviewer": reviewer.actor, "ts": utc_timestamp()}}
        receipt = await self._receipt(case, resolved, reviewer, raw)

        def link(sealed: dict[str, Any]) -> dict[str, Any]:
            resolved["resolution"]["receipt_id"] = sealed["receipt_id"]
            return resolved

        sealed = await self.queue.decide(case, resolved, receipt, link=link)
        if sealed is None:
            raise GatewayError(409, f"Escalation '{case_id}' was resolved concurrently.", code="conflict")
        self.metrics.escalations_pending.dec()
        return resolved, sealed["receipt_id"]

    async def _receipt(self, case: dict[str, Any], resolved: dict[str, Any], reviewer: Caller,
                       raw: dict[str, Any]) -> dict[str, Any]:
        """The unsigned ``resolve`` receipt of ``resolved`` (the case without its messages)."""
        try:
            original = await self.store.get_by_id(case["receipt_id"])
        except LedgerError:
            raise ledger_unavailable() from None
        domain = case.get("domain", "general")
        return new_receipt(
            request_id="req_" + uuid.uuid4().hex, actor=reviewer.actor, intent=domain,
            inputs_hash=json_hash(raw),
            outputs_hash=json_hash({k: v for k, v in resolved.items() if k != "messages"}),
            policy_id=original["policy_id"] if original else "compliance", guardrail_action="resolve",
            evidence={"escalation_id": case["id"], "decision": resolved["resolution"]["decision"],
                      "routing": "human", "escalation_receipt_id": case["receipt_id"]},
            model=case.get("model", ""), provider="human",
            stratum={"domain": domain, "complexity": "critical", "provider": "human"})
