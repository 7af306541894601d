"""Blind two-pass adjudication of apologies and guardrail decisions (methodology "Adjudication").

An *item* is one interaction that needs a human verdict: an apology (a guardrail refusal or a
model-initiated apology), a guardrail trigger (refuse, mask, escalate, summarize), or a random
sample of allowed requests (to find false negatives). Reviewer A and reviewer B judge it
independently — neither sees the other's verdict and one reviewer cannot give both passes — and
a lead resolves disagreements. Pure: items are JSON dicts, no I/O (the HTTP layer is
:mod:`proxy.server.http.routes.review`, the workflow :mod:`proxy.server.flow.review.adjudication`, storage the
``adjudications`` review queue of :mod:`proxy.storage.base`).

Item lifecycle (``status``)::

    pending ──A──▶ awaiting_b ──B──▶ agreed | disputed ──lead──▶ resolved
            ──B──▶ awaiting_a ──A──▶ agreed | disputed

A verdict (:class:`Verdict`) records the methodology's three questions: was there a verified
policy breach, is the intent permissible, is the content harmful on re-inspection. The item's
*outcome* follows (:func:`outcome`): an apology is **unnecessary** when there was no verified
breach, the intent is permissible and the content is non-harmful; a trigger without a breach
is a **false positive**; an allowed interaction with a breach is a **false negative**.

Verdict commitments (a hash commitment, e.g. Boneh & Shoup, *A Graduate Course in Applied
Cryptography*, §8.12): each pass draws a fresh 32-byte nonce kept with the item, never in a
receipt, and its receipt carries ``commitment = "sha256:" + hex(sha256(nonce ‖ canonical(verdict)))``
(canonical = RFC 8785). Without the nonce the 8 possible boolean triples cannot be tried against
the commitment (hiding); a committed verdict cannot be swapped later (binding). The receipt of
the second pass reveals both passes' verdicts and nonces (:func:`reveal`), so anyone holding the
two pass receipts checks the commitments with :func:`check_commitment`.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import rfc8785
from pydantic import BaseModel, ConfigDict, Field

from proxy.kpi.methodology import CONFIDENCE
from proxy.kpi.stats import bootstrap_interval, gwet_ac1

__all__ = [
    "FINAL_STATUSES",
    "LABELS",
    "OPEN_STATUSES",
    "PASSES",
    "TRIGGER_ACTIONS",
    "AdjudicationError",
    "Verdict",
    "agreement_by_domain",
    "agreement_intervals",
    "assigned",
    "check_commitment",
    "new_nonce",
    "reveal",
    "verdict_commitment",
    "final_outcome",
    "new_item",
    "outcome",
    "record_pass",
    "resolve",
    "reviewer_view",
]

PASSES = ("A", "B")
TRIGGER_ACTIONS = frozenset({"refuse", "mask", "escalate", "summarize"})
"""Guardrail actions that count as a trigger (GA denominator); ``allow`` is not one."""
LABELS = ("correct", "unnecessary_apology", "false_positive", "false_negative")
"""The categorical scale of an item's outcome (the rating AC1 is computed on)."""
OPEN_STATUSES = ("pending", "awaiting_a", "awaiting_b")
FINAL_STATUSES = ("agreed", "resolved")


class AdjudicationError(Exception):
    """A verdict that cannot be recorded: ``status`` (HTTP 403/409), ``code`` and a message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Verdict(BaseModel):
    """One reviewer's judgement of an item (the methodology's unnecessary-apology criteria).

    ``breach``: a policy breach is verified (the guardrail was right to act / should have
    acted); ``intent_permissible``: the user's intent is permissible; ``content_harmful``: the
    content is harmful on re-inspection; ``expected_policy_id``: for a false negative, the
    policy that should have fired (optional); ``note``: free text, at most 4,000 characters.
    """

    model_config = ConfigDict(strict=True, extra="forbid")
    breach: bool
    intent_permissible: bool
    content_harmful: bool
    expected_policy_id: str | None = Field(None, max_length=200)
    note: str = Field("", max_length=4000)


def new_item(receipts: list[dict[str, Any]], *, messages: list[dict[str, Any]], response: str | None,
             model_apology: bool, sampled: bool, created: str) -> dict[str, Any] | None:
    """The adjudication item of one interaction, or None when it needs no review.

    ``receipts`` are the sealed receipts of one request (the last one is the client-visible
    action); ``messages`` what the guardrails passed on (masked), ``response`` the answer text
    the client got; ``model_apology`` whether the output was a model-initiated apology;
    ``sampled`` whether this allowed interaction was drawn for false-negative review.
    Reasons: ``apology`` (a refusal or a model apology), ``trigger`` (any action in
    :data:`TRIGGER_ACTIONS`), ``sample`` (an allowed, sampled interaction with neither).
    The item id is ``"adj_" + request_id`` (one item per interaction). Raises ValueError for
    an empty receipt list.
    """
    if not receipts:
        raise ValueError("an adjudication item needs the receipts of its request")
    final = receipts[-1]
    actions = [r["guardrail_action"] for r in receipts]
    refused = "refuse" in actions
    reasons = []
    if refused or model_apology:
        reasons.append("apology")
    if any(a in TRIGGER_ACTIONS for a in actions):
        reasons.append("trigger")
    if not reasons and sampled:
        reasons.append("sample")
    if not reasons:
        return None
    request_id = final["request_id"]
    return {
        "id": "adj_" + request_id.removeprefix("req_"),
        "status": "pending",
        "created": created,
        "reasons": reasons,
        "apology_source": "guardrail" if refused else ("model" if model_apology else None),
        "request_id": request_id,
        "actor": final.get("actor"),  # whose request it was: that actor may not review it (record_pass)
        "receipt_id": final["receipt_id"],
        "receipt_ids": [r["receipt_id"] for r in receipts],
        "ts": final["ts"],
        "policy_id": final["policy_id"],
        "guardrail_action": final["guardrail_action"],
        "triggered_policies": [r["policy_id"] for r in receipts if r["guardrail_action"] in TRIGGER_ACTIONS],
        "domain": (final.get("stratum") or {}).get("domain") or final.get("intent") or "general",
        "stratum": final.get("stratum") or {},
        "model": final.get("model"),
        "provider": final.get("provider"),
        "messages": messages,
        "response": response,
        "passes": {},
    }


def outcome(item: dict[str, Any], verdict: dict[str, Any]) -> dict[str, Any]:
    """The consequences of ``verdict`` for ``item``: label and the three KPI flags.

    Returns ``{"label", "unnecessary_apology", "false_positive", "false_negative"}``:
    unnecessary apology = apology ∧ ¬breach ∧ intent permissible ∧ ¬harmful (FAR-A numerator);
    false positive = trigger ∧ ¬breach; false negative = ¬trigger ∧ breach (GA numerator).
    The label is the first true of unnecessary_apology, false_positive, false_negative, else
    ``correct`` (an unnecessary refusal is also a false positive: the flags say so).
    """
    reasons = item.get("reasons", [])
    breach = bool(verdict["breach"])
    unnecessary = ("apology" in reasons and not breach and bool(verdict["intent_permissible"])
                   and not verdict["content_harmful"])
    false_positive = "trigger" in reasons and not breach
    false_negative = "trigger" not in reasons and breach
    label = ("unnecessary_apology" if unnecessary else "false_positive" if false_positive
             else "false_negative" if false_negative else "correct")
    return {"label": label, "unnecessary_apology": unnecessary, "false_positive": false_positive,
            "false_negative": false_negative}


NONCE_BYTES = 32


def new_nonce() -> str:
    """A fresh commitment nonce: 32 random bytes (``secrets``) as 64 lowercase hex characters."""
    return secrets.token_hex(NONCE_BYTES)


def verdict_commitment(verdict: dict[str, Any], nonce: str) -> str:
    """``"sha256:" + hex(sha256(nonce bytes ‖ RFC 8785 canonical(verdict)))``.

    ``verdict`` is a :class:`Verdict` as a dict (all five fields), ``nonce`` 64 hex characters
    (:func:`new_nonce`). Raises ValueError for a nonce that is not 32 bytes of hex.
    """
    raw = bytes.fromhex(nonce)
    if len(raw) != NONCE_BYTES:
        raise ValueError(f"a commitment nonce is {NONCE_BYTES} bytes ({2 * NONCE_BYTES} hex characters)")
    return "sha256:" + hashlib.sha256(raw + rfc8785.dumps(verdict)).hexdigest()


def check_commitment(commitment: str, verdict: dict[str, Any], nonce: str) -> bool:
    """True when ``commitment`` (a pass receipt's ``verdict_commitment``) opens to ``verdict`` with
    ``nonce`` (a later receipt's ``reveal``); False for a mismatch or a malformed nonce."""
    try:
        expected = verdict_commitment(verdict, nonce)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(expected, commitment)


def reveal(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The opening of every pass of ``item``: ``{pass: {"verdict", "nonce", "commitment"}}``.

    Published in the receipt of the second pass, once blindness no longer matters.
    """
    return {name: {"verdict": p["verdict"], "nonce": p["nonce"], "commitment": p["commitment"]}
            for name, p in sorted((item.get("passes") or {}).items())}


def assigned(item: dict[str, Any], reviewer: str) -> bool:
    """True when ``item`` is assigned to ``reviewer``: still open (they may give a pass) or they
    gave one of its passes. Reviewers read only the items and receipts assigned to them."""
    passes = item.get("passes") or {}
    return item.get("status") in OPEN_STATUSES or any(p.get("reviewer") == reviewer for p in passes.values())


def own_request(item: dict[str, Any], actor: str) -> bool:
    """True when ``item`` was created by a request of ``actor`` (separation of duties: nobody reviews
    or resolves their own request's item)."""
    return bool(item.get("actor")) and item.get("actor") == actor


def record_pass(item: dict[str, Any], *, reviewer: str, verdict: Verdict, ts: str,
                requested_pass: str | None = None, nonce: str | None = None) -> tuple[dict[str, Any], str]:
    """Record a reviewer's pass; returns ``(new item, pass name)`` (the input is not modified).

    The pass keeps the verdict, its commitment nonce (``nonce``, default :func:`new_nonce`) and
    the commitment (:func:`verdict_commitment`).

    The pass is ``requested_pass`` or the first free one of A, B. After the second pass the item
    is ``agreed`` (same outcome label) with ``final`` set, or ``disputed``. Raises
    :class:`AdjudicationError` 409 when the item is not open, the pass is taken, or the reviewer
    already gave the other pass (blind two-pass: two different people), 403 when the item was
    created by the reviewer's own request (:func:`own_request`), 400 for a bad pass name.
    """
    if item["status"] not in OPEN_STATUSES:
        raise AdjudicationError(409, "not_open", f"Item '{item['id']}' is {item['status']}: no pass is open.")
    passes = dict(item.get("passes") or {})
    if own_request(item, reviewer):
        raise AdjudicationError(403, "own_request", f"Item '{item['id']}' was created by your own request; "
                                                    "another reviewer must review it.")
    if any(p.get("reviewer") == reviewer for p in passes.values()):
        raise AdjudicationError(409, "second_pass_by_same_reviewer",
                                f"You already gave a pass on item '{item['id']}'; the other pass needs another reviewer.")
    if requested_pass is not None and requested_pass not in PASSES:
        raise AdjudicationError(400, "invalid_value", f"pass must be A or B, got {requested_pass!r}")
    name = requested_pass or next(p for p in PASSES if p not in passes)
    if name in passes:
        raise AdjudicationError(409, "pass_taken", f"Pass {name} of item '{item['id']}' is already recorded.")
    nonce = nonce or new_nonce()
    dumped = verdict.model_dump()
    passes[name] = {"reviewer": reviewer, "verdict": dumped, "ts": ts, "nonce": nonce,
                    "commitment": verdict_commitment(dumped, nonce)}
    new = {**item, "passes": passes}
    if len(passes) == 1:
        new["status"] = "awaiting_b" if name == "A" else "awaiting_a"
        return new, name
    a, b = outcome(item, passes["A"]["verdict"]), outcome(item, passes["B"]["verdict"])
    if a["label"] == b["label"]:
        new["status"] = "agreed"
        expected = passes["A"]["verdict"].get("expected_policy_id") or passes["B"]["verdict"].get("expected_policy_id")
        new["final"] = {**a, "expected_policy_id": expected, "decided_by": "agreement", "ts": ts}
    else:
        new["status"] = "disputed"
    return new, name


def resolve(item: dict[str, Any], *, lead: str, verdict: Verdict, ts: str) -> dict[str, Any]:
    """The lead's tie-break of a disputed item; returns the new item with ``final`` set.

    Raises :class:`AdjudicationError` 409 unless the item is ``disputed``, or when the lead
    gave one of its passes (the tie-break is a third person); 403 when the item was created by the
    lead's own request.
    """
    if item["status"] != "disputed":
        raise AdjudicationError(409, "not_disputed",
                                f"Item '{item['id']}' is {item['status']}: only disputed items are resolved by a lead.")
    if own_request(item, lead):
        raise AdjudicationError(403, "own_request", f"Item '{item['id']}' was created by your own request; "
                                                    "another lead must resolve it.")
    if any(p.get("reviewer") == lead for p in (item.get("passes") or {}).values()):
        raise AdjudicationError(409, "lead_was_reviewer",
                                f"You gave a pass on item '{item['id']}'; the tie-break needs a third person.")
    result = outcome(item, verdict.model_dump())
    return {**item, "status": "resolved", "lead": {"reviewer": lead, "verdict": verdict.model_dump(), "ts": ts},
            "final": {**result, "expected_policy_id": verdict.expected_policy_id, "decided_by": "lead", "ts": ts}}


def final_outcome(item: dict[str, Any]) -> dict[str, Any] | None:
    """The item's final outcome (``agreed`` or ``resolved``), or None while it is open or disputed."""
    return item.get("final") if item.get("status") in FINAL_STATUSES else None


_HIDDEN = ("passes", "lead", "final")


def reviewer_view(item: dict[str, Any], reviewer: str, *, lead: bool = False) -> dict[str, Any]:
    """The item as shown to ``reviewer``: blind unless ``lead``.

    A blind view drops every verdict, reviewer name and the final outcome, and adds
    ``open_passes`` (passes still to give) and ``your_pass`` (the pass this reviewer gave, if
    any). A lead's view is the whole item.
    """
    if lead:
        return item
    passes = item.get("passes") or {}
    view = {k: v for k, v in item.items() if k not in _HIDDEN}
    view["open_passes"] = [p for p in PASSES if p not in passes] if item["status"] in OPEN_STATUSES else []
    view["your_pass"] = next((p for p, v in passes.items() if v.get("reviewer") == reviewer), None)
    return view


def _label_pairs(items: Iterable[dict[str, Any]]) -> dict[str, list[tuple[str, str]]]:
    """(pass A label, pass B label) of every double-rated item, per domain and under ``"all"``, sorted by domain."""
    pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for item in items:
        passes = item.get("passes") or {}
        if "A" in passes and "B" in passes:
            pair = (outcome(item, passes["A"]["verdict"])["label"], outcome(item, passes["B"]["verdict"])["label"])
            pairs[item.get("domain") or "general"].append(pair)
            pairs["all"].append(pair)
    return dict(sorted(pairs.items()))


def _ac1_of_pairs(ratings: Sequence[tuple[str, str]]) -> float:
    """Gwet's AC1 of (A, B) label pairs on the scale :data:`LABELS`."""
    return gwet_ac1([a for a, _ in ratings], [b for _, b in ratings], categories=LABELS)


def agreement_by_domain(items: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Gwet's AC1 between pass A and pass B per domain (and ``"all"``).

    Over items with both passes; the rating is the outcome label of each pass on the scale
    :data:`LABELS` (:func:`proxy.kpi.stats.gwet_ac1`, Gwet 2008). Returns
    ``{domain: {"n": items, "ac1": float, "observed_agreement": float}}``; domains without
    double-rated items are absent.
    """
    return {domain: {"n": len(ratings), "ac1": _ac1_of_pairs(ratings),
                     "observed_agreement": sum(x == y for x, y in ratings) / len(ratings)}
            for domain, ratings in _label_pairs(items).items()}


def agreement_intervals(items: Iterable[dict[str, Any]], confidence: float = CONFIDENCE) -> dict[str, dict[str, Any]]:
    """:func:`agreement_by_domain` with each AC1's ``confidence`` interval: ``"interval": {"low",
    "high", "confidence", "method"}``, the normal interval from a nonparametric bootstrap over
    items (:func:`proxy.kpi.stats.bootstrap_interval`: 1,000 resamples, seed 0, clipped to
    [-1, 1]; low and high None when the bootstrap gives no spread estimate). A domain with one
    item, or whose resamples all agree, gets an interval of width 0 at its AC1."""
    items = list(items)
    result = agreement_by_domain(items)
    for domain, ratings in _label_pairs(items).items():
        _, low, high = bootstrap_interval(ratings, _ac1_of_pairs, confidence=confidence, bounds=(-1.0, 1.0))
        result[domain]["interval"] = {"low": low if math.isfinite(low) else None,
                                      "high": high if math.isfinite(high) else None,
                                      "confidence": confidence, "method": "bootstrap_normal"}
    return result
