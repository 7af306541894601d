"""SQLite ledger store: the embedded single-node default (docs/architecture.md, "Trust receipts").

stdlib ``sqlite3`` on one dedicated worker thread per store (the event loop
never blocks on disk). WAL journal, ``synchronous=FULL`` so a committed
batch survives power loss. Each batch is one ``BEGIN IMMEDIATE``
transaction doing the head compare-and-set, which serialises writers across
threads *and* processes sharing the file.

The database file is created mode 0600 whatever the umask (SQLite gives its ``-wal`` and ``-shm``
files the database file's mode); an existing file readable by group or others is narrowed to
0600 with a warning (docs/security.md "Safe defaults").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import sqlite3
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from proxy.primitives import merkle
from proxy.primitives.canonical import canonical, sha256_ref
from proxy.storage.base import (
    AppendOutcome,
    Head,
    LedgerConflict,
    LedgerStore,
    LedgerUnavailable,
    TreeUpdate,
    check_batch,
    check_checkpoint,
    check_cosignature,
    check_item,
    check_limit,
    check_page,
    check_queue,
    check_result,
    check_tree_update,
)

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
CREATE TABLE IF NOT EXISTS review_items (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    id     TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    body   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS review_items_by_status ON review_items (status, seq);
CREATE TABLE IF NOT EXISTS tree_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger_meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
    tree_size INTEGER PRIMARY KEY,
    note      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoint_cosignatures (
    tree_size INTEGER NOT NULL,
    cosigner  TEXT NOT NULL,
    line      TEXT NOT NULL,
    PRIMARY KEY (tree_size, cosigner)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS eval_results (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    series TEXT NOT NULL,
    run_id TEXT NOT NULL,
    body   TEXT NOT NULL,
    UNIQUE (series, run_id)
);
"""


#: The table of each review queue (names kept from before the queues were one API).
_QUEUE_TABLES = {"escalations": "cases", "adjudications": "review_items"}

_log = logging.getLogger("sonate.storage.sqlite")
#: Permission bits of the ledger database and its -wal/-shm files: owner read/write only.
FILE_MODE = 0o600


def _narrow(name: str) -> None:
    """chmod ``name`` to 0600 if group or others may access it (a warning either way); absent: nothing."""
    try:
        mode = stat.S_IMODE(os.stat(name).st_mode)
        if mode & 0o077:
            os.chmod(name, FILE_MODE)
            _log.warning("%s was mode %o (readable by others): narrowed to 0600", name, mode)
    except FileNotFoundError:
        return
    except PermissionError as exc:
        _log.warning("%s cannot be narrowed to mode 0600: %s", name, exc)


def private_file(path: str) -> None:
    """Create the database file at ``path`` mode 0600 (umask-independent) if it does not exist;
    narrow an existing one (and its ``-wal``/``-shm`` files) readable by group or others to 0600.

    SQLite creates new files 0644 minus the umask and its journal files with the database's mode.
    Raises ``OSError`` when the file cannot be created.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, FILE_MODE)
    except FileExistsError:
        for name in (path, path + "-wal", path + "-shm"):
            _narrow(name)
        return
    try:
        os.fchmod(fd, FILE_MODE)  # os.open's mode is masked by the umask
    finally:
        os.close(fd)


class SQLiteStore(LedgerStore):
    """A :class:`LedgerStore` in one SQLite file.

    ``path`` is a file path (parent directories are created) or
    ``":memory:"``. Receipts are stored as canonical JSON (RFC 8785) with
    their entry hash, keyed by height (primary key) and receipt_id (unique).
    Merkle nodes live in ``tree_nodes (level, idx, hash)``, the tree size in
    ``ledger_meta`` (name ``tree_size``), checkpoint notes in
    ``checkpoints (tree_size, note)``; all are written in the same
    transactions as the receipts. SQLite errors surface as
    :class:`LedgerUnavailable`.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 30.0, create: bool = True) -> None:
        """Remember the database path; the file is opened on first use (created with its folders
        unless ``create`` is False: then a missing file is :class:`LedgerUnavailable` at first use)."""
        self.path = str(path)
        self._create = create
        self._busy_timeout_s = busy_timeout_s
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(1, thread_name_prefix="sonate-sqlite")
        self._conn: sqlite3.Connection | None = None

    # -- worker-thread side -------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            if self.path != ":memory:" and not self._create and not Path(self.path).is_file():
                raise LedgerUnavailable(f"no SQLite ledger at {self.path} (the proxy creates it on its first "
                                        "start; check the ledger URL)")
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                private_file(self.path)
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

    @staticmethod
    def _tree_size(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM ledger_meta WHERE name = 'tree_size'").fetchone()
        return int(row[0]) if row else 0

    @classmethod
    def _write_tree(cls, conn: sqlite3.Connection, update: TreeUpdate) -> None:
        """Write nodes; advance the tree size if it is ``update.old_size`` (inside a transaction)."""
        conn.executemany("INSERT OR REPLACE INTO tree_nodes (level, idx, hash) VALUES (?,?,?)",
                         [(level, idx, bytes(digest)) for (level, idx), digest in update.nodes.items()])
        if cls._tree_size(conn) == update.old_size and update.new_size != update.old_size:
            conn.execute("INSERT OR REPLACE INTO ledger_meta (name, value) VALUES ('tree_size', ?)",
                         (update.new_size,))

    @classmethod
    def _frontier(cls, conn: sqlite3.Connection, head: Head | None) -> list[bytes] | None:
        """The stored compact range at ``head`` (None unless the tree is complete up to it)."""
        size = 0 if head is None else head.height + 1
        if cls._tree_size(conn) != size:
            return None
        found: list[bytes] = []
        for level, idx in merkle.frontier_ids(size):
            row = conn.execute("SELECT hash FROM tree_nodes WHERE level = ? AND idx = ?", (level, idx)).fetchone()
            if row is None:
                return None
            found.append(bytes(row[0]))
        return found

    async def compare_and_append(
        self, receipts: list[dict[str, Any]], expected: Head | None, tree: TreeUpdate | None = None,
        *, encoded: Sequence[bytes] | None = None, frontier: Sequence[bytes] | None = None,
        release_turn: bool = False,
    ) -> AppendOutcome:
        """Compare-and-set append in one ``BEGIN IMMEDIATE`` transaction, tree nodes included (see
        :class:`LedgerStore`); a lost race returns the head and compact range read in that transaction."""
        check_batch(receipts, expected)
        if tree is not None:
            check_tree_update(tree, receipts)
        bodies = list(encoded) if encoded is not None else [canonical(r) for r in receipts]
        if len(bodies) != len(receipts):
            raise ValueError("encoded must hold one body per receipt")
        rows = [(r["ledger_height"], r["receipt_id"], sha256_ref(body), body.decode("utf-8"))
                for r, body in zip(receipts, bodies)]
        ids = [row[1] for row in rows]

        def append(conn: sqlite3.Connection) -> AppendOutcome:
            conn.execute("BEGIN IMMEDIATE")
            head = self._head(conn)
            if head != expected:
                outcome = AppendOutcome(False, head, self._frontier(conn, head))
                conn.rollback()
                return outcome
            marks = ",".join("?" * len(ids))
            taken = conn.execute(f"SELECT receipt_id FROM receipts WHERE receipt_id IN ({marks})", ids).fetchall()
            if taken:
                conn.rollback()
                raise LedgerConflict(f"receipt_id {taken[0][0]} is already in the ledger")
            conn.executemany("INSERT INTO receipts (height, receipt_id, entry_hash, body) VALUES (?,?,?,?)", rows)
            if tree is not None:
                self._write_tree(conn, tree)
            conn.commit()
            return AppendOutcome(True, Head(rows[-1][0], rows[-1][2]))

        return await self._run(append)

    # -- Merkle tree and checkpoints ------------------------------------------
    async def tree_size(self) -> int:
        """Return the number of leaves whose complete Merkle nodes are stored."""
        return await self._run(self._tree_size)

    async def get_nodes(self, ids: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Return each node's 32-byte hash (None where not stored), in the order of ``ids``."""
        wanted = list(ids)
        if not wanted:
            return []

        by_level: dict[int, list[int]] = {}
        for level, idx in wanted:
            by_level.setdefault(level, []).append(idx)

        def read(conn: sqlite3.Connection) -> dict[tuple[int, int], bytes]:
            # One primary-key lookup per level: "level = ? AND idx IN (...)" uses the index
            # (a row-value IN over VALUES would scan the table).
            found: dict[tuple[int, int], bytes] = {}
            for level, indexes in by_level.items():
                for lo in range(0, len(indexes), 500):  # stay under SQLite's bound-parameter limit
                    chunk = indexes[lo:lo + 500]
                    marks = ",".join("?" * len(chunk))
                    for idx, digest in conn.execute(
                            f"SELECT idx, hash FROM tree_nodes WHERE level = ? AND idx IN ({marks})", [level, *chunk]):
                        found[(level, idx)] = bytes(digest)
            return found

        found = await self._run(read)
        return [found.get((node[0], node[1])) for node in wanted]

    async def put_nodes(self, update: TreeUpdate) -> bool:
        """Backfill nodes with a compare-and-set on the tree size (see :class:`LedgerStore`)."""
        check_tree_update(update)

        def put(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")
            head = self._head(conn)
            if self._tree_size(conn) != update.old_size or update.new_size > (0 if head is None else head.height + 1):
                conn.rollback()
                return False
            self._write_tree(conn, update)
            conn.commit()
            return True

        return await self._run(put)

    async def put_checkpoint(self, tree_size: int, note: str) -> bool:
        """Store a checkpoint note unless one exists for ``tree_size``; True if written."""
        check_checkpoint(tree_size, note)

        def put(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute("INSERT OR IGNORE INTO checkpoints (tree_size, note) VALUES (?,?)", (tree_size, note))
            return cursor.rowcount == 1

        return await self._run(put)

    async def get_checkpoint(self, tree_size: int) -> str | None:
        """Return the checkpoint note for ``tree_size`` or None."""
        row = await self._run(
            lambda c: c.execute("SELECT note FROM checkpoints WHERE tree_size = ?", (tree_size,)).fetchone())
        return row[0] if row else None

    async def latest_checkpoint(self) -> str | None:
        """Return the checkpoint note with the largest tree size, or None."""
        row = await self._run(
            lambda c: c.execute("SELECT note FROM checkpoints ORDER BY tree_size DESC LIMIT 1").fetchone())
        return row[0] if row else None

    async def checkpoint_sizes(self, start: int = 0, end: int | None = None) -> list[int]:
        """Return stored checkpoint tree sizes in ``start <= size < end``, ascending."""
        stop = 2**63 - 1 if end is None else end
        rows = await self._run(lambda c: c.execute(
            "SELECT tree_size FROM checkpoints WHERE tree_size >= ? AND tree_size < ? ORDER BY tree_size",
            (start, stop)).fetchall())
        return [row[0] for row in rows]

    async def put_cosignature(self, tree_size: int, cosigner: str, line: str) -> None:
        """Store (or replace) ``cosigner``'s cosignature line on checkpoint ``tree_size``."""
        check_cosignature(tree_size, cosigner, line)

        def put(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO checkpoint_cosignatures (tree_size, cosigner, line) VALUES (?,?,?)",
                         (tree_size, cosigner, line))

        await self._run(put)

    async def get_cosignatures(self, tree_size: int) -> list[str]:
        """Return the cosignature lines stored for checkpoint ``tree_size``, by cosigner name."""
        rows = await self._run(lambda c: c.execute(
            "SELECT line FROM checkpoint_cosignatures WHERE tree_size = ? ORDER BY cosigner", (tree_size,)).fetchall())
        return [row[0] for row in rows]

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

    # -- review queues ----------------------------------------------------------
    async def put_item(self, queue: str, item: dict[str, Any]) -> None:
        """Insert an item into the queue's table; :class:`LedgerConflict` if the id exists."""
        check_item(queue, item)
        table = _QUEUE_TABLES[queue]
        body = json.dumps(item, ensure_ascii=False)

        def put(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(f"INSERT INTO {table} (id, status, body) VALUES (?,?,?)",
                             (item["id"], item["status"], body))
            except sqlite3.IntegrityError:
                raise LedgerConflict(f"{queue} item {item['id']} already exists") from None

        await self._run(put)

    async def get_item(self, queue: str, item_id: str) -> dict[str, Any] | None:
        """Return the item of ``queue`` or None."""
        check_queue(queue)
        table = _QUEUE_TABLES[queue]
        row = await self._run(lambda c: c.execute(f"SELECT body FROM {table} WHERE id = ?", (item_id,)).fetchone())
        return json.loads(row[0]) if row else None

    async def list_items(self, queue: str, status: str | None = None) -> list[dict[str, Any]]:
        """Return the items of ``queue``, oldest first, optionally only those with ``status``."""
        check_queue(queue)
        table = _QUEUE_TABLES[queue]
        params: tuple[str, ...]
        if status is None:
            query, params = f"SELECT body FROM {table} ORDER BY seq", ()
        else:
            query, params = f"SELECT body FROM {table} WHERE status = ? ORDER BY seq", (status,)
        rows = await self._run(lambda c: c.execute(query, params).fetchall())
        return [json.loads(row[0]) for row in rows]

    async def page_items(self, queue: str, statuses: str | Sequence[str] | None = None, *, after: str | None = None,
                         limit: int = 100) -> tuple[list[dict[str, Any]], str | None]:
        """One page in ``seq`` order (``WHERE seq > ? [AND status IN (...)] ORDER BY seq LIMIT limit+1``);
        see :meth:`ReviewQueue.page_items`."""
        check_queue(queue)
        wanted = check_page(statuses, limit)
        table = _QUEUE_TABLES[queue]

        def page(conn: sqlite3.Connection) -> tuple[list[Any], bool]:
            start = 0
            if after is not None:
                row = conn.execute(f"SELECT seq FROM {table} WHERE id = ?", (after,)).fetchone()
                if row is None:
                    raise KeyError(after)
                start = row[0]
            where = "" if wanted is None else f" AND status IN ({','.join('?' * len(wanted))})"
            rows = conn.execute(f"SELECT body FROM {table} WHERE seq > ?{where} ORDER BY seq LIMIT ?",
                                (start, *(wanted or ()), limit + 1)).fetchall()
            return rows[:limit], len(rows) > limit

        rows, more = await self._run(page)
        items = [json.loads(row[0]) for row in rows]
        return items, items[-1]["id"] if more else None

    async def update_item(self, queue: str, item: dict[str, Any], *, expected_status: str | None = None) -> None:
        """Replace an item in one transaction; ``KeyError`` if missing, :class:`LedgerConflict` on a status mismatch."""
        check_item(queue, item)
        table = _QUEUE_TABLES[queue]
        body = json.dumps(item, ensure_ascii=False)

        def update(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            row = conn.execute(f"SELECT status FROM {table} WHERE id = ?", (item["id"],)).fetchone()
            if row is None:
                conn.rollback()
                raise KeyError(item["id"])
            if expected_status is not None and row[0] != expected_status:
                conn.rollback()
                raise LedgerConflict(f"{queue} item {item['id']} is {row[0]}, not {expected_status}")
            conn.execute(f"UPDATE {table} SET status = ?, body = ? WHERE id = ?", (item["status"], body, item["id"]))
            conn.commit()

        await self._run(update)

    # -- lifecycle --------------------------------------------------------------
    # -- evaluation results -------------------------------------------------------
    async def append_result(self, series: str, result: dict[str, Any]) -> None:
        """Insert into ``eval_results``; :class:`LedgerConflict` if the series holds the run_id."""
        check_result(series, result)
        body = json.dumps(result, ensure_ascii=False)

        def put(conn: sqlite3.Connection) -> None:
            try:
                conn.execute("INSERT INTO eval_results (series, run_id, body) VALUES (?,?,?)",
                             (series, result["run_id"], body))
            except sqlite3.IntegrityError:
                raise LedgerConflict(f"evaluation run {result['run_id']} already stored in {series}") from None

        await self._run(put)

    async def list_results(self, series: str, *, limit: int | None = None) -> list[dict[str, Any]]:
        """The results of ``series`` in ``seq`` order (the last ``limit``)."""
        check_result(series, {"run_id": "-", "generated": ""})
        check_limit(limit)
        query = ("SELECT body FROM (SELECT seq, body FROM eval_results WHERE series = ? ORDER BY seq DESC LIMIT ?) "
                 "ORDER BY seq")
        rows = await self._run(lambda c: c.execute(query, (series, -1 if limit is None else limit)).fetchall())
        return [json.loads(row[0]) for row in rows]

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
