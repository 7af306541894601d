"""Tests that kill surviving mutants in proxy/kpi (mutation/baseline.md lists what survives).

Each test pins a boundary or a field the methodology defines and no other test checked:
the complexity rule's thresholds (methodology "Strata"), the declared-complexity header,
the adjudication item's final outcome and blind view, and the report window's end points.
"""

from __future__ import annotations

import pytest

from proxy.kpi.strata import SIMPLE_MAX_TOKENS, STANDARD_MAX_TOKENS, complexity_rule, declared_complexity


def _rule(prompt_tokens: int = 10, user_turns: int = 1, uses_tools: bool = False, regulated: bool = False) -> str:
    return complexity_rule(prompt_tokens=prompt_tokens, user_turns=user_turns, uses_tools=uses_tools,
                           regulated=regulated)


def test_complexity_rule_thresholds_are_inclusive_as_published() -> None:
    """Single turn ≤ 200 tokens is simple, > 2,000 tokens or tools advanced, regulated critical."""
    assert SIMPLE_MAX_TOKENS == 200 and STANDARD_MAX_TOKENS == 2000
    assert _rule(prompt_tokens=SIMPLE_MAX_TOKENS) == "simple"
    assert _rule(prompt_tokens=0) == "simple"
    assert _rule(prompt_tokens=SIMPLE_MAX_TOKENS + 1) == "standard"
    assert _rule(prompt_tokens=STANDARD_MAX_TOKENS) == "standard"
    assert _rule(prompt_tokens=STANDARD_MAX_TOKENS + 1) == "advanced"


def test_complexity_rule_turns_tools_and_regulated_domains() -> None:
    """A second user turn makes a short request standard; tools alone advanced; regulated wins."""
    assert _rule(user_turns=2) == "standard"
    assert _rule(user_turns=5, prompt_tokens=1) == "standard"
    assert _rule(user_turns=0) == "simple"
    assert _rule(uses_tools=True) == "advanced"
    assert _rule(uses_tools=True, user_turns=3, prompt_tokens=500) == "advanced"
    assert _rule(regulated=True) == "critical"
    assert _rule(regulated=True, uses_tools=True, prompt_tokens=5000) == "critical"


def test_declared_complexity_header_wins_and_is_normalised() -> None:
    """Header over metadata, trimmed and lower-cased; nothing declared is None; unknown raises."""
    assert declared_complexity(" Critical ", None) == "critical"
    assert declared_complexity("ADVANCED", {"complexity": "simple"}) == "advanced"
    assert declared_complexity(None, {"complexity": "Simple"}) == "simple"
    assert declared_complexity("", {"complexity": "standard"}) == "standard"
    assert declared_complexity(None, None) is None
    assert declared_complexity(None, {}) is None
    with pytest.raises(ValueError, match="complexity must be one of"):
        declared_complexity("extreme", None)
    with pytest.raises(ValueError):
        declared_complexity(None, {"complexity": "hard"})


# -- adjudication (methodology "Adjudication"): final outcome, reveal, blind view -------------

from proxy.kpi.adjudication import Verdict, final_outcome, record_pass, reveal, reviewer_view  # noqa: E402

_RECEIPT = {"request_id": "req_1", "receipt_id": "r1", "ts": "2026-11-01T00:00:00.000Z",
            "policy_id": "safety", "guardrail_action": "refuse"}
_NONCE_A, _NONCE_B = "a" * 64, "b" * 64


def _item(status: str = "pending") -> dict:
    return {"id": "adj_1", "status": status, "reasons": ["apology", "trigger"], "passes": {}}


def _verdict(breach: bool) -> Verdict:
    return Verdict(breach=breach, intent_permissible=True, content_harmful=False)


def test_final_outcome_only_for_agreed_or_resolved_items() -> None:
    """``final`` is the outcome only once the item is agreed/resolved; open or disputed → None."""
    item, _ = record_pass(_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    assert item["status"] == "awaiting_b" and final_outcome(item) is None
    agreed, _ = record_pass(item, reviewer="bob", verdict=_verdict(True), ts="t2", nonce=_NONCE_B)
    assert agreed["status"] == "agreed"
    assert final_outcome(agreed) == agreed["final"] and final_outcome(agreed)["label"] == "correct"
    resolved = {**agreed, "status": "resolved"}
    assert final_outcome(resolved) is agreed["final"]
    for status in ("pending", "awaiting_a", "awaiting_b", "disputed"):
        assert final_outcome({**agreed, "status": status}) is None


def test_reveal_opens_every_pass_with_its_commitment() -> None:
    """The second pass's receipt publishes verdict, nonce and commitment of both passes, by name."""
    item, _ = record_pass(_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=_verdict(False), ts="t2", nonce=_NONCE_B)
    opened = reveal(item)
    assert list(opened) == ["A", "B"]
    for name, nonce in (("A", _NONCE_A), ("B", _NONCE_B)):
        assert opened[name] == {"verdict": item["passes"][name]["verdict"], "nonce": nonce,
                                "commitment": item["passes"][name]["commitment"]}
    assert reveal({"passes": None}) == {}


def test_reviewer_view_is_blind_and_names_the_reviewers_own_pass() -> None:
    """A reviewer sees no verdicts; ``your_pass`` is the pass they gave; closed items have no open passes."""
    item, _ = record_pass(_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    ann, bob = reviewer_view(item, "ann"), reviewer_view(item, "bob")
    assert "passes" not in ann and "final" not in ann and "lead" not in ann
    assert ann["your_pass"] == "A" and bob["your_pass"] is None
    assert ann["open_passes"] == ["B"] == bob["open_passes"]
    agreed, _ = record_pass(item, reviewer="bob", verdict=_verdict(True), ts="t2", nonce=_NONCE_B)
    closed = reviewer_view(agreed, "bob")
    assert closed["open_passes"] == [] and closed["your_pass"] == "B"
    assert reviewer_view(agreed, "lead", lead=True) is agreed


def test_report_window_is_start_inclusive_end_exclusive() -> None:
    """Methodology: interactions with ``ts`` in ``[start, end)``."""
    from proxy.kpi.report import _in_window

    start, end = "2026-11-01T00:00:00.000Z", "2026-11-08T00:00:00.000Z"
    assert _in_window(start, start, end)
    assert not _in_window(end, start, end)
    assert _in_window("2026-11-07T23:59:59.999Z", start, end)
    assert not _in_window("2026-10-31T23:59:59.999Z", start, end)


# -- audit depth (docs/architecture.md "Metric conventions") ------------------------------------

from proxy.kpi.audit_depth import evidence_present  # noqa: E402


def test_evidence_counts_top_level_and_evidence_fields_but_not_empty_ones() -> None:
    """A field counts at the top level or inside ``evidence``; None, "", {} and [] do not count."""
    required = ["policy_id", "guardrail_action", "categories", "spans", "detector", "note"]
    receipt = {"policy_id": "safety", "guardrail_action": "",
               "evidence": {"categories": ["toxicity"], "spans": [], "detector": {}, "note": None,
                            "guardrail_action": "refuse"}}
    assert evidence_present(receipt, required) == 2
    assert evidence_present({"policy_id": "p"}, ["policy_id"]) == 1
    assert evidence_present({"evidence": {"policy_id": "p"}}, ["policy_id"]) == 1
    assert evidence_present({"policy_id": 0, "evidence": None}, ["policy_id", "x"]) == 1
    assert evidence_present({}, []) == 0


# -- stats (methodology "TIS", "Statistics") ----------------------------------------------------

from proxy.kpi import stats  # noqa: E402


@pytest.mark.parametrize("bad", [True, False, "0.5", None, 1.0001, -0.0001, float("nan")])
def test_tis_refuses_components_that_are_not_proportions(bad: object) -> None:
    """Booleans and numeric strings are not components (a True would pass for 1.0)."""
    with pytest.raises(ValueError, match="TIS component"):
        stats.tis(bad, 1.0, 1.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TIS component ad"):
        stats.tis(1.0, 1.0, 1.0, bad)  # type: ignore[arg-type]


def test_resolve_records_the_lead_and_the_final_outcome() -> None:
    """A disputed item resolved by the lead keeps who decided, their verdict and when."""
    from proxy.kpi.adjudication import resolve

    item, _ = record_pass(_item(), reviewer="ann", verdict=_verdict(True), ts="t1", nonce=_NONCE_A)
    item, _ = record_pass(item, reviewer="bob", verdict=_verdict(False), ts="t2", nonce=_NONCE_B)
    assert item["status"] == "disputed" and final_outcome(item) is None
    lead_verdict = _verdict(False)
    resolved = resolve(item, lead="lea", verdict=lead_verdict, ts="t3")
    assert resolved["status"] == "resolved"
    assert resolved["lead"] == {"reviewer": "lea", "verdict": lead_verdict.model_dump(), "ts": "t3"}
    assert final_outcome(resolved)["decided_by"] == "lead" and final_outcome(resolved)["ts"] == "t3"
    assert final_outcome(resolved)["label"] == "unnecessary_apology"


def test_new_item_records_when_it_was_created_and_outcome_needs_no_reasons() -> None:
    from proxy.kpi.adjudication import new_item, outcome

    item = new_item([_RECEIPT], messages=[], response=None, model_apology=False, sampled=False,
                    created="2026-11-02T00:00:00.000Z")
    assert item["created"] == "2026-11-02T00:00:00.000Z" and item["reasons"] == ["apology", "trigger"]
    assert item["ts"] == _RECEIPT["ts"] and item["receipt_ids"] == ["r1"] and item["apology_source"] == "guardrail"
    # an item without reasons (none recorded) is judged like a sampled allowed interaction
    assert outcome({}, {"breach": True, "intent_permissible": True, "content_harmful": False})["label"] == "false_negative"
    assert outcome({}, {"breach": False, "intent_permissible": True, "content_harmful": False})["label"] == "correct"


def test_new_item_domain_falls_back_to_intent_then_general() -> None:
    from proxy.kpi.adjudication import new_item

    def domain(**fields: object) -> str:
        receipt = {**_RECEIPT, **fields}
        return new_item([receipt], messages=[], response=None, model_apology=False, sampled=False, created="t")["domain"]

    assert domain(stratum={"domain": "health"}, intent="legal") == "health"
    assert domain(intent="legal") == "legal"
    assert domain(stratum={}, intent=None) == "general"
    assert domain() == "general"


def test_normalized_names_the_complexity_weights_and_refuses_unknown_strata() -> None:
    """M_norm needs exactly the four complexity strata; bad weights are named as complexity weights."""
    values = {"simple": 0.1, "standard": 0.2, "advanced": 0.3, "critical": 0.4}
    assert stats.normalized(values) == pytest.approx(0.25 * 0.1 + 0.35 * 0.2 + 0.30 * 0.3 + 0.10 * 0.4)
    with pytest.raises(ValueError, match="unknown \\['extreme'\\]"):
        stats.normalized({**values, "extreme": 0.9})
    with pytest.raises(ValueError, match="missing \\['critical'\\]"):
        stats.normalized({k: v for k, v in values.items() if k != "critical"})
    with pytest.raises(ValueError, match="^complexity weights must sum to 1"):
        stats.normalized(values, {"simple": 0.5, "standard": 0.5, "advanced": 0.5, "critical": 0.5})
    with pytest.raises(ValueError, match="^complexity weight 'simple' must be"):
        stats.normalized(values, {"simple": -0.5, "standard": 0.5, "advanced": 0.5, "critical": 0.5})


def test_the_published_methodology_block_is_exactly_the_versioned_one() -> None:
    """The block every report carries; changing any entry needs a new METHODOLOGY_VERSION and a
    docs/methodology-changelog.md entry, and then this expectation changes with it."""
    from proxy.kpi.methodology import as_dict

    assert as_dict() == {
        "version": "2026.11.22-r1",
        "complexity_weights": {"simple": 0.25, "standard": 0.35, "advanced": 0.30, "critical": 0.10},
        "tis_weights": {"lvp": 0.35, "rc": 0.20, "ga": 0.25, "ad": 0.20},
        "confidence": 0.95,
        "proportion_interval": "wilson",
        "index_interval": "normal from bootstrap (estimate ± z·SE_boot), >= 1000 resamples",
        "min_interactions": 200,
        "min_claims": 50,
        "provider_min_share": 0.15,
        "partial_pooling": "empirical-Bayes beta-binomial shrinkage toward the pooled rate (method of moments)",
        "rounding": {"proportion": "percent, 2 decimals, half-up", "index": "3 decimals, half-up"},
        "targets": {
            "far_a": {"op": "<", "value": 0.005, "unit": "proportion"},
            "far_h_general": {"op": "<", "value": 0.01, "unit": "proportion"},
            "far_h_regulated": {"op": "<", "value": 0.0025, "unit": "proportion"},
            "pfi_enterprise": {"op": ">=", "value": 0.98, "unit": "index"},
            "pfi_public": {"op": ">=", "value": 0.95, "unit": "index"},
            "tis": {"op": ">=", "value": 0.995, "unit": "index"},
        },
    }
