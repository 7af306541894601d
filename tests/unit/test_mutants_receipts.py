"""Tests that kill surviving mutants in proxy/receipts (mutation/baseline.md lists what survives).

Canonical JSON (RFC 8785 §3.2.2.3): integers beyond ±(2**53 − 1) are written as the double a
JSON parser reads for them, wherever they sit in the value.
"""

from __future__ import annotations

from proxy.receipts.canonical import MAX_SAFE_INTEGER, canonical


def test_unsafe_integers_inside_lists_and_objects_are_written_as_doubles() -> None:
    """2**60 inside an array, a tuple and an object: the double in ECMAScript form (JSON.stringify(2 ** 60)), neighbours kept."""
    big = 2**60
    assert canonical([big, 1, True, None]) == b"[1152921504606847000,1,true,null]"
    assert canonical((1, -big)) == b"[1,-1152921504606847000]"
    assert canonical({"b": [big], "a": {"n": big + 1}}) == b'{"a":{"n":1152921504606847000},"b":[1152921504606847000]}'
    assert canonical([MAX_SAFE_INTEGER, big]) == b"[9007199254740991,1152921504606847000]"
    assert canonical([2**53 + 1, big]) == b"[9007199254740992,1152921504606847000]"
