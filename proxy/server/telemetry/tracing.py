"""OpenTelemetry traces: the one place where the proxy makes spans (docs/operations.md "Logs and traces").

Off by default: with no ``observability.otlp_endpoint`` no tracer exists and every call here
returns at once (no span objects, no context switches). On: a :class:`TracerProvider` exports
over OTLP/HTTP (``BatchSpanProcessor``: a background thread; the event loop never waits on the
collector), sampled parent-based with ``sample_ratio`` for new traces.

One trace per API request (the incoming W3C ``traceparent``/``tracestate`` is followed: the
request span is its child, and the caller's sampling decision holds)::

    chat {model}            SERVER   the request (opened by the tracing middleware as
    │                                "{METHOD} {route}", named once the route is known)
    ├─ guardrails.input     INTERNAL policies fired, action, domain
    ├─ upstream.chat        CLIENT   the provider call (one per call: a continuity summary is a second)
    ├─ guardrails.output    INTERNAL policies fired, action (non-streamed answers; a stream's output
    │                                verdict is on the request span)
    └─ ledger.commit        INTERNAL receipts appended or spooled

The request span follows the GenAI semantic conventions (semantic-conventions-genai,
docs/gen-ai/gen-ai-spans.md "Inference": name ``{gen_ai.operation.name} {gen_ai.request.model}``;
attribute names as in opentelemetry-semantic-conventions 0.66b2, ``gen_ai_attributes``;
``gen_ai.system`` is deprecated there in favour of ``gen_ai.provider.name``, so only the latter is
set). Token usage and finish reasons are on the request span only, so a GenAI-aware backend
counts each request once. Attributes carry identifiers, names and counts, never text: no prompt,
answer, PII value, apology or exception message (``error.type`` is a code or class name).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from contextlib import AbstractContextManager
from typing import Any, Iterable, Iterator, Mapping

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from proxy import __version__
from proxy.server.telemetry import logs

__all__ = ["CLIENT", "INVALID_SPAN", "GenAI", "Sonate", "close_span", "configure", "enabled", "finish_operation",
           "flush", "install", "new_provider", "open_span", "provider_name", "record_screen", "request", "respond",
           "setup", "span", "start_operation"]

log = logging.getLogger("sonate.tracing")

#: Instrumentation scope of every span here.
SCOPE = "sonate.proxy"


class GenAI:
    """GenAI semantic-convention attribute names used here (tests/unit/server/telemetry/test_tracing.py checks them
    against the installed opentelemetry-semantic-conventions package)."""

    OPERATION_NAME = "gen_ai.operation.name"
    PROVIDER_NAME = "gen_ai.provider.name"
    REQUEST_MODEL = "gen_ai.request.model"
    REQUEST_STREAM = "gen_ai.request.stream"
    RESPONSE_MODEL = "gen_ai.response.model"
    RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
    USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
    USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"


class Sonate:
    """The proxy's own span attributes (``sonate.*``): identifiers and names only."""

    REQUEST_ID = "sonate.request_id"
    RECEIPT_ID = "sonate.receipt_id"
    RECEIPT_COUNT = "sonate.receipt.count"
    RECEIPT_STATUS = "sonate.receipt.status"
    ACTOR = "sonate.actor"
    ACTION = "sonate.guardrail.action"
    POLICIES = "sonate.guardrail.policies"
    DOMAIN = "sonate.guardrail.domain"
    UPSTREAM_ROUTE = "sonate.upstream.route"
    UPSTREAM_MODEL = "sonate.upstream.model"


#: litellm provider prefixes → the GenAI conventions' ``gen_ai.provider.name`` well-known values
#: (GenAiProviderNameValues); any other prefix is used as it is.
_PROVIDER_NAMES = {"bedrock": "aws.bedrock", "bedrock_converse": "aws.bedrock", "vertex_ai": "gcp.vertex_ai",
                   "gemini": "gcp.gemini", "azure": "azure.ai.openai", "azure_ai": "azure.ai.inference",
                   "watsonx": "ibm.watsonx.ai", "xai": "x_ai", "mistral": "mistral_ai"}

_PROPAGATOR = TraceContextTextMapPropagator()
#: What :func:`request` and :func:`span` return when tracing is off (reusable, stateless).
_NOOP: AbstractContextManager[Span] = contextlib.nullcontext(INVALID_SPAN)
#: Span kind of a call the proxy makes (the provider call).
CLIENT = SpanKind.CLIENT
_tracer: trace.Tracer | None = None
_provider: Any = None
#: The current request's span (set by :func:`request`): operations annotate it, child spans need it.
_request_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar("sonate_request_span", default=None)


# -- set-up ------------------------------------------------------------------------------------------
def new_provider(observability: Any) -> Any:
    """A TracerProvider for ``observability`` (:class:`proxy.config.ObservabilityConfig`): resource
    ``service.name``/``service.version``, sampler ``ParentBased(TraceIdRatioBased(sample_ratio))``
    (OpenTelemetry SDK; a sampled incoming parent is always followed). No span processor yet."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource = Resource.create({"service.name": observability.service_name, "service.version": __version__})
    return TracerProvider(sampler=ParentBased(TraceIdRatioBased(observability.sample_ratio)), resource=resource)


def install(provider: Any) -> None:
    """Make the proxy's spans come from ``provider`` (a TracerProvider; None: tracing off)."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer(SCOPE, __version__) if provider is not None else None


def configure(observability: Any) -> Any:
    """Tracing from config: off (None returned) without ``otlp_endpoint``; else a provider exporting
    to that OTLP/HTTP traces URL in batches (the exporter also reads the standard
    ``OTEL_EXPORTER_OTLP_HEADERS`` / ``..._CERTIFICATE`` variables), installed here and as the
    process's global provider (other OpenTelemetry instrumentations join the same traces)."""
    if not observability.otlp_endpoint:
        install(None)
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = new_provider(observability)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=observability.otlp_endpoint)))
    install(provider)
    trace.set_tracer_provider(provider)
    log.info("traces: OTLP/HTTP to %s (service %s, sample ratio %g)", observability.otlp_endpoint,
             observability.service_name, observability.sample_ratio)
    return provider


def enabled() -> bool:
    """True when spans are being made (a provider is installed)."""
    return _tracer is not None


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still queued (at shutdown); no-op when tracing is off."""
    if _provider is not None:
        _provider.force_flush(timeout_ms)


# -- spans -------------------------------------------------------------------------------------------
def _fail(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed with a low-cardinality ``error.type`` (the exception's ``code`` when it
    has a string one, else its class name); the message is never recorded (it may quote input)."""
    code = getattr(exc, "code", None)
    span.set_attribute("error.type", code if isinstance(code, str) and code else type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


def request(method: str, route: str, headers: Mapping[str, str]) -> AbstractContextManager[Span]:
    """The request span (SERVER, ``"{method} {route}"``, ``route`` the URL template) as the current
    span while the request is handled, child of the incoming ``traceparent`` when ``headers`` carry
    a valid one. Yields ``INVALID_SPAN`` (a shared null context: nothing is done) when tracing is off."""
    if _tracer is None:
        return _NOOP
    return _request(_tracer, method, route, headers)


@contextlib.contextmanager
def _request(tracer: trace.Tracer, method: str, route: str, headers: Mapping[str, str]) -> Iterator[Span]:
    parent = _PROPAGATOR.extract(headers)
    with tracer.start_as_current_span(f"{method} {route}", context=parent, kind=SpanKind.SERVER,
                                      attributes={"http.request.method": method, "http.route": route},
                                      record_exception=False, set_status_on_exception=False) as current:
        token = _request_span.set(current)
        try:
            yield current
        except BaseException as exc:
            _fail(current, exc)
            raise
        finally:
            _request_span.reset(token)


def respond(span: Span, status: int) -> None:
    """Record the HTTP response ``status`` on the request span (``error.type`` = the status for
    4xx/5xx; span status ERROR for 5xx only: a client error is not the server's, per the HTTP
    semantic conventions)."""
    if not span.is_recording():
        return
    span.set_attribute("http.response.status_code", status)
    if status >= 400:
        span.set_attribute("error.type", str(status))
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


def span(name: str, attributes: Mapping[str, Any] | None = None,
         kind: SpanKind = SpanKind.INTERNAL) -> AbstractContextManager[Span]:
    """A child span of the current request (``name`` low-cardinality, e.g. ``"guardrails.input"``),
    current while the block runs; an exception marks it failed (:func:`_fail`) and propagates.
    Yields ``INVALID_SPAN`` (a shared null context) when tracing is off or outside a traced request
    (start-up warm-ups, background jobs)."""
    if _tracer is None or _request_span.get() is None:
        return _NOOP
    return _span(_tracer, name, attributes, kind)


@contextlib.contextmanager
def _span(tracer: trace.Tracer, name: str, attributes: Mapping[str, Any] | None, kind: SpanKind) -> Iterator[Span]:
    with tracer.start_as_current_span(name, kind=kind, attributes=attributes, record_exception=False,
                                      set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            _fail(current, exc)
            raise


def open_span(name: str, attributes: Mapping[str, Any] | None = None, kind: SpanKind = SpanKind.INTERNAL) -> Span:
    """Like :func:`span` for work that outlives a block (a provider stream being read): started
    now, child of the current span, not made current; end it with :func:`close_span`."""
    if _tracer is None or _request_span.get() is None:
        return INVALID_SPAN
    return _tracer.start_span(name, kind=kind, attributes=attributes, record_exception=False,
                              set_status_on_exception=False)


def close_span(span_: Span, exc: BaseException | None = None) -> None:
    """End a span of :func:`open_span` (failed when ``exc``); ending it twice is harmless."""
    if not span_.is_recording():
        return
    if exc is not None:
        _fail(span_, exc)
    span_.end()


# -- what the pipeline records -------------------------------------------------------------------------
def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a route's provider label (litellm prefix): the conventions'
    well-known value where one exists (``bedrock`` → ``aws.bedrock``), else the label."""
    return _PROVIDER_NAMES.get(provider, provider)


def start_operation(operation: str, model: str, provider: str, *, request_id: str, actor: str,
                    stream: bool | None = None) -> None:
    """A GenAI operation (``"chat"``, ``"embeddings"``) on configured route ``model`` begins: the
    request's log context gets ``request_id`` and ``actor``; the request span (when traced) is
    named ``"{operation} {model}"`` and gets the operation's attributes. Call it once the route is
    known to exist (a span name never carries client text)."""
    logs.bind(request_id=request_id, actor=actor)
    current = _request_span.get()
    if current is None or not current.is_recording():
        return
    current.update_name(f"{operation} {model}")
    current.set_attributes({GenAI.OPERATION_NAME: operation, GenAI.REQUEST_MODEL: model,
                            GenAI.PROVIDER_NAME: provider_name(provider), Sonate.REQUEST_ID: request_id,
                            Sonate.ACTOR: actor})
    if stream is not None:
        current.set_attribute(GenAI.REQUEST_STREAM, stream)


def finish_operation(*, receipt_id: str, action: str, policies: Iterable[str] = (), receipt_status: str,
                     response: Mapping[str, Any] | None = None, usage: Mapping[str, int] | None = None,
                     finish_reasons: Iterable[str | None] = ()) -> None:
    """The operation's receipts are written: the log context gets ``receipt_id`` and ``action``; the
    request span gets them with the fired ``policies`` (ids), the ``receipt_status`` (``appended``
    / ``pending``), ``gen_ai.response.model`` (the provider's ``response["model"]``), token
    ``usage`` (``prompt_tokens`` / ``completion_tokens``) and the answer's ``finish_reasons``."""
    logs.bind(receipt_id=receipt_id, action=action)
    current = _request_span.get()
    if current is None or not current.is_recording():
        return
    attributes: dict[str, Any] = {Sonate.RECEIPT_ID: receipt_id, Sonate.ACTION: action,
                                  Sonate.POLICIES: sorted(set(policies)), Sonate.RECEIPT_STATUS: receipt_status}
    model = (response or {}).get("model")
    if isinstance(model, str) and model:
        attributes[GenAI.RESPONSE_MODEL] = model
    if usage:
        attributes[GenAI.USAGE_INPUT_TOKENS] = int(usage.get("prompt_tokens") or 0)
        if "completion_tokens" in usage:
            attributes[GenAI.USAGE_OUTPUT_TOKENS] = int(usage.get("completion_tokens") or 0)
    reasons = [r for r in finish_reasons if r]
    if reasons:
        attributes[GenAI.RESPONSE_FINISH_REASONS] = reasons
    current.set_attributes(attributes)


def record_screen(span_: Span, action: str, fired: Iterable[Any], domain: str | None = None) -> None:
    """A guardrail screen's outcome on its span: the decisive ``action`` and the ids of the
    policies that ``fired`` (:class:`proxy.guardrails.decisions.Decision` objects), the domain."""
    if not span_.is_recording():
        return
    span_.set_attributes({Sonate.ACTION: action, Sonate.POLICIES: sorted({d.policy_id for d in fired})})
    if domain:
        span_.set_attribute(Sonate.DOMAIN, domain)


def setup(observability: Any) -> None:
    """Set up this process's logs and traces from ``config.observability``
    (:class:`proxy.config.ObservabilityConfig`): with ``log_format: json`` every handler of the
    root logger (``sonate`` configures one: proxy.cli) writes :class:`JsonFormatter` lines; then
    the tracer provider (:func:`configure`: off unless ``otlp_endpoint``).
    The one start-up call of ``sonate serve``."""
    if observability.log_format == "json":
        root = logging.getLogger()
        if not root.handlers:
            root.addHandler(logging.StreamHandler())
        for handler in root.handlers:
            handler.setFormatter(logs.JsonFormatter())
    configure(observability)
