"""Background ledger work of a running proxy: the receipt sink (spool replay) and the ledger audit.

:func:`register` hooks both into the aiohttp app's start-up and clean-up.
The audit (:class:`LedgerAuditor`) samples ``ledger.audit_sample_size``
random receipts plus the newest every ``ledger.audit_interval_seconds``
(0: off) and counts each verdict in ``sonate_ledger_verifications_total{result}``
(see :mod:`proxy.receipts.audit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any, Callable, Mapping

from aiohttp import web

from proxy.receipts.audit import AuditResult, audit_heights, sample_heights
from proxy.server.http.requests import SERVICES
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerError, LedgerStore

__all__ = ["AUDITOR", "LedgerAuditor", "register"]

log = logging.getLogger("sonate.audit")


class LedgerAuditor:
    """Periodically re-verifies sampled receipts of ``store`` and counts the verdicts in ``metrics``.

    ``public_keys``: called each round for ``{key_id: key}`` (the keyring's,
    so rotated keys are known); ``interval_s`` seconds between rounds;
    ``sample_size`` random receipts per round, plus the newest.
    """

    def __init__(self, store: LedgerStore, public_keys: Callable[[], Mapping[str, bytes]], metrics: Metrics,
                 *, interval_s: float, sample_size: int) -> None:
        """Configure; nothing runs until :meth:`start`."""
        self.store = store
        self.public_keys = public_keys
        self.metrics = metrics
        self.interval_s = interval_s
        self.sample_size = sample_size
        self._task: asyncio.Task[None] | None = None

    async def run_once(self) -> list[AuditResult]:
        """Audit one sample now, count the results, log failures; return the results.

        Raises :class:`proxy.storage.base.LedgerError` if the store is unavailable
        (nothing is counted then).
        """
        head = await self.store.head()
        heights = sample_heights(0 if head is None else head.height + 1, self.sample_size)
        results = await audit_heights(self.store, self.public_keys(), heights)
        for result in results:
            self.metrics.ledger_verifications.labels(result.result).inc()
            for failure in result.failures:
                log.error("ledger audit: %s", failure)
        if results:
            tally = Counter(r.result for r in results)
            log.debug("ledger audit of %d receipt(s): %s", len(results), dict(tally))
        return results

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.run_once()
            except LedgerError as exc:
                log.warning("ledger audit skipped: %s", exc)
            except Exception:
                log.exception("ledger audit failed")

    def start(self) -> None:
        """Start the periodic task in the running loop (no-op when ``interval_s`` is 0)."""
        if self._task is None and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sonate-ledger-audit")

    async def stop(self) -> None:
        """Stop the task. Idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


AUDITOR: web.AppKey[LedgerAuditor] = web.AppKey("ledger_auditor", LedgerAuditor)
"""The default ledger's auditor (set by :func:`register`, which runs one per ledger)."""


def register(app: web.Application) -> None:
    """Start the receipt sink and the ledger audit with the app; stop them on clean-up.

    Expects ``app[SERVICES]`` with ``config``, ``store``, ``metrics``,
    ``keyring`` and ``gateway.sink`` (see :func:`proxy.server.http.app.build_services`).
    """
    services: Any = app[SERVICES]
    settings = services.config.ledger
    stores = [ledger.store for _, ledger in services.ledger_list()] if hasattr(services, "ledger_list") \
        else [services.store]
    auditors = [LedgerAuditor(store, services.keyring.public_keys, services.metrics,
                              interval_s=settings.audit_interval_seconds, sample_size=settings.audit_sample_size)
                for store in stores]  # one per ledger (ledger.partition)
    app[AUDITOR] = auditors[0]

    async def on_startup(_: web.Application) -> None:
        await services.gateway.sink.start()
        for auditor in auditors:
            auditor.start()

    async def on_cleanup(_: web.Application) -> None:
        for auditor in auditors:
            await auditor.stop()
        await services.gateway.sink.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
