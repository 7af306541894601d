"""Tests that kill surviving mutants in proxy/tlog (mutation/baseline.md lists what survives).

RFC 9162 §2.1.3: a leaf index equal to the tree size is outside the tree, for the proof
ranges as for the verifier (issue 16 names ``index == size`` as a survivor once).
"""

from __future__ import annotations

import pytest

from proxy.tlog.merkle import MerkleError, inclusion_ranges, leaf_hash, root_from_inclusion


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_index_equal_to_size_is_outside_the_tree(size: int) -> None:
    leaf = leaf_hash(b"entry")
    with pytest.raises(MerkleError, match="outside a tree"):
        inclusion_ranges(size, size)
    assert root_from_inclusion(size, size, leaf, [leaf] * size.bit_length()) is None
    assert root_from_inclusion(size, size, leaf, []) is None
    assert inclusion_ranges(size - 1, size) is not None
