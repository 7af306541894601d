"""Humanity (Fair Forge): the emotions of an answer over Plutchik's eight basic emotions.

Lexicon: the NRC Word-Emotion Association Lexicon (Mohammad & Turney 2013, "Crowdsourcing a
Word-Emotion Association Lexicon", Computational Intelligence 29(3)), as shipped by the
``nrclex`` package (``nrclex/data/nrc_en.json``: word → associated emotions and sentiments; read
with :mod:`importlib.resources`). Only the eight emotions of Plutchik (1980) count
(:data:`EMOTIONS`); the ``positive`` / ``negative`` sentiments do not.

- Emotion distribution of a text: lower-cased word tokens (``[a-z]+(?:'[a-z]+)?``) are looked up
  in the lexicon; each emotion's count of associated tokens over the sum of the eight counts
  (all zero when no token carries an emotion).
- Emotional entropy (Shannon 1948): H = −Σ pᵢ log₂ pᵢ over the eight shares, in bits
  (0 … log₂ 8 = 3; 0 for a text without emotion words).
- Spearman correlation ρ of the answer's eight emotion shares with the ground truth's: the
  Pearson correlation of their ranks (average ranks for ties; Spearman 1904). Undefined (None)
  when either vector is constant.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from importlib import resources
from typing import Mapping, Sequence

import numpy as np

__all__ = ["EMOTIONS", "emotion_distribution", "emotional_entropy", "lexicon", "rank", "spearman", "humanity"]

#: Plutchik's eight basic emotions, in the order of every vector here.
EMOTIONS = ("anger", "anticipation", "disgust", "fear", "joy", "sadness", "surprise", "trust")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


@lru_cache(maxsize=1)
def lexicon() -> dict[str, frozenset[str]]:
    """word → the Plutchik emotions the NRC lexicon associates with it (words with none left out)."""
    raw = json.loads((resources.files("nrclex") / "data" / "nrc_en.json").read_text(encoding="utf-8"))
    out = {}
    for word, labels in raw.items():
        emotions = frozenset(label for label in labels if label in EMOTIONS)
        if emotions:
            out[word.lower()] = emotions
    return out


def emotion_distribution(text: str, words: Mapping[str, frozenset[str]] | None = None) -> dict[str, float]:
    """The share of each of :data:`EMOTIONS` among the emotion associations of ``text``'s tokens
    (sums to 1, or all 0.0 when no token carries an emotion). ``words`` defaults to :func:`lexicon`."""
    words = lexicon() if words is None else words
    counts = dict.fromkeys(EMOTIONS, 0)
    for token in _WORD.findall(text.lower()):
        for emotion in words.get(token, ()):
            counts[emotion] += 1
    total = sum(counts.values())
    return {e: (counts[e] / total if total else 0.0) for e in EMOTIONS}


def emotional_entropy(distribution: Mapping[str, float]) -> float:
    """Shannon entropy −Σ p log₂ p of the emotion shares, in bits (0 ≤ H ≤ 3); 0 for all-zero shares."""
    return 0.0 - float(sum(p * math.log2(p) for p in distribution.values() if p > 0))


def rank(values: Sequence[float]) -> np.ndarray:
    """1-based ranks of ``values``, ties sharing their average rank (the "fractional" ranking)."""
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=float)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's ρ of two equal-length vectors: Pearson's r of their fractional ranks.

    None when a vector is constant (ρ undefined). Raises ValueError for lengths that differ or < 2.
    """
    if len(a) != len(b) or len(a) < 2:
        raise ValueError("spearman needs two vectors of the same length >= 2")
    ra, rb = rank(a), rank(b)
    da, db = ra - ra.mean(), rb - rb.mean()
    norm = math.sqrt(float((da * da).sum()) * float((db * db).sum()))
    return None if norm == 0 else float((da * db).sum() / norm)


def humanity(answer: str, ground_truth: str | None) -> dict[str, object]:
    """Humanity of one answer: ``{"emotions": shares, "entropy": bits, "spearman": ρ or None}``
    (``spearman`` None without a ground truth or when a distribution is constant)."""
    shares = emotion_distribution(answer)
    rho = None
    if ground_truth:
        truth = emotion_distribution(ground_truth)
        rho = spearman([shares[e] for e in EMOTIONS], [truth[e] for e in EMOTIONS])
    return {"emotions": shares, "entropy": emotional_entropy(shares), "spearman": rho}
