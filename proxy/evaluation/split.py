"""The tuning / sealed split of every development set, and the near-duplicate check of training rows.

Pure functions (no I/O). Every development row belongs to exactly one part, decided by a stable
hash of its source and its normalised text (:func:`part_of`), so the split does not depend on
file order, on which other sources are loaded, or on the machine:

- **tuning** (~60 %): rules, examples, thresholds and trained artefacts may be written from these
  rows; ``sonate eval guardrails`` reads them by default and may list the prompts it touched;
- **sealed** (~40 %): read only by ``sonate eval guardrails --sealed``, which prints aggregates
  with their Wilson intervals and never a row. No rule is written from them and no artefact is
  trained on them (``sonate train`` refuses a row that matches any development row).

The seal holds for the life of the project: changing :data:`SALT` or :data:`TUNING_SHARE` would
move sealed rows into the tuning part, so a new seal comes only with a new data source.

Near duplicates (:func:`normalise`, :class:`NearDuplicates`): two texts are the same row when their
normalised forms are equal, or nearly the same when their word sets overlap with a Jaccard index
of at least :data:`NEAR_JACCARD` (both with at least :data:`NEAR_MIN_WORDS` words), which catches a
benchmark prompt written from memory with a word changed or punctuation moved.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Iterable

#: Share of each development set in the tuning part (the rest is sealed).
TUNING_SHARE = 0.6
#: Part of the hashed key; fixed for the life of the project (module docstring).
SALT = "sonate-seal-v1"
PARTS = ("tuning", "sealed")
#: Word-set Jaccard index from which two texts count as nearly the same row.
NEAR_JACCARD = 0.8
#: Texts shorter than this (in words) are compared only by their normalised form.
NEAR_MIN_WORDS = 5

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """``text`` in NFKC, case-folded, with every run of non-word characters turned into one space
    and the ends stripped: ``"What is LSD?"`` and ``"what  is lsd"`` both give ``"what is lsd"``."""
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def part_of(dataset: str, text: str) -> str:
    """``"tuning"`` or ``"sealed"`` for a row of ``dataset`` with ``text``.

    The first 8 bytes of SHA-256(``SALT``, dataset, normalised text) read as an integer in
    [0, 2^64); the row is in the tuning part when that integer is below ``TUNING_SHARE * 2^64``.
    Rows with the same normalised text in one source fall in the same part.
    """
    digest = hashlib.sha256(f"{SALT}\n{dataset}\n{normalise(text)}".encode()).digest()
    return "tuning" if int.from_bytes(digest[:8], "big") < TUNING_SHARE * 2**64 else "sealed"


def _words(normalised: str) -> frozenset[str]:
    return frozenset(normalised.split())


class NearDuplicates:
    """An index of reference texts (the development rows) answering "is this text one of them?".

    ``NearDuplicates(texts).match(text)`` returns the reference text that ``text`` equals after
    :func:`normalise`, or whose word set overlaps ``text``'s with a Jaccard index
    ≥ :data:`NEAR_JACCARD` (texts of at least :data:`NEAR_MIN_WORDS` words), else None.
    Cost: one dictionary lookup, then a scan of the references sharing a rare word with ``text``.
    """

    def __init__(self, texts: Iterable[str]) -> None:
        self._exact: dict[str, str] = {}
        self._sets: list[tuple[frozenset[str], str]] = []
        self._by_word: dict[str, list[int]] = {}
        for text in texts:
            key = normalise(text)
            if not key or key in self._exact:
                continue
            self._exact[key] = text
            words = _words(key)
            if len(words) >= NEAR_MIN_WORDS:
                for word in words:
                    self._by_word.setdefault(word, []).append(len(self._sets))
                self._sets.append((words, text))

    def __len__(self) -> int:
        return len(self._exact)

    def match(self, text: str) -> str | None:
        """The reference row ``text`` duplicates (exactly or nearly), or None."""
        key = normalise(text)
        if key in self._exact:
            return self._exact[key]
        words = _words(key)
        if len(words) < NEAR_MIN_WORDS:
            return None
        # a set with Jaccard >= 0.8 shares most words: look only at references sharing the rarest ones
        rare = sorted(words, key=lambda w: len(self._by_word.get(w, ())))[: max(1, len(words) // 4 + 1)]
        candidates = {i for w in rare for i in self._by_word.get(w, ())}
        for index in candidates:
            other, original = self._sets[index]
            if len(words & other) / len(words | other) >= NEAR_JACCARD:
                return original
        return None
