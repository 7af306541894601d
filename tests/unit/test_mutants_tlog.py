"""Tests that kill surviving mutants in proxy/tlog (mutation/baseline.md lists what survives).

RFC 9162 §2.1.3: a leaf index equal to the tree size is outside the tree, for the proof
ranges as for the verifier (``index == size`` once survived).
"""

from __future__ import annotations

import pytest

from proxy.primitives.merkle import MerkleError, inclusion_ranges, leaf_hash, root_from_inclusion


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
