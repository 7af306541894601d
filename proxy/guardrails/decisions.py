"""Guardrail decisions: ``{policy_id, action, scores, evidence}`` and how each kind fills them.

docs/architecture.md "Request flow": each policy that fires yields one :class:`Decision`; every
performed decision becomes one receipt. Precedence refuse > escalate > mask > summarize >
allow (:data:`proxy.guardrails.schema.PRECEDENCE`) decides what the client sees. Pure
functions: no detector calls, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.guardrails.detector import detector_identity
from proxy.guardrails.schema import (
    PRECEDENCE,
    UNREADABLE_CONTENT,
    CompliancePolicy,
    ContinuityPolicy,
    PrivacyPolicy,
    SafetyPolicy,
)


def fmt_score(value: float) -> str:
    """A probability as the decimal string receipts carry (4 places, clamped to [0, 1])."""
    return f"{min(max(float(value), 0.0), 1.0):.4f}"


def decisive_action(actions: list[str]) -> str:
    """The action that wins by precedence (docs/architecture.md); ``"allow"`` for an empty list."""
    return min(actions, key=PRECEDENCE.index) if actions else "allow"


@dataclass(frozen=True)
class Decision:
    """One action a policy performed: ``{policy_id, action, scores, evidence}`` (docs/architecture.md).

    ``kind`` is the policy kind, ``stage`` ``"input"`` or ``"output"``. ``scores`` map detector
    categories to decimal strings; ``evidence`` holds the fields the policy declares in
    ``evidence_required`` (never raw PII values).
    """

    policy_id: str
    kind: str
    stage: str
    action: str
    scores: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)


class Worst(dict[str, float]):
    """:func:`worst_scores`' result: category -> highest score, plus ``located``: category -> where
    in its text the worst score was found (from results that carry ``located``, e.g.
    :class:`proxy.guardrails.detectors.safety.Scores` of a long text; else empty)."""

    located: dict[str, Any]


def worst_scores(results: list[dict[str, float]]) -> dict[str, float]:
    """Per category, the highest score over all texts (a conversation is as bad as its worst text)."""
    worst = Worst()
    worst.located = {}
    for scores in results:
        for category, value in scores.items():
            if category not in worst or float(value) > worst[category]:
                worst.located.pop(category, None)
                located = getattr(scores, "located", {})
                if category in located:
                    worst.located[category] = located[category]
            worst[category] = max(worst.get(category, 0.0), float(value))
    return worst


def safety_decision(policy: SafetyPolicy, stage: str, worst: dict[str, float], detector: Any) -> Decision | None:
    """Refuse when any category's worst score reaches its threshold (``>=``); None otherwise."""
    fired = sorted(c for c, limit in policy.thresholds.items() if worst.get(c, 0.0) >= float(limit))
    if not fired:
        return None
    return Decision(
        policy_id=policy.id, kind="safety", stage=stage, action="refuse",
        scores={c: fmt_score(v) for c, v in sorted(worst.items())},
        evidence={
            "stage": stage,
            "categories": fired,
            "thresholds": {c: str(v) for c, v in sorted(policy.thresholds.items())},
            "detector": {**detector_identity(detector), "components": list(getattr(detector, "components", []))},
            # a long text's window that gave a fired score: {"start", "end", "windows"} (character offsets)
            **({"located": {c: located[c] for c in fired if c in located}}
               if any(c in (located := getattr(worst, "located", {})) for c in fired) else {}),
        },
    )


def unreadable_decision(policy: SafetyPolicy, parts: dict[str, int]) -> Decision | None:
    """Refuse when ``policy`` refuses content parts no detector reads
    (``unreadable_parts: refuse``) and ``parts`` (part type -> how many the judged messages carry)
    counts any; None otherwise. The category :data:`~proxy.guardrails.schema.UNREADABLE_CONTENT`
    scores 1 (a rule, not a detector: ``evidence.detector`` names it)."""
    if policy.unreadable_parts != "refuse" or not any(parts.values()):
        return None
    return Decision(
        policy_id=policy.id, kind="safety", stage="input", action="refuse",
        scores={UNREADABLE_CONTENT: fmt_score(1.0)},
        evidence={
            "stage": "input",
            "categories": [UNREADABLE_CONTENT],
            "unreadable_parts": {k: n for k, n in sorted(parts.items()) if n},
            "detector": {"name": "unreadable-parts", "version": "policy rule (unreadable_parts: refuse)"},
        },
    )


def privacy_decision(policy: PrivacyPolicy, stage: str, message_index: list[int | None],
                     spans_per_text: list[list[Any]], detector: Any, fields: list[str] | None = None,
                     piece_numbers: list[int] | None = None) -> Decision:
    """Mask decision; span offsets (never values) per message index and text piece.

    ``message_index[p]`` is the message of text piece ``p`` (None: a tool definition of the
    request, ``tools`` / ``tool_choice`` / ``response_format``); ``spans_per_text[p]`` its spans;
    ``fields[p]`` (optional) where in the message the piece sits (``"content"``,
    ``"tool_calls.0.function.arguments"``: :class:`proxy.guardrails.messages.TextPiece`, field
    names and positions only), recorded per span as ``field``; ``piece_numbers[p]`` (optional,
    default ``p``) the piece's number among all the request's pieces, recorded as ``piece``.
    """
    numbers = piece_numbers if piece_numbers is not None else list(range(len(message_index)))
    spans = [
        {"message": m, "piece": numbers[p], **({"field": fields[p]} if fields else {}),
         "entity_type": s.entity_type, "start": s.start, "end": s.end, "score": fmt_score(s.score)}
        for p, (m, found) in enumerate(zip(message_index, spans_per_text)) for s in found
    ]
    return Decision(
        policy_id=policy.id, kind="privacy", stage=stage, action="mask",
        scores={},
        evidence={
            "stage": stage,
            "entity_types": sorted({s["entity_type"] for s in spans}),
            "spans": spans,
            "human_flag": policy.human_flag,
            "detector": detector_identity(detector),
        },
    )


def escalation_decision(policy: CompliancePolicy, result: Any, confidence: str, escalation_id: str,
                        detector: Any) -> Decision:
    """Escalate a regulated-domain request (``result``: the detector's DomainResult) to a human."""
    return Decision(
        policy_id=policy.id, kind="compliance", stage="input", action="escalate",
        scores={d: fmt_score(v) for d, v in sorted(result.scores.items())},
        evidence={
            "domain": result.domain, "confidence": confidence, "routing": "human",
            "escalation_id": escalation_id, "ambiguous": bool(result.ambiguous),
            "detector": detector_identity(detector),
        },
    )


def notice_decision(policy: CompliancePolicy, result: Any, confidence: str, detector: Any) -> Decision:
    """Forward an ambiguous-band request with a notice (``ambiguous: notice``): action ``allow``,
    routing ``model``; ``result`` is the detector's DomainResult (its ``notice`` text is not
    recorded, the policy holds it)."""
    return Decision(
        policy_id=policy.id, kind="compliance", stage="input", action="allow",
        scores={d: fmt_score(v) for d, v in sorted(result.scores.items())},
        evidence={
            "domain": result.domain, "confidence": confidence, "routing": "model", "notice": True,
            "ambiguous": True, "detector": detector_identity(detector),
        },
    )


def summary_decision(policy: ContinuityPolicy, summary_hash: str, tokens_before: int, tokens_after: int,
                     summarized_messages: int) -> Decision:
    """Summarize decision: the summary's hash (never its text) and the token counts around it."""
    return Decision(
        policy_id=policy.id, kind="continuity", stage="input", action="summarize",
        evidence={
            "continuity": True,
            "summary_hash": summary_hash,
            "tokens_before": tokens_before,
            "tokens_after": tokens_after,
            "max_tokens": policy.max_tokens,
            "summarized_messages": summarized_messages,
        },
    )
