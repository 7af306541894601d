"""A durable local spool of receipt batches waiting for the ledger (``ledger.on_unavailable: spool``).

One append-only JSON-lines file per process in ``spool_dir``, named
``spool-<host>-<pid>-<random>.jsonl`` and held under an exclusive ``flock``
while the process lives. Lines::

    {"op": "batch", "seq": 7, "receipts": [<unsealed receipt>, ...]}
    {"op": "ack", "seq": 7}

A batch line is written and ``fsync``-ed before :meth:`Spool.append`
returns, so a response that says its receipt is pending never outlives its
receipt. Acks are written without fsync: replaying an already appended batch
is harmless because :meth:`proxy.receipts.chain.Ledger.append` is idempotent
by receipt_id and content. When every batch is acked the file is truncated.
A torn last line (a crash mid-write) belongs to a batch that was never
acknowledged to a client and is ignored.

A spool file whose lock can be taken belongs to a dead process (``kill -9``,
crash): :meth:`Spool.adopt_orphans` copies its unacked batches, in order, to
the end of this process's spool and deletes it. ``flock`` is per host: the
spool directory must be local to the host (not NFS). Spool and quarantine files are created
mode 0600 whatever the umask, in a directory created 0700: they hold unsealed receipts.

Blocking file I/O: call these methods from one worker thread (the sink
does), never from the event loop. Thread-safe.
"""

from __future__ import annotations

import collections
import fcntl
import json
import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.files import fsync_dir
from proxy.storage.base import LedgerUnavailable

__all__ = ["Spool", "SpoolFull", "SpooledBatch", "read_spool_file"]

log = logging.getLogger("sonate.spool")


class SpoolFull(LedgerUnavailable):
    """The spool reached ``max_bytes`` (or the disk is full): the receipt cannot be kept."""


@dataclass(frozen=True)
class SpooledBatch:
    """One batch in the spool: its sequence number in this spool and its unsealed receipts."""

    seq: int
    receipts: list[dict[str, Any]]


def read_spool_file(path: str | os.PathLike[str]) -> list[SpooledBatch]:
    """Return the unacked batches of a spool file, in order.

    Ignores a torn last line (no trailing newline or invalid JSON). Raises
    ``ValueError`` for a malformed line elsewhere (the file is corrupt; it is
    left in place for an operator) and ``OSError`` if it cannot be read.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    if tail:
        log.warning("%s: ignoring a torn last line (%d bytes) left by a crash mid-write", path, len(tail))
    batches: dict[int, list[dict[str, Any]]] = {}
    for number, line in enumerate(complete, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            op, seq = record["op"], record["seq"]
            if op == "batch":
                if not isinstance(record["receipts"], list) or not record["receipts"]:
                    raise ValueError("empty batch")
                batches[seq] = record["receipts"]
            elif op == "ack":
                batches.pop(seq, None)
            else:
                raise ValueError(f"unknown op {op!r}")
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(complete) and not tail:
                log.warning("%s: ignoring a torn last line (%s)", path, exc)
                continue
            raise ValueError(f"{path}: line {number} is not a spool record ({exc})") from None
    return [SpooledBatch(seq, batches[seq]) for seq in sorted(batches)]


class Spool:
    """This process's spool file in ``directory`` (created 0700), at most ``max_bytes`` long.

    :meth:`open` must be called first. ``depth`` is the number of receipts
    waiting; :meth:`peek` gives the oldest batch, :meth:`ack` removes it.
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_bytes: int = 1 << 30) -> None:
        """Remember the directory and the size cap (bytes); no I/O until :meth:`open`."""
        if max_bytes <= 0:
            raise ValueError("max_bytes must be > 0")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.path: Path | None = None
        self._fd: int | None = None
        self._size = 0
        self._seq = 0
        self._pending: collections.deque[SpooledBatch] = collections.deque()
        self._depth = 0
        self._lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> "Spool":
        """Create the directory and this process's locked spool file; return ``self``.

        Raises ``OSError`` when the directory or file cannot be created.
        """
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:40] or "host"
        name = f"spool-{host}-{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        # Created and locked under a name adopters ignore, then renamed: nobody can see it unlocked.
        # (Not proxy.files.atomic_write: the spool keeps this descriptor open, locked, for appends.)
        tmp = self.directory / f".{name}.new"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_APPEND, 0o600)
        os.fchmod(fd, 0o600)  # exactly 0600: os.open's mode is masked by the umask
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.path = self.directory / name
        os.replace(tmp, self.path)
        self._fd = fd
        fsync_dir(self.directory)
        return self

    def close(self) -> None:
        """Close the file (and release its lock). An empty spool file is deleted. Idempotent."""
        with self._lock:
            if self._fd is None:
                return
            if not self._pending and self.path is not None:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            os.close(self._fd)
            self._fd = None

    # -- writing ----------------------------------------------------------------------------------
    def _write(self, record: dict[str, Any], *, sync: bool) -> None:
        if self._fd is None:
            raise LedgerUnavailable("the receipt spool is not open")
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        if self._size + len(line) > self.max_bytes:
            raise SpoolFull(f"receipt spool {self.path} is full ({self._size} of {self.max_bytes} bytes)")
        try:
            written = os.write(self._fd, line)
            if written != len(line):
                raise OSError(f"short write ({written} of {len(line)} bytes)")
            if sync:
                os.fsync(self._fd)
        except OSError as exc:
            try:  # drop the partial line so the file stays parseable
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            raise SpoolFull(f"cannot write the receipt spool {self.path}: {exc}") from exc
        self._size += len(line)

    def append(self, receipts: list[dict[str, Any]]) -> SpooledBatch:
        """Durably add one batch of unsealed receipts (written and fsynced) behind the others.

        Raises :class:`SpoolFull` (a :class:`LedgerUnavailable`) when the cap
        is reached or the write fails; nothing is kept then.
        """
        if not receipts:
            raise ValueError("a spooled batch needs at least one receipt")
        with self._lock:
            batch = SpooledBatch(self._seq + 1, [dict(r) for r in receipts])
            self._write({"op": "batch", "seq": batch.seq, "receipts": batch.receipts}, sync=True)
            self._seq = batch.seq
            self._pending.append(batch)
            self._depth += len(batch.receipts)
            return batch

    def ack(self, seq: int) -> None:
        """Mark batch ``seq`` (the oldest) as appended to the ledger; truncate the file when empty.

        Raises ``ValueError`` if ``seq`` is not the oldest pending batch.
        """
        with self._lock:
            if not self._pending or self._pending[0].seq != seq:
                raise ValueError(f"batch {seq} is not the oldest pending batch")
            batch = self._pending.popleft()
            self._depth -= len(batch.receipts)
            try:
                if self._pending:
                    self._write({"op": "ack", "seq": seq}, sync=False)
                elif self._fd is not None:
                    os.ftruncate(self._fd, 0)
                    os.fsync(self._fd)
                    self._size = 0
            except (OSError, LedgerUnavailable) as exc:  # harmless: a replay is idempotent
                log.warning("could not record the ack of spooled batch %d: %s", seq, exc)

    def quarantine(self, seq: int, reason: str) -> Path:
        """Move the oldest batch ``seq``, which the ledger refuses for good, to a quarantine file.

        The batch is written (fsynced) with ``reason`` to
        ``quarantine-<spool file name>`` in the spool directory for an
        operator, then acked, so the batches behind it can proceed. Returns
        the quarantine file's path. Raises ``ValueError`` if ``seq`` is not
        the oldest batch, ``OSError`` if the quarantine file cannot be written.
        """
        batch = self.peek()
        if batch is None or batch.seq != seq or self.path is None:
            raise ValueError(f"batch {seq} is not the oldest pending batch")
        target = self.directory / f"quarantine-{self.path.name}"
        line = json.dumps({"seq": seq, "reason": reason, "receipts": batch.receipts}, ensure_ascii=False)
        fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, line.encode("utf-8") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        self.ack(seq)
        return target

    # -- reading ----------------------------------------------------------------------------------
    def peek(self) -> SpooledBatch | None:
        """The oldest pending batch, or None when the spool is empty."""
        with self._lock:
            return self._pending[0] if self._pending else None

    def peek_many(self, max_receipts: int) -> list[SpooledBatch]:
        """The oldest pending batches, in order, holding at most ``max_receipts`` receipts together
        (always at least the oldest batch, whatever its size); empty when the spool is."""
        with self._lock:
            out: list[SpooledBatch] = []
            count = 0
            for batch in self._pending:
                if out and count + len(batch.receipts) > max_receipts:
                    break
                out.append(batch)
                count += len(batch.receipts)
            return out

    @property
    def depth(self) -> int:
        """Receipts waiting in the spool."""
        return self._depth

    def find(self, receipt_id: str) -> dict[str, Any] | None:
        """The pending (unsealed) receipt with ``receipt_id``, or None."""
        with self._lock:
            for batch in self._pending:
                for receipt in batch.receipts:
                    if receipt.get("receipt_id") == receipt_id:
                        return dict(receipt)
        return None

    def adopt_orphans(self) -> int:
        """Move the pending batches of dead processes' spool files to the end of this spool.

        A file is an orphan when its ``flock`` can be taken. Its batches are
        appended here (fsynced) in their order, then the file is deleted.
        A corrupt orphan is renamed ``*.corrupt`` and logged. Returns the
        number of receipts adopted.
        """
        adopted = 0
        for other in sorted(self.directory.glob("spool-*.jsonl")):
            if other == self.path:
                continue
            try:
                fd = os.open(other, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live process owns it
                try:
                    batches = read_spool_file(other)
                except ValueError as exc:
                    log.error("%s; renamed to .corrupt for an operator to inspect", exc)
                    os.replace(other, other.with_suffix(".corrupt"))
                    continue
                for batch in batches:
                    self.append(batch.receipts)
                    adopted += len(batch.receipts)
                os.unlink(other)
                if batches:
                    log.warning("adopted %d spooled batch(es) from %s (its process is gone)", len(batches), other.name)
            finally:
                os.close(fd)
        return adopted

    def __repr__(self) -> str:
        return f"Spool({str(self.path or self.directory)!r}, depth={self.depth})"
