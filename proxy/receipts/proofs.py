"""Inclusion and consistency proof documents (JSON) and their verification against signed checkpoints.

Pure: no I/O. Wire forms (``GET /v1/ledger/proof/...``; hashes are standard
padded base64 of 32 bytes, RFC 4648 §4)::

    inclusion:   {"leaf_index": H, "tree_size": N, "leaf_hash": "<b64>", "hashes": ["<b64>", ...]}
    consistency: {"first": M, "second": N, "hashes": ["<b64>", ...]}

The leaf of a receipt is ``leaf_hash(entry bytes)`` with the entry = the 32
raw bytes of its chain entry hash (see :mod:`proxy.primitives.merkle`); a
receipt at ``ledger_height`` H is leaf H. Verification follows RFC 9162
§2.1.3.2 (inclusion) and §2.1.4.2 (consistency) against the root hash of a
C2SP checkpoint whose Ed25519 signature is checked first.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from proxy.primitives import merkle
from proxy.primitives.canonical import CanonicalizationError
from proxy.primitives.failure import Failure
from proxy.receipts.receipt import entry_hash
from proxy.tlog.checkpoint import Checkpoint, CheckpointError, parse_checkpoint, verify_checkpoint

__all__ = [
    "consistency_proof_doc",
    "inclusion_proof_doc",
    "parse_hashes",
    "receipt_leaf_hash",
    "verify_consistency_proof",
    "verify_inclusion_proof",
]


def receipt_leaf_hash(receipt: dict[str, Any]) -> bytes:
    """``leaf_hash(entry)`` of a receipt: SHA-256(0x00 ‖ 32 raw bytes of entry_hash(receipt)).

    Raises ``ValueError``/``TypeError`` for a receipt that cannot be canonicalised.
    """
    return merkle.leaf_hash(merkle.receipt_leaf(entry_hash(receipt)))


def inclusion_proof_doc(leaf_index: int, tree_size: int, leaf_hash: bytes, hashes: Sequence[bytes]) -> dict[str, Any]:
    """The JSON inclusion proof for leaf ``leaf_index`` of the tree of ``tree_size`` leaves."""
    return {"leaf_index": leaf_index, "tree_size": tree_size, "leaf_hash": merkle.b64_encode_hash(leaf_hash),
            "hashes": [merkle.b64_encode_hash(h) for h in hashes]}


def consistency_proof_doc(first: int, second: int, hashes: Sequence[bytes]) -> dict[str, Any]:
    """The JSON consistency proof between tree sizes ``first`` <= ``second``."""
    return {"first": first, "second": second, "hashes": [merkle.b64_encode_hash(h) for h in hashes]}


def parse_hashes(values: Any) -> list[bytes]:
    """Decode a JSON list of base64 hashes; raises :class:`proxy.primitives.merkle.MerkleError` naming the bad item."""
    if not isinstance(values, list):
        raise merkle.MerkleError("hashes must be a list of base64 strings")
    out = []
    for position, value in enumerate(values):
        try:
            out.append(merkle.b64_decode_hash(value))
        except merkle.MerkleError as exc:
            raise merkle.MerkleError(f"hashes[{position}]: {exc}") from None
    return out


def _size(value: Any, minimum: int) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= minimum else None


def _read_checkpoint(text: Any, public_keys: Mapping[str, bytes] | None,
                     origin: str | None) -> tuple[list[Failure], Checkpoint | None]:
    """Verify (when ``public_keys`` is given) and parse one signed checkpoint: ``(failures, parsed or None)``."""
    fails = list(verify_checkpoint(text, public_keys, origin)) if public_keys is not None else []
    try:
        return fails, parse_checkpoint(text)
    except CheckpointError as exc:
        if public_keys is None:  # otherwise verify_checkpoint reported it already
            fails.append(Failure(None, None, "checkpoint", str(exc), where="checkpoint"))
        return fails, None


def _proof_leaf(proof: dict[str, Any], receipt: Any, index: int, receipt_id: str | None,
                where: str) -> tuple[list[Failure], bytes | None]:
    """The leaf hash an inclusion proof is checked for: ``(failures, leaf or None when checking stops)``.

    The receipt's own leaf hash when there is a receipt (its height must be
    ``index``), checked against the proof's ``leaf_hash`` when present;
    without a receipt, the proof's ``leaf_hash``.
    """
    fails: list[Failure] = []
    leaf: bytes | None = None
    if receipt is not None:
        try:
            leaf = receipt_leaf_hash(receipt)
        except (CanonicalizationError, TypeError, ValueError, AttributeError) as exc:
            return [Failure(index, receipt_id, "inclusion", f"cannot hash the receipt: {exc}", where=where)], None
        height = receipt.get("ledger_height") if isinstance(receipt, dict) else None
        if height != index:
            fails.append(Failure(index, receipt_id, "inclusion",
                                 f"leaf_index {index} is not the receipt's ledger_height {height!r}", where=where))
    if "leaf_hash" in proof or receipt is None:
        try:
            stated = merkle.b64_decode_hash(proof.get("leaf_hash"))
        except merkle.MerkleError as exc:
            return fails + [Failure(index, receipt_id, "inclusion", f"leaf_hash: {exc}", where=where)], None
        if leaf is not None and stated != leaf:
            fails.append(Failure(index, receipt_id, "inclusion",
                                 "leaf_hash is not SHA-256(0x00 ‖ entry hash) of the receipt", where=where))
        leaf = leaf or stated
    return fails, leaf


def verify_inclusion_proof(proof: Any, receipt: Any, checkpoint: str, public_keys: Mapping[str, bytes] | None,
                           origin: str | None = None) -> list[Failure]:
    """Verify an inclusion proof document for ``receipt`` against a signed checkpoint; return failures.

    ``receipt``: the receipt the proof is for (None: trust the proof's
    ``leaf_hash``); ``public_keys``: ``{key_id: 32-byte key}`` that may sign
    checkpoints (None: the checkpoint signature is not checked — only for
    callers that verified it already). Checks, by name: ``checkpoint``,
    ``origin``, ``checkpoint_signature`` (see
    :func:`proxy.tlog.checkpoint.verify_checkpoint`) and ``inclusion``
    (malformed proof, leaf index ≠ the receipt's height, leaf hash ≠ the
    receipt's, tree size ≠ the checkpoint's, or the path does not lead to the
    checkpoint's root — RFC 9162 §2.1.3.2 via
    :func:`proxy.primitives.merkle.verify_inclusion_path`). Never raises.
    """
    where = "inclusion proof"
    fails, parsed = _read_checkpoint(checkpoint, public_keys, origin)
    if not isinstance(proof, dict):
        return fails + [Failure(None, None, "inclusion", "the proof must be a JSON object", where=where)]
    index, size = _size(proof.get("leaf_index"), 0), _size(proof.get("tree_size"), 1)
    if index is None or size is None or index >= size:
        return fails + [Failure(None, None, "inclusion",
                                f"need 0 <= leaf_index < tree_size, got leaf_index={proof.get('leaf_index')!r} "
                                f"tree_size={proof.get('tree_size')!r}", where=where)]
    where = f"inclusion proof (leaf {index}, tree size {size})"
    try:
        hashes = parse_hashes(proof.get("hashes"))
    except merkle.MerkleError as exc:
        return fails + [Failure(index, None, "inclusion", str(exc), where=where)]
    receipt_id = receipt.get("receipt_id") if isinstance(receipt, dict) else None
    receipt_id = receipt_id if isinstance(receipt_id, str) else None
    leaf_fails, leaf = _proof_leaf(proof, receipt, index, receipt_id, where)
    fails += leaf_fails
    if leaf is None or parsed is None:
        return fails
    if parsed.tree_size != size:
        return fails + [Failure(index, receipt_id, "inclusion",
                                f"proof is for tree size {size}, the checkpoint is for {parsed.tree_size}",
                                where=where)]
    if not merkle.verify_inclusion_path(index, size, leaf, hashes, parsed.root_hash):
        fails.append(Failure(index, receipt_id, "inclusion",
                             "the audit path does not lead to the checkpoint's root hash (RFC 9162 §2.1.3.2)",
                             where=where))
    return fails


def verify_consistency_proof(proof: Any, first_checkpoint: str, second_checkpoint: str,
                             public_keys: Mapping[str, bytes] | None, origin: str | None = None) -> list[Failure]:
    """Verify a consistency proof document between two signed checkpoints; return failures.

    Both checkpoints are verified (``public_keys`` None: signatures not
    checked) and must name the same origin; the proof's ``first``/``second``
    must be their tree sizes, and the proof must show the first tree is a
    prefix of the second (RFC 9162 §2.1.4.2, via
    :func:`proxy.primitives.merkle.verify_consistency_path`). Check names: those of
    :func:`proxy.tlog.checkpoint.verify_checkpoint`, ``consistency``.
    Never raises.
    """
    fails: list[Failure] = []
    parsed: list[Checkpoint] = []
    for text in (first_checkpoint, second_checkpoint):
        text_fails, checkpoint = _read_checkpoint(text, public_keys, origin)
        fails += text_fails
        if checkpoint is not None:
            parsed.append(checkpoint)
    where = "consistency proof"
    if not isinstance(proof, dict):
        return fails + [Failure(None, None, "consistency", "the proof must be a JSON object", where=where)]
    first, second = _size(proof.get("first"), 0), _size(proof.get("second"), 0)
    if first is None or second is None or first > second:
        return fails + [Failure(None, None, "consistency",
                                f"need 0 <= first <= second, got first={proof.get('first')!r} "
                                f"second={proof.get('second')!r}", where=where)]
    where = f"consistency proof ({first} -> {second})"
    try:
        hashes = parse_hashes(proof.get("hashes"))
    except merkle.MerkleError as exc:
        return fails + [Failure(None, None, "consistency", str(exc), where=where)]
    if len(parsed) != 2:
        return fails
    old, new = parsed
    if old.origin != new.origin:
        fails.append(Failure(None, None, "consistency",
                             f"the checkpoints are of different logs ({old.origin!r}, {new.origin!r})", where=where))
    if (old.tree_size, new.tree_size) != (first, second):
        fails.append(Failure(None, None, "consistency",
                             f"proof is for sizes {first} -> {second}, the checkpoints are "
                             f"{old.tree_size} -> {new.tree_size}", where=where))
        return fails
    if not merkle.verify_consistency_path(first, second, old.root_hash, new.root_hash, hashes):
        fails.append(Failure(None, None, "consistency",
                             "the proof does not show the first tree is a prefix of the second (RFC 9162 §2.1.4.2)",
                             where=where))
    return fails
