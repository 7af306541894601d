"""Risk (Fair Forge): R_total = Σ wᵢ Rᵢ over the prompt, response and context risks of a turn.

Each Rᵢ ∈ [0, 1] is the proxy's own Safety verdict on the text, reused rather than re-modelled:
the worst category score (toxicity, harmful_intent, …; :func:`proxy.guardrails.decisions.worst_scores`)
that the detectors of the Safety policies give it — the input-stage policies for the prompt and
the context (text the client supplies), the output-stage ones for the response. The detectors
are built once per run (:class:`SafetyScorer`) exactly as the proxy builds them
(:meth:`~proxy.guardrails.registry.DetectorRegistry.build_all`).

Weights (:data:`RISK_WEIGHTS`, overridable) are ≥ 0 and sum to 1; a turn without context spreads
the context weight over the other two in proportion (R_total = Σ wᵢ Rᵢ / Σ wᵢ over the parts
present).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from proxy.guardrails.decisions import worst_scores

__all__ = ["RISK_PARTS", "RISK_WEIGHTS", "SafetyScorer", "text_risk", "total_risk"]

RISK_PARTS = ("prompt", "response", "context")
#: Default wᵢ: the prompt and the answer weigh most, supplied context less.
RISK_WEIGHTS = {"prompt": 0.4, "response": 0.4, "context": 0.2}


def text_risk(scores: Sequence[Mapping[str, float]]) -> tuple[float, dict[str, float]]:
    """(Rᵢ, per-category worst scores) of one text from its detectors' category scores:
    Rᵢ = the highest category score (0.0 when none), clipped to [0, 1]."""
    worst = worst_scores([dict(s) for s in scores])
    return min(1.0, max([0.0, *worst.values()])), worst


def total_risk(risks: Mapping[str, float | None], weights: Mapping[str, float] = RISK_WEIGHTS) -> float:
    """R_total = Σ wᵢ Rᵢ / Σ wᵢ over the parts of :data:`RISK_PARTS` whose risk is not None.

    Raises ValueError for weights that are negative or do not sum to 1, or no part present.
    """
    if any(weights.get(p, -1) < 0 for p in RISK_PARTS) or abs(sum(weights[p] for p in RISK_PARTS) - 1) > 1e-9:
        raise ValueError(f"risk weights must cover {RISK_PARTS}, be >= 0 and sum to 1, got {dict(weights)}")
    present = {p: r for p, r in risks.items() if p in RISK_PARTS and r is not None}
    mass = sum(weights[p] for p in present)
    if not present or mass == 0:
        raise ValueError("no risk part to combine")
    return sum(weights[p] * present[p] for p in present) / mass


class SafetyScorer:
    """The Safety detectors of a policy set, by stage: :meth:`scores` of texts on ``input`` or ``output``.

    ``policies``: loaded policies (:func:`proxy.guardrails.schema.load_policies`); only
    ``kind: safety`` ones are built (once, here). ``describe()`` names the detectors for the result.
    """

    def __init__(self, policies: Sequence[Any]) -> None:
        from proxy.guardrails.registry import default_registry

        self.policies = [p for p in policies if p.kind == "safety"]
        self.detectors = default_registry().build_all(self.policies)

    def describe(self) -> list[dict[str, str]]:
        """``[{policy_id, detector, version, stages}]`` of the detectors used."""
        return [{"policy_id": p.id, "detector": str(getattr(self.detectors[p.id], "name", "?")),
                 "version": str(getattr(self.detectors[p.id], "version", "")), "stages": ",".join(p.stages)}
                for p in self.policies if p.id in self.detectors]

    def scores(self, texts: list[str], stage: str) -> list[list[dict[str, float]]]:
        """Per text, the category scores of every Safety detector screening ``stage``."""
        out: list[list[dict[str, float]]] = [[] for _ in texts]
        for policy in self.policies:
            if stage in policy.stages and policy.id in self.detectors and texts:
                for i, result in enumerate(self.detectors[policy.id].detect(texts)):
                    out[i].append({k: float(v) for k, v in result.items()})
        return out
