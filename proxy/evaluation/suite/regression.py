"""Regression gate of ``sonate eval suite`` against a stored baseline run (pure).

Rules (FrootAI regression detection), per model route and gauge (see
:mod:`proxy.evaluation.suite.summary`):

- deterministic gauge (exact match, schema, consistency, PII leak, refusal, cost): regressed when
  its relative change in the bad direction exceeds ``deterministic_drop`` (0.10):
  (baseline − now) / |baseline| > 0.10 for higher-is-better, (now − baseline) / |baseline| > 0.10
  for lower-is-better. A baseline of 0 cannot drop relatively: not regressed (reported as such).
- non-deterministic gauge (judged metrics, latencies): regressed when now < baseline − σ·std_baseline
  (higher-is-better) or now > baseline + σ·std_baseline (lower-is-better), σ = ``sigma`` (1.0) and
  std_baseline the baseline's standard deviation of the values behind the gauge.

Only gauges named in ``metrics`` are gated (default :data:`DEFAULT_GATED`: every case metric and the
cost gauges; latencies are noisy on shared machines, gate them by naming them).
"""

from __future__ import annotations

from typing import Any

from proxy.evaluation.suite.model import METRICS, Regression

BASELINE_SCHEMA = "sonate.eval-suite-baseline/v1"
#: Gauges gated unless the suite's ``regression.metrics`` says otherwise.
DEFAULT_GATED = (*METRICS, "cost_per_1k_usd", "cost_estimate_accuracy")


def check_gauge(name: str, base: dict[str, Any], now: dict[str, Any], rules: Regression) -> dict[str, Any]:
    """{metric, baseline, now, change, threshold, rule, regressed} for one gauge present in both runs."""
    b, n, higher = base["value"], now["value"], base["higher_is_better"]
    row: dict[str, Any] = {"metric": name, "baseline": b, "now": n, "baseline_std": base.get("std", 0.0),
                           "deterministic": base["deterministic"], "higher_is_better": higher}
    if base["deterministic"]:
        row["rule"] = f"relative drop > {rules.deterministic_drop:.0%}"
        if b == 0:
            row.update(change=None, threshold=None, regressed=False, note="baseline is 0: no relative drop")
            return row
        drop = (b - n) / abs(b) if higher else (n - b) / abs(b)
        row.update(change=drop, threshold=rules.deterministic_drop, regressed=drop > rules.deterministic_drop)
        return row
    bound = b - rules.sigma * row["baseline_std"] if higher else b + rules.sigma * row["baseline_std"]
    row.update(rule=f"{rules.sigma:g}σ {'below' if higher else 'above'} baseline", change=n - b, threshold=bound,
               regressed=(n < bound) if higher else (n > bound))
    return row


def compare(baseline: dict[str, Any] | None, current: dict[str, dict[str, Any]], rules: Regression) -> dict[str, Any]:
    """The gate's verdict: {baseline_present, regressed, rows: [per model × gauge], not_compared}.

    ``baseline``: a stored baseline document (:func:`baseline_document`) or None; ``current``: model →
    its summary ``gauges``. Gauges absent from either side are listed in ``not_compared``.
    """
    gated = set(rules.metrics if rules.metrics is not None else DEFAULT_GATED)
    if baseline is None:
        return {"baseline_present": False, "regressed": False, "rows": [], "not_compared": []}
    rows, skipped = [], []
    for model, gauges in current.items():
        base_gauges = baseline.get("models", {}).get(model)
        if base_gauges is None:
            skipped.append({"model": model, "metric": "*", "why": "model not in baseline"})
            continue
        for name in sorted(gated):
            base, now = base_gauges.get(name), gauges.get(name)
            if base is None or now is None:
                if base is not None or now is not None:
                    skipped.append({"model": model, "metric": name,
                                    "why": "absent from baseline" if base is None else "absent now"})
                continue
            rows.append({"model": model, **check_gauge(name, base, now, rules)})
    return {"baseline_present": True, "regressed": any(r["regressed"] for r in rows), "rows": rows,
            "not_compared": skipped}


def baseline_document(result: dict[str, Any]) -> dict[str, Any]:
    """The baseline to store from a suite result: its suite identity and every model's gauges."""
    return {"schema": BASELINE_SCHEMA, "suite": result["suite"]["name"], "suite_sha256": result["suite"]["sha256"],
            "generated": result["generated"],
            "models": {model: block["summary"]["gauges"] for model, block in result["models"].items()}}
