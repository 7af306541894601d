"""The ledger: seals receipts into the hash chain and appends them to a store, by group commit.

docs/architecture.md, "Trust receipts": heights are contiguous, each receipt's
``prev_hash`` is the previous receipt's entry hash, and there is exactly one
receipt per height, ever.

Group commit: :meth:`Ledger.append` queues a request's receipts; one appender
task per ledger takes everything waiting (up to ``max_batch`` receipts), seals
it on the head it expects and writes it with its Merkle nodes in one atomic
compare-and-set (:meth:`proxy.storage.base.ReceiptLog.compare_and_append`).
Writers in other processes race through that compare-and-set: the loser gets
the current head (and Merkle compact range) in the same reply, re-seals its
batch on it and retries at once, without sleeping. The expected head is the
one this ledger last wrote or was told about, so a lone writer never reads it.

A writer that keeps losing seals in vain (Ed25519 over each receipt, chained:
a lost race costs the whole group again). For ``contended_s`` after a lost
race it therefore takes turns: each attempt first pops the writers' turn token
(Redis ``BLPOP``, at most ``turn_timeout_s``), which carries the current head,
and its append pushes the token on with the new head. Waiting writers are woken
in order by the store, not by a timer; the compare-and-set still decides, so a
lost token (its holder was killed) costs one ``turn_timeout_s`` wait and a
duplicated or stale one a retry.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Any, Callable

from proxy.primitives import merkle
from proxy.primitives.canonical import canonical
from proxy.receipts.receipt import CHAIN_FIELDS, GENESIS_PREV_HASH
from proxy.receipts.sealing import PreparedReceipt, SealedReceipt
from proxy.receipts.signing import Signer
from proxy.storage.base import Head, LedgerConflict, LedgerStore, TreeUpdate

log = logging.getLogger("sonate.ledger")

__all__ = ["Ledger"]


def _unsealed_bytes(receipt: dict[str, Any]) -> bytes:
    return canonical({k: v for k, v in receipt.items() if k not in CHAIN_FIELDS})


class _GaveUp(LedgerConflict):
    """The head kept moving for ``max_attempts`` compare-and-sets (not a duplicate receipt_id)."""


@dataclass
class _Request:
    """One :meth:`Ledger.append` call waiting for the appender."""

    prepared: list[PreparedReceipt]
    future: asyncio.Future[list[dict[str, Any]]]


def _settle(future: asyncio.Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``future`` unless its caller gave up on it (cancelled, e.g. by a timeout)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Ledger:
    """Appends receipts to ``store``, sealed (chained and signed) by ``signer``, by group commit.

    Attributes ``store`` (:class:`LedgerStore`) and ``signer``
    (:class:`Signer`). ``max_attempts`` bounds the compare-and-set retries of
    one group; ``max_batch`` the receipts sealed and written in one group
    (a request's receipts are never split; one larger request is a group of
    its own).
    """

    def __init__(
        self,
        store: LedgerStore,
        signer: Signer,
        *,
        max_attempts: int = 50,
        max_batch: int = 64,
        signer_source: Callable[[], Signer] | None = None,
        contended_s: float = 1.0,
        turn_timeout_s: float = 0.05,
    ) -> None:
        """Bind a store and a signer; no I/O happens here.

        ``signer_source`` (optional, e.g. :meth:`proxy.receipts.keyring.Keyring.current`)
        is called before each seal and its result replaces ``signer``: key
        rotation takes effect without rebuilding the ledger. After a lost
        race the ledger takes turns with the other writers for
        ``contended_s`` seconds, waiting at most ``turn_timeout_s`` seconds
        for the turn token each attempt (:meth:`proxy.storage.base.ReceiptLog.take_turn`).
        Raises ``ValueError`` when ``max_attempts`` or ``max_batch`` is below 1.
        """
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.store = store
        self.signer = signer
        self.signer_source = signer_source
        self._max_attempts = max_attempts
        self._max_batch = max_batch
        self._queue: collections.deque[_Request] = collections.deque()
        self._appender: asyncio.Task[None] | None = None
        # The head this ledger expects next and the Merkle compact range (RFC 9162) at it: from its
        # own last append or the last lost race; None = read both from the store.
        self._known: tuple[Head | None, list[bytes] | None] | None = None
        self._tree_lag_logged = False
        # Contended mode (a race lost in the last ``contended_s`` seconds): take turns across processes.
        self._contended_until = float("-inf")
        self._contended_s = contended_s
        self._turn_timeout_s = turn_timeout_s
        self.listeners: list[Callable[[int], None]] = []
        """Called with the new ledger size (head height + 1) after each successful group append."""
        self.writes = 0
        """Atomic writes (groups) appended so far."""
        self.lost_races = 0
        """Compare-and-sets lost to another writer so far (each cost one re-seal of its group)."""

    async def append(self, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Seal ``receipts`` (unsigned dicts from ``new_receipt``) and append them, contiguously, in one atomic write.

        Returns the sealed receipts, in order, once the store has durably
        written them (possibly in one group with other concurrent calls'
        receipts). Appending a batch that is already stored (same
        receipt_ids and content, e.g. a retry after a lost reply) returns the
        stored copies. Raises ``ValueError``/``TypeError`` for malformed
        receipts (before anything is queued), :class:`LedgerConflict` if a
        receipt_id is already used by different content or the
        compare-and-set keeps losing (``max_attempts``),
        :class:`LedgerUnavailable` if the store is down. Cancelling the call
        (a timeout) before its group is written drops its receipts from the
        group; after that they may still be written.
        """
        if not receipts:
            return []
        prepared = [PreparedReceipt(r) for r in receipts]
        ids = [p.receipt_id for p in prepared]
        if len(set(ids)) != len(ids):
            raise LedgerConflict("duplicate receipt_id in batch")
        loop = asyncio.get_running_loop()
        request = _Request(prepared, loop.create_future())
        self._queue.append(request)
        if self._appender is None or self._appender.done() or self._appender.get_loop() is not loop:
            self._appender = loop.create_task(self._drain(), name="sonate-ledger-appender")
        return await request.future

    # -- the appender task ------------------------------------------------------------------------
    def _take(self) -> list[_Request]:
        """Pop the waiting requests of the next group: at least one, at most ``max_batch`` receipts."""
        group: list[_Request] = []
        count = 0
        loop = asyncio.get_running_loop()
        while self._queue:
            request = self._queue[0]
            if request.future.done() or request.future.get_loop() is not loop:
                self._queue.popleft()  # cancelled by its caller, or left by a closed event loop
                continue
            if group and count + len(request.prepared) > self._max_batch:
                break
            group.append(self._queue.popleft())
            count += len(request.prepared)
        return group

    async def _drain(self) -> None:
        """Commit groups until nothing waits."""
        while self._queue:
            group = self._take()
            if group:
                await self._commit_group(group)

    async def _commit_group(self, group: list[_Request]) -> None:
        """Append one group and resolve its callers' futures; a duplicate receipt_id splits the group."""
        try:
            sealed = await self._commit([p for request in group for p in request.prepared])
        except asyncio.CancelledError as exc:
            for request in group:
                request.future.cancel()
            raise exc
        except LedgerConflict as exc:
            if len(group) > 1 and not isinstance(exc, _GaveUp):
                for request in group:  # isolate the request whose receipt_id is taken
                    await self._commit_group([request])
                return
            stored = None if isinstance(exc, _GaveUp) else await self._stored_copies(group[0])
            for request in group:
                _settle(request.future, stored, None if stored is not None else exc)
        except Exception as exc:  # LedgerUnavailable, ValueError: every caller of the group gets it
            for request in group:
                _settle(request.future, error=exc)
        else:
            offset = 0
            for request in group:
                size = len(request.prepared)
                _settle(request.future, [s.receipt for s in sealed[offset:offset + size]])
                offset += size

    async def _stored_copies(self, request: _Request) -> list[dict[str, Any]] | None:
        """The stored copies if this request's exact receipts are already in the ledger, else None."""
        try:
            stored = []
            for prepared in request.prepared:
                found = await self.store.get_by_id(prepared.receipt_id)
                if found is None or _unsealed_bytes(found) != canonical(prepared.body):
                    return None
                stored.append(found)
            return stored
        except Exception:  # the conflict is the better answer
            log.exception("could not read back receipts after a conflict")
            return None

    # -- one group: seal, compare-and-set, retry on the head the store returns --------------------
    async def _commit(self, prepared: list[PreparedReceipt]) -> list[SealedReceipt]:
        """Seal ``prepared`` on the expected head and append it; on a lost race re-seal on the returned head.

        While this ledger keeps losing races (contended, see :meth:`_take_turn`), each
        attempt first takes the writers' turn token, which carries the current head.
        """
        loop = asyncio.get_running_loop()
        try:
            head, frontier = self._known if self._known is not None else (await self.store.head(), None)
            for _ in range(self._max_attempts):
                contended = loop.time() < self._contended_until
                if contended:
                    head, frontier = await self._take_turn(head, frontier)
                if frontier is None:  # first append, or the stored tree lagged (it may have been reindexed since)
                    frontier = await self._read_frontier(head)
                if self.signer_source is not None:
                    self.signer = self.signer_source()
                sealed = self._seal_on(prepared, head)
                update = self._tree_update(head, frontier, sealed)
                outcome = await self.store.compare_and_append(
                    [s.receipt for s in sealed], head, None if update is None else update[0],
                    encoded=[s.encoded for s in sealed], frontier=None if update is None else update[1],
                    release_turn=contended)
                if outcome.appended:
                    self.writes += 1
                    self._known = (outcome.head, None if update is None else update[1])
                    self._notify(outcome.head)
                    return sealed
                self.lost_races += 1
                self._contended_until = loop.time() + self._contended_s
                head, frontier = outcome.head, outcome.frontier
                self._known = (head, frontier)
        except BaseException:
            self._known = None  # after a failure, trust nothing cached
            raise
        raise _GaveUp(f"ledger head kept moving: gave up after {self._max_attempts} attempts")

    async def _take_turn(self, head: Head | None,
                         frontier: list[bytes] | None) -> tuple[Head | None, list[bytes] | None]:
        """Wait (at most ``turn_timeout_s``) for the writers' turn token and return the head it carries.

        No token in time (its holder died, or no other writer is left): keep ``head``; the
        append hands a token on anyway. A token whose head another writer moved keeps this
        ledger in contended mode.
        """
        turn = await self.store.take_turn(self._turn_timeout_s)
        if turn is None:
            return head, frontier
        if turn[0] != head:
            self._contended_until = asyncio.get_running_loop().time() + self._contended_s
            return turn[0], turn[1]
        return head, frontier if frontier is not None else turn[1]

    def _seal_on(self, prepared: list[PreparedReceipt], head: Head | None) -> list[SealedReceipt]:
        height = 0 if head is None else head.height + 1
        prev_hash = GENESIS_PREV_HASH if head is None else head.entry_hash
        sealed = []
        for offset, receipt in enumerate(prepared):
            done = receipt.seal(height + offset, prev_hash, self.signer)
            prev_hash = done.entry_hash
            sealed.append(done)
        return sealed

    async def _read_frontier(self, head: Head | None) -> list[bytes] | None:
        """The stored compact range at ``head`` (at most log2(n) nodes); None if the stored tree lags."""
        size = 0 if head is None else head.height + 1
        try:
            found = await self.store.get_nodes(merkle.frontier_ids(size))
        except NotImplementedError:  # a store without a Merkle tree
            return None
        if any(node is None for node in found):
            if not self._tree_lag_logged:
                log.warning("the ledger's Merkle tree is behind its receipts (size %d has no stored nodes): "
                            "appending without tree nodes; run `sonate ledger reindex`", size)
                self._tree_lag_logged = True
            return None
        return [node for node in found if node is not None]

    @staticmethod
    def _tree_update(head: Head | None, frontier: list[bytes] | None,
                     sealed: list[SealedReceipt]) -> tuple[TreeUpdate, list[bytes]] | None:
        """``(nodes to store, new compact range)`` for ``sealed`` on top of ``head``; None without a frontier."""
        if frontier is None:
            return None
        size = 0 if head is None else head.height + 1
        leaves = [merkle.leaf_hash(merkle.receipt_leaf(s.entry_hash)) for s in sealed]
        nodes, new_frontier = merkle.extend(size, frontier, leaves)
        return TreeUpdate(size, size + len(sealed), nodes), new_frontier

    def _notify(self, head: Head | None) -> None:
        """Tell listeners the new size."""
        if head is None:
            return
        for listener in self.listeners:
            try:
                listener(head.height + 1)
            except Exception:  # a listener must never fail an append
                log.exception("ledger append listener failed")

    def __repr__(self) -> str:
        return f"Ledger(store={self.store!r}, key_id={self.signer.key_id!r})"
