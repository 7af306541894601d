"""proxy.kpi.stats against scipy / statsmodels references and hand-worked examples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from proxy.kpi import methodology, stats
from proxy.kpi.stats import (
    COMPLEXITY_WEIGHTS,
    MIN_CLAIMS,
    MIN_INTERACTIONS,
    bootstrap_interval,
    gwet_ac1,
    normalized,
    partial_pool,
    pfi,
    publishable,
    round_index,
    round_percent,
    tis,
    wilson_interval,
)


@pytest.mark.parametrize("k,n", [(0, 1), (0, 10), (1, 10), (7, 1500), (47, 10_000), (199, 200), (200, 200),
                                 (3, 7), (500, 1000)])
@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_wilson_matches_statsmodels(k: int, n: int, confidence: float) -> None:
    low, high = wilson_interval(k, n, confidence)
    ref = proportion_confint(k, n, alpha=1 - confidence, method="wilson")
    assert low == pytest.approx(ref[0], abs=1e-12) and high == pytest.approx(ref[1], abs=1e-12)


def test_wilson_hand_worked() -> None:
    # 47 unnecessary apologies in 10,000 interactions, z = 1.959964:
    # centre = (0.0047 + z²/20000)/(1 + z²/10000) = 0.0048902;
    # half = z·sqrt(0.0047·0.9953/10⁴ + z²/(4·10⁸))/(1 + z²/10⁴) = 0.0013537 → [0.0035365, 0.0062439]
    low, high = wilson_interval(47, 10_000)
    assert low == pytest.approx(0.0035365, abs=1e-7) and high == pytest.approx(0.0062439, abs=1e-7)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    for bad in [(-1, 5), (6, 5), (1.5, 5), (True, 5)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)
    with pytest.raises(ValueError):
        wilson_interval(1, 5, confidence=1.0)


def test_bootstrap_se_matches_scipy_and_the_normal_interval() -> None:
    rng = np.random.default_rng(7)
    data = rng.normal(10.0, 2.0, size=400)
    est, low, high = bootstrap_interval(data, np.mean, resamples=4000, seed=1)
    ref = sps.bootstrap((data,), np.mean, n_resamples=4000, method="percentile", random_state=1)
    se = (high - low) / (2 * sps.norm.ppf(0.975))
    assert est == pytest.approx(data.mean())
    assert low == pytest.approx(est - sps.norm.ppf(0.975) * se)
    assert se == pytest.approx(ref.standard_error, rel=0.06)  # two Monte-Carlo SEs of the same thing
    assert se == pytest.approx(data.std(ddof=1) / math.sqrt(len(data)), rel=0.06)  # analytic SE of a mean
    # reproducible with the seed, different with another
    assert bootstrap_interval(data, np.mean, seed=1) == bootstrap_interval(data, np.mean, seed=1)
    assert bootstrap_interval(data, np.mean, seed=1) != bootstrap_interval(data, np.mean, seed=2)


def test_bootstrap_rules() -> None:
    with pytest.raises(ValueError, match="1000"):
        bootstrap_interval([1, 2, 3], np.mean, resamples=999)
    assert all(math.isnan(x) for x in bootstrap_interval([], np.mean))
    est, low, high = bootstrap_interval([1.0] * 50, np.mean)
    assert (est, low, high) == (1.0, 1.0, 1.0)  # no spread, zero-width interval
    # bounds clip an index interval to [0, 1]
    est, low, high = bootstrap_interval([1.0] * 95 + [0.0] * 5, np.mean, bounds=(0.0, 1.0))
    assert high <= 1.0 and low < est
    # lists of records work (the statistic sees a list)
    records = [{"ok": i % 10 != 0} for i in range(300)]
    est, low, high = bootstrap_interval(records, lambda rs: sum(r["ok"] for r in rs) / len(rs))
    assert est == pytest.approx(0.9) and low < 0.9 < high


@pytest.mark.parametrize("p,percent", [(0.0047, "0.47%"), (0.004755, "0.48%"), (0.004749, "0.47%"),
                                       (0.0, "0.00%"), (1.0, "100.00%"), (0.00005, "0.01%"),
                                       (0.000049, "0.00%"), (0.12345, "12.35%"), (-0.0, "0.00%")])
def test_round_percent(p: float, percent: str) -> None:
    assert round_percent(p) == percent


@pytest.mark.parametrize("x,text", [(0.997, "0.997"), (0.9965, "0.997"), (0.99649, "0.996"), (1.0, "1.000"),
                                    (0.0005, "0.001"), (0.9995, "1.000"), (0.12, "0.120")])
def test_round_index(x: float, text: str) -> None:
    assert round_index(x) == text


def test_na_rendering_and_errors() -> None:
    assert round_percent(float("nan")) == "NA" and round_index(None) == "NA"
    with pytest.raises(ValueError):
        round_percent(float("inf"))


def test_minimum_n_rule() -> None:
    assert (MIN_INTERACTIONS, MIN_CLAIMS) == (200, 50)
    assert not publishable(199, "interactions") and publishable(200, "interactions")
    assert not publishable(49, "claims") and publishable(50, "claims")
    with pytest.raises(ValueError):
        publishable(10, "requests")
    with pytest.raises(ValueError):
        publishable(-1, "claims")


def test_partial_pool_hand_worked() -> None:
    # Two strata: 10/100 and 30/100. p̄ = 0.2; S = 100·0.01 + 100·0.01 = 2; S/(p̄(1-p̄)) = 12.5;
    # ρ = (12.5 - 1)/(200 - 100 - 1) = 11.5/99; M = 1/ρ - 1 = 87.5/11.5 = 7.6087.
    pooled = partial_pool({"a": (10, 100), "b": (30, 100), "empty": (0, 0)})
    m = 87.5 / 11.5
    assert pooled["a"].prior_mean == pytest.approx(0.2)
    assert pooled["a"].prior_strength == pytest.approx(m)
    assert pooled["a"].pooled == pytest.approx((10 + m * 0.2) / (100 + m))
    assert pooled["b"].pooled == pytest.approx((30 + m * 0.2) / (100 + m))
    assert pooled["a"].shrinkage == pytest.approx(m / (100 + m))
    assert pooled["empty"].pooled == pytest.approx(0.2) and math.isnan(pooled["empty"].raw)
    # estimates move toward the pooled rate, never past it
    assert 0.1 < pooled["a"].pooled < 0.2 < pooled["b"].pooled < 0.3


def test_partial_pool_limits() -> None:
    # No extra-binomial spread (identical rates): complete pooling.
    same = partial_pool({"a": (5, 100), "b": (10, 200)})
    assert math.isinf(same["a"].prior_strength) and same["a"].pooled == pytest.approx(0.05)
    # Huge spread: almost no pooling for the big strata.
    far = partial_pool({"a": (0, 1000), "b": (1000, 1000), "c": (500, 1000)})
    assert far["a"].pooled < 0.01 and far["b"].pooled > 0.99
    # A small stratum shrinks more than a big one with the same rate.
    mixed = partial_pool({"big": (50, 1000), "small": (5, 20), "other": (10, 1000)})
    assert mixed["small"].shrinkage > mixed["big"].shrinkage
    assert all(math.isnan(v.pooled) for v in partial_pool({"a": (0, 0)}).values())
    with pytest.raises(ValueError):
        partial_pool({"a": (3, 2)})


def test_partial_pool_estimator_recovers_the_prior() -> None:
    # Simulate beta-binomial strata with known a, b: the moment estimate of p̄ and M is close.
    rng = np.random.default_rng(3)
    a, b = 2.0, 48.0  # mean 0.04, M = 50
    counts = {}
    for s in range(400):
        p = rng.beta(a, b)
        counts[s] = (int(rng.binomial(500, p)), 500)
    pooled = partial_pool(counts)[0]
    assert pooled.prior_mean == pytest.approx(0.04, rel=0.08)
    assert pooled.prior_strength == pytest.approx(50.0, rel=0.25)


def test_normalized() -> None:
    assert dict(COMPLEXITY_WEIGHTS) == {"simple": 0.25, "standard": 0.35, "advanced": 0.30, "critical": 0.10}
    value = normalized({"simple": 0.004, "standard": 0.006, "advanced": 0.01, "critical": 0.02})
    assert value == pytest.approx(0.25 * 0.004 + 0.35 * 0.006 + 0.30 * 0.01 + 0.10 * 0.02)  # 0.0081
    with pytest.raises(ValueError, match="missing"):
        normalized({"simple": 0.1, "standard": 0.1, "advanced": 0.1})
    with pytest.raises(ValueError, match="pool"):
        normalized({"simple": 0.1, "standard": float("nan"), "advanced": 0.1, "critical": 0.1})
    with pytest.raises(ValueError, match="sum to 1"):
        normalized({"a": 1.0}, {"a": 0.5})


def test_gwet_ac1_published_example() -> None:
    # irrCAC's cont3x3abstractors (Gwet, Handbook of Inter-Rater Reliability): 100 abstracts,
    # two abstractors; irrCAC reports AC1 = 0.8493305 (pa = 0.89, pe = 0.269925).
    pairs = ([("Ectopic", "Ectopic")] * 13 + [("AIU", "AIU")] * 20 + [("AIU", "NIU")] * 7
             + [("NIU", "AIU")] * 4 + [("NIU", "NIU")] * 56)
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    assert gwet_ac1(a, b) == pytest.approx(0.8493305, abs=1e-7)


def test_gwet_ac1_hand_worked_and_rules() -> None:
    # 2 categories: pa = 3/4; π_yes = (3/4 + 2/4)/2 = 0.625; pe = 2·0.625·0.375/1 = 0.46875;
    # AC1 = (0.75 - 0.46875)/(1 - 0.46875) = 0.529412
    assert gwet_ac1([1, 1, 0, 1], [1, 0, 0, 1]) == pytest.approx(0.28125 / 0.53125)
    assert gwet_ac1(["x"] * 5, ["x"] * 5) == 1.0  # constant agreement
    # an unused category of the declared scale changes pe (Q = 3): pe = (2·0.625·0.375)/2
    assert gwet_ac1([1, 1, 0, 1], [1, 0, 0, 1], categories=[0, 1, 2]) == pytest.approx((0.75 - 0.234375) / (1 - 0.234375))
    with pytest.raises(ValueError):
        gwet_ac1([1], [1, 0])
    with pytest.raises(ValueError):
        gwet_ac1([], [])
    with pytest.raises(ValueError):
        gwet_ac1([1, 3], [1, 1], categories=[0, 1])


def test_pfi_hand_worked() -> None:
    rates = {"refusal": {"group_a": 0.10, "group_b": 0.08, "group_c": 0.09},   # Δ = 1 - 0.08/0.10 = 0.2
             "approval": {"group_a": 0.90, "group_b": 0.90, "group_c": 0.90},  # Δ = 0
             "latency": {"group_a": 1.0, "group_b": 1.25, "group_c": 1.1}}     # Δ = 1 - 1/1.25 = 0.2
    weights = {"refusal": 0.5, "approval": 0.3, "latency": 0.2}
    assert pfi(rates, weights) == pytest.approx(1 - (0.5 * 0.2 + 0.3 * 0 + 0.2 * 0.2))  # 0.86
    assert pfi({"refusal": {"a": 0.0, "b": 0.0}}, {"refusal": 1.0}) == 1.0  # all zero: parity
    assert pfi({"refusal": {"a": 0.0, "b": 0.5}}, {"refusal": 1.0}) == 0.0  # Δ clamps at 1
    with pytest.raises(ValueError, match="sum to 1"):
        pfi(rates, {"refusal": 0.5, "approval": 0.3, "latency": 0.3})
    with pytest.raises(ValueError, match="exactly the outcomes"):
        pfi(rates, {"refusal": 1.0})
    with pytest.raises(ValueError):
        pfi({"refusal": {"a": -0.1, "b": 0.2}}, {"refusal": 1.0})


def test_tis() -> None:
    assert tis(1, 1, 1, 1) == pytest.approx(1.0)
    assert tis(0.99, 1.0, 0.98, 0.95) == pytest.approx(0.35 * 0.99 + 0.20 * 1.0 + 0.25 * 0.98 + 0.20 * 0.95)
    for bad in [(1.1, 1, 1, 1), (1, float("nan"), 1, 1), (1, 1, -0.01, 1)]:
        with pytest.raises(ValueError):
            tis(*bad)


def test_methodology_version_and_weights() -> None:
    assert methodology.VERSION_PATTERN.match(methodology.METHODOLOGY_VERSION)
    assert methodology.METHODOLOGY_VERSION == "2026.11.22-r1"
    assert sum(methodology.COMPLEXITY_WEIGHTS.values()) == pytest.approx(1.0)
    assert sum(methodology.TIS_WEIGHTS.values()) == pytest.approx(1.0)
    changelog = (methodology.__file__.rsplit("/proxy/", 1)[0] + "/docs/methodology-changelog.md")
    assert f"## {methodology.METHODOLOGY_VERSION}" in open(changelog, encoding="utf-8").read()


@pytest.mark.parametrize("bad", [True, False, "0.5", None, 1.0001, -0.0001, float("nan")])
def test_tis_refuses_components_that_are_not_proportions(bad: object) -> None:
    """Booleans and numeric strings are not components (a True would pass for 1.0)."""
    with pytest.raises(ValueError, match="TIS component"):
        stats.tis(bad, 1.0, 1.0, 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TIS component ad"):
        stats.tis(1.0, 1.0, 1.0, bad)  # type: ignore[arg-type]


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


def test_z_value_and_tis_accept_their_closed_ends_and_refuse_the_open_ones() -> None:
    """TIS components live in the closed [0, 1] (all zero is a valid TIS of 0); the confidence
    of z in the open (0, 1)."""
    assert stats.tis(0.0, 0.0, 0.0, 0.0) == 0.0
    assert stats.tis(1.0, 0.0, 0.0, 0.0) == pytest.approx(0.35)
    for bad in (0.0, 1.0, 0, 1, -0.5, "0.95", None):
        with pytest.raises(ValueError, match="confidence must be in"):
            stats.z_value(bad)  # type: ignore[arg-type]


def test_count_errors_name_the_offending_argument() -> None:
    """Bad counts are refused with the argument's own name (successes / n / the stratum)."""
    with pytest.raises(ValueError, match="^successes must be a non-negative integer"):
        stats.wilson_interval(-1, 10)
    with pytest.raises(ValueError, match="^n must be a non-negative integer"):
        stats.wilson_interval(1, -10)
    with pytest.raises(ValueError, match="^n must be a non-negative integer"):
        stats.publishable(-1, "claims")
