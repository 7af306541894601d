"""Tests that kill surviving mutants in proxy/guardrails/decisions.py (mutation/baseline.md).

The precedence refuse > escalate > mask > summarize > allow (docs/architecture.md "Request
flow") and the exact fields each decision puts into receipt evidence, checked on the pure
functions without detectors.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from proxy.guardrails.decisions import (
    Decision,
    decisive_action,
    escalation_decision,
    fmt_score,
    notice_decision,
    privacy_decision,
    safety_decision,
    summary_decision,
    unreadable_decision,
    worst_scores,
)
from proxy.guardrails.schema import CompliancePolicy, ContinuityPolicy, PrivacyPolicy, SafetyPolicy


@dataclass
class _Detector:
    name: str = "stub-detector"
    version: str = "1.2"
    components: tuple[str, ...] = ("a", "b")


@dataclass
class _Span:
    entity_type: str
    start: int
    end: int
    score: float


def test_decisive_action_follows_the_published_precedence() -> None:
    """Every pair and the full set: the earlier action of refuse, escalate, mask, summarize, allow wins."""
    order = ["refuse", "escalate", "mask", "summarize", "allow"]
    for a, b in itertools.combinations(order, 2):
        assert decisive_action([b, a]) == a and decisive_action([a, b]) == a
    assert decisive_action(list(reversed(order))) == "refuse"
    assert decisive_action(["allow", "summarize", "mask"]) == "mask"
    assert decisive_action(["summarize"]) == "summarize"
    assert decisive_action([]) == "allow"


def test_fmt_score_is_four_places_clamped_to_the_unit_interval() -> None:
    assert fmt_score(0.12345) == "0.1235"
    assert fmt_score(1) == "1.0000"
    assert fmt_score(1.7) == "1.0000"
    assert fmt_score(-0.2) == "0.0000"
    assert fmt_score(0) == "0.0000"


def test_worst_scores_takes_the_maximum_per_category() -> None:
    assert worst_scores([{"toxicity": 0.2, "threat": 0.9}, {"toxicity": 0.7}, {"threat": 0.1}]) == {
        "toxicity": 0.7, "threat": 0.9}
    assert worst_scores([{"x": -1.0}]) == {"x": 0.0}  # scores are probabilities: the floor is 0
    assert worst_scores([]) == {}


def test_safety_refuses_at_the_threshold_and_records_its_evidence() -> None:
    """Threshold reached (``>=``) refuses; evidence names the fired categories, thresholds and detector."""
    policy = SafetyPolicy(id="safety", kind="safety", stages=["input"], thresholds={"toxicity": "0.5", "threat": "0.8"})
    assert safety_decision(policy, "input", {"toxicity": 0.49, "threat": 0.79}, _Detector()) is None
    assert safety_decision(policy, "input", {}, _Detector()) is None
    decision = safety_decision(policy, "output", {"toxicity": 0.5, "threat": 0.9, "insult": 0.3}, _Detector())
    assert decision is not None
    assert (decision.policy_id, decision.kind, decision.stage, decision.action) == ("safety", "safety", "output", "refuse")
    assert decision.scores == {"insult": "0.3000", "threat": "0.9000", "toxicity": "0.5000"}
    assert decision.evidence == {
        "stage": "output",
        "categories": ["threat", "toxicity"],
        "thresholds": {"threat": "0.8", "toxicity": "0.5"},
        "detector": {"name": "stub-detector", "version": "1.2", "components": ["a", "b"]},
    }
    bare = safety_decision(policy, "input", {"threat": 0.8}, SimpleNamespace())
    assert bare.evidence["categories"] == ["threat"]
    assert bare.evidence["detector"] == {"name": "unknown", "version": "unknown", "components": []}


def test_unreadable_parts_are_refused_only_when_the_policy_says_so_and_there_are_some() -> None:
    """``unreadable_parts: refuse`` and at least one part: an input refusal scored 1 on the rule's category,
    its evidence counting the part types present (sorted) and naming the rule as its detector."""
    strict = SafetyPolicy(id="safety.parts", kind="safety", stages=["input"], thresholds={"toxicity": "0.5"},
                          unreadable_parts="refuse")
    lenient = strict.model_copy(update={"unreadable_parts": "forward"})
    parts = {"input_audio": 1, "file": 0, "image_url": 2}
    assert unreadable_decision(lenient, parts) is None
    assert unreadable_decision(strict, {"image_url": 0, "file": 0}) is None
    assert unreadable_decision(strict, {}) is None
    decision = unreadable_decision(strict, parts)
    assert decision == Decision(
        policy_id="safety.parts", kind="safety", stage="input", action="refuse",
        scores={"unreadable_content": "1.0000"},
        evidence={
            "stage": "input",
            "categories": ["unreadable_content"],
            "unreadable_parts": {"image_url": 2, "input_audio": 1},
            "detector": {"name": "unreadable-parts", "version": "policy rule (unreadable_parts: refuse)"},
        })
    assert list(decision.evidence["unreadable_parts"]) == ["image_url", "input_audio"]


def test_privacy_decision_records_offsets_never_values() -> None:
    """One span per finding with message, piece, field, type, offsets and score; sorted entity types."""
    policy = PrivacyPolicy(id="privacy", kind="privacy", stages=["input"], human_flag=False)
    spans = [[_Span("PHONE_NUMBER", 3, 15, 0.91)], [], [_Span("EMAIL_ADDRESS", 0, 9, 1.0), _Span("PERSON", 10, 14, 0.5)]]
    decision = privacy_decision(policy, "input", [0, 1, 1], spans, _Detector(),
                                fields=["content", "content", "tool_calls.0.function.arguments"],
                                piece_numbers=[4, 5, 6])
    assert (decision.policy_id, decision.kind, decision.stage, decision.action, decision.scores) == (
        "privacy", "privacy", "input", "mask", {})
    assert decision.evidence == {
        "stage": "input",
        "entity_types": ["EMAIL_ADDRESS", "PERSON", "PHONE_NUMBER"],
        "spans": [
            {"message": 0, "piece": 4, "field": "content", "entity_type": "PHONE_NUMBER", "start": 3, "end": 15,
             "score": "0.9100"},
            {"message": 1, "piece": 6, "field": "tool_calls.0.function.arguments", "entity_type": "EMAIL_ADDRESS",
             "start": 0, "end": 9, "score": "1.0000"},
            {"message": 1, "piece": 6, "field": "tool_calls.0.function.arguments", "entity_type": "PERSON",
             "start": 10, "end": 14, "score": "0.5000"},
        ],
        "human_flag": False,
        "detector": {"name": "stub-detector", "version": "1.2"},
    }
    plain = privacy_decision(policy, "output", [2], [[_Span("PERSON", 1, 2, 0.7)]], _Detector())
    assert plain.evidence["spans"] == [{"message": 2, "piece": 0, "entity_type": "PERSON", "start": 1, "end": 2,
                                        "score": "0.7000"}]


def test_compliance_escalation_and_notice_evidence() -> None:
    policy = CompliancePolicy(id="compliance", kind="compliance", stages=["input"])
    result = SimpleNamespace(domain="health", scores={"health": 0.81234, "general": 0.1}, ambiguous=0)
    escalated = escalation_decision(policy, result, "high", "esc_1", _Detector())
    assert (escalated.policy_id, escalated.kind, escalated.stage, escalated.action) == (
        "compliance", "compliance", "input", "escalate")
    assert escalated.scores == {"general": "0.1000", "health": "0.8123"}
    assert escalated.evidence == {"domain": "health", "confidence": "high", "routing": "human",
                                  "escalation_id": "esc_1", "ambiguous": False,
                                  "detector": {"name": "stub-detector", "version": "1.2"}}
    noticed = notice_decision(policy, result, "low", _Detector())
    assert (noticed.policy_id, noticed.kind, noticed.stage, noticed.action) == ("compliance", "compliance", "input", "allow")
    assert noticed.scores == escalated.scores
    assert noticed.evidence == {"domain": "health", "confidence": "low", "routing": "model", "notice": True,
                                "ambiguous": True, "detector": {"name": "stub-detector", "version": "1.2"}}
    ambiguous = SimpleNamespace(domain="legal", scores={"legal": 0.55}, ambiguous=1)
    assert escalation_decision(policy, ambiguous, "low", "esc_2", _Detector()).evidence["ambiguous"] is True


def test_summary_decision_records_hash_and_token_counts() -> None:
    policy = ContinuityPolicy(id="continuity", kind="continuity", stages=["input"], max_tokens=1000)
    decision = summary_decision(policy, "sha256:ab", 1500, 300, 6)
    assert (decision.policy_id, decision.kind, decision.stage, decision.action, decision.scores) == (
        "continuity", "continuity", "input", "summarize", {})
    assert decision.evidence == {"continuity": True, "summary_hash": "sha256:ab", "tokens_before": 1500,
                                 "tokens_after": 300, "max_tokens": 1000, "summarized_messages": 6}


@pytest.mark.parametrize("stage", ["input", "output"])
def test_decisions_are_immutable(stage: str) -> None:
    policy = SafetyPolicy(id="safety", kind="safety", stages=[stage], thresholds={"toxicity": "0.1"})
    decision = safety_decision(policy, stage, {"toxicity": 0.2}, _Detector())
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.action = "allow"  # type: ignore[misc]


# ---- where a long text's worst score was found (windows, proxy.guardrails.detectors.windows) --------


def _scores(value: float, where: dict | None = None):
    from proxy.guardrails.detectors.safety import Scores

    return Scores({"harmful_intent": value, "toxicity": 0.0}, {"harmful_intent": where} if where else {})


def test_worst_scores_keeps_the_location_of_the_text_that_gave_the_worst_score() -> None:
    here, there = {"start": 5, "end": 9, "windows": 3}, {"start": 1, "end": 2, "windows": 4}
    worst = worst_scores([_scores(0.2), _scores(0.9, here), _scores(0.5, there)])
    assert worst == {"harmful_intent": 0.9, "toxicity": 0.0} and worst.located == {"harmful_intent": here}
    # a later, higher score found in a text judged whole clears the earlier location
    assert worst_scores([_scores(0.9, here), _scores(0.95)]).located == {}
    # an equal score later does not replace the first text that reached it
    assert worst_scores([_scores(0.9), _scores(0.9, here)]).located == {}
    assert worst_scores([{"harmful_intent": 0.3}]).located == {}  # plain dicts carry no location


def test_a_refusal_names_the_window_of_each_fired_category_only() -> None:
    policy = SafetyPolicy(id="safety", kind="safety", stages=["input"],
                          thresholds={"harmful_intent": "0.5", "toxicity": "0.5"})
    here = {"start": 5, "end": 9, "windows": 3}
    decision = safety_decision(policy, "input", worst_scores([_scores(0.9, here)]), _Detector())
    assert decision.evidence["located"] == {"harmful_intent": here}
    fired_elsewhere = worst_scores([_scores(0.2, here), {"toxicity": 0.8}])  # located, but harm did not fire
    assert "located" not in safety_decision(policy, "input", fired_elsewhere, _Detector()).evidence
    assert "located" not in safety_decision(policy, "input", {"harmful_intent": 0.9}, _Detector()).evidence
