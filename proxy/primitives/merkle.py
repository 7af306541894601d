"""RFC 9162 Merkle tree hashing, proofs and their verification, over stored subtree nodes.

Pure: no I/O. The tree is the one of RFC 9162 §2.1 (Certificate Transparency v2,
unchanged from RFC 6962): ``leaf_hash(d) = SHA-256(0x00 ‖ d)``,
``node_hash(l, r) = SHA-256(0x01 ‖ l ‖ r)``, ``MTH({}) = SHA-256("")`` and,
for n > 1, ``MTH(D[n]) = node_hash(MTH(D[0:k]), MTH(D[k:n]))`` with k the
largest power of two smaller than n.

The leaf entry of a trust receipt is the 32 raw bytes of its chain entry hash
(:func:`receipt_leaf`): the tree is built over the same hash chain that
docs/architecture.md ("Trust receipts") fixes, so a receipt proves its
place in the tree without any other receipt.

**Stored nodes.** A node id ``(level, index)`` names the perfect subtree
covering leaves ``[index·2^level, (index+1)·2^level)``; level 0 holds leaf
hashes. Such a node is *complete* (and never changes) once the tree has
``(index+1)·2^level`` leaves, so stores keep exactly the complete nodes: about
two per leaf. Every hash a root or proof needs is a right fold of a few of
them (:func:`range_nodes`), so proofs read O(log² n) nodes and never the log.
Proof generation is split so I/O stays outside: a ``*_ranges`` function says
which subtree hashes are needed, :func:`nodes_for_ranges` which stored nodes
cover them, and :func:`hashes_for_ranges` folds the fetched nodes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Iterable, Mapping, Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MerkleError",
    "NodeId",
    "b64_decode_hash",
    "b64_encode_hash",
    "consistency_ranges",
    "extend",
    "frontier_ids",
    "hashes_for_ranges",
    "inclusion_ranges",
    "leaf_hash",
    "node_hash",
    "nodes_for_ranges",
    "range_nodes",
    "receipt_leaf",
    "root_from_frontier",
    "root_of_leaves",
    "root_from_inclusion",
    "verify_consistency_path",
    "verify_inclusion_path",
]

HASH_SIZE = 32
"""Bytes in every leaf, node and root hash (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH of the empty tree (RFC 9162 §2.1.1)."""

NodeId = tuple[int, int]
"""``(level, index)``: the perfect subtree over leaves ``[index·2^level, (index+1)·2^level)``."""


class MerkleError(ValueError):
    """Bad tree arguments (an index outside the tree, sizes out of order, a malformed hash or proof)."""


def leaf_hash(entry: bytes) -> bytes:
    """Return ``SHA-256(0x00 ‖ entry)``: the hash of one leaf (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x00" + bytes(entry)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return ``SHA-256(0x01 ‖ left ‖ right)``: an interior node (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def receipt_leaf(entry_hash_ref: str) -> bytes:
    """Return the leaf entry of a receipt: the 32 raw bytes of its entry hash.

    ``entry_hash_ref`` is :func:`proxy.receipts.receipt.entry_hash` output,
    ``"sha256:" + 64 lowercase hex``. Raises :class:`MerkleError` otherwise.
    """
    if not isinstance(entry_hash_ref, str) or not entry_hash_ref.startswith("sha256:") or len(entry_hash_ref) != 71:
        raise MerkleError(f"not a sha256: entry hash: {entry_hash_ref!r}")
    digest = entry_hash_ref[7:]
    if digest != digest.lower():
        raise MerkleError(f"entry hash must be lowercase hex: {entry_hash_ref!r}")
    try:
        return bytes.fromhex(digest)
    except ValueError:
        raise MerkleError(f"entry hash is not hex: {entry_hash_ref!r}") from None


def b64_encode_hash(digest: bytes) -> str:
    """Standard padded base64 (RFC 4648 §4) of a hash, as proofs and checkpoints carry it."""
    return base64.b64encode(digest).decode("ascii")


def b64_decode_hash(text: object) -> bytes:
    """Decode a standard padded base64 hash of :data:`HASH_SIZE` bytes, strictly.

    Only the canonical encoding (44 characters, ``=`` padded) is accepted so a
    proof or checkpoint has one text per value. Raises :class:`MerkleError`.
    """
    if not isinstance(text, str) or len(text) != 44:
        raise MerkleError(f"not a base64 SHA-256 hash (44 characters): {text!r}")
    try:
        digest = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MerkleError(f"not valid base64: {text!r}") from None
    if len(digest) != HASH_SIZE or base64.b64encode(digest).decode("ascii") != text:
        raise MerkleError(f"not a canonical base64 SHA-256 hash: {text!r}")
    return digest


def _split(n: int) -> int:
    """Largest power of two strictly smaller than ``n`` (n >= 2), RFC 9162 §2.1.1."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise MerkleError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


# -- which subtree hashes a root / proof needs ------------------------------------------------


def range_nodes(start: int, end: int) -> list[NodeId]:
    """Return the stored nodes whose right fold is ``MTH(D[start:end])``, left to right.

    Valid for the subtrees RFC 9162 proofs use: ``start`` a multiple of a
    power of two ``>= end - start`` (so ``start = 0`` always works). The
    range splits greedily into aligned perfect subtrees, largest first, which
    is exactly the RFC's split at the largest power of two below the size.
    Raises :class:`MerkleError` for an empty or unaligned range.
    """
    if not 0 <= start < end:
        raise MerkleError(f"empty or negative leaf range [{start}, {end})")
    size = end - start
    if start and start % (1 << (size - 1).bit_length()):
        raise MerkleError(f"leaf range [{start}, {end}) is not an RFC 9162 subtree")
    nodes: list[NodeId] = []
    position = start
    while position < end:
        level = (end - position).bit_length() - 1
        nodes.append((level, position >> level))
        position += 1 << level
    return nodes


def frontier_ids(size: int) -> list[NodeId]:
    """Return the perfect subtrees of a tree of ``size`` leaves (its compact range), left to right.

    One node per set bit of ``size``; their right fold is the root. Empty for size 0.
    """
    _check_int("tree size", size, 0)
    return range_nodes(0, size) if size else []


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """Leaf ranges whose MTHs form ``PATH(index, D[size])``, in proof order (RFC 9162 §2.1.3.1).

    Raises :class:`MerkleError` unless ``0 <= index < size``.
    """
    _check_int("tree size", size, 1)
    _check_int("leaf index", index, 0)
    if index >= size:
        raise MerkleError(f"leaf index {index} is outside a tree of size {size}")
    ranges: list[tuple[int, int]] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo = lo + k
    ranges.reverse()  # the recursion appends on the way back up: leaf-side first
    return ranges


def consistency_ranges(first: int, second: int) -> list[tuple[int, int]]:
    """Leaf ranges whose MTHs form ``PROOF(first, D[second])`` (RFC 9162 §2.1.4.1).

    ``0 <= first <= second``; an empty list when ``first`` is 0 or equals
    ``second`` (nothing to prove). Raises :class:`MerkleError` otherwise.
    """
    _check_int("first tree size", first, 0)
    _check_int("second tree size", second, 0)
    if first > second:
        raise MerkleError(f"first tree size {first} exceeds second tree size {second}")
    if first == 0 or first == second:
        return []
    ranges: list[tuple[int, int]] = []
    lo, hi, m, whole = 0, second, first, True
    while True:
        n = hi - lo
        if m == n:
            if not whole:
                ranges.append((lo, hi))
            break
        k = _split(n)
        if m <= k:
            ranges.append((lo + k, hi))
            hi = lo + k
        else:
            ranges.append((lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    ranges.reverse()
    return ranges


def nodes_for_ranges(ranges: Iterable[tuple[int, int]]) -> list[NodeId]:
    """Every stored node the given ranges need, deduplicated, in first-use order."""
    seen: dict[NodeId, None] = {}
    for start, end in ranges:
        for node in range_nodes(start, end):
            seen.setdefault(node, None)
    return list(seen)


def _fold(hashes: Sequence[bytes]) -> bytes:
    """Right fold: ``node_hash(h0, node_hash(h1, ... node_hash(h_{n-2}, h_{n-1})))``."""
    acc = hashes[-1]
    for digest in reversed(hashes[:-1]):
        acc = node_hash(digest, acc)
    return acc


def hashes_for_ranges(ranges: Iterable[tuple[int, int]], nodes: Mapping[NodeId, bytes]) -> list[bytes]:
    """Return ``MTH(D[start:end])`` for each range from stored ``nodes``.

    Raises :class:`MerkleError` naming the first node missing from ``nodes``.
    """
    out = []
    for start, end in ranges:
        parts = []
        for node in range_nodes(start, end):
            digest = nodes.get(node)
            if digest is None:
                raise MerkleError(f"tree node {node} (level, index) is not stored")
            parts.append(digest)
        out.append(_fold(parts))
    return out


def root_from_frontier(frontier: Sequence[bytes]) -> bytes:
    """The root (MTH) from the compact range of :func:`frontier_ids`; :data:`EMPTY_ROOT` if empty."""
    return _fold(frontier) if frontier else EMPTY_ROOT


# -- appending -------------------------------------------------------------------------------------


def extend(size: int, frontier: Sequence[bytes], leaves: Iterable[bytes]) -> tuple[dict[NodeId, bytes], list[bytes]]:
    """Append leaf hashes to a tree of ``size`` leaves known by its compact range.

    ``frontier``: the hashes of :func:`frontier_ids(size) <frontier_ids>`, in
    order; ``leaves``: leaf hashes (:func:`leaf_hash`) of the new entries.
    Returns ``(new_nodes, new_frontier)``: every node completed by the new
    leaves (level 0 included), and the compact range of the grown tree.
    Raises :class:`MerkleError` if the frontier does not match ``size``.
    """
    ids = frontier_ids(size)
    if len(frontier) != len(ids):
        raise MerkleError(f"a tree of size {size} has {len(ids)} frontier nodes, got {len(frontier)}")
    stack: list[tuple[NodeId, bytes]] = list(zip(ids, frontier))
    created: dict[NodeId, bytes] = {}
    for leaf in leaves:
        if len(leaf) != HASH_SIZE:
            raise MerkleError("leaf hashes must be 32 bytes")
        node, digest = (0, size), bytes(leaf)
        created[node] = digest
        while node[1] & 1:  # a right child completes its parent
            _, left = stack.pop()
            node, digest = (node[0] + 1, node[1] >> 1), node_hash(left, digest)
            created[node] = digest
        stack.append((node, digest))
        size += 1
    return created, [digest for _, digest in stack]


def root_of_leaves(leaves: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes (reference helper for tests and small trees)."""
    _, frontier = extend(0, [], leaves)
    return root_from_frontier(frontier)


# -- verification (RFC 9162 §2.1.3.2 and §2.1.4.2) ------------------------------------------------


def _as_hashes(proof: Sequence[bytes]) -> list[bytes] | None:
    if not isinstance(proof, (list, tuple)):
        return None
    if any(not isinstance(p, (bytes, bytearray)) or len(p) != HASH_SIZE for p in proof):
        return None
    return [bytes(p) for p in proof]


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes | None:
    """The root an inclusion proof leads to, or None if the proof is malformed for (index, size).

    RFC 9162 §2.1.3.2 steps 1-5 (``leaf`` is the leaf *hash*); the caller
    compares the result with a trusted root (:func:`verify_inclusion_path`).
    """
    hashes = _as_hashes(proof)
    if hashes is None or not isinstance(leaf, (bytes, bytearray)) or len(leaf) != HASH_SIZE:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (index, size)) or not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, bytes(leaf)
    for p in hashes:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion_path(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """True iff ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size`` with ``root``.

    RFC 9162 §2.1.3.2: the raw audit path (compare
    :func:`proxy.receipts.proofs.verify_inclusion_proof` for a JSON proof
    document against a signed checkpoint). An ``index`` outside
    ``0 <= index < size`` is never included. Never raises: malformed input
    returns False.
    """
    computed = root_from_inclusion(index, size, leaf, proof)
    return computed is not None and isinstance(root, (bytes, bytearray)) and computed == bytes(root)


def verify_consistency_path(first: int, second: int, first_root: bytes, second_root: bytes,
                       proof: Sequence[bytes]) -> bool:
    """True iff ``proof`` shows the tree (``first``, ``first_root``) is a prefix of (``second``, ``second_root``).

    RFC 9162 §2.1.4.2: the raw proof path (compare
    :func:`proxy.receipts.proofs.verify_consistency_proof` for a JSON proof
    document between signed checkpoints). ``first == second`` needs an empty proof and equal
    roots; ``first == 0`` needs an empty proof (and the empty root). Never
    raises: malformed input returns False.
    """
    hashes = _as_hashes(proof)
    if hashes is None:
        return False
    if not all(isinstance(v, (bytes, bytearray)) and len(v) == HASH_SIZE for v in (first_root, second_root)):
        return False
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (first, second)):
        return False
    if not 0 <= first <= second:
        return False
    if first == 0:
        return not hashes and bytes(first_root) == EMPTY_ROOT
    if first == second:
        return not hashes and bytes(first_root) == bytes(second_root)
    if not hashes:
        return False
    if first & (first - 1) == 0:  # a power of two: first_root is the proof's implicit first node
        hashes = [bytes(first_root)] + hashes
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = hashes[0]
    for c in hashes[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == bytes(first_root) and sr == bytes(second_root) and sn == 0
