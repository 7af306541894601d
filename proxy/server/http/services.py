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

    @property
    def engine(self) -> GuardrailEngine:
        """The ``default`` policy set's engine of the serving policy version."""
        return self.policy_runtime.current().default.engine
