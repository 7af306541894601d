"""The receipts of one escalation case, checked as a chain of their own inside the ledger.

An escalated request's ``escalate`` receipt names the case (``evidence.escalation_id``); each step
a reviewer's decision took (:mod:`proxy.server.flow.review.escalations`) is a ``resolve`` receipt naming the
case, the escalation receipt (``evidence.escalation_receipt_id``) and the step before it
(``evidence.previous_receipt_id``; the first step names the escalation receipt). In ledger order
the steps must form exactly that chain: none missing, none forked, none out of order. Signatures
and the ledger's own hash chain are :func:`proxy.receipts.verify.verify_store`'s; this adds only
the case's links. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

from proxy.primitives.failure import Failure

__all__ = ["verify_case"]


def _names(receipt: dict[str, Any], case_id: str, action: str) -> bool:
    evidence = receipt.get("evidence")
    return (receipt.get("guardrail_action") == action and isinstance(evidence, dict)
            and evidence.get("escalation_id") == case_id)


def verify_case(receipts: Sequence[dict[str, Any]], case_id: str) -> tuple[list[str], list[Failure]]:
    """(the case's step names in order, failures) for the case ``case_id`` among ``receipts`` (a
    ledger's receipts in height order). A failure's ``where`` is ``case <id>``; checks:
    ``case-escalation`` (not exactly one escalation receipt), ``case-link`` (a step that does not
    name the escalation receipt or the step before it)."""
    where = f"case {case_id}"
    escalations = [r for r in receipts if _names(r, case_id, "escalate")]
    if len(escalations) != 1:
        return [], [Failure(None, None, "case-escalation",
                            f"{len(escalations)} escalation receipts name this case (expected 1)", where)]
    origin = escalations[0]["receipt_id"]
    previous, names, failures = origin, [], []
    for step in (r for r in receipts if _names(r, case_id, "resolve")):
        evidence = step["evidence"]
        names.append(str(evidence.get("step", evidence.get("decision"))))
        if evidence.get("escalation_receipt_id") != origin or evidence.get("previous_receipt_id") != previous:
            failures.append(Failure(step.get("ledger_height"), step.get("receipt_id"), "case-link",
                                    "the step does not link to the escalation receipt and the step before it"))
        previous = step.get("receipt_id")
    return names, failures
