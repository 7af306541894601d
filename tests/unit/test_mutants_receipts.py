"""Contract tests of proxy/receipts written against surviving mutants (mutation/baseline.md).

Grouped by module: canonical JSON (RFC 8785 §3.2.2.3: integers beyond ±(2**53 − 1) are written as
the double a JSON parser reads for them), offline bundles (bundle.py; the valid bundle comes from
tests/vectors/bundles.json), the keyring (keyring.py; real files in tmp_path, a fake monotonic
clock for the reload interval), seal() and PreparedReceipt. The ledger audit's tests live in
tests/integration/test_audit.py (they need a real Redis ledger).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging
import os
import random
import stat
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import pytest

from proxy.primitives.canonical import MAX_SAFE_INTEGER, canonical, json_hash
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, open_store, verify_store
from proxy.receipts.bundle import make_bundle, verify_bundle
from proxy.receipts.keyring import Keyring, generate_key, read_keyring, reconcile, rotate_key
from proxy.receipts.receipt import (
    CHAIN_FIELDS,
    GENESIS_PREV_HASH,
    entry_hash,
    new_receipt,
    schema_problems,
    seal,
    utc_timestamp,
)
from proxy.receipts.sealing import PreparedReceipt, encode_value
from proxy.receipts.signing import KeyFileError, Signer, load_public_keys, replace_key_file
from tests.support.ledger import make_receipt, sqlite_url
from tests.support.redis_server import delete_redis_namespace, redis_namespace_url


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


# --- bundle: make_bundle / verify_bundle (proxy/receipts/bundle.py) -------------------------------


_VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "bundles.json"


def _bundle_vector(vector_id: str) -> dict:
    [vector] = [v for v in json.loads(_VECTORS.read_text())["vectors"] if v["id"] == vector_id]
    return vector


def _valid_bundle() -> tuple[dict, dict]:
    """A valid bundle (leaf 3 of 8) and the trusted keys it verifies with."""
    vector = _bundle_vector("bundle/valid/leaf-3-of-8")
    return copy.deepcopy(vector["document"]), load_public_keys(vector["keys"])


def _located(failures) -> list[tuple]:
    """(check, where) of each failure; every failure explains itself with a non-empty detail."""
    assert all(isinstance(f.detail, str) and f.detail for f in failures), failures
    return [(f.check, f.where) for f in failures]


def test_make_bundle_assembles_the_documented_format_and_it_verifies() -> None:
    """Rebuilt from its parts (raw 32-byte path hashes), the vector's bundle comes out identical and valid."""
    document, keys = _valid_bundle()
    proof = document["inclusion_proof"]
    raw_hashes = [base64.b64decode(h) for h in proof["hashes"]]
    assert len(raw_hashes) == 3 and all(len(h) == 32 for h in raw_hashes)
    rebuilt = make_bundle(document["receipt"], proof["tree_size"], raw_hashes, document["checkpoint"],
                          tuple(document["public_keys"]))
    assert rebuilt == document
    assert list(rebuilt) == ["bundle_version", "receipt", "inclusion_proof", "checkpoint", "public_keys"]
    assert rebuilt["inclusion_proof"]["leaf_index"] == document["receipt"]["ledger_height"] == 3
    assert isinstance(rebuilt["public_keys"], list)
    assert verify_bundle(rebuilt, keys) == [] and verify_bundle(rebuilt) == []


def test_a_bundle_that_is_not_an_object_fails_the_bundle_check() -> None:
    for bad in (None, [], "bundle", 1):
        failures = verify_bundle(bad)
        assert _located(failures) == [("bundle", "bundle")]
        assert (failures[0].height, failures[0].receipt_id) == (None, None)


def test_missing_and_unknown_fields_are_both_reported_and_stop_the_check() -> None:
    document, keys = _valid_bundle()
    del document["checkpoint"]
    document["extra"] = 1
    failures = verify_bundle(document, keys)
    assert _located(failures) == [("bundle", "bundle"), ("bundle", "bundle")]
    assert "checkpoint" in failures[0].detail and "extra" in failures[1].detail


def test_an_unknown_field_alone_stops_the_check_before_the_content() -> None:
    """Shape first: a bundle with a stray field is not read further, even if its checkpoint is broken too."""
    document, keys = _valid_bundle()
    document["note"] = "hi"
    document["checkpoint"] = 5
    assert _located(verify_bundle(document, keys)) == [("bundle", "bundle")]
    document, keys = _valid_bundle()
    document["bundle_version"] = True  # a bool is not the version 1
    document["checkpoint"] = 5
    assert _located(verify_bundle(document, keys)) == [("bundle", "bundle")]


def test_unusable_own_keys_fail_the_public_keys_check() -> None:
    document, _ = _valid_bundle()
    for entries, why in (([], "non-empty list"), ("keys", "non-empty list"), ([{"key_id": "ed25519:00"}], "alg")):
        document["public_keys"] = entries
        failures = verify_bundle(document)
        assert _located(failures) == [("public_keys", "bundle public_keys")]
        assert why in failures[0].detail and not failures[0].detail.startswith("public keys: ")


def test_trusted_keys_may_be_any_mapping() -> None:
    document, keys = _valid_bundle()
    assert verify_bundle(document, MappingProxyType(dict(keys))) == []


def test_a_proof_with_missing_or_unknown_fields_fails_inclusion_before_the_path() -> None:
    document, keys = _valid_bundle()
    del document["inclusion_proof"]["hashes"]
    failures = verify_bundle(document, keys)
    assert _located(failures) == [("inclusion", "inclusion proof")]
    assert "hashes" in failures[0].detail
    document["inclusion_proof"]["extra"] = 1
    del document["inclusion_proof"]["tree_size"]
    failures = verify_bundle(document, keys)
    assert _located(failures) == [("inclusion", "inclusion proof")]
    assert "tree_size, hashes" in failures[0].detail and "extra" in failures[0].detail
    assert failures[0].detail.index("tree_size") < failures[0].detail.index("extra")


def test_a_checkpoint_that_is_not_text_fails_the_checkpoint_check() -> None:
    document, keys = _valid_bundle()
    document["checkpoint"] = {"note": document["checkpoint"]}
    assert _located(verify_bundle(document, keys)) == [("checkpoint", "checkpoint")]


def test_the_expected_origin_is_enforced() -> None:
    document, keys = _valid_bundle()
    assert verify_bundle(document, keys, origin="sonate-trust-proxy/ledger") == []
    assert "origin" in {f.check for f in verify_bundle(document, keys, origin="another.example/log")}


# --- keyring (proxy/receipts/keyring.py) -----------------------------------------------------------


def test_generate_and_rotate_use_the_keyring_file_they_are_given(tmp_path: Path) -> None:
    key_file, keyring_file = tmp_path / "k.json", tmp_path / "published" / "keys.json"
    first = generate_key(key_file, keyring_file)
    assert [e["key_id"] for e in read_keyring(keyring_file)] == [first.key_id]
    old, new = rotate_key(key_file, keyring_file)
    assert old.key_id == first.key_id
    assert [(e["key_id"], e["status"]) for e in read_keyring(keyring_file)] == [
        (first.key_id, "retired"), (new.key_id, "active")]
    assert not (tmp_path / "k.keyring.json").exists()
    assert Keyring(key_file, keyring_file).load().entries() == read_keyring(keyring_file)


def test_the_keyring_file_is_public_pretty_printed_json(tmp_path: Path) -> None:
    """Mode 0644 (it is the published key list), two-space indented and newline-terminated for review."""
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    keyring_file = tmp_path / "k.keyring.json"
    assert stat.S_IMODE(os.stat(keyring_file).st_mode) == 0o644
    text = keyring_file.read_text()
    assert text == json.dumps({"keys": read_keyring(keyring_file)}, indent=2) + "\n"


def test_read_keyring_refuses_documents_that_are_not_keyrings(tmp_path: Path) -> None:
    path = tmp_path / "ring.json"
    for doc in ([], {"keys": {}}, "keys"):
        path.write_text(json.dumps(doc))
        with pytest.raises(KeyFileError, match="not a keyring"):
            read_keyring(path)


def test_read_keyring_refuses_private_keys(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    ring = tmp_path / "k.keyring.json"
    doc = json.loads(ring.read_text())
    doc["keys"][0]["private_key"] = json.loads(key_file.read_text())["private_key"]
    ring.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError, match="private"):
        read_keyring(ring)


def test_reconcile_is_pure_and_reports_no_change_for_the_listed_active_key() -> None:
    signer, successor = Signer.generate(), Signer.generate()
    entries, changed = reconcile([], signer)
    assert changed and [e["status"] for e in entries] == ["active"]
    snapshot = json.loads(json.dumps(entries))
    assert reconcile(entries, signer) == (snapshot, False)
    rotated, changed = reconcile(entries, successor)
    assert changed and [e["status"] for e in rotated] == ["retired", "active"]
    assert entries == snapshot  # the input is not modified


def test_rotation_defaults_to_no_overlap_and_accepts_an_empty_ledger(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    moment = datetime(2026, 5, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
    old, new = rotate_key(key_file, now=moment, ledger_size=0)
    entries = read_keyring(tmp_path / "k.keyring.json")
    assert entries[0]["not_after"] == utc_timestamp(moment) == "2026-05-01T12:00:00.250Z"
    assert entries[1]["not_before"] == new.created == utc_timestamp(moment)
    assert entries[1]["not_before_height"] == 0


def test_timestamps_are_utc_whatever_the_host_time_zone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "k.json"
    generate_key(key_file)
    monkeypatch.setenv("TZ", "Asia/Kathmandu")  # UTC+05:45
    time.tzset()
    try:
        _, new = rotate_key(key_file)
        stamps = [new.created, utc_timestamp(), _unsealed()["ts"]]
    finally:
        monkeypatch.undo()
        time.tzset()
    for stamp in stamps:
        parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        assert abs(parsed - datetime.now(timezone.utc)) < timedelta(minutes=5), stamp


def test_rotation_lists_a_key_file_the_keyring_never_saw(tmp_path: Path) -> None:
    """A crash left key B in the key file but only A in the keyring: rotating keeps B published (retired)."""
    key_file = tmp_path / "k.json"
    a = generate_key(key_file)
    b = Signer.generate()
    replace_key_file(key_file, b)
    old, new = rotate_key(key_file)
    assert old.key_id == b.key_id
    assert [(e["key_id"], e["status"]) for e in read_keyring(tmp_path / "k.keyring.json")] == [
        (a.key_id, "retired"), (b.key_id, "retired"), (new.key_id, "active")]


def test_rotation_replaces_a_restored_retired_key(tmp_path: Path) -> None:
    """The way out of a restored, retired key file is a rotation; its retired entry stays as it was."""
    key_file = tmp_path / "k.json"
    a = generate_key(key_file)
    saved = key_file.read_bytes()
    rotate_key(key_file)
    retired = read_keyring(tmp_path / "k.keyring.json")[0]
    key_file.write_bytes(saved)
    old, new = rotate_key(key_file)
    entries = read_keyring(tmp_path / "k.keyring.json")
    assert old.key_id == a.key_id and entries[0] == retired
    assert [e["status"] for e in entries] == ["retired", "retired", "active"] and entries[2]["key_id"] == new.key_id


def test_keyring_must_be_loaded_before_use(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        Keyring(tmp_path / "k.json").current()


def test_a_running_keyring_picks_up_a_rotation_once_per_reload_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Default interval 1 s: the new key is used from the first check at or after 1 s, and the switch is logged."""
    clock = [100.0]
    monkeypatch.setattr("proxy.receipts.keyring.time", SimpleNamespace(monotonic=lambda: clock[0]))
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    first = keyring.current()
    _, new = rotate_key(key_file)
    clock[0] = 100.5
    assert keyring.current().key_id == first.key_id
    clock[0] = 101.0
    with caplog.at_level(logging.INFO, logger="sonate.keys"):
        assert keyring.current().key_id == new.key_id
    # the keyring's own records only: caplog also holds whatever the garbage collector makes other
    # loggers say meanwhile (asyncio's "Task was destroyed but it is pending!" for an earlier test's tasks)
    assert keys_log(caplog) == [f"signing key rotated: {first.key_id} -> {new.key_id}"]
    caplog.clear()
    clock[0] = 102.0  # key file unchanged since: no reload, no log
    with caplog.at_level(logging.INFO, logger="sonate.keys"):
        assert keyring.current().key_id == new.key_id
    assert keys_log(caplog) == []


def keys_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages the ``sonate.keys`` logger emitted into ``caplog``."""
    return [r.getMessage() for r in caplog.records if r.name == "sonate.keys"]


def test_an_unchanged_key_file_is_not_reloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """current() re-reads (and heals the keyring) only when the key file changed, not on every interval."""
    clock = [100.0]
    monkeypatch.setattr("proxy.receipts.keyring.time", SimpleNamespace(monotonic=lambda: clock[0]))
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    (tmp_path / "k.keyring.json").unlink()
    clock[0] = 200.0
    keyring.current()
    assert not (tmp_path / "k.keyring.json").exists()


def test_entries_fall_back_to_the_last_good_copy_which_callers_cannot_change(tmp_path: Path) -> None:
    key_file = tmp_path / "k.json"
    keyring = Keyring(key_file).load()
    good = keyring.entries()
    good[0]["status"] = "tampered by the caller"
    (tmp_path / "k.keyring.json").write_text("{not json")
    for _ in range(2):  # the fallback copy survives repeated failures
        fallback = keyring.entries()
        assert [(e["key_id"], e["status"]) for e in fallback] == [(keyring.current().key_id, "active")]


# --- receipt.seal and sealing.PreparedReceipt ------------------------------------------------------


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


# --- chain.Ledger ---------------------------------------------------------------------------------

async def test_a_lagging_merkle_tree_is_warned_about_once_per_ledger(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Receipts written without tree nodes (an older writer): the ledger appends anyway and says so once."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        signer = Signer.generate()
        older = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
        assert await store.try_append([older], None) is True
        ledger = Ledger(store, signer)
        with caplog.at_level(logging.WARNING, logger="sonate.ledger"):
            await ledger.append([make_receipt()])
            await ledger.append([make_receipt()])
        lag = [r for r in caplog.records if "Merkle tree is behind" in r.getMessage()]
        assert len(lag) == 1 and "ledger reindex" in lag[0].getMessage()
        assert (await store.head()).height == 2 and await store.tree_size() == 0
    finally:
        await store.close()


@pytest.mark.parametrize("older", [0, 1], ids=["tree-in-sync", "tree-lagging"])
async def test_contended_writers_pass_one_turn_token_and_survive_a_stale_one(older: int) -> None:
    """Two writers on one Redis ledger: after a lost race the loser takes turns (proxy/receipts/chain.py).

    Exactly one token circulates and it names the head last written; a stale token (the head moved
    since) is refused by the compare-and-set and the writer re-seals on the head it gets back. With
    ``older`` receipts written without tree nodes first, the tree lags and tokens carry no compact range.
    """
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        if older:
            first = seal(make_receipt(), ledger_height=0, prev_hash=GENESIS_PREV_HASH, signer=signer)
            assert await store.try_append([first], None) is True
        a = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        b = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        await a.append([make_receipt()])
        await b.append([make_receipt()])
        await a.append([make_receipt()])  # a lost a race: from now on it takes turns
        await a.append([make_receipt()])  # takes the token its last append handed on, hands on a new one
        assert a.lost_races == 1
        turn = await store.take_turn(0.05)
        assert turn is not None and turn[0] == await store.head() and turn[0].height == older + 3
        assert await store.take_turn(0.01) is None  # one token, not one per append
        stale = await store.get_by_height(1)
        await store._redis.rpush(store.key("turn"), f"1|{entry_hash(stale)}|")
        [receipt] = await a.append([make_receipt()])
        assert receipt["ledger_height"] == older + 4 and a.lost_races == 2
        assert (await verify_store(store, {signer.key_id: signer.public_key})) == (older + 5, [])
    finally:
        await store.close()
        delete_redis_namespace(url)


async def test_a_writer_appends_on_the_newer_head_a_token_brings_and_keeps_taking_turns() -> None:
    """The token from another writer names a head this writer has not seen: it seals on that head at once
    (no lost race), stays in contended mode, and hands the token on with each head it writes."""
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        a = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        b = Ledger(store, signer, contended_s=60, turn_timeout_s=0.05)
        await a.append([make_receipt()])  # h0
        await b.append([make_receipt()])  # h1
        await a.append([make_receipt()])  # a loses a race, writes h2, hands on a token naming h2
        await b.append([make_receipt()])  # b loses a race, takes the token, writes h3, hands on h3
        [moved_on] = await a.append([make_receipt()])  # a knew h2; the token brings h3
        assert moved_on["ledger_height"] == 4 and (a.lost_races, b.lost_races) == (1, 1)
        [again] = await a.append([make_receipt()])  # still contended: takes its own token back
        assert again["ledger_height"] == 5
        turn = await store.take_turn(0.05)
        assert turn is not None and turn[0] == await store.head() and turn[0].height == 5
        assert await store.take_turn(0.01) is None
        assert (await verify_store(store, {signer.key_id: signer.public_key})) == (6, [])
    finally:
        await store.close()
        delete_redis_namespace(url)


async def test_turn_taking_ends_contended_s_after_the_last_lost_race() -> None:
    """Taking back its own token does not prolong a writer's contended mode: it stops handing tokens on."""
    url = redis_namespace_url("turns")
    store = open_store(url)
    try:
        signer = Signer.generate()
        a = Ledger(store, signer, contended_s=0.5, turn_timeout_s=0.05)
        b = Ledger(store, signer)
        await a.append([make_receipt()])
        await b.append([make_receipt()])
        await a.append([make_receipt()])  # lost race at time t: contended until t + 0.5 s
        lost_at = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() < lost_at + 1.0:  # appends 0.05 s apart, each inside 0.5 s of the last
            await a.append([make_receipt()])
            await asyncio.sleep(0.05)
        await a.append([make_receipt()])
        head = await store.head()
        turn = await store.take_turn(0.05)  # the token the last contended append handed on, not the newest head
        assert a.lost_races == 1 and turn is not None and turn[0].height < head.height
    finally:
        await store.close()
        delete_redis_namespace(url)


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


def test_bundle_failures_name_the_fields_and_say_why_in_full() -> None:
    """The details a verifier prints: field lists in document order (unknown ones sorted), joined by ", ",
    the proof's two lists joined by "; ", and key errors without the loader's "public keys: " prefix."""
    assert verify_bundle([]) == [Failure(None, None, "bundle", "a bundle must be a JSON object", where="bundle")]
    document, keys = _valid_bundle()
    del document["checkpoint"], document["receipt"]
    document.update(zeta=1, alpha=2)
    assert verify_bundle(document, keys) == [
        Failure(None, None, "bundle", "missing field(s): receipt, checkpoint", where="bundle"),
        Failure(None, None, "bundle", "unknown field(s): alpha, zeta", where="bundle")]
    document, keys = _valid_bundle()
    proof = document["inclusion_proof"]
    del proof["leaf_index"], proof["hashes"]
    proof.update(z=0, a=0)
    assert verify_bundle(document, keys) == [
        Failure(None, None, "inclusion", "missing field(s): leaf_index, hashes; unknown field(s): a, z",
                where="inclusion proof")]
    document, keys = _valid_bundle()
    document["checkpoint"] = None
    assert verify_bundle(document, keys) == [
        Failure(None, None, "checkpoint", "checkpoint must be the signed note text", where="checkpoint")]
    document, _ = _valid_bundle()
    document["public_keys"] = [{"key_id": "ed25519:00"}]
    assert verify_bundle(document) == [
        Failure(None, None, "public_keys", "unsupported alg None", where="bundle public_keys")]


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
