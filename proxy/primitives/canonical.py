"""Canonical JSON (RFC 8785, JCS) and the content hashes built on it.

Every signature and every hash in a trust receipt is computed over these bytes
(docs/architecture.md, "Trust receipts"). Pure functions: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import rfc8785

__all__ = [
    "CanonicalizationError",
    "MAX_SAFE_INTEGER",
    "assert_no_floats",
    "canonical",
    "json_hash",
    "sha256_ref",
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
