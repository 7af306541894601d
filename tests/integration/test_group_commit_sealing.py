"""PreparedReceipt (group commit's re-sealable receipt) gives exactly what seal() and RFC 8785 give.

The fast encoder (proxy.receipts.sealing.encode_value) is compared with the rfc8785 library on
seeded random JSON full of the cases where encoders differ: control characters, quotes,
backslashes, non-BMP characters, names at and above U+E000 (UTF-16 vs code-point order), lone
surrogates, integers at the IEEE 754 safe limit, tuples.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy.primitives.canonical import MAX_SAFE_INTEGER
from proxy.receipts import Signer, canonical, entry_hash, seal, verify_receipt
from proxy.receipts.sealing import PreparedReceipt, encode_value
from tests.support.ledger import make_receipt

_ALPHABET = ["a", "Z", "0", " ", '"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "é",
             "\u2028", "\u20ac", "\ud7ff", "\ue000", "\uffff", "\U0001f600", "\U00010000", "\u00ff"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(0, 6)))


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.randrange(9 if depth < 3 else 6)
    if roll == 0:
        return None
    if roll == 1:
        return rng.choice([True, False])
    if roll == 2:
        return rng.choice([0, -1, 7, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 10**12])
    if roll in (3, 4, 5):
        return _text(rng)
    if roll == 6:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if roll == 7:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_encode_value_is_rfc8785_on_random_json() -> None:
    rng = random.Random(20261123)
    for _ in range(3000):
        value = _value(rng)
        assert encode_value(value) == canonical(value), value


@pytest.mark.parametrize("value", [
    {"\U0001f600": 1, "\ue000": 2, "\uffff": 3, "a": 4},  # UTF-16 order puts the emoji first
    {"x": 1.5}, [2.0, -0.0, 1e21], 2**53, -(2**53), {"k": [2**60]},  # floats and unsafe ints: rfc8785 rules
])
def test_encode_value_falls_back_to_rfc8785(value: Any) -> None:
    assert encode_value(value) == canonical(value)


@pytest.mark.parametrize("value", ["\ud800", {"\udc00": 1}, {1: "a"}, float("nan"), object()])
def test_encode_value_refuses_what_rfc8785_refuses(value: Any) -> None:
    with pytest.raises(ValueError) as reference:  # CanonicalizationError, or UnicodeEncodeError for a surrogate name
        canonical(value)
    with pytest.raises(ValueError) as ours:
        encode_value(value)
    assert type(ours.value) is type(reference.value)


def test_prepared_receipt_seals_like_seal() -> None:
    rng = random.Random(7)
    signer = Signer.generate()
    for height in range(200):
        evidence = {_text(rng) or "k": _value(rng) for _ in range(rng.randrange(1, 4))}
        receipt = make_receipt(evidence=evidence, stratum={"lang": _text(rng)}, intent=rng.choice([None, _text(rng)]))
        prev = "sha256:" + f"{height:064x}"
        expected = seal(receipt, ledger_height=height, prev_hash=prev, signer=signer)
        prepared = PreparedReceipt(receipt)
        got = prepared.seal(height, prev, signer)
        assert got.receipt == expected
        assert got.encoded == canonical(expected)
        assert got.entry_hash == entry_hash(expected)
        assert verify_receipt(got.receipt, {signer.key_id: signer.public_key}) == []
        again = prepared.seal(height + 1, got.entry_hash, signer)  # a re-seal on another head
        assert again.encoded == canonical(seal(receipt, ledger_height=height + 1, prev_hash=got.entry_hash,
                                                signer=signer))


def test_prepared_receipt_refuses_like_seal() -> None:
    signer = Signer.generate()
    with pytest.raises(TypeError, match=r"\$\.evidence\.s"):
        PreparedReceipt(make_receipt() | {"evidence": {"s": 0.5}})
    with pytest.raises(ValueError, match="receipt_id"):
        PreparedReceipt(make_receipt() | {"receipt_id": "x"})
    with pytest.raises(ValueError, match="unexpected field"):
        PreparedReceipt(make_receipt() | {"extra": 1})
    prepared = PreparedReceipt(make_receipt())
    with pytest.raises(ValueError, match="prev_hash"):
        prepared.seal(0, "sha256:abc", signer)
    with pytest.raises(ValueError, match="ledger_height"):
        prepared.seal(-1, "sha256:" + "0" * 64, signer)
