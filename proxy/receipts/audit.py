"""The ledger audit: re-verify a random sample of stored receipts (the LVP component of TIS).

Each round samples ``k`` distinct random heights plus the newest receipt and,
for each, re-checks what docs/architecture.md "Trust receipts" and RFC 9162 promise:

- ``fail_schema``: the stored receipt is not a well-formed receipt;
- ``fail_key``: its key_id is not published, or its ``ts`` is outside the
  key's validity window (docs/receipts.md "Keys and rotation");
- ``fail_signature``: the Ed25519 signature does not verify;
- ``fail_chain``: the receipt is missing or stored under another height, its
  ``prev_hash`` is not the entry hash of the receipt below it (height 0: the
  genesis hash), or the newest one is not what the head names;
- ``fail_inclusion``: a receipt covered by the latest signed checkpoint has
  no valid RFC 9162 inclusion proof into that checkpoint's root (or the
  checkpoint's signature does not verify).

Each sampled receipt yields exactly one result, the first failing category
in that order, or ``pass``. LVP = pass / all results
(``sonate_ledger_verifications_total``, deploy/prometheus/rules.yml).
The sample comes from the OS CSPRNG so a tamperer cannot predict it.
Reads the store; no aiohttp.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from proxy.primitives.failure import Failure
from proxy.receipts.proofs import inclusion_proof_doc, receipt_leaf_hash, verify_inclusion_proof
from proxy.receipts.receipt import entry_hash
from proxy.receipts.tree import inclusion_proof
from proxy.receipts.verify import _height, verify_receipt
from proxy.storage.base import LedgerError, LedgerStore, LedgerUnavailable
from proxy.tlog.checkpoint import CheckpointError, parse_checkpoint

__all__ = ["AuditResult", "RESULTS", "audit_heights", "classify", "sample_heights"]

RESULTS = ("pass", "fail_schema", "fail_key", "fail_signature", "fail_chain", "fail_inclusion")
"""Result labels of ``sonate_ledger_verifications_total``, failures in priority order."""

_CATEGORY = {
    "schema": "fail_schema",
    "unknown_key": "fail_key",
    "key_window": "fail_key",
    "signature": "fail_signature",
    "genesis": "fail_chain",
    "prev_hash": "fail_chain",
    "height": "fail_chain",
    "duplicate": "fail_chain",
    "head": "fail_chain",
    "inclusion": "fail_inclusion",
    "checkpoint": "fail_inclusion",
    "checkpoint_signature": "fail_inclusion",
    "origin": "fail_inclusion",
}


@dataclass(frozen=True)
class AuditResult:
    """The verdict on one sampled height: ``result`` (one of :data:`RESULTS`) and the failures behind it."""

    height: int
    result: str
    failures: list[Failure] = field(default_factory=list)


def classify(failures: Sequence[Failure]) -> str:
    """Map a receipt's failures to one result label (:data:`RESULTS`); ``pass`` when there are none.

    Unknown check names count as ``fail_chain``.
    """
    if not failures:
        return "pass"
    found = {_CATEGORY.get(f.check, "fail_chain") for f in failures}
    return next(label for label in RESULTS[1:] if label in found)


def sample_heights(size: int, k: int, rng: random.Random | None = None) -> list[int]:
    """Return the newest height (``size - 1``) plus ``min(k, size - 1)`` distinct random older ones, sorted.

    ``size``: receipts in the ledger (head height + 1); ``rng`` defaults to
    :class:`random.SystemRandom`. Raises ``ValueError`` for negative arguments.
    """
    if size < 0 or k < 0:
        raise ValueError("size and k must be >= 0")
    if size == 0:
        return []
    rng = rng or random.SystemRandom()
    older = rng.sample(range(size - 1), min(k, size - 1))
    return sorted(older + [size - 1])


async def _latest_checkpoint(store: LedgerStore) -> str | None:
    try:
        return await store.latest_checkpoint()
    except (NotImplementedError, AttributeError):  # a store without a Merkle tree
        return None


async def _inclusion_failures(store: LedgerStore, receipt: dict[str, Any], height: int, note: str,
                              tree_size: int, public_keys: Mapping[str, bytes]) -> list[Failure]:
    try:
        hashes = await inclusion_proof(store, height, tree_size)
        doc = inclusion_proof_doc(height, tree_size, receipt_leaf_hash(receipt), hashes)
    except LedgerUnavailable:
        raise
    except (LedgerError, ValueError, TypeError) as exc:  # TreeError: nodes missing; bad receipt
        return [Failure(height, receipt.get("receipt_id"), "inclusion", f"no inclusion proof: {exc}")]
    return verify_inclusion_proof(doc, receipt, note, public_keys)


async def audit_heights(store: LedgerStore, public_keys: Mapping[str, bytes],
                        heights: Sequence[int]) -> list[AuditResult]:
    """Re-verify the receipts at ``heights``; return one :class:`AuditResult` per height, in order.

    ``public_keys``: ``{key_id: key}`` (a :class:`proxy.receipts.signing.PublicKeys`
    carries validity windows). Reads each receipt, the one below it, the
    head, the latest checkpoint and O(log n) tree nodes per proof. Raises
    :class:`LedgerUnavailable` if the store is down (the round proves nothing then).
    """
    head = await store.head()
    note = await _latest_checkpoint(store)
    tree_size = 0
    if note is not None:
        try:
            tree_size = parse_checkpoint(note).tree_size
        except CheckpointError:
            tree_size = -1  # a malformed latest checkpoint fails every receipt's inclusion
    results = []
    for height in heights:
        receipt = await store.get_by_height(height)
        if receipt is None:
            fails = [Failure(height, None, "height", "no receipt stored at this height (below the head)")]
            results.append(AuditResult(height, classify(fails), fails))
            continue
        previous = await store.get_by_height(height - 1) if height > 0 else None
        fails = verify_receipt(receipt, dict(public_keys) if not isinstance(public_keys, dict) else public_keys,
                               previous=previous)
        if not isinstance(receipt, dict):  # JSON, but no object: verify_receipt's failures are all it can have
            results.append(AuditResult(height, classify(fails), fails))
            continue
        if height > 0 and previous is None:
            fails.append(Failure(height, receipt.get("receipt_id"), "height", f"height {height - 1} is missing"))
        elif height > 0 and _height(previous) is None:  # verify_receipt skips a link it cannot read
            fails.append(Failure(height, receipt.get("receipt_id"), "prev_hash",
                                 f"height {height - 1} holds no readable receipt: the link cannot be checked"))
        if receipt.get("ledger_height") != height:
            fails.append(Failure(height, receipt.get("receipt_id"), "height",
                                 f"stored at height {height} but says {receipt.get('ledger_height')!r}"))
        if head is not None and height == head.height:
            try:
                digest = entry_hash(receipt)
            except (TypeError, ValueError):
                digest = None
            if digest != head.entry_hash:
                fails.append(Failure(height, receipt.get("receipt_id"), "head",
                                     f"the head names {head.entry_hash}, the receipt hashes to {digest}"))
        if tree_size == -1:
            fails.append(Failure(height, receipt.get("receipt_id"), "checkpoint", "the latest checkpoint is malformed"))
        elif note is not None and height < tree_size:
            fails += await _inclusion_failures(store, receipt, height, note, tree_size, public_keys)
        results.append(AuditResult(height, classify(fails), fails))
    return results
