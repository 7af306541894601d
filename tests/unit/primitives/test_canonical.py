"""RFC 8785 canonical JSON (proxy/primitives/canonical.py): integers beyond ±(2**53 − 1) are written
as the double a JSON parser reads for them (RFC 8785 §3.2.2.3), and float paths in errors.
"""

from __future__ import annotations

import pytest

from proxy.primitives.canonical import MAX_SAFE_INTEGER, canonical


def test_unsafe_integers_inside_lists_and_objects_are_written_as_doubles() -> None:
    """2**60 inside an array, a tuple and an object: the double in ECMAScript form (JSON.stringify(2 ** 60)), neighbours kept."""
    big = 2**60
    assert canonical([big, 1, True, None]) == b"[1152921504606847000,1,true,null]"
    assert canonical((1, -big)) == b"[1,-1152921504606847000]"
    assert canonical({"b": [big], "a": {"n": big + 1}}) == b'{"a":{"n":1152921504606847000},"b":[1152921504606847000]}'
    assert canonical([MAX_SAFE_INTEGER, big]) == b"[9007199254740991,1152921504606847000]"
    assert canonical([2**53 + 1, big]) == b"[9007199254740992,1152921504606847000]"


def test_float_paths_quote_keys_that_are_not_identifiers() -> None:
    """The JSONPath in the error escapes backslashes and quotes of a bracketed key."""
    from proxy.primitives.canonical import assert_no_floats

    with pytest.raises(TypeError, match=r'^float at \$\["a\\\\b\\"c"\]\[1\] '):
        assert_no_floats({'a\\b"c': [0, 1.5]})
    with pytest.raises(TypeError, match=r'^float at \$\.evidence\["a b"\] '):
        assert_no_floats({"evidence": {"a b": 0.1}})
    assert assert_no_floats({"s": "1.5", "b": True, "n": None, "i": 2**53 - 1}) is None
