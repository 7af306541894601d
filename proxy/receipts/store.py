"""The ledger store interface shared by the SQLite and Redis back ends.

DESIGN.md, "Trust receipts": stores append a batch atomically, get by height
or id, report the head and read ranges; concurrent appends must never fork
or gap the chain. The store itself is a compare-and-set log: the
:class:`proxy.receipts.ledger.Ledger` seals receipts, the store keeps them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

__all__ = [
    "Head",
    "LedgerConflict",
    "LedgerError",
    "LedgerStore",
    "LedgerUnavailable",
    "check_batch",
    "check_case",
    "open_store",
]


@dataclass(frozen=True)
class Head:
    """The last receipt of a ledger: its ``height`` and ``entry_hash`` (``sha256:<hex>``)."""

    height: int
    entry_hash: str


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


def check_case(case: Any) -> None:
    """Raise ``ValueError`` unless ``case`` is a dict with non-empty string ``id`` and ``status``."""
    if not isinstance(case, dict):
        raise ValueError("a review case must be a JSON object")
    for field in ("id", "status"):
        if not isinstance(case.get(field), str) or not case[field]:
            raise ValueError(f"a review case needs a non-empty string {field!r}")


class LedgerStore(abc.ABC):
    """Durable, append-only storage of sealed receipts plus the review queue.

    Receipts are JSON dicts (see :mod:`proxy.receipts.model`), stored and
    returned unchanged. Review cases are JSON dicts with at least string
    ``"id"`` and ``"status"``. Every method may raise
    :class:`LedgerUnavailable` when the store cannot be reached.
    """

    @abc.abstractmethod
    async def head(self) -> Head | None:
        """Return the last receipt's height and entry hash, or None for an empty ledger."""

    @abc.abstractmethod
    async def try_append(self, receipts: list[dict[str, Any]], expected: Head | None) -> bool:
        """Atomically append a batch if the head is still ``expected`` (compare-and-set).

        Returns False and writes nothing when the current head differs from
        ``expected``; otherwise writes every receipt, moves the head to the
        last one and returns True. Raises ``ValueError`` for a malformed
        batch (see :func:`check_batch`) and :class:`LedgerConflict` (writing
        nothing) when a receipt_id is already stored.
        """

    @abc.abstractmethod
    async def get_by_height(self, height: int) -> dict[str, Any] | None:
        """Return the receipt at ``height`` or None."""

    @abc.abstractmethod
    async def get_by_id(self, receipt_id: str) -> dict[str, Any] | None:
        """Return the receipt with ``receipt_id`` or None."""

    @abc.abstractmethod
    async def range(self, start: int, end: int) -> list[dict[str, Any]]:
        """Return the stored receipts with ``start <= height < end``, in height order."""

    @abc.abstractmethod
    async def put_case(self, case: dict[str, Any]) -> None:
        """Add a review case. Raises :class:`LedgerConflict` if its id exists, ``ValueError`` if malformed."""

    @abc.abstractmethod
    async def get_case(self, case_id: str) -> dict[str, Any] | None:
        """Return the review case ``case_id`` or None."""

    @abc.abstractmethod
    async def list_cases(self, status: str | None = None) -> list[dict[str, Any]]:
        """Return review cases (only those with ``status`` if given), oldest first."""

    @abc.abstractmethod
    async def update_case(self, case: dict[str, Any], *, expected_status: str | None = None) -> None:
        """Replace an existing review case (matched by id). Raises ``KeyError`` if it does not exist.

        With ``expected_status``, the replace is a compare-and-set: it raises
        :class:`LedgerConflict` (writing nothing) unless the stored case still
        has that status, so two reviewers cannot both resolve one case.
        """

    @abc.abstractmethod
    async def ping(self) -> None:
        """Return if the store is reachable and usable; raise :class:`LedgerUnavailable` otherwise."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent."""


def open_store(url: str) -> LedgerStore:
    """Return the store for a ledger URL (connections open lazily, on first use).

    - ``sqlite:///relative/path.db`` (relative to the working directory),
      ``sqlite:////abs/path.db``;
    - ``redis://[user:password@]host:port/db[?namespace=name]`` (also
      ``rediss://``); the namespace (default ``sonate``) becomes the Redis
      Cluster hash tag ``{name}`` shared by every key.

    Raises ``ValueError`` with the accepted forms for anything else.
    """
    if not isinstance(url, str):
        raise ValueError(f"ledger URL must be a string, got {type(url).__name__}")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise ValueError(
                f"bad SQLite ledger URL {url!r}: use sqlite:///relative/path.db or sqlite:////abs/path.db"
            )
        from .sqlite_store import SQLiteStore

        return SQLiteStore(url[len("sqlite:///"):])
    if scheme in ("redis", "rediss"):
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        namespace = query.pop("namespace", ["sonate"])[-1]
        if not parts.hostname:  # the URL may hold a password: not echoed
            raise ValueError("bad Redis ledger URL (no host): use redis://host:port/db[?namespace=name]")
        from .redis_store import RedisStore

        rest = urlencode(query, doseq=True)
        return RedisStore(parts._replace(query=rest).geturl(), namespace=namespace)
    raise ValueError(
        f"unsupported ledger URL {url!r}: use sqlite:///path.db, sqlite:////abs/path.db "
        "or redis://host:port/db[?namespace=name]"
    )
