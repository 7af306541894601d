"""SQLite ledger store: the embedded single-node default (DESIGN.md).

stdlib ``sqlite3`` on one dedicated worker thread per store (the event loop
never blocks on disk). WAL journal, ``synchronous=FULL`` so a committed
batch survives power loss. Each batch is one ``BEGIN IMMEDIATE``
transaction doing the head compare-and-set, which serialises writers across
threads *and* processes sharing the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

from .canonical import canonical
from .model import entry_hash
from .store import Head, LedgerConflict, LedgerStore, LedgerUnavailable, check_batch, check_case

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS receipts (
    height     INTEGER PRIMARY KEY,
    receipt_id TEXT NOT NULL UNIQUE,
    entry_hash TEXT NOT NULL,
    body       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cases (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    id     TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    body   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS cases_by_status ON cases (status, seq);
"""


class SQLiteStore(LedgerStore):
    """A :class:`LedgerStore` in one SQLite file.

    ``path`` is a file path (parent directories are created) or
    ``":memory:"``. Receipts are stored as canonical JSON (RFC 8785) with
    their entry hash, keyed by height (primary key) and receipt_id (unique).
    SQLite errors surface as :class:`LedgerUnavailable`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0) -> None:
        """Remember the database path; the file is opened on first use."""
        self.path = str(path)
        self._busy_timeout_s = busy_timeout_s
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="sonate-sqlite")
        self._conn: sqlite3.Connection | None = None

    # -- worker-thread side -------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
            try:
                self._enable_wal(conn)
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL, retrying while another opener holds it.

        Changing the journal mode can fail at once with "database is locked"
        (SQLite does not always call the busy handler for it) when several
        processes open a new file together.
        """
        deadline = time.monotonic() + self._busy_timeout_s
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.02))

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None:
            raise LedgerUnavailable(f"SQLite ledger {self.path} is closed")

        def call() -> T:
            conn = self._connection()
            try:
                return fn(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except (sqlite3.Error, OSError) as exc:
            raise LedgerUnavailable(f"SQLite ledger {self.path}: {exc}") from exc

    @staticmethod
    def _head(conn: sqlite3.Connection) -> Head | None:
        row = conn.execute("SELECT height, entry_hash FROM receipts ORDER BY height DESC LIMIT 1").fetchone()
        return Head(row[0], row[1]) if row else None

    # -- receipts -------------------------------------------------------------
    async def head(self) -> Head | None:
        """Return the last receipt's height and entry hash, or None when empty."""
        return await self._run(self._head)

    async def try_append(self, receipts: list[dict[str, Any]], expected: Head | None) -> bool:
        """Compare-and-set append in one ``BEGIN IMMEDIATE`` transaction (see :class:`LedgerStore`)."""
        check_batch(receipts, expected)
        rows = [
            (r["ledger_height"], r["receipt_id"], entry_hash(r), canonical(r).decode("utf-8"))
            for r in receipts
        ]
        ids = [row[1] for row in rows]

        def append(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            if self._head(conn) != expected:
                conn.rollback()
                return False
            marks = ",".join("?" * len(ids))
            taken = conn.execute(f"SELECT receipt_id FROM receipts WHERE receipt_id IN ({marks})", ids).fetchall()
            if taken:
                conn.rollback()
                raise LedgerConflict(f"receipt_id {taken[0][0]} is already in the ledger")
            conn.executemany("INSERT INTO receipts (height, receipt_id, entry_hash, body) VALUES (?,?,?,?)", rows)
            conn.commit()
            return True

        return await self._run(append)

    async def get_by_height(self, height: int) -> dict[str, Any] | None:
        """Return the receipt at ``height`` or None."""
        row = await self._run(lambda c: c.execute("SELECT body FROM receipts WHERE height = ?", (height,)).fetchone())
        return json.loads(row[0]) if row else None

    async def get_by_id(self, receipt_id: str) -> dict[str, Any] | None:
        """Return the receipt with ``receipt_id`` or None."""
        row = await self._run(
            lambda c: c.execute("SELECT body FROM receipts WHERE receipt_id = ?", (receipt_id,)).fetchone()
        )
        return json.loads(row[0]) if row else None

    async def range(self, start: int, end: int) -> list[dict[str, Any]]:
        """Return receipts with ``start <= height < end`` in height order."""
        rows = await self._run(
            lambda c: c.execute(
                "SELECT body FROM receipts WHERE height >= ? AND height < ? ORDER BY height", (start, end)
            ).fetchall()
        )
        return [json.loads(row[0]) for row in rows]

    # -- review cases ----------------------------------------------------------
    async def put_case(self, case: dict[str, Any]) -> None:
        """Insert a review case; :class:`LedgerConflict` if the id exists."""
        check_case(case)
        body = json.dumps(case, ensure_ascii=False)

        def put(conn: sqlite3.Connection) -> None:
            try:
                conn.execute("INSERT INTO cases (id, status, body) VALUES (?,?,?)", (case["id"], case["status"], body))
            except sqlite3.IntegrityError:
                raise LedgerConflict(f"review case {case['id']} already exists") from None

        await self._run(put)

    async def get_case(self, case_id: str) -> dict[str, Any] | None:
        """Return the review case or None."""
        row = await self._run(lambda c: c.execute("SELECT body FROM cases WHERE id = ?", (case_id,)).fetchone())
        return json.loads(row[0]) if row else None

    async def list_cases(self, status: str | None = None) -> list[dict[str, Any]]:
        """Return review cases, oldest first, optionally only those with ``status``."""
        if status is None:
            query, params = "SELECT body FROM cases ORDER BY seq", ()
        else:
            query, params = "SELECT body FROM cases WHERE status = ? ORDER BY seq", (status,)
        rows = await self._run(lambda c: c.execute(query, params).fetchall())
        return [json.loads(row[0]) for row in rows]

    async def update_case(self, case: dict[str, Any], *, expected_status: str | None = None) -> None:
        """Replace an existing review case; ``KeyError`` if missing, :class:`LedgerConflict` on a status mismatch."""
        check_case(case)
        body = json.dumps(case, ensure_ascii=False)

        def update(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute("SELECT status FROM cases WHERE id = ?", (case["id"],)).fetchone()
            if row is None:
                conn.rollback()
                raise KeyError(case["id"])
            if expected_status is not None and row[0] != expected_status:
                conn.rollback()
                raise LedgerConflict(f"review case {case['id']} is {row[0]}, not {expected_status}")
            conn.execute("UPDATE cases SET status = ?, body = ? WHERE id = ?", (case["status"], body, case["id"]))
            conn.commit()

        await self._run(update)

    # -- lifecycle --------------------------------------------------------------
    async def ping(self) -> None:
        """Open the database (creating the schema) and run ``SELECT 1``."""
        await self._run(lambda c: c.execute("SELECT 1").fetchone())

    async def close(self) -> None:
        """Close the connection and stop the worker thread. Idempotent."""
        executor, self._executor = self._executor, None
        if executor is None:
            return

        def shutdown() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        try:
            await asyncio.get_running_loop().run_in_executor(executor, shutdown)
        finally:
            executor.shutdown(wait=False)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"
