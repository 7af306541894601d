"""The services a running proxy holds (:class:`Services`), built once at start-up by
:func:`proxy.server.http.app.build_services`; routes reach them through
:func:`proxy.server.http.requests.services`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from proxy.config import Config
from proxy.guardrails.engine import GuardrailEngine
from proxy.receipts.chain import Ledger
from proxy.receipts.keyring import Keyring
from proxy.receipts.ledgers import Ledgers
from proxy.receipts.signing import Signer
from proxy.server.admission.limits import KeyLimiter
from proxy.server.flow.pipeline import Gateway
from proxy.server.flow.policy_runtime import PolicyRuntime
from proxy.server.flow.upstream import Upstream
from proxy.server.http.auth import Authenticator
from proxy.server.telemetry.metrics import Metrics
from proxy.storage.base import LedgerStore

__all__ = ["Services"]


@dataclass
class Services:
    """Everything a running proxy holds: built once at start-up."""

    config: Config
    signer: Signer
    store: LedgerStore
    ledger: Ledger
    policy_runtime: PolicyRuntime
    """The serving policy version and its sets (reloaded without a restart; proxy.server.flow.policy_runtime)."""
    upstream: Upstream
    metrics: Metrics
    gateway: Gateway
    auth: Authenticator
    executor: ThreadPoolExecutor
    keyring: Keyring | None = None
    """The signing keyring (active key + published history; docs/receipts.md "Keys and rotation")."""
    limiter: KeyLimiter | None = None
    """Per-key rate and concurrency limits of chat completions (server.limits; proxy.server.admission.limits)."""
    large_executor: ThreadPoolExecutor | None = None
    """The large-input guardrail lane's threads (server.limits.large_input_threads; None: no lane)."""
    ledgers: Ledgers | None = None
    """Every ledger of the deployment (``ledger.partition``, :mod:`proxy.receipts.ledgers`); None: only
    :attr:`ledger` (its store is :attr:`store`)."""

    def ledger_named(self, name: str | None) -> Ledger:
        """The ledger ``name`` (None or ``default``: :attr:`ledger`). Raises ``KeyError`` for a name
        this deployment does not have."""
        if name is None or name == "default":
            return self.ledger
        if self.ledgers is None:
            raise KeyError(name)
        return self.ledgers.ledgers[name]

    def ledger_list(self) -> list[tuple[str, Ledger]]:
        """``(name, ledger)`` of every ledger, ``default`` first."""
        return [("default", self.ledger)] if self.ledgers is None else list(self.ledgers.ledgers.items())

    async def find_receipt(self, receipt_id: str) -> dict | None:
        """The stored receipt ``receipt_id`` from whichever ledger holds it, or None. Raises
        :class:`~proxy.storage.base.LedgerUnavailable`."""
        if self.ledgers is None:
            return await self.store.get_by_id(receipt_id)
        return await self.ledgers.get_by_id(receipt_id)

    @property
    def engine(self) -> GuardrailEngine:
        """The ``default`` policy set's engine of the serving policy version."""
        return self.policy_runtime.current().default.engine
