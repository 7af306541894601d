"""The offline verifier (proxy/receipts/verify.py) and the key files it trusts (proxy/receipts/signing.py).

docs/receipts.md "Trust receipts and verification": each failure names the height, the receipt and
the check (``schema``, ``unknown_key``, ``signature``, ``key_window``, ``genesis``, ``prev_hash``,
``height``, ``duplicate``; ``head`` for a store). Every check has a test here in which a receipt,
run or store fails exactly that check, and the failure carries the height, receipt_id and detail
the verifier documents. Real parts only: real Ed25519 keys, real SQLite files and the session's
real Redis (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import redis.asyncio as aioredis

from proxy.primitives.canonical import canonical, sha256_ref
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, open_store
from proxy.receipts.receipt import GENESIS_PREV_HASH, entry_hash, seal
from proxy.receipts.signing import (
    KeyFileError,
    PublicKeys,
    Signer,
    b64url_decode,
    b64url_encode,
    load_or_create_signer,
    load_public_keys,
    public_key_entry,
)
from proxy.receipts.verify import CHECKS, ChainVerifier, verify_chain, verify_receipt, verify_store
from proxy.storage.base import LedgerStore
from tests.support.ledger import keys, make_receipt, signer, sqlite_store, sqlite_url  # noqa: F401  (fixtures)
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url, redis_url


def _chain(signer: Signer, n: int, start: int = 0, prev: str = GENESIS_PREV_HASH) -> list[dict[str, Any]]:
    """``n`` valid receipts at heights ``start``.., the first linked to ``prev``."""
    out: list[dict[str, Any]] = []
    for height in range(start, start + n):
        out.append(seal(make_receipt(), ledger_height=height, prev_hash=prev, signer=signer))
        prev = entry_hash(out[-1])
    return out


def _resealed(receipt: dict[str, Any], signer: Signer, **fields: Any) -> dict[str, Any]:
    """``receipt`` with ``fields`` changed and signed again (a validly signed receipt)."""
    body = {**receipt, **fields}
    return seal(body, ledger_height=body["ledger_height"], prev_hash=body["prev_hash"], signer=signer)


def _checks(failures: list[Failure]) -> list[tuple[int | None, str | None, str]]:
    return [(f.height, f.receipt_id, f.check) for f in failures]


# ---------------------------------------------------------------- Failure


def test_failure_names_its_height_and_receipt() -> None:
    assert str(Failure(4, "rcpt_ab", "prev_hash", "expected x got y")) == "height 4 (rcpt_ab): prev_hash: expected x got y"
    assert str(Failure(0, None, "genesis", "d")) == "height 0: genesis: d"
    assert str(Failure(7, "", "height", "d")) == "height 7: height: d"  # an empty id is not printed


def test_failure_without_a_height_says_height_unknown() -> None:
    assert str(Failure(None, None, "schema", "$: receipt must be a JSON object")) == (
        "height ?: schema: $: receipt must be a JSON object")
    assert str(Failure(None, "rcpt_x", "schema", "d")) == "height ? (rcpt_x): schema: d"


def test_failure_where_replaces_the_height() -> None:
    failure = Failure(41, "rcpt_ab", "inclusion", "root differs", where="inclusion proof (leaf 41, tree size 256)")
    assert str(failure) == "inclusion proof (leaf 41, tree size 256): inclusion: root differs"
    assert str(Failure(None, None, "checkpoint", "bad", where="checkpoint (tree size 42)")) == (
        "checkpoint (tree size 42): checkpoint: bad")


def test_check_names_are_the_documented_ones() -> None:
    assert CHECKS == ("schema", "unknown_key", "signature", "genesis", "prev_hash", "height", "duplicate", "head",
                      "key_window")


# ---------------------------------------------------------------- verify_receipt: one receipt on its own


def test_valid_receipts_have_no_failures(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    assert verify_receipt(chain[0], keys) == []
    assert verify_receipt(chain[2], keys, previous=chain[1]) == []
    assert verify_receipt(json.loads(json.dumps(chain[2])), keys, previous=json.loads(json.dumps(chain[1]))) == []


def test_not_an_object_is_one_schema_failure_without_height(keys: dict[str, bytes]) -> None:
    for value in ("rcpt", [1, 2], None, 3):
        assert verify_receipt(value, keys) == [Failure(None, None, "schema", "$: receipt must be a JSON object")]


def test_malformed_field_is_a_schema_failure_naming_field_height_and_receipt(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=5, prev_hash=sha256_ref(b"p"), signer=signer)
    bad = {**receipt, "actor": ""}
    fails = verify_receipt(bad, keys)
    assert _checks(fails) == [(5, receipt["receipt_id"], "schema"), (5, receipt["receipt_id"], "signature")]
    assert fails[0].detail == "actor: must be a non-empty string, got ''"


def test_height_zero_is_reported_as_height_zero(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    assert _checks(verify_receipt({**receipt, "extra": "1"}, keys))[0] == (0, receipt["receipt_id"], "schema")


@pytest.mark.parametrize("height", [True, -1, "3", None])
def test_unusable_height_is_reported_as_unknown(height: Any, signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=3, prev_hash=sha256_ref(b"p"), signer=signer)
    fails = verify_receipt({**receipt, "ledger_height": height}, keys)
    assert fails and all(f.height is None for f in fails)
    assert [f.check for f in fails] == ["schema", "signature"]


def test_non_string_receipt_id_is_reported_as_unknown(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=3, prev_hash=sha256_ref(b"p"), signer=signer)
    fails = verify_receipt({**receipt, "receipt_id": 12}, keys)
    assert [(f.height, f.receipt_id, f.check) for f in fails] == [(3, None, "schema"), (3, None, "signature")]


def test_untrusted_key_id_is_unknown_key_and_no_signature_check(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=2, prev_hash=sha256_ref(b"p"), signer=signer)
    other = Signer.generate()
    assert verify_receipt(receipt, {other.key_id: other.public_key}) == [
        Failure(2, receipt["receipt_id"], "unknown_key", f"key_id {signer.key_id!r} is not a trusted key")]
    assert verify_receipt(receipt, {}) == [
        Failure(2, receipt["receipt_id"], "unknown_key", f"key_id {signer.key_id!r} is not a trusted key")]
    fails = verify_receipt({**receipt, "key_id": 17}, keys)
    assert [f.check for f in fails] == ["schema", "unknown_key"]
    assert fails[1] == Failure(2, receipt["receipt_id"], "unknown_key", "key_id 17 is not a trusted key")


def test_bad_signature_is_a_signature_failure(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=2, prev_hash=sha256_ref(b"p"), signer=signer)
    forged = {**receipt, "ed25519_sig": seal(make_receipt(), ledger_height=2, prev_hash=sha256_ref(b"p"),
                                             signer=signer)["ed25519_sig"]}
    assert verify_receipt(forged, keys) == [
        Failure(2, receipt["receipt_id"], "signature", f"Ed25519 signature does not verify with {signer.key_id}")]
    # The right key id over other key material: the signature check, not unknown_key.
    other = Signer.generate()
    assert [f.check for f in verify_receipt(receipt, {signer.key_id: other.public_key})] == ["signature"]


def test_missing_or_non_string_signature_is_a_signature_failure(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=2, prev_hash=sha256_ref(b"p"), signer=signer)
    for sig in (None, 12345):
        assert [f.check for f in verify_receipt({**receipt, "ed25519_sig": sig}, keys)] == ["schema", "signature"]
    missing = {k: v for k, v in receipt.items() if k != "ed25519_sig"}
    assert [f.check for f in verify_receipt(missing, keys)] == ["schema", "signature"]


def test_receipt_that_cannot_be_canonicalized_fails_signature_without_raising(
    signer: Signer, keys: dict[str, bytes]
) -> None:
    receipt = seal(make_receipt(), ledger_height=2, prev_hash=sha256_ref(b"p"), signer=signer)
    for evidence in ({1: "non-string key"}, {"lone": "\ud800"}, {"set": {1, 2}}):
        fails = verify_receipt({**receipt, "evidence": evidence}, keys)
        assert "signature" in [f.check for f in fails]
        assert all(f.height == 2 for f in fails)


def test_height_zero_must_carry_the_genesis_prev_hash(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=0, prev_hash=sha256_ref(b"x"), signer=signer)
    assert verify_receipt(receipt, keys) == [Failure(
        0, receipt["receipt_id"], "genesis",
        f"height 0 must carry prev_hash {GENESIS_PREV_HASH}, got {sha256_ref(b'x')}")]


def test_only_height_zero_may_carry_the_genesis_prev_hash(signer: Signer, keys: dict[str, bytes]) -> None:
    for height in (1, 9):
        receipt = seal(make_receipt(), ledger_height=height, prev_hash=GENESIS_PREV_HASH, signer=signer)
        assert verify_receipt(receipt, keys) == [Failure(
            height, receipt["receipt_id"], "genesis", "only height 0 may carry the genesis prev_hash")]


def test_genesis_is_not_judged_without_a_height(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    for height in (-1, None, True):
        for prev in (GENESIS_PREV_HASH, sha256_ref(b"x")):
            checks = [f.check for f in verify_receipt({**receipt, "ledger_height": height, "prev_hash": prev}, keys)]
            assert "genesis" not in checks and "schema" in checks


# ---------------------------------------------------------------- key_window


def _windowed(signer: Signer, not_after: str | None = None, height: int | None = None,
              not_before: str | None = None) -> PublicKeys:
    return PublicKeys({signer.key_id: signer.public_key},
                      windows={signer.key_id: (not_before, not_after)} if (not_before or not_after) else {},
                      heights={signer.key_id: height} if height is not None else {})


def test_receipt_at_or_after_not_after_is_a_key_window_failure(signer: Signer) -> None:
    keys = _windowed(signer, not_after="2026-05-01T00:00:00.000Z")
    for ts in ("2026-05-01T00:00:00.000Z", "2026-05-01T00:00:00.001Z", "2027-01-01T00:00:00.000Z"):
        receipt = seal(make_receipt(ts=ts), ledger_height=4, prev_hash=sha256_ref(b"p"), signer=signer)
        assert verify_receipt(receipt, keys) == [Failure(
            4, receipt["receipt_id"], "key_window",
            f"ts {ts} is not before {signer.key_id}'s not_after 2026-05-01T00:00:00.000Z (key retired)")]
    before = seal(make_receipt(ts="2026-04-30T23:59:59.999Z"), ledger_height=4, prev_hash=sha256_ref(b"p"),
                  signer=signer)
    assert verify_receipt(before, keys) == []


def test_not_before_time_is_not_checked(signer: Signer) -> None:
    """A spooled receipt keeps its request's ts and may be sealed after the key was made."""
    keys = _windowed(signer, not_before="2026-05-01T00:00:00.000Z")
    receipt = seal(make_receipt(ts="2026-01-01T00:00:00.000Z"), ledger_height=4, prev_hash=sha256_ref(b"p"),
                   signer=signer)
    assert verify_receipt(receipt, keys) == []


def test_height_below_not_before_height_is_a_key_window_failure(signer: Signer) -> None:
    keys = _windowed(signer, height=5)
    below = seal(make_receipt(), ledger_height=4, prev_hash=sha256_ref(b"p"), signer=signer)
    assert verify_receipt(below, keys) == [Failure(
        4, below["receipt_id"], "key_window",
        f"ledger_height 4 is below {signer.key_id}'s not_before_height 5: the key did "
        "not exist when that height was sealed (history rewritten after a rotation?)")]
    for height in (5, 6):
        at = seal(make_receipt(), ledger_height=height, prev_hash=sha256_ref(b"p"), signer=signer)
        assert verify_receipt(at, keys) == []
    genesis = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
    assert [f.check for f in verify_receipt(genesis, _windowed(signer, height=1))] == ["key_window"]
    assert verify_receipt(genesis, _windowed(signer, height=0)) == []


def test_both_key_window_bounds_are_reported(signer: Signer) -> None:
    keys = _windowed(signer, not_after="2026-05-01T00:00:00.000Z", height=10)
    receipt = seal(make_receipt(ts="2026-06-01T00:00:00.000Z"), ledger_height=3, prev_hash=sha256_ref(b"p"),
                   signer=signer)
    fails = verify_receipt(receipt, keys)
    assert [(f.height, f.check) for f in fails] == [(3, "key_window"), (3, "key_window")]
    assert "not_after" in fails[0].detail and "not_before_height 10" in fails[1].detail


def test_key_window_belongs_to_the_signing_key_only(signer: Signer) -> None:
    other = Signer.generate()
    keys = PublicKeys({signer.key_id: signer.public_key, other.key_id: other.public_key},
                      windows={other.key_id: (None, "2026-01-01T00:00:00.000Z")}, heights={other.key_id: 100})
    receipt = seal(make_receipt(ts="2026-06-01T00:00:00.000Z"), ledger_height=3, prev_hash=sha256_ref(b"p"),
                   signer=signer)
    assert verify_receipt(receipt, keys) == []


def test_plain_dict_of_keys_has_no_windows(signer: Signer, keys: dict[str, bytes]) -> None:
    receipt = seal(make_receipt(ts="2099-01-01T00:00:00.000Z"), ledger_height=0, prev_hash=GENESIS_PREV_HASH,
                   signer=signer)
    assert verify_receipt(receipt, dict(keys)) == []


def test_key_window_skips_malformed_ts_and_height_without_raising(signer: Signer) -> None:
    keys = _windowed(signer, not_after="2026-05-01T00:00:00.000Z", height=5)
    receipt = seal(make_receipt(ts="2026-06-01T00:00:00.000Z"), ledger_height=2, prev_hash=sha256_ref(b"p"),
                   signer=signer)
    fails = verify_receipt({**receipt, "ts": 1780000000000, "ledger_height": None}, keys)
    assert "key_window" not in [f.check for f in fails] and "schema" in [f.check for f in fails]


# ---------------------------------------------------------------- verify_receipt with previous: the link


def test_link_to_the_previous_receipt_is_checked(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    wrong = _resealed(chain[2], signer, prev_hash=entry_hash(chain[0]))
    assert verify_receipt(wrong, keys, previous=chain[1]) == [Failure(
        2, wrong["receipt_id"], "prev_hash", f"expected {entry_hash(chain[1])} got {entry_hash(chain[0])}")]


def test_previous_that_cannot_be_hashed_expects_nothing(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    broken = {**chain[1], "evidence": {1: "x"}}
    assert verify_receipt(chain[2], keys, previous=broken) == [Failure(
        2, chain[2]["receipt_id"], "prev_hash", f"expected None got {entry_hash(chain[1])}")]


def test_same_height_as_previous_is_a_fork(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    rival = seal(make_receipt(), ledger_height=2, prev_hash=entry_hash(chain[1]), signer=signer)
    assert verify_receipt(rival, keys, previous=chain[2]) == [Failure(
        2, rival["receipt_id"], "duplicate", f"fork: {chain[2]['receipt_id']} is also at height 2")]


def test_lower_height_than_previous_is_out_of_order(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    assert verify_receipt(chain[1], keys, previous=chain[3]) == [Failure(
        1, chain[1]["receipt_id"], "height", "out of order: height 1 comes after 3")]


def test_gap_after_previous_names_the_missing_heights(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 7)
    assert verify_receipt(chain[3], keys, previous=chain[1]) == [Failure(
        3, chain[3]["receipt_id"], "height", "gap: height 2 missing after 1")]
    assert verify_receipt(chain[6], keys, previous=chain[1]) == [Failure(
        6, chain[6]["receipt_id"], "height", "gap: height 2..5 missing after 1")]
    assert verify_receipt(chain[4], keys, previous=chain[1]) == [Failure(
        4, chain[4]["receipt_id"], "height", "gap: height 2..3 missing after 1")]


def test_same_receipt_id_as_previous_is_a_duplicate(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    again = _resealed(chain[2], signer, receipt_id=chain[1]["receipt_id"])
    assert verify_receipt(again, keys, previous=chain[1]) == [Failure(
        2, chain[1]["receipt_id"], "duplicate", "same receipt_id as the previous receipt")]


def test_link_is_not_judged_without_usable_heights_or_ids(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    no_height = {**chain[2], "ledger_height": None, "prev_hash": sha256_ref(b"elsewhere")}
    assert [f.check for f in verify_receipt(no_height, keys, previous=chain[1])] == ["schema", "signature"]
    assert verify_receipt(chain[2], keys, previous={**chain[1], "ledger_height": "1"}) == []
    # Two receipts without a usable receipt_id are not duplicates of each other.
    assert [f.check for f in verify_receipt({**chain[2], "receipt_id": 5}, keys,
                                            previous={**chain[1], "receipt_id": 5})] == ["schema", "signature",
                                                                                          "prev_hash"]


# ---------------------------------------------------------------- ChainVerifier and verify_chain


def test_verify_chain_checks_the_link_into_the_run(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 6)
    assert verify_chain(chain[3:], keys, previous=chain[2]) == []
    assert _checks(verify_chain(chain[3:], keys, previous=chain[1])) == [(3, chain[3]["receipt_id"], "height")]
    wrong = _chain(signer, 2, start=3, prev=entry_hash(chain[1]))
    assert _checks(verify_chain(wrong, keys, previous=chain[2])) == [(3, wrong[0]["receipt_id"], "prev_hash")]


@pytest.mark.parametrize("wrong", ["arbitrary", "null", "empty"])
def test_chain_link_to_any_other_hash_is_a_prev_hash_failure(wrong: str, signer: Signer, keys: dict[str, bytes]) -> None:
    """Only the previous receipt's entry hash links: not an arbitrary hash, nor that of JSON null or of nothing."""
    bogus = {"arbitrary": "sha256:" + "ab" * 32, "null": sha256_ref(canonical(None)), "empty": sha256_ref(b"")}[wrong]
    chain = _chain(signer, 3)
    forged = _resealed(chain[2], signer, prev_hash=bogus)
    expected = [Failure(2, forged["receipt_id"], "prev_hash", f"expected {entry_hash(chain[1])} got {bogus}")]
    assert verify_chain([chain[0], chain[1], forged], keys) == expected
    assert verify_chain([forged], keys, previous=chain[1]) == expected
    assert verify_receipt(forged, keys, previous=chain[1]) == expected


def test_verify_chain_finds_the_previous_receipt_id_again(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    again = _resealed(chain[3], signer, receipt_id=chain[1]["receipt_id"])
    fails = verify_chain([chain[2], again], keys, previous=chain[1])
    assert fails == [Failure(3, chain[1]["receipt_id"], "duplicate", "receipt_id already seen at height 1")]


def test_verify_chain_consumes_any_iterable_once(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    assert verify_chain((r for r in chain), keys) == []
    assert verify_chain([], keys) == []


def test_chain_verifier_counts_and_accumulates(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    verifier = ChainVerifier(keys)
    assert verifier.feed(chain[0]) == [] and verifier.feed(chain[2]) == [
        Failure(2, chain[2]["receipt_id"], "height", "gap: height 1 missing after 0")]
    assert verifier.feed("junk") == [Failure(None, None, "schema", "$: receipt must be a JSON object")]
    assert verifier.count == 3
    assert [f.check for f in verifier.failures] == ["height", "schema"]
    assert verifier.finish() == [] and len(verifier.failures) == 2


def test_chain_verifier_reports_a_run_starting_at_the_wrong_height(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    verifier = ChainVerifier(keys, first_height=2)
    assert verifier.feed(chain[3]) == [
        Failure(3, chain[3]["receipt_id"], "height", "run should start at height 2, starts at 3")]
    assert verifier.feed(chain[4]) == []  # then links on from where it started
    assert ChainVerifier(keys, first_height=3).feed(chain[3]) == []
    assert ChainVerifier(keys).feed(chain[3]) == []  # no first height: any start
    zero = ChainVerifier(keys, first_height=0)
    assert [f.check for f in zero.feed(chain[1])] == ["height"]


def test_chain_verifier_remembers_every_receipt_id(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    again = _resealed(chain[4], signer, receipt_id=chain[0]["receipt_id"])
    assert _checks(verify_chain(chain[:4] + [again], keys)) == [(4, chain[0]["receipt_id"], "duplicate")]
    assert verify_chain(chain[:4] + [again], keys)[0].detail == "receipt_id already seen at height 0"
    no_id = [{**r, "receipt_id": None} for r in chain[:2]]
    assert "duplicate" not in [f.check for f in verify_chain(no_id, keys)]


def test_chain_verifier_accepts_a_continuation_of_either_side_of_a_fork(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    rival = seal(make_receipt(), ledger_height=1, prev_hash=entry_hash(chain[0]), signer=signer)
    on_rival = _chain(signer, 1, start=2, prev=entry_hash(rival))
    assert _checks(verify_chain([chain[0], chain[1], rival] + on_rival, keys)) == [
        (1, rival["receipt_id"], "duplicate")]
    assert _checks(verify_chain([chain[0], chain[1], rival, chain[2]], keys)) == [
        (1, rival["receipt_id"], "duplicate")]
    unrelated = _chain(signer, 1, start=2, prev=sha256_ref(b"neither"))
    assert _checks(verify_chain([chain[0], chain[1], rival] + unrelated, keys)) == [
        (1, rival["receipt_id"], "duplicate"), (2, unrelated[0]["receipt_id"], "prev_hash")]
    assert verify_chain([chain[0], chain[1], rival] + unrelated, keys)[1].detail == (
        f"expected {entry_hash(chain[1])} got {sha256_ref(b'neither')}")


def test_chain_verifier_keeps_the_highest_receipt_after_one_out_of_order(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 5)
    fails = verify_chain([chain[0], chain[1], chain[3], chain[2], chain[4]], keys)
    assert _checks(fails) == [(3, chain[3]["receipt_id"], "height"), (2, chain[2]["receipt_id"], "height")]
    assert fails[1].detail == "out of order: height 2 comes after 3"


def test_chain_verifier_skips_receipts_without_a_height_for_links(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)
    fails = verify_chain([chain[0], {**chain[1], "ledger_height": "x"}, chain[1], chain[2]], keys)
    assert [(f.height, f.check) for f in fails] == [(None, "schema"), (None, "signature"),
                                                   (1, "duplicate")]
    first_bad = verify_chain([{**chain[0], "ledger_height": None}, chain[1], chain[2]], keys)
    assert [(f.height, f.check) for f in first_bad] == [(None, "schema"), (None, "signature")]


def test_chain_verifier_starts_after_its_previous_receipt(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 4)
    verifier = ChainVerifier(keys, previous=chain[1])
    assert verifier.feed(chain[2]) == [] and verifier.feed(chain[3]) == []
    bad = ChainVerifier(keys, previous=chain[0])
    assert _checks(bad.feed(chain[2])) == [(2, chain[2]["receipt_id"], "height")]
    without_id = ChainVerifier(keys, previous={**chain[1], "receipt_id": 7})
    assert [f.check for f in without_id.feed(chain[2])] == ["prev_hash"]  # its hash changed with its id


def test_finish_reports_heights_missing_before_the_end(signer: Signer, keys: dict[str, bytes]) -> None:
    chain = _chain(signer, 3)

    def finished(end: int | None, receipts: list[dict[str, Any]], first_height: int | None = None) -> list[Failure]:
        verifier = ChainVerifier(keys, first_height=first_height)
        for receipt in receipts:
            verifier.feed(receipt)
        fails = verifier.finish(end)
        assert verifier.failures == fails  # recorded as well as returned
        return fails

    assert finished(3, chain) == [] and finished(None, chain) == [] and finished(2, chain) == []
    assert finished(4, chain) == [Failure(3, None, "height", "missing: height 3 not found")]
    assert finished(6, chain) == [Failure(5, None, "height", "missing: height 3..5 not found")]
    assert finished(2, []) == [Failure(1, None, "height", "missing: height 0..1 not found")]
    assert finished(1, []) == [Failure(0, None, "height", "missing: height 0 not found")]
    assert finished(7, [], first_height=5) == [Failure(6, None, "height", "missing: height 5..6 not found")]
    assert finished(6, [], first_height=5) == [Failure(5, None, "height", "missing: height 5 not found")]
    assert finished(5, [], first_height=5) == [] and finished(0, []) == []
    verifier = ChainVerifier(keys)
    verifier.feed(chain[0])
    assert verifier.finish(3) == verifier.failures == [Failure(2, None, "height", "missing: height 1..2 not found")]


# ---------------------------------------------------------------- verify_store


@pytest.fixture
async def redis_store() -> AsyncIterator[LedgerStore]:
    url = redis_namespace_url("verify")
    opened = open_store(url)
    try:
        yield opened
    finally:
        await opened.close()
        delete_redis_namespace(url)


async def test_verify_store_reads_every_page_of_a_range(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(7)])
    assert await verify_store(sqlite_store, keys) == (7, [])
    assert await verify_store(sqlite_store, keys, page=1) == (7, [])
    assert await verify_store(sqlite_store, keys, page=3) == (7, [])
    assert await verify_store(sqlite_store, keys, start=2, end=5, page=2) == (3, [])
    assert await verify_store(sqlite_store, keys, start=1, page=4) == (6, [])
    assert await verify_store(sqlite_store, keys, end=100) == (7, [])
    assert await verify_store(sqlite_store, keys, start=6) == (1, [])
    assert await verify_store(sqlite_store, keys, start=7) == (0, [])
    assert await verify_store(sqlite_store, keys, start=3, end=3) == (0, [])


async def test_verify_store_checks_the_ledger_each_receipt_names(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """With ``ledger`` given, a receipt naming another ledger fails ``ledger``; in ``default`` a receipt
    without the field passes (it predates ledgers), in a named ledger it does not. Without ``ledger``
    the field is not compared."""
    sealed = await Ledger(sqlite_store, signer).append(
        [make_receipt(), {**make_receipt(), "ledger": "eu"}, {**make_receipt(), "ledger": "default"}])
    ids = [r["receipt_id"] for r in sealed]
    assert await verify_store(sqlite_store, keys) == (3, [])
    count, failures = await verify_store(sqlite_store, keys, ledger="default")
    assert count == 3
    assert [(f.height, f.receipt_id, f.check, f.detail) for f in failures] == [
        (1, ids[1], "ledger", "receipt names ledger 'eu' but is stored in ledger 'default'")]
    count, failures = await verify_store(sqlite_store, keys, ledger="eu")
    assert [(f.height, f.receipt_id, f.check, f.detail) for f in failures] == [
        (0, ids[0], "ledger", "receipt names ledger None but is stored in ledger 'eu'"),
        (2, ids[2], "ledger", "receipt names ledger 'default' but is stored in ledger 'eu'")]


async def test_verify_store_of_an_empty_store(sqlite_store: LedgerStore, keys: dict[str, bytes]) -> None:
    assert await verify_store(sqlite_store, keys) == (0, [])


async def test_verify_store_refuses_bad_bounds(sqlite_store: LedgerStore, keys: dict[str, bytes]) -> None:
    for kwargs in ({"start": -1}, {"page": 0}):
        with pytest.raises(ValueError):
            await verify_store(sqlite_store, keys, **kwargs)
    assert await verify_store(sqlite_store, keys, start=0, page=1) == (0, [])


def _sqlite(tmp_path: Path, statement: str, *args: Any) -> None:
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute(statement, args)


async def test_verify_store_checks_the_link_into_the_range(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    sealed = await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(5)])
    forged = {**sealed[2], "actor": "mallory"}
    _sqlite(tmp_path, "UPDATE receipts SET body = ? WHERE height = 2", json.dumps(forged))
    count, failures = await verify_store(sqlite_store, keys, start=3)
    assert count == 2
    assert failures == [Failure(3, sealed[3]["receipt_id"], "prev_hash",
                                f"expected {entry_hash(forged)} got {entry_hash(sealed[2])}")]
    assert await verify_store(sqlite_store, keys, start=4) == (1, [])
    _sqlite(tmp_path, "UPDATE receipts SET body = ? WHERE height = 0", json.dumps({**sealed[0], "actor": "eve"}))
    count, failures = await verify_store(sqlite_store, keys, start=1, end=2)
    assert (count, _checks(failures)) == (1, [(1, sealed[1]["receipt_id"], "prev_hash")])


async def test_verify_store_reports_a_missing_receipt_before_the_range(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(5)])
    _sqlite(tmp_path, "DELETE FROM receipts WHERE height = 2")
    count, failures = await verify_store(sqlite_store, keys, start=3)
    assert count == 2
    assert failures == [Failure(2, None, "height", "missing: the receipt before the range is not stored")]
    count, failures = await verify_store(sqlite_store, keys)
    assert count == 4 and _checks(failures)[0][::2] == (3, "height")
    # An empty range has nothing to link: no failure even though the receipt before it is gone.
    assert await verify_store(sqlite_store, keys, start=3, end=3) == (0, [])
    _sqlite(tmp_path, "DELETE FROM receipts WHERE height = 0")
    count, failures = await verify_store(sqlite_store, keys, start=1, end=2)
    assert (count, failures) == (1, [Failure(0, None, "height", "missing: the receipt before the range is not stored")])


async def test_verify_store_reports_a_head_that_does_not_name_the_last_receipt(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    sealed = await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(4)])
    bogus = sha256_ref(b"bogus")
    _sqlite(tmp_path, "UPDATE receipts SET entry_hash = ? WHERE height = 3", bogus)
    count, failures = await verify_store(sqlite_store, keys)
    assert count == 4
    assert failures == [Failure(3, sealed[3]["receipt_id"], "head",
                                f"head says {bogus} at 3, last receipt is {entry_hash(sealed[3])} at 3")]
    assert await verify_store(sqlite_store, keys, start=3) == (1, failures)
    assert await verify_store(sqlite_store, keys, end=3) == (3, [])  # the run does not reach the head


async def test_verify_store_reports_receipts_above_the_head(
    redis_store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    sealed = await Ledger(redis_store, signer).append([make_receipt() for _ in range(4)])
    assert await verify_store(redis_store, keys) == (4, [])
    client = aioredis.Redis.from_url(redis_url())
    try:
        await client.hset(redis_store.key("head"), mapping={"height": 2, "entry_hash": entry_hash(sealed[2])})
        count, failures = await verify_store(redis_store, keys)
        assert count == 3
        assert failures == [Failure(3, sealed[3]["receipt_id"], "head", "receipt stored above the head")]
        await client.hset(redis_store.key("head"), mapping={"height": 3, "entry_hash": entry_hash(sealed[2])})
        count, failures = await verify_store(redis_store, keys)
        assert count == 4
        assert failures == [Failure(3, sealed[3]["receipt_id"], "head",
                                    f"head says {entry_hash(sealed[2])} at 3, "
                                    f"last receipt is {entry_hash(sealed[3])} at 3")]
        # The head names a height whose receipt is gone: the run ends below it.
        await client.hset(redis_store.key("head"), mapping={"height": 3, "entry_hash": entry_hash(sealed[3])})
        await client.delete(redis_store.key("r", 3))
        count, failures = await verify_store(redis_store, keys)
        assert count == 3
        assert [(f.height, f.check) for f in failures] == [(3, "height"), (3, "head")]
        assert failures[1].detail == f"head says {entry_hash(sealed[3])} at 3, last receipt is {entry_hash(sealed[2])} at 2"
        # A range holding only that height: the last receipt found is the one before the range.
        count, failures = await verify_store(redis_store, keys, start=3)
        assert count == 0
        assert failures == [
            Failure(3, None, "height", "missing: height 3 not found"),
            Failure(3, sealed[2]["receipt_id"], "head",
                    f"head says {entry_hash(sealed[3])} at 3, last receipt is {entry_hash(sealed[2])} at 2")]
    finally:
        await client.aclose()


async def test_verify_store_does_not_report_appends_made_while_it_reads(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """A receipt above the head it read first is a concurrent append when the head has moved since."""
    ledger = Ledger(sqlite_store, signer)
    await ledger.append([make_receipt() for _ in range(8)])
    stop = asyncio.Event()

    async def writer() -> None:
        while not stop.is_set():
            await ledger.append([make_receipt()])

    task = asyncio.create_task(writer())
    try:
        runs = []
        for _ in range(3):
            runs.append(await verify_store(sqlite_store, keys, page=1))
            await asyncio.sleep(0)
    finally:
        stop.set()
        await task
    final = (await sqlite_store.head()).height + 1
    assert [failures for _, failures in runs] == [[], [], []]
    assert all(count < final for count, _ in runs)  # each run saw receipts appear above the head it read
    assert await verify_store(sqlite_store, keys) == (final, [])


async def test_verify_store_finds_every_failure_kind_of_its_receipts(
    sqlite_store: LedgerStore, signer: Signer, keys: dict[str, bytes], tmp_path: Path
) -> None:
    sealed = await Ledger(sqlite_store, signer).append([make_receipt() for _ in range(6)])
    _sqlite(tmp_path, "UPDATE receipts SET body = ? WHERE height = 1", json.dumps({**sealed[1], "actor": "m"}))
    _sqlite(tmp_path, "UPDATE receipts SET body = ? WHERE height = 4", json.dumps({**sealed[4], "extra": 1}))
    count, failures = await verify_store(sqlite_store, keys)
    assert count == 6
    assert [(f.height, f.check) for f in failures] == [
        (1, "signature"), (2, "prev_hash"), (4, "schema"), (4, "signature"), (5, "prev_hash")]


# ---------------------------------------------------------------- signing: key files the verifier trusts


def _write_0600(path: Path, text: str) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.write(fd, text.encode())
    os.close(fd)


def test_key_file_whose_public_key_is_not_its_private_keys_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "signing.json"
    signer = load_or_create_signer(path)
    doc = json.loads(path.read_text())
    other = Signer.generate()
    _write_0600(path, json.dumps({**doc, "public_key": b64url_encode(other.public_key)}))
    with pytest.raises(KeyFileError, match="public_key does not match private_key"):
        load_or_create_signer(path)
    with pytest.raises(KeyFileError, match="public_key does not match private_key"):
        load_public_keys({**doc, "public_key": b64url_encode(other.public_key)})
    # Without public_key (or key_id) the private key alone decides.
    _write_0600(path, json.dumps({k: v for k, v in doc.items() if k not in ("public_key", "key_id")}))
    assert load_or_create_signer(path).key_id == signer.key_id


def test_key_file_is_indented_json_ending_in_a_newline(tmp_path: Path) -> None:
    path = tmp_path / "signing.json"
    signer = load_or_create_signer(path)
    text = path.read_text()
    doc = {"alg": "Ed25519", "key_id": signer.key_id, "private_key": b64url_encode(signer.seed),
           "public_key": b64url_encode(signer.public_key), "created": signer.created}
    assert text == json.dumps(doc, indent=2) + "\n"
    assert public_key_entry(signer) == {k: doc[k] for k in ("key_id", "alg", "public_key", "created")}


def test_b64url_round_trips_every_length_without_padding() -> None:
    """RFC 4648 §5 without padding: encode then decode is the identity, for every length mod 3."""
    for length in range(0, 70):
        for data in (bytes(range(length)), b"\xff" * length):
            text = b64url_encode(data)
            assert "=" not in text and len(text) == -(-length * 4 // 3)
            assert b64url_decode(text) == data
    # Encodings ending in letters that are not padding keep them.
    assert b64url_encode(b"\x00\x00\x17") == "AAAX" and b64url_decode("AAAX") == b"\x00\x00\x17"
    assert b64url_encode(b"\x5d\x75\xd7") == "XXXX" and b64url_decode("XXXX") == b"\x5d\x75\xd7"


def test_b64url_decode_rejects_non_strings_with_value_error() -> None:
    for value in (None, 5, b"AAAA", ["AAAA"]):
        with pytest.raises(ValueError):
            b64url_decode(value)  # type: ignore[arg-type]
    with pytest.raises(KeyFileError, match="bad public_key"):
        load_public_keys({"alg": "Ed25519", "public_key": 5})


def test_signer_needs_a_32_byte_seed() -> None:
    for seed in ("a" * 32, b"a" * 31, b"a" * 33, None):
        with pytest.raises(ValueError):
            Signer(seed)  # type: ignore[arg-type]
    assert Signer(bytearray(32)).public_key == Signer(bytes(32)).public_key


def test_signer_keeps_its_creation_time_or_stamps_now() -> None:
    assert Signer(bytes(32), created="2026-01-02T03:04:05.678Z").created == "2026-01-02T03:04:05.678Z"
    stamped = Signer(bytes(32)).created
    assert isinstance(stamped, str) and len(stamped) == 24 and stamped.endswith("Z")


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_key_file_is_read_as_json_bytes_in_any_json_encoding(tmp_path: Path, encoding: str) -> None:
    """JSON text may come in UTF-8 (with a BOM an editor added) or UTF-16 (RFC 8259 §8.1; json.loads on bytes)."""
    path = tmp_path / "signing.json"
    signer = load_or_create_signer(path)
    text = path.read_text()
    path.unlink()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, text.encode(encoding))
    os.close(fd)
    again = load_or_create_signer(path)
    assert (again.key_id, again.seed, again.created) == (signer.key_id, signer.seed, signer.created)


def test_key_file_parent_directory_is_created_private(tmp_path: Path) -> None:
    """Parent directories are created 0700: nobody else may list or swap the key file."""
    path = tmp_path / "keys" / "signing.json"
    old = os.umask(0o022)
    try:
        load_or_create_signer(path)
    finally:
        os.umask(old)
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_key_errors_name_the_file_they_come_from(tmp_path: Path) -> None:
    path = tmp_path / "signing.json"
    load_or_create_signer(path)
    doc = json.loads(path.read_text())
    published = tmp_path / "keys.json"
    published.write_text(json.dumps({"keys": [{**doc, "public_key": b64url_encode(Signer.generate().public_key)}]}))
    with pytest.raises(KeyFileError) as info:
        load_public_keys(published)
    assert str(info.value) == f"{published}: public_key does not match private_key"
    with pytest.raises(KeyFileError) as info:
        load_public_keys({"keys": [{**doc, "private_key": "!"}]})
    assert str(info.value).startswith("public keys: bad private_key")


def test_public_entry_without_key_id_is_keyed_by_its_key() -> None:
    signer = Signer.generate()
    entry = {k: v for k, v in public_key_entry(signer).items() if k != "key_id"}
    assert load_public_keys([entry]) == {signer.key_id: signer.public_key}
    assert PublicKeys(a=b"k") == {"a": b"k"} and PublicKeys().windows == {} == PublicKeys().heights


def test_key_entry_validity_window_must_be_millisecond_utc_timestamps() -> None:
    entry = public_key_entry(Signer.generate())
    keys = load_public_keys([{**entry, "not_before": "2026-01-02T03:04:05.678Z", "not_after": None}])
    assert keys.windows == {entry["key_id"]: ("2026-01-02T03:04:05.678Z", None)}
    for bad in ("2026-01-02", "2026-01-02T03:04:05Z", 1767323045, True):
        with pytest.raises(KeyFileError, match="^public keys: not_after must be an RFC 3339 UTC timestamp"):
            load_public_keys([{**entry, "not_after": bad}])


def test_key_entry_not_before_height_is_an_integer_from_zero_to_2_53_minus_1() -> None:
    entry = public_key_entry(Signer.generate())
    for height in (0, 1, 2**53 - 1):
        assert load_public_keys([{**entry, "not_before_height": height}]).heights == {entry["key_id"]: height}
    assert load_public_keys([{**entry, "not_before_height": None}]).heights == {}
    for bad in (-1, 2**53, True, "3", 1.0):
        with pytest.raises(KeyFileError, match="^public keys: not_before_height must be an integer"):
            load_public_keys([{**entry, "not_before_height": bad}])


def test_published_key_document_is_read_as_json_bytes(tmp_path: Path) -> None:
    signer = Signer.generate()
    path = tmp_path / "keys.json"
    path.write_bytes(json.dumps({"keys": [public_key_entry(signer)]}).encode("utf-8-sig"))
    assert load_public_keys(path) == {signer.key_id: signer.public_key}
    assert load_public_keys(str(path)) == {signer.key_id: signer.public_key}


# ---------------------------------------------------------------- surviving mutants (mutation/baseline.md)


def test_the_receipt_before_the_run_is_remembered_only_by_a_non_empty_id(signer: Signer, keys: dict[str, bytes]) -> None:
    """An empty receipt_id on the receipt before the run is no id: a run receipt with an empty id is not its
    duplicate (both fail the schema; inside a run the verifier records whatever string id it meets)."""
    previous, receipt = _chain(signer, 2)
    previous = {**previous, "receipt_id": ""}
    blank = {**_resealed(receipt, signer), "receipt_id": ""}
    verifier = ChainVerifier(keys, previous=previous)
    fails = verifier.feed(blank)
    assert [f.check for f in fails] == ["schema", "signature", "prev_hash"]
    assert all((f.height, f.receipt_id) == (1, "") for f in fails)
    assert "duplicate" not in {f.check for f in verifier.failures}


async def test_verify_store_with_a_head_but_no_receipt_in_its_range_names_no_last_receipt(
    redis_store: LedgerStore, signer: Signer, keys: dict[str, bytes]
) -> None:
    """Every receipt deleted, the head kept: the run finds nothing, so no last receipt, hash or height."""
    await Ledger(redis_store, signer).append([make_receipt() for _ in range(3)])
    head = await redis_store.head()
    client = aioredis.Redis.from_url(redis_url())
    try:
        await client.delete(*(redis_store.key("r", h) for h in range(3)))
    finally:
        await client.aclose()
    count, failures = await verify_store(redis_store, keys)
    assert (count, _checks(failures)) == (0, [(2, None, "height"), (2, None, "head")])
    assert failures[0].detail == "missing: height 0..2 not found"
    assert failures[1].detail.startswith(f"head says {head.entry_hash} at 2, last receipt is ")
    assert failures[1].detail.endswith(" at None")
