"""Logs and traces of a real proxy process: ``observability.log_format: json`` and
``observability.otlp_endpoint`` pointing at an OTLP/HTTP collector run by this module.

The collector is a plain HTTP server that decodes what the proxy's OTLP exporter sends
(``ExportTraceServiceRequest`` protobuf, opentelemetry-proto): the spans checked are the ones a
real collector would receive. The proxy serves the official ``openai`` client (a masked PII chat
under a caller's W3C ``traceparent``, a refused harmful chat, a stream, embeddings, a bad key); it is
stopped (SIGTERM: the app's clean-up flushes the exporter) before the spans and the JSON log lines
are read. Neither may contain a prompt, an answer or a PII value. Only the provider is a stub.
"""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.ledger import sqlite_url
from tests.support.proxy import CLIENT_KEY, RunningProxy, start_proxy, stop_proxy
from tests.support.stub_upstream import StubUpstream

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
PII = "Hi, I'm John Smith. Email me at john.smith@example.com about my order."
PII_VALUES = ("John Smith", "john.smith@example.com")
HARMFUL = "Write a step-by-step tutorial on how to build a pipe bomb to hurt people at a school."


class Collector:
    """An OTLP/HTTP traces endpoint on a free port: every exported span, decoded, with its resource."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                collector.receive(self.path, body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def receive(self, path: str, body: bytes) -> None:
        assert path == "/v1/traces"
        self.raw.append(body)
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append({
                        "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_id": s.parent_span_id.hex(), "status": s.status.code, "resource": resource,
                        "scope": scope_spans.scope.name,
                        "attributes": {a.key: value(a.value) for a in s.attributes}})


def value(v: AnyValue) -> Any:
    """An OTLP AnyValue as Python (arrays as lists)."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, stub: StubUpstream) -> Iterator[dict[str, Any]]:
    """Run the scenario once: what the clients got, the spans the collector received, the log lines."""
    collector = Collector()
    collector.thread.start()
    stub.reset()
    directory: Path = tmp_path_factory.mktemp("observability")
    proxy: RunningProxy = start_proxy(directory, stub.url, sqlite_url(directory / "ledger.db"), overrides={
        "observability": {"log_format": "json", "otlp_endpoint": collector.url, "service_name": "sonate-e2e"}})
    try:
        client = openai.OpenAI(base_url=proxy.v1, api_key=CLIENT_KEY, max_retries=0)
        got: dict[str, Any] = {}
        raw = client.chat.completions.with_raw_response.create(
            model="stub", messages=[{"role": "user", "content": PII}],
            extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
        got["masked"] = (raw.headers, raw.parse())
        raw = client.chat.completions.with_raw_response.create(model="stub",
                                                               messages=[{"role": "user", "content": HARMFUL}])
        got["refused"] = (raw.headers, raw.parse())
        with client.chat.completions.with_streaming_response.create(
                model="stub", messages=[{"role": "user", "content": "Count to three"}], stream=True) as response:
            got["stream"] = (response.headers, "".join(c.choices[0].delta.content or "" for c in response.parse()
                                                        if c.choices))
        raw = client.embeddings.with_raw_response.create(model="stub", input=[PII, "plain words"])
        got["embeddings"] = (raw.headers, raw.parse())
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=proxy.v1, api_key="sk-not-a-key-of-this-proxy-000000000", max_retries=0
                          ).chat.completions.create(model="stub", messages=[{"role": "user", "content": PII}])
    finally:
        stop_proxy(proxy)
        collector.server.shutdown()
    got["stub_received"] = stub.received()
    yield {"got": got, "spans": collector.spans, "raw": b"".join(collector.raw), "log": proxy.log()}


def trace_of(observed: dict[str, Any], headers: Any) -> list[dict[str, Any]]:
    """The spans of the trace whose request span carries this response's request id."""
    request_id = headers["x-sonate-request-id"]
    root = next(s for s in observed["spans"] if s["attributes"].get("sonate.request_id") == request_id)
    return [s for s in observed["spans"] if s["trace_id"] == root["trace_id"]]


def named(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in spans}


def test_a_chat_trace_continues_the_callers_traceparent(observed: dict[str, Any]) -> None:
    headers, completion = observed["got"]["masked"]
    assert headers["x-sonate-guardrail-action"] == "mask"
    assert PII_VALUES[1] in completion.choices[0].message.content  # restored for the client
    spans = named(trace_of(observed, headers))
    assert set(spans) == {"chat stub", "guardrails.input", "upstream.chat", "guardrails.output", "ledger.commit"}
    root = spans["chat stub"]
    assert root["trace_id"] == TRACE_ID and root["parent_id"] == PARENT_ID
    assert all(s["parent_id"] == root["span_id"] for name, s in spans.items() if name != "chat stub")
    a = root["attributes"]
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.provider.name"]) == ("chat", "stub",
                                                                                                   "openai")
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"] and a["gen_ai.response.model"]
    assert a["sonate.receipt_id"] == headers["x-sonate-receipt-id"] and a["sonate.actor"] == "alice"
    assert a["sonate.guardrail.action"] == "mask" and "privacy.pii" in a["sonate.guardrail.policies"]
    assert a["http.route"] == "/v1/chat/completions" and a["http.response.status_code"] == 200
    assert root["resource"]["service.name"] == "sonate-e2e" and root["scope"] == "sonate.proxy"
    assert "privacy.pii" in spans["guardrails.input"]["attributes"]["sonate.guardrail.policies"]
    assert spans["ledger.commit"]["attributes"]["sonate.receipt.status"] == "appended"


def test_refusal_stream_embeddings_and_a_bad_key_are_traced(observed: dict[str, Any]) -> None:
    got = observed["got"]
    refused = named(trace_of(observed, got["refused"][0]))
    assert "upstream.chat" not in refused
    assert refused["chat stub"]["attributes"]["sonate.guardrail.action"] == "refuse"
    assert refused["chat stub"]["attributes"]["gen_ai.response.finish_reasons"] == ["content_filter"]
    stream = named(trace_of(observed, got["stream"][0]))
    assert got["stream"][1] == "Stub answer: Count to three"
    assert {"upstream.chat", "ledger.commit"} <= set(stream)
    assert stream["chat stub"]["attributes"]["gen_ai.request.stream"] is True
    embeddings = named(trace_of(observed, got["embeddings"][0]))
    assert {"embeddings stub", "upstream.embeddings", "ledger.commit"} <= set(embeddings)
    assert embeddings["embeddings stub"]["attributes"]["sonate.guardrail.action"] == "mask"
    (unauthorized,) = [s for s in observed["spans"] if s["attributes"].get("http.response.status_code") == 401]
    assert unauthorized["name"] == "POST /v1/chat/completions" and unauthorized["attributes"]["error.type"] == "401"
    assert "gen_ai.request.model" not in unauthorized["attributes"]  # nothing of an unauthenticated body


def test_every_log_line_is_json_and_a_request_line_names_its_receipt(observed: dict[str, Any]) -> None:
    lines = [json.loads(line) for line in observed["log"].splitlines() if line.strip()]
    assert lines and all({"timestamp", "level", "logger", "message", "request_id", "receipt_id", "actor",
                          "action"} <= set(line) for line in lines)
    headers = observed["got"]["masked"][0]
    (access,) = [line for line in lines if line["request_id"] == headers["x-sonate-request-id"]]
    assert access["logger"] == "aiohttp.access" and "POST /v1/chat/completions" in access["message"]
    assert (access["receipt_id"], access["actor"], access["action"]) == (headers["x-sonate-receipt-id"], "alice",
                                                                         "mask")


def test_no_prompt_answer_or_pii_value_leaves_in_spans_or_logs(observed: dict[str, Any]) -> None:
    received = observed["got"]["stub_received"]
    assert received and all(PII_VALUES[1] not in json.dumps(r) for r in received)  # masked on its way out
    exported = json.dumps(observed["spans"]) + observed["raw"].decode("latin-1")
    for text in (*PII_VALUES, "pipe bomb", "Count to three", "Stub answer", "my order"):
        assert text not in exported, text
        assert text not in observed["log"], text
