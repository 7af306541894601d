"""Where a request's receipts go: straight to the ledger, or through a local spool (fault policy).

``ledger.on_unavailable`` (docs/operations.md "Fault policy"):

- ``fail_closed`` → :class:`LedgerSink`. Before the model is called,
  :meth:`ReceiptSink.before_upstream` pings the store (``probe_timeout_seconds``;
  concurrent requests share one ping in flight); a store that does not answer
  stops the request with a 503 before anything is forwarded. A store that dies
  between that ping and the append still costs one model call whose answer
  is discarded (503): the ping narrows the window, it cannot close it.
- ``spool`` → :class:`SpoolingSink`. Receipts go to the ledger when it
  answers (within ``append_timeout_s``) and the spool is empty; otherwise
  they are written to the durable spool (:mod:`proxy.server.admission.spool`) and the
  caller learns they are pending. While the spool holds anything, new
  receipts queue behind it, so a process's receipts reach the chain in the
  order they were issued. A background task replays the spool, oldest batch
  first, through :meth:`proxy.receipts.chain.Ledger.append` (idempotent by
  receipt_id and content: a batch that did land before a crash is not written
  twice). The chain never forks or gaps: replayed batches are sealed on the
  head like any other append.

No aiohttp here; the app starts and stops the sink (:func:`register`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from proxy.receipts.chain import Ledger
from proxy.receipts.ledgers import Ledgers, ledger_of
from proxy.server.admission.spool import Spool
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerConflict, LedgerUnavailable

__all__ = ["Appended", "LedgerSink", "ReceiptSink", "SpoolingSink", "build_sink"]

log = logging.getLogger("sonate.sink")


@dataclass(frozen=True)
class Appended:
    """The result of :meth:`ReceiptSink.append`.

    ``receipts``: the sealed receipts (``pending`` False) or, when
    ``pending``, the unsealed receipts now in the spool (same receipt_ids;
    height, prev_hash, key_id and signature are set when they are replayed).
    """

    receipts: list[dict[str, Any]]
    pending: bool


class ReceiptSink(abc.ABC):
    """The pipeline's one way to write receipts (docs/architecture.md "Request flow": receipts appended)."""

    def __init__(self, ledger: Ledger | Ledgers, metrics: Metrics, *, probe_timeout_s: float = 0.5,
                 append_timeout_s: float = 5.0) -> None:
        """Bind the ledger (or the deployment's :class:`~proxy.receipts.ledgers.Ledgers`, which routes
        each receipt to its ledger) and metrics; timeouts in seconds. No I/O here."""
        self.ledger = ledger
        self.metrics = metrics
        self.probe_timeout_s = probe_timeout_s
        self.append_timeout_s = append_timeout_s

    async def before_upstream(self) -> None:
        """Raise :class:`LedgerUnavailable` if the model must not be called now (default: never)."""

    @abc.abstractmethod
    async def append(self, receipts: list[dict[str, Any]], *, allow_pending: bool = True) -> Appended:
        """Write one request's receipts (one batch). Raises :class:`proxy.storage.base.LedgerError`
        when they can be neither appended nor (``allow_pending``) spooled."""

    def pending(self, receipt_id: str) -> dict[str, Any] | None:
        """The unsealed receipt ``receipt_id`` if it waits in this process's spool, else None."""
        return None

    async def start(self) -> None:
        """Start background work (the spool replayer). Idempotent."""

    async def close(self) -> None:
        """Stop background work and release files. Idempotent."""

    async def _ledger_append(self, receipts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            return await asyncio.wait_for(self.ledger.append(receipts), self.append_timeout_s)
        except TimeoutError:
            raise LedgerUnavailable(f"the ledger did not answer within {self.append_timeout_s:g} s") from None


class LedgerSink(ReceiptSink):
    """``fail_closed``: receipts go to the ledger or the request fails; the store is pinged before
    the model is called (one ping in flight at a time, shared by the requests that arrive meanwhile)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As :class:`ReceiptSink`."""
        super().__init__(*args, **kwargs)
        self._probe: asyncio.Future[None] | None = None

    async def _ping(self) -> None:
        try:
            await asyncio.wait_for(self.ledger.store.ping(), self.probe_timeout_s)
        except TimeoutError:
            raise LedgerUnavailable(f"the ledger did not answer a ping within {self.probe_timeout_s:g} s") from None

    async def before_upstream(self) -> None:
        """Ping the store; raise :class:`LedgerUnavailable` when it does not answer in time."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._ping())
        await asyncio.shield(self._probe)

    async def append(self, receipts: list[dict[str, Any]], *, allow_pending: bool = True) -> Appended:
        """Append to the ledger; never pending."""
        return Appended(await self._ledger_append(receipts), False)


class SpoolingSink(ReceiptSink):
    """``spool``: the ledger when it answers and the spool is empty, else the durable spool.

    ``spool`` must be opened. Spool file I/O runs on one dedicated thread
    (FIFO: batches are written in the order they are submitted).
    """

    def __init__(self, ledger: Ledger | Ledgers, metrics: Metrics, spool: Spool, *, retry_max_s: float = 2.0,
                 adopt_every_s: float = 30.0, max_conflicts: int = 5, replay_receipts: int = 64,
                 **kwargs: Any) -> None:
        """As :class:`ReceiptSink`, plus the spool, the replay back-off cap (s), how often other
        dead processes' spool files are adopted (s), how many conflicts quarantine a batch, and
        how many spooled receipts one replay appends together (one atomic write)."""
        super().__init__(ledger, metrics, **kwargs)
        if replay_receipts < 1:
            raise ValueError("replay_receipts must be >= 1")
        self.spool = spool
        self.replay_receipts = replay_receipts
        self.retry_max_s = retry_max_s
        self.adopt_every_s = adopt_every_s
        self.max_conflicts = max_conflicts
        self._io = ThreadPoolExecutor(1, thread_name_prefix="sonate-spool")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._accepting = 0  # spool writes in flight: new receipts must queue behind them

    async def _io_call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _update_depth(self) -> None:
        self.metrics.spool_depth.set(self.spool.depth)

    async def append(self, receipts: list[dict[str, Any]], *, allow_pending: bool = True) -> Appended:
        """Append to the ledger, or spool when the ledger fails or the spool is not empty.

        With ``allow_pending`` False (a resolution whose case lives in the
        store) a non-empty spool or a failing ledger raises
        :class:`LedgerUnavailable` instead. Raises :class:`SpoolFull` when the
        receipts can be neither appended nor spooled.
        """
        if self.spool.depth == 0 and self._accepting == 0:
            try:
                return Appended(await self._ledger_append(receipts), False)
            except LedgerUnavailable as exc:
                if not allow_pending:
                    raise
                log.warning("ledger unavailable (%s): spooling %d receipt(s)", exc, len(receipts))
        elif not allow_pending:
            raise LedgerUnavailable("the ledger is catching up with the receipt spool; retry shortly")
        self._accepting += 1
        try:
            await self._io_call(self.spool.append, receipts)
        finally:
            self._accepting -= 1
        self._update_depth()
        self._wake.set()
        return Appended([dict(r) for r in receipts], True)

    def pending(self, receipt_id: str) -> dict[str, Any] | None:
        """The unsealed receipt if it waits in the spool."""
        return self.spool.find(receipt_id)

    async def start(self) -> None:
        """Adopt dead processes' spool files, then start the replay task."""
        if self._task is None:
            adopted = await self._io_call(self.spool.adopt_orphans)
            if adopted:
                log.warning("replaying %d receipt(s) left in the spool by a process that died", adopted)
            self._update_depth()
            self._task = asyncio.create_task(self._replay_forever(), name="sonate-spool-replay")

    async def close(self) -> None:
        """Stop replaying and close the spool (a non-empty spool file stays for the next start)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self._io_call(self.spool.close)
        self._io.shutdown(wait=True)

    async def replay_once(self) -> bool:
        """Append the oldest spooled batches; return True if the spool moved forward.

        The oldest batches (up to ``replay_receipts`` receipts) go to the ledger as one
        append, i.e. one atomic write in spool order; if that is refused
        (:class:`LedgerConflict`, e.g. one of them already landed before a crash, or a
        malformed receipt), the oldest batch is replayed alone, so a refused batch is
        found and quarantined by itself. Raises :class:`LedgerUnavailable` while the
        ledger is down and :class:`LedgerConflict` when the oldest batch conflicts with
        the ledger.
        """
        batches = self.spool.peek_many(self.replay_receipts)
        if not batches:
            return False
        sealed: list[dict[str, Any]] | None = None
        if len(batches) > 1:
            try:
                sealed = await self._ledger_append([r for batch in batches for r in batch.receipts])
            except (LedgerConflict, ValueError, TypeError) as exc:
                log.warning("replaying %d spooled batches together was refused (%s): one at a time",
                            len(batches), exc)
                batches = batches[:1]
        if sealed is None:
            sealed = await self._ledger_append(batches[0].receipts)
        for batch in batches:
            await self._io_call(self.spool.ack, batch.seq)
        self.metrics.spool_replayed.inc(len(sealed))
        for receipt in sealed:
            self.metrics.receipts_written.labels(receipt["guardrail_action"], ledger_of(receipt)).inc()
        self._update_depth()
        return True

    async def _replay_forever(self) -> None:
        loop = asyncio.get_running_loop()
        delay, conflicts, last_adopt = 0.05, 0, loop.time()
        while True:
            try:
                if loop.time() - last_adopt >= self.adopt_every_s:
                    last_adopt = loop.time()
                    await self._io_call(self.spool.adopt_orphans)
                    self._update_depth()
                if self.spool.peek() is None:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), 1.0)
                    except TimeoutError:
                        pass
                    continue
                await self.replay_once()
                delay, conflicts = 0.05, 0
                continue
            except asyncio.CancelledError:
                raise
            except LedgerUnavailable as exc:
                log.debug("spool replay waits for the ledger: %s", exc)
            except (LedgerConflict, ValueError, TypeError) as exc:
                conflicts += 1
                log.error("spooled batch refused by the ledger (%d/%d): %s", conflicts, self.max_conflicts, exc)
                batch = self.spool.peek()
                if batch is not None and (conflicts >= self.max_conflicts or not isinstance(exc, LedgerConflict)):
                    target = await self._io_call(self.spool.quarantine, batch.seq, str(exc))
                    self.metrics.spool_quarantined.inc(len(batch.receipts))
                    self._update_depth()
                    log.error("spooled batch %d quarantined in %s", batch.seq, target)
                    conflicts = 0
            except Exception:
                log.exception("spool replay failed; retrying")
            await asyncio.sleep(delay)
            delay = min(self.retry_max_s, delay * 2)


def build_sink(config: Any, ledger: Ledger | Ledgers, metrics: Metrics) -> ReceiptSink:
    """The sink ``config.ledger.on_unavailable`` asks for (the spool is opened here).

    Raises ``OSError`` when the spool directory cannot be used.
    """
    settings = config.ledger
    timeouts = dict(probe_timeout_s=settings.probe_timeout_seconds)
    if settings.on_unavailable == "spool":
        spool = Spool(config.path(settings.spool_dir), max_bytes=settings.spool_max_bytes).open()
        log.info("fault policy: spool (%s)", spool.path)
        return SpoolingSink(ledger, metrics, spool, **timeouts)
    return LedgerSink(ledger, metrics, **timeouts)
