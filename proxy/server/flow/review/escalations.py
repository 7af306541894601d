"""Escalation cases: a compliance policy escalated a request to a human, whose decision ends it.

open (at request time, with the escalation receipt) → a reviewer's decisions
(:meth:`Escalations.resolve`, docs/api.md "Escalations"):

=========  ===================  =======================================================  ================
decision   from                 what happens                                             steps receipted
=========  ===================  =======================================================  ================
approve    pending              the model answers the screened (masked) request; its     approve,
                                answer, screened by the output policies, is the draft    model_call
answer     pending, drafted     the reviewer's own text is the draft                     answer
edit       drafted              the reviewer's text replaces the draft                   edit
release    drafted              the draft is released                                    release
reject     pending, drafted     the case ends with a reason the requester sees           reject
=========  ===================  =======================================================  ================

approve, answer and edit release the draft at once (a ``release`` step) unless the reviewer asks to
keep it (``release: false``: the case is then ``drafted``). A released or rejected case is
``resolved``; ``aborted``: the request's receipts could not be written, so the case never became
visible to its client. Every step is a receipt with ``guardrail_action: "resolve"`` (a human
action, :data:`proxy.evaluation.kpi_report.HUMAN_ACTIONS`) whose evidence names the ``step``, the
``escalation_id``, the ``escalation_receipt_id`` and the ``previous_receipt_id`` (the case's prior
step, the escalation receipt for the first): the case's receipts form a chain of their own inside
the ledger. Cases live in the store's ``"escalations"`` queue (:class:`proxy.server.flow.review.queue.DecisionQueue`)::

    {"id", "status": "pending"|"drafted"|"resolved"|"aborted", "created", "request_id", "actor",
     "model", "api": "chat"|"responses"|"messages", "domain", "receipt_id", "messages", "params",
     "sealed_mapping", "draft"?, "answer"?, "reason"?, "last_receipt_id"?,
     "steps": [{"step", "reviewer", "ts", "receipt_id"}],
     "resolution"?: {"decision", "note", "reviewer", "ts", "receipt_id", "reason"?}}

``messages`` and ``params`` are the request as the model would have seen it: Privacy's
placeholders in place of personal data; ``draft`` and ``answer`` (chat.completion objects) keep
the placeholders too. The placeholder mapping is stored only sealed under a key its requester
alone received (:mod:`proxy.server.flow.review.sealed_mapping`; docs/security.md "Review").
"""

from __future__ import annotations

import builtins
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from proxy.primitives.canonical import json_hash
from proxy.receipts.receipt import utc_timestamp
from proxy.server.errors import Caller, GatewayError, ledger_unavailable
from proxy.server.flow.receipting import Receipting, review_receipt
from proxy.server.flow.review.queue import DecisionQueue
from proxy.server.flow.review.sealed_mapping import seal_mapping
from proxy.server.flow.wire import completion_body
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerError, LedgerStore

__all__ = ["DECISIONS", "DEFAULT_REASON", "QUEUE", "STATUSES", "Decision", "Drafter", "Escalations"]

log = logging.getLogger("sonate.escalations")
QUEUE = "escalations"
#: The statuses a case can have.
STATUSES = ("pending", "drafted", "resolved", "aborted")
#: Each reviewer decision and the statuses a case may have when it is taken.
DECISIONS = {"approve": ("pending",), "answer": ("pending", "drafted"), "edit": ("drafted",),
             "release": ("drafted",), "reject": ("pending", "drafted")}
#: What the requester reads when a reviewer rejects without a reason.
DEFAULT_REASON = "A reviewer declined to answer this request."
#: The model's draft of an approved case: ``await drafter(case)`` returns (the answer as a
#: chat.completion with the placeholders kept, the call's evidence with its ``provider``);
#: GatewayError when the model cannot be called (the case is left as it was).
Drafter = Callable[[dict[str, Any]], Awaitable[tuple[dict[str, Any], dict[str, Any]]]]


@dataclass(frozen=True)
class Decision:
    """A reviewer's decision (:data:`DECISIONS`): ``content`` the text of ``answer`` / ``edit``,
    ``reason`` what the requester reads of a ``reject``, ``note`` the reviewer's note (for
    reviewers only), ``release`` False to keep an approve/answer/edit as a draft."""

    decision: str
    note: str = ""
    content: str | None = None
    reason: str | None = None
    release: bool = True


@dataclass(frozen=True)
class _Step:
    """One receipted step of a decision: its ``name``, ``output`` (hashed as ``outputs_hash``),
    extra receipt ``evidence`` and its own ``inputs`` (None: see :meth:`Escalations._receipts`)."""

    name: str
    output: dict[str, Any]
    evidence: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] | None = None


class Escalations:
    """The escalation queue of ``store``; receipts go through ``receipting``; counts in ``metrics``
    (``sonate_escalations_pending``)."""

    def __init__(self, store: LedgerStore, receipting: Receipting, metrics: Metrics,
                 allow_self_resolution: bool = False,
                 find: Callable[[str], Awaitable[dict[str, Any] | None]] | None = None) -> None:
        """Bind the store, receipt path and metrics. No I/O. ``allow_self_resolution``: an admin may resolve
        an escalation of their own request (``review.allow_self_resolution``; default: refused).
        ``find``: looks a receipt up by id across every ledger (default: ``store.get_by_id``); a
        case's review receipts go to the ledger of its escalation receipt."""
        self.queue = DecisionQueue(QUEUE, store, receipting)
        self.store = store
        self.find = find or store.get_by_id
        self.metrics = metrics
        self.allow_self_resolution = allow_self_resolution

    async def open(self, case_id: str, *, request_id: str, caller: Caller, model: str, domain: str,
                   receipt_id: str, messages: list[dict[str, Any]], mapping: dict[str, str],
                   api: str = "chat", params: dict[str, Any] | None = None) -> str:
        """Queue a pending case for the escalated request (before its receipts are appended);
        returns the key that opens its sealed placeholder ``mapping`` (for the requester only).

        ``messages`` / ``params``: the masked messages and provider parameters an approval sends
        to ``model``; ``api``: the wire format the requester reads the outcome in. Raises the 503
        ``ledger_unavailable`` when the store fails.
        """
        key, sealed = seal_mapping(mapping)
        case = {"id": case_id, "status": "pending", "created": utc_timestamp(), "request_id": request_id,
                "actor": caller.actor, "model": model, "api": api, "domain": domain, "receipt_id": receipt_id,
                "messages": messages, "params": params or {}, "sealed_mapping": sealed, "steps": []}
        try:
            await self.store.put_item(QUEUE, case)
        except LedgerError:
            raise ledger_unavailable("the request was not completed") from None
        self.metrics.escalations_pending.inc()
        return key

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

    async def resolve(self, case_id: str, reviewer: Caller, decision: Decision, raw: dict[str, Any],
                      drafter: Drafter) -> tuple[dict[str, Any], str]:
        """Record a reviewer's ``decision`` on a case (``raw``: the request body, hashed into the
        first step's receipt; ``drafter``: the model call of an approval); returns (case, the id of
        its last step's receipt).

        Raises GatewayError 404 (unknown case), 409 (the decision does not apply to the case's
        status, or another decision moved it first), 403 ``own_escalation`` (the case was opened by
        the reviewer's own request and ``allow_self_resolution`` is off), the drafter's errors
        (approve), 503 (store or ledger unavailable; the case stays as it was).
        """
        case = await self.get(case_id)
        if case["status"] not in DECISIONS[decision.decision]:
            raise GatewayError(409, f"Cannot {decision.decision} an escalation that is {case['status']} "
                                    f"(only one that is {' or '.join(DECISIONS[decision.decision])}).",
                               code="conflict")
        if case.get("actor") == reviewer.actor and not self.allow_self_resolution:
            raise GatewayError(403, f"Escalation '{case_id}' was opened by your own request; another admin must "
                                    "resolve it (review.allow_self_resolution).", "permission_error", "own_escalation")
        new, steps = await self._apply(case, decision, drafter)
        receipts = await self._receipts(case, decision.decision, steps, reviewer, raw)
        now = utc_timestamp()
        resolution = {"decision": decision.decision, "note": decision.note, "reviewer": reviewer.actor, "ts": now,
                      **({"reason": new["reason"]} if decision.decision == "reject" else {})}
        new = {**new, "resolution": resolution,
               "steps": [*case.get("steps", []), *({"step": step.name, "reviewer": reviewer.actor, "ts": now}
                                                   for step in steps)]}

        def link(sealed: list[dict[str, Any]]) -> dict[str, Any]:
            for step, receipt in zip(new["steps"][-len(sealed):], sealed):
                step["receipt_id"] = receipt["receipt_id"]
            new["resolution"]["receipt_id"] = new["last_receipt_id"] = sealed[-1]["receipt_id"]
            return new

        sealed = await self.queue.decide(case, new, receipts, link=link)
        if sealed is None:
            raise GatewayError(409, "The escalation was decided concurrently.", code="conflict")
        if new["status"] == "resolved":
            self.metrics.escalations_pending.dec()
        return new, sealed[-1]["receipt_id"]

    async def _apply(self, case: dict[str, Any], decision: Decision,
                     drafter: Drafter) -> tuple[dict[str, Any], builtins.list[_Step]]:
        """(the case after ``decision``, its steps): the model call of an approval is made here."""
        new = {k: v for k, v in case.items() if k != "resolution"}
        steps: list[_Step] = []
        if decision.decision == "reject":
            new.pop("draft", None)
            new["reason"] = decision.reason or DEFAULT_REASON
            new["status"] = "resolved"
            return new, [_Step("reject", {"reason": new["reason"]})]
        if decision.decision == "approve":
            draft, call = await drafter(case)
            request = {"messages": case["messages"], "params": case.get("params") or {}}
            steps = [_Step("approve", {}), _Step("model_call", draft, call, request)]
            new["draft"] = draft
        elif decision.decision in ("answer", "edit"):
            new["draft"] = completion_body(model=case["model"], content=decision.content or "", finish_reason="stop")
            steps = [_Step(decision.decision, new["draft"])]
        if decision.release or decision.decision == "release":
            new["answer"] = new.pop("draft")
            new["status"] = "resolved"
            steps.append(_Step("release", new["answer"]))
        else:
            new["status"] = "drafted"
        return new, steps

    async def _receipts(self, case: dict[str, Any], decision: str,
                        steps: builtins.list[_Step], reviewer: Caller,
                        raw: dict[str, Any]) -> builtins.list[dict[str, Any]]:
        """The unsigned ``resolve`` receipts of ``steps`` of the reviewer's ``decision``, each linked to the one before it (the
        first to the case's last step, else to the escalation receipt). ``inputs_hash``: the step's
        own input, else the reviewer's request body ``raw`` for the first step and the previous
        step's output after it. The model call's receipt is the provider's (``provider`` of its
        evidence), the others the human's."""
        try:
            original = await self.find(case["receipt_id"])
        except LedgerError:
            raise ledger_unavailable() from None
        domain = case.get("domain", "general")
        request_id = "req_" + uuid.uuid4().hex
        previous = case.get("last_receipt_id") or case["receipt_id"]
        inputs = json_hash(raw)
        receipts = []
        for step in steps:
            provider = step.evidence.get("provider", "human")
            receipt = review_receipt(
                action="resolve", policy_id=original["policy_id"] if original else "compliance",
                actor=reviewer.actor, intent=domain, request_id=request_id,
                inputs_hash=inputs if step.inputs is None else json_hash(step.inputs), output=step.output,
                evidence={**step.evidence, "escalation_id": case["id"], "decision": decision, "step": step.name,
                          "routing": "human", "escalation_receipt_id": case["receipt_id"],
                          "previous_receipt_id": previous},
                model=case.get("model", ""), provider=provider,
                stratum={"domain": domain, "complexity": "critical", "provider": provider})
            if original and "ledger" in original:  # the case's steps chain in the escalation's ledger
                receipt["ledger"] = original["ledger"]
            receipts.append(receipt)
            previous, inputs = receipt["receipt_id"], json_hash(step.output)
        return receipts
