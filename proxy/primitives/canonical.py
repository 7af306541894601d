"""Canonical JSON (RFC 8785, JCS) and the content hashes built on it.

Every signature and every hash in a trust receipt is computed over these bytes
(docs/architecture.md, "Trust receipts"). Pure functions: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from typing import Any

import rfc8785

__all__ = [
    "CanonicalCache",
    "CanonicalizationError",
    "MAX_SAFE_INTEGER",
    "assert_no_floats",
    "canonical",
    "json_hash",
    "sha256_ref",
    "value_key",
]

CanonicalizationError = rfc8785.CanonicalizationError
"""Raised (a ``ValueError``) for values JCS cannot represent: NaN/Infinity,
non-string object keys, lone surrogates, unsupported Python types."""

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer an IEEE 754 double holds exactly (RFC 8785 §3.2.2.3, RFC 7493 §2.2)."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical(obj: Any) -> bytes:
    """Return the RFC 8785 (JCS) canonical UTF-8 bytes of a JSON value.

    ``obj`` is a JSON-shaped Python value (dict with str keys, list/tuple, str,
    int, float, bool, None). Floats are allowed here because the request JSON
    "as received" may contain them; they are serialised with the ECMAScript
    number rules RFC 8785 §3.2.2.3 prescribes.

    Integers outside ±(2**53 − 1) are serialised as the IEEE 754 double a JSON
    parser (and therefore the browser verifier) reads for them, as RFC 8785
    §3.2.2.3 requires; such values are rejected in signed content by
    :func:`assert_no_floats`.

    Raises :class:`CanonicalizationError` (a ``ValueError``) for NaN, ±Infinity,
    non-string keys, lone surrogates or unsupported types.
    """
    try:
        return rfc8785.dumps(obj)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_ints_as_doubles(obj))


def _ints_as_doubles(obj: Any) -> Any:
    """Copy of ``obj`` with integers beyond the safe range replaced by floats."""
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):
        return float(obj) if abs(obj) > MAX_SAFE_INTEGER else obj
    if isinstance(obj, dict):
        return {k: _ints_as_doubles(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_ints_as_doubles(v) for v in obj]
    return obj


def sha256_ref(data: bytes) -> str:
    """Return ``"sha256:" + lowercase hex(SHA-256(data))`` (71 characters).

    This is the hash reference format of ``inputs_hash``, ``outputs_hash`` and
    ``prev_hash`` (docs/architecture.md, "Trust receipts").
    """
    return "sha256:" + hashlib.sha256(data).hexdigest()


def json_hash(obj: Any) -> str:
    """Return ``sha256_ref(canonical(obj))``: the hash of a JSON value.

    Used for ``inputs_hash`` (the request JSON as received) and
    ``outputs_hash`` (the response JSON returned). Raises like :func:`canonical`.
    """
    return sha256_ref(canonical(obj))


def value_key(value: Any) -> str | None:
    """A text naming the JSON object ``value`` (a dict), equal for equal objects and different for
    different ones: ``m`` + the role's length + role + content for an object of exactly a string
    ``role`` and a string ``content`` (most chat messages), ``r`` + the ``repr`` of its sorted
    items when every key is a string and every value a string or None, else ``j`` + its JSON (keys
    sorted, no spaces). None for anything else: a non-string key, a value JSON cannot write (NaN,
    an unsupported type). Cheaper than :func:`canonical`: a cache key, never hashed
    into a receipt. ``value`` is a parsed JSON object: the JSON path writes a nested non-string
    key as a string, so ``{"a": {1: 2}}`` would share the key of ``{"a": {"1": 2}}``."""
    if not isinstance(value, dict):
        return None
    role, content = value.get("role"), value.get("content")
    if len(value) == 2 and isinstance(role, str) and isinstance(content, str):
        return f"m{len(role)}:{role}{content}"
    try:
        items = sorted(value.items())
    except TypeError:  # keys of mixed types
        return None
    if not all(isinstance(k, str) for k, _ in items):
        return None
    if all(v is None or isinstance(v, str) for _, v in items):
        return "r" + repr(items)
    try:
        return "j" + json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


class CanonicalCache:
    """RFC 8785 bytes of JSON objects, cached by :func:`value_key` (LRU, thread-safe), for the
    parts a request resends unchanged: a chat client's history messages.

    Bounded to ``max_entries`` entries and ``max_chars`` characters of keys and canonical bytes in
    all (an entry heavier than that is not stored). ``hits`` / ``misses`` count lookups.
    """

    def __init__(self, max_entries: int = 50_000, max_chars: int = 16_000_000) -> None:
        self._data: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._max, self._max_chars = max_entries, max_chars
        self.chars = 0
        """Current total weight: the characters of the stored keys plus the bytes of their values."""
        self.hits = 0
        self.misses = 0

    @property
    def entries(self) -> int:
        """How many objects' bytes are stored."""
        return len(self._data)

    def canonicals(self, values: list[Any]) -> list[bytes]:
        """:func:`canonical` of each of ``values``, from the cache when stored; raises as it does."""
        keys = [value_key(v) for v in values]
        out: list[bytes | None] = [None] * len(values)
        with self._lock:
            for i, key in enumerate(keys):
                found = self._data.get(key) if key is not None else None
                if found is not None and key is not None:
                    self._data.move_to_end(key)
                    out[i] = found
                    self.hits += 1
                else:
                    self.misses += 1
        new: list[tuple[str, bytes]] = []
        encoded: list[bytes] = []
        for value, key, found in zip(values, keys, out):
            if found is None:
                found = canonical(value)
                if key is not None:
                    new.append((key, found))
            encoded.append(found)
        if new:
            with self._lock:
                for key, value_bytes in new:
                    self._store(key, value_bytes)
        return encoded

    def _store(self, key: str, encoded: bytes) -> None:
        weight = len(key) + len(encoded)
        if weight > self._max_chars:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self.chars -= len(key) + len(old)
        self._data[key] = encoded
        self.chars += weight
        while len(self._data) > self._max or self.chars > self._max_chars:
            gone, value = self._data.popitem(last=False)
            self.chars -= len(gone) + len(value)

    def json_hash(self, obj: dict[str, Any], member: str) -> str:
        """:func:`json_hash` of the object ``obj`` (string keys), the elements of its list ``member``
        (when it is a list) canonicalised through the cache: the same hash, computed from the
        same bytes (RFC 8785 §3.2.3: members sorted by the UTF-16 code units of their names).
        Raises like :func:`canonical`."""
        if not all(isinstance(k, str) for k in obj):
            return json_hash(obj)  # refused there, as JCS requires
        parts = [b"{"]
        for i, (key, value) in enumerate(sorted(obj.items(), key=lambda kv: kv[0].encode("utf-16be"))):
            if i:
                parts.append(b",")
            parts += (canonical(key), b":")
            if key == member and isinstance(value, list):
                parts += (b"[", b",".join(self.canonicals(value)), b"]")
            else:
                parts.append(canonical(value))
        parts.append(b"}")
        return sha256_ref(b"".join(parts))


def _child_path(path: str, key: str) -> str:
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{escaped}"]'


def assert_no_floats(obj: Any, path: str = "$") -> None:
    """Raise ``TypeError`` naming the JSON path of the first float in ``obj``.

    Signed receipt content holds no floats: scores are decimal strings such as
    ``"0.9132"`` so that no two implementations can disagree on a number
    (docs/architecture.md). Integers outside ±(2**53 − 1) are rejected the same way,
    since JSON consumers read them as doubles (RFC 7493 §2.2).

    Paths are JSONPath-like: ``$.evidence.scores[2]``, ``$.evidence["a b"]``.
    Returns ``None`` when the value is clean. Walks dicts, lists and tuples.
    """
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, float):
        raise TypeError(f"float at {path} ({obj!r}): signed content must use decimal strings")
    if isinstance(obj, int):
        if abs(obj) > MAX_SAFE_INTEGER:
            raise TypeError(f"integer at {path} exceeds ±(2**53-1): JSON readers see a float")
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            assert_no_floats(value, _child_path(path, str(key)))
        return
    if isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            assert_no_floats(value, f"{path}[{index}]")
