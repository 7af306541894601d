"""Tests that kill surviving mutants in proxy/receipts/proofs.py and tree.py (mutation/baseline.md).

They pin what a verifier prints: the exact list of failures of
:func:`proxy.receipts.proofs.verify_inclusion_proof` (RFC 9162 §2.1.3.2 against a C2SP signed
checkpoint, https://c2sp.org/tlog-checkpoint) and :func:`proxy.receipts.proofs.verify_consistency_proof`
(RFC 9162 §2.1.4.2 between two checkpoints of one origin), each failure's height, receipt id, check,
detail and ``where`` (``str(Failure)`` is the line ``sonate verify`` prints). The proofs are those of
the committed vectors (tests/vectors/bundles.json and consistency.json: one 8-leaf tree, its
checkpoints of sizes 3, 7 and 8). The tree.py tests run in process over a SQLite ledger:
:func:`proxy.receipts.tree.bundle_for` and :func:`proxy.receipts.tree.leaf_hash_at` (otherwise reached only by
the e2e and CLI-subprocess tests, which mutmut does not run), the audit of stored nodes and
checkpoints (:func:`~proxy.receipts.tree.verify_tree`, RFC 9162 §2.1.1), a checkpoint kept outside the
ledger (:func:`~proxy.receipts.tree.verify_against_trusted_checkpoint`, §2.1.4) and
:func:`~proxy.receipts.tree.reindex`. The last tests pin merkle.py's argument checks: the raw §2.1.3.2 and
§2.1.4.2 paths never raise, hashes are canonical base64 (RFC 4648 §4), error texts name the argument.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.primitives import merkle
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, open_store, public_key_entry
from proxy.receipts.bundle import make_bundle, verify_bundle
from proxy.receipts.proofs import (
    consistency_proof_doc,
    inclusion_proof_doc,
    receipt_leaf_hash,
    verify_consistency_proof,
    verify_inclusion_proof,
)
from proxy.receipts.signing import load_public_keys
from proxy.receipts.tree import (
    TreeError,
    bundle_for,
    inclusion_proof,
    leaf_hash_at,
    publish_checkpoint,
    verify_against_trusted_checkpoint,
    verify_tree,
)
from proxy.tlog.checkpoint import format_checkpoint, parse_checkpoint, sign_checkpoint
from tests.support.ledger import make_receipt, signer, sqlite_url  # noqa: F401

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
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


# -- proof documents (the JSON of GET /v1/ledger/proof/...) ----------------------------------------


def test_proof_documents_carry_the_wire_field_names() -> None:
    hashes = [merkle.b64_decode_hash(h) for h in PROOF["hashes"]]
    assert inclusion_proof_doc(3, 8, LEAF, hashes) == {**PROOF, "leaf_hash": merkle.b64_encode_hash(LEAF)}
    assert inclusion(inclusion_proof_doc(3, 8, LEAF, hashes), None) == []  # verifiable without the receipt
    assert consistency_proof_doc(3, 7, [merkle.b64_decode_hash(h) for h in C_PROOF["hashes"]]) == C_PROOF


# -- inclusion: the leaf a proof is checked for -----------------------------------------------------


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


# -- inclusion: the proof document ----------------------------------------------------------------


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


# -- consistency ----------------------------------------------------------------------------------


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


# -- tree.py over a real store: leaf hashes and bundles --------------------------------------------

ORIGIN = "example.com/bundle-log"


async def test_leaf_hash_at_reads_the_stored_leaves(tmp_path: Path, signer: Signer) -> None:
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        sealed = await Ledger(store, signer).append([make_receipt() for _ in range(5)])
        assert [await leaf_hash_at(store, i) for i in range(5)] == [receipt_leaf_hash(r) for r in sealed]
        with pytest.raises(TreeError, match=r"Merkle node \(0, 5\) \(level, index\) is not stored"):
            await leaf_hash_at(store, 5)
    finally:
        await store.close()


async def test_bundle_for_publishes_or_reuses_a_checkpoint(tmp_path: Path, signer: Signer) -> None:
    """A bundle proves leaf H in the tree of the latest checkpoint covering H (RFC 9162 §2.1.3)."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    entries = [public_key_entry(signer)]
    keys = {signer.key_id: signer.public_key}
    try:
        ledger = Ledger(store, signer)
        sealed = await ledger.append([make_receipt() for _ in range(5)])
        # no checkpoint yet and no signer: nothing to prove against
        with pytest.raises(TreeError, match=r"^no checkpoint covers height 0 yet \(latest: tree size 0\)"):
            await bundle_for(store, sealed[0], entries, origin=ORIGIN)
        # with a signer, one is published for the stored tree (5 leaves)
        bundle = await bundle_for(store, sealed[0], entries, signer=signer, origin=ORIGIN)
        note = await store.latest_checkpoint()
        assert note is not None and parse_checkpoint(note).tree_size == 5 and parse_checkpoint(note).origin == ORIGIN
        assert bundle == make_bundle(sealed[0], 5, await inclusion_proof(store, 0, 5), note, entries)
        assert verify_bundle(bundle, keys, ORIGIN) == []

        sealed += await ledger.append([make_receipt() for _ in range(3)])  # tree of 8, checkpoint still 5
        covered = await bundle_for(store, sealed[4], entries, signer=signer, origin=ORIGIN)
        assert covered["checkpoint"] == note and covered["inclusion_proof"]["tree_size"] == 5
        assert await store.checkpoint_sizes() == [5]  # the stored checkpoint was reused, none signed
        assert verify_bundle(covered, keys, ORIGIN) == []
        with pytest.raises(TreeError, match=r"^no checkpoint covers height 5 yet \(latest: tree size 5\)"):
            await bundle_for(store, sealed[5], entries, origin=ORIGIN)  # height == checkpoint size: not covered

        fresh = await bundle_for(store, sealed[5], entries, signer=signer, origin=ORIGIN)
        assert fresh["inclusion_proof"] == {"leaf_index": 5, "tree_size": 8,
                                            "hashes": [merkle.b64_encode_hash(h)
                                                       for h in await inclusion_proof(store, 5, 8)]}
        assert await store.checkpoint_sizes() == [5, 8]
        assert fresh["checkpoint"] == await store.latest_checkpoint()
        assert verify_bundle(fresh, keys, ORIGIN) == []

        beyond = {**sealed[7], "ledger_height": 8}  # a height the stored tree (8 leaves) does not hold
        with pytest.raises(TreeError, match=r"^the Merkle tree does not include height 8 yet \(tree size 8\)"):
            await bundle_for(store, beyond, entries, signer=signer, origin=ORIGIN)
    finally:
        await store.close()


async def test_published_checkpoint_is_the_one_bundle_for_signs(tmp_path: Path, signer: Signer) -> None:
    """bundle_for publishes exactly what publish_checkpoint stores (idempotent: same size, same note)."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        sealed = await Ledger(store, signer).append([make_receipt() for _ in range(3)])
        bundle = await bundle_for(store, sealed[2], [public_key_entry(signer)], signer=signer, origin=ORIGIN)
        assert bundle["checkpoint"] == await publish_checkpoint(store, signer, ORIGIN, 3)
        assert bundle["inclusion_proof"]["tree_size"] == 3 and bundle["receipt"] == sealed[2]
    finally:
        await store.close()


# -- checkpoints read without keys (callers that verified them already) ----------------------------


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


# -- tree.py: auditing stored checkpoints and a checkpoint saved outside the ledger ---------------


class _Lossy:
    """A store that lost some checkpoint notes or tree nodes (everything else is the real store's)."""

    def __init__(self, store: Any, notes: frozenset[int] | set[int] = frozenset(),
                 nodes: frozenset[merkle.NodeId] | set[merkle.NodeId] = frozenset()) -> None:
        self._store, self._notes, self._nodes = store, notes, nodes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_checkpoint(self, size: int) -> str | None:
        return None if size in self._notes else await self._store.get_checkpoint(size)

    async def get_nodes(self, ids: Any) -> list[bytes | None]:
        found = await self._store.get_nodes(ids)
        return [None if node in self._nodes else digest for node, digest in zip(ids, found)]


async def test_verify_tree_reports_each_stored_checkpoint(tmp_path: Path, signer: Signer) -> None:
    """Every stored checkpoint must verify (signature, origin) and be stored under its own size."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    keys = {signer.key_id: signer.public_key}
    try:
        await Ledger(store, signer).append([make_receipt() for _ in range(8)])
        note = await publish_checkpoint(store, signer, ORIGIN, 3)
        assert await verify_tree(store, keys, ORIGIN) == (8, [])
        assert await store.put_checkpoint(5, note) is True  # the size-3 note filed under 5
        misfiled = Failure(None, None, "checkpoint", "stored under size 5 but says 3", where="checkpoint (tree size 5)")
        assert await verify_tree(store, keys, ORIGIN) == (8, [misfiled])
        other = Failure(None, None, "origin", f"expected origin 'other.example/log', got {ORIGIN!r}",
                        where="checkpoint (tree size 3)")
        assert await verify_tree(store, keys, "other.example/log") == (8, [other, other, misfiled])
        assert await verify_tree(_Lossy(store, notes={3}), keys, ORIGIN) == (8, [
            Failure(None, None, "checkpoint", "listed but not stored", where="checkpoint (tree size 3)"), misfiled])
        assert [str(f) for f in (await verify_tree(_Lossy(store, notes={5}), keys))[1]] == [
            "checkpoint (tree size 5): checkpoint: listed but not stored"]
    finally:
        await store.close()


async def test_a_trusted_checkpoint_against_the_stored_tree(tmp_path: Path, signer: Signer) -> None:
    """RFC 9162 §2.1.4: the stored tree must extend a checkpoint saved earlier (checked with its origin)."""
    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    keys = {signer.key_id: signer.public_key}
    try:
        saved = sign_checkpoint(format_checkpoint(ORIGIN, 1, merkle.leaf_hash(b"x")), signer)
        assert await verify_against_trusted_checkpoint(store, saved, keys, ORIGIN) == [  # an empty ledger
            Failure(None, None, "truncated", "the ledger holds 0 receipts and a tree of 0 leaves, but the checkpoint "
                    "saved earlier commits to 1: receipts were deleted", where="trusted checkpoint (tree size 1)")]
        await Ledger(store, signer).append([make_receipt() for _ in range(8)])
        note = await publish_checkpoint(store, signer, ORIGIN, 3)
        assert note is not None
        assert await verify_against_trusted_checkpoint(store, note, keys, ORIGIN) == []
        assert await verify_against_trusted_checkpoint(store, note, keys, "other.example/log") == [
            Failure(None, None, "origin", f"expected origin 'other.example/log', got {ORIGIN!r}",
                    where="checkpoint (tree size 3)")]
        # PROOF(3, D[8]) needs the stored node (1, 0), i.e. MTH(D[0:2])
        assert await verify_against_trusted_checkpoint(_Lossy(store, nodes={(1, 0)}), note, keys, ORIGIN) == [
            Failure(None, None, "consistency", "cannot compute the proof: Merkle node (1, 0) (level, index) is not "
                    "stored; run `sonate ledger reindex`", where="trusted checkpoint (tree size 3)")]
    finally:
        await store.close()


class _Rewritten(_Lossy):
    """A store whose range() answers other receipts than the ones stored (a gap, an unhashable receipt)."""

    def __init__(self, store: Any, edit: Any) -> None:
        super().__init__(store)
        self._edit = edit

    async def range(self, start: int, end: int) -> list[dict[str, Any]]:
        return self._edit(await self._store.range(start, end))


async def test_verify_tree_recomputes_nodes_and_checkpoints(tmp_path: Path, signer: Signer) -> None:
    """RFC 9162 §2.1.1: every stored node and checkpoint root is recomputed from the receipts."""
    from proxy.storage.base import TreeUpdate

    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    keys = {signer.key_id: signer.public_key}
    try:
        sealed = await Ledger(store, signer).append([make_receipt() for _ in range(8)])
        progress: list[int] = []
        assert await verify_tree(store, keys, ORIGIN, page=3, progress=progress.append) == (8, [])
        assert progress == [3, 3, 2]
        # a checkpoint beyond the tree, and one at the tree size whose root is not the receipts'
        beyond = sign_checkpoint(format_checkpoint(ORIGIN, 20, merkle.leaf_hash(b"x")), signer)
        forged = sign_checkpoint(format_checkpoint(ORIGIN, 8, merkle.leaf_hash(b"x")), signer)
        assert await store.put_checkpoint(20, beyond) and await store.put_checkpoint(8, forged)
        assert await verify_tree(store, keys, ORIGIN) == (8, [
            Failure(None, None, "checkpoint", "checkpoint for tree size 20 exceeds the stored tree (8 leaves)",
                    where="checkpoint (tree size 20)"),
            Failure(None, None, "checkpoint", "root hash differs from the root recomputed from the receipts",
                    where="checkpoint (tree size 8)")])
        checkpoint_fails = (await verify_tree(store, keys, ORIGIN))[1]
        # a stored node missing and one overwritten: named with the receipt that completed it
        assert await store.put_nodes(TreeUpdate(8, 8, {(1, 1): b"\x02" * 32})) is True
        assert await verify_tree(_Lossy(store, nodes={(0, 2)}), keys, ORIGIN) == (8, [
            *checkpoint_fails,  # checkpoints are checked as the leaves reach their size, nodes after each page
            Failure(2, sealed[2]["receipt_id"], "tree", "stored node (0, 2) (level, index) is missing"),
            Failure(3, sealed[3]["receipt_id"], "tree", "stored node (1, 1) (level, index) differs from the receipts")])
        # receipts missing below the tree size: the audit stops at that page
        gap = _Rewritten(store, lambda rs: [r for r in rs if r["ledger_height"] != 5])
        assert await verify_tree(gap, keys, ORIGIN, page=4) == (4, [
            checkpoint_fails[0],
            Failure(3, sealed[3]["receipt_id"], "tree", "stored node (1, 1) (level, index) differs from the receipts"),
            Failure(4, None, "tree", "receipts missing below the tree size", where=None)])
        unhashable = _Rewritten(store, lambda rs: [{**r, "evidence": {1: 2}} if r["ledger_height"] == 6 else r
                                                  for r in rs])
        assert await verify_tree(unhashable, keys, ORIGIN) == (6, [
            checkpoint_fails[0],
            Failure(6, sealed[6]["receipt_id"], "tree", "cannot hash the receipt: object keys must be strings")])
    finally:
        await store.close()


async def test_reindex_backfills_a_ledger_written_without_nodes(tmp_path: Path, signer: Signer) -> None:
    from proxy.receipts import entry_hash, seal
    from proxy.receipts.receipt import GENESIS_PREV_HASH
    from proxy.receipts.tree import reindex

    store = open_store(sqlite_url(tmp_path / "ledger.db"))
    try:
        assert await reindex(store) == 0  # an empty ledger: nothing to do
        with pytest.raises(ValueError, match="page must be >= 1"):
            await reindex(store, page=0)
        prev, batch = GENESIS_PREV_HASH, []
        for height in range(5):  # an older writer: receipts only, no tree nodes
            batch.append(seal(make_receipt(), ledger_height=height, prev_hash=prev, signer=signer))
            prev = entry_hash(batch[-1])
        assert await store.try_append(batch, None) is True and await store.tree_size() == 0
        assert await reindex(store, page=1) == 5  # one leaf per page, no progress callback
        assert [await leaf_hash_at(store, i) for i in range(5)] == [receipt_leaf_hash(r) for r in batch]
        assert await verify_tree(store, {signer.key_id: signer.public_key}) == (5, [])
    finally:
        await store.close()


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


# -- merkle.py: the leaf entry and the compact range of a size -------------------------------------


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
