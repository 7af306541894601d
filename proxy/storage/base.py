"""The ledger store roles shared by the SQLite and Redis back ends.

docs/architecture.md, "Trust receipts": stores append a batch atomically, get
by height or id, report the head and read ranges; concurrent appends must
never fork or gap the chain. A store plays three narrow roles (tessera's
storage interfaces are the model), each an abstract class here:

- :class:`ReceiptLog`: the compare-and-set receipt log (head, try_append,
  get_by_height, get_by_id, range). :class:`proxy.receipts.chain.Ledger`
  seals receipts, the log keeps them.
- :class:`TreeStore`: RFC 9162 Merkle tree nodes and C2SP checkpoint notes.
- :class:`ReviewQueue`: JSON items with a status, per named queue
  (:data:`QUEUES`), updated with a compare-and-set on the status.
- :class:`ResultLog`: append-only series of evaluation results (``sonate eval conversation``);
  both back ends implement it beside :class:`LedgerStore`.

:class:`LedgerStore` is the combination a back end implements
(:mod:`proxy.storage.sqlite`, :mod:`proxy.storage.redis`); :func:`open_store`
picks one from a ledger URL.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = [
    "QUEUES",
    "AppendOutcome",
    "Head",
    "LedgerConflict",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailable",
    "MAX_PAGE",
    "ReceiptLog",
    "RESULT_SERIES",
    "ResultLog",
    "ReviewQueue",
    "TreeStore",
    "TreeUpdate",
    "check_batch",
    "check_checkpoint",
    "check_cosignature",
    "check_item",
    "check_limit",
    "check_result",
    "check_page",
    "check_queue",
    "check_tree_update",
]


@dataclass(frozen=True)
class Head:
    """The last receipt of a ledger: its ``height`` and ``entry_hash`` (``sha256:<hex>``)."""

    height: int
    entry_hash: str


@dataclass(frozen=True)
class AppendOutcome:
    """The result of :meth:`ReceiptLog.compare_and_append`.

    ``appended``: whether the batch was written. ``head``: the ledger head
    after the call (the batch's last receipt when appended; the head found
    instead of the expected one when not, None for an empty ledger).
    ``frontier``: when not appended, the stored Merkle compact range at
    ``head`` (the hashes of :func:`proxy.primitives.merkle.frontier_ids` of
    ``head.height + 1``) if the store has it at hand, else None: the loser
    re-seals on ``head`` without another round trip (group commit,
    :mod:`proxy.receipts.chain`).
    """

    appended: bool
    head: Head | None
    frontier: list[bytes] | None = None


class LedgerError(Exception):
    """Base class of ledger failures."""


class LedgerUnavailable(LedgerError):
    """The store cannot be reached or cannot write (network, disk, OS errors)."""


class LedgerConflict(LedgerError):
    """A write would break the ledger's invariants (duplicate receipt_id or height, lost CAS race)."""


def check_batch(receipts: list[dict[str, Any]], expected: Head | None) -> None:
    """Validate a batch before :meth:`LedgerStore.try_append` writes it.

    The batch is non-empty; heights run ``expected.height + 1, +2, ...``
    (``0, 1, ...`` when ``expected`` is None); each receipt has a string
    ``receipt_id``. Raises ``ValueError`` for a malformed batch and
    :class:`LedgerConflict` for a receipt_id repeated inside the batch.
    """
    if not receipts:
        raise ValueError("try_append needs at least one receipt")
    first = 0 if expected is None else expected.height + 1
    seen: set[str] = set()
    for offset, receipt in enumerate(receipts):
        height = receipt.get("ledger_height") if isinstance(receipt, dict) else None
        if isinstance(height, bool) or height != first + offset:
            raise ValueError(f"batch receipt {offset} has ledger_height {height!r}, expected {first + offset}")
        receipt_id = receipt.get("receipt_id")
        if not isinstance(receipt_id, str) or not receipt_id:
            raise ValueError(f"batch receipt {offset} has no receipt_id")
        if receipt_id in seen:
            raise LedgerConflict(f"duplicate receipt_id {receipt_id} in batch")
        seen.add(receipt_id)


@dataclass(frozen=True)
class TreeUpdate:
    """Merkle tree nodes to store with a batch (RFC 9162 tree, see :mod:`proxy.primitives.merkle`).

    ``old_size``/``new_size``: the tree sizes (leaf counts) before and after;
    ``nodes``: every node ``(level, index) -> 32-byte hash`` completed by the
    leaves ``old_size .. new_size-1``. Stores keep a *tree size*: the number
    of leaves whose complete nodes are all stored. A write moves it from
    ``old_size`` to ``new_size`` only if it is still ``old_size``.
    """

    old_size: int
    new_size: int
    nodes: dict[tuple[int, int], bytes] = field(default_factory=dict)


def check_tree_update(update: TreeUpdate, receipts: list[dict[str, Any]] | None = None) -> None:
    """Validate a :class:`TreeUpdate` (and, with ``receipts``, that it covers exactly that batch).

    Raises ``ValueError`` for sizes out of order, node ids that are not
    non-negative integer pairs, hashes that are not 32 bytes, or sizes that
    do not match the batch's heights.
    """
    if not isinstance(update, TreeUpdate):
        raise ValueError("tree must be a TreeUpdate")
    if not (isinstance(update.old_size, int) and isinstance(update.new_size, int)
            and 0 <= update.old_size <= update.new_size):
        raise ValueError(f"bad tree sizes {update.old_size!r} -> {update.new_size!r}")
    for node, digest in update.nodes.items():
        if (not isinstance(node, tuple) or len(node) != 2 or not all(isinstance(v, int) and v >= 0 for v in node)
                or node[0] > 62 or not isinstance(digest, (bytes, bytearray)) or len(digest) != 32):
            raise ValueError(f"bad tree node {node!r}")
    if receipts is not None:
        first = receipts[0]["ledger_height"]
        if update.old_size != first or update.new_size != first + len(receipts):
            raise ValueError(f"tree update {update.old_size}->{update.new_size} does not cover heights "
                             f"{first}..{first + len(receipts) - 1}")


def check_checkpoint(tree_size: Any, note: Any) -> None:
    """Raise ``ValueError`` unless ``tree_size`` is an int >= 1 and ``note`` a non-empty str."""
    if not isinstance(tree_size, int) or isinstance(tree_size, bool) or tree_size < 1:
        raise ValueError(f"checkpoint tree_size must be an integer >= 1, got {tree_size!r}")
    if not isinstance(note, str) or not note:
        raise ValueError("checkpoint note must be a non-empty string")


QUEUES = ("escalations", "adjudications")
"""The review queues a store keeps: escalation cases (``/v1/escalations``) and
adjudication items (the blind two-pass review, :mod:`proxy.kpi.adjudication`)."""


def check_cosignature(tree_size: Any, cosigner: Any, line: Any) -> None:
    """Raise ``ValueError`` unless ``tree_size`` >= 1, ``cosigner`` a non-empty name, ``line`` one ``— <cosigner> ...\\n`` line."""
    check_checkpoint(tree_size, "-")
    if not isinstance(cosigner, str) or not cosigner or " " in cosigner or "\n" in cosigner:
        raise ValueError("cosigner must be a non-empty name without spaces")
    if not isinstance(line, str) or not line.startswith(f"\u2014 {cosigner} ") or not line.endswith("\n") \
            or line.count("\n") != 1:
        raise ValueError("a cosignature must be one signature line of its cosigner ending in a newline")


MAX_PAGE = 1000
"""The most review-queue items one :meth:`ReviewQueue.page_items` call returns."""


def check_page(statuses: Any, limit: Any) -> tuple[str, ...] | None:
    """The statuses of a page query as a tuple (None: every status); ``ValueError`` unless
    ``limit`` is an int in 1..:data:`MAX_PAGE` and ``statuses`` None, a string or strings."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}")
    if statuses is None:
        return None
    wanted = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    if not wanted or not all(isinstance(x, str) and x for x in wanted):
        raise ValueError("statuses must be None, a status or a non-empty sequence of statuses")
    return wanted


def check_queue(queue: Any) -> None:
    """Raise ``ValueError`` unless ``queue`` is one of :data:`QUEUES`."""
    if queue not in QUEUES:
        raise ValueError(f"unknown review queue {queue!r}: use one of {', '.join(QUEUES)}")


def check_item(queue: Any, item: Any) -> None:
    """Raise ``ValueError`` unless ``queue`` is in :data:`QUEUES` and ``item`` is a review item.

    A review item is a dict with non-empty string ``id`` and ``status``.
    """
    check_queue(queue)
    if not isinstance(item, dict):
        raise ValueError("a review item must be a JSON object")
    for name in ("id", "status"):
        if not isinstance(item.get(name), str) or not item[name]:
            raise ValueError(f"a review item needs a non-empty string {name!r}")


class ReceiptLog(abc.ABC):
    """Durable, append-only log of sealed receipts with a compare-and-set head.

    Receipts are JSON dicts (see :mod:`proxy.receipts.receipt`), stored and
    returned unchanged. Every method may raise :class:`LedgerUnavailable`
    when the store cannot be reached.
    """

    @abc.abstractmethod
    async def head(self) -> Head | None:
        """Return the last receipt's height and entry hash, or None for an empty ledger."""

    async def try_append(
        self, receipts: list[dict[str, Any]], expected: Head | None, tree: TreeUpdate | None = None
    ) -> bool:
        """Atomically append a batch if the head is still ``expected`` (compare-and-set).

        Returns False and writes nothing when the current head differs from
        ``expected``; otherwise writes every receipt, moves the head to the
        last one and returns True. With ``tree`` (covering exactly this
        batch), its Merkle nodes are written in the same atomic step and the
        tree size moves to ``tree.new_size`` if it was ``tree.old_size``.
        Raises ``ValueError`` for a malformed batch (see :func:`check_batch`,
        :func:`check_tree_update`) and :class:`LedgerConflict` (writing
        nothing) when a receipt_id is already stored.
        """
        return (await self.compare_and_append(receipts, expected, tree)).appended

    @abc.abstractmethod
    async def compare_and_append(
        self, receipts: list[dict[str, Any]], expected: Head | None, tree: TreeUpdate | None = None,
        *, encoded: Sequence[bytes] | None = None, frontier: Sequence[bytes] | None = None,
        release_turn: bool = False,
    ) -> AppendOutcome:
        """:meth:`try_append`, returning the head found on a lost race (see :class:`AppendOutcome`).

        ``encoded``: the RFC 8785 bytes of each receipt when the caller has
        them (:class:`proxy.receipts.sealing.SealedReceipt`), so the store
        does not encode them again; they must equal ``canonical(receipt)``.
        ``frontier``: with ``tree``, the Merkle compact range after this
        batch, which a store may keep to hand to the next loser.
        ``release_turn``: the caller took the turn (:meth:`take_turn`) and
        hands it back with the head after this call, appended or not. Raises
        like :meth:`try_append`.
        """

    async def take_turn(self, timeout_s: float) -> tuple[Head | None, list[bytes] | None] | None:
        """Wait up to ``timeout_s`` seconds for the writers' turn token; return the ``(head, compact
        range or None)`` it carries, or None when no token came (or the store has no turns).

        Turn-taking is an optimisation for writers in several processes that keep losing the
        compare-and-set: the token holder seals on the head the token carries and its append
        hands the token on (``release_turn``), so waiting writers do not seal in vain. It
        never replaces the compare-and-set: a lost, stale or duplicated token only costs a
        retry. The default (SQLite: writers queue on the file lock) has no token.
        """
        return None

    @abc.abstractmethod
    async def get_by_height(self, height: int) -> dict[str, Any] | None:
        """Return the receipt at ``height`` or None."""

    @abc.abstractmethod
    async def get_by_id(self, receipt_id: str) -> dict[str, Any] | None:
        """Return the receipt with ``receipt_id`` or None."""

    @abc.abstractmethod
    async def range(self, start: int, end: int) -> list[dict[str, Any]]:
        """Return the stored receipts with ``start <= height < end``, in height order."""


class TreeStore(abc.ABC):
    """Merkle tree nodes (RFC 9162, see :mod:`proxy.primitives.merkle`) and signed checkpoint notes (C2SP).

    Nodes are 32-byte hashes keyed ``(level, index)``; the *tree size* is the
    number of leaves whose complete nodes are all stored. Every method may
    raise :class:`LedgerUnavailable`.
    """

    @abc.abstractmethod
    async def tree_size(self) -> int:
        """Return the number of leaves whose complete Merkle nodes are all stored (0 when none)."""

    @abc.abstractmethod
    async def get_nodes(self, ids: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Return the 32-byte hash of each node ``(level, index)`` in ``ids`` (None where not stored)."""

    @abc.abstractmethod
    async def put_nodes(self, update: TreeUpdate) -> bool:
        """Store nodes outside an append (backfill, ``sonate ledger reindex``); compare-and-set on the tree size.

        Writes ``update.nodes`` and moves the tree size to ``update.new_size``
        only if it is ``update.old_size`` and ``update.new_size`` does not
        exceed the receipts stored (head height + 1); returns False (writing
        nothing) otherwise. Raises ``ValueError`` for a malformed update.
        """

    @abc.abstractmethod
    async def put_checkpoint(self, tree_size: int, note: str) -> bool:
        """Store the signed checkpoint note for ``tree_size`` unless one is stored; return True if written.

        Idempotent: the first checkpoint stored for a size is kept. Raises
        ``ValueError`` (see :func:`check_checkpoint`).
        """

    @abc.abstractmethod
    async def get_checkpoint(self, tree_size: int) -> str | None:
        """Return the checkpoint note stored for ``tree_size``, or None."""

    @abc.abstractmethod
    async def latest_checkpoint(self) -> str | None:
        """Return the stored checkpoint note with the largest tree size, or None."""

    @abc.abstractmethod
    async def checkpoint_sizes(self, start: int = 0, end: int | None = None) -> list[int]:
        """Return the tree sizes with a stored checkpoint in ``start <= size < end``, ascending."""

    @abc.abstractmethod
    async def put_cosignature(self, tree_size: int, cosigner: str, line: str) -> None:
        """Store (or replace) witness ``cosigner``'s cosignature ``line`` (``— name base64\\n``) on checkpoint ``tree_size``.

        The caller verified the line (C2SP tlog-cosignature); one line per cosigner and size is kept.
        Raises ``ValueError`` for an empty name or a line that is not one signature line.
        """

    @abc.abstractmethod
    async def get_cosignatures(self, tree_size: int) -> list[str]:
        """Return the stored cosignature lines of checkpoint ``tree_size``, ordered by cosigner name."""


class ReviewQueue(abc.ABC):
    """Status compare-and-set queues of review items, one per name in :data:`QUEUES`.

    Items are JSON dicts with at least non-empty string ``"id"`` and
    ``"status"`` (see :func:`check_item`); ids are unique per queue, and queues
    never see each other's items. Every method raises ``ValueError`` for an
    unknown queue and may raise :class:`LedgerUnavailable`.
    """

    @abc.abstractmethod
    async def put_item(self, queue: str, item: dict[str, Any]) -> None:
        """Add ``item`` to ``queue``. Raises :class:`LedgerConflict` if its id exists, ``ValueError`` if malformed."""

    @abc.abstractmethod
    async def get_item(self, queue: str, item_id: str) -> dict[str, Any] | None:
        """Return the item ``item_id`` of ``queue``, or None."""

    @abc.abstractmethod
    async def list_items(self, queue: str, status: str | None = None) -> list[dict[str, Any]]:
        """Return the items of ``queue`` (only those with ``status`` if given), oldest first."""

    @abc.abstractmethod
    async def page_items(self, queue: str, statuses: str | Sequence[str] | None = None, *, after: str | None = None,
                         limit: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        """One page of ``queue`` in creation order: ``(items, cursor)``.

        ``statuses``: only items with one of these statuses (None: all). ``after``: the cursor
        of the previous page (an item id: the page starts after that item in creation order,
        whatever its status now). ``cursor`` is the id of the page's last item when more items
        may follow, else None. Items inserted while a client pages come after every earlier
        one (creation order is assigned atomically with the insert), so paging never skips or
        repeats an item; an item whose status changes meanwhile may leave a filtered listing.
        Raises ``ValueError`` (see :func:`check_page`), ``KeyError`` for an ``after`` id the
        queue does not hold, :class:`LedgerUnavailable`.
        """

    @abc.abstractmethod
    async def update_item(self, queue: str, item: dict[str, Any], *, expected_status: str | None = None) -> None:
        """Replace an existing item of ``queue`` (matched by id). Raises ``KeyError`` if it does not exist.

        With ``expected_status`` the replace is a compare-and-set on the
        stored status: it raises :class:`LedgerConflict` (writing nothing)
        unless the stored item still has that status, so two reviewers
        cannot both resolve one item.
        """


RESULT_SERIES = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
"""Names of evaluation result series (``conversation``, ``suite:support-bot`` ...)."""


def check_result(series: Any, result: Any) -> None:
    """Raise ``ValueError`` unless ``series`` matches :data:`RESULT_SERIES` and ``result`` is a
    JSON object with a non-empty string ``run_id`` and a string ``generated`` (RFC 3339 time)."""
    if not isinstance(series, str) or not RESULT_SERIES.match(series):
        raise ValueError("an evaluation series name is 1-100 of [A-Za-z0-9_.:-]")
    if not isinstance(result, dict):
        raise ValueError("an evaluation result must be a JSON object")
    if not isinstance(result.get("run_id"), str) or not result["run_id"]:
        raise ValueError("an evaluation result needs a non-empty string 'run_id'")
    if not isinstance(result.get("generated"), str):
        raise ValueError("an evaluation result needs a string 'generated' time")


class ResultLog(abc.ABC):
    """Append-only series of evaluation results (``sonate eval conversation``, suites), kept in the
    ledger's store for longitudinal queries (``sonate report`` trends).

    A result is a JSON object with a unique (per series) ``run_id`` and a ``generated`` time
    (:func:`check_result`), stored and returned unchanged in append order. Every method may raise
    :class:`LedgerUnavailable`; ``ValueError`` for a bad series name or result.
    """

    @abc.abstractmethod
    async def append_result(self, series: str, result: dict[str, Any]) -> None:
        """Append ``result`` to ``series``. Raises :class:`LedgerConflict` (writing nothing) when
        the series already holds its ``run_id``."""

    @abc.abstractmethod
    async def list_results(self, series: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The results of ``series`` in append order (only the last ``limit`` when given, ``limit``
        >= 1); an unknown series is empty."""


def check_limit(limit: Any) -> None:
    """Raise ``ValueError`` unless ``limit`` is None or an int >= 1."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError("limit must be None or an integer >= 1")


class LedgerStore(ReceiptLog, TreeStore, ReviewQueue, ResultLog):
    """The store a back end implements: :class:`ReceiptLog` + :class:`TreeStore` + :class:`ReviewQueue`
    + :class:`ResultLog`."""

    @abc.abstractmethod
    async def ping(self) -> None:
        """Return if the store is reachable and usable; raise :class:`LedgerUnavailable` otherwise."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent."""
