"""proxy.server.telemetry.tracing: the spans of a request, recorded by the OpenTelemetry SDK's InMemorySpanExporter.

The Gateway (tests/unit/server/flow/test_pipeline.py's rig: fake detectors of tests/support/detectors.py in the
real GuardrailEngine, the real Upstream (litellm) against the stub provider over HTTP, a real
SQLite ledger, real Metrics) is driven directly inside :func:`proxy.server.telemetry.tracing.request`, what
the tracing middleware opens for each API request. The HTTP side, the OTLP export and the JSON
logs of a real proxy process are in tests/e2e/test_observability.py.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, SpanKind, StatusCode

from proxy.config import ObservabilityConfig
from proxy.server.errors import Caller, GatewayError
from proxy.server.flow.embeddings import Embeddings
from proxy.server.flow.pipeline import ChatResult, Gateway
from proxy.server.flow.wire import ChatCompletionRequest, EmbeddingRequest
from proxy.server.telemetry import tracing
from tests.support.stub_upstream import Reply, StubUpstream
from tests.unit.server.flow.test_pipeline import Rig, rig  # noqa: F401  (the rig fixture)

CALLER = Caller("alice", "client")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
EMAIL = "ada.secret@example.com"
PII_PROMPT = f"Please write to {EMAIL} today"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on, every span kept in memory (sampling ratio 1); off again afterwards."""
    memory = InMemorySpanExporter()
    provider = tracing.new_provider(ObservabilityConfig(service_name="sonate-test"))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    try:
        yield memory
    finally:
        tracing.install(None)
        provider.shutdown()


@pytest.fixture
def gateway(rig: Rig) -> Gateway:
    """The Gateway of tests/unit/server/flow/test_pipeline.py's rig (fake detectors, stub provider, SQLite ledger)."""
    return rig.gateway


async def chat(gateway: Gateway, content: str, headers: dict[str, str] | None = None, **extra: Any) -> ChatResult:
    """One chat completion inside a request span (as the middleware opens it); a stream is sent whole."""
    raw = {"model": "stub", "messages": [{"role": "user", "content": content}], **extra}
    with tracing.request("POST", "/v1/chat/completions", headers or {}) as span:
        result = await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
        if result.events is not None:
            async for _ in result.events.events():
                pass
        tracing.respond(span, 200)
    return result


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def everything_recorded(spans: tuple[ReadableSpan, ...]) -> str:
    """Every span's name, attributes, events and status as one text (to search for leaked values)."""
    return json.dumps([{"name": s.name, "attributes": dict(s.attributes or {}), "status": s.status.description,
                        "events": [(e.name, dict(e.attributes or {})) for e in s.events]} for s in spans], default=str)


def test_attribute_names_are_the_installed_semantic_conventions() -> None:
    semconv = importlib.import_module("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    ours = {k: v for k, v in vars(tracing.GenAI).items() if k.isupper()}
    assert ours and all(getattr(semconv, "GEN_AI_" + k) == v for k, v in ours.items())
    known = {v.value for v in semconv.GenAiProviderNameValues}
    assert {tracing.provider_name(p) for p in ("bedrock", "vertex_ai", "azure", "xai", "mistral", "openai",
                                                "anthropic")} <= known
    assert tracing.provider_name("demo") == "demo"


async def test_a_masked_chat_is_one_trace_under_the_callers_parent(gateway: Gateway, exporter: InMemorySpanExporter,
                                                                   upstream: StubUpstream) -> None:
    result = await chat(gateway, PII_PROMPT, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    assert result.action == "mask"
    spans = exporter.get_finished_spans()
    named = by_name(spans)
    assert set(named) == {"chat stub", "guardrails.input", "upstream.chat", "guardrails.output", "ledger.commit"}
    root = named["chat stub"]
    assert format(root.context.trace_id, "032x") == TRACE_ID and format(root.parent.span_id, "016x") == PARENT_ID
    assert root.kind == SpanKind.SERVER and root.parent.is_remote
    assert all(s.parent.span_id == root.context.span_id for s in spans if s is not root)
    assert all(s.context.trace_id == root.context.trace_id for s in spans)
    a = root.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "stub"
    assert a["gen_ai.provider.name"] == "openai" and a["gen_ai.request.stream"] is False
    assert a["gen_ai.response.model"] == upstream.received()[-1]["model"]
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert a["sonate.request_id"] == result.headers["x-sonate-request-id"]
    assert a["sonate.receipt_id"] == result.receipt_id and a["sonate.guardrail.action"] == "mask"
    assert tuple(a["sonate.guardrail.policies"]) == ("privacy",) and a["sonate.actor"] == "alice"
    assert a["http.response.status_code"] == 200 and "gen_ai.system" not in a
    screen = named["guardrails.input"].attributes
    assert screen["sonate.guardrail.action"] == "mask" and tuple(screen["sonate.guardrail.policies"]) == ("privacy",)
    assert screen["sonate.guardrail.domain"] == "general"
    call = named["upstream.chat"]
    assert call.kind == SpanKind.CLIENT and call.attributes["sonate.upstream.model"] == "openai/stub-model"
    assert "gen_ai.operation.name" not in call.attributes  # one GenAI operation per request: the request span
    commit = named["ledger.commit"].attributes
    assert commit["sonate.receipt.count"] == 1 and commit["sonate.receipt.status"] == "appended"
    assert named["guardrails.output"].attributes["sonate.guardrail.action"] in ("allow", "mask")
    recorded = everything_recorded(spans)
    assert EMAIL not in recorded and "write to" not in recorded and "Stub answer" not in recorded
    assert EMAIL in json.dumps(result.body)  # the client still got its own address back (the test is not vacuous)


async def test_a_refusal_has_no_provider_call_and_names_the_policy(gateway: Gateway,
                                                                   exporter: InMemorySpanExporter) -> None:
    result = await chat(gateway, "HARM the neighbours now")
    named = by_name(exporter.get_finished_spans())
    assert result.action == "refuse"
    assert set(named) == {"chat stub", "guardrails.input", "ledger.commit"}
    root = named["chat stub"].attributes
    assert root["sonate.guardrail.action"] == "refuse" and tuple(root["sonate.guardrail.policies"]) == ("safety",)
    assert tuple(root["gen_ai.response.finish_reasons"]) == ("content_filter",)
    assert "gen_ai.usage.input_tokens" not in root and "gen_ai.response.model" not in root
    assert named["chat stub"].parent is None  # no traceparent: a trace of its own
    recorded = everything_recorded(exporter.get_finished_spans())
    assert "neighbours" not in recorded and "Refused by policy" not in recorded


async def test_a_stream_keeps_its_provider_span_open_until_the_last_chunk(gateway: Gateway,
                                                                          exporter: InMemorySpanExporter,
                                                                          upstream: StubUpstream) -> None:
    upstream.queue(Reply("one two three", chunk_delay=0.01))
    await chat(gateway, "Count to three", stream=True, stream_options={"include_usage": True})
    named = by_name(exporter.get_finished_spans())
    assert set(named) == {"chat stub", "guardrails.input", "upstream.chat", "ledger.commit"}
    root, call = named["chat stub"], named["upstream.chat"]
    assert root.attributes["gen_ai.request.stream"] is True
    assert tuple(root.attributes["gen_ai.response.finish_reasons"]) == ("stop",)
    assert root.attributes["gen_ai.usage.output_tokens"] > 0
    assert call.status.status_code != StatusCode.ERROR
    assert named["ledger.commit"].start_time >= call.end_time  # the provider span ended with the stream


async def test_a_provider_failure_marks_the_call_and_the_request(gateway: Gateway, exporter: InMemorySpanExporter,
                                                                 upstream: StubUpstream) -> None:
    upstream.queue(Reply(status=500))
    with pytest.raises(GatewayError) as raised:
        with tracing.request("POST", "/v1/chat/completions", {}) as span:
            raw = {"model": "stub", "messages": [{"role": "user", "content": "hello there"}]}
            try:
                await gateway.chat(raw, ChatCompletionRequest.model_validate(raw), CALLER)
            except GatewayError as exc:
                tracing.respond(span, exc.status)
                raise
    named = by_name(exporter.get_finished_spans())
    call, root = named["upstream.chat"], named["chat stub"]
    assert call.status.status_code == StatusCode.ERROR and call.attributes["error.type"] == "upstream_error"
    assert root.status.status_code == StatusCode.ERROR
    assert root.attributes["http.response.status_code"] == raised.value.status >= 500
    assert "ledger.commit" not in named and not call.status.description  # no message recorded


async def test_an_unsampled_caller_gets_no_spans(gateway: Gateway, exporter: InMemorySpanExporter) -> None:
    result = await chat(gateway, "hello there", {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"})
    assert result.action == "allow" and exporter.get_finished_spans() == ()


async def test_embeddings_are_an_embeddings_operation(gateway: Gateway, exporter: InMemorySpanExporter) -> None:
    raw = {"model": "stub", "input": [PII_PROMPT, "plain words"]}
    with tracing.request("POST", "/v1/embeddings", {}):
        result = await Embeddings(gateway).embed(raw, EmbeddingRequest.model_validate(raw), CALLER)
    named = by_name(exporter.get_finished_spans())
    assert set(named) == {"embeddings stub", "guardrails.input", "upstream.embeddings", "ledger.commit"}
    root = named["embeddings stub"].attributes
    assert root["gen_ai.operation.name"] == "embeddings" and root["sonate.receipt_id"] == result.receipt_id
    assert root["sonate.guardrail.action"] == "mask" and root["gen_ai.usage.input_tokens"] > 0
    assert "gen_ai.usage.output_tokens" not in root
    assert EMAIL not in everything_recorded(exporter.get_finished_spans())


async def test_off_by_default_nothing_is_made(gateway: Gateway) -> None:
    assert tracing.configure(ObservabilityConfig()) is None and not tracing.enabled()
    with tracing.request("POST", "/v1/chat/completions", {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}) as span:
        assert span is INVALID_SPAN
        with tracing.span("guardrails.input") as child:
            assert child is INVALID_SPAN
    result = await chat(gateway, "hello there")
    assert result.action == "allow"


def test_child_spans_need_a_request(exporter: InMemorySpanExporter) -> None:
    with tracing.span("upstream.chat") as outside:  # e.g. the start-up warm-up call
        assert outside is INVALID_SPAN
    assert tracing.open_span("upstream.chat") is INVALID_SPAN
    with tracing.request("GET", "/v1/models", {}):
        with tracing.span("guardrails.input") as inside:
            assert inside.is_recording()
    assert [s.name for s in exporter.get_finished_spans()] == ["guardrails.input", "GET /v1/models"]


def test_provider_resource_and_sampler_come_from_config() -> None:
    provider = tracing.new_provider(ObservabilityConfig(service_name="edge-proxy", sample_ratio=0.25))
    assert provider.resource.attributes["service.name"] == "edge-proxy"
    assert "ParentBased" in provider.sampler.get_description() and "0.25" in provider.sampler.get_description()
