"""The suite's proxy client: :class:`~proxy.evaluation.client.ProxyClient` plus full message lists,
sampling parameters, token usage, streaming (time to first token) and the proxy's own timing.

Engine overhead: the proxy has no per-request timing header; it exports
``sonate_overhead_duration_seconds{model}`` (request time outside provider calls, observed before
the answer is sent) on ``GET /metrics`` (a ``metrics`` or ``admin`` key). :class:`OverheadProbe`
reads that histogram's ``_sum`` and ``_count`` before and after one request; with requests sent
one at a time and no other traffic on that route, the difference is that request's overhead.
Concurrent traffic on the same route makes it an approximation, flagged by a count delta ≠ 1.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from proxy.evaluation.client import ProxyClient, ProxyStatusError, ProxyUnreachable

OVERHEAD_METRIC = "sonate_overhead_duration_seconds"


@dataclass(frozen=True)
class SuiteAnswer:
    """One answer through the proxy.

    Attributes: content (""), finish_reason, action (``x-sonate-guardrail-action``), receipt_id
    (``x-sonate-receipt-id``), seconds (client round trip, perf_counter), ttft_seconds (first content
    chunk of a streamed answer, else None), usage {prompt_tokens, completion_tokens} (zeros when the
    proxy reports none, e.g. a refused request).
    """

    content: str
    finish_reason: str | None
    action: str | None
    receipt_id: str | None
    seconds: float
    ttft_seconds: float | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})


def _usage(obj: Any) -> dict[str, int]:
    usage = getattr(obj, "usage", None)
    return {"prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
            "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0)}


class SuiteClient(ProxyClient):
    """Chat requests of a suite (thread-safe like ProxyClient; raises ProxyError subclasses)."""

    def chat(self, messages: list[dict[str, Any]], **params: Any) -> SuiteAnswer:
        """Send ``messages`` (OpenAI format) with ``params`` (temperature, seed, max_tokens ...)."""
        raw, completion, seconds = self._completed(messages=messages, **params)
        choice = completion.choices[0] if completion.choices else None
        return SuiteAnswer(content=(choice.message.content if choice else None) or "",
                           finish_reason=choice.finish_reason if choice else None,
                           action=raw.headers.get("x-sonate-guardrail-action"),
                           receipt_id=raw.headers.get("x-sonate-receipt-id"), seconds=seconds,
                           usage=_usage(completion))

    def stream(self, messages: list[dict[str, Any]], **params: Any) -> SuiteAnswer:
        """Send ``messages`` streamed (usage requested); times the first non-empty content delta."""
        raw, started = self._create(messages=messages, stream=True, stream_options={"include_usage": True},
                                    **params)
        parts: list[str] = []
        ttft, finish, usage = None, None, {"prompt_tokens": 0, "completion_tokens": 0}
        try:
            for chunk in raw.parse():
                if chunk.usage is not None:
                    usage = _usage(chunk)
                for choice in chunk.choices:
                    if choice.delta and choice.delta.content:
                        if ttft is None:
                            ttft = time.perf_counter() - started
                        parts.append(choice.delta.content)
                    finish = choice.finish_reason or finish
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from None
        return SuiteAnswer(content="".join(parts), finish_reason=finish,
                           action=raw.headers.get("x-sonate-guardrail-action"),
                           receipt_id=raw.headers.get("x-sonate-receipt-id"),
                           seconds=time.perf_counter() - started, ttft_seconds=ttft, usage=usage)


class OverheadProbe:
    """Reads ``sonate_overhead_duration_seconds{model=...}`` (sum, count) from the proxy's /metrics."""

    def __init__(self, url: str, metrics_key: str, timeout: float = 10.0) -> None:
        import httpx

        base = url.rstrip("/")
        self.url = (base[:-3] if base.endswith("/v1") else base) + "/metrics"
        self._http = httpx.Client(headers={"Authorization": f"Bearer {metrics_key}"}, timeout=timeout)

    def close(self) -> None:
        """Close the connection."""
        self._http.close()

    def read(self, model: str) -> tuple[float, float]:
        """(sum seconds, count) of the histogram for route ``model`` ((0, 0) before its first request).

        Raises ProxyStatusError (e.g. 401/403: the key may not read /metrics) or ProxyUnreachable.
        """
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        try:
            response = self._http.get(self.url)
        except httpx.HTTPError as exc:
            raise ProxyUnreachable(f"cannot read {self.url}: {exc}") from None
        if response.status_code != 200:
            raise ProxyStatusError(f"GET {self.url} answered HTTP {response.status_code} (engine overhead needs a "
                                   "key with role metrics or admin)", response.status_code, response.text[:200])
        total, count = 0.0, 0.0
        for family in text_string_to_metric_families(response.text):
            if family.name != OVERHEAD_METRIC:
                continue
            for sample in family.samples:
                if sample.labels.get("model") != model:
                    continue
                if sample.name.endswith("_sum"):
                    total += sample.value
                elif sample.name.endswith("_count"):
                    count += sample.value
        return total, count
