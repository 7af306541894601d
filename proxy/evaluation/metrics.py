"""Evaluation statistics (pure functions, no I/O).

- Proportions with a 95 % Wilson score interval (Wilson, "Probable inference, the law of
  succession, and statistical inference", JASA 22 (1927) 209-212): the one implementation,
  :func:`proxy.kpi.stats.wilson_interval`, at the one :data:`~proxy.kpi.stats.CONFIDENCE`.
- Span-level PII matching: a predicted span is a true positive when it overlaps (shares at least
  one character with) a gold span of exactly the same entity type; a gold span is recalled when
  a predicted span of the same type overlaps it. Precision = matched predictions / predictions,
  recall = recalled gold spans / gold spans (the "overlap, exact type" criterion; cf.
  presidio-research's span evaluator, which uses an IoU threshold instead of any overlap).
  Gold types are first mapped to the detector's vocabulary with
  :data:`proxy.guardrails.detectors.pii.DATASET_ENTITY_MAPPING`; gold spans mapped to ``None``
  are neither required nor penalised: they are dropped, and predictions overlapping them are
  left out of precision.
- F-beta = (1 + β²)·P·R / (β²·P + R) (van Rijsbergen, "Information Retrieval", 1979, ch. 7);
  F2 weighs recall four times as much as precision.
- Latency percentiles: numpy's default (linear interpolation between order statistics,
  Hyndman & Fan type 7).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from proxy.kpi.methodology import CONFIDENCE


@dataclass(frozen=True)
class Proportion:
    """``k`` successes out of ``n`` trials: ``rate = k / n`` and its Wilson interval.

    ``rate``, ``low`` and ``high`` are fractions in [0, 1]; all three are None when ``n == 0``.
    """

    k: int
    n: int
    rate: float | None
    low: float | None
    high: float | None

    def as_dict(self) -> dict:
        """JSON form: ``{"k", "n", "rate", "ci95": [low, high]}`` (None values when n == 0)."""
        return {"k": self.k, "n": self.n, "rate": self.rate, "ci95": [self.low, self.high]}


def proportion(k: int, n: int, confidence: float = CONFIDENCE) -> Proportion:
    """``k / n`` with its two-sided Wilson score interval at ``confidence``.

    Raises ValueError unless ``0 <= k <= n`` (integers).
    """
    if int(k) != k or int(n) != n or not 0 <= k <= n:
        raise ValueError(f"a proportion needs integers 0 <= k <= n, got k={k}, n={n}")
    k, n = int(k), int(n)
    if n == 0:
        return Proportion(0, 0, None, None, None)
    from proxy.kpi.stats import wilson_interval

    low, high = wilson_interval(k, n, confidence)
    rate = k / n
    # The Wilson bounds are exactly 0 at k = 0 and 1 at k = n; remove floating-point residue
    # so that low <= rate <= high always holds.
    return Proportion(k, n, rate, min(max(float(low), 0.0), rate), max(min(float(high), 1.0), rate))


def f_beta(precision: float | None, recall: float | None, beta: float = 2.0) -> float | None:
    """F-beta of a precision and a recall (fractions): (1+β²)PR / (β²P + R).

    0.0 when both are 0; None when either is None (undefined: no predictions or no gold spans).
    Raises ValueError for beta <= 0.
    """
    if beta <= 0:
        raise ValueError("beta must be positive")
    if precision is None or recall is None:
        return None
    denominator = beta * beta * precision + recall
    if denominator == 0:
        return 0.0
    return (1 + beta * beta) * precision * recall / denominator


@dataclass(frozen=True)
class Span:
    """A typed character span ``text[start:end]``."""

    entity_type: str
    start: int
    end: int

    def overlaps(self, other: "Span") -> bool:
        """True when the two half-open ranges share at least one character."""
        return self.start < other.end and other.start < self.end


@dataclass
class SpanCounts:
    """Counts of one entity type (or all): predictions, matched predictions, gold, recalled gold."""

    predicted: int = 0
    predicted_matched: int = 0
    gold: int = 0
    gold_matched: int = 0

    def add(self, other: "SpanCounts") -> None:
        """Accumulate ``other`` into this object."""
        self.predicted += other.predicted
        self.predicted_matched += other.predicted_matched
        self.gold += other.gold
        self.gold_matched += other.gold_matched

    def scores(self, beta: float = 2.0) -> dict:
        """``{"precision", "recall": Proportion dicts, "f2": float|None, counts...}``."""
        p = proportion(self.predicted_matched, self.predicted)
        r = proportion(self.gold_matched, self.gold)
        return {"precision": p.as_dict(), "recall": r.as_dict(), f"f{beta:g}": f_beta(p.rate, r.rate, beta),
                **asdict(self)}


def map_gold(spans: Iterable[Span], mapping: Mapping[str, str | None]) -> tuple[list[Span], list[Span]]:
    """Split gold spans into (kept spans with mapped types, ignored spans).

    A type absent from ``mapping`` keeps its own name; a type mapped to None is ignored.
    """
    kept: list[Span] = []
    ignored: list[Span] = []
    for span in spans:
        target = mapping.get(span.entity_type, span.entity_type)
        if target is None:
            ignored.append(span)
        else:
            kept.append(Span(target, span.start, span.end))
    return kept, ignored


def match_spans(gold: Sequence[Span], predicted: Sequence[Span],
                ignored: Sequence[Span] = ()) -> dict[str, SpanCounts]:
    """Per-entity-type counts for one text (overlap + exact type, see the module docstring).

    ``gold`` must already carry the detector's types (:func:`map_gold`). Predictions that match
    no gold span but overlap an ``ignored`` gold span are not counted at all.
    """
    counts: dict[str, SpanCounts] = {}
    for g in gold:
        c = counts.setdefault(g.entity_type, SpanCounts())
        c.gold += 1
        c.gold_matched += any(p.entity_type == g.entity_type and p.overlaps(g) for p in predicted)
    for p in predicted:
        matched = any(g.entity_type == p.entity_type and p.overlaps(g) for g in gold)
        if not matched and any(p.overlaps(i) for i in ignored):
            continue
        c = counts.setdefault(p.entity_type, SpanCounts())
        c.predicted += 1
        c.predicted_matched += matched
    return counts


def sum_counts(per_text: Iterable[Mapping[str, SpanCounts]]) -> tuple[dict[str, SpanCounts], SpanCounts]:
    """(counts by entity type, overall counts) summed over texts."""
    by_type: dict[str, SpanCounts] = {}
    overall = SpanCounts()
    for counts in per_text:
        for entity_type, c in counts.items():
            by_type.setdefault(entity_type, SpanCounts()).add(c)
            overall.add(c)
    return dict(sorted(by_type.items())), overall


def latency_summary(seconds: Sequence[float]) -> dict:
    """``{"n", "p50_ms", "p95_ms", "mean_ms"}`` of per-item durations in seconds (None if empty)."""
    if not seconds:
        return {"n": 0, "p50_ms": None, "p95_ms": None, "mean_ms": None}
    import numpy as np

    ms = np.asarray(seconds, dtype=float) * 1000.0
    return {"n": int(ms.size), "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean())}


def binary_scores(pairs: Iterable[tuple[bool, bool]]) -> dict:
    """Precision and recall (Proportion dicts) and counts from ``(truth, predicted)`` pairs.

    precision = TP / (TP + FP), recall = TP / (TP + FN).
    """
    tp = fp = fn = tn = 0
    for truth, predicted in pairs:
        if truth and predicted:
            tp += 1
        elif predicted:
            fp += 1
        elif truth:
            fn += 1
        else:
            tn += 1
    return {"precision": proportion(tp, tp + fp).as_dict(), "recall": proportion(tp, tp + fn).as_dict(),
            "tp": tp, "fp": fp, "fn": fn, "tn": tn}
