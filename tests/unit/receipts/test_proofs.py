"""Verifying proofs (proxy/receipts/proofs.py): the exact list of failures of
:func:`proxy.receipts.proofs.verify_inclusion_proof` (RFC 9162 §2.1.3.2 against a C2SP signed
checkpoint, https://c2sp.org/tlog-checkpoint) and :func:`proxy.receipts.proofs.verify_consistency_proof`
(RFC 9162 §2.1.4.2 between two checkpoints of one origin), each failure's height, receipt id, check,
detail and ``where`` (``str(Failure)`` is the line ``sonate verify`` prints). The proofs are those of
the committed vectors (tests/vectors/bundles.json and consistency.json: one 8-leaf tree, its
checkpoints of sizes 3, 7 and 8). The last tests pin merkle.py's argument checks on the same vectors:
the raw §2.1.3.2 and §2.1.4.2 paths never raise, hashes are canonical base64 (RFC 4648 §4), error
texts name the argument.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.primitives import merkle
from proxy.primitives.failure import Failure
from proxy.receipts.proofs import (
    consistency_proof_doc,
    inclusion_proof_doc,
    receipt_leaf_hash,
    verify_consistency_proof,
    verify_inclusion_proof,
)
from proxy.receipts.signing import load_public_keys
from proxy.tlog.checkpoint import parse_checkpoint
from tests.support.ledger import make_receipt, signer, sqlite_url  # noqa: F401

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


PATH_FAILS = "the audit path does not lead to the checkpoint's root hash (RFC 9162 §2.1.3.2)"


PREFIX_FAILS = "the proof does not show the first tree is a prefix of the second (RFC 9162 §2.1.4.2)"


def _vector(name: str, vector_id: str) -> dict[str, Any]:
    document = json.loads((VECTORS / name).read_text())
    return next(v for v in document["vectors"] if v["id"] == vector_id)


BUNDLE = _vector("bundles.json", "bundle/valid/leaf-3-of-8")


KEYS = load_public_keys(BUNDLE["keys"])


RECEIPT: dict[str, Any] = BUNDLE["document"]["receipt"]  # ledger_height 3


RID = RECEIPT["receipt_id"]


CHECKPOINT_8: str = BUNDLE["document"]["checkpoint"]


PROOF: dict[str, Any] = BUNDLE["document"]["inclusion_proof"]  # leaf 3 of 8, no leaf_hash


LEAF = receipt_leaf_hash(RECEIPT)


AT_3 = "inclusion proof (leaf 3, tree size 8)"


CONSISTENCY = _vector("consistency.json", "consistency/valid/3-to-7")["document"]


OTHER_LOG = _vector("consistency.json", "consistency/other-log")["document"]


FIRST, SECOND = CONSISTENCY["first_checkpoint"], CONSISTENCY["second_checkpoint"]


C_PROOF: dict[str, Any] = CONSISTENCY["proof"]


def inclusion(proof: Any, receipt: Any = RECEIPT) -> list[Failure]:
    return verify_inclusion_proof(proof, receipt, CHECKPOINT_8, KEYS)


def consistency(proof: Any, origin: str | None = None) -> list[Failure]:
    return verify_consistency_proof(proof, FIRST, SECOND, KEYS, origin)


def test_proof_documents_carry_the_wire_field_names() -> None:
    hashes = [merkle.b64_decode_hash(h) for h in PROOF["hashes"]]
    assert inclusion_proof_doc(3, 8, LEAF, hashes) == {**PROOF, "leaf_hash": merkle.b64_encode_hash(LEAF)}
    assert inclusion(inclusion_proof_doc(3, 8, LEAF, hashes), None) == []  # verifiable without the receipt
    assert consistency_proof_doc(3, 7, [merkle.b64_decode_hash(h) for h in C_PROOF["hashes"]]) == C_PROOF


def test_without_a_receipt_the_proofs_leaf_hash_is_checked() -> None:
    """No receipt: the proof's own leaf_hash is the leaf; a sound path passes, a broken one fails."""
    stated = {**PROOF, "leaf_hash": merkle.b64_encode_hash(LEAF)}
    assert inclusion(stated, None) == []
    swapped = {**stated, "hashes": [PROOF["hashes"][1], PROOF["hashes"][0], PROOF["hashes"][2]]}
    assert inclusion(swapped, None) == [Failure(3, None, "inclusion", PATH_FAILS, where=AT_3)]
    other = {**PROOF, "leaf_hash": merkle.b64_encode_hash(merkle.leaf_hash(b"another entry"))}
    assert inclusion(other, None) == [Failure(3, None, "inclusion", PATH_FAILS, where=AT_3)]


def test_a_stated_leaf_hash_must_be_the_receipts() -> None:
    """With a receipt, its own leaf is checked against the path; a different leaf_hash is reported."""
    assert inclusion({**PROOF, "leaf_hash": merkle.b64_encode_hash(LEAF)}) == []
    wrong = {**PROOF, "leaf_hash": merkle.b64_encode_hash(merkle.leaf_hash(b"another entry"))}
    fails = inclusion(wrong)
    assert fails == [Failure(3, RID, "inclusion", "leaf_hash is not SHA-256(0x00 ‖ entry hash) of the receipt",
                             where=AT_3)]
    assert [str(f) for f in fails] == [
        f"{AT_3}: inclusion: leaf_hash is not SHA-256(0x00 ‖ entry hash) of the receipt"]


def test_a_malformed_leaf_hash_stops_the_check() -> None:
    assert inclusion({**PROOF, "leaf_hash": "abc"}) == [
        Failure(3, RID, "inclusion", "leaf_hash: not a base64 SHA-256 hash (44 characters): 'abc'", where=AT_3)]
    assert inclusion(PROOF, None) == [  # no receipt and no leaf_hash: nothing to check the path for
        Failure(3, None, "inclusion", "leaf_hash: not a base64 SHA-256 hash (44 characters): None", where=AT_3)]


def test_a_receipt_that_cannot_be_hashed() -> None:
    broken = {**RECEIPT, "evidence": {1: "not a JSON key"}}
    assert inclusion(PROOF, broken) == [
        Failure(3, RID, "inclusion", "cannot hash the receipt: object keys must be strings", where=AT_3)]


def test_leaf_index_must_be_the_receipts_height() -> None:
    at_4 = "inclusion proof (leaf 4, tree size 8)"
    assert inclusion({**PROOF, "leaf_index": 4}) == [
        Failure(4, RID, "inclusion", "leaf_index 4 is not the receipt's ledger_height 3", where=at_4),
        Failure(4, RID, "inclusion", PATH_FAILS, where=at_4)]
    # a receipt that is no JSON object still hashes (canonical JSON of anything); it has no height
    assert inclusion(PROOF, ["not", "a", "receipt"]) == [
        Failure(3, None, "inclusion", "leaf_index 3 is not the receipt's ledger_height None", where=AT_3),
        Failure(3, None, "inclusion", PATH_FAILS, where=AT_3)]


def test_an_inclusion_proof_must_be_an_object() -> None:
    fails = inclusion([3, 8, PROOF["hashes"]])
    assert fails == [Failure(None, None, "inclusion", "the proof must be a JSON object", where="inclusion proof")]
    assert [str(f) for f in fails] == ["inclusion proof: inclusion: the proof must be a JSON object"]


@pytest.mark.parametrize("index, size", [("3", 8), (3, "8"), (8, 8), (9, 8), (-1, 8), (0, 0), (True, 8)])
def test_leaf_index_and_tree_size_are_checked_first(index: Any, size: Any) -> None:
    """RFC 9162 §2.1.3.2 step 1: leaf_index >= tree_size (or not integers) fails before any hashing."""
    detail = f"need 0 <= leaf_index < tree_size, got leaf_index={index!r} tree_size={size!r}"
    assert inclusion({**PROOF, "leaf_index": index, "tree_size": size}) == [
        Failure(None, None, "inclusion", detail, where="inclusion proof")]


def test_malformed_inclusion_hashes_name_the_item() -> None:
    assert inclusion({**PROOF, "hashes": [PROOF["hashes"][0], "abc"]}) == [
        Failure(3, None, "inclusion", "hashes[1]: not a base64 SHA-256 hash (44 characters): 'abc'", where=AT_3)]
    assert inclusion({**PROOF, "hashes": None}) == [
        Failure(3, None, "inclusion", "hashes must be a list of base64 strings", where=AT_3)]


def test_inclusion_tree_size_must_be_the_checkpoints() -> None:
    """The proof's tree_size must be the checkpoint's: the 8-leaf checkpoint does not answer a size-7 proof."""
    at_7 = "inclusion proof (leaf 3, tree size 7)"
    assert inclusion({**PROOF, "tree_size": 7}) == [
        Failure(3, RID, "inclusion", "proof is for tree size 7, the checkpoint is for 8", where=at_7)]


def test_a_valid_consistency_proof_and_the_expected_origin() -> None:
    assert consistency(C_PROOF) == []
    assert consistency(C_PROOF, "sonate-trust-proxy/ledger") == []
    fails = consistency(C_PROOF, "example.com/other-log")  # C2SP: the origin line must be the log expected
    assert [f.check for f in fails] == ["origin", "origin"]
    assert [f.where for f in fails] == ["checkpoint (tree size 3)", "checkpoint (tree size 7)"]


def test_a_consistency_proof_must_be_an_object() -> None:
    fails = consistency([3, 7])
    assert fails == [Failure(None, None, "consistency", "the proof must be a JSON object", where="consistency proof")]
    assert [str(f) for f in fails] == ["consistency proof: consistency: the proof must be a JSON object"]


@pytest.mark.parametrize("first, second", [(3, "7"), ("3", 7), (7, 3), (-1, 7), (3, None)])
def test_consistency_sizes_are_checked_first(first: Any, second: Any) -> None:
    detail = f"need 0 <= first <= second, got first={first!r} second={second!r}"
    assert consistency({**C_PROOF, "first": first, "second": second}) == [
        Failure(None, None, "consistency", detail, where="consistency proof")]


@pytest.mark.parametrize("first, second", [(0, 7), (0, 0), (3, 8), (7, 7)])
def test_consistency_sizes_must_be_the_checkpoints(first: int, second: int) -> None:
    """Sizes 0 are well-formed (RFC 9162 §2.1.4: the empty tree), but not the checkpoints' 3 -> 7."""
    assert consistency({**C_PROOF, "first": first, "second": second}) == [
        Failure(None, None, "consistency", f"proof is for sizes {first} -> {second}, the checkpoints are 3 -> 7",
                where=f"consistency proof ({first} -> {second})")]


def test_malformed_consistency_hashes_name_the_item() -> None:
    where = "consistency proof (3 -> 7)"
    assert consistency({**C_PROOF, "hashes": ["abc"]}) == [
        Failure(None, None, "consistency", "hashes[0]: not a base64 SHA-256 hash (44 characters): 'abc'",
                where=where)]
    assert consistency({**C_PROOF, "hashes": "abc"}) == [
        Failure(None, None, "consistency", "hashes must be a list of base64 strings", where=where)]


def test_a_broken_consistency_path() -> None:
    hashes = C_PROOF["hashes"]
    fails = consistency({**C_PROOF, "hashes": [hashes[1], hashes[0], *hashes[2:]]})
    assert fails == [Failure(None, None, "consistency", PREFIX_FAILS, where="consistency proof (3 -> 7)")]
    assert [str(f) for f in fails] == [f"consistency proof (3 -> 7): consistency: {PREFIX_FAILS}"]


def test_checkpoints_of_two_logs_are_not_consistent() -> None:
    """C2SP tlog-checkpoint: the origin names the log; a proof cannot join two logs (sound path or not)."""
    fails = verify_consistency_proof(OTHER_LOG["proof"], OTHER_LOG["first_checkpoint"],
                                     OTHER_LOG["second_checkpoint"], None)
    assert fails == [Failure(None, None, "consistency", "the checkpoints are of different logs "
                             "('sonate-trust-proxy/ledger', 'example.com/other-log')",
                             where="consistency proof (3 -> 8)")]


def test_without_keys_a_checkpoint_is_only_parsed() -> None:
    """public_keys None: no signature check (C2SP signed note), but a note that does not parse is reported once."""
    assert inclusion(PROOF) == [] and verify_inclusion_proof(PROOF, RECEIPT, CHECKPOINT_8, None) == []
    unparsable = Failure(None, None, "checkpoint", "checkpoint body must end with a newline", where="checkpoint")
    stated = {**PROOF, "leaf_hash": merkle.b64_encode_hash(LEAF)}
    for keys in (None, KEYS):  # with keys verify_checkpoint reports it (the same failure), not twice
        assert verify_inclusion_proof(stated, RECEIPT, "garbage", keys) == [unparsable]
        assert verify_consistency_proof(C_PROOF, FIRST, "garbage", keys) == [unparsable]
    assert verify_consistency_proof(C_PROOF, FIRST, SECOND, None) == []
    assert [str(f) for f in verify_consistency_proof(C_PROOF, "x\n", SECOND, None)] == [
        "checkpoint: checkpoint: checkpoint body needs 3 lines (origin, tree size, root hash), got 1"]


def test_a_receipt_id_that_is_no_string_is_not_reported() -> None:
    """A receipt_id of another type changes the leaf (so the path fails) and is left out of the failure."""
    assert inclusion(PROOF, {**RECEIPT, "receipt_id": 42}) == [Failure(3, None, "inclusion", PATH_FAILS, where=AT_3)]


def test_raw_paths_refuse_malformed_arguments() -> None:
    """merkle.verify_*_path never raise and never accept: RFC 9162 §2.1.3.2/§2.1.4.2 need 32-byte hashes, int sizes."""
    old, new = parse_checkpoint(FIRST).root_hash, parse_checkpoint(SECOND).root_hash
    hashes = [merkle.b64_decode_hash(h) for h in C_PROOF["hashes"]]
    assert merkle.verify_consistency_path(3, 7, old, new, hashes) is True
    assert merkle.verify_consistency_path(3, 7, old, new, None) is False  # type: ignore[arg-type]
    assert merkle.verify_consistency_path(3, 7, old, new, [None, *hashes[1:]]) is False  # type: ignore[list-item]
    assert merkle.verify_consistency_path(3, 7, None, new, hashes) is False  # type: ignore[arg-type]
    assert merkle.verify_consistency_path(3, 7, old.hex()[:32], new, hashes) is False  # type: ignore[arg-type]
    assert merkle.verify_consistency_path(True, 7, old, new, hashes) is False
    assert merkle.verify_consistency_path(3, "7", old, new, hashes) is False  # type: ignore[arg-type]
    leaf = merkle.leaf_hash(b"entry")
    assert merkle.verify_inclusion_path(0, 2, leaf, [None], leaf) is False  # type: ignore[list-item]
    assert merkle.root_from_inclusion(0, 2, leaf, ["x" * 32]) is None  # type: ignore[list-item]


@pytest.mark.parametrize("first, second, message", [
    (-1, 3, "first tree size must be an integer >= 0, got -1"),
    ("1", 3, "first tree size must be an integer >= 0, got '1'"),
    (1, -3, "second tree size must be an integer >= 0, got -3"),
    (1, None, "second tree size must be an integer >= 0, got None"),
])
def test_consistency_ranges_name_the_bad_size(first: Any, second: Any, message: str) -> None:
    with pytest.raises(merkle.MerkleError) as caught:
        merkle.consistency_ranges(first, second)
    assert str(caught.value) == message


@pytest.mark.parametrize("text, message", [
    ("A" * 40 + "!!!!", "not valid base64"),  # RFC 4648 §3.3: characters outside the alphabet are rejected
    ("A" * 40 + "====", "not a canonical base64 SHA-256 hash"),  # 30 bytes, extra padding
    ("A" * 42 + "==", "not a canonical base64 SHA-256 hash"),  # 31 bytes
    ("A" * 43 + "B", "not a canonical base64 SHA-256 hash"),  # 33 bytes
    ("A" * 42 + "B=", "not a canonical base64 SHA-256 hash"),  # non-zero padding bits (RFC 4648 §3.5)
])
def test_hashes_decode_strictly(text: str, message: str) -> None:
    with pytest.raises(merkle.MerkleError) as caught:
        merkle.b64_decode_hash(text)
    assert str(caught.value) == f"{message}: {text!r}"
    assert consistency({**C_PROOF, "hashes": [text]}) == [
        Failure(None, None, "consistency", f"hashes[0]: {message}: {text!r}", where="consistency proof (3 -> 7)")]


@pytest.mark.parametrize("start, end", [(0, 0), (4, 4), (5, 3), (-1, 2)])
def test_an_empty_leaf_range_has_no_subtree(start: int, end: int) -> None:
    """RFC 9162 §2.1.1 defines MTH over a non-empty D[start:end] only (the empty tree is EMPTY_ROOT, no node)."""
    with pytest.raises(merkle.MerkleError) as caught:
        merkle.range_nodes(start, end)
    assert str(caught.value) == f"empty or negative leaf range [{start}, {end})"
    assert merkle.range_nodes(4, 7) == [(1, 2), (0, 6)] and merkle.nodes_for_ranges([(4, 7), (4, 6)]) == [(1, 2), (0, 6)]


def test_receipt_leaf_needs_the_sha256_prefix_and_the_length() -> None:
    """A leaf is ``"sha256:" + 64 hex`` (proxy.receipts.receipt.entry_hash); another algorithm name
    of the same length, or the right prefix with a short digest, is refused."""
    digest = "ab" * 32
    assert merkle.receipt_leaf("sha256:" + digest) == bytes.fromhex(digest)
    for bad in ("sha512:" + digest, "sha256:" + digest[:-1], "sha256:" + digest + "0"):
        with pytest.raises(merkle.MerkleError, match="^not a sha256: entry hash"):
            merkle.receipt_leaf(bad)


def test_frontier_ids_name_the_tree_size_in_errors() -> None:
    assert merkle.frontier_ids(0) == []
    with pytest.raises(merkle.MerkleError, match="^tree size must be an integer >= 0"):
        merkle.frontier_ids(-1)
