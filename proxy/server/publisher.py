"""Background publication of signed checkpoints: every N new entries or every T seconds.

asyncio only (no aiohttp). The server starts one :class:`CheckpointPublisher`
per process (``proxy.server.routes.ledger``); several processes may publish
for one ledger: a checkpoint for a given size is stored once
(:meth:`LedgerStore.put_checkpoint` is idempotent) and Ed25519 signatures are
deterministic, so concurrent publishers of the same size agree byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Callable

from proxy.tlog.checkpoint import CheckpointError, parse_checkpoint
from proxy.receipts.chain import Ledger
from proxy.storage.base import LedgerError
from proxy.tlog.tree import publish_checkpoint

__all__ = ["CheckpointPublisher"]

log = logging.getLogger("sonate.checkpoints")


class CheckpointPublisher:
    """Publishes a checkpoint of ``ledger``'s stored tree when it grew by ``every_entries`` or ``interval_s`` passed.

    ``ledger``: the process's :class:`Ledger` (its current signer at publish
    time — ``signer_source()`` when set, else ``signer`` — signs, so a key
    rotation takes effect on the next checkpoint);
    ``origin``: the log origin / key name; ``on_publish(tree_size)`` is
    called after each checkpoint this process stored or found stored.
    Appends by this process wake it early (a ledger listener); appends by
    other processes are seen at the next interval. Store outages are logged
    and retried at the next wake-up; they never stop the task.
    """

    def __init__(self, ledger: Ledger, origin: str, every_entries: int, interval_s: float,
                 on_publish: Callable[[int], None] | None = None) -> None:
        """Configure; nothing runs until :meth:`start`. Raises ``ValueError`` for non-positive limits."""
        if every_entries < 1 or interval_s <= 0:
            raise ValueError("every_entries must be >= 1 and interval_s > 0")
        self.ledger = ledger
        self.origin = origin
        self.every_entries = every_entries
        self.interval_s = interval_s
        self.on_publish = on_publish
        self.published_size = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_error = 0.0

    def _on_append(self, size: int) -> None:
        if size - self.published_size >= self.every_entries:
            self._wake.set()

    async def publish_now(self) -> str | None:
        """Publish a checkpoint of the current stored tree if it grew; return the note (None: nothing new).

        Raises ``LedgerError`` if the store is unavailable.
        """
        size = await self.ledger.store.tree_size()
        if size <= self.published_size:
            return None
        source = getattr(self.ledger, "signer_source", None)
        signer = source() if source is not None else self.ledger.signer
        note = await publish_checkpoint(self.ledger.store, signer, self.origin, size)
        self.published_size = size
        if self.on_publish is not None:
            self.on_publish(size)
        return note

    async def _run(self) -> None:
        try:
            latest = await self.ledger.store.latest_checkpoint()
            if latest is not None:
                self.published_size = parse_checkpoint(latest).tree_size
        except (LedgerError, CheckpointError) as exc:
            log.warning("cannot read the latest checkpoint: %s", exc)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
            self._wake.clear()
            try:
                await self.publish_now()
            except LedgerError as exc:
                if time.monotonic() - self._last_error > 60:  # one warning a minute while the store is down
                    log.warning("checkpoint not published: %s", exc)
                    self._last_error = time.monotonic()
            except Exception:  # keep publishing after an unexpected error; it is logged
                log.exception("checkpoint publication failed")

    def start(self) -> None:
        """Start the background task in the running loop and listen to the ledger's appends."""
        if self._task is None:
            self.ledger.listeners.append(self._on_append)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sonate-checkpoints")

    async def stop(self) -> None:
        """Stop the task (idempotent)."""
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(ValueError):
            self.ledger.listeners.remove(self._on_append)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
