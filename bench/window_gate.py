"""The first stage of Safety's sentence windows: what it passes over, and what it would miss.

Builds texts of one to three benign sentences from the written safety exemplars
(``proxy/guardrails/artefacts/safety-exemplars.csv``), half of them with one harmful exemplar
inserted at a random place, embeds each text whole (as the engine's detectors do first) and every
sentence window alone, and prints, for gates around :data:`~proxy.guardrails.detectors.harm.WINDOW_GATE`:
the share of windows the first stage sends on to be embedded alone, and how many windows that
score at least the window threshold alone (0.9998) or 0.99 it would pass over. The exemplars are
the project's own written data (no benchmark row).

Usage: ``.venv/bin/python bench/window_gate.py [--texts 300] [--seed 1]``
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.guardrails.detectors import embeddings, windows  # noqa: E402
from proxy.guardrails.detectors.harm import DEFAULT_WINDOW_THRESHOLD, WINDOW_GATE, load_harm_classifier  # noqa: E402

EXEMPLARS = ROOT / "proxy" / "guardrails" / "artefacts" / "safety-exemplars.csv"


def texts_of(count: int, seed: int) -> list[str]:
    """``count`` texts of 1-3 benign exemplars, half with one harmful exemplar inserted."""
    rows = list(csv.DictReader(EXEMPLARS.open(encoding="utf-8")))
    harmful = [r["text"] for r in rows if r["label"] == "harmful"]
    benign = [r["text"] for r in rows if r["label"] != "harmful"]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        parts = rng.sample(benign, rng.choice([1, 2, 3]))
        if rng.random() < 0.5:
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(harmful))
        out.append(" ".join(parts))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=300, help="texts built (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = parser.parse_args()
    harm = load_harm_classifier()
    first, alone = [], []
    for text in texts_of(args.texts, args.seed):
        embeddings.embed_layers([text])  # the whole pass
        kept = embeddings.token_vectors(text)
        for window in windows.windows(text):
            vector = kept.pooled(window.start, window.end) if kept is not None else None
            if vector is None:
                continue
            first.append(vector)
            alone.append(embeddings.embed_layers([text[window.start:window.end]], remember=False)[0])
    if not first:
        print("no window could be approximated")
        return 1
    approximate = harm.views[1].proba(np.stack(first))
    exact = harm.window_proba(np.stack(alone))
    counting, high = exact >= DEFAULT_WINDOW_THRESHOLD, exact >= 0.99
    print(f"{len(exact)} windows of {args.texts} texts; {int(counting.sum())} score >= {DEFAULT_WINDOW_THRESHOLD} alone, "
          f"lowest first-stage probability among them {approximate[counting].min():.4f}" if counting.any() else "")
    for gate in sorted({1e-4, WINDOW_GATE, 0.01, 0.05, 0.1}):
        mark = "  (shipped)" if gate == WINDOW_GATE else ""
        print(f"gate {gate:g}: {np.mean(approximate >= gate):.1%} of windows embedded alone; passed over: "
              f"{int(np.sum(counting & (approximate < gate)))} scoring >= {DEFAULT_WINDOW_THRESHOLD}, "
              f"{int(np.sum(high & (approximate < gate)))} scoring >= 0.99{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
