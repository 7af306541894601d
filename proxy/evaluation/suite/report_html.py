"""HTML rendering of a ``sonate.eval-suite/v1`` result (pure; one self-contained page).

No script, no external fetch, no style attribute: the only style is the ``<style>`` element, allowed
by its SHA-256 in the page's Content-Security-Policy meta tag (``default-src 'none'``). Charts are
server-side SVG (:mod:`proxy.evaluation.suite.svg`): latency distribution per model, metric by tag
(heatmap), baseline vs now. The tables are those of :mod:`proxy.evaluation.suite.report_md`.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Any

from proxy.evaluation.suite import report_md as md
from proxy.evaluation.suite import svg
from proxy.evaluation.suite.model import METRICS

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2430;margin:2rem auto;max-width:1150px;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #d8dde6;padding-bottom:.3rem}
.meta{color:#556}.bad{color:#a3261b;font-weight:600}.ok{color:#17663a;font-weight:600}
table{border-collapse:collapse;margin:.6rem 0}td,th{border:1px solid #d8dde6;padding:.25rem .6rem;text-align:right;vertical-align:top}
th{background:#f3f5f9}td:first-child,th:first-child{text-align:left}td.l{text-align:left}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4rem .8rem;margin:.4rem 0}
svg{display:block;margin:.6rem 0}svg text{font:12px system-ui,sans-serif;fill:#1d2430}
code{font-size:.9em}
"""


def content_security_policy(css: str = CSS) -> str:
    """The page's CSP: nothing may load or run; only the inline stylesheet with this exact hash."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'none'; script-src 'none'; "
            "base-uri 'none'; form-action 'none'")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(md.fmt(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _latency_charts(result: dict[str, Any]) -> str:
    budget = result["settings"]["latency_budget_p95_ms"]
    parts = []
    for model, block in result["models"].items():
        values = [call["ms"] for c in block["cases"] for call in c["calls"]]
        lat = block["summary"]["latency"]["end_to_end"]
        markers = {"p50": lat["p50"], "p95": lat["p95"], "budget": budget} if values else {}
        parts.append(svg.histogram(f"End-to-end latency, {model} (ms)", values, markers=markers))
        overhead = [call["overhead_ms"] for c in block["cases"] for call in c["calls"] if call["overhead_ms"] is not None]
        if overhead:
            o = block["summary"]["latency"]["overhead"]
            parts.append(svg.histogram(f"Engine overhead, {model} (ms)", overhead,
                                       markers={"p95": o["p95"], "budget": result["settings"]["overhead_budget_p95_ms"]}))
    return "".join(parts)


def _tag_charts(result: dict[str, Any]) -> str:
    parts = []
    for model, block in result["models"].items():
        tags = block["summary"]["by_tag"]
        names = [n for n in METRICS if any(n in row for row in tags.values())]
        values = {(t, n): v for t, row in tags.items() for n, v in row.items()}
        parts.append(svg.heatmap(f"Metric by tag, {model} (mean, 0–1)", list(tags), names, values))
    return "".join(parts)


def _baseline_chart(result: dict[str, Any]) -> str:
    reg = result["regression"]
    if not reg["baseline_present"]:
        return '<p class="note">No baseline stored: run with <code>--update-baseline</code> to create one.</p>'
    unit_rows = [(f"{r['model']} · {r['metric']}", r["baseline"], r["now"], r["regressed"]) for r in reg["rows"]
                 if r["metric"] in METRICS]
    other = [(f"{r['model']} · {r['metric']}", r["baseline"], r["now"], r["regressed"]) for r in reg["rows"]
             if r["metric"] not in METRICS]
    charts = svg.paired_bars("Baseline vs now: case metrics (0–1)", unit_rows, scale_max=1.0) if unit_rows else ""
    for row in other:  # different units (USD, ms): one small chart each
        charts += svg.paired_bars(f"Baseline vs now: {row[0]}", [row])
    return charts


def render_html(result: dict[str, Any]) -> str:
    """The result as one HTML document (UTF-8 string)."""
    suite, judge, reg = result["suite"], result["judge"], result["regression"]
    verdict = ('<p class="bad">REGRESSED</p>' if reg["regressed"] else
               '<p class="ok">No regression</p>' if reg["baseline_present"] else "")
    header, rows = md.summary_rows(result)
    sections = [
        f"<h2>Metrics</h2>{_table(header, rows)}",
        "<h2>Latency</h2>" + _table(["model", "kind", "n", "p50 ms", "p95 ms", "p99 ms", "p95 over budget"],
                                    md.latency_rows(result)) + _latency_charts(result),
        "<h2>Cost</h2>" + _table(["model", "price model", "estimate", "actual", "estimate accuracy",
                                  "per 1k queries", "tokens prompt / completion"], md.cost_rows(result)),
        "<h2>Safety</h2>" + _table(["model", "jailbreaks tried", "succeeded", "pass", "refusal rate",
                                    "refusal cases", "PII leaks", "harmful answers"], md.safety_rows(result)),
        "<h2>Metric by tag</h2>" + _tag_charts(result),
        "<h2>Regression gate</h2>" + verdict + _baseline_chart(result) + (
            _table(["model", "metric", "baseline", "now", "change", "threshold", "rule", "verdict"],
                   md.regression_rows(result)) if reg["rows"] else ""),
    ]
    for model, block in result["models"].items():
        sections.append(f"<h2>Cases: {escape(model)}</h2>" +
                        _table(["case", "tags", "metrics", "receipt id (first call)"], md.case_rows(block)))
    templates = ", ".join(f"{k}: {v}" for k, v in judge["templates"].items()) or "no judged metric"
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{content_security_policy()}\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>Evaluation suite {escape(suite['name'])}</title><style>{CSS}</style></head><body>"
        f"<h1>Evaluation suite <code>{escape(suite['name'])}</code></h1>"
        f"<p class=\"meta\">Generated {escape(result['generated'])} · {suite['cases']} cases · models "
        f"{escape(', '.join(result['models']))} through {escape(str(result['target']['proxy']))} · judge "
        f"<code>{escape(str(judge['model']))}</code> ({escape(templates)}) · suite sha256 "
        f"<code>{escape(suite['sha256'][:12])}</code></p>{''.join(sections)}</body></html>"
    )
