"""The litellm adapter: one provider call per request, errors mapped to OpenAI errors.

Routes come from config.yaml's ``model_list`` (LiteLLM's own format, given to
``litellm.Router`` unchanged, so ``os.environ/NAME`` secrets and every litellm provider work).
A chat route that holds only a provider call's own parameters is called with
``litellm.acompletion`` directly (:func:`direct_params`); the Router serves the rest.
:meth:`Upstream.open_stream` opens a provider stream that the proxy passes through chunk by
chunk (:mod:`proxy.server.flow.streaming`) and assembles with ``litellm.stream_chunk_builder`` at the end.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from proxy import offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm import)

# isort: split

import litellm
from litellm import Router
from litellm.secret_managers.main import get_secret

from proxy.config import ENV_PREFIX, Config, ModelRoute
from proxy.guardrails.cache import ScanCache
from proxy.guardrails.messages import screened_text
from proxy.primitives.canonical import value_key
from proxy.server.flow import sdk_transform
from proxy.server.telemetry import tracing

log = logging.getLogger("sonate.upstream")
litellm.suppress_debug_info = True
litellm.telemetry = False
# One provider call per request (Router num_retries=0, max_retries=0). litellm's OpenAI and Azure
# embedding handlers read `max_retries or litellm.DEFAULT_MAX_RETRIES` (llms/openai/openai.py), so an
# explicit 0 became the SDK's 2 retries there; this attribute is read only by those two `or`s.
litellm.DEFAULT_MAX_RETRIES = 0  # type: ignore[misc]  # Final in litellm's stubs; set once, here
# The OpenAI SDK's body walk costs ~0.25 ms per message and changes nothing in a plain-JSON chat body
sdk_transform.install()


def _check_vectors(body: dict[str, Any], count: int) -> None:
    """UpstreamError 502 unless ``body["data"]`` holds ``count`` embeddings, each a non-empty list
    of finite numbers (floats were requested; a mock route answers text, some providers nothing)."""
    data = body.get("data")
    ok = isinstance(data, list) and len(data) == count and all(
        isinstance(item, dict) and isinstance(item.get("embedding"), list) and item["embedding"]
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in item["embedding"])
        for item in data)
    if not ok:
        raise UpstreamError(502, f"The model provider did not return {count} embedding vector(s) of numbers.",
                            "api_error", "upstream_error")


def readable(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a provider answer or chunk as a dict) unchanged, or UpstreamError 502 ``upstream_error``
    when a string in it is not Unicode text (a lone surrogate such as ``"\\ud800"``, which a JSON
    parser accepts): nothing downstream (detectors, receipts' RFC 8785 hashes, the client's JSON) can
    carry it, and it is the provider's fault, not the client's."""
    try:
        json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        log.warning("provider answer holds a string that is not Unicode text (a lone surrogate)")
        raise UpstreamError(502, "The model provider's answer is not valid Unicode text (it holds a lone "
                                 "surrogate); it was not delivered.", "api_error", "upstream_error") from None
    except (TypeError, ValueError):  # not JSON-like: the callers' own checks decide
        pass
    return body


@dataclass
class UpstreamError(Exception):
    """A provider failure as the OpenAI error the client receives (status, type, code)."""

    status: int
    message: str
    type: str = "api_error"
    code: str | None = None

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"


@dataclass
class UpstreamResult:
    """A completed provider call.

    ``response`` is the chat.completion as a plain dict; ``chunks`` the streamed content deltas
    (empty for non-streaming calls); durations in seconds; ``cost_usd`` from litellm's offline
    price map (0.0 for unknown models).
    """

    response: dict[str, Any]
    duration_seconds: float
    ttft_seconds: float | None = None
    chunks: list[str] = field(default_factory=list)
    cost_usd: float = 0.0

    @property
    def content(self) -> str:
        """The first choice's assistant text ("" when the model returned only tool calls)."""
        choices = self.response.get("choices") or [{}]
        return (choices[0].get("message") or {}).get("content") or ""

    @property
    def usage(self) -> dict[str, int]:
        """``prompt_tokens`` / ``completion_tokens`` / ``total_tokens`` (zeros when absent)."""
        usage = self.response.get("usage") or {}
        return {k: int(usage.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def provider_status(exc: BaseException) -> int | None:
    """The HTTP status the provider answered with, as litellm recorded it (None when the call never got
    one: a connection failure, a response litellm could not parse)."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and 100 <= status <= 599 else None


def map_exception(exc: BaseException) -> UpstreamError:
    """Translate a litellm/provider exception into the error the client should see.

    Client-caused provider rejections stay 4xx (400, 422→400, 429); gateway-side failures become
    502 (bad gateway: provider credentials, unknown upstream model, provider 5xx, an answer litellm
    cannot read), 503 (provider unavailable) or 504 (timeout). The message is fixed per kind and
    names the provider's HTTP status; never the exception's text (litellm's can hold a traceback
    with server paths, or quote the request). The exception's type and the status are logged.
    """
    e = litellm.exceptions
    status = provider_status(exc)
    said = f" (provider status {status})" if status is not None else " (no provider status)"
    log.warning("provider call failed: %s%s", type(exc).__name__, said)
    if isinstance(exc, e.Timeout):
        return UpstreamError(504, f"The model provider did not answer in time{said}.", "timeout_error",
                             "upstream_timeout")
    if isinstance(exc, e.RateLimitError):
        return UpstreamError(429, f"The model provider is rate limiting{said}.", "rate_limit_error",
                             "rate_limit_exceeded")
    if isinstance(exc, e.ContextWindowExceededError):
        return UpstreamError(400, f"The request does not fit the model's context window{said}.",
                             "invalid_request_error", "context_length_exceeded")
    if isinstance(exc, e.ContentPolicyViolationError):
        return UpstreamError(400, f"The model provider refused the request under its content policy{said}.",
                             "invalid_request_error", "content_policy_violation")
    if isinstance(exc, (e.BadRequestError, e.UnprocessableEntityError)):
        return UpstreamError(400, f"The model provider rejected the request{said}.", "invalid_request_error",
                             "upstream_bad_request")
    if isinstance(exc, (e.AuthenticationError, e.PermissionDeniedError)):
        return UpstreamError(502, f"The model provider rejected the gateway's credentials for this route{said}.",
                             "api_error", "upstream_auth_failed")
    if isinstance(exc, e.NotFoundError):
        return UpstreamError(502, f"The model provider does not know this route's model{said}.", "api_error",
                             "upstream_not_found")
    if isinstance(exc, e.ServiceUnavailableError):
        return UpstreamError(503, f"The model provider is unavailable{said}.", "api_error", "upstream_unavailable")
    return UpstreamError(502, f"The model provider call failed{said}.", "api_error", "upstream_error")


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.model_dump(exclude_none=True) if hasattr(obj, "model_dump") else dict(obj)


def _has_content(chunk: Any) -> bool:
    """True when a litellm stream chunk carries content text in one of its choices."""
    return any(getattr(getattr(c, "delta", None), "content", None) for c in getattr(chunk, "choices", None) or [])


class UpstreamStream:
    """An open provider stream: ``async for chunk in stream`` yields each ``chat.completion.chunk``
    as a plain dict as it arrives; :meth:`result` assembles the call afterwards; :meth:`aclose`
    stops it early (the provider connection is closed). Iteration raises UpstreamError."""

    def __init__(self, stream: Any, messages: list[dict[str, Any]], started: float, cost: Any,
                 span: Any = tracing.INVALID_SPAN) -> None:
        """Wrap litellm's stream (``started``: perf_counter when the call began; ``cost``: the
        ``Upstream._cost`` function; ``span``: the call's ``upstream.chat`` span, ended with the stream)."""
        self._stream = stream
        self._span = span
        self._messages = messages
        self._started = started
        self._cost = cost
        self._chunks: list[Any] = []
        self.ttft_seconds: float | None = None

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        try:
            async for chunk in self._stream:
                body = readable(_as_dict(chunk))  # an unreadable chunk is not kept: the receipt covers the rest
                self._chunks.append(chunk)
                if self.ttft_seconds is None and _has_content(chunk):
                    self.ttft_seconds = time.perf_counter() - self._started
                yield body
        except UpstreamError as error:
            tracing.close_span(self._span, error)
            raise
        except Exception as exc:
            mapped = map_exception(exc)
            tracing.close_span(self._span, mapped)
            raise mapped from exc
        finally:
            tracing.close_span(self._span)

    async def aclose(self) -> None:
        """Stop reading and close the provider connection (errors while closing are logged)."""
        tracing.close_span(self._span)
        try:
            await self._stream.aclose()
        except Exception:
            log.debug("closing the provider stream failed", exc_info=True)

    def result(self) -> UpstreamResult:
        """The call so far as an :class:`UpstreamResult` (assembled by ``stream_chunk_builder``;
        an empty response when no chunk arrived)."""
        duration = time.perf_counter() - self._started
        built = litellm.stream_chunk_builder(self._chunks, messages=self._messages) if self._chunks else None
        if built is None:
            return UpstreamResult({}, duration, self.ttft_seconds)
        return UpstreamResult(_as_dict(built), duration, self.ttft_seconds, cost_usd=self._cost(built))


#: ``litellm_params`` keys a route may hold and still be called without litellm's Router: the
#: provider call's own parameters. Any other key (``rpm``, ``tpm``, ``max_parallel_requests``,
#: ``stream_timeout``, pricing, ...) is the Router's business, and such a route goes through it.
DIRECT_PARAMS = frozenset({"model", "api_key", "api_base", "base_url", "api_version", "organization",
                           "custom_llm_provider", "mock_response", "timeout", "extra_headers"})
#: ``model_info`` keys that are this proxy's own (proxy.config.ModelRoute): litellm never reads them.
PROXY_MODEL_INFO = frozenset({"demo", "provider"})


def direct_params(route: ModelRoute) -> dict[str, Any] | None:
    """The keyword arguments of a ``litellm.acompletion`` call for ``route`` without litellm's Router
    (``os.environ/NAME`` values resolved by litellm's ``get_secret``, as the Router does), or None when
    the route holds a setting only the Router applies (see :data:`DIRECT_PARAMS`).

    Why (c=1 overhead): with one deployment per route (proxy.config refuses duplicate
    names), no retries and no rate limits, the Router adds nothing to a call but its own work:
    deployment selection, usage tracking on every call and on every success (a deep copy of the
    model's price map entry each time; a success callback run in litellm's thread pool, beside the
    next request's screen), about 1-4 ms per request on a loaded 2-CPU machine.
    """
    if not set(route.litellm_params) <= DIRECT_PARAMS or not set(route.model_info) <= PROXY_MODEL_INFO:
        return None
    params: dict[str, Any] = {}
    for key, value in route.litellm_params.items():
        if isinstance(value, str) and value.startswith("os.environ/"):
            value = get_secret(value)  # as litellm.Router resolves it
        params[key] = value
    return params


def unset_secrets(route: ModelRoute) -> list[tuple[str, str]]:
    """``(parameter, variable)`` for every ``litellm_params`` value of ``route`` written as
    ``os.environ/NAME`` whose variable is not set in this process: litellm resolves such a value
    to None, and a provider call then fails or falls back to the provider's default variable
    (``OPENAI_API_KEY`` for an ``openai/...`` model), another key than the one configured."""
    import os

    named = ((key, value[len(ENV_PREFIX):]) for key, value in route.litellm_params.items()
             if isinstance(value, str) and value.startswith(ENV_PREFIX))
    return [(key, name) for key, name in named if name not in os.environ]


#: Bound of :attr:`Upstream.token_counts` (entries: one per message text and model; about 200 bytes each).
MAX_COUNTED_MESSAGES = 50_000


def _count_key(message: Any) -> str | None:
    """The text a text-only ``message``'s token count is cached under
    (:func:`proxy.primitives.canonical.value_key`), or None when it is not cached: a content part
    list (an image part may be fetched to be counted, and what its URL serves may change)."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), (str, type(None))):
        return None
    return value_key(message)


class Upstream:
    """Calls providers through litellm: one ``litellm.Router`` built from config.yaml's model_list,
    and ``litellm.acompletion`` directly for chat routes without Router settings (:attr:`direct`)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        #: litellm's token count of one text-only message, per model and message (:meth:`count_tokens`)
        self.token_counts = ScanCache(max_entries=MAX_COUNTED_MESSAGES)
        self.routes: dict[str, ModelRoute] = {r.model_name: r for r in config.model_list}
        self.router = Router(
            model_list=[r.model_dump(exclude_none=True) for r in config.model_list],
            num_retries=0,
            timeout=config.server.upstream_timeout_seconds,
        )
        #: route name → the keyword arguments of a direct ``litellm.acompletion`` call (see :func:`direct_params`)
        self.direct: dict[str, dict[str, Any]] = {}
        for route in config.model_list:
            for key, name in unset_secrets(route):
                log.warning("model_list route %r: litellm_params.%s is os.environ/%s, which is not set: its calls "
                            "will fail or use the provider's default variable instead", route.model_name, key, name)
            params = direct_params(route)
            if params is not None:
                self.direct[route.model_name] = {"timeout": config.server.upstream_timeout_seconds, "max_retries": 0,
                                                 **params}

    def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int:
        """Prompt tokens of ``messages`` for route ``model`` (litellm's token counter; tiktoken
        cl100k fallback for models without a known tokenizer). Messages litellm's counter refuses
        (ValueError: an audio part, a custom tool call) are counted by their texts
        (:func:`proxy.guardrails.messages.screened_text`).

        litellm counts a message list without tools as the sum of its messages' counts plus a
        constant (the reply priming, its count of ``[]``), so each text-only message's count is
        cached by model and content (:attr:`token_counts`, LRU, at most
        :data:`MAX_COUNTED_MESSAGES`): a resent history is not tokenised again. The total is
        litellm's count of the whole list."""
        route = self.routes.get(model)
        target = route.litellm_params["model"] if route else model
        try:
            return self._primed(target) + sum(self._message_tokens(target, m) for m in messages)
        except ValueError:
            texts = [{"role": str(m.get("role") or "user"), "content": screened_text(m)} for m in messages]
            return int(litellm.token_counter(model=target, messages=texts))

    def _primed(self, target: str) -> int:
        """litellm's count of no message for model ``target`` (the tokens every reply is primed with)."""
        primed = self.token_counts.get("", target)
        if primed is None:
            primed = int(litellm.token_counter(model=target, messages=[]))
            self.token_counts.put("", target, primed)
        return primed

    def _message_tokens(self, target: str, message: dict[str, Any]) -> int:
        """litellm's count of ``[message]`` for model ``target`` less the reply priming, from
        :attr:`token_counts` when cached. Raises litellm's ValueError for a message it refuses."""
        key = _count_key(message)
        tokens = None if key is None else self.token_counts.get(target, key)
        if tokens is None:
            tokens = int(litellm.token_counter(model=target, messages=[message])) - self._primed(target)
            if key is not None:
                self.token_counts.put(target, key, tokens)
        return tokens

    def _cost(self, response: Any) -> float:
        """The call's cost in USD: the one litellm already computed for the response
        (``_hidden_params["response_cost"]``, set by its logging object from the same price map),
        else ``litellm.completion_cost``; 0.0 when the model is not in the price map."""
        known = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if isinstance(known, (int, float)) and not isinstance(known, bool) and math.isfinite(known):
            return float(known)
        try:
            return float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # unknown model in the price map: cost is unknown, recorded as 0
            return 0.0

    async def complete(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> UpstreamResult:
        """One non-streaming call (span ``upstream.chat``). Raises UpstreamError."""
        start = time.perf_counter()
        with tracing.span("upstream.chat", self._span_attributes(model), tracing.CLIENT):
            try:
                response = await self._acompletion(model, messages, params)
            except Exception as exc:  # litellm raises many types; all become OpenAI errors
                raise map_exception(exc) from exc
        duration = time.perf_counter() - start
        return UpstreamResult(readable(_as_dict(response)), duration, cost_usd=self._cost(response))

    async def embed(self, model: str, texts: list[str], params: dict[str, Any]) -> UpstreamResult:
        """One embeddings call (litellm ``Router.aembedding``) for ``texts``, floats requested.

        Returns an :class:`UpstreamResult` whose ``response`` is the provider's embeddings list as a
        plain dict (``data[i].embedding``, ``usage.prompt_tokens``). Raises UpstreamError.
        """
        start = time.perf_counter()
        with tracing.span("upstream.embeddings", self._span_attributes(model), tracing.CLIENT):
            try:
                response = await self.router.aembedding(model=model, input=texts, encoding_format="float",
                                                        max_retries=0, **params)
            except Exception as exc:  # litellm raises many types; all become OpenAI errors
                raise map_exception(exc) from exc
            duration = time.perf_counter() - start
            body = _as_dict(response)
            _check_vectors(body, len(texts))
        return UpstreamResult(body, duration, cost_usd=self._cost(response))

    async def open_stream(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> UpstreamStream:
        """Start a streaming call (usage requested from the provider) and return it once the
        provider has accepted it. Raises UpstreamError (a rejected call fails here, before any
        byte reaches the client)."""
        start = time.perf_counter()
        span = tracing.open_span("upstream.chat", self._span_attributes(model), tracing.CLIENT)
        try:
            stream = await self._acompletion(model, messages,
                                             {**params, "stream": True, "stream_options": {"include_usage": True}})
        except Exception as exc:
            error = map_exception(exc)
            tracing.close_span(span, error)
            raise error from exc
        return UpstreamStream(stream, messages, start, self._cost, span)

    async def _acompletion(self, model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> Any:
        """litellm's chat completion for route ``model``: ``litellm.acompletion`` with the route's own
        parameters when it has only those (:attr:`direct`), else through the Router. Raises litellm's errors."""
        direct = self.direct.get(model)
        if direct is not None:
            return await litellm.acompletion(messages=messages, **{**direct, **params})
        wire: Any = messages  # OpenAI message dicts; litellm's stubs ask for its TypedDicts
        return await self.router.acompletion(model=model, messages=wire, **params)

    def _span_attributes(self, model: str) -> dict[str, str]:
        """The ``upstream.*`` span's attributes for route ``model``: its name and litellm model id."""
        route = self.routes.get(model)
        return {tracing.Sonate.UPSTREAM_ROUTE: model,
                tracing.Sonate.UPSTREAM_MODEL: str(route.litellm_params["model"]) if route else model}
