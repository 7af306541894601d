"""A self-contained HTML rendering of a ``sonate.report/v1`` report (inline CSS and SVG).

No scripts, fonts, images or stylesheets are fetched: the file is viewable offline and in a
mail client. Its Content-Security-Policy meta tag (:func:`content_security_policy`) allows
nothing but the one ``<style>`` element, by its SHA-256 (CSP Level 3 hash source): no script
runs, no style attribute applies, nothing loads. Charts: per-stratum bars with 95 % interval whiskers (FAR-A per complexity and
per domain, TIS per complexity) and the TIS components. Pure: returns a string.
"""

from __future__ import annotations

import base64
import hashlib
import json
from html import escape
from typing import Any

__all__ = ["content_security_policy", "render_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2430;margin:2rem auto;max-width:1100px;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{margin-top:2rem;border-bottom:1px solid #d8dde6;padding-bottom:.3rem}
.meta{color:#556}.kpis{display:flex;flex-wrap:wrap;gap:1rem;margin:1rem 0}
.kpi{border:1px solid #d8dde6;border-radius:8px;padding:.8rem 1rem;min-width:180px}
.kpi .v{font-size:1.8rem;font-weight:600}.kpi .ci{color:#556;font-size:.85rem}
.ok{color:#17663a}.bad{color:#a3261b}.na{color:#888}
table{border-collapse:collapse;margin:.6rem 0}td,th{border:1px solid #d8dde6;padding:.25rem .6rem;text-align:right}
th{background:#f3f5f9}td:first-child,th:first-child{text-align:left}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.4rem .8rem;margin:.4rem 0}
svg text{font:12px system-ui,sans-serif;fill:#1d2430}
"""


def content_security_policy(css: str = _CSS) -> str:
    """The report page's CSP: ``default-src 'none'``, no script, and the inline stylesheet ``css``
    allowed by its SHA-256 only (https://www.w3.org/TR/CSP3/#grammardef-hash-source)."""
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return (f"default-src 'none'; style-src 'sha256-{digest}'; img-src 'none'; script-src 'none'; "
            "base-uri 'none'; form-action 'none'")


def _pct(x: float | None) -> str:
    return "NA" if x is None else f"{x * 100:.2f}%"


def _bar_chart(title: str, rows: list[tuple[str, float | None, float | None, float | None, str]], *,
               scale_max: float | None = None, percent: bool = True) -> str:
    """Horizontal bars with interval whiskers. rows: (label, value, low, high, display)."""
    width, left, bar_h, gap = 720, 190, 22, 12
    height = 40 + len(rows) * (bar_h + gap)
    values = [v for _, v, lo, hi, _ in rows for v in (v, hi) if v is not None]
    top = scale_max if scale_max is not None else (max(values) * 1.15 if values and max(values) > 0 else 1.0)
    plot = width - left - 90

    def x(v: float) -> float:
        return left + plot * min(max(v / top, 0.0), 1.0)

    parts = [f'<svg role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="0" y="16" font-weight="600">{escape(title)}</text>',
             f'<line x1="{left}" y1="26" x2="{left}" y2="{height - 6}" stroke="#99a"/>']
    for i, (label, value, low, high, display) in enumerate(rows):
        y = 30 + i * (bar_h + gap)
        parts.append(f'<text x="{left - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end">{escape(label)}</text>')
        if value is None:
            parts.append(f'<text x="{left + 6}" y="{y + bar_h * 0.7:.1f}" class="na">NA</text>')
            continue
        parts.append(f'<rect x="{left}" y="{y}" width="{x(value) - left:.1f}" height="{bar_h}" fill="#5b8def">'
                     f'<title>{escape(label)}: {escape(display)}</title></rect>')
        if low is not None and high is not None:
            mid = y + bar_h / 2
            parts.append(f'<g stroke="#1d2430" stroke-width="1.5"><line x1="{x(low):.1f}" y1="{mid}" x2="{x(high):.1f}" '
                         f'y2="{mid}"/><line x1="{x(low):.1f}" y1="{y + 4}" x2="{x(low):.1f}" y2="{y + bar_h - 4}"/>'
                         f'<line x1="{x(high):.1f}" y1="{y + 4}" x2="{x(high):.1f}" y2="{y + bar_h - 4}"/></g>')
        parts.append(f'<text x="{x(max(value, high or value)) + 6:.1f}" y="{y + bar_h * 0.7:.1f}">{escape(display)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _kpi_card(name: str, display: str, ci: list[str] | None, meets: bool | None, target: str) -> str:
    cls = "na" if display == "NA" else ("ok" if meets else "bad" if meets is False else "")
    interval = f"95% CI {escape(ci[0])} – {escape(ci[1])}" if ci else "interval NA"
    return (f'<div class="kpi"><div>{escape(name)}</div><div class="v {cls}">{escape(display)}</div>'
            f'<div class="ci">{interval}</div><div class="ci">target {escape(target)}</div></div>')


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _ci(block: dict[str, Any]) -> str:
    return f"{block['ci_display'][0]} – {block['ci_display'][1]}" if block.get("ci_display") else "NA"


def _cards(k: dict[str, Any]) -> list[str]:
    """The headline KPI cards: FAR-A and TIS (overall and normalized), FAR-H and PFI when present."""
    far_a, tis = k["far_a"], k["tis"]
    cards = [
        _kpi_card("FAR-A", far_a["overall"]["display"], far_a["overall"]["ci_display"], far_a["meets_target"], "< 0.50%"),
        _kpi_card("FAR-A (complexity-normalized)", far_a["normalized"]["display"], far_a["normalized"]["ci_display"],
                  None, "< 0.50%"),
        _kpi_card("TIS", tis["overall"]["display"], tis["overall"]["ci_display"], tis["meets_target"], "≥ 0.995"),
        _kpi_card("TIS (complexity-normalized)", tis["normalized"]["display"], tis["normalized"]["ci_display"], None, "≥ 0.995"),
    ]
    if "far_h" in k:
        o = k["far_h"]["overall"]
        cards.append(_kpi_card("FAR-H", o["display"], o["ci_display"], None, "< 1.00% general, < 0.25% regulated"))
    if "pfi" in k:
        o = k["pfi"]["overall"]
        cards.append(_kpi_card("PFI", o["display"], o["ci_display"], k["pfi"]["meets_enterprise"], "≥ 0.98 enterprise, ≥ 0.95 public"))
    return cards


def _far_a_section(far_a: dict[str, Any]) -> str:
    """FAR-A per complexity stratum (chart and table) and per domain (chart)."""
    far_rows = [(c, b["rate"] if b["published"] else None, b["ci_low"], b["ci_high"], b["display"])
                for c, b in far_a["per_complexity"].items()]
    dom_rows = [(dname, b["rate"] if b["published"] else None, b["ci_low"], b["ci_high"], b["display"])
                for dname, b in far_a["per_domain"].items()]
    return ("<h2>FAR-A — false apology rate</h2>" + _bar_chart("FAR-A per complexity stratum (95% Wilson)", far_rows)
            + _table(["stratum", "interactions", "unnecessary apologies", "FAR-A", "95% CI", "pooled (NA strata)"],
                     [[c, b["n"], b["successes"], b["display"], _ci(b),
                       "" if b["published"] else _pct(b["pooled"])] for c, b in far_a["per_complexity"].items()])
            + _bar_chart("FAR-A per domain (95% Wilson)", dom_rows))


def _tis_section(tis: dict[str, Any]) -> str:
    """TIS: formula, components chart, per complexity chart and the components table."""
    comp_rows = [(f"{name.upper()} (w {b['weight']:.2f})", b["value"], b["ci_low"], b["ci_high"], b["display"])
                 for name, b in tis["components"].items()]
    tis_rows = [(c, b["value"] if b["published"] else None, b["ci_low"], b["ci_high"], b["display"])
                for c, b in tis["per_complexity"].items()]
    return ("<h2>TIS — trust integrity score</h2><p>" + escape(tis["formula"]) + "</p>"
            + _bar_chart("TIS components (95% Wilson)", comp_rows, scale_max=1.0)
            + _bar_chart("TIS per complexity stratum (bootstrap normal 95%)", tis_rows, scale_max=1.0)
            + _table(["component", "successes", "n", "value", "95% CI"],
                     [[name.upper(), b["successes"], b["n"], b["display"], _ci(b)] for name, b in tis["components"].items()]))


def _far_h_section(fh: dict[str, Any]) -> str:
    """FAR-H per tier and domain (chart and table)."""
    rows = [(f"tier {t}", b["rate"] if b["published"] else None, b["ci_low"], b["ci_high"], b["display"])
            for t, b in fh["per_tier"].items()]
    rows += [(dn, b["rate"] if b["published"] else None, b["ci_low"], b["ci_high"], b["display"])
             for dn, b in fh["per_domain"].items()]
    return ("<h2>FAR-H — hallucination rate</h2>" + _bar_chart("FAR-H per tier and domain (95% Wilson)", rows)
            + _table(["group", "claims checked", "failed", "FAR-H", "95% CI"],
                     [[g, b["n"], b["successes"], b["display"], _ci(b)]
                      for g, b in [("overall", fh["overall"]), *fh["per_tier"].items(), *fh["per_domain"].items()]]))


def _pfi_section(pf: dict[str, Any]) -> str:
    """PFI per protected attribute (chart) and the overall value with its rule."""
    rows = [(a, b["value"], b["ci_low"], b["ci_high"], b["display"]) for a, b in pf["per_attribute"].items()]
    return ("<h2>PFI — protected fairness index</h2>" + _bar_chart("PFI per protected attribute", rows, scale_max=1.0)
            + f"<p>Overall: {escape(pf['overall']['display'])} ({escape(str(pf['overall'].get('rule') or ''))})</p>")


#: Trend lines of the conversation metrics: (summary key, label, scale maximum, colour).
_TREND_LINES = (("ssa", "SSA", 1.0, "#5b8def"), ("grice", "Grice G", 1.0, "#19a979"),
                ("context_adherence", "context adherence", 1.0, "#945ecf"),
                ("non_biased_share", "non-biased share", 1.0, "#e8743b"), ("risk_total", "risk R_total", 1.0, "#a3261b"),
                ("memory", "memory / 10", 10.0, "#13a4b4"))


def _trend_chart(runs: list[dict[str, Any]]) -> str:
    """One line per metric of :data:`_TREND_LINES` over the runs (x: run order, y: 0..1 of its scale)."""
    width, height, left, top, plot_w, plot_h = 720, 260, 40, 20, 500, 200

    def xy(i: int, value: float, scale: float) -> str:
        x = left + (plot_w * i / (len(runs) - 1) if len(runs) > 1 else plot_w / 2)
        return f"{x:.1f},{top + plot_h * (1 - min(max(value / scale, 0.0), 1.0)):.1f}"

    parts = [f'<svg role="img" aria-label="conversation metric trends" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#99a"/>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#99a"/>',
             f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">1</text>',
             f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>']
    for n, (key, label, scale, colour) in enumerate(_TREND_LINES):
        points = [xy(i, r[key], scale) for i, r in enumerate(runs) if r.get(key) is not None]
        if points:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(points)}">'
                         f'<title>{escape(label)}</title></polyline>')
            parts += [f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="3" fill="{colour}"/>' for p in points]
        parts.append(f'<text x="{left + plot_w + 16}" y="{top + 14 + 18 * n}" fill="{colour}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _trends_section(trends: dict[str, Any]) -> str:
    """The stored ``sonate eval conversation`` runs of the window: chart and table."""
    block = trends.get("conversation") or {}
    runs, metrics = block.get("runs") or [], block.get("metrics") or []
    if not runs:
        return "<h2>Conversation metrics (Fair Forge) — trend</h2><p>No stored run in the window.</p>"
    rows = [[r["generated"], r["run_id"], r["turns"]] + ["NA" if r.get(m) is None else f"{r[m]:.3f}" for m in metrics]
            for r in runs]
    return ("<h2>Conversation metrics (Fair Forge) — trend</h2>" + _trend_chart(runs)
            + _table(["generated", "run", "turns", *metrics], rows))


def _adjudication_section(adj: dict[str, Any]) -> str:
    """Adjudication coverage and the inter-rater agreement per domain."""
    return "<h2>Adjudication</h2>" + _table(
        ["apologies", "adjudicated", "triggers", "adjudicated", "allowed (sample frame)", "sample adjudicated", "FN in sample"],
        [[adj["apologies"], adj["apologies_adjudicated"], adj["triggers"], adj["triggers_adjudicated"],
          adj["allowed_eligible_for_sample"], adj["sample_adjudicated"], adj["false_negatives_in_sample"]]]) \
        + _table(["domain", "double-rated items", "Gwet AC1", "observed agreement"],
                 [[dn, v["n"], v["display"], f"{v['observed_agreement']:.3f}"] for dn, v in adj["agreement"].items()])


def _disclosure_section(d: dict[str, Any]) -> str:
    """N and window, N per stratum dimension and the provider mix."""
    parts = ["<h2>Disclosure</h2>" + _table(["N total", "window start (UTC)", "window end (UTC, exclusive)"],
                                           [[d["n_interactions"], d["window"]["start"], d["window"]["end"]]])]
    for dim in ("complexity", "domain", "provider"):
        parts.append(_table([dim, "N"], [[key, v] for key, v in d["per_stratum_n"][dim].items()]))
    parts.append(_table(["provider", "N", "share", "≥ 15%"],
                        [[p, v["n"], f"{v['share'] * 100:.1f}%", "no — flagged" if v["below_min_share"] else "yes"]
                         for p, v in d["provider_mix"].items()]))
    return "".join(parts)


def _methodology_section(m: dict[str, Any]) -> str:
    """Methodology version, weights, confidence and minimum N."""
    return "<h2>Methodology</h2>" + _table(["version", "complexity weights α", "TIS weights", "confidence", "min N"],
                                           [[m["version"], json.dumps(m["complexity_weights"]), json.dumps(m["tis_weights"]),
                                             m["confidence"], f"{m['min_interactions']} interactions / {m['min_claims']} claims"]])


def render_html(report: dict[str, Any]) -> str:
    """The report as one HTML document (UTF-8 string) with inline CSS and SVG charts."""
    k = report["kpis"]
    d = report["disclosure"]
    cards = _cards(k)
    sections = [_far_a_section(k["far_a"]), _tis_section(k["tis"])]
    if "far_h" in k:
        sections.append(_far_h_section(k["far_h"]))
    if "pfi" in k:
        sections.append(_pfi_section(k["pfi"]))
    if report.get("evaluation_trends"):
        sections.append(_trends_section(report["evaluation_trends"]))
    sections += [_adjudication_section(report["adjudication"]), _disclosure_section(d),
                 _methodology_section(report["methodology"])]
    notes = "".join(f'<div class="note">{escape(n)}</div>' for n in report["notes"])
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{content_security_policy()}\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>Sonate KPI report {escape(report['window']['start'])} – {escape(report['window']['end'])}</title>"
        f"<style>{_CSS}</style></head><body>"
        f"<h1>Sonate KPI report</h1><p class=\"meta\">Window {escape(report['window']['start'])} – "
        f"{escape(report['window']['end'])} (UTC) · N = {d['n_interactions']} interactions · methodology "
        f"{escape(report['methodology_version'])} · generated {escape(report['generated_at'])}</p>"
        f"{notes}<div class=\"kpis\">{''.join(cards)}</div>{''.join(sections)}</body></html>"
    )
