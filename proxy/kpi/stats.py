"""The statistics of the KPI methodology: intervals, rounding, minimum N, pooling, AC1, PFI, TIS.

Pure functions (no I/O). Formulas and their sources are given per function; the tests check
each against scipy / statsmodels and hand-worked examples (tests/unit/kpi/test_stats.py).

Conventions: proportions are fractions in [0, 1] (FAR-A 0.0047, printed "0.47%"); indices are
in [0, 1] (TIS 0.997). ``nan`` means "not available" wherever a float is returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from proxy.kpi.methodology import (
    BOOTSTRAP_RESAMPLES,
    COMPLEXITY_WEIGHTS,
    CONFIDENCE,
    MIN_CLAIMS,
    MIN_INTERACTIONS,
    TIS_WEIGHTS,
)

__all__ = [
    "COMPLEXITY_WEIGHTS",
    "CONFIDENCE",
    "MIN_CLAIMS",
    "MIN_INTERACTIONS",
    "TIS_WEIGHTS",
    "PooledRate",
    "bootstrap_interval",
    "gwet_ac1",
    "normalized",
    "partial_pool",
    "pfi",
    "publishable",
    "round_index",
    "round_percent",
    "tis",
    "wilson_interval",
    "z_value",
]

_WEIGHT_TOLERANCE = 1e-9


def z_value(confidence: float = CONFIDENCE) -> float:
    """Two-sided standard-normal quantile z = Φ⁻¹(1 − (1 − confidence)/2) (1.95996… for 0.95).

    Raises ValueError unless 0 < confidence < 1.
    """
    from scipy.stats import norm  # here, not at import: the serving process imports this module, not SciPy

    if not isinstance(confidence, (int, float)) or not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(norm.ppf(1.0 - (1.0 - float(confidence)) / 2.0))


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def wilson_interval(successes: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval ``(low, high)`` for a binomial proportion successes/n.

    Formula (Wilson 1927, JASA 22:209; as in statsmodels ``proportion_confint(method="wilson")``)::

        centre = (p̂ + z²/2n) / (1 + z²/n)
        half   = z / (1 + z²/n) · sqrt(p̂(1 − p̂)/n + z²/4n²)

    with p̂ = successes/n and z from :func:`z_value`. The bounds are clipped to [0, 1] (they only
    leave it by rounding error).

    ``n == 0`` returns ``(nan, nan)``: no data, no interval — reports publish NA (a decision:
    an empty stratum is a normal state of a report window, not a programming error).
    Raises ValueError for negative or non-integer counts, ``successes > n`` or a confidence
    outside (0, 1).
    """
    successes = _count(successes, "successes")
    n = _count(n, "n")
    if successes > n:
        raise ValueError(f"successes ({successes}) cannot exceed n ({n})")
    z = z_value(confidence)
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


#: The observations :func:`bootstrap_interval` resamples: a sequence, or a numpy array.
Data = TypeVar("Data", bound="Sequence[Any] | npt.NDArray[Any]")
#: A stratum key of :func:`partial_pool`.
Stratum = TypeVar("Stratum", bound=Hashable)


def bootstrap_interval(
    data: Data,
    statistic: Callable[[Data], float],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    bounds: tuple[float, float] | None = None,
) -> tuple[float, float, float]:
    """Normal interval from a nonparametric bootstrap: ``(estimate, low, high)``.

    ``estimate = statistic(data)``; ``SE_boot`` = sample standard deviation (ddof=1) of
    ``statistic`` over ``resamples`` resamples of ``data`` drawn with replacement (same size,
    ``numpy.random.default_rng(seed)``, so the result is reproducible); the interval is
    ``estimate ± z·SE_boot`` (Efron & Tibshirani 1993, "An Introduction to the Bootstrap",
    §6 and §13.2; the methodology's "normal interval from a bootstrap of ≥ 1,000 resamples").
    scipy.stats.bootstrap's ``standard_error`` is the same SE (tests compare them).

    ``data`` is any sequence of observations (numbers, tuples, dicts — whatever ``statistic``
    understands); a resample is passed to ``statistic`` as a numpy array when ``data`` is one,
    else as a list. Resamples where ``statistic`` returns a non-finite value (e.g. a group
    absent from the resample) are left out of SE_boot. ``bounds=(lo, hi)`` clips the interval
    (indices live in [0, 1]).

    Empty data, or fewer than 2 finite resample statistics, returns the estimate (nan if it
    cannot be computed) with ``(nan, nan)`` bounds. Raises ValueError for ``resamples < 1000``
    (the methodology's minimum), a bad confidence, or a non-numeric statistic.
    """
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < BOOTSTRAP_RESAMPLES:
        raise ValueError(f"resamples must be an integer >= {BOOTSTRAP_RESAMPLES}, got {resamples!r}")
    z = z_value(confidence)
    n = len(data)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    estimate = _as_float(statistic(data))
    is_array = isinstance(data, np.ndarray)
    items: Any = data if is_array else list(data)
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for i in range(resamples):
        index = rng.integers(0, n, size=n)
        sample: Any = items[index] if is_array else [items[j] for j in index]
        values[i] = _as_float(statistic(sample))
    finite = values[np.isfinite(values)]
    if finite.size < 2 or not math.isfinite(estimate):
        return (estimate, math.nan, math.nan)
    se = float(np.std(finite, ddof=1))
    low, high = estimate - z * se, estimate + z * se
    if bounds is not None:
        low, high = max(bounds[0], low), min(bounds[1], high)
    return (estimate, low, high)


def _as_float(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"the statistic must return a number, got {value!r}") from None


def _round_half_up(value: float, places: str, scale: int = 1) -> Decimal:
    # repr gives the shortest decimal that round-trips, so 0.004755 rounds as the decimal a
    # reader sees (0.4755% → 0.48%), not as its binary approximation (0.47549999…%).
    rounded = (Decimal(repr(float(value))) * scale).quantize(Decimal(places), rounding=ROUND_HALF_UP)
    return rounded.copy_abs() if rounded.is_zero() else rounded  # no "-0.00"


def round_percent(p: float | None) -> str:
    """A proportion as percent with 2 decimals, half-up: 0.0047 → "0.47%", 0.004755 → "0.48%".

    Methodology "Statistics": proportions are rounded to 2 decimals in percent. ``nan`` or
    ``None`` → "NA". Raises ValueError for infinities.
    """
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "NA"
    if math.isinf(p):
        raise ValueError(f"cannot format {p!r} as a percentage")
    return f"{_round_half_up(p, '0.01', 100)}%"


def round_index(x: float | None) -> str:
    """An index with 3 decimals, half-up: 0.99651 → "0.997". ``nan`` or ``None`` → "NA".

    Methodology "Statistics": indices (PFI, TIS) are rounded to 3 decimals. Raises ValueError
    for infinities.
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "NA"
    if math.isinf(x):
        raise ValueError(f"cannot format {x!r} as an index")
    return str(_round_half_up(float(x), "0.001"))


def publishable(n: int, kind: str) -> bool:
    """Whether a stratum with ``n`` units is published (else NA).

    ``kind`` is ``"interactions"`` (minimum :data:`MIN_INTERACTIONS` = 200; FAR-A, TIS and its
    components, PFI) or ``"claims"`` (minimum :data:`MIN_CLAIMS` = 50; FAR-H). Raises
    ValueError for another kind or a negative / non-integer n.
    """
    n = _count(n, "n")
    if kind == "interactions":
        return n >= MIN_INTERACTIONS
    if kind == "claims":
        return n >= MIN_CLAIMS
    raise ValueError(f"kind must be 'interactions' or 'claims', got {kind!r}")


@dataclass(frozen=True)
class PooledRate:
    """One stratum after partial pooling.

    ``successes``/``n`` are the raw counts, ``raw`` = successes/n (nan when n = 0),
    ``pooled`` the shrunk estimate, ``shrinkage`` = M/(n + M) the weight of the pooled rate
    (0 = no pooling, 1 = complete pooling), ``prior_mean`` the pooled rate p̄ and
    ``prior_strength`` M (``inf`` = complete pooling).
    """

    successes: int
    n: int
    raw: float
    pooled: float
    shrinkage: float
    prior_mean: float
    prior_strength: float


def partial_pool(counts: Mapping[Stratum, tuple[int, int]]) -> dict[Stratum, PooledRate]:
    """Empirical-Bayes beta-binomial shrinkage of per-stratum rates toward the pooled rate.

    ``counts`` maps stratum → ``(successes, n)``. Model: x_s ~ Binomial(n_s, p_s),
    p_s ~ Beta(a, b) with mean p̄ = a/(a+b) and strength M = a + b; the posterior mean is::

        p̃_s = (x_s + M·p̄) / (n_s + M)

    Estimator (method of moments): p̄ = Σx/Σn = x/N; the intra-class correlation
    ρ = 1/(M + 1) from the between-strata dispersion S = Σ n_s (p̂_s − p̄)², whose expectation
    under the model is p̄(1 − p̄)·[(k − 1) + ρ·(N − Σn_s²/N − (k − 1))] (k strata with n_s > 0;
    the ANOVA estimator of ρ for clustered binary data, cf. Kleinman 1973, JASA 68:46–54;
    Fleiss, Levin & Paik 2003, §15), so::

        ρ̂ = (S / (p̄(1 − p̄)) − (k − 1)) / (N − Σn_s²/N − (k − 1)),   clipped to [0, 1]
        M̂ = 1/ρ̂ − 1

    ρ̂ = 0 (no extra-binomial spread) gives M = ∞: complete pooling (every stratum = p̄);
    ρ̂ = 1 gives M = 0: no pooling. Fewer than 2 non-empty strata, or p̄ ∈ {0, 1}, is complete
    pooling (there is no dispersion to estimate). A stratum with n = 0 gets p̄. All strata
    empty → every estimate nan.

    Methodology "Statistics": a stratum under the minimum N is published as NA and enters the
    aggregate only through its pooled estimate. Raises ValueError for bad counts.
    """
    checked: dict[Stratum, tuple[int, int]] = {}
    for key, pair in counts.items():
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"counts[{key!r}] must be (successes, n), got {pair!r}")
        x, n = _count(pair[0], f"successes of {key!r}"), _count(pair[1], f"n of {key!r}")
        if x > n:
            raise ValueError(f"stratum {key!r}: successes ({x}) cannot exceed n ({n})")
        checked[key] = (x, n)
    nonempty = [(x, n) for x, n in checked.values() if n > 0]
    total_n = sum(n for _, n in nonempty)
    if total_n == 0:
        return {key: PooledRate(x, n, math.nan, math.nan, math.nan, math.nan, math.nan) for key, (x, n) in checked.items()}
    p_bar = sum(x for x, _ in nonempty) / total_n
    k = len(nonempty)
    strength = math.inf
    if k >= 2 and 0.0 < p_bar < 1.0:
        dispersion = sum(n * (x / n - p_bar) ** 2 for x, n in nonempty)
        denominator = total_n - sum(n * n for _, n in nonempty) / total_n - (k - 1)
        if denominator > 0:
            rho = (dispersion / (p_bar * (1.0 - p_bar)) - (k - 1)) / denominator
            rho = min(1.0, max(0.0, rho))
            strength = math.inf if rho == 0.0 else 1.0 / rho - 1.0
    result: dict[Stratum, PooledRate] = {}
    for key, (x, n) in checked.items():
        raw = x / n if n else math.nan
        if math.isinf(strength) or n == 0:
            pooled, weight = p_bar, 1.0
        else:
            pooled = (x + strength * p_bar) / (n + strength)
            weight = strength / (n + strength)
        result[key] = PooledRate(x, n, raw, pooled, weight, p_bar, strength)
    return result


def _check_weights(weights: Mapping[str, float], name: str) -> None:
    for key, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
            raise ValueError(f"{name} weight {key!r} must be a finite number >= 0, got {w!r}")
    total = sum(weights.values())
    if abs(total - 1.0) > _WEIGHT_TOLERANCE:
        raise ValueError(f"{name} weights must sum to 1, got {total!r}")


def normalized(per_stratum: Mapping[str, float], weights: Mapping[str, float] = COMPLEXITY_WEIGHTS) -> float:
    """Complexity-normalized KPI M_norm = Σ_s α_s·M_s (methodology "Strata").

    ``per_stratum`` maps every complexity stratum of ``weights`` (default α = simple 0.25,
    standard 0.35, advanced 0.30, critical 0.10) to its value M_s. NA strata must be replaced
    by their partially pooled estimate first (:func:`partial_pool`). Raises ValueError for a
    missing or unknown stratum, a non-finite value, or weights not summing to 1.
    """
    _check_weights(weights, "complexity")
    missing = [s for s in weights if s not in per_stratum]
    unknown = [s for s in per_stratum if s not in weights]
    if missing or unknown:
        raise ValueError(f"strata must be exactly {sorted(weights)}; missing {missing}, unknown {unknown}")
    total = 0.0
    for stratum, alpha in weights.items():
        value = per_stratum[stratum]
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"stratum {stratum!r} has no value ({value!r}); pool NA strata first")
        total += alpha * float(value)
    return total


def gwet_ac1(ratings_a: Sequence[Hashable], ratings_b: Sequence[Hashable], categories: Sequence[Hashable] | None = None) -> float:
    """Gwet's AC1 agreement coefficient of two raters on a categorical scale.

    Gwet 2008, "Computing inter-rater reliability and its variance in the presence of high
    agreement", Br. J. Math. Stat. Psychol. 61:29–48, eq. (8) for two raters::

        p_a  = share of items both raters put in the same category
        π_q  = (share of A's ratings in q + share of B's ratings in q) / 2
        p_e  = Σ_q π_q (1 − π_q) / (Q − 1)
        AC1  = (p_a − p_e) / (1 − p_e)

    Q is ``len(categories)`` when given (the scale, e.g. ``(True, False)``), else the number
    of distinct observed ratings, at least 2 (a verdict scale has two categories at least; so
    a constant rating from both raters gives AC1 = 1). Raises ValueError for sequences of
    different lengths, no items, or a rating outside ``categories``.
    """
    a, b = list(ratings_a), list(ratings_b)
    if len(a) != len(b):
        raise ValueError(f"both raters must rate the same items: {len(a)} vs {len(b)} ratings")
    if not a:
        raise ValueError("AC1 needs at least one item rated by both raters")
    if categories is not None:
        scale = list(dict.fromkeys(categories))
        outside = {r for r in a + b if r not in scale}
        if outside:
            raise ValueError(f"ratings outside the categories {scale}: {sorted(map(repr, outside))}")
    else:
        scale = list(dict.fromkeys(a + b))
    q = max(2, len(scale))
    n = len(a)
    p_a = sum(1 for x, y in zip(a, b) if x == y) / n
    p_e = 0.0
    for category in scale:
        pi = (sum(1 for x in a if x == category) + sum(1 for y in b if y == category)) / (2 * n)
        p_e += pi * (1.0 - pi)
    p_e /= q - 1
    return (p_a - p_e) / (1.0 - p_e)


def pfi(rates_by_group_by_outcome: Mapping[str, Mapping[Hashable, float]], weights: Mapping[str, float]) -> float:
    """Protected Fairness Index PFI = 1 − Σ_s w_s·Δ_s (methodology "PFI").

    ``rates_by_group_by_outcome`` maps outcome s (access, approval, refusal, latency, quality)
    → {group i → rate p_i} for one protected attribute; ``weights`` maps each outcome → w_s
    (non-negative, summing to 1). Δ_s = 1 − min_i p_i / max_j p_j clamped to [0, 1]; an outcome
    whose rates are all 0 has Δ = 0 (parity). Rates are non-negative finite numbers (latencies
    in seconds are accepted: Δ is a ratio). Raises ValueError for an outcome without a weight
    or without groups, weights over outcomes not given, bad weights or bad rates.
    """
    _check_weights(weights, "outcome")
    if set(weights) != set(rates_by_group_by_outcome):
        raise ValueError(
            f"weights must cover exactly the outcomes: outcomes {sorted(rates_by_group_by_outcome)}, weights {sorted(weights)}"
        )
    total = 0.0
    for outcome, rates in rates_by_group_by_outcome.items():
        values = list(rates.values())
        if not values:
            raise ValueError(f"outcome {outcome!r} has no groups")
        for group, value in rates.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"rate of group {group!r} for {outcome!r} must be a finite number >= 0, got {value!r}")
        high = max(values)
        delta = 0.0 if high == 0 else min(1.0, max(0.0, 1.0 - min(values) / high))
        total += weights[outcome] * delta
    return 1.0 - total


def tis(lvp: float, rc: float, ga: float, ad: float) -> float:
    """Trust Integrity Score TIS = 0.35·LVP + 0.20·RC + 0.25·GA + 0.20·AD (methodology "TIS").

    Components are proportions in [0, 1]: LVP ledger verification pass rate, RC receipt
    coverage, GA guardrail accuracy, AD audit depth. Raises ValueError for a component outside
    [0, 1] or not a finite number (an NA component makes TIS NA: the caller decides).
    """
    components = {"lvp": lvp, "rc": rc, "ga": ga, "ad": ad}
    for name, value in components.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"TIS component {name} must be a number in [0, 1], got {value!r}")
    return sum(TIS_WEIGHTS[name] * float(value) for name, value in components.items())
