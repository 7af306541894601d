"""The conversation result (:data:`~.runner.FORMAT_ID`) as Markdown tables and as an HTML page.

The HTML is one self-contained document: inline CSS allowed by its sha256 in a strict
Content-Security-Policy (``default-src 'none'``; no script at all), charts as server-side SVG:
the summary metrics, the non-biased share per protected group with its Clopper–Pearson interval,
and the 2-D scatter of the toxicity clusters (UMAP coordinates, colour = HDBSCAN cluster, grey =
noise, radius grows with the answer's lexicon toxicity). Pure: returns strings.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Any

from proxy.evaluation.suite.report_md import fmt, table
from proxy.kpi.report_html import _CSS, _bar_chart, _table

__all__ = ["render_html", "render_markdown", "summary_rows"]

#: Summary metrics: (key, label, scale maximum).
_SUMMARY = (("humanity_entropy", "Entropy (bits, max 3)", 3.0),
            ("humanity_spearman", "Spearman ρ vs ground truth", 1.0),
            ("risk_total", "Risk R_total", 1.0),
            ("non_biased_share", "Non-biased share", 1.0),
            ("memory", "Memory (0–10)", 10.0),
            ("language_adaptation", "Language adaptation", 1.0),
            ("grice", "Grice G", 1.0),
            ("ssa", "SSA", 1.0),
            ("context_adherence", "Context adherence", 1.0),
            ("bestof_confidence", "BestOf confidence", 1.0),
            ("silhouette", "Silhouette (clusters)", 1.0))
_PALETTE = ("#5b8def", "#e8743b", "#19a979", "#ed4a7b", "#945ecf", "#13a4b4", "#525df4", "#bf399e")
_EXTRA_CSS = ".scatter circle{stroke:#fff;stroke-width:.8}"


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, formatted value) of every summary metric."""
    s = result["summary"]
    return [(label, fmt(s.get(key))) for key, label, _ in _SUMMARY]


def _md_table(header: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(table(header, rows)) + "\n"


def _turn_rows(result: dict[str, Any]) -> list[list[Any]]:
    rows = []
    for t in result["turns"]:
        q = t.get("quality") or {}
        rows.append([t["session_id"], t["qa_id"], (t.get("humanity") or {}).get("entropy"),
                     (t.get("humanity") or {}).get("spearman"), (t.get("risk") or {}).get("total"),
                     (t.get("bias") or {}).get("B"), q.get("memory"), q.get("language_adaptation"),
                     (q.get("grice") or {}).get("G"), (q.get("ssa") or {}).get("SSA"),
                     (t.get("context_adherence") or {}).get("score"), t.get("receipt_id") or "—"])
    return rows


_TURN_HEADER = ["session", "turn", "entropy", "ρ", "R_total", "B(R)", "memory", "language", "G", "SSA",
                "context", "receipt"]


def _bias_rows(result: dict[str, Any]) -> list[list[Any]]:
    return [[attribute, group, cell["n"], cell["non_biased"], cell["share"], f"{cell['ci'][0]:.3f}–{cell['ci'][1]:.3f}"]
            for attribute, groups in result["bias_by_attribute"].items() for group, cell in groups.items()]


def _cluster_rows(result: dict[str, Any]) -> list[list[Any]]:
    clusters = (result.get("clustering") or {}).get("clusters") or {}
    return [["noise" if label == "-1" else label, c["size"], c["toxic_words"], c["words"], c["toxicity"]]
            for label, c in clusters.items()]


def _bestof_rows(result: dict[str, Any]) -> list[list[Any]]:
    return [[b["session_id"], b["qa_id"], b["candidates"], b["rounds"], len(b["contests"]), b["winner"] + 1,
             b["confidence"]] for b in result["bestof"]]


def render_markdown(result: dict[str, Any]) -> str:
    """Summary, per-turn, bias, clustering and BestOf tables as Markdown."""
    src = result.get("source") or {}
    judge = result.get("judge") or {}
    parts = [f"# Conversation evaluation {result['run_id']}\n",
             f"{result['summary']['conversations']} conversations, {result['summary']['turns']} turns · "
             f"source {src.get('file', '?')}" + (f" via {src['proxy']} (model {src.get('model')})" if src.get("proxy") else "")
             + f" · judge {judge.get('model', 'none')} · generated {result['generated']}\n",
             "## Summary\n", _md_table(["metric", "value"], [list(r) for r in summary_rows(result)]),
             "## Turns\n", _md_table(_TURN_HEADER, _turn_rows(result))]
    if result["bias_by_attribute"]:
        parts += ["## Bias by protected attribute (non-biased share, 95% Clopper–Pearson)\n",
                  _md_table(["attribute", "group", "n", "non-biased", "share", "95% CI"], _bias_rows(result))]
    clustering = result.get("clustering") or {}
    if clustering.get("skipped"):
        parts += ["## Toxicity clusters\n", f"Skipped: {clustering['skipped']}\n"]
    elif clustering:
        parts += [f"## Toxicity clusters (silhouette {fmt(clustering.get('silhouette'))})\n",
                  _md_table(["cluster", "answers", "toxic words", "words", "toxicity"], _cluster_rows(result))]
    if result["bestof"]:
        parts += ["## BestOf tournaments\n",
                  _md_table(["session", "turn", "candidates", "rounds", "contests", "winner (#)", "confidence"],
                            _bestof_rows(result))]
    return "\n".join(parts)


def _scatter(clustering: dict[str, Any]) -> str:
    """The clusters' 2-D UMAP scatter as SVG (one circle per answer, with a title)."""
    points = clustering["points"]
    width, height, pad = 640, 420, 30
    xs, ys = [p["x"] for p in points], [p["y"] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)

    def sx(v: float) -> float:
        return pad + (width - 2 * pad) * ((v - x0) / (x1 - x0) if x1 > x0 else 0.5)

    def sy(v: float) -> float:
        return height - pad - (height - 2 * pad) * ((v - y0) / (y1 - y0) if y1 > y0 else 0.5)

    parts = [f'<svg class="scatter" role="img" aria-label="toxicity clusters" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" fill="none" stroke="#d8dde6"/>']
    for p in points:
        colour = "#9aa3b2" if p["label"] == -1 else _PALETTE[p["label"] % len(_PALETTE)]
        label = "noise" if p["label"] == -1 else f"cluster {p['label']}"
        parts.append(f'<circle cx="{sx(p["x"]):.1f}" cy="{sy(p["y"]):.1f}" r="{5 + 20 * p["toxicity"]:.1f}" '
                     f'fill="{colour}"><title>{escape(p["session_id"])}/{escape(p["qa_id"])}: {label}, '
                     f'toxicity {p["toxicity"]:.3f}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(result: dict[str, Any]) -> str:
    """The result as one HTML document (strict CSP, inline CSS by hash, SVG charts, no script)."""
    css = _CSS + _EXTRA_CSS
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    csp = f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'none'; base-uri 'none'; form-action 'none'"
    summary = result["summary"]
    bars: list[tuple[str, float | None, float | None, float | None, str]] = [
        (label, summary[key] / top if summary.get(key) is not None else None, None, None, fmt(summary.get(key)))
        for key, label, top in _SUMMARY]
    sections = [_bar_chart("Summary (each metric on its own scale, shown as a share of its maximum)", bars,
                           scale_max=1.0),
                "<h2>Turns</h2>", _table(_TURN_HEADER, [[fmt(c) for c in row] for row in _turn_rows(result)])]
    if result["bias_by_attribute"]:
        rows = [(f"{a}={g}", c["share"], c["ci"][0], c["ci"][1], f"{c['non_biased']}/{c['n']}")
                for a, groups in result["bias_by_attribute"].items() for g, c in groups.items()]
        sections += ["<h2>Bias: non-biased share per protected group (95% Clopper–Pearson)</h2>",
                     _bar_chart("Non-biased answers", rows, scale_max=1.0)]
    clustering = result.get("clustering") or {}
    if clustering.get("points"):
        sections += [f"<h2>Toxicity clusters (silhouette {escape(fmt(clustering.get('silhouette')))})</h2>",
                     "<p class=\"meta\">UMAP 2-D projection of the answers' embeddings; colour = HDBSCAN cluster, "
                     "grey = noise, larger circle = more lexicon-toxic words (hover a point for its turn).</p>",
                     _scatter(clustering),
                     _table(["cluster", "answers", "toxic words", "words", "toxicity"],
                            [[fmt(c) for c in row] for row in _cluster_rows(result)])]
    elif clustering.get("skipped"):
        sections.append(f"<h2>Toxicity clusters</h2><p>Skipped: {escape(clustering['skipped'])}</p>")
    if result["bestof"]:
        sections += ["<h2>BestOf tournaments</h2>",
                     _table(["session", "turn", "candidates", "rounds", "contests", "winner (#)", "confidence"],
                            [[fmt(c) for c in row] for row in _bestof_rows(result)])]
    judge = result.get("judge") or {}
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
            f"<title>Conversation evaluation {escape(result['run_id'])}</title><style>{css}</style></head><body>"
            f"<h1>Conversation evaluation</h1><p class=\"meta\">run {escape(result['run_id'])} · "
            f"{summary['conversations']} conversations, {summary['turns']} turns · judge "
            f"{escape(str(judge.get('model', 'none')))} ({escape(', '.join(judge.get('templates', [])))}) · generated "
            f"{escape(result['generated'])}</p>{''.join(sections)}</body></html>")
