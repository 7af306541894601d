"""RFC 9162 Merkle tree: published CT vectors, an independent recursive reference, proofs and tampering.

The vectors (leaves, roots for sizes 0..8, inclusion and consistency paths) are the Certificate
Transparency reference data also shipped by transparency-dev/merkle (testonly/constants.go).
"""

from __future__ import annotations

import hashlib
import itertools

import pytest

from proxy.primitives import merkle
from proxy.primitives.merkle import MerkleError, inclusion_ranges, leaf_hash, root_from_inclusion

CT_ENTRIES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f")]
CT_ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]
CT_INCLUSION = {
    (0, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (5, 8): ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}
CT_CONSISTENCY = {
    (2, 8): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 5): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
}


# -- an independent reference: the RFC's recursive definitions, straight from the text ----------


def ref_mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH over leaf *hashes*."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + ref_mth(leaves[:k]) + ref_mth(leaves[k:])).digest()


def ref_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(m, D[n])."""
    n = len(leaves)
    if n == 1:
        return []
    k = 1
    while k * 2 < n:
        k *= 2
    if m < k:
        return ref_path(m, leaves[:k]) + [ref_mth(leaves[k:])]
    return ref_path(m - k, leaves[k:]) + [ref_mth(leaves[:k])]


def ref_subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """RFC 9162 §2.1.4.1 SUBPROOF(m, D[n], b)."""
    n = len(leaves)
    if m == n:
        return [] if whole else [ref_mth(leaves)]
    k = 1
    while k * 2 < n:
        k *= 2
    if m <= k:
        return ref_subproof(m, leaves[:k], whole) + [ref_mth(leaves[k:])]
    return ref_subproof(m - k, leaves[k:], False) + [ref_mth(leaves[:k])]


LEAVES = [merkle.leaf_hash(bytes([i, i * 7 % 256])) for i in range(37)]
NODES, _ = merkle.extend(0, [], LEAVES)


def proof(ranges_fn, *args) -> list[bytes]:
    return merkle.hashes_for_ranges(ranges_fn(*args), NODES)


# -- hashing and the published vectors ------------------------------------------------------------


def test_leaf_and_node_hash_prefixes() -> None:
    assert merkle.leaf_hash(b"") == hashlib.sha256(b"\x00").digest() == CT_ROOTS[1]
    left, right = merkle.leaf_hash(b"l"), merkle.leaf_hash(b"r")
    assert merkle.node_hash(left, right) == hashlib.sha256(b"\x01" + left + right).digest()
    assert merkle.node_hash(left, right) != merkle.node_hash(right, left)
    assert merkle.EMPTY_ROOT == CT_ROOTS[0]


def test_roots_match_the_ct_vectors_for_every_size() -> None:
    leaves = [merkle.leaf_hash(e) for e in CT_ENTRIES]
    nodes, _ = merkle.extend(0, [], leaves)
    for size in range(len(CT_ROOTS)):
        assert merkle.root_of_leaves(leaves[:size]) == CT_ROOTS[size], size
        if size:  # the same root folded from stored nodes only
            assert merkle.hashes_for_ranges([(0, size)], nodes) == [CT_ROOTS[size]]


def test_proofs_match_the_ct_vectors() -> None:
    leaves = [merkle.leaf_hash(e) for e in CT_ENTRIES]
    nodes, _ = merkle.extend(0, [], leaves)
    for (index, size), expected in CT_INCLUSION.items():
        got = merkle.hashes_for_ranges(merkle.inclusion_ranges(index, size), nodes)
        assert [h.hex() for h in got] == expected
        assert merkle.verify_inclusion_path(index, size, leaves[index], got, CT_ROOTS[size])
    for (first, second), expected in CT_CONSISTENCY.items():
        got = merkle.hashes_for_ranges(merkle.consistency_ranges(first, second), nodes)
        assert [h.hex() for h in got] == expected
        assert merkle.verify_consistency_path(first, second, CT_ROOTS[first], CT_ROOTS[second], got)


def test_receipt_leaf_is_the_raw_entry_hash() -> None:
    ref = "sha256:" + "ab" * 32
    assert merkle.receipt_leaf(ref) == bytes([0xAB]) * 32
    for bad in ("ab" * 32, "sha256:" + "AB" * 32, "sha256:" + "zz" * 32, "sha256:abc", None):
        with pytest.raises(MerkleError):
            merkle.receipt_leaf(bad)


def test_base64_hashes_are_strict() -> None:
    digest = bytes(range(32))
    text = merkle.b64_encode_hash(digest)
    assert text.endswith("=") and len(text) == 44 and merkle.b64_decode_hash(text) == digest
    for bad in (text[:-1], text.replace("=", "A"), text[:-2] + "B=", "!" * 44,
                merkle.b64_encode_hash(digest).replace("+", "-"), 5):
        if bad == text:
            continue
        with pytest.raises(MerkleError):
            merkle.b64_decode_hash(bad)


# -- against the recursive reference, every shape -------------------------------------------------


def test_stored_nodes_give_the_reference_root_path_and_proof_for_every_size() -> None:
    for size in range(1, len(LEAVES) + 1):
        root = ref_mth(LEAVES[:size])
        assert merkle.root_of_leaves(LEAVES[:size]) == root
        assert merkle.hashes_for_ranges([(0, size)], NODES) == [root]
        for index in range(size):
            path = proof(merkle.inclusion_ranges, index, size)
            assert path == ref_path(index, LEAVES[:size]), (index, size)
            assert merkle.verify_inclusion_path(index, size, LEAVES[index], path, root)


def test_consistency_between_all_size_pairs() -> None:
    roots = [ref_mth(LEAVES[:n]) for n in range(len(LEAVES) + 1)]
    for first, second in itertools.combinations_with_replacement(range(0, 24), 2):
        got = proof(merkle.consistency_ranges, first, second)
        if 0 < first < second:
            assert got == ref_subproof(first, LEAVES[:second], True), (first, second)
        else:
            assert got == []
        assert merkle.verify_consistency_path(first, second, roots[first], roots[second], got), (first, second)
        if first and first < second:
            other = roots[first - 1] if first > 1 else roots[second]
            assert not merkle.verify_consistency_path(first, second, other, roots[second], got)
            assert not merkle.verify_consistency_path(first, second, roots[first], roots[second - 1], got)


def test_extend_in_batches_equals_extend_at_once() -> None:
    nodes: dict = {}
    frontier: list[bytes] = []
    size = 0
    for batch in (1, 2, 3, 5, 8, 13, 5):
        created, frontier = merkle.extend(size, frontier, LEAVES[size:size + batch])
        nodes.update(created)
        size += batch
        assert frontier == [NODES[n] for n in merkle.frontier_ids(size)]
        assert merkle.root_from_frontier(frontier) == ref_mth(LEAVES[:size])
    assert nodes == NODES
    with pytest.raises(MerkleError):
        merkle.extend(5, frontier, LEAVES[:1])  # frontier of 37, not of 5


def test_a_proof_reads_log_squared_nodes_not_the_log() -> None:
    size = 1_000_000
    for index in (0, 1, 500_000, 999_999):
        needed = merkle.nodes_for_ranges(merkle.inclusion_ranges(index, size))
        assert len(needed) <= 20 * 20
    assert len(merkle.nodes_for_ranges(merkle.consistency_ranges(777_777, size))) <= 400
    assert len(merkle.frontier_ids(size)) == bin(size).count("1")


# -- tampering -------------------------------------------------------------------------------------


def flip(digest: bytes, bit: int = 0) -> bytes:
    return bytes([digest[0] ^ (1 << bit)]) + digest[1:]


def test_every_flipped_inclusion_hash_fails() -> None:
    for size in (1, 2, 3, 7, 8, 13, 37):
        root = ref_mth(LEAVES[:size])
        for index in range(size):
            path = proof(merkle.inclusion_ranges, index, size)
            assert not merkle.verify_inclusion_path(index, size, flip(LEAVES[index]), path, root)
            assert not merkle.verify_inclusion_path(index, size, LEAVES[index], path, flip(root))
            for position in range(len(path)):
                bad = list(path)
                bad[position] = flip(bad[position], position % 8)
                assert not merkle.verify_inclusion_path(index, size, LEAVES[index], bad, root), (index, size, position)
            if path:
                assert not merkle.verify_inclusion_path(index, size, LEAVES[index], path[:-1], root)
            assert not merkle.verify_inclusion_path(index, size, LEAVES[index], path + [LEAVES[0]], root)
            if size > 1:  # the same path at another index
                other = (index + 1) % size
                if ref_path(other, LEAVES[:size]) != path or LEAVES[other] != LEAVES[index]:
                    assert not merkle.verify_inclusion_path(other, size, LEAVES[index], path, root)


def test_every_flipped_consistency_hash_fails() -> None:
    roots = [ref_mth(LEAVES[:n]) for n in range(len(LEAVES) + 1)]
    for first, second in itertools.combinations(range(1, 20), 2):
        good = proof(merkle.consistency_ranges, first, second)
        for position in range(len(good)):
            bad = list(good)
            bad[position] = flip(bad[position])
            assert not merkle.verify_consistency_path(first, second, roots[first], roots[second], bad), (first, second)
        assert not merkle.verify_consistency_path(first, second, roots[first], roots[second], good[:-1])
        assert not merkle.verify_consistency_path(first, second, roots[first], roots[second], good + [roots[1]])
        if len(good) >= 2 and good[0] != good[1]:
            swapped = [good[1], good[0], *good[2:]]
            assert not merkle.verify_consistency_path(first, second, roots[first], roots[second], swapped)


def test_inclusion_rejects_an_index_outside_the_tree() -> None:
    """index >= size is no leaf of the tree, even when the path would fold to the root."""
    leaf = LEAVES[0]
    assert merkle.verify_inclusion_path(0, 1, leaf, [], leaf)  # the one-leaf tree: root == leaf hash
    assert not merkle.verify_inclusion_path(1, 1, leaf, [], leaf)
    assert merkle.root_from_inclusion(1, 1, leaf, []) is None
    for size in (2, 3, 5, 8):
        root = ref_mth(LEAVES[:size])
        last = proof(merkle.inclusion_ranges, size - 1, size)
        assert merkle.verify_inclusion_path(size - 1, size, LEAVES[size - 1], last, root)
        for index in (size, size + 1, 2 * size):
            assert not merkle.verify_inclusion_path(index, size, LEAVES[size - 1], last, root), (index, size)
    assert not merkle.verify_inclusion_path(0, 0, merkle.EMPTY_ROOT, [], merkle.EMPTY_ROOT)


def test_malformed_inputs_return_false_or_raise_merkle_error() -> None:
    root = ref_mth(LEAVES[:8])
    path = proof(merkle.inclusion_ranges, 3, 8)
    assert not merkle.verify_inclusion_path(8, 8, LEAVES[3], path, root)
    assert not merkle.verify_inclusion_path(-1, 8, LEAVES[3], path, root)
    assert not merkle.verify_inclusion_path(3, 8, LEAVES[3][:31], path, root)
    assert not merkle.verify_inclusion_path(3, 8, LEAVES[3], [path[0][:31], *path[1:]], root)
    assert not merkle.verify_inclusion_path(3, 8, LEAVES[3], "not a list", root)  # type: ignore[arg-type]
    assert not merkle.verify_inclusion_path(True, 8, LEAVES[3], path, root)  # type: ignore[arg-type]
    assert not merkle.verify_consistency_path(8, 4, root, root, [])
    assert not merkle.verify_consistency_path(4, 8, root, root, [])
    assert merkle.verify_consistency_path(0, 8, merkle.EMPTY_ROOT, root, [])
    assert not merkle.verify_consistency_path(0, 8, root, root, [])
    assert not merkle.verify_consistency_path(8, 8, root, root, [root])
    with pytest.raises(MerkleError):
        merkle.inclusion_ranges(8, 8)
    with pytest.raises(MerkleError):
        merkle.consistency_ranges(5, 3)
    with pytest.raises(MerkleError, match="not stored"):
        merkle.hashes_for_ranges([(0, 9)], {})
    with pytest.raises(MerkleError, match="not an RFC 9162 subtree"):
        merkle.range_nodes(3, 6)


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_index_equal_to_size_is_outside_the_tree(size: int) -> None:
    leaf = leaf_hash(b"entry")
    with pytest.raises(MerkleError, match="outside a tree"):
        inclusion_ranges(size, size)
    assert root_from_inclusion(size, size, leaf, [leaf] * size.bit_length()) is None
    assert root_from_inclusion(size, size, leaf, []) is None
    assert inclusion_ranges(size - 1, size) is not None


def test_bad_proof_arguments_give_none_never_a_root() -> None:
    """Never raises, never returns a root for: a bool index, a short leaf hash, a proof too short."""
    leaf = leaf_hash(b"entry")
    assert root_from_inclusion(0, 1, leaf, []) == leaf
    assert root_from_inclusion(True, 2, leaf, [leaf]) is None
    assert root_from_inclusion(0, True, leaf, []) is None
    assert root_from_inclusion(0.0, 2, leaf, [leaf]) is None  # type: ignore[arg-type]
    assert root_from_inclusion(0, 1, leaf[:31], []) is None
    assert root_from_inclusion(0, 4, leaf, [leaf]) is None  # a tree of 4 needs a path of 2
    assert root_from_inclusion(0, 4, leaf, [leaf, leaf]) is not None


def test_range_errors_name_the_argument() -> None:
    with pytest.raises(MerkleError, match="^tree size must be an integer >= 1"):
        inclusion_ranges(0, 0)
    with pytest.raises(MerkleError, match="^leaf index must be an integer >= 0"):
        inclusion_ranges(-1, 4)
