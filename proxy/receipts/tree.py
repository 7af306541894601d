"""The ledger's Merkle tree over a store: roots, proofs, checkpoints, backfill and audit.

Reads go through :meth:`TreeStore.get_nodes <proxy.storage.base.TreeStore.get_nodes>` (stored perfect-subtree
nodes, see :mod:`proxy.primitives.merkle`), so a root or a proof costs one
batched read of O(log² n) nodes and never reads the log. Only
:func:`reindex` and :func:`verify_tree` stream receipts.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from proxy.primitives import merkle
from proxy.primitives.failure import Failure
from proxy.receipts.bundle import make_bundle
from proxy.receipts.proofs import receipt_leaf_hash
from proxy.storage.base import LedgerError, LedgerStore, TreeStore, TreeUpdate
from proxy.tlog.checkpoint import (
    CheckpointError,
    format_checkpoint,
    parse_checkpoint,
    sign_checkpoint,
    verify_checkpoint,
)

__all__ = [
    "DEFAULT_ORIGIN",
    "TreeError",
    "bundle_for",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash_at",
    "publish_checkpoint",
    "reindex",
    "tree_root",
    "verify_against_trusted_checkpoint",
    "verify_tree",
]

DEFAULT_ORIGIN = "sonate-trust-proxy/ledger"
"""Default log origin (checkpoint line 1 and note key name); config ``ledger.origin``."""


class TreeError(LedgerError):
    """The stored tree cannot answer: a size beyond the stored tree, or a node that should be stored is not."""


async def _nodes(store: TreeStore, ids: Sequence[merkle.NodeId]) -> dict[merkle.NodeId, bytes]:
    found = await store.get_nodes(ids)
    missing = [node for node, digest in zip(ids, found) if digest is None]
    if missing:
        raise TreeError(f"Merkle node {missing[0]} (level, index) is not stored; run `sonate ledger reindex`")
    return {node: digest for node, digest in zip(ids, found) if digest is not None}


async def _hashes(store: TreeStore, ranges: list[tuple[int, int]]) -> list[bytes]:
    ids = merkle.nodes_for_ranges(ranges)
    return merkle.hashes_for_ranges(ranges, await _nodes(store, ids))


async def _check_size(store: TreeStore, size: int) -> None:
    stored = await store.tree_size()
    if size > stored:
        raise TreeError(f"tree size {size} exceeds the stored tree ({stored} leaves)")


async def tree_root(store: TreeStore, size: int) -> bytes:
    """MTH of the first ``size`` leaves (RFC 9162 §2.1.1), from at most log2(size) stored nodes.

    Raises :class:`TreeError` (a ``LedgerError``) if those nodes are not stored.
    """
    if size == 0:
        return merkle.EMPTY_ROOT
    return (await _hashes(store, [(0, size)]))[0]


async def leaf_hash_at(store: TreeStore, index: int) -> bytes:
    """The stored leaf hash of leaf ``index`` (node (0, index)). Raises :class:`TreeError` if absent."""
    return (await _nodes(store, [(0, index)]))[(0, index)]


async def inclusion_proof(store: TreeStore, index: int, size: int) -> list[bytes]:
    """RFC 9162 §2.1.3.1 inclusion path of leaf ``index`` in the tree of ``size`` leaves.

    Raises :class:`proxy.primitives.merkle.MerkleError` (``ValueError``) unless
    ``0 <= index < size``, :class:`TreeError` if ``size`` exceeds the stored tree.
    """
    ranges = merkle.inclusion_ranges(index, size)
    await _check_size(store, size)
    return await _hashes(store, ranges)


async def consistency_proof(store: TreeStore, first: int, second: int) -> list[bytes]:
    """RFC 9162 §2.1.4.1 consistency proof between tree sizes ``first`` <= ``second``.

    Raises :class:`proxy.primitives.merkle.MerkleError` (``ValueError``) for
    sizes out of order, :class:`TreeError` if ``second`` exceeds the stored tree.
    """
    ranges = merkle.consistency_ranges(first, second)
    await _check_size(store, second)
    return await _hashes(store, ranges)


async def publish_checkpoint(store: TreeStore, signer: Any, origin: str = DEFAULT_ORIGIN,
                             size: int | None = None) -> str | None:
    """Sign and store a checkpoint for tree ``size`` (default: the stored tree size); return its note.

    Idempotent: if a checkpoint for that size is stored already (another
    process published it), the stored note is returned. Returns None for an
    empty tree. ``signer``: a :class:`proxy.receipts.signing.Signer`.
    Raises :class:`TreeError` for a size beyond the stored tree.
    """
    if size is None:
        size = await store.tree_size()
    else:
        await _check_size(store, size)
    if size == 0:
        return None
    note = sign_checkpoint(format_checkpoint(origin, size, await tree_root(store, size)), signer)
    if await store.put_checkpoint(size, note):
        return note
    return await store.get_checkpoint(size) or note


async def bundle_for(store: LedgerStore, receipt: dict[str, Any], public_keys: Sequence[dict[str, Any]],
                     signer: Any = None, origin: str = DEFAULT_ORIGIN) -> dict[str, Any]:
    """Build the offline bundle of a stored receipt (format: :mod:`proxy.receipts.bundle`).

    Uses the latest stored checkpoint when it covers the receipt's height;
    otherwise, with a ``signer``, publishes one for the current stored tree
    (idempotent, as the background publisher would). ``public_keys``: key
    entries as in ``GET /v1/keys``. Raises :class:`TreeError` when no
    checkpoint covers the receipt (and none can be signed) or the tree has
    not indexed it yet (``sonate ledger reindex``).
    """
    height = receipt["ledger_height"]
    note = await store.latest_checkpoint()
    size = parse_checkpoint(note).tree_size if note is not None else 0
    if size <= height:
        stored = await store.tree_size()
        if stored <= height:
            raise TreeError(f"the Merkle tree does not include height {height} yet (tree size {stored}); "
                            "run `sonate ledger reindex`")
        if signer is None:
            raise TreeError(f"no checkpoint covers height {height} yet (latest: tree size {size}); wait for the "
                            "next checkpoint or run `sonate ledger checkpoint --publish`")
        note = await publish_checkpoint(store, signer, origin, stored)
        assert note is not None
        size = parse_checkpoint(note).tree_size
    hashes = await inclusion_proof(store, height, size)
    assert note is not None  # size > height: a checkpoint covers the receipt
    return make_bundle(receipt, size, hashes, note, public_keys)


async def reindex(store: LedgerStore, page: int = 1000, progress: Callable[[int], None] | None = None) -> int:
    """Backfill Merkle nodes for receipts stored without them; return the tree size reached.

    Streams receipts from the stored tree size to the head in pages of
    ``page``, computes their leaves and nodes, and stores each page with a
    compare-and-set on the tree size (:meth:`LedgerStore.put_nodes`), so it
    is safe while proxies append and while another reindex runs.
    ``progress(n)`` is called with the number of leaves added per page.
    Raises :class:`TreeError` for a gap in the stored heights or a missing
    frontier node, ``LedgerUnavailable`` when the store is down.
    """
    if page < 1:
        raise ValueError("page must be >= 1")
    while True:
        size = await store.tree_size()
        head = await store.head()
        top = 0 if head is None else head.height + 1
        if size >= top:
            return size
        frontier = list((await _nodes(store, merkle.frontier_ids(size))).values()) if size else []
        receipts = await store.range(size, min(size + page, top))
        for offset, receipt in enumerate(receipts):
            if receipt.get("ledger_height") != size + offset:
                raise TreeError(f"height {size + offset} is missing from the stored receipts")
        if not receipts:
            raise TreeError(f"height {size} is missing from the stored receipts")
        nodes, _ = merkle.extend(size, frontier, [receipt_leaf_hash(r) for r in receipts])
        if await store.put_nodes(TreeUpdate(size, size + len(receipts), nodes)) and progress is not None:
            progress(len(receipts))


async def verify_tree(store: LedgerStore, public_keys: Mapping[str, bytes], origin: str | None = None,
                      page: int = 1000, progress: Callable[[int], None] | None = None) -> tuple[int, list[Failure]]:
    """Audit the stored tree against the receipts and the stored checkpoints; return ``(leaves, failures)``.

    Recomputes every leaf and node from the receipts (heights ``0 ..
    tree_size-1``) and compares them with the stored nodes (check ``tree``),
    and for every stored checkpoint: its signature by ``public_keys`` and
    origin (see :func:`proxy.tlog.checkpoint.verify_checkpoint`) and that
    its root is the recomputed root of its size (check ``checkpoint``; a
    checkpoint beyond the stored tree is reported too). Reads the whole log.
    """
    size = await store.tree_size()
    sizes = await store.checkpoint_sizes()
    failures: list[Failure] = []
    pending = [s for s in sizes if s <= size]
    for beyond in (s for s in sizes if s > size):
        failures.append(Failure(None, None, "checkpoint", f"checkpoint for tree size {beyond} exceeds the stored "
                                f"tree ({size} leaves)", where=f"checkpoint (tree size {beyond})"))
    frontier: list[bytes] = []
    done = 0
    while done < size:
        receipts = await store.range(done, min(done + page, size))
        if not receipts or any(r.get("ledger_height") != done + i for i, r in enumerate(receipts)):
            failures.append(Failure(done, None, "tree", "receipts missing below the tree size", where=None))
            break
        expected: dict[merkle.NodeId, tuple[bytes, int, Any]] = {}
        for receipt in receipts:
            try:
                leaf = receipt_leaf_hash(receipt)
            except (TypeError, ValueError) as exc:
                failures.append(Failure(done, receipt.get("receipt_id"), "tree", f"cannot hash the receipt: {exc}"))
                return done, failures
            nodes, frontier = merkle.extend(done, frontier, [leaf])
            for node, digest in nodes.items():
                expected[node] = (digest, done, receipt.get("receipt_id"))
            done += 1
            while pending and pending[0] == done:
                failures += await _check_stored_checkpoint(store, done, merkle.root_from_frontier(frontier),
                                                           public_keys, origin)
                pending.pop(0)
        ids = list(expected)
        for node, stored in zip(ids, await store.get_nodes(ids)):
            digest, height, receipt_id = expected[node]
            if stored != digest:
                state = "is missing" if stored is None else "differs from the receipts"
                failures.append(Failure(height, receipt_id, "tree", f"stored node {node} (level, index) {state}"))
        if progress is not None:
            progress(len(receipts))
    return done, failures


async def _check_stored_checkpoint(store: LedgerStore, size: int, root: bytes, public_keys: Mapping[str, bytes],
                                   origin: str | None) -> list[Failure]:
    note = await store.get_checkpoint(size)
    where = f"checkpoint (tree size {size})"
    if note is None:
        return [Failure(None, None, "checkpoint", "listed but not stored", where=where)]
    fails = verify_checkpoint(note, public_keys, origin)
    try:
        parsed = parse_checkpoint(note)
    except CheckpointError:
        return fails
    if parsed.tree_size != size:
        fails.append(Failure(None, None, "checkpoint", f"stored under size {size} but says {parsed.tree_size}",
                             where=where))
    elif parsed.root_hash != root:
        fails.append(Failure(None, None, "checkpoint", "root hash differs from the root recomputed from the receipts",
                             where=where))
    return fails


async def verify_against_trusted_checkpoint(store: LedgerStore, note: str, public_keys: Mapping[str, bytes],
                                            origin: str | None = None) -> list[Failure]:
    """Prove the stored ledger still extends a checkpoint the verifier saved earlier; return failures.

    ``note``: a C2SP signed checkpoint (``GET /v1/ledger/checkpoint``) kept *outside* the ledger's
    database. Checks: its signature by ``public_keys`` and origin
    (:func:`proxy.tlog.checkpoint.verify_checkpoint`, whose failures carry its own
    ``where="checkpoint (tree size M)"``), then, with ``where="trusted checkpoint (tree size M)"``,
    ``truncated`` when the stored receipts or tree hold fewer than M leaves (a tail deleted), then
    ``consistency`` when the RFC 9162 §2.1.4 consistency proof from M to the stored tree size N,
    computed from the stored nodes, does not lead from the saved root to the root of the stored tree
    (history below M rewritten). The stored nodes themselves are audited against the receipts by
    :func:`verify_tree` (``sonate verify --ledger`` over the whole ledger). Raises
    ``LedgerUnavailable`` when the store is down.
    """
    fails = list(verify_checkpoint(note, public_keys, origin))
    try:
        saved = parse_checkpoint(note)
    except CheckpointError:
        return fails
    size = saved.tree_size
    where = f"trusted checkpoint (tree size {size})"
    head = await store.head()
    receipts, stored = (0 if head is None else head.height + 1), await store.tree_size()
    if min(receipts, stored) < size:
        return fails + [Failure(None, None, "truncated",
                                f"the ledger holds {receipts} receipts and a tree of {stored} leaves, but the "
                                f"checkpoint saved earlier commits to {size}: receipts were deleted", where=where)]
    try:
        proof = await consistency_proof(store, size, stored)
        root = await tree_root(store, stored)
    except (TreeError, ValueError) as exc:
        return fails + [Failure(None, None, "consistency", f"cannot compute the proof: {exc}", where=where)]
    if not merkle.verify_consistency_path(size, stored, saved.root_hash, root, proof):
        fails.append(Failure(None, None, "consistency",
                             f"the stored tree of {stored} leaves does not extend the saved root (RFC 9162 "
                             f"§2.1.4.2): history below height {size} was rewritten", where=where))
    return fails
