"""The guardrail engine: applies the policy matrix to a request's messages and a model's answer.

Domain code only: no network, no files, no aiohttp. Detector work is CPU-bound; the server
calls :meth:`GuardrailEngine.screen_input` / :meth:`screen_output` from a thread pool. Detector
results are cached by content hash (:mod:`proxy.guardrails.cache`).

Decisions follow DESIGN.md "Request flow": each triggered policy yields a
:class:`Decision` ``{policy_id, action, scores, evidence}``; precedence
refuse > escalate > mask > summarize > allow decides what the client sees.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from proxy.guardrails.cache import ScanCache
from proxy.guardrails.messages import last_user_text, map_text, message_text, text_parts
from proxy.guardrails.schema import (
    PRECEDENCE,
    CompliancePolicy,
    ContinuityPolicy,
    Policy,
    PrivacyPolicy,
    SafetyPolicy,
)

log = logging.getLogger("sonate.guardrails")

#: Roles whose text the input stage screens (assistant turns were screened as outputs).
INPUT_ROLES = frozenset({"user", "system", "developer", "tool", "function"})
GENERAL_DOMAIN = "general"

TokenCounter = Callable[[str, list[dict[str, Any]]], int]


def fmt_score(value: float) -> str:
    """A probability as the decimal string receipts carry (4 places, clamped to [0, 1])."""
    return f"{min(max(float(value), 0.0), 1.0):.4f}"


@dataclass(frozen=True)
class Decision:
    """One action a policy performed: ``{policy_id, action, scores, evidence}`` (DESIGN.md).

    ``scores`` map detector categories to decimal strings; ``evidence`` holds the fields the
    policy declares in ``evidence_required`` (never raw PII values).
    """

    policy_id: str
    kind: str
    stage: str
    action: str
    scores: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class InputScreen:
    """Outcome of the input stage.

    ``action`` is the decisive action by precedence; ``messages`` are what the model may see
    (PII masked); ``triggers`` lists every policy that fired, including ones a stronger action
    pre-empted (for metrics); ``decisions`` are the actions actually performed (one receipt each).
    """

    action: str
    messages: list[dict[str, Any]]
    decisions: list[Decision]
    triggers: list[Decision]
    domain: str
    domain_confidence: str
    masker: Any = None
    apology: str | None = None
    notice: str | None = None
    escalation_id: str | None = None


@dataclass
class OutputScreen:
    """Outcome of the output stage: the text the client receives and the actions performed."""

    text: str
    decisions: list[Decision]
    refused: bool
    model_apology: bool


@dataclass
class ContinuityPlan:
    """A summarization to perform: ``older`` turns go to the summarizer, ``kept`` stay verbatim."""

    policy: ContinuityPolicy
    tokens_before: int
    head: list[dict[str, Any]]
    older: list[dict[str, Any]]
    kept: list[dict[str, Any]]


def decisive_action(actions: list[str]) -> str:
    """The action that wins by DESIGN.md precedence; ``"allow"`` for an empty list."""
    return min(actions, key=PRECEDENCE.index) if actions else "allow"


def build_detector(policy: Policy) -> Any:
    """Instantiate the detector a policy's ``detector:`` block describes (models load here).

    Raises the detector's own errors (pydantic ValidationError for a bad block).
    """
    if isinstance(policy, SafetyPolicy):
        from proxy.guardrails.detectors.safety import SafetyDetectorConfig, load_safety_detector

        return load_safety_detector(SafetyDetectorConfig.model_validate(policy.detector))
    if isinstance(policy, PrivacyPolicy):
        from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig

        return PiiDetector(PiiDetectorConfig.model_validate(policy.detector))
    if isinstance(policy, CompliancePolicy):
        from proxy.guardrails.detectors.domain import DomainClassifier, DomainClassifierConfig

        return DomainClassifier(DomainClassifierConfig.model_validate(policy.detector))
    return None  # continuity counts tokens; no model of its own


def detector_identity(detector: Any) -> dict[str, Any]:
    """``{"name", "version"}`` of a detector for receipt evidence."""
    return {"name": getattr(detector, "name", "unknown"), "version": getattr(detector, "version", "unknown")}


class GuardrailEngine:
    """Evaluates the guardrails matrix. Thread-safe; one instance per process.

    Args:
        policies: enabled policies (``load_policies``).
        detectors: policy_id → detector instance (``build_detector``); built when omitted.
        count_tokens: ``(model, messages) -> int`` (litellm's token counter, injected).
        apology_detector: detector of model-initiated apologies in outputs (optional).
    """

    def __init__(
        self,
        policies: list[Policy],
        *,
        count_tokens: TokenCounter,
        detectors: dict[str, Any] | None = None,
        apology_detector: Any = None,
        cache: ScanCache | None = None,
    ) -> None:
        self.policies = policies
        self.detectors = detectors if detectors is not None else {p.id: build_detector(p) for p in policies}
        self.count_tokens = count_tokens
        self.apology_detector = apology_detector
        self.cache = cache or ScanCache()
        for policy in policies:
            detector = self.detectors.get(policy.id)
            if detector is not None:
                log.info("policy %s (%s): detector %s %s", policy.id, policy.kind,
                         getattr(detector, "name", "?"), getattr(detector, "version", ""))

    def _of(self, kind: type, stage: str) -> list[Any]:
        return [p for p in self.policies if isinstance(p, kind) and stage in p.stages]

    # ---- input -----------------------------------------------------------------------------

    def classify_domain(self, messages: list[dict[str, Any]]) -> tuple[str, str, Any, CompliancePolicy | None]:
        """(domain, confidence, raw result, compliance policy) for the last user message."""
        policies = self._of(CompliancePolicy, "input")
        text = last_user_text(messages)
        if not policies or not text.strip():
            return GENERAL_DOMAIN, "1.0000", None, None
        policy = policies[0]
        detector = self.detectors[policy.id]
        (result,) = self.cache.map(policy.id, [text], detector.classify)
        return result.domain, fmt_score(result.confidence), result, policy

    def _safety(self, policy: SafetyPolicy, stage: str, texts: list[str]) -> Decision | None:
        texts = [t for t in texts if t.strip()]
        if not texts:
            return None
        detector = self.detectors[policy.id]
        results = self.cache.map(policy.id, texts, detector.score)
        worst: dict[str, float] = {}
        for scores in results:
            for category, value in scores.items():
                worst[category] = max(worst.get(category, 0.0), float(value))
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
                "detector": {**detector_identity(detector),
                             "components": list(getattr(detector, "components", []))},
            },
        )

    def _privacy_spans(self, policy: PrivacyPolicy, texts: list[str]) -> list[list[Any]]:
        detector = self.detectors[policy.id]
        return self.cache.map(policy.id, texts, detector.analyze_batch)

    def screen_input(self, messages: list[dict[str, Any]]) -> InputScreen:
        """Apply Safety, Compliance and Privacy to the request's messages.

        Returns the decisive action and the (masked) messages the model may see. Refusal stops
        the evaluation of weaker policies' actions (their triggers are still reported).
        """
        domain, confidence, domain_result, compliance = self.classify_domain(messages)
        texts = [message_text(m) for m in messages if m.get("role") in INPUT_ROLES]
        triggers: list[Decision] = []
        for policy in self._of(SafetyPolicy, "input"):
            decision = self._safety(policy, "input", texts)
            if decision:
                triggers.append(decision)
        if triggers:
            policy = next(p for p in self.policies if p.id == triggers[0].policy_id)
            return InputScreen("refuse", messages, [triggers[0]], triggers, domain, confidence,
                               apology=policy.apology)

        decisions: list[Decision] = []
        masker = None
        out_messages = messages
        for policy in self._of(PrivacyPolicy, "input"):
            pieces = [(i, t) for i, m in enumerate(messages) for t in text_parts(m)]
            spans = self._privacy_spans(policy, [t for _, t in pieces])
            if any(spans):
                from proxy.guardrails.detectors.pii import PiiMasker

                masker = PiiMasker()
                remaining = iter(spans)  # map_text visits pieces in text_parts order
                out_messages = [map_text(m, lambda t: masker.mask(t, next(remaining))) for m in messages]
                decisions.append(self._privacy_decision(policy, "input", [i for i, _ in pieces], spans))
            break  # one privacy policy masks; a second would only see placeholders

        escalation_id = notice = None
        if compliance is not None and domain_result is not None and domain_result.regulated:
            escalation_id = "esc_" + uuid.uuid4().hex
            notice = compliance.notice.format(domain=domain, escalation_id=escalation_id)
            decisions.append(Decision(
                policy_id=compliance.id, kind="compliance", stage="input", action="escalate",
                scores={d: fmt_score(v) for d, v in sorted(domain_result.scores.items())},
                evidence={
                    "domain": domain, "confidence": confidence, "routing": "human",
                    "escalation_id": escalation_id, "ambiguous": bool(domain_result.ambiguous),
                    "detector": detector_identity(self.detectors[compliance.id]),
                },
            ))
        triggers.extend(decisions)
        action = decisive_action([d.action for d in decisions])
        return InputScreen(action, out_messages, decisions, triggers, domain, confidence, masker=masker,
                           notice=notice, escalation_id=escalation_id)

    def _privacy_decision(self, policy: PrivacyPolicy, stage: str, message_index: list[int],
                          spans_per_text: list[list[Any]]) -> Decision:
        """Mask decision; span offsets (never values) per message index and text piece."""
        spans = [
            {"message": m, "piece": p, "entity_type": s.entity_type, "start": s.start, "end": s.end,
             "score": fmt_score(s.score)}
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
                "detector": detector_identity(self.detectors[policy.id]),
            },
        )

    # ---- continuity ------------------------------------------------------------------------

    def continuity_plan(self, messages: list[dict[str, Any]], model: str) -> ContinuityPlan | None:
        """A summarization plan when the conversation exceeds a continuity policy's budget.

        Leading system/developer messages and the last ``keep_last_messages`` stay verbatim;
        the turns between them are summarized. None when under budget or nothing to summarize.
        """
        for policy in self._of(ContinuityPolicy, "input"):
            tokens = self.count_tokens(model, messages)
            if tokens <= policy.max_tokens:
                continue
            n_head = 0
            while n_head < len(messages) and messages[n_head].get("role") in ("system", "developer"):
                n_head += 1
            body = messages[n_head:]
            if len(body) <= policy.keep_last_messages:
                continue
            split = len(body) - policy.keep_last_messages
            return ContinuityPlan(policy, tokens, messages[:n_head], body[:split], body[split:])
        return None

    def summary_request(self, plan: ContinuityPlan) -> list[dict[str, Any]]:
        """The messages to send to the summarizer model for ``plan``."""
        transcript = "\n".join(f"{m.get('role', 'user')}: {message_text(m)}" for m in plan.older)
        return [{"role": "system", "content": plan.policy.summary_prompt}, {"role": "user", "content": transcript}]

    def apply_summary(self, plan: ContinuityPlan, summary: str, model: str) -> tuple[list[dict[str, Any]], Decision]:
        """Replace ``plan.older`` with one summary message; returns (messages, summarize decision)."""
        from proxy.receipts.canonical import sha256_ref

        summary_message = {"role": "system", "content": f"Summary of the earlier conversation: {summary}"}
        messages = [*plan.head, summary_message, *plan.kept]
        tokens_after = self.count_tokens(model, messages)
        return messages, Decision(
            policy_id=plan.policy.id, kind="continuity", stage="input", action="summarize",
            evidence={
                "continuity": True,
                "summary_hash": sha256_ref(summary.encode("utf-8")),
                "tokens_before": plan.tokens_before,
                "tokens_after": tokens_after,
                "max_tokens": plan.policy.max_tokens,
                "summarized_messages": len(plan.older),
            },
        )

    # ---- output ----------------------------------------------------------------------------

    def screen_output(self, text: str, masker: Any = None) -> OutputScreen:
        """Apply output-stage policies to the model's answer ``text``.

        Order: Safety (refuse replaces the whole answer with the policy's apology), Privacy
        (new PII in the answer masked when the policy screens outputs), then placeholders from
        the input restored when the policy says so; finally model-initiated apology detection.
        """
        decisions: list[Decision] = []
        for policy in self._of(SafetyPolicy, "output"):
            decision = self._safety(policy, "output", [text])
            if decision:
                return OutputScreen(policy.apology, [decision], refused=True, model_apology=False)
        for policy in self._of(PrivacyPolicy, "output"):
            (spans,) = self._privacy_spans(policy, [text])
            if spans:
                from proxy.guardrails.detectors.pii import PiiMasker

                text = PiiMasker().mask(text, spans)
                decisions.append(self._privacy_decision(policy, "output", [0], [spans]))
        if masker is not None and any(p.restore_in_answer for p in self._of(PrivacyPolicy, "input")):
            text = masker.restore(text)
        model_apology = bool(self.apology_detector and text.strip() and self.apology_detector.is_apology(text))
        return OutputScreen(text, decisions, refused=False, model_apology=model_apology)
