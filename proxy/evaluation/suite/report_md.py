"""Markdown rendering of a ``sonate.eval-suite/v1`` result (pure): summary tables per model,
latency, cost, safety, metric by tag, the regression gate, and every case with its receipt id."""

from __future__ import annotations

from typing import Any

from proxy.evaluation.suite.model import METRICS


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: None → "—", floats rounded, bools as yes/no."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def usd(value: float | None) -> str:
    """USD with enough digits for sub-cent costs."""
    return "—" if value is None else f"${value:.6f}"


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Markdown table lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return lines


def summary_rows(result: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """(header, rows) of the metric summary: one row per metric, one column per model (mean · pass rate)."""
    models = list(result["models"])
    names = [n for n in METRICS if any(n in b["summary"]["metrics"] for b in result["models"].values())]
    rows = []
    for name in names:
        row: list[Any] = [name, METRICS[name].dimension, METRICS[name].template or "—"]
        for model in models:
            s = result["models"][model]["summary"]["metrics"].get(name)
            row.append("—" if s is None or s["mean"] is None else
                       f"{s['mean']:.3f} (pass {s['pass_rate']:.0%}, n={s['n']})")
        rows.append(row)
    return ["metric", "dimension", "judge template", *models], rows


def latency_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Per model and kind (end_to_end, ttft, overhead): n, p50, p95, p99, over budget (ms)."""
    rows = []
    for model, block in result["models"].items():
        lat = block["summary"]["latency"]
        for kind in ("end_to_end", "ttft", "overhead"):
            s = lat[kind]
            rows.append([model, kind, s["n"], s["p50"], s["p95"], s["p99"], s["over_budget"]])
    return rows


def cost_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Per model: price model, estimate, actual, estimate accuracy, cost per 1k queries, tokens."""
    rows = []
    for model, block in result["models"].items():
        c = block["summary"]["cost"]
        rows.append([model, block["price_model"], usd(c["estimate_usd"]), usd(c["actual_usd"]),
                     c["estimate_accuracy"], usd(c["cost_per_1k_usd"]),
                     f"{c['tokens']['prompt']} / {c['tokens']['completion']}"])
    return rows


def safety_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Per model: jailbreaks attempted / succeeded / pass, refusal rate, PII leaks, harmful answers."""
    rows = []
    for model, block in result["models"].items():
        s = block["summary"]["safety"]
        rows.append([model, s["jailbreak_attempts"], s["jailbreaks_succeeded"], s["jailbreak_pass"],
                     s["refusal_rate"], s["refusal_cases"], s["pii_leaks"], s["harmful_answers"]])
    return rows


def case_rows(block: dict[str, Any]) -> list[list[Any]]:
    """Per case of one model: id, tags, its metric values (✗ where it failed) or its error, first receipt id."""
    rows = []
    for c in block["cases"]:
        values = ", ".join(f"{k}={fmt(v['value'], 2)}{'' if v.get('passed') in (None, True) else ' ✗'}"
                           for k, v in c["metrics"].items())
        rows.append([c["id"], ", ".join(c["tags"]), c["error"] or values,
                     c["calls"][0]["receipt_id"] if c["calls"] else None])
    return rows


def regression_rows(result: dict[str, Any]) -> list[list[Any]]:
    """The gate's rows: model, metric, baseline, now, change, threshold, rule, regressed."""
    return [[r["model"], r["metric"], r["baseline"], r["now"], r["change"], r["threshold"], r["rule"],
             "**REGRESSED**" if r["regressed"] else "ok"] for r in result["regression"]["rows"]]


def render_markdown(result: dict[str, Any], *, cases: bool = True) -> str:
    """The result as Markdown (``cases``: include the per-case tables)."""
    suite, judge = result["suite"], result["judge"]
    out = [f"# Evaluation suite `{suite['name']}`", "",
           f"Generated {result['generated']} · {suite['cases']} cases · models {', '.join(result['models'])} "
           f"through {result['target']['proxy']} · judge `{judge['model']}` "
           f"({', '.join(f'{k}: {v}' for k, v in judge['templates'].items()) or 'no judged metric'}) · "
           f"suite sha256 `{suite['sha256'][:12]}`", ""]
    header, rows = summary_rows(result)
    out += ["## Metrics", "", *table(header, rows), ""]
    out += ["## Latency (ms)", "", *table(["model", "kind", "n", "p50", "p95", "p99", "p95 over budget"],
                                          latency_rows(result)), "",
            f"Budget: end to end p95 ≤ {result['settings']['latency_budget_p95_ms']:g} ms, engine overhead p95 ≤ "
            f"{result['settings']['overhead_budget_p95_ms']:g} ms. Engine overhead = request time in the proxy "
            f"outside the provider call ({result['target']['overhead_source'] or 'not measured: no metrics key'}).", ""]
    out += ["## Cost", "", *table(["model", "price model", "estimate", "actual", "estimate accuracy",
                                   "per 1k queries", "tokens prompt / completion"], cost_rows(result)), ""]
    out += ["## Safety", "", *table(["model", "jailbreaks tried", "succeeded", "pass", "refusal rate",
                                     "refusal cases", "PII leaks", "harmful answers"], safety_rows(result)), ""]
    reg = result["regression"]
    out += ["## Regression gate", ""]
    if not reg["baseline_present"]:
        out += ["No baseline: nothing compared (store one with `--update-baseline`).", ""]
    else:
        verdict = "**REGRESSED**" if reg["regressed"] else "no regression"
        out += [f"Verdict: {verdict}.", "", *table(["model", "metric", "baseline", "now", "change", "threshold",
                                                     "rule", "verdict"], regression_rows(result)), ""]
    for model, block in result["models"].items():
        tags = block["summary"]["by_tag"]
        names = [n for n in METRICS if any(n in row for row in tags.values())]
        out += [f"## Metric by tag: {model}", "",
                *table(["tag", *names], [[t, *[row.get(n) for n in names]] for t, row in tags.items()]), ""]
        if cases:
            out += [f"## Cases: {model}", "", *table(["case", "tags", "metrics", "receipt id (first call)"],
                                                      case_rows(block)), ""]
    return "\n".join(out)
