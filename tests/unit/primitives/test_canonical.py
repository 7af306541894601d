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


REQUEST = {
    "model": "m", "temperature": 0.7, "é": 1, "a\U0001f600": 2, "\uff01": 3,  # keys sorted by UTF-16 code units:
    "\U0001f600": 4,  # U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FF01 (and after it by code point)
    "metadata": {"z": 1, "a": [1.0, -0.0]},
    "messages": [
        {"role": "user", "content": "é ✓ \U0001f600"},
        {"role": "assistant", "content": None, "name": "bot"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}], "n": 1.5e300, "big": 2**60},
    ],
}


def test_the_cache_hashes_a_request_as_json_hash_does() -> None:
    """The request's hash from cached per-message bytes equals json_hash of the whole, before and
    after the messages are cached, also when ``messages`` is no list or holds no objects."""
    from proxy.primitives.canonical import CanonicalCache, json_hash

    cache = CanonicalCache()
    for raw in (REQUEST, {"messages": "not a list", "x": 1}, {"messages": [1, "two", None, [3], {}]}, {}):
        assert cache.json_hash(raw, "messages") == json_hash(raw)
        assert cache.json_hash(raw, "messages") == json_hash(raw)
    with pytest.raises(ValueError):  # a lone surrogate: refused as canonical() refuses it
        cache.json_hash({"messages": [{"role": "user", "content": "\ud800"}]}, "messages")


def test_the_cache_answers_a_resent_message_and_not_a_changed_one() -> None:
    from proxy.primitives.canonical import CanonicalCache, canonical

    cache = CanonicalCache()
    history = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]
    assert cache.canonicals(history) == [canonical(m) for m in history]
    assert (cache.hits, cache.misses, cache.entries) == (0, 2, 2)
    turn = [*history, {"role": "user", "content": "Bye"}]
    assert cache.canonicals(turn) == [canonical(m) for m in turn]
    assert (cache.hits, cache.misses) == (2, 3)
    changed = [{"role": "user", "content": "Hello!"}, {"role": "system", "content": "Hi"},
               {"role": "user", "content": "Bye", "name": "x"}]
    assert cache.canonicals(changed) == [canonical(m) for m in changed]
    assert (cache.hits, cache.misses) == (2, 6)


def test_the_cache_is_bounded_in_entries_and_characters() -> None:
    """The least recently used entries go first; an entry heavier than the whole bound is not stored."""
    from proxy.primitives.canonical import CanonicalCache

    cache = CanonicalCache(max_entries=3)
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(5)]
    cache.canonicals(messages[:3])
    cache.canonicals(messages[:1])  # the first is now the most recently used
    cache.canonicals(messages[3:])
    assert cache.entries == 3
    cache.canonicals(messages[:1] + messages[3:])
    assert cache.hits == 1 + 3  # the first, then the first and the two newest: the 2nd and 3rd were evicted
    small = CanonicalCache(max_chars=100)
    small.canonicals([{"role": "user", "content": "x" * 200}])
    assert small.entries == 0 and small.chars == 0
    small.canonicals([{"role": "user", "content": "y" * 30}, {"role": "user", "content": "z" * 30}])
    assert small.entries == 1 and small.chars <= 100


def test_value_keys_tell_different_objects_apart() -> None:
    from proxy.primitives.canonical import value_key

    objects = [{"role": "user", "content": "ab"}, {"role": "use", "content": "rab"}, {"role": "user", "content": None},
               {"role": "user", "content": "ab", "name": "n"}, {}, {"a": [1]}, {"a": [1.0]}, {"a": "[1]"}]
    keys = [value_key(o) for o in objects]
    assert None not in keys and len(set(keys)) == len(keys)
    assert value_key({"content": "ab", "role": "user"}) == keys[0]  # the order of the keys does not matter
    assert value_key([1]) is None and value_key({"a": float("nan")}) is None
    assert value_key({1: "a"}) is None and value_key({1: [1], "b": 2}) is None  # JSON would write "1"


def test_the_cache_serves_the_messages_and_nothing_else_of_a_request() -> None:
    """Only the elements of ``member`` go through the cache, and a resent message is answered with
    the bytes stored for it; an object with a non-string key is refused as json_hash refuses it."""
    from proxy.primitives.canonical import CanonicalCache, CanonicalizationError, canonical, json_hash

    cache = CanonicalCache()
    raw = {"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b"], "tools": [{"type": "function"}]}
    assert cache.json_hash(raw, "messages") == json_hash(raw)
    assert (cache.hits, cache.misses, cache.entries) == (0, 1, 1)
    first = cache.canonicals([{"role": "user", "content": "hi"}])[0]
    assert first == canonical(raw["messages"][0])
    assert cache.canonicals([{"content": "hi", "role": "user"}])[0] is first  # stored bytes, not recomputed
    with pytest.raises(CanonicalizationError):
        cache.json_hash({1: "a", "messages": []}, "messages")


def test_the_cache_counts_the_characters_it_holds() -> None:
    """``chars`` is the weight of the stored entries (key plus canonical bytes): a message twice in one
    call is stored once, an evicted entry takes its own weight away, a bound is inclusive."""
    from proxy.primitives.canonical import CanonicalCache, canonical, value_key

    def weight(message: dict[str, str]) -> int:
        return len(value_key(message) or "") + len(canonical(message))

    short, long = {"role": "user", "content": "a"}, {"role": "user", "content": "b" * 40}
    cache = CanonicalCache()
    cache.canonicals([short, short])
    assert (cache.entries, cache.chars) == (1, weight(short))
    one = CanonicalCache(max_entries=1)
    one.canonicals([long])
    one.canonicals([short])
    assert (one.entries, one.chars) == (1, weight(short))
    exact = CanonicalCache(max_chars=weight(short) + weight(long))
    exact.canonicals([short, long])
    assert (exact.entries, exact.chars) == (2, weight(short) + weight(long))
    alone = CanonicalCache(max_chars=weight(long))
    alone.canonicals([long])
    assert alone.entries == 1


def test_the_cache_bounds_default_to_50_000_entries_and_16_million_characters() -> None:
    from proxy.primitives.canonical import CanonicalCache

    cache = CanonicalCache()
    cache.canonicals([{"role": "user", "content": str(i)} for i in range(50_001)])
    assert cache.entries == 50_000
    heavy = CanonicalCache()  # key m4:user + n characters, bytes {"content":"...","role":"user"}: 2n + 35
    heavy.canonicals([{"role": "user", "content": "x" * 7_999_983}])  # 16,000,001: not stored
    assert heavy.entries == 0
    heavy.canonicals([{"role": "user", "content": "x" * 7_999_982}])  # 15,999,999: stored
    assert heavy.entries == 1


def test_value_keys_have_the_documented_shapes() -> None:
    """``r`` + the repr of the sorted items for string-or-None values, else ``j`` + compact sorted JSON
    that keeps non-ASCII characters; equal for the same object whatever the order of its keys."""
    from proxy.primitives.canonical import value_key

    assert value_key({"role": "user", "content": None}) == "r" + repr([("content", None), ("role", "user")])
    assert value_key({}) == "r[]"
    assert value_key({"b": ["é", {"y": 1, "x": None}], "a": 1}) == 'j{"a":1,"b":["é",{"x":null,"y":1}]}'
    assert value_key({"b": [1], "a": 1}) == value_key({"a": 1, "b": [1]})
