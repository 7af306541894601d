"""The ledger: seals receipts into the hash chain and appends them to a store.

docs/architecture.md, "Trust receipts": heights are contiguous, each receipt's
``prev_hash`` is the previous receipt's entry hash, and there is exactly one
receipt per height, ever. Writers in one process are serialised by an
``asyncio.Lock``; writers in different processes race through the store's
compare-and-set and the loser re-seals on the new head and retries.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Callable

from proxy.tlog import merkle
from proxy.receipts.canonical import canonical
from proxy.receipts.receipt import CHAIN_FIELDS, GENESIS_PREV_HASH, entry_hash, seal
from proxy.receipts.signing import Signer
from proxy.storage.base import Head, LedgerConflict, LedgerStore, TreeUpdate

log = logging.getLogger("sonate.ledger")

__all__ = ["Ledger"]


def _unsealed_bytes(receipt: dict[str, Any]) -> bytes:
    return canonical({k: v for k, v in receipt.items() if k not in CHAIN_FIELDS})


class Ledger:
    """Appends receipts to ``store``, sealed (chained and signed) by ``signer``.

    Attributes ``store`` (:class:`LedgerStore`) and ``signer``
    (:class:`Signer`). ``max_attempts`` bounds compare-and-set retries;
    between attempts the ledger sleeps a random time up to
    ``min(backoff_cap_s, backoff_base_s * 2**attempt)`` seconds.
    """

    def __init__(
        self,
        store: LedgerStore,
        signer: Signer,
        *,
        max_attempts: int = 50,
        backoff_base_s: float = 0.001,
        backoff_cap_s: float = 0.05,
        signer_source: Callable[[], Signer] | None = None,
    ) -> None:
        """Bind a store and a signer; no I/O happens here.

        ``signer_source`` (optional, e.g. :meth:`proxy.receipts.keyring.Keyring.current`)
        is called before each seal and its result replaces ``signer``: key
        rotation takes effect without rebuilding the ledger.
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.store = store
        self.signer = signer
        self.signer_source = signer_source
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._lock = asyncio.Lock()
        # Merkle tree (RFC 9162): the compact range after our last append, keyed by the head it
        # belongs to, so a single writer never re-reads it; other writers' appends force a re-read.
        self._frontier: tuple[Head, list[bytes]] | None = None
        self._tree_lag_logged = False
        self.listeners: list[Callable[[int], None]] = []
        """Called with the new ledger size (head height + 1) after each successful append."""

    def _seal_on(self, receipts: list[dict[str, Any]], head: Head | None) -> list[dict[str, Any]]:
        height = 0 if head is None else head.height + 1
        prev_hash = GENESIS_PREV_HASH if head is None else head.entry_hash
        sealed = []
        for offset, receipt in enumerate(receipts):
            done = seal(receipt, ledger_height=height + offset, prev_hash=prev_hash, signer=self.signer)
            prev_hash = entry_hash(done)
            sealed.append(done)
        return sealed

    async def _tree_update(
        self, head: Head | None, sealed: list[dict[str, Any]]
    ) -> tuple[TreeUpdate, list[bytes]] | None:
        """``(nodes to store, new compact range)`` for ``sealed`` on top of ``head``; None if the stored tree lags.

        Reads the compact range of the current size (at most log2(n) nodes),
        unless it is cached from this ledger's own last append on ``head``.
        """
        size = 0 if head is None else head.height + 1
        if self._frontier is not None and self._frontier[0] == head:
            frontier: list[bytes] | None = self._frontier[1]
        else:
            try:
                found = await self.store.get_nodes(merkle.frontier_ids(size))
            except NotImplementedError:  # a store without a Merkle tree
                return None
            frontier = None if any(node is None for node in found) else [n for n in found if n is not None]
        if frontier is None:
            if not self._tree_lag_logged:
                log.warning("the ledger's Merkle tree is behind its receipts (size %d has no stored nodes): "
                            "appending without tree nodes; run `sonate ledger reindex`", size)
                self._tree_lag_logged = True
            return None
        leaves = [merkle.leaf_hash(merkle.receipt_leaf(entry_hash(r))) for r in sealed]
        nodes, new_frontier = merkle.extend(size, frontier, leaves)
        return TreeUpdate(size, size + len(sealed), nodes), new_frontier

    def _appended(self, sealed: list[dict[str, Any]], new_frontier: list[bytes] | None) -> None:
        """Remember the new compact range and tell listeners the new size."""
        last = sealed[-1]
        if new_frontier is not None:
            self._frontier = (Head(last["ledger_height"], entry_hash(last)), new_frontier)
        for listener in self.listeners:
            try:
                listener(last["ledger_height"] + 1)
            except Exception:  # a listener must never fail an append
                log.exception("ledger append listener failed")

    async def _already_appended(self, receipts: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Return the stored copies if this exact batch is already in the ledger, else None."""
        stored = []
        for receipt in receipts:
            found = await self.store.get_by_id(receipt["receipt_id"])
            if found is None or _unsealed_bytes(found) != _unsealed_bytes(receipt):
                return None
            stored.append(found)
        return stored

    async def append(self, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``receipts`` (unsigned dicts from ``new_receipt``) and append them as one batch.

        Returns the sealed receipts, in order, once the store has durably
        written them. Appending a batch that is already stored (same
        receipt_ids and content, e.g. a retry after a lost reply) returns the
        stored copies. Raises ``ValueError``/``TypeError`` for malformed
        receipts, :class:`LedgerConflict` if a receipt_id is already used by
        different content or the compare-and-set keeps losing
        (``max_attempts``), :class:`LedgerUnavailable` if the store is down.
        """
        if not receipts:
            return []
        async with self._lock:
            for attempt in range(self._max_attempts):
                head = await self.store.head()
                if self.signer_source is not None:
                    self.signer = self.signer_source()
                sealed = self._seal_on(receipts, head)
                update = await self._tree_update(head, sealed)
                try:
                    if await self.store.try_append(sealed, head, None if update is None else update[0]):
                        self._appended(sealed, None if update is None else update[1])
                        return sealed
                except LedgerConflict:
                    stored = await self._already_appended(receipts)
                    if stored is not None:
                        return stored
                    raise
                cap = min(self._backoff_cap_s, self._backoff_base_s * 2**attempt)
                await asyncio.sleep(random.uniform(0, cap))
        raise LedgerConflict(f"ledger head kept moving: gave up after {self._max_attempts} attempts")

    def __repr__(self) -> str:
        return f"Ledger(store={self.store!r}, key_id={self.signer.key_id!r})"
