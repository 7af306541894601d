"""The ledger: seals receipts into the hash chain and appends them to a store.

DESIGN.md, "Trust receipts": heights are contiguous, each receipt's
``prev_hash`` is the previous receipt's entry hash, and there is exactly one
receipt per height, ever. Writers in one process are serialised by an
``asyncio.Lock``; writers in different processes race through the store's
compare-and-set and the loser re-seals on the new head and retries.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from .canonical import canonical
from .model import CHAIN_FIELDS, GENESIS_PREV_HASH, entry_hash, seal
from .signing import Signer
from .store import Head, LedgerConflict, LedgerStore

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
    ) -> None:
        """Bind a store and a signer; no I/O happens here."""
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self.store = store
        self.signer = signer
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._lock = asyncio.Lock()

    def _seal_on(self, receipts: list[dict[str, Any]], head: Head | None) -> list[dict[str, Any]]:
        height = 0 if head is None else head.height + 1
        prev_hash = GENESIS_PREV_HASH if head is None else head.entry_hash
        sealed = []
        for offset, receipt in enumerate(receipts):
            done = seal(receipt, ledger_height=height + offset, prev_hash=prev_hash, signer=self.signer)
            prev_hash = entry_hash(done)
            sealed.append(done)
        return sealed

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
                sealed = self._seal_on(receipts, head)
                try:
                    if await self.store.try_append(sealed, head):
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
