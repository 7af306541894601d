"""The one workflow of human review: claim → decide → receipt, on a status compare-and-set queue.

Escalation cases (:mod:`proxy.server.flow.review.escalations`) and adjudication items
(:mod:`proxy.server.flow.review.adjudication`) are JSON dicts with at least ``id`` and ``status``, kept in the
ledger store's queues ``"escalations"`` and ``"adjudications"``. A decision moves an entry from
the status it was read with to a new one **only if nobody moved it meanwhile** (compare-and-set on
the status: of two concurrent reviewers one loses), then receipts it; an entry whose receipt
cannot be written is released back to the status it had, so the decision can be retried and no
decision stands without its receipt.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from proxy.server.errors import GatewayError, ledger_unavailable
from proxy.server.flow.receipting import Receipting
from proxy.storage.base import LedgerConflict, LedgerError, LedgerStore

__all__ = ["DecisionQueue"]

log = logging.getLogger("sonate.review")


class DecisionQueue:
    """One queue (``"escalations"`` or ``"adjudications"``) of ``store``, decided through ``receipting``.

    Every store failure is raised as the 503 :func:`proxy.server.errors.ledger_unavailable`.
    """

    def __init__(self, queue: str, store: LedgerStore, receipting: Receipting) -> None:
        """Bind the queue name, the store holding it and the receipt path. No I/O."""
        self.queue = queue
        self.store = store
        self.receipting = receipting

    async def put(self, item: dict[str, Any]) -> bool:
        """Add ``item``; False when an entry with its id exists already (a retried request)."""
        try:
            await self.store.put_item(self.queue, item)
        except LedgerConflict:
            return False
        except LedgerError:
            raise ledger_unavailable("the request was not completed") from None
        return True

    async def get(self, item_id: str, what: str) -> dict[str, Any]:
        """The entry ``item_id``; GatewayError 404 ``No {what} with id ...`` when there is none."""
        try:
            item = await self.store.get_item(self.queue, item_id)
        except LedgerError:
            raise ledger_unavailable() from None
        if item is None:
            raise GatewayError(404, f"No {what} with this id.", code="not_found")  # ids are not echoed
        return item

    async def page(self, statuses: Sequence[str] | None = None, *, after: str | None = None,
                   limit: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        """One page of entries, oldest first (the store's :meth:`~proxy.storage.base.ReviewQueue.page_items`):
        ``(entries, cursor)``, cursor None at the end. GatewayError 400 (param ``after``) for an
        unknown cursor, 503 when the store fails."""
        try:
            return await self.store.page_items(self.queue, statuses, after=after, limit=limit)
        except KeyError:
            raise GatewayError(400, "after: no entry with this id in this list", param="after",
                               code="invalid_value") from None
        except LedgerError:
            raise ledger_unavailable() from None

    async def decide(self, old: dict[str, Any], new: dict[str, Any], receipt: dict[str, Any] | list[dict[str, Any]],
                     *, link: Callable[[Any], dict[str, Any]] | None = None) -> Any:
        """Move ``old`` to ``new`` (compare-and-set on ``old["status"]``) and append its ``receipt``
        (one receipt, or a list of receipts appended together: all or none).

        ``link(sealed)``, if given, returns the entry to store once the receipts are sealed
        (e.g. ``new`` with the receipt id). Returns the sealed receipt (a list for a list), or None
        when another decision moved the entry first. Raises the 503 ``ledger_unavailable`` (after
        releasing the entry back to ``old``) when the store or the ledger fails.
        """
        receipts = receipt if isinstance(receipt, list) else [receipt]
        try:
            await self.store.update_item(self.queue, new, expected_status=old["status"])
        except LedgerConflict:
            return None
        except LedgerError:
            raise ledger_unavailable("the decision was not recorded") from None
        sealed = (await self.receipting.commit(new["id"], receipts, allow_pending=False,
                                               undo=lambda: self._release(old, new),
                                               what="the decision was not recorded")).receipts
        result = sealed if isinstance(receipt, list) else sealed[0]
        if link is not None:
            try:
                await self.store.update_item(self.queue, link(result))
            except LedgerError:
                await self._release(old, new)
                raise ledger_unavailable("the decision was not recorded") from None
        self.receipting.count((), sealed, True, {})
        return result

    async def _release(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Put ``old`` back (it must still be ``new``'s status); log when even that fails."""
        try:
            await self.store.update_item(self.queue, old, expected_status=new["status"])
        except LedgerError:
            log.error("%s entry %s is marked %s but its receipt was not written",
                      self.queue, new["id"], new["status"])
