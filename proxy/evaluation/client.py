"""The one client the offline measurements use to talk to a running proxy.

``sonate eval guardrails --proxy``, ``sonate eval hallucination --proxy`` and ``sonate eval
fairness`` send one user message per item through the official openai client and read the
proxy's ``x-sonate-*`` headers and, where needed, the request's receipt
(``GET /v1/receipts/{id}``).

Retry policy: **none** (``max_retries=0``), one request per item, timeout
:data:`TIMEOUT_SECONDS`. Every request through the proxy writes signed receipts and may open a
review case, so a retried request would count the item twice in the ledger and in the KPI
report; and the fairness measurement times each request, which a retry would inflate. A failed
request is reported instead: an unreachable proxy stops the run (:class:`ProxyUnreachable`), an
HTTP error answer is a :class:`ProxyStatusError` the caller records or stops on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: Seconds one request may take (the model call included).
TIMEOUT_SECONDS = 120.0


class ProxyError(RuntimeError):
    """The proxy cannot be used: the message names its URL and what went wrong."""


class ProxyUnreachable(ProxyError):
    """No connection to the proxy (refused, timed out, DNS)."""


class ProxyStatusError(ProxyError):
    """The proxy answered an HTTP error; ``status`` is its code, ``detail`` its message."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class ProxyAnswer:
    """One chat answer of the proxy.

    Attributes:
        content: the assistant message ("" when none); finish_reason: of the first choice.
        action: ``x-sonate-guardrail-action`` (None when absent); receipt_id:
            ``x-sonate-receipt-id``; escalation_id: ``x-sonate-escalation-id``.
        seconds: client-side round trip of the request (perf_counter).
    """

    content: str
    finish_reason: str | None
    action: str | None
    receipt_id: str | None
    escalation_id: str | None
    seconds: float


def v1_url(url: str) -> str:
    """``http://host:port`` or ``.../v1`` (trailing slashes ignored) as the ``.../v1`` base URL."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


class ProxyClient:
    """Chat requests, the model list and receipts of one proxy, with one key and one model route.

    Thread-safe (the openai and httpx clients are), so callers may use it from a thread pool.
    Raises :class:`ProxyError` subclasses from every method; :meth:`close` releases the
    connections.
    """

    def __init__(self, url: str, api_key: str, model: str, timeout: float = TIMEOUT_SECONDS) -> None:
        import httpx
        import openai

        self.base = v1_url(url)
        self.model = model
        self._openai = openai
        self._chat = openai.OpenAI(base_url=self.base, api_key=api_key, max_retries=0, timeout=timeout)
        self._http = httpx.Client(headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()
        self._chat.close()

    def _error(self, exc: Exception) -> ProxyError:
        """The :class:`ProxyError` of an openai exception, with a message naming the proxy."""
        openai = self._openai
        if isinstance(exc, openai.APIConnectionError):
            return ProxyUnreachable(f"cannot reach the proxy at {self.base}: {exc}")
        if isinstance(exc, openai.AuthenticationError):
            return ProxyStatusError(f"the proxy at {self.base} rejected the API key (401)", 401, exc.message)
        if isinstance(exc, openai.NotFoundError):
            return ProxyStatusError(f"the proxy at {self.base} has no model route {self.model!r} "
                                    "(use --model; GET /v1/models lists them)", 404, exc.message)
        if isinstance(exc, openai.APIStatusError):
            return ProxyStatusError(f"the proxy at {self.base} answered HTTP {exc.status_code}: {exc.message}",
                                    exc.status_code, exc.message)
        return ProxyError(f"request to the proxy at {self.base} failed: {exc}")

    def check(self) -> None:
        """Fail fast: the proxy answers ``GET /v1/models`` with this key and has the model route."""
        try:
            models = {m.id for m in self._chat.models.list().data}
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from None
        if self.model not in models:
            raise ProxyError(f"the proxy at {self.base} has no model route {self.model!r} "
                             f"(routes: {', '.join(sorted(models))}; use --model)")

    def _create(self, rate_limit_attempts: int = 20, **kwargs: Any) -> tuple[Any, float]:
        """(raw ``with_raw_response`` chat completion of ``kwargs`` on this client's model,
        perf_counter start of the served attempt). A 429 (the proxy's per-key limit refused the
        request before screening it: no receipt) is retried after its ``Retry-After``, up to
        ``rate_limit_attempts`` times; nothing else is retried (a retry could duplicate receipts).
        Raises ProxyError."""
        for attempt in range(rate_limit_attempts):
            started = time.perf_counter()
            try:
                return self._chat.chat.completions.with_raw_response.create(model=self.model, **kwargs), started
            except self._openai.RateLimitError as exc:
                if attempt == rate_limit_attempts - 1:
                    raise self._error(exc) from None
                time.sleep(float(exc.response.headers.get("retry-after") or 1))
            except self._openai.OpenAIError as exc:
                raise self._error(exc) from None
        raise ValueError("rate_limit_attempts must be >= 1")

    def _completed(self, rate_limit_attempts: int = 20, **kwargs: Any) -> tuple[Any, Any, float]:
        """(raw response, parsed ChatCompletion, seconds of the served attempt) of :meth:`_create`."""
        raw, started = self._create(rate_limit_attempts, **kwargs)
        try:
            completion = raw.parse()
        except self._openai.OpenAIError as exc:
            raise self._error(exc) from None
        return raw, completion, time.perf_counter() - started

    def ask(self, text: str, rate_limit_attempts: int = 20) -> ProxyAnswer:
        """Send ``text`` as one user message; the answer, its headers and its round-trip time (timed
        from the attempt that was served; 429s retried as :meth:`_create` says). Raises ProxyError."""
        raw, completion, seconds = self._completed(rate_limit_attempts, messages=[{"role": "user", "content": text}])
        choice = completion.choices[0] if completion.choices else None
        return ProxyAnswer(content=(choice.message.content if choice else None) or "",
                           finish_reason=choice.finish_reason if choice else None,
                           action=raw.headers.get("x-sonate-guardrail-action"),
                           receipt_id=raw.headers.get("x-sonate-receipt-id"),
                           escalation_id=raw.headers.get("x-sonate-escalation-id"), seconds=seconds)

    def receipt(self, receipt_id: str) -> dict[str, Any]:
        """The receipt ``receipt_id`` (``GET /v1/receipts/{id}``)."""
        import httpx

        try:
            response = self._http.get(f"{self.base}/receipts/{receipt_id}")
        except httpx.HTTPError as exc:
            raise ProxyUnreachable(f"cannot fetch receipt {receipt_id} from {self.base}: {exc}") from None
        if response.status_code != 200:
            raise ProxyStatusError(f"GET /v1/receipts/{receipt_id} answered HTTP {response.status_code}",
                                   response.status_code, response.text[:200])
        return response.json()
