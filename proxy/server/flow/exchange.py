"""One chat request's state as the flow passes it from step to step (:class:`Exchange`).

The pipeline creates it on acceptance (:meth:`proxy.server.flow.pipeline.Gateway.chat`), the
streaming pass-through (:class:`proxy.server.flow.streaming.StreamedAnswer`) carries it to the end
of a stream, and the receipts are built from it (:mod:`proxy.server.flow.receipting`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from proxy.config import ModelRoute
from proxy.guardrails.engine import Decision
from proxy.guardrails.plan import InputScreen
from proxy.server.admission.limits import ScreenSize
from proxy.server.errors import Caller
from proxy.server.flow.policy_runtime import ActivePolicySet
from proxy.server.flow.upstream import UpstreamResult
from proxy.server.flow.wire import ChatCompletionRequest

__all__ = ["Exchange"]


@dataclass
class Exchange:
    """One request's state as it moves through the steps of :meth:`Gateway.chat`.

    ``policy`` is the caller's policy set, chosen once at acceptance; every step (screens,
    continuity, receipts, metrics) reads the engine and policies from it.
    """

    req: ChatCompletionRequest
    caller: Caller
    route: ModelRoute
    declared: str | None
    inputs_hash: str
    messages: list[dict[str, Any]]
    #: The caller's policy set, chosen at the start of the request (:meth:`PolicyRuntime.bind`).
    policy: ActivePolicySet
    #: What the input screen will read of ``messages`` (:func:`proxy.server.admission.limits.screen_size`,
    #: from the walk that checked their bounds).
    size: ScreenSize
    request_id: str = field(default_factory=lambda: "req_" + uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    screen: InputScreen | None = None
    decisions: list[Decision] = field(default_factory=list)
    triggers: list[Decision] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)
    chunks: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    result: UpstreamResult | None = None
    model_apology: bool = False
    upstream_seconds: float = 0.0
    stratum: dict[str, str] = field(default_factory=dict)
    #: ``evidence.endpoint`` of the receipts when another API is served over this pipeline
    #: ("responses", "messages": proxy.server.http.translated); None for chat completions.
    endpoint: str | None = None
    #: The ledger check before the model call (:meth:`ReceiptSink.before_upstream`), started with the
    #: input screen so that it overlaps it (None: started when needed).
    ledger_check: asyncio.Future[None] | None = None
