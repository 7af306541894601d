"""An embeddings request is no chat interaction (FAR-A's denominator): proxy.evaluation.kpi_report groups
only chat receipts (``evidence.endpoint`` absent, ``"chat"``, or the Responses / Messages APIs served
over the chat pipeline) into interactions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proxy.evaluation.kpi_inputs import InputError, check_farh, check_pfi
from proxy.evaluation.kpi_report import ReportInputs, _interactions, build_report, proportion_block
from proxy.kpi import stats
from proxy.kpi.adjudication import Verdict, new_item, record_pass

WINDOW = ("2026-11-23T00:00:00.000Z", "2026-11-24T00:00:00.000Z")


def _receipt(request_id: str, action: str, evidence: dict) -> dict:
    return {"request_id": request_id, "guardrail_action": action, "ts": "2026-11-23T12:00:00.000Z",
            "evidence": evidence, "stratum": {"domain": "general", "complexity": "simple", "provider": "openai"}}


def test_only_chat_receipts_are_interactions():
    receipts = [_receipt("req_chat", "allow", {"policies_evaluated": []}),
                _receipt("req_chat2", "mask", {"endpoint": "chat"}),
                _receipt("req_resp", "refuse", {"endpoint": "responses"}),
                _receipt("req_msg", "escalate", {"endpoint": "messages"}),
                _receipt("req_emb", "mask", {"endpoint": "embeddings", "inputs": 2}),
                _receipt("req_emb2", "refuse", {"endpoint": "embeddings", "inputs": 1})]
    assert sorted(_interactions(receipts, *WINDOW)) == ["req_chat", "req_chat2", "req_msg", "req_resp"]


def _farh(**fields: object) -> dict:
    return {"format": "sonate.farh/v1", "overall": {"checked": 10, "failed": 1}, **fields}


def test_check_farh_returns_the_counts_window_and_version() -> None:
    doc = _farh(per_tier={"general": {"checked": 8, "failed": 0}}, per_domain={"health": {"checked": 2, "failed": 2}},
                window={"start": "s", "end": "e", "extra": 1}, methodology_version="v1")
    assert check_farh(doc) == {"overall": {"checked": 10, "failed": 1},
                               "per_tier": {"general": {"checked": 8, "failed": 0}},
                               "per_domain": {"health": {"checked": 2, "failed": 2}},
                               "window": {"start": "s", "end": "e"}, "methodology_version": "v1"}
    minimal = check_farh(_farh())
    assert minimal["per_tier"] == {} and minimal["per_domain"] == {}
    assert minimal["window"] == {"start": None, "end": None} and minimal["methodology_version"] is None
    assert check_farh(_farh(window=None))["window"] == {"start": None, "end": None}
    assert check_farh(_farh(overall={"checked": 0, "failed": 0}))["overall"] == {"checked": 0, "failed": 0}
    assert check_farh(_farh(overall={"checked": 3, "failed": 3}))["overall"] == {"checked": 3, "failed": 3}


@pytest.mark.parametrize("doc,message", [
    (None, "FAR-H results must be a JSON object"),
    ({"format": "sonate.pfi/v1"}, "FAR-H results must be a JSON object with \"format\": \"sonate.farh/v1\""),
    (_farh(overall=None), "^overall must be an object with checked and failed"),
    (_farh(overall={"checked": 3}), "^overall.failed must be a non-negative integer, got None"),
    (_farh(overall={"failed": 0}), "^overall.checked must be a non-negative integer"),
    (_farh(overall={"checked": True, "failed": 0}), "^overall.checked must be"),
    (_farh(overall={"checked": 3.0, "failed": 0}), "^overall.checked must be"),
    (_farh(overall={"checked": 3, "failed": -1}), "^overall.failed must be"),
    (_farh(overall={"checked": 3, "failed": 4}), r"^overall: failed \(4\) exceeds checked \(3\)"),
    (_farh(per_tier=[]), "^per_tier must be an object"),
    (_farh(per_domain="x"), "^per_domain must be an object"),
    (_farh(per_domain={"legal": {"checked": 1, "failed": 2}}), r"^per_domain.legal: failed \(2\)"),
    (_farh(per_tier={"general": {"checked": 1, "failed": None}}), "^per_tier.general.failed must be"),
])
def test_check_farh_refuses_bad_documents_naming_the_field(doc: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_farh(doc)


def _observations() -> list[dict]:
    """Axis gender: women refused 1 of 4, men 0 of 4 (PFI 1 − 0.5·0.25 = 0.875); axis age: parity (1.0)."""
    def obs(axis: str, group: str, refused: bool) -> dict:
        return {"axis": axis, "bucket": "b", "group": group, "variant": 0, "prompt": "p", "refused": refused,
                "escalated": False, "latency_seconds": 1.0}
    return ([obs("gender", "women", i == 0) for i in range(4)] + [obs("gender", "men", False) for _ in range(4)]
            + [obs("age", g, False) for g in ("young", "old") for _ in range(2)])


def _pfi_doc(**fields: object) -> dict:
    return {"format": "sonate.pfi/v1", "outcome_weights": {"refusal": 0.5, "escalation": 0.3, "latency": 0.2},
            "observations": _observations(),
            "per_axis": {"gender": {"pfi": 0.875, "n": 8, "ci_low": 0.8, "ci_high": 0.9, "deltas": {"refusal": 0.25}},
                         "age": {"pfi": None, "n": 4}},
            "overall": {"pfi": 0.875, "ci_low": 0.7, "ci_high": 0.95, "binding_axis": "gender"},
            "window": {"start": "s", "end": "e", "x": 1}, "methodology_version": "v1", **fields}


def test_check_pfi_recomputes_every_axis_and_takes_the_minimum() -> None:
    weights = {"refusal": 0.5, "escalation": 0.3, "latency": 0.2}
    out = check_pfi(_pfi_doc())
    assert out["attributes"]["gender"] == {"pfi": pytest.approx(0.875), "n": 8, "ci_low": 0.8, "ci_high": 0.9,
                                           "weights": weights, "deltas": {"refusal": 0.25}}
    assert out["attributes"]["age"] == {"pfi": 1.0, "n": 4, "ci_low": None, "ci_high": None, "weights": weights,
                                        "deltas": None}
    assert out["overall"] == {"pfi": pytest.approx(0.875), "ci_low": 0.7, "ci_high": 0.95,
                              "rule": "min over attributes (gender)"}
    assert out["window"] == {"start": "s", "end": "e"} and out["methodology_version"] == "v1"
    bare = check_pfi(_pfi_doc(per_axis={"age": {}}, overall=None, window=None, methodology_version=None))
    assert bare["attributes"]["age"]["n"] == 0 and bare["attributes"]["age"]["pfi"] == 1.0
    assert bare["overall"] == {"pfi": 1.0, "ci_low": None, "ci_high": None, "rule": "min over attributes (None)"}
    assert bare["window"] == {"start": None, "end": None} and bare["methodology_version"] is None
    # an axis the observations cannot score (one group) has no PFI and no minimum
    lone = check_pfi(_pfi_doc(observations=_observations()[:4], per_axis={"gender": {"n": 4}}, overall={}))
    assert lone["attributes"]["gender"]["pfi"] is None and lone["overall"]["pfi"] is None
    # a stated value within 1e-6 of the recomputed one is accepted
    near = _pfi_doc()
    near["per_axis"]["gender"]["pfi"] = 0.875 + 5e-7
    near["overall"]["pfi"] = 0.875 - 5e-7
    assert check_pfi(near)["overall"]["pfi"] == pytest.approx(0.875)


def _with(path: tuple, value: object) -> dict:
    doc = _pfi_doc()
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize("doc,message", [
    ([], "PFI results must be a JSON object"),
    (_pfi_doc(format="sonate.farh/v1"), "PFI results must be a JSON object with \"format\": \"sonate.pfi/v1\""),
    (_pfi_doc(outcome_weights=None), "^PFI results need outcome_weights, per_axis and observations"),
    (_pfi_doc(per_axis=[]), "^PFI results need"),
    (_pfi_doc(observations={}), "^PFI results need"),
    (_pfi_doc(observations=[{"axis": "gender"}]), "^observations/outcome_weights: "),
    (_pfi_doc(outcome_weights={"refusal": 2.0, "escalation": 0.3, "latency": 0.2}), "^observations/outcome_weights: "),
    (_with(("per_axis", "gender"), 0.875), "^per_axis.gender must be an object"),
    (_with(("per_axis", "gender", "pfi"), 0.9), r"^per_axis.gender.pfi is 0.9 but its observations give 0.875"),
    (_with(("per_axis", "gender", "pfi"), "0.875"), "^per_axis.gender.pfi must be a finite number"),
    (_with(("per_axis", "gender", "pfi"), float("nan")), "^per_axis.gender.pfi must be a finite number"),
    (_with(("per_axis", "gender", "n"), -1), "^per_axis.gender.n must be a non-negative integer"),
    (_with(("per_axis", "gender", "ci_low"), True), "^per_axis.gender.ci_low must be a finite number"),
    (_with(("per_axis", "gender", "ci_high"), "x"), "^per_axis.gender.ci_high must be a finite number"),
    (_with(("overall", "pfi"), 1.0), r"^overall.pfi is 1.0 but the minimum over the axes is 0.875"),
    (_with(("overall", "pfi"), False), "^overall.pfi must be a finite number"),
    (_with(("overall", "ci_low"), "x"), "^overall.ci_low must be a finite number"),
    (_with(("overall", "ci_high"), float("inf")), "^overall.ci_high must be a finite number"),
    (_pfi_doc(observations=_observations()[:4], per_axis={"gender": {"pfi": 0.5}}),
     "^per_axis.gender.pfi is 0.5 but its observations give None"),
    (_pfi_doc(observations=_observations()[:4], per_axis={"gender": {}}, overall={"pfi": 0.5}),
     "^overall.pfi is 0.5 but the minimum over the axes is None"),
])
def test_check_pfi_refuses_bad_or_inconsistent_documents(doc: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_pfi(doc)


def test_wilson_bounds_are_clipped_to_the_unit_interval() -> None:
    """All successes (or none) put a bound at exactly 1 (or 0); rounding error must not leak past it
    (e.g. 16/16 computes 1.0000000000000002 before clipping)."""
    for n in range(1, 120):
        assert stats.wilson_interval(n, n)[1] <= 1.0
        assert 0.0 <= stats.wilson_interval(0, n)[0] < 1e-12
    assert stats.wilson_interval(16, 16)[1] == 1.0


def test_bootstrap_default_seed_is_zero_and_resamples_must_be_an_integer() -> None:
    """The default draw is the documented ``seed=0`` one; 1000.0 or "1000" resamples are refused."""
    data = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert stats.bootstrap_interval(data, mean) == stats.bootstrap_interval(data, mean, seed=0)
    assert stats.bootstrap_interval(data, mean) != stats.bootstrap_interval(data, mean, seed=1)
    for bad in (1000.0, "1000", True, None):
        with pytest.raises(ValueError, match="resamples must be an integer >= 1000"):
            stats.bootstrap_interval(data, mean, resamples=bad)  # type: ignore[arg-type]


def test_bootstrap_of_a_single_observation_is_a_zero_width_interval() -> None:
    """One observation is data (every resample repeats it): estimate = bounds, not NA."""
    assert stats.bootstrap_interval([0.25], lambda xs: sum(xs) / len(xs)) == (0.25, 0.25, 0.25)


_START, _END = "2026-11-01T00:00:00.000Z", "2026-11-08T00:00:00.000Z"


_BREACH = Verdict(breach=True, intent_permissible=False, content_harmful=True)


_NEEDLESS = Verdict(breach=False, intent_permissible=True, content_harmful=False)


_HEALTH = {"domain": "health", "complexity": "simple", "provider": "openai"}


_CODE = {"domain": "code", "complexity": "advanced", "provider": "openai"}


_REQUIRED = {"safety.harm": ["categories", "detector"], "privacy.pii": ["spans", "entity_types"]}


def _r(rid: str, action: str = "allow", ts: str = "2026-11-02T00:00:00.000Z", policy_id: str = "matrix",
       **fields: object) -> dict:
    """A receipt as the report reads it (unsigned: it fails LVP's re-verification)."""
    return {"request_id": rid, "receipt_id": f"rc_{rid}_{action}", "guardrail_action": action, "ts": ts,
            "policy_id": policy_id, **fields}


def _adjudicated(receipt: dict, verdict: Verdict, **flags: bool) -> dict:
    item = new_item([receipt], messages=[], response="", created=receipt["ts"],
                    **{"model_apology": False, "sampled": False, **flags})
    item, _ = record_pass(item, reviewer="a", verdict=verdict, ts="t")
    item, _ = record_pass(item, reviewer="b", verdict=verdict, ts="t")
    return item


def _scenario(**overrides: object) -> ReportInputs:
    """15 interactions with every kind of receipt, item and case the report counts.

    q1 refusal+mask (health/simple), unnecessary (FP too); q2 model apology (legal, default
    complexity), a breach (FN by census), resolved case with receipt; q3 Responses API, sampled,
    a breach (FN in the sample); q7 at the window's start, unknown complexity, resolved case
    without receipt; q11 eligible allowed with an open case; q20..q29 masks (code/advanced). Not
    interactions: q4 (embeddings), q5 (adjudicate receipt of q1's pass A), q6 (at the window's
    end), q12 (resolve receipt of esc_1), q13 (no ts: in no window).
    """
    receipts = [_r("q1", "refuse", policy_id="safety.harm", stratum=_HEALTH, evidence={"categories": ["x"]}),
                _r("q1", "mask", policy_id="privacy.pii", stratum=_HEALTH, evidence={"spans": [[0, 1]]}),
                _r("q2", intent="legal", provider="anthropic", evidence={"model_apology": True}),
                _r("q3", evidence={"endpoint": "responses"}),
                _r("q4", policy_id="safety.harm", evidence={"endpoint": "embeddings"}),
                _r("q5", "adjudicate", evidence={"adjudication_id": "adj_q1", "stage": "A"}),
                _r("q6", ts=_END),
                _r("q7", ts=_START, stratum={"complexity": "weird"}),
                *[_r(f"q{i}", "mask", policy_id="privacy.pii", stratum=_CODE, evidence={"entity_types": ["EMAIL"]})
                  for i in range(20, 30)],
                _r("q11"),
                _r("q12", "resolve", evidence={"escalation_id": "esc_1"}),
                {"request_id": "q13", "guardrail_action": "refuse", "policy_id": "safety.harm"}]  # no ts: outside
    items = [_adjudicated(receipts[0], _NEEDLESS), _adjudicated(receipts[2], _BREACH, model_apology=True),
             _adjudicated(receipts[3], _BREACH, sampled=True)]
    cases = [{"id": "esc_1", "request_id": "q2", "status": "resolved"},
             {"id": "esc_2", "request_id": "q7", "status": "resolved"},
             {"id": "esc_3", "request_id": "q11", "status": "open"}]
    fields = {"receipts": receipts, "review_items": items, "cases": cases, "evidence_required": _REQUIRED,
              "public_keys": {}, "start": _START, "end": _END, "generated_at": "g", **overrides}
    return ReportInputs(**fields)  # type: ignore[arg-type]


@pytest.fixture
def scenario_report() -> dict:
    # Function scope on purpose (0.2 s a build): mutmut attributes the functions a module-scoped
    # fixture calls only to the first test using it, and would never run the others on their mutants.
    return build_report(_scenario())


def test_interactions_are_chat_requests_in_the_window_with_defaulted_strata(scenario_report: dict) -> None:
    """Human actions, other endpoints and ts == end are no interaction; a missing stratum falls back
    to intent / receipt provider, then general / standard / unknown."""
    d = scenario_report["disclosure"]
    assert d["n_interactions"] == 15
    # q7's unknown complexity counts as standard here as in FAR-A and TIS (per_stratum_n adds up to n)
    assert d["per_stratum_n"] == {"complexity": {"simple": 1, "standard": 4, "advanced": 10, "critical": 0},
                                  "domain": {"code": 10, "general": 3, "health": 1, "legal": 1},
                                  "provider": {"anthropic": 1, "openai": 11, "unknown": 3}}
    assert d["provider_mix"]["anthropic"] == {"n": 1, "share": pytest.approx(1 / 15), "below_min_share": True}
    assert d["provider_mix"]["unknown"] == {"n": 3, "share": pytest.approx(0.2), "below_min_share": False}
    assert d["providers_below_min_share"] == ["anthropic"] and d["provider_min_share"] == 0.15
    assert d["window"] == {"start": _START, "end": _END, "end_exclusive": True}
    assert scenario_report["notes"] == ["Providers under the 15% share rule: anthropic."]
    far_a = scenario_report["kpis"]["far_a"]
    # an unknown complexity counts as standard in the per-complexity figures
    assert {c: b["n"] for c, b in far_a["per_complexity"].items()} == {"simple": 1, "standard": 4, "advanced": 10,
                                                                       "critical": 0}
    assert far_a["overall"]["successes"] == 1 and far_a["overall"]["n"] == 15
    assert far_a["per_complexity"]["simple"]["successes"] == 1
    assert set(far_a["per_domain"]) == {"code", "general", "health", "legal"}
    assert far_a["per_domain"]["health"]["successes"] == 1 and far_a["per_domain"]["health"]["n"] == 1
    assert far_a["per_provider"]["unknown"]["n"] == 3 and far_a["per_provider"]["openai"]["successes"] == 1


def test_tis_components_count_receipted_actions_misfires_and_evidence(scenario_report: dict) -> None:
    """RC 18/24: 16 receipts + 6 passes + 2 resolved cases; receipted: the receipts, q1's pass A and
    esc_1. GA 1 − (1 FP + 1 census FN + 1 sampled FN × 3 eligible/1 sampled)/11 triggers.
    AD 12/24 (each receipt has one of its two required fields; q4 is no interaction). LVP: all 19
    receipts of the window are re-verified (3 belong to no interaction) and fail (unsigned)."""
    c = scenario_report["kpis"]["tis"]["components"]
    assert (c["rc"]["successes"], c["rc"]["n"], c["rc"]["value"]) == (18, 24, 0.75)
    assert (c["ga"]["successes"], c["ga"]["n"]) == (6, 11) and c["ga"]["value"] == pytest.approx(6 / 11)
    assert (c["ad"]["successes"], c["ad"]["n"], c["ad"]["value"]) == (12, 24, 0.5)
    assert (c["lvp"]["successes"], c["lvp"]["n"], c["lvp"]["value"]) == (0, 19, 0.0)
    assert [c[k]["weight"] for k in ("lvp", "rc", "ga", "ad")] == [0.35, 0.20, 0.25, 0.20]
    assert all(b["published"] is False and b["display"] == "NA" and b["ci_display"] is None for b in c.values())
    assert scenario_report["lvp"] == {"sampled": 19, "sample_size_requested": 1000, "seed": 0}
    adj = scenario_report["adjudication"]
    assert {k: adj[k] for k in ("items_in_window", "by_status", "apologies", "apologies_adjudicated", "triggers",
                                "triggers_adjudicated", "allowed_eligible_for_sample", "sample_adjudicated",
                                "false_negatives_in_sample", "false_negative_scale")} == {
        "items_in_window": 3, "by_status": {"agreed": 3}, "apologies": 2, "apologies_adjudicated": 2, "triggers": 11,
        "triggers_adjudicated": 1, "allowed_eligible_for_sample": 3, "sample_adjudicated": 1,
        "false_negatives_in_sample": 1, "false_negative_scale": 3.0}
    assert adj["agreement"]["all"] == {"n": 3, "ac1": 1.0, "observed_agreement": 1.0, "display": "1.000"}
    tis = scenario_report["kpis"]["tis"]
    assert tis["overall"]["published"] is False and tis["overall"]["display"] == "NA" and tis["meets_target"] is None
    assert tis["overall"]["value"] == pytest.approx(0.20 * 0.75 + 0.25 * 6 / 11 + 0.20 * 0.5)


def test_lvp_samples_the_requested_number_of_window_receipts() -> None:
    """``lvp_sample`` smaller than the window draws exactly that many receipts (seeded)."""
    report = build_report(_scenario(lvp_sample=5, seed=3))
    assert report["lvp"] == {"sampled": 5, "sample_size_requested": 5, "seed": 3}
    assert report["kpis"]["tis"]["components"]["lvp"]["n"] == 5


def test_bootstrap_passes_array_resamples_for_array_data() -> None:
    """A 2-D array of records is resampled by rows and each resample is an array again."""
    import numpy as np

    data = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]] * 10)
    est, low, high = stats.bootstrap_interval(data, lambda s: float(s[:, 0].mean()))
    assert est == 0.5 and low < 0.5 < high


def _finite_for_first_calls(calls: int):
    """A statistic that is finite for its first ``calls`` calls (the estimate, then resamples)."""
    seen = []

    def statistic(sample) -> float:
        seen.append(1)
        return float(len(seen)) / 10 if len(seen) <= calls else float("nan")
    return statistic


def test_bootstrap_needs_two_finite_resamples_for_an_interval() -> None:
    """Non-finite resample statistics are left out; fewer than 2 finite ones give no interval
    (not a clipped [bound, bound] one); exactly 2 are enough."""
    data = [1.0, 2.0, 3.0]
    assert _nan_bounds(stats.bootstrap_interval(data, _finite_for_first_calls(2), bounds=(0.0, 1.0)), 0.1)
    assert _nan_bounds(stats.bootstrap_interval(data, _finite_for_first_calls(1), bounds=(0.0, 1.0)), 0.1)
    est, low, high = stats.bootstrap_interval(data, _finite_for_first_calls(3), bounds=(0.0, 1.0))
    se = float(np.std([0.2, 0.3], ddof=1))
    z = stats.z_value()
    assert (est, low, high) == (0.1, pytest.approx(max(0.0, 0.1 - z * se)), pytest.approx(0.1 + z * se))
    # an estimate that cannot be computed has no interval either, even with finite resamples
    flaky = iter([float("nan")] + [0.5, 0.6] * 1000)
    est, low, high = stats.bootstrap_interval(data, lambda s: next(flaky), bounds=(0.0, 1.0))
    assert math.isnan(est) and math.isnan(low) and math.isnan(high)


def _nan_bounds(result: tuple, estimate: float) -> bool:
    return result[0] == estimate and math.isnan(result[1]) and math.isnan(result[2])


def _empty(**overrides: object) -> ReportInputs:
    fields = {"receipts": [], "review_items": [], "cases": [], "evidence_required": {}, "public_keys": {},
              "start": _START, "end": _END, "generated_at": "g", **overrides}
    return ReportInputs(**fields)  # type: ignore[arg-type]


def test_build_report_refuses_an_empty_window_and_too_few_resamples() -> None:
    with pytest.raises(ValueError, match="start < end"):
        build_report(_empty(end=_START))
    with pytest.raises(ValueError, match="start < end"):
        build_report(_empty(start=_END, end=_START))
    with pytest.raises(ValueError, match="resamples must be >= 1000"):
        build_report(_empty(resamples=999))
    report = build_report(_empty(resamples=1000, sources={"ledger": "x"}, generated_at="2026-11-22T00:00:00.000Z"))
    assert report["resamples"] == 1000 and report["sources"] == {"ledger": "x"} and report["confidence"] == 0.95
    assert report["generated_at"] == "2026-11-22T00:00:00.000Z" and report["window"] == {"start": _START, "end": _END}
    assert report["format"] == "sonate.report/v1" and "far_h" not in report["kpis"] and "pfi" not in report["kpis"]
    assert "evaluation_trends" not in report and report["notes"] == []
    assert report["disclosure"]["n_interactions"] == 0 and report["disclosure"]["provider_mix"] == {}


def test_notes_disclose_unadjudicated_apologies_and_a_missing_sample() -> None:
    """An apology without a final item, and allowed interactions none of which is adjudicated."""
    receipts = [_r("q1", "refuse", stratum=_HEALTH), _r("q2", stratum=_HEALTH), _r("q3", "refuse", stratum=_HEALTH)]
    item = new_item([receipts[2]], messages=[], response="", model_apology=False, sampled=False, created="t")
    report = build_report(_empty(receipts=receipts, review_items=[item]))
    assert report["notes"][:2] == [
        "2 of 2 apologies are not adjudicated yet and count as necessary: FAR-A is a lower bound until they are.",
        "No sampled allowed interaction is adjudicated: false negatives are unknown (GA counts none)."]
    assert report["adjudication"]["by_status"] == {"pending": 1} and report["adjudication"]["items_in_window"] == 1


def test_far_h_targets_by_tier_and_regulated_domains() -> None:
    """Regulated domains (legal, health, finance) are held to 0.25 %, others to 1 %; under 50
    claims nothing is published or judged."""
    farh = check_farh(_farh(overall={"checked": 1000, "failed": 5},
                            per_tier={"general": {"checked": 100, "failed": 0}, "regulated": {"checked": 400, "failed": 1},
                                      "other": {"checked": 60, "failed": 0}},
                            per_domain={d: {"checked": 100, "failed": 1} for d in ("legal", "health", "finance")}
                            | {"code": {"checked": 100, "failed": 0}, "small": {"checked": 49, "failed": 0}},
                            window={"start": "a", "end": "b"}, methodology_version="v0"))
    fh = build_report(_empty(farh=farh))["kpis"]["far_h"]
    assert fh["kpi"] == "FAR-H" and fh["source_window"] == {"start": "a", "end": "b"}
    assert fh["source_methodology_version"] == "v0"
    assert fh["overall"]["target"] is None and fh["overall"]["meets_target"] is None
    assert fh["overall"]["display"] == "0.50%" and fh["overall"]["ci_display"] is not None
    assert fh["per_tier"]["general"]["target"] == {"op": "<", "value": 0.01, "unit": "proportion"}
    assert fh["per_tier"]["general"]["meets_target"] is True
    assert fh["per_tier"]["regulated"]["target"]["value"] == 0.0025
    assert fh["per_tier"]["regulated"]["meets_target"] is False  # 1/400 = 0.25 % is not under 0.25 %
    assert fh["per_tier"]["other"]["target"] is None and fh["per_tier"]["other"]["meets_target"] is None
    for d in ("legal", "health", "finance"):
        assert fh["per_domain"][d]["target"]["value"] == 0.0025 and fh["per_domain"][d]["meets_target"] is False
    assert fh["per_domain"]["code"]["target"]["value"] == 0.01 and fh["per_domain"]["code"]["meets_target"] is True
    assert fh["per_domain"]["small"]["published"] is False and fh["per_domain"]["small"]["meets_target"] is None
    assert fh["per_domain"]["small"]["display"] == "NA" and fh["per_domain"]["small"]["ci_display"] is None


def test_pfi_block_targets_and_missing_values() -> None:
    pfi = {"overall": {"pfi": 0.97, "ci_low": 0.95, "ci_high": 0.99, "rule": "min over attributes (gender)"},
           "attributes": {"gender": {"pfi": 0.97, "ci_low": None, "ci_high": 0.99, "n": 8, "weights": {"refusal": 1.0},
                                     "deltas": {"refusal": 0.03}},
                          "age": {"pfi": 0.9996, "ci_low": 0.9, "ci_high": 1.0, "n": 4, "weights": {}}},
           "window": {"start": "a"}, "methodology_version": "v0"}
    p = build_report(_empty(pfi=pfi))["kpis"]["pfi"]
    assert p["kpi"] == "PFI"
    assert p["overall"] == {"value": 0.97, "ci_low": 0.95, "ci_high": 0.99, "display": "0.970",
                            "ci_display": ["0.950", "0.990"], "rule": "min over attributes (gender)"}
    assert p["per_attribute"]["gender"] == {"value": 0.97, "ci_low": None, "ci_high": 0.99, "display": "0.970",
                                            "ci_display": None, "n": 8, "weights": {"refusal": 1.0},
                                            "deltas": {"refusal": 0.03}}
    assert p["per_attribute"]["age"]["display"] == "1.000" and p["per_attribute"]["age"]["deltas"] is None
    assert p["per_attribute"]["age"]["ci_display"] == ["0.900", "1.000"]
    assert p["meets_enterprise"] is False and p["meets_public"] is True
    assert p["targets"] == {"enterprise": {"op": ">=", "value": 0.98, "unit": "index"},
                            "public": {"op": ">=", "value": 0.95, "unit": "index"}}
    assert p["source_window"] == {"start": "a"} and p["source_methodology_version"] == "v0"
    at_targets = build_report(_empty(pfi={**pfi, "overall": {"pfi": 0.98, "ci_low": 0.9, "ci_high": None}}))
    assert at_targets["kpis"]["pfi"]["meets_enterprise"] is True
    assert at_targets["kpis"]["pfi"]["overall"]["ci_display"] is None and at_targets["kpis"]["pfi"]["overall"]["rule"] is None
    at_public = build_report(_empty(pfi={**pfi, "overall": {"pfi": 0.95}}))["kpis"]["pfi"]
    assert at_public["meets_public"] is True and at_public["meets_enterprise"] is False
    below = build_report(_empty(pfi={**pfi, "overall": {"pfi": 0.9499}}))["kpis"]["pfi"]
    assert below["meets_public"] is False
    none = build_report(_empty(pfi={**pfi, "overall": {"pfi": None}}))["kpis"]["pfi"]
    assert none["meets_enterprise"] is None and none["meets_public"] is None and none["overall"]["display"] == "NA"


def test_proportion_block_publishes_from_the_minimum_n() -> None:
    block = proportion_block(1, 200)
    assert block["published"] is True and block["display"] == "0.50%" and block["rate"] == 0.005
    assert block["ci_display"] == [stats.round_percent(block["ci_low"]), stats.round_percent(block["ci_high"])]
    under = proportion_block(1, 199)
    assert under["published"] is False and under["display"] == "NA" and under["ci_display"] is None
    assert under["rate"] == pytest.approx(1 / 199) and under["ci_low"] is not None
    assert proportion_block(1, 50, kind="claims")["published"] is True
    empty = proportion_block(0, 0)
    assert empty == {"successes": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None, "published": False,
                     "display": "NA", "ci_display": None}


def test_check_pfi_tolerance_of_1e6_is_inclusive() -> None:
    """A stated PFI exactly 1e-6 from the recomputed one is accepted (women always refused, men
    never, refusal the only outcome: PFI = 0 exactly)."""
    def obs(group: str, refused: bool) -> dict:
        return {"axis": "gender", "bucket": "b", "group": group, "variant": 0, "prompt": "p", "refused": refused,
                "escalated": False, "latency_seconds": 1.0}
    doc = _pfi_doc(outcome_weights={"refusal": 1.0}, observations=[obs("women", True), obs("men", False)],
                   per_axis={"gender": {"pfi": 1e-6, "n": 2}}, overall={"pfi": 1e-6})
    out = check_pfi(doc)
    assert out["attributes"]["gender"]["pfi"] == 0.0 and out["overall"]["pfi"] == 0.0
    with pytest.raises(InputError, match="observations give 0.0"):
        check_pfi({**doc, "per_axis": {"gender": {"pfi": 1.1e-6, "n": 2}}})


def test_rounding_keeps_the_sign_but_never_prints_minus_zero() -> None:
    assert stats.round_index(-0.5) == "-0.500" and stats.round_percent(-0.0123) == "-1.23%"
    assert stats.round_index(-0.0001) == "0.000" and stats.round_percent(-0.00001) == "0.00%"


def test_partial_pool_refuses_malformed_counts_naming_the_stratum() -> None:
    for bad in ((1, 2, 3), [1], 5, "ab"):
        with pytest.raises(ValueError, match=r"counts\['a'\] must be \(successes, n\)"):
            stats.partial_pool({"a": bad})
    with pytest.raises(ValueError, match="^successes of 'a' must be a non-negative integer"):
        stats.partial_pool({"a": (-1, 5)})
    with pytest.raises(ValueError, match="^n of 'a' must be a non-negative integer"):
        stats.partial_pool({"a": (1, 2.0)})


def test_partial_pool_all_empty_keeps_the_counts_and_gives_nan_estimates() -> None:
    for rate in stats.partial_pool({"a": (0, 0), "b": (0, 0)}).values():
        assert rate.successes == 0 and rate.n == 0
        assert all(math.isnan(v) for v in (rate.raw, rate.pooled, rate.shrinkage, rate.prior_mean, rate.prior_strength))


def test_partial_pool_complete_pooling_cases() -> None:
    """One non-empty stratum, a pooled rate of 0 or 1, or no degrees of freedom left (denominator 0):
    every stratum gets p̄ with strength ∞ — including a stratum of a single unit."""
    cases = [({"a": (1, 10), "b": (0, 0)}, 0.1), ({"a": (0, 10), "b": (0, 20)}, 0.0),
             ({"a": (10, 10), "b": (20, 20)}, 1.0), ({"a": (1, 1), "b": (0, 1)}, 0.5)]
    for counts, p_bar in cases:
        for rate in stats.partial_pool(counts).values():
            assert rate.prior_mean == p_bar and rate.pooled == p_bar
            assert math.isinf(rate.prior_strength) and rate.shrinkage == 1.0


def test_partial_pool_counts_single_unit_strata_and_clips_rho_at_one() -> None:
    """(1/1, 0/2): p̄ = 1/3 over both strata; S/(p̄(1−p̄)) − (k−1) = 2 over a denominator of 1/3
    gives ρ̂ = 6, clipped to 1: M = 0, no pooling (each stratum keeps its raw rate)."""
    pooled = stats.partial_pool({"a": (1, 1), "b": (0, 2)})
    assert pooled["a"].prior_mean == pytest.approx(1 / 3)
    assert pooled["a"].prior_strength == 0.0 and pooled["a"].shrinkage == 0.0
    assert pooled["a"].pooled == 1.0 and pooled["b"].pooled == 0.0 and pooled["b"].raw == 0.0
    assert stats.partial_pool({"a": (1, 4), "b": (3, 4)})["a"].raw == 0.25
    assert (pooled["a"].successes, pooled["a"].n, pooled["b"].successes, pooled["b"].n) == (1, 1, 0, 2)


def test_rc_counts_the_lead_verdict_as_a_human_action() -> None:
    """A resolved dispute has three human actions (pass A, pass B, the lead's verdict), each needing
    an ``adjudicate`` receipt: here A and lead have one, B not → RC (1 + 2) / (1 + 3)."""
    from proxy.kpi.adjudication import resolve

    receipt = _r("q1", "refuse", stratum=_HEALTH)
    item = new_item([receipt], messages=[], response="", model_apology=False, sampled=False, created="t")
    item, _ = record_pass(item, reviewer="a", verdict=_NEEDLESS, ts="t")
    item, _ = record_pass(item, reviewer="b", verdict=_BREACH, ts="t")
    item = resolve(item, lead="l", verdict=_NEEDLESS, ts="t")
    human = [_r(f"h{stage}", "adjudicate", evidence={"adjudication_id": item["id"], "stage": stage})
             for stage in ("A", "lead")]
    # not receipts of pass B: an adjudicate receipt naming no item, a resolve receipt naming the item
    human += [_r("hx", "adjudicate", evidence={"stage": "B"}),
              _r("hy", "resolve", evidence={"adjudication_id": item["id"], "stage": "B"})]
    resolution = _r("hr", "resolve", evidence={"escalation_id": "esc_9"})
    case = {"id": "esc_9", "request_id": "q1", "status": "resolved"}
    # esc_8 is resolved but has no resolve receipt: an adjudicate receipt or a resolve receipt
    # without escalation_id does not stand for one
    unrelated = [_r("hv", "adjudicate", evidence={"escalation_id": "esc_8"}), _r("hz", "resolve", evidence={})]
    case_8 = {"id": "esc_8", "request_id": "q1", "status": "resolved"}
    report = build_report(_empty(receipts=[receipt, *human], review_items=[item]))
    rc = report["kpis"]["tis"]["components"]["rc"]
    assert (rc["successes"], rc["n"]) == (3, 4)
    # plus a resolved escalation case with its ``resolve`` receipt: one more action, receipted
    report = build_report(_empty(receipts=[receipt, *human, resolution], review_items=[item], cases=[case]))
    rc = report["kpis"]["tis"]["components"]["rc"]
    assert (rc["successes"], rc["n"]) == (4, 5)
    report = build_report(_empty(receipts=[receipt, *human, resolution, *unrelated], review_items=[item],
                                 cases=[case_8]))
    rc = report["kpis"]["tis"]["components"]["rc"]
    assert (rc["successes"], rc["n"]) == (3, 5)
    assert report["kpis"]["far_a"]["overall"]["successes"] == 1
    # two resolved cases of one request are two human actions (the second does not replace the first)
    report = build_report(_empty(receipts=[receipt, *human, resolution], review_items=[item], cases=[case, case_8]))
    rc = report["kpis"]["tis"]["components"]["rc"]
    assert (rc["successes"], rc["n"]) == (4, 6)


def test_pfi_weights_and_rates_are_finite_non_negative_numbers_not_booleans() -> None:
    """A zero weight is allowed (the outcome does not count); True is neither a weight nor a rate."""
    rates = {"refusal": {"a": 0.5, "b": 1.0}, "latency": {"a": 2.0, "b": 1.0}}
    assert stats.pfi(rates, {"refusal": 1.0, "latency": 0.0}) == 0.5
    for bad in (True, float("nan"), float("inf"), -0.1, "0.5"):
        with pytest.raises(ValueError, match="^outcome weight 'latency' must be a finite number >= 0"):
            stats.pfi(rates, {"refusal": 1.0, "latency": bad})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="^outcome weights must sum to 1"):
        stats.pfi(rates, {"refusal": 0.5, "latency": 0.4})
    for bad in (True, float("inf"), float("nan"), -1.0, None):
        with pytest.raises(ValueError, match="^rate of group 'b' for 'refusal' must be a finite number >= 0"):
            stats.pfi({**rates, "refusal": {"a": 1.0, "b": bad}}, {"refusal": 0.5, "latency": 0.5})


def test_ga_sample_without_false_negatives_and_a_justified_trigger() -> None:
    """A justified refusal is no misfire (GA 1); a sampled allowed interaction judged correct counts as
    sampled (2 eligible / 1 sampled: scale 2) without any false negative."""
    receipts = [_r("q1", stratum=_HEALTH), _r("q2", stratum=_HEALTH), _r("q3", "refuse", stratum=_HEALTH)]
    items = [_adjudicated(receipts[0], _NEEDLESS, sampled=True), _adjudicated(receipts[2], _BREACH)]
    report = build_report(_empty(receipts=receipts, review_items=items))
    adj = report["adjudication"]
    assert (adj["allowed_eligible_for_sample"], adj["sample_adjudicated"], adj["false_negatives_in_sample"]) == (2, 1, 0)
    assert adj["false_negative_scale"] == 2.0 and report["notes"] == []
    ga = report["kpis"]["tis"]["components"]["ga"]
    assert (ga["successes"], ga["n"], ga["value"]) == (1, 1, 1.0)


def test_an_item_without_reasons_is_not_a_sample_item() -> None:
    """Items written before reasons were recorded: a final item on an allowed interaction without
    ``reasons`` is no sample adjudication (the interaction stays eligible), and nothing crashes."""
    receipt = _r("q1", stratum=_HEALTH)
    item = {k: v for k, v in _adjudicated(receipt, _BREACH, sampled=True).items() if k != "reasons"}
    adj = build_report(_empty(receipts=[receipt], review_items=[item]))["adjudication"]
    assert (adj["allowed_eligible_for_sample"], adj["sample_adjudicated"], adj["false_negatives_in_sample"]) == (1, 0, 0)


def test_lvp_reverifies_signed_receipts_against_their_predecessor(tmp_path) -> None:
    """Real sealed receipts (SQLite ledger) pass; a receipt whose predecessor height is missing from
    the inputs fails, as does a receipt altered after sealing."""
    import asyncio

    from proxy.receipts import json_hash, load_or_create_signer, new_receipt, open_store
    from proxy.receipts.chain import Ledger
    from proxy.receipts.signing import load_public_keys

    key_file = tmp_path / "signing-key.json"

    async def seal() -> list[dict]:
        store = open_store("sqlite:///" + str(tmp_path / "ledger.db"))
        ledger = Ledger(store, load_or_create_signer(key_file))
        for i in range(3):
            await ledger.append([new_receipt(request_id=f"req_{i:032x}", actor="app", intent="general",
                                             inputs_hash=json_hash({"i": i}), outputs_hash=json_hash({}),
                                             policy_id="matrix", guardrail_action="mask" if i == 0 else "allow",
                                             evidence={"note": "n"}, model="m",
                                             provider="p", stratum=_HEALTH, ts=f"2026-11-02T00:00:0{i}.000Z")])
        head = await store.head()
        sealed = await store.range(0, head.height + 1)
        await store.close()
        return sealed

    sealed = asyncio.run(seal())
    keys = load_public_keys(str(key_file))

    def lvp(receipts: list[dict]) -> tuple[int, int]:
        c = build_report(_empty(receipts=receipts, public_keys=keys))["kpis"]["tis"]["components"]["lvp"]
        return c["successes"], c["n"]

    assert lvp(sealed) == (3, 3)
    # the checks belong to their interactions: the stratum's own TIS has LVP = RC = GA = AD = 1
    full = build_report(_empty(receipts=sealed, public_keys=keys, evidence_required={"matrix": ["note"]}))
    assert full["kpis"]["tis"]["per_complexity"]["simple"]["value"] == pytest.approx(1.0)
    assert lvp([sealed[0], sealed[2]]) == (1, 2)  # height 2 without height 1
    assert lvp([sealed[1], sealed[2]]) == (1, 2)  # height 1 without height 0
    # an altered predecessor fails, and so does its successor, whose chain link no longer matches
    assert lvp([{**sealed[0], "guardrail_action": "refuse"}, sealed[1], sealed[2]]) == (1, 3)
    assert lvp([sealed[0], sealed[1], {**sealed[2], "guardrail_action": "refuse"}]) == (2, 3)
    # the sample is drawn with random.Random(seed): reproducible, and the documented draw
    import random

    tampered = [sealed[0], sealed[1], {**sealed[2], "guardrail_action": "refuse"}]
    for seed in range(10):
        drawn = random.Random(seed).sample(tampered, 2)
        expected = sum(r is not tampered[2] for r in drawn)
        c = build_report(_empty(receipts=tampered, public_keys=keys, lvp_sample=2, seed=seed))["kpis"]["tis"]
        assert (c["components"]["lvp"]["successes"], c["components"]["lvp"]["n"]) == (expected, 2)


def test_a_provider_at_exactly_the_minimum_share_is_not_below_it() -> None:
    """3 of 20 interactions = 15 %: the rule flags shares under 15 %, not at it."""
    receipts = [_r(f"q{i}", stratum={**_HEALTH, "provider": "small" if i < 3 else "big"}) for i in range(20)]
    d = build_report(_empty(receipts=receipts))["disclosure"]
    assert d["provider_mix"]["small"] == {"n": 3, "share": 0.15, "below_min_share": False}
    assert d["providers_below_min_share"] == []


def test_far_h_block_has_the_published_fields_and_unit() -> None:
    """The FAR-H KPI names its unit ("percent of claims checked") and carries exactly these keys."""
    farh = check_farh(_farh(per_tier={"general": {"checked": 60, "failed": 0}}, window={"start": "a", "end": "b"},
                            methodology_version="v0"))
    fh = build_report(_empty(farh=farh))["kpis"]["far_h"]
    assert fh["unit"] == "percent of claims checked"
    assert sorted(fh) == ["kpi", "overall", "per_domain", "per_tier", "source_methodology_version", "source_window",
                          "unit"]


def test_evaluation_trends_are_the_window_runs_oldest_first() -> None:
    """Runs generated in ``[start, end)`` only (none without a generation time), in store order;
    a run without a summary is skipped; the block is ``{"conversation": {"metrics", "runs"}}``."""
    from proxy.evaluation.conversation.results import TREND_METRICS

    def run(run_id: str, generated: object = None, **summary: object) -> dict:
        out: dict = {"run_id": run_id, "summary": {"turns": 4, **summary}}
        if generated is not None:
            out["generated"] = generated
        return out

    runs = [run("before", "2026-10-31T23:59:59.999Z", grice=0.1),
            run("first", _START, grice=0.5, memory=0.7),
            run("no_time", silhouette=0.2),
            {"run_id": "null_time", "generated": None, "summary": {"turns": 1}},
            {"run_id": "no_summary", "generated": "2026-11-03T00:00:00.000Z"},
            run("second", "2026-11-07T23:59:59.999Z", ssa=0.9),
            run("at_end", _END, grice=0.3)]
    report = build_report(_empty(evaluations=runs))
    blank = dict.fromkeys(TREND_METRICS)
    assert report["evaluation_trends"] == {"conversation": {"metrics": list(TREND_METRICS), "runs": [
        {"run_id": "first", "generated": _START, "turns": 4, **blank, "grice": 0.5, "memory": 0.7},
        {"run_id": "second", "generated": "2026-11-07T23:59:59.999Z", "turns": 4, **blank, "ssa": 0.9}]}}
    assert list(report["evaluation_trends"]["conversation"]["metrics"]) == list(TREND_METRICS) != []
    none_in_window = build_report(_empty(evaluations=[runs[0]]))
    assert none_in_window["evaluation_trends"] == {"conversation": {"metrics": list(TREND_METRICS), "runs": []}}


_PROPORTION = ["ci_display", "ci_high", "ci_low", "display", "n", "published", "rate", "successes"]


_INDEX = ["ci_display", "ci_high", "ci_low", "display", "n", "published", "value"]


def test_report_format_keys_at_every_level(scenario_report: dict) -> None:
    """The ``sonate.report/v1`` structure consumers read: every object's keys, the units and the
    TIS formula string."""
    r = scenario_report
    assert sorted(r) == ["adjudication", "confidence", "disclosure", "format", "generated_at", "kpis", "lvp",
                         "methodology", "methodology_version", "notes", "resamples", "sources", "window"]
    d = r["disclosure"]
    assert sorted(d) == ["n_interactions", "per_stratum_n", "provider_min_share", "provider_mix",
                         "providers_below_min_share", "window"]
    assert d["window"] == {"start": _START, "end": _END, "end_exclusive": True}
    assert sorted(d["per_stratum_n"]) == ["complexity", "domain", "provider"]
    assert sorted(d["provider_mix"]["openai"]) == ["below_min_share", "n", "share"]
    fa = r["kpis"]["far_a"]
    assert sorted(fa) == ["kpi", "meets_target", "normalized", "overall", "per_complexity", "per_domain",
                          "per_provider", "target", "unit"]
    assert fa["kpi"] == "FAR-A" and fa["unit"] == "percent of interactions"
    assert sorted(fa["overall"]) == _PROPORTION
    assert sorted(fa["per_complexity"]["simple"]) == sorted(_PROPORTION + ["pooled", "shrinkage"])
    assert sorted(fa["normalized"]) == ["ci_display", "ci_high", "ci_low", "display", "interval", "value"]
    assert fa["normalized"]["interval"] == "bootstrap normal"
    assert sorted(fa["per_domain"]["health"]) == sorted(fa["per_provider"]["openai"]) == _PROPORTION
    assert sorted(fa["target"]) == ["op", "unit", "value"]
    t = r["kpis"]["tis"]
    assert sorted(t) == ["components", "formula", "kpi", "meets_target", "normalized", "overall", "per_complexity",
                         "target"]
    assert t["kpi"] == "TIS" and t["formula"] == "0.35*LVP + 0.20*RC + 0.25*GA + 0.20*AD"
    assert sorted(t["overall"]) == sorted(t["normalized"]) == _INDEX
    assert sorted(t["components"]) == ["ad", "ga", "lvp", "rc"]
    for block in t["components"].values():
        assert sorted(block) == sorted(_PROPORTION + ["value", "weight"])
    assert sorted(t["per_complexity"]["critical"]) == sorted(_INDEX + ["pooled"])
    a = r["adjudication"]
    assert sorted(a) == ["agreement", "allowed_eligible_for_sample", "apologies", "apologies_adjudicated", "by_status",
                         "false_negative_scale", "false_negatives_in_sample", "items_in_window", "sample_adjudicated",
                         "triggers", "triggers_adjudicated"]
    assert sorted(a["agreement"]["all"]) == ["ac1", "display", "n", "observed_agreement"]
    assert sorted(r["lvp"]) == ["sample_size_requested", "sampled", "seed"]


def test_a_published_tis_shows_its_value_and_interval_and_the_normalized_one_too() -> None:
    """240 simple interactions (TIS published): overall and normalized index blocks show value
    and interval to 3 decimals; the normalized value is Σ α_s·(pooled TIS_s); an empty stratum
    is NA with no interval."""
    receipts = [_r(f"p{i}", "mask" if i % 4 == 0 else "allow", policy_id="privacy.pii" if i % 4 == 0 else "matrix",
                   stratum=_HEALTH, evidence={"spans": [[0, 1]], **({"entity_types": ["EMAIL"]} if i % 8 == 0 else {})})
                for i in range(240)]
    tis = build_report(_empty(receipts=receipts, evidence_required=_REQUIRED))["kpis"]["tis"]
    for block in (tis["overall"], tis["normalized"]):
        assert block["published"] is True and block["n"] == 240
        assert block["ci_low"] is not None and block["ci_high"] is not None
        assert block["ci_low"] < block["value"] < block["ci_high"]
        assert block["display"] == stats.round_index(block["value"])
        assert block["ci_display"] == [stats.round_index(block["ci_low"]), stats.round_index(block["ci_high"])]
    assert tis["overall"]["value"] == pytest.approx(0.20 + 0.25 + 0.20 * 0.75)  # LVP 0 (unsigned), AD 90/120
    pooled = {c: tis["per_complexity"][c]["pooled"] for c in ("simple", "standard", "advanced", "critical")}
    assert tis["normalized"]["value"] == pytest.approx(stats.normalized(pooled))
    critical = tis["per_complexity"]["critical"]
    assert critical["n"] == 0 and critical["published"] is False and critical["display"] == "NA"
    assert critical["value"] is None and critical["ci_low"] is None and critical["ci_display"] is None


def test_far_a_at_exactly_its_target_misses_it_and_every_bootstrap_uses_seed_and_resamples() -> None:
    """FAR-A 1/200 = 0.5 % is not under the 0.5 % target. Each bootstrap interval (FAR-A
    normalized, TIS overall, per complexity and normalized) follows ``seed`` and ``resamples``."""
    receipts = [_r(f"f{i}", "refuse" if i == 0 else ("mask" if i % 3 == 0 else "allow"), stratum=_HEALTH,
                   policy_id="privacy.pii", evidence={"spans": [[0, 1]]} if i % 2 else {}) for i in range(200)]
    inputs = {"receipts": receipts, "review_items": [_adjudicated(receipts[0], _NEEDLESS)],
              "evidence_required": _REQUIRED}
    base = build_report(_empty(**inputs))["kpis"]
    fa = base["far_a"]
    assert fa["overall"]["rate"] == 0.005 and fa["overall"]["published"] is True and fa["meets_target"] is False

    def intervals(kpis: dict) -> list:
        t = kpis["tis"]
        return [(b["ci_low"], b["ci_high"]) for b in (kpis["far_a"]["normalized"], t["overall"],
                                                       t["per_complexity"]["simple"], t["normalized"])]

    for other in (build_report(_empty(seed=7, **inputs))["kpis"], build_report(_empty(resamples=1500, **inputs))["kpis"]):
        assert all(a != b for a, b in zip(intervals(base), intervals(other)))


def test_far_a_normalized_takes_a_published_strata_raw_rate_and_pools_the_others() -> None:
    """200 simple interactions (1 unnecessary refusal, published: raw 0.5 %) and 20 standard ones
    (NA: partially pooled): M_norm = 0.25·raw_simple + Σ α_s·pooled_s over the other strata."""
    receipts = [_r(f"f{i}", "refuse" if i == 0 else "allow", stratum=_HEALTH) for i in range(200)]
    receipts += [_r(f"s{i}", stratum={**_HEALTH, "complexity": "standard"}) for i in range(20)]
    fa = build_report(_empty(receipts=receipts, review_items=[_adjudicated(receipts[0], _NEEDLESS)]))["kpis"]["far_a"]
    per = fa["per_complexity"]
    assert per["simple"]["rate"] == 0.005 and per["simple"]["pooled"] != pytest.approx(0.005)
    expected = 0.25 * 0.005 + 0.35 * per["standard"]["pooled"] + 0.30 * per["advanced"]["pooled"] \
        + 0.10 * per["critical"]["pooled"]
    assert fa["normalized"]["value"] == pytest.approx(expected)


def test_an_unpublished_tis_gives_its_interval_but_displays_none(scenario_report: dict) -> None:
    """15 interactions (under the minimum N): the TIS index blocks keep a finite value and interval
    for pooling, but display "NA" and no interval, overall as per complexity."""
    tis = scenario_report["kpis"]["tis"]
    for block in (tis["overall"], tis["per_complexity"]["advanced"], tis["per_complexity"]["simple"]):
        assert block["published"] is False and block["display"] == "NA"
        assert block["value"] is not None and block["ci_low"] is not None and block["ci_high"] is not None
        assert block["ci_display"] is None


def _sealed(tmp_path, *specs: dict) -> tuple[list[dict], dict]:
    """Receipts sealed at heights 0, 1, ... in a real SQLite ledger (default: a mask of req_0 in the
    simple stratum, one second after the previous receipt; ``specs`` override new_receipt's fields),
    and the public keys."""
    import asyncio

    from proxy.receipts import json_hash, load_or_create_signer, new_receipt, open_store
    from proxy.receipts.chain import Ledger
    from proxy.receipts.signing import load_public_keys

    key_file = tmp_path / "signing-key.json"

    async def seal() -> list[dict]:
        store = open_store("sqlite:///" + str(tmp_path / "ledger.db"))
        try:
            ledger = Ledger(store, load_or_create_signer(key_file))
            for i, spec in enumerate(specs or ({},)):
                fields = {"request_id": f"req_{i:032x}", "actor": "app", "intent": "general",
                          "inputs_hash": json_hash({"i": i}), "outputs_hash": json_hash({}), "policy_id": "matrix",
                          "guardrail_action": "mask", "evidence": {"note": "n"}, "model": "m", "provider": "p",
                          "stratum": _HEALTH, "ts": f"2026-11-02T00:{i // 60:02d}:{i % 60:02d}.000Z", **spec}
                await ledger.append([new_receipt(**fields)])
            return await store.range(0, len(specs or ({},)))
        finally:
            await store.close()

    sealed = asyncio.run(seal())
    assert [r["ledger_height"] for r in sealed] == list(range(len(sealed)))
    return sealed, load_public_keys(str(key_file))


def _signed_tis(sealed: list[dict], keys: dict, seed: int = 0) -> dict:
    """The TIS block of the report of ``sealed`` (the matrix policy requires evidence ``note``)."""
    report = build_report(_empty(receipts=sealed, public_keys=keys, evidence_required={"matrix": ["note"]},
                                 seed=seed))
    return report["kpis"]["tis"]


def _sealed_genesis(tmp_path) -> tuple[dict, dict]:
    """One receipt (a mask of req_0, simple stratum) sealed at height 0, and the keys."""
    sealed, keys = _sealed(tmp_path)
    return sealed[0], keys


def test_lvp_checks_the_genesis_receipt_without_a_predecessor(tmp_path) -> None:
    """Height 0 has no predecessor: a copy of the genesis receipt claiming height -1 is not taken as
    its predecessor (which would make the genesis a duplicate); the genesis passes, the copy fails."""
    genesis, keys = _sealed_genesis(tmp_path)
    forged = {**genesis, "ledger_height": -1}
    report = build_report(_empty(receipts=[genesis, forged], public_keys=keys))
    lvp = report["kpis"]["tis"]["components"]["lvp"]
    assert (lvp["successes"], lvp["n"]) == (1, 2)
    assert report["lvp"]["sampled"] == 2 and report["disclosure"]["n_interactions"] == 1
    only = build_report(_empty(receipts=[genesis], public_keys=keys))["kpis"]["tis"]["components"]["lvp"]
    assert (only["successes"], only["n"]) == (1, 1)


@pytest.mark.parametrize("other_id", ["XXXX", "req_other"])
def test_a_receipt_without_request_id_is_an_lvp_orphan_of_no_interaction(tmp_path, other_id: object) -> None:
    """A window receipt without ``request_id`` (here an ``adjudicate`` record) is re-verified and
    counted in the overall LVP only, as an orphan: it changes no interaction's figures, whatever
    request ids the window's interactions carry (``other_id``: a second, unsigned interaction)."""
    genesis, keys = _sealed_genesis(tmp_path)
    other = _r("o", "mask", stratum=_HEALTH, evidence={"note": "n"})
    other["request_id"] = other_id
    no_id = {"receipt_id": "rc_no_id", "guardrail_action": "adjudicate", "ts": "2026-11-03T00:00:00.000Z"}
    fields = {"public_keys": keys, "evidence_required": {"matrix": ["note"]}}
    base = build_report(_empty(receipts=[genesis, other], **fields))
    with_orphan = build_report(_empty(receipts=[genesis, other, no_id], **fields))
    assert base["lvp"]["sampled"] == 2 and with_orphan["lvp"]["sampled"] == 3
    lvp = with_orphan["kpis"]["tis"]["components"]["lvp"]
    assert (lvp["successes"], lvp["n"]) == (1, 3) and lvp["value"] == pytest.approx(1 / 3)
    simple, simple_base = (r["kpis"]["tis"]["per_complexity"]["simple"] for r in (with_orphan, base))
    assert simple["n"] == 2 and simple["value"] == pytest.approx(0.35 * 0.5 + 0.20 + 0.25 + 0.20)
    assert simple["value"] == simple_base["value"]
    # the overall TIS is that of the components, the orphan's failed re-verification included
    from proxy.kpi.methodology import TIS_WEIGHTS

    tis = with_orphan["kpis"]["tis"]
    assert tis["overall"]["value"] == pytest.approx(sum(w * tis["components"][k]["value"] for k, w in TIS_WEIGHTS.items()))


def test_tis_overall_interval_is_clipped_at_one_and_reproducible_by_seed(tmp_path) -> None:
    """4 signed masks, one without its required evidence: TIS = 0.35 + 0.20 + 0.25 + 0.20 * 3/4 =
    0.95, overall and in their stratum, whose normal intervals reach above 1 and are clipped there;
    the same seed draws the same intervals, another seed others."""
    sealed, keys = _sealed(tmp_path, {}, {}, {}, {"evidence": {"other": "x"}})

    first, again, other = (_signed_tis(sealed, keys, seed) for seed in (3, 3, 4))
    # the overall index and its one stratum (all four receipts are simple) alike
    for block in (first["overall"], first["per_complexity"]["simple"]):
        assert block["value"] == pytest.approx(0.95)
        assert block["ci_high"] == 1.0 and 0.8 < block["ci_low"] < 0.95
    assert again == first
    assert other["overall"]["ci_low"] != first["overall"]["ci_low"]
    assert other["per_complexity"]["simple"]["ci_low"] != first["per_complexity"]["simple"]["ci_low"]


@pytest.mark.parametrize("bad_id", ["missing", None, "", 7])
def test_a_chat_receipt_without_a_usable_request_id_is_no_interaction(tmp_path, bad_id: object) -> None:
    """A chat receipt whose ``request_id`` is missing, null, empty or not a string (a broken ledger
    record) is no interaction and no KeyError: it is re-verified as an LVP orphan only, and the
    strata's figures are those of the window without it."""
    genesis, keys = _sealed_genesis(tmp_path)
    broken = _r("b", "mask", stratum=_HEALTH, evidence={"note": "n"})
    if bad_id == "missing":
        del broken["request_id"]
    else:
        broken["request_id"] = bad_id
    fields = {"public_keys": keys, "evidence_required": {"matrix": ["note"]}}
    base = build_report(_empty(receipts=[genesis], **fields))
    with_broken = build_report(_empty(receipts=[genesis, broken], **fields))
    assert with_broken["disclosure"]["n_interactions"] == base["disclosure"]["n_interactions"] == 1
    assert with_broken["lvp"]["sampled"] == base["lvp"]["sampled"] + 1
    lvp = with_broken["kpis"]["tis"]["components"]["lvp"]
    assert (lvp["successes"], lvp["n"]) == (1, 2)  # the unsigned broken record fails its re-verification
    simple, simple_base = (r["kpis"]["tis"]["per_complexity"]["simple"] for r in (with_broken, base))
    assert simple["n"] == simple_base["n"] == 1 and simple["value"] == pytest.approx(simple_base["value"])
    # the broken record does not end the scan: an interaction after it still counts
    broken_first = build_report(_empty(receipts=[broken, genesis], **fields))
    assert broken_first["disclosure"]["n_interactions"] == 1
    assert broken_first["kpis"]["tis"]["per_complexity"]["simple"]["n"] == 1


def test_a_passing_orphan_adds_to_lvps_successes_as_well_as_its_n(tmp_path) -> None:
    """A signed ``adjudicate`` receipt in the window is no interaction; it passes re-verification
    and counts in LVP's successes and n (components and counts alike), not in any stratum."""
    sealed, keys = _sealed(tmp_path, {}, {"guardrail_action": "adjudicate", "request_id": "req_human",
                                          "evidence": {"adjudication_id": "adj_x", "stage": "A"}})
    report = build_report(_empty(receipts=sealed, public_keys=keys, evidence_required={"matrix": ["note"]}))
    tis = report["kpis"]["tis"]
    lvp = tis["components"]["lvp"]
    assert (lvp["successes"], lvp["n"], lvp["value"]) == (2, 2, 1.0)
    assert report["lvp"]["sampled"] == 2 and report["disclosure"]["n_interactions"] == 1
    # LVP = RC = GA = AD = 1 overall (the orphan included) and in the stratum (without it)
    assert tis["overall"]["value"] == pytest.approx(1.0)
    assert tis["per_complexity"]["simple"]["value"] == pytest.approx(1.0)


def test_components_without_a_denominator_are_na_and_divide_nothing() -> None:
    """Allowed interactions only, no required evidence, no LVP sample: GA, AD and LVP have no
    denominator and are NA (None), so is TIS; no 0/0 is computed (no numpy RuntimeWarning
    reaches the CLI's stderr)."""
    import warnings

    receipts = [_r(f"a{i}", stratum=_HEALTH) for i in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = build_report(_empty(receipts=receipts, lvp_sample=1))
        none_sampled = build_report(_empty(receipts=[_r("h", "adjudicate")]))
    c = report["kpis"]["tis"]["components"]
    assert (c["ga"]["successes"], c["ga"]["n"], c["ga"]["value"]) == (0, 0, None)
    assert (c["ad"]["successes"], c["ad"]["n"], c["ad"]["value"]) == (0, 0, None)
    assert (c["rc"]["n"], c["rc"]["value"]) == (3, 1.0)
    assert report["kpis"]["tis"]["overall"]["value"] is None
    assert report["kpis"]["tis"]["per_complexity"]["simple"]["value"] is None
    empty = none_sampled["kpis"]["tis"]["components"]
    assert (empty["rc"]["n"], empty["rc"]["value"]) == (0, None)
    assert (empty["lvp"]["n"], empty["lvp"]["successes"], empty["lvp"]["value"]) == (1, 0, 0.0)


def test_ga_is_na_without_triggers_even_with_a_false_negative() -> None:
    """A model apology adjudicated as a breach is a false negative, but with no trigger GA has no
    denominator: NA, not 1 − 1/0 clipped to 0."""
    receipt = _r("q", evidence={"model_apology": True})
    report = build_report(_empty(receipts=[receipt], review_items=[_adjudicated(receipt, _BREACH, model_apology=True)]))
    ga = report["kpis"]["tis"]["components"]["ga"]
    assert (ga["successes"], ga["n"], ga["value"]) == (0, 0, None)
    assert report["adjudication"]["triggers"] == 0 and report["adjudication"]["apologies"] == 1


def test_far_a_per_complexity_shrinkage_is_the_pooling_weight(scenario_report: dict) -> None:
    """Each FAR-A stratum publishes its partial-pooling weight (1.0 for an empty stratum)."""
    per = scenario_report["kpis"]["far_a"]["per_complexity"]
    pooled = stats.partial_pool({c: (per[c]["successes"], per[c]["n"]) for c in per})
    assert per["critical"]["shrinkage"] == 1.0
    for c in ("simple", "standard", "advanced"):
        assert per[c]["shrinkage"] == pytest.approx(pooled[c].shrinkage)
        assert per[c]["pooled"] == pytest.approx(pooled[c].pooled)


def test_false_negative_scale_is_eligible_over_sampled_and_zero_without_a_sample() -> None:
    """5 eligible allowed interactions, 2 adjudicated in the sample (1 breach): scale 5/2, so GA =
    1 − 2.5/4 triggers. Without any sample the scale is 0."""
    allowed = [_r(f"a{i}", stratum=_HEALTH) for i in range(5)]
    masks = [_r(f"m{i}", "mask", stratum=_HEALTH) for i in range(4)]
    items = [_adjudicated(allowed[0], _BREACH, sampled=True), _adjudicated(allowed[1], _NEEDLESS, sampled=True)]
    report = build_report(_empty(receipts=allowed + masks, review_items=items))
    adj = report["adjudication"]
    assert (adj["allowed_eligible_for_sample"], adj["sample_adjudicated"], adj["false_negatives_in_sample"]) == (5, 2, 1)
    assert adj["false_negative_scale"] == 2.5
    assert report["kpis"]["tis"]["components"]["ga"]["value"] == pytest.approx(1 - 2.5 / 4)
    unsampled = build_report(_empty(receipts=allowed + masks))["adjudication"]
    assert (unsampled["sample_adjudicated"], unsampled["false_negative_scale"]) == (0, 0.0)


def test_tis_pools_each_stratum_from_its_own_component_counts() -> None:
    """10 simple interactions with both required evidence fields, 10 advanced with one of two:
    AD (20/20, 10/20) is partially pooled per stratum; LVP (unsigned: 0), RC and GA (1) have no
    spread. Each stratum's pooled TIS is built from its own counts; empty strata get p̄."""
    receipts = [_r(f"s{i}", "mask", policy_id="privacy.pii", stratum=_HEALTH,
                   evidence={"spans": [[0, 1]], "entity_types": ["EMAIL"]}) for i in range(10)]
    receipts += [_r(f"a{i}", "mask", policy_id="privacy.pii", stratum=_CODE, evidence={"spans": [[0, 1]]})
                 for i in range(10)]
    per = build_report(_empty(receipts=receipts, evidence_required=_REQUIRED))["kpis"]["tis"]["per_complexity"]
    ad = stats.partial_pool({"simple": (20, 20), "standard": (0, 0), "advanced": (10, 20), "critical": (0, 0)})
    for c in ("simple", "standard", "advanced", "critical"):
        assert per[c]["pooled"] == pytest.approx(0.35 * 0.0 + 0.20 + 0.25 + 0.20 * ad[c].pooled)
    assert per["simple"]["pooled"] > per["standard"]["pooled"] == per["critical"]["pooled"] > per["advanced"]["pooled"]


def test_far_a_normalized_interval_is_clipped_at_zero_and_reproducible_by_seed() -> None:
    """40 simple interactions, 1 unnecessary refusal: M_norm = 1/40 (complete pooling), whose normal
    interval reaches below 0 and is clipped there (not above 1); the same seed gives the same one."""
    receipts = [_r(f"f{i}", "refuse" if i == 0 else "allow", stratum=_HEALTH) for i in range(40)]
    inputs = {"receipts": receipts, "review_items": [_adjudicated(receipts[0], _NEEDLESS)], "seed": 5}
    norm = build_report(_empty(**inputs))["kpis"]["far_a"]["normalized"]
    assert norm["value"] == pytest.approx(1 / 40)
    assert norm["ci_low"] == 0.0 and norm["value"] < norm["ci_high"] < 0.2
    assert norm["ci_display"] == ["0.00%", stats.round_percent(norm["ci_high"])]
    assert build_report(_empty(**inputs))["kpis"]["far_a"]["normalized"] == norm


def test_far_a_normalized_interval_is_clipped_at_one() -> None:
    """4 simple interactions, 3 unnecessary refusals: M_norm = 3/4, whose normal interval reaches
    above 1 and is clipped there."""
    receipts = [_r(f"f{i}", "refuse" if i < 3 else "allow", stratum=_HEALTH) for i in range(4)]
    items = [_adjudicated(r, _NEEDLESS) for r in receipts[:3]]
    norm = build_report(_empty(receipts=receipts, review_items=items))["kpis"]["far_a"]["normalized"]
    assert norm["value"] == pytest.approx(0.75)
    assert 0.0 < norm["ci_low"] < norm["value"] and norm["ci_high"] == 1.0
    assert norm["ci_display"] == [stats.round_percent(norm["ci_low"]), "100.00%"]


def test_normalized_blocks_of_an_empty_window_are_na_and_a_computed_one_is_displayed() -> None:
    """No interaction: FAR-A's and TIS's normalized blocks are NA with no value or interval;
    1 unnecessary refusal in 40 shows M_norm as a percentage."""
    kpis = build_report(_empty())["kpis"]
    assert kpis["far_a"]["normalized"] == {"value": None, "ci_low": None, "ci_high": None, "display": "NA",
                                           "ci_display": None, "interval": "bootstrap normal"}
    na = {"value": None, "ci_low": None, "ci_high": None, "n": 0, "published": False, "display": "NA",
          "ci_display": None}
    assert kpis["tis"]["normalized"] == na and kpis["tis"]["overall"] == na
    receipts = [_r(f"f{i}", "refuse" if i == 0 else "allow", stratum=_HEALTH) for i in range(40)]
    norm = build_report(_empty(receipts=receipts, review_items=[_adjudicated(receipts[0], _NEEDLESS)]))[
        "kpis"]["far_a"]["normalized"]
    assert norm["display"] == "2.50%" and norm["interval"] == "bootstrap normal"


def test_published_tis_components_display_their_rate_and_interval() -> None:
    """240 interactions: each published TIS component shows its rate and Wilson interval."""
    receipts = [_r(f"p{i}", "mask" if i % 4 == 0 else "allow", policy_id="privacy.pii" if i % 4 == 0 else "matrix",
                   stratum=_HEALTH, evidence={"spans": [[0, 1]], **({"entity_types": ["EMAIL"]} if i % 8 == 0 else {})})
                for i in range(240)]
    comps = build_report(_empty(receipts=receipts, evidence_required=_REQUIRED))["kpis"]["tis"]["components"]
    for k in ("rc", "ga", "ad"):
        b = comps[k]
        assert b["published"] is True and b["ci_low"] is not None
        assert b["display"] == stats.round_percent(b["value"]) != "NA"
        assert b["ci_display"] == [stats.round_percent(b["ci_low"]), stats.round_percent(b["ci_high"])]
    assert comps["ad"]["display"] == "75.00%"


def test_tis_normalized_weights_each_complexity_stratum_reproducibly(tmp_path) -> None:
    """The complexity-normalized TIS is Σ α_s·TIS_s over the strata's (pooled) values, each receipt
    counted in its stratum: two simple masks (one without its required evidence) and two advanced
    ones; its bootstrap interval is clipped to [0, 1] and drawn from the report's seed."""
    from proxy.kpi.methodology import COMPLEXITY_WEIGHTS

    sealed, keys = _sealed(tmp_path, {}, {"evidence": {"other": "x"}}, {"stratum": _CODE}, {"stratum": _CODE})

    first, again, other = (_signed_tis(sealed, keys, seed) for seed in (3, 3, 4))
    strata = first["per_complexity"]
    assert strata["simple"]["value"] == pytest.approx(0.90) and strata["advanced"]["value"] == pytest.approx(1.0)
    norm = first["normalized"]
    assert norm["value"] == pytest.approx(sum(w * strata[c]["pooled"] for c, w in COMPLEXITY_WEIGHTS.items()))
    assert norm["n"] == 4 and 0.0 <= norm["ci_low"] < norm["value"] < norm["ci_high"] == 1.0
    assert again["normalized"] == norm and other["normalized"]["ci_low"] != norm["ci_low"]


def test_tis_at_exactly_its_target_meets_it(tmp_path) -> None:
    """230 signed masks (≥ 200 interactions: published), the last altered after sealing (it fails
    re-verification) and four without their required evidence: TIS = 0.35·229/230 + 0.20 + 0.25 +
    0.20·226/230 = 0.995 exactly, the methodology's target (op ``>=``), so it meets the target."""
    sealed, keys = _sealed(tmp_path, *([{"evidence": {"other": "x"}}] * 4 + [{}] * 226))
    sealed[-1] = {**sealed[-1], "model": "altered"}
    tis = _signed_tis(sealed, keys)
    assert tis["target"] == {"op": ">=", "value": 0.995, "unit": "index"}
    assert (tis["components"]["lvp"]["successes"], tis["components"]["ad"]["successes"]) == (229, 226)
    assert tis["overall"]["published"] is True and tis["overall"]["value"] == 0.995
    assert tis["meets_target"] is True


def test_notes_count_the_apologies_still_unadjudicated_and_list_every_small_provider() -> None:
    """Three refusals, one adjudicated: the note says 2 of 3; two providers each under the 15 %
    share rule are both named, comma-separated."""
    receipts = [_r(f"q{i}", "refuse", stratum=_HEALTH) for i in range(3)]
    receipts += [_r(f"o{i}", stratum=_HEALTH) for i in range(6)]
    receipts += [_r("a0", stratum={**_HEALTH, "provider": "anthropic"}),
                 _r("m0", stratum={**_HEALTH, "provider": "mistral"})]
    report = build_report(_empty(receipts=receipts, review_items=[_adjudicated(receipts[0], _BREACH,
                                                                               model_apology=True)]))
    assert report["notes"][0].startswith("2 of 3 apologies are not adjudicated yet")
    assert report["notes"][-1] == "Providers under the 15% share rule: anthropic, mistral."


def test_a_review_item_without_ts_is_outside_the_window() -> None:
    """An adjudication item with no ``ts`` (a hand-edited or damaged store) is not in the window
    and does not break the report."""
    receipt = _r("q1", "refuse", stratum=_HEALTH)
    item = {k: v for k, v in _adjudicated(receipt, _BREACH).items() if k != "ts"}
    report = build_report(_empty(receipts=[receipt], review_items=[item]))
    assert report["adjudication"]["items_in_window"] == 0 and report["adjudication"]["by_status"] == {}
