"""Server-side SVG charts for the HTML reports (pure; strings; no script, no style attributes, so a
strict Content-Security-Policy holds): :func:`histogram`, :func:`heatmap`, :func:`paired_bars`.

Every chart is an ``<svg role="img">`` with an ``aria-label`` and a ``<title>`` per mark (tooltip)."""

from __future__ import annotations

from html import escape
from typing import Sequence

BLUE, GREY, RED, INK, AXIS = "#5b8def", "#b8c0cc", "#c0392b", "#1d2430", "#99a"


def _open(title: str, width: int, height: int) -> list[str]:
    return [f'<svg role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
            f'<text x="0" y="16" font-weight="600">{escape(title)}</text>']


def bin_edges(values: Sequence[float], bins: int) -> list[float]:
    """``bins`` + 1 equal-width edges from min to max of ``values`` (a unit span when all are equal)."""
    low, high = min(values), max(values)
    if high == low:
        high = low + 1.0
    step = (high - low) / bins
    return [low + i * step for i in range(bins)] + [high]


def bin_counts(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    """Counts per bin [eᵢ, eᵢ₊₁) (the last bin closed), as numpy.histogram counts."""
    counts = [0] * (len(edges) - 1)
    for v in values:
        for i in range(len(counts)):
            if edges[i] <= v < edges[i + 1] or (i == len(counts) - 1 and v == edges[-1]):
                counts[i] += 1
                break
    return counts


def histogram(title: str, values: Sequence[float], *, bins: int = 20, unit: str = "ms",
              markers: dict[str, float] | None = None) -> str:
    """Vertical-bar histogram of ``values`` with labelled vertical ``markers`` (e.g. p50, p95, budget)."""
    width, height, left, bottom, top = 720, 240, 50, 40, 30
    parts = _open(title, width, height)
    if not values:
        return "".join(parts + ['<text x="0" y="40">no values</text></svg>'])
    edges = bin_edges(values, bins)
    counts = bin_counts(values, edges)
    plot_w, plot_h = width - left - 20, height - top - bottom
    peak = max(counts) or 1
    marks = dict(markers or {})
    right = max([edges[-1], *marks.values()])
    span = right - edges[0] or 1.0

    def x(v: float) -> float:
        return left + plot_w * (v - edges[0]) / span

    parts.append(f'<line x1="{left}" y1="{height - bottom}" x2="{width - 20}" y2="{height - bottom}" stroke="{AXIS}"/>')
    for i, count in enumerate(counts):
        h = plot_h * count / peak
        x0, x1 = x(edges[i]), x(edges[i + 1])
        parts.append(f'<rect x="{x0:.1f}" y="{height - bottom - h:.1f}" width="{max(x1 - x0 - 1, 1):.1f}" '
                     f'height="{h:.1f}" fill="{BLUE}"><title>{edges[i]:.1f}–{edges[i + 1]:.1f} {unit}: '
                     f'{count}</title></rect>')
    for i, (label, value) in enumerate(marks.items()):  # labels on staggered rows, inside the plot
        near_right = x(value) > width - 100
        parts.append(f'<line x1="{x(value):.1f}" y1="{top}" x2="{x(value):.1f}" y2="{height - bottom}" '
                     f'stroke="{RED if label == "budget" else INK}" stroke-dasharray="4 3"/>'
                     f'<text x="{x(value) + (-3 if near_right else 3):.1f}" y="{top + 10 + 13 * i}"'
                     f'{" text-anchor=" + chr(34) + "end" + chr(34) if near_right else ""}>{escape(label)} {value:.0f}</text>')
    parts.append(f'<text x="{left}" y="{height - 12}">{edges[0]:.0f} {unit}</text>'
                 f'<text x="{width - 20}" y="{height - 12}" text-anchor="end">{right:.0f} {unit}</text>'
                 f'<text x="0" y="{top + 10}">n={len(values)}</text></svg>')
    return "".join(parts)


def _shade(value: float) -> str:
    """Red (0) → amber (0.5) → green (1) as a hex colour."""
    v = min(max(value, 0.0), 1.0)
    if v < 0.5:
        r, g, b = 192, int(57 + (176 - 57) * v * 2), 43
    else:
        r, g, b = int(240 - (240 - 39) * (v - 0.5) * 2), int(176 - (176 - 174) * (v - 0.5) * 2), int(43 + (96 - 43) * (v - 0.5) * 2)
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(title: str, rows: Sequence[str], columns: Sequence[str], values: dict[tuple[str, str], float]) -> str:
    """Cells coloured by value 0..1 (red → green), the value printed in each; missing cells blank."""
    cell_w, cell_h, left, top = 90, 24, 200, 60
    width, height = left + cell_w * len(columns) + 10, top + cell_h * len(rows) + 10
    parts = _open(title, width, height)
    for j, col in enumerate(columns):
        parts.append(f'<text x="{left + j * cell_w + cell_w / 2:.0f}" y="{top - 8}" text-anchor="middle">'
                     f'{escape(col)}</text>')
    for i, row in enumerate(rows):
        y = top + i * cell_h
        parts.append(f'<text x="{left - 8}" y="{y + cell_h * 0.7:.0f}" text-anchor="end">{escape(row)}</text>')
        for j, col in enumerate(columns):
            value = values.get((row, col))
            if value is None:
                continue
            x = left + j * cell_w
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{_shade(value)}">'
                         f'<title>{escape(row)} · {escape(col)}: {value:.3f}</title></rect>'
                         f'<text x="{x + cell_w / 2:.0f}" y="{y + cell_h * 0.68:.0f}" text-anchor="middle">'
                         f'{value:.2f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def paired_bars(title: str, rows: Sequence[tuple[str, float, float, bool]], *, scale_max: float | None = None) -> str:
    """Per row (label, baseline, now, flagged): a grey baseline bar over a blue (red when flagged) now bar."""
    width, left, bar_h, gap = 720, 230, 11, 10
    height = 50 + len(rows) * (2 * bar_h + gap)
    top = scale_max or max([1e-12, *[max(abs(a), abs(b)) for _, a, b, _ in rows]]) * 1.1
    plot = width - left - 90
    parts = _open(title, width, height)
    parts.append(f'<rect x="{left}" y="24" width="10" height="10" fill="{GREY}"/><text x="{left + 14}" y="33">baseline</text>'
                 f'<rect x="{left + 90}" y="24" width="10" height="10" fill="{BLUE}"/><text x="{left + 104}" y="33">now</text>'
                 f'<rect x="{left + 150}" y="24" width="10" height="10" fill="{RED}"/><text x="{left + 164}" y="33">regressed</text>')
    for i, (label, base, now, flagged) in enumerate(rows):
        y = 44 + i * (2 * bar_h + gap)
        parts.append(f'<text x="{left - 8}" y="{y + bar_h * 1.4:.0f}" text-anchor="end"'
                     f'{f" fill={chr(34)}{RED}{chr(34)}" if flagged else ""}>{escape(label)}</text>')
        for k, (value, colour) in enumerate(((base, GREY), (now, RED if flagged else BLUE))):
            w = plot * min(max(value / top, 0.0), 1.0)
            parts.append(f'<rect x="{left}" y="{y + k * bar_h}" width="{w:.1f}" height="{bar_h - 1}" fill="{colour}">'
                         f'<title>{escape(label)} {"baseline" if k == 0 else "now"}: {value:.4g}</title></rect>'
                         f'<text x="{left + w + 4:.1f}" y="{y + k * bar_h + bar_h - 2}">{value:.3g}</text>')
    parts.append("</svg>")
    return "".join(parts)
