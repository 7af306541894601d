"""The Merkle tree over a real ledger (proxy/receipts/tree.py), in process over SQLite:
:func:`proxy.receipts.tree.bundle_for` and :func:`proxy.receipts.tree.leaf_hash_at`, the audit of stored nodes and checkpoints (:func:`~proxy.receipts.tree.verify_tree`,
RFC 9162 §2.1.1), a checkpoint kept outside the ledger, and the reindex of a ledger written without nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.primitives import merkle
from proxy.primitives.failure import Failure
from proxy.receipts import Ledger, Signer, open_store, public_key_entry
from proxy.receipts.bundle import make_bundle, verify_bundle
from proxy.receipts.proofs import (
    receipt_leaf_hash,
)
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
