"""What each input policy of an engine would do to a prompt, and why (``sonate policy test``).

For every enabled policy that screens inputs: the detector's scores against the policy's
thresholds (Safety: the worst score per category, refused at ``score >= threshold``; Privacy:
the spans presidio reports at or above the detector's score thresholds; Compliance: the domain
probabilities, the summed regulated probability against ``threshold`` and its ``margin`` band;
Continuity: prompt tokens against ``max_tokens``), then the engine's own decisive action
(:meth:`GuardrailEngine.screen_input`, precedence refuse > escalate > mask > summarize > allow).
Domain code: detectors are called through the engine (its scan cache), nothing else; no model
provider is called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.guardrails.decisions import decisive_action, fmt_score, worst_scores
from proxy.guardrails.engine import GuardrailEngine, input_texts
from proxy.guardrails.messages import screened_text

__all__ = ["PolicyExplanation", "explain_input"]


@dataclass(frozen=True)
class PolicyExplanation:
    """One policy's verdict on a prompt: ``action`` it would take (``allow`` when it would not
    fire), ``reason`` (one line), ``scores`` and ``thresholds`` (decimal strings by category)."""

    policy_id: str
    kind: str
    action: str
    reason: str
    scores: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"policy_id": self.policy_id, "kind": self.kind, "action": self.action, "reason": self.reason,
                "scores": self.scores, "thresholds": self.thresholds}


def _safety(engine: GuardrailEngine, policy: Any, messages: list[dict[str, Any]]) -> PolicyExplanation:
    texts = input_texts(messages, policy.input_assistant_turns)
    worst = worst_scores(engine.detect(policy, texts)) if texts else {}
    thresholds = {c: str(v) for c, v in sorted(policy.thresholds.items())}
    fired = [c for c, limit in sorted(policy.thresholds.items()) if worst.get(c, 0.0) >= float(limit)]
    scores = {c: fmt_score(v) for c, v in sorted(worst.items())}
    if fired:
        why = ", ".join(f"{c} {scores[c]} >= {thresholds[c]}" for c in fired)
        return PolicyExplanation(policy.id, "safety", "refuse", f"refuse: {why}", scores, thresholds)
    below = ", ".join(f"{c} {scores.get(c, '0.0000')} < {thresholds[c]}" for c in thresholds)
    return PolicyExplanation(policy.id, "safety", "allow", f"allow: every category under its threshold ({below})",
                             scores, thresholds)


def _privacy(engine: GuardrailEngine, policy: Any, messages: list[dict[str, Any]]) -> PolicyExplanation:
    texts = [t for t in (screened_text(m) for m in messages) if t.strip()]
    spans = [s for found in (engine.detect(policy, texts) if texts else []) for s in found]
    config = getattr(engine.detectors.get(policy.id), "config", None)
    thresholds = {}
    if config is not None and hasattr(config, "score_threshold"):
        thresholds = {"score_threshold": fmt_score(config.score_threshold),
                      **{e: fmt_score(v) for e, v in sorted(getattr(config, "entity_thresholds", {}).items())}}
    scores = {f"{s.entity_type}#{i + 1}": fmt_score(s.score) for i, s in enumerate(spans)}
    if not spans:
        return PolicyExplanation(policy.id, "privacy", "allow", "allow: no personal data found", {}, thresholds)
    kinds = ", ".join(f"{s.entity_type} ({fmt_score(s.score)})" for s in spans)
    restore = "restored in the answer" if policy.restore_in_answer else "not restored in the answer"
    return PolicyExplanation(policy.id, "privacy", "mask", f"mask {len(spans)} span(s): {kinds}; placeholders "
                             f"{restore}", scores, thresholds)


def _compliance(engine: GuardrailEngine, policy: Any, messages: list[dict[str, Any]],
                first: bool) -> PolicyExplanation:
    if not first:
        return PolicyExplanation(policy.id, "compliance", "allow", "allow: only the first input compliance "
                                 "policy routes a request")
    result = engine.classify_domain(messages).result  # the open question's most regulated text
    if result is None:
        return PolicyExplanation(policy.id, "compliance", "allow", "allow: no user message")
    config = getattr(engine.detectors.get(policy.id), "config", None)
    scores = {d: fmt_score(p) for d, p in sorted(result.scores.items())}
    thresholds: dict[str, str] = {}
    regulated_sum = ""
    if config is not None and hasattr(config, "domains"):
        thresholds = {"threshold": fmt_score(config.threshold), "margin": fmt_score(config.margin)}
        total = sum(p for d, p in result.scores.items() if d in config.domains and config.domains[d].regulated)
        regulated_sum = f"regulated probability {fmt_score(total)} vs threshold {thresholds['threshold']} " \
                        f"(band from {fmt_score(config.threshold - config.margin)}, ambiguous: {config.ambiguous}); "
    where = f"{regulated_sum}domain {result.domain} ({fmt_score(result.confidence)})"
    if result.regulated:
        return PolicyExplanation(policy.id, "compliance", "escalate", f"escalate: {where}", scores, thresholds)
    if getattr(result, "notice", None):
        return PolicyExplanation(policy.id, "compliance", "allow", f"allow with a notice: {where}", scores,
                                 thresholds)
    return PolicyExplanation(policy.id, "compliance", "allow", f"allow: {where}", scores, thresholds)


def _continuity(engine: GuardrailEngine, policy: Any, messages: list[dict[str, Any]],
                model: str) -> PolicyExplanation:
    tokens = engine.count_tokens(model, messages)
    limit = {"max_tokens": str(policy.max_tokens)}
    if tokens > policy.max_tokens:
        return PolicyExplanation(policy.id, "continuity", "summarize", f"summarize: {tokens} tokens > "
                                 f"{policy.max_tokens} (when there are older turns to summarize)",
                                 {"tokens": str(tokens)}, limit)
    return PolicyExplanation(policy.id, "continuity", "allow", f"allow: {tokens} tokens <= {policy.max_tokens}",
                             {"tokens": str(tokens)}, limit)


def explain_input(engine: GuardrailEngine, messages: list[dict[str, Any]], model: str
                  ) -> tuple[list[PolicyExplanation], str]:
    """(one :class:`PolicyExplanation` per input policy of ``engine``, in configuration order;
    the engine's decisive action for ``messages``). ``model`` names the tokenizer of Continuity.

    Raises what the detectors raise.
    """
    out = []
    compliance_seen = False
    for policy in engine.policies:
        if "input" not in policy.stages:
            continue
        if policy.kind == "safety":
            out.append(_safety(engine, policy, messages))
        elif policy.kind == "privacy":
            out.append(_privacy(engine, policy, messages))
        elif policy.kind == "compliance":
            out.append(_compliance(engine, policy, messages, not compliance_seen))
            compliance_seen = True
        elif policy.kind == "continuity":
            out.append(_continuity(engine, policy, messages, model))
    summarize = [e.action for e in out if e.kind == "continuity" and e.action != "allow"]
    return out, decisive_action([engine.screen_input(messages).action, *summarize])
