"""The model-assisted claim span detection pass of FAR-H (off by default).

Sends each output to a model route of config.yaml through :class:`proxy.server.flow.upstream.Upstream`
(litellm; the same routes, secrets and error mapping as the proxy) with the prompt of
:func:`proxy.evaluation.claims.span_detection_messages`, and parses the reply with
:func:`proxy.evaluation.claims.parse_model_spans`. The guardrails are not applied: this is an
offline evaluation call, not user traffic.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

from proxy.config import Config
from proxy.evaluation.claims import Claim, parse_model_spans, span_detection_messages
from proxy.server.flow.upstream import Upstream, UpstreamError

log = logging.getLogger("sonate.claim_spans")


@dataclass
class SpanDetectionResult:
    """``claims``: record id → model-detected claims; ``failures``: record id → reason (a
    provider error or a reply that is not the requested JSON)."""

    claims: dict[str, list[Claim]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)


async def detect_spans(config: Config, model: str, outputs: Sequence[tuple[str, str]], *, concurrency: int = 4,
                       progress: Callable[[int], None] | None = None) -> SpanDetectionResult:
    """Run the span detection pass over ``outputs`` = ``[(record_id, text), ...]``.

    ``model`` is a ``model_name`` of ``config.model_list`` (ValueError when unknown).
    ``concurrency`` caps simultaneous provider calls; ``progress(1)`` is called per output.
    Provider errors and unparseable replies are recorded per record in ``failures`` (the pass
    is best effort: the deterministic claims stand without it).
    """
    if config.route(model) is None:
        known = ", ".join(r.model_name for r in config.model_list)
        raise ValueError(f"--claims-model {model!r} is not a model_name of config.yaml (known: {known})")
    upstream = Upstream(config)
    result = SpanDetectionResult()
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(record_id: str, text: str) -> None:
        async with gate:
            try:
                reply = await upstream.complete(model, span_detection_messages(text), {"temperature": 0})
                result.claims[record_id] = parse_model_spans(reply.content, text)
            except (UpstreamError, ValueError) as exc:
                log.warning("span detection failed for %s: %s", record_id, exc)
                result.failures[record_id] = str(exc)
            if progress:
                progress(1)

    await asyncio.gather(*(one(rid, text) for rid, text in outputs if text.strip()))
    return result
