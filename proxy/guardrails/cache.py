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


class ScanCache:
    """LRU cache ``(namespace, content hash) -> result`` bounded to ``max_entries``."""

    def __init__(self, max_entries: int = 50_000) -> None:
        self._data: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries
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
            return self._data[key]

    def put(self, namespace: str, text: str, value: Any) -> None:
        """Store ``value`` for ``text`` under ``namespace`` (e.g. a turn's verdict), evicting LRU entries."""
        with self._lock:
            self._data[(namespace, content_key(text))] = value
            self._data.move_to_end((namespace, content_key(text)))
            while len(self._data) > self._max:
                self._data.popitem(last=False)

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
                    results[i] = self._data[key]
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
                    self._data[key] = value
                    self._data.move_to_end(key)
                while len(self._data) > self._max:
                    self._data.popitem(last=False)
        return results
