"""seal() (proxy/receipts/receipt.py) and PreparedReceipt (proxy/receipts/sealing.py): the same bytes,
the same refusals, and the C encoder's fast path.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from proxy.primitives.canonical import MAX_SAFE_INTEGER, canonical, json_hash
from proxy.receipts.receipt import (
    CHAIN_FIELDS,
    GENESIS_PREV_HASH,
    new_receipt,
    schema_problems,
    seal,
    utc_timestamp,
)
from proxy.receipts.sealing import PreparedReceipt, encode_value
from proxy.receipts.signing import Signer


def _unsealed(**overrides) -> dict:
    fields = dict(request_id="req_1", actor="app:tests", intent="general", inputs_hash=json_hash({"m": 1}),
                  outputs_hash=json_hash({"c": 2}), policy_id="safety", guardrail_action="allow",
                  evidence={"scores": {"toxicity": "0.01"}}, model="m", provider="p", stratum={"lang": "en"})
    return {**new_receipt(**fields), **overrides}


def test_utc_timestamp_converts_aware_times_and_takes_naive_ones_as_utc() -> None:
    kathmandu = timezone(timedelta(hours=5, minutes=45))
    assert utc_timestamp(datetime(2026, 5, 1, 17, 45, 0, 123999, tzinfo=kathmandu)) == "2026-05-01T12:00:00.123Z"
    assert utc_timestamp(datetime(2026, 5, 1, 12, 0, 0, 5000)) == "2026-05-01T12:00:00.005Z"


def test_schema_problems_names_the_field_of_every_problem_in_order() -> None:
    """Declared fields in RECEIPT_FIELDS order, then unexpected ones, then the float path ("$": the receipt)."""
    sealed = seal(_unsealed(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=Signer.generate())
    assert schema_problems(sealed) == []
    assert [field for field, _ in schema_problems("not a receipt")] == ["$"]
    broken = {k: v for k, v in sealed.items() if k not in ("actor", "model")}
    broken.update(ts="yesterday", extra=1, evidence={"score": 0.5})
    assert [field for field, _ in schema_problems(broken)] == ["ts", "actor", "model", "extra", "$"]
    assert [field for field, _ in schema_problems(broken, check_floats=False)] == ["ts", "actor", "model", "extra"]
    assert [field for field, _ in schema_problems(sealed, sealed=False)] == list(CHAIN_FIELDS)
    assert schema_problems({k: v for k, v in sealed.items() if k not in CHAIN_FIELDS}, sealed=False) == []
    # the optional "ledger" field: checked only when present, its problem names the value
    assert schema_problems({**sealed, "ledger": "tenant-a.eu_1"}) == []
    assert schema_problems({**sealed, "ledger": "bad name"}) == [
        ("ledger", "must be 1-64 of letters, digits, '_', '.' or '-', got 'bad name'")]


def test_seal_rejects_floats_with_type_error_and_bad_fields_heights_and_hashes_with_value_error() -> None:
    signer = Signer.generate()
    with pytest.raises(TypeError):
        seal(_unsealed(evidence={"score": 0.5}), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    with pytest.raises(ValueError, match="receipt_id"):
        seal(_unsealed(receipt_id="rcpt_x"), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    for height in (-1, "1", True, 1.0):
        with pytest.raises(ValueError, match="ledger_height"):
            seal(_unsealed(), ledger_height=height, prev_hash=GENESIS_PREV_HASH, signer=signer)
    for prev_hash in ("sha256:" + "A" * 64, "sha256:abc", None, b"sha256:" + b"0" * 64):
        with pytest.raises(ValueError, match="prev_hash"):
            seal(_unsealed(), ledger_height=1, prev_hash=prev_hash, signer=signer)


def test_prepared_receipts_encode_canonically_whatever_the_key_order() -> None:
    """RFC 8785 §3.2.3 orders members by UTF-16 code units, not by insertion: any permutation gives seal()'s bytes.

    Two receipts: one the C encoder can write (null members, lists, safe integers) and one it cannot
    (object names at and above U+E000, where code-point order differs from UTF-16 order)."""
    signer = Signer.generate()
    plain = _unsealed(evidence={"detectors": ["safety", "pii", None, True, 2**53 - 1, -(2**53 - 1)], "n": {"": 0}},
                      intent=None, model=None, policy_id=None)
    special = _unsealed(stratum={"é": "1", "z": "2", "\U0001f600": "3", "ｚ": "4"})
    for receipt in (plain, special):
        names = list(receipt)
        random.SystemRandom().shuffle(names)  # a fresh order each run: never one an earlier call has seen
        shuffled = {name: receipt[name] for name in names}
        sealed = PreparedReceipt(shuffled).seal(3, "sha256:" + "ab" * 32, signer)
        expected = canonical(seal(receipt, ledger_height=3, prev_hash="sha256:" + "ab" * 32, signer=signer))
        assert sealed.encoded == expected


def test_prepared_receipts_refuse_what_seal_refuses_with_the_same_error() -> None:
    """An object key that is not a string is not JSON: ValueError from both paths (RFC 8785 via rfc8785)."""
    receipt = _unsealed(evidence={1: "a"})
    with pytest.raises(ValueError, match="keys must be strings"):
        seal(receipt, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=Signer.generate())
    with pytest.raises(ValueError, match="keys must be strings"):
        PreparedReceipt(receipt)


def test_encode_value_gives_rfc8785_bytes_for_any_json_value() -> None:
    """The fast path (C encoder) and the fallback (rfc8785) must agree: floats, unsafe integers, empty and
    non-BMP object names, tuples, top-level scalars."""
    values = [1.5, 1e-7, 1e21, [2**60], [1.5, "a"], (1, "a", None, True), {"": 1}, {"": [2**60]},
              {"\ue000": 1, "\U0001f600": 2, "a": [0.5]}, "\u2028 \x7f", 2**53 - 1, -(2**53 - 1), None, False]
    for value in values:
        assert encode_value(value) == canonical(value), value


@pytest.mark.parametrize("field", ["receipt_id", "inputs_hash", "outputs_hash", "key_id", "prev_hash", "ed25519_sig"])
def test_pattern_fields_must_match_whole_and_be_strings(field) -> None:
    """A trailing newline, a prefix of the value, or a non-string fails the field's pattern check."""
    sealed = seal(_unsealed(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=Signer.generate())
    value = sealed[field]
    for bad in (value + "\n", value[:-1], "x" + value, None, 7):
        assert [f for f, _ in schema_problems({**sealed, field: bad}, check_floats=False)] == [field], (field, bad)


def test_prepared_receipts_refuse_bad_heights_and_prev_hashes_as_seal_does() -> None:
    """PreparedReceipt.seal checks its arguments like seal(): ValueError naming the argument, never TypeError."""
    prepared, signer = PreparedReceipt(_unsealed()), Signer.generate()
    for height in (-1, True, False, "1", 1.0, None):
        with pytest.raises(ValueError, match="^ledger_height must be an integer >= 0"):
            prepared.seal(height, GENESIS_PREV_HASH, signer)
    for prev_hash in ("sha256:abc", "sha256:" + "A" * 64, GENESIS_PREV_HASH + "\n0", None, 5, b"sha256:" + b"0" * 64):
        with pytest.raises(ValueError, match="^prev_hash must be sha256: "):
            prepared.seal(1, prev_hash, signer)
    sealed = prepared.seal(0, GENESIS_PREV_HASH, signer)
    assert sealed.encoded == canonical(seal(prepared.body, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer))


@pytest.mark.parametrize("suffix", ["x", "\n", "0"])
def test_seal_and_prepared_seal_refuse_a_prev_hash_with_anything_after_the_hash(suffix) -> None:
    """prev_hash must be exactly sha256: + 64 hex: a longer string (even one trailing newline) is a
    ValueError, never a receipt that then fails its own schema check."""
    signer = Signer.generate()
    with pytest.raises(ValueError, match="prev_hash"):
        seal(_unsealed(), ledger_height=1, prev_hash=GENESIS_PREV_HASH + suffix, signer=signer)
    with pytest.raises(ValueError, match="^prev_hash must be sha256: "):
        PreparedReceipt(_unsealed()).seal(1, GENESIS_PREV_HASH + suffix, signer)


@pytest.mark.parametrize("overrides", [
    {"actor": "app\ud800"},  # a top-level string member (the str fast path)
    {"intent": "\udfff"},  # a nullable string member
    {"evidence": {"note": "x\ud83d"}},  # inside an object member (the C encoder's path)
    {"stratum": {"k": ["\ud800"]}},
], ids=["actor", "intent", "evidence", "stratum"])
def test_prepared_receipts_refuse_a_lone_surrogate_as_seal_does(overrides) -> None:
    """A lone surrogate is not Unicode text, so RFC 8785 cannot encode it: PreparedReceipt raises the same
    CanonicalizationError as seal() (the C encoder's UnicodeEncodeError is handed to rfc8785), never a
    receipt with the member silently encoded as something else."""
    from proxy.primitives.canonical import CanonicalizationError

    receipt = _unsealed(**overrides)
    with pytest.raises(CanonicalizationError, match="^input contains non-UTF-8 codepoints$"):
        seal(receipt, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=Signer.generate())
    with pytest.raises(CanonicalizationError, match="^input contains non-UTF-8 codepoints$"):
        PreparedReceipt(receipt)


def test_prepared_receipts_refuse_floats_and_unsafe_integers_with_seal_s_type_error() -> None:
    """A body the C encoder cannot write (a float, an integer beyond ±(2**53 − 1)) is still walked for floats:
    TypeError naming the path, the same message seal() gives, not bytes of a number no verifier reads alike."""
    signer = Signer.generate()
    cases = {
        "float at $.evidence.s (0.5): signed content must use decimal strings": {"evidence": {"s": 0.5}},
        "integer at $.stratum.n[0] exceeds ±(2**53-1): JSON readers see a float": {"stratum": {"n": [2**53]}},
    }
    for message, overrides in cases.items():
        receipt = _unsealed(**overrides)
        with pytest.raises(TypeError) as from_seal:
            seal(receipt, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
        with pytest.raises(TypeError) as from_prepared:
            PreparedReceipt(receipt)
        assert str(from_seal.value) == str(from_prepared.value) == message


def test_prepared_receipts_check_the_schema_like_seal() -> None:
    """Every schema problem of the body, in seal()'s order and words: a malformed field, a missing one and an
    unexpected one; chain fields of an already sealed receipt are dropped, not reported."""
    signer = Signer.generate()
    receipt = _unsealed(receipt_id="rcpt_x", extra=1)
    del receipt["actor"]
    expected = "receipt_id: must be rcpt_ + 32 lowercase hex, got 'rcpt_x'; actor: missing; extra: unexpected field"
    with pytest.raises(ValueError) as from_seal:
        seal(receipt, ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    with pytest.raises(ValueError) as from_prepared:
        PreparedReceipt(receipt)
    assert str(from_seal.value) == str(from_prepared.value) == expected
    sealed = seal(_unsealed(), ledger_height=4, prev_hash=GENESIS_PREV_HASH, signer=signer)
    prepared = PreparedReceipt(sealed)
    assert prepared.body == {k: v for k, v in sealed.items() if k not in CHAIN_FIELDS}
    assert prepared.receipt_id == sealed["receipt_id"]
    assert prepared.seal(4, GENESIS_PREV_HASH, signer).receipt == sealed


_PLAIN_VALUES = ["", "é \u2028 \x7f \"\\", "\U0001f600", True, False, None, 0, -1, 7, MAX_SAFE_INTEGER,
                 -MAX_SAFE_INTEGER, [], (), [1, "a", None, True, [False]], (1, "a"), {}, {"": 1}, {"X": [None]},
                 {"é": {"\ud7ff": [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER]}, "b": "\U0001f600 in a value"}]


class _Text(str):
    pass


def test_the_c_encoder_fast_path_takes_exactly_the_values_the_module_documents() -> None:
    """sealing.py's rule for the C encoder: str, bool, None, integers within ±(2**53 − 1) and lists, tuples and
    dicts of them whose object names have no character at or above U+E000 (exact types: a str subclass may
    print itself otherwise). Anything else goes to rfc8785. Both give RFC 8785 bytes; the rule decides which
    values the cheap path covers, so its answer is pinned here."""
    from proxy.receipts.sealing import _plain

    for value in _PLAIN_VALUES:
        assert _plain(value) is True, value
    not_plain = [MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**60, 1.5, [1, 0.5], (1, 2**53), {"a": [0.5]},
                 {"\ue000": 1}, {"a\ue000b": 1}, {"\uffff": 1}, {"\U0001f600": 1}, {"ok": 1, "\U0001f600": 1},
                 {1: "a"}, _Text("a"), [_Text("a")], {"a": {_Text("b"): 1}}, b"bytes", {1, 2}]
    for value in not_plain:
        assert _plain(value) is False, value


def test_the_fast_member_encoder_writes_every_plain_value_as_rfc8785() -> None:
    """_encode_plain (PreparedReceipt's encoder for a body the C encoder can write) gives encode_value's bytes,
    which are rfc8785's, for every value _plain accepts, booleans included; a lone surrogate (plain by type,
    not Unicode text) raises rfc8785's CanonicalizationError."""
    from proxy.primitives.canonical import CanonicalizationError
    from proxy.receipts.sealing import _encode_plain

    for value in _PLAIN_VALUES:
        assert _encode_plain(value) == encode_value(value) == canonical(value), value
    assert (_encode_plain(True), _encode_plain(False), _encode_plain(None)) == (b"true", b"false", b"null")
    for value in ("a\ud800", ["\udfff"], {"k": "\ud83d"}):
        with pytest.raises(CanonicalizationError, match="^input contains non-UTF-8 codepoints$"):
            _encode_plain(value)
