"""Benchmark of the privacy detector on pathological inputs: seconds per shape
at 3 / 6 / 12 / 24 KB, for the detector as configured and for presidio's unbounded baseline.

Each shape is one short unit repeated to the size (``"1 " * 6000`` is 12 KB of digit runs). For
every shape and size it prints the seconds of ``PiiDetector.analyze`` (best of ``--repeat``), the
spans found, and the growth ratio 24 KB / 3 KB (8 is linear). Target: every shape
< ~1 s at 12 KB on a quiet core, ratio ~8.

``--baseline`` also runs a detector with presidio's own settings for what this project bounds:
python-phonenumbers' default ``max_tries`` (65,535), presidio's ``LemmaContextAwareEnhancer``
(linear token walk per result) and spaCy's full pipeline on windows without letters; both
detectors analyse the same texts in the same run. (The O(n log n) ``resolve_overlaps`` /
``merge_windows`` are in both.)
The policy's windows are used unchanged in both.

Usage: ``nice .venv/bin/python bench/pii_pathological.py [--sizes 3,6,12,24] [--shapes digits,honorific]
[--repeat 1] [--baseline]``; say the load average (``uptime``) with any figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy import offline  # noqa: E402,F401  (offline settings before model imports)

#: name -> repeated unit (the three audited shapes first, then the fuzz-like family)
SHAPES = {
    "digits": "1 ", "dash_groups": "12-", "honorific": "mr. ", "Honorific_cap": "Mr. ",
    "capitalised": "Alice ", "no_spaces": "abcdefgh", "newlines": "a\n", "address": "12 Main St\n",
    "phone_groups": "555 123 ", "dates": "2020-01-02 ", "digit_run": "1234567890", "dotted": "1.",
    "initials": "A. ", "commas": "1, ", "parens": "(1) ", "email_like": "a.", "at_signs": "a@",
    # reference: ordinary prose, the cost floor of spaCy's models per character
    "prose": "The committee met on Tuesday to review the budget for the coming year. ",
}


def _detector(baseline: bool):
    import yaml
    from presidio_analyzer.context_aware_enhancers import LemmaContextAwareEnhancer

    from proxy.guardrails.detectors.pii import PiiDetector, PiiDetectorConfig

    block = yaml.safe_load((ROOT / "policies" / "privacy.yaml").read_text())["detector"]
    if baseline:
        block["phone_max_tries"] = 65535
    detector = PiiDetector(PiiDetectorConfig(**block))
    if baseline:
        engine = detector.analyzer().analyzer_engine
        engine.context_aware_enhancer = LemmaContextAwareEnhancer(
            context_prefix_count=detector.config.context_prefix_count,
            context_suffix_count=detector.config.context_suffix_count)
    detector.analyze("warm up: call John Smith on 212-555-0198")
    return detector


def _seconds(detector, text: str, repeat: int, baseline: bool) -> tuple[float, int]:
    import re

    from proxy.guardrails.detectors import pii

    letter = pii._LETTER
    pii._LETTER = re.compile("") if baseline else letter  # baseline: every window through spaCy's models
    try:
        best, found = float("inf"), 0
        for _ in range(repeat):
            start = time.perf_counter()
            found = len(detector.analyze(text))
            best = min(best, time.perf_counter() - start)
        return best, found
    finally:
        pii._LETTER = letter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3,6,12,24", help="comma-separated sizes in KB (1 KB = 1,000 characters)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    parser.add_argument("--repeat", type=int, default=1, help="runs per text; the best is printed")
    parser.add_argument("--baseline", action="store_true", help="also run presidio's unbounded settings")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    detectors = {"bounded": _detector(False)}
    if args.baseline:
        detectors["baseline"] = _detector(True)
    print(f"load average {os.getloadavg()[0]:.2f}; seconds per analyze (spans found)")
    print(f"{'shape':14s} {'detector':9s} " + " ".join(f"{s:>13d}KB" for s in sizes) + "   ratio")
    for name in args.shapes.split(","):
        unit = SHAPES[name]
        for label, detector in detectors.items():
            cells, first, last = [], None, None
            for size in sizes:
                text = (unit * (size * 1000 // len(unit) + 1))[:size * 1000]
                seconds, found = _seconds(detector, text, args.repeat, label == "baseline")
                first = seconds if first is None else first
                last = seconds
                cells.append(f"{seconds:8.2f}s ({found:4d})")
            ratio = last / first if first else float("nan")
            print(f"{name:14s} {label:9s} " + " ".join(cells) + f"   {ratio:5.1f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
