"""Scan-result cache keyed by content hash.

Chat clients resend the whole history every turn (docs/architecture.md "Performance principles"): a
detector's result for a text is cached under ``(detector key, sha256(text))``, so a turn costs
what its new text costs, not its history. Thread-safe LRU; values are treated as immutable.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable


def content_key(text: str) -> str:
    """SHA-256 hex of the UTF-8 text: the cache key for one piece of content."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: Default bound of the cache's total weight: the characters of the texts of the stored detector
#: results. A result's size grows with its text (the PII spans of a long document), so bounding the
#: texts' total length bounds the cache's memory, not only its entry count.
MAX_CACHED_CHARS = 20_000_000


class ScanCache:
    """LRU cache ``(namespace, content hash) -> result``, bounded to ``max_entries`` entries and to
    ``max_chars`` characters of cached text in all (each detector result weighs its text's length,
    a stored verdict (:meth:`put`) one; a text heavier than the whole bound is never stored).
    Least recently used entries are evicted first."""

    def __init__(self, max_entries: int = 50_000, max_chars: int = MAX_CACHED_CHARS) -> None:
        self._data: OrderedDict[tuple[str, str], tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
        self._max_chars = max_chars
        self.chars = 0
        """Current total weight (characters) of the stored entries."""
        self.hits = 0
        self.misses = 0

    def get(self, namespace: str, text: str) -> Any:
        """The value stored for ``text`` under ``namespace`` (None when absent); counts a hit or miss."""
        key = (namespace, content_key(text))
        with self._lock:
            if key not in self._data:
                self.misses += 1
                return None
            self.hits += 1
            self._data.move_to_end(key)
            return self._data[key][0]

    def put(self, namespace: str, text: str, value: Any) -> None:
        """Store ``value`` for ``text`` under ``namespace`` (e.g. a turn's verdict: weight 1), evicting LRU entries."""
        with self._lock:
            self._store((namespace, content_key(text)), value, 1)

    def _store(self, key: tuple[str, str], value: Any, weight: int) -> None:
        """Insert or replace under the lock, then evict down to both bounds."""
        if weight > self._max_chars:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self.chars -= old[1]
        self._data[key] = (value, weight)
        self.chars += weight
        while len(self._data) > self._max or self.chars > self._max_chars:
            self.chars -= self._data.popitem(last=False)[1][1]

    def map(self, namespace: str, texts: list[str], compute: Callable[[list[str]], list[Any]]) -> list[Any]:
        """Results for ``texts`` in order; only cache misses are computed, in one batch.

        ``compute`` takes the list of missing texts and returns one result per text.
        """
        keys = [(namespace, content_key(t)) for t in texts]
        results: list[Any] = [None] * len(texts)
        missing: dict[tuple[str, str], list[int]] = {}
        with self._lock:
            for i, key in enumerate(keys):
                if key in self._data:
                    self._data.move_to_end(key)
                    results[i] = self._data[key][0]
                    self.hits += 1
                else:
                    missing.setdefault(key, []).append(i)
                    self.misses += 1
        if missing:
            order = list(missing)
            computed = compute([texts[missing[k][0]] for k in order])
            if len(computed) != len(order):
                raise ValueError(f"detector returned {len(computed)} results for {len(order)} texts")
            with self._lock:
                for key, value in zip(order, computed):
                    for i in missing[key]:
                        results[i] = value
                    self._store(key, value, max(1, len(texts[missing[key][0]])))
        return results
