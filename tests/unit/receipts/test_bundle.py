"""Offline bundles (proxy/receipts/bundle.py): make_bundle and verify_bundle, against the valid bundle of
tests/vectors/bundles.json and altered copies of it.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from types import MappingProxyType

from proxy.primitives.failure import Failure
from proxy.receipts.bundle import make_bundle, verify_bundle
from proxy.receipts.signing import load_public_keys

_VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "bundles.json"


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
    del proof["z"], proof["a"]  # one kind of fault: the other list is not mentioned
    assert verify_bundle(document, keys) == [
        Failure(None, None, "inclusion", "missing field(s): leaf_index, hashes", where="inclusion proof")]
    document, keys = _valid_bundle()
    document["inclusion_proof"]["extra"] = 1
    assert verify_bundle(document, keys) == [
        Failure(None, None, "inclusion", "unknown field(s): extra", where="inclusion proof")]
    document, keys = _valid_bundle()
    document["checkpoint"] = None
    assert verify_bundle(document, keys) == [
        Failure(None, None, "checkpoint", "checkpoint must be the signed note text", where="checkpoint")]
    document, _ = _valid_bundle()
    document["public_keys"] = [{"key_id": "ed25519:00"}]
    assert verify_bundle(document) == [
        Failure(None, None, "public_keys", "unsupported alg None", where="bundle public_keys")]
