"""proxy.server.telemetry.logs: JSON log lines and the request's log context (request id, receipt id, actor, action).

The request-level check drives the Gateway of tests/unit/server/flow/test_pipeline.py's rig (fake detectors, the
stub provider over HTTP, a real SQLite ledger) through a post-receipt hook that fails, one of the
proxy's own log lines written in a request; a real proxy process's JSON lines are checked in
tests/e2e/test_observability.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from typing import Any, Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from proxy.config import ObservabilityConfig
from proxy.server.telemetry import logs, tracing
from tests.unit.server.flow.test_pipeline import Rig, rig  # noqa: F401  (the rig fixture)

EMAIL = "ada.secret@example.com"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """A JSON handler on the ``sonate`` logger, writing into the yielded buffer."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("sonate")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield buffer
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def parsed(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_a_line_outside_a_request_has_the_fields_and_nulls(lines: io.StringIO) -> None:
    async def outside() -> None:  # a task of its own: no request context
        logging.getLogger("sonate.test").warning("ledger audit of %d receipts", 16)

    asyncio.run(outside())
    (line,) = parsed(lines)
    assert TIMESTAMP.match(line["timestamp"])
    assert {k: line[k] for k in ("level", "logger", "message")} == {
        "level": "WARNING", "logger": "sonate.test", "message": "ledger audit of 16 receipts"}
    assert all(line[k] is None for k in logs.CONTEXT_FIELDS)
    assert "trace_id" not in line and "exception" not in line


async def test_concurrent_requests_keep_their_own_context(lines: io.StringIO) -> None:
    async def request(n: int) -> None:
        logs.start_request()
        logs.bind(request_id=f"req_{n}", actor=f"actor{n}")
        await asyncio.sleep(0.01 * (3 - n))
        logs.bind(receipt_id=f"rcpt_{n}", action="allow")
        logging.getLogger("sonate.test").info("answered")

    await asyncio.gather(*(asyncio.create_task(request(n)) for n in range(3)))
    seen = sorted((line["request_id"], line["actor"], line["receipt_id"]) for line in parsed(lines))
    assert seen == [(f"req_{n}", f"actor{n}", f"rcpt_{n}") for n in range(3)]


def test_one_line_per_record_even_with_a_traceback(lines: io.StringIO) -> None:
    try:
        raise RuntimeError("store down")
    except RuntimeError:
        logging.getLogger("sonate.test").exception("append failed\nfor a batch")
    text = lines.getvalue()
    assert text.count("\n") == 1
    line = json.loads(text)
    assert line["level"] == "ERROR" and "RuntimeError: store down" in line["exception"]


def test_a_line_in_a_span_names_its_trace(lines: io.StringIO) -> None:
    tracing.install(TracerProvider())
    try:
        with tracing.request("GET", "/v1/models", {}) as span:
            logging.getLogger("sonate.test").info("inside")
    finally:
        tracing.install(None)
    (line,) = parsed(lines)
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert line["span_id"] == format(span.get_span_context().span_id, "016x")


def test_only_identifier_fields_can_be_bound() -> None:
    with pytest.raises(ValueError, match="prompt"):
        logs.bind(prompt="hello")


def test_setup_switches_the_root_handlers_to_json(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    tracing.setup(ObservabilityConfig(log_format="json"))
    assert not tracing.enabled()  # no otlp_endpoint: traces stay off
    logging.getLogger("sonate.test").warning("switched")
    assert json.loads(buffer.getvalue())["message"] == "switched"
    text = logging.StreamHandler(io.StringIO())
    monkeypatch.setattr(logging.getLogger(), "handlers", [text])
    tracing.setup(ObservabilityConfig())
    assert not isinstance(text.formatter, logs.JsonFormatter)


async def test_a_request_line_names_request_receipt_actor_and_action_never_the_prompt(
        rig: Rig, lines: io.StringIO) -> None:
    async def failing_hook(*_: Any) -> None:
        raise RuntimeError("queue unavailable")

    rig.gateway.sealed_hooks.append(failing_hook)
    logs.start_request()  # what the tracing middleware does for each request
    result = await rig.chat(f"Please write to {EMAIL} today")
    (line,) = [x for x in parsed(lines) if x["logger"] == "sonate.pipeline"]
    assert line["message"].startswith("post-receipt hook") and "queue unavailable" in line["exception"]
    assert line["request_id"] == result.headers["x-sonate-request-id"]
    assert (line["receipt_id"], line["actor"], line["action"]) == (result.receipt_id, "alice", "mask")
    assert EMAIL not in lines.getvalue() and "write to" not in lines.getvalue()
    assert EMAIL in json.dumps(result.body)  # the client got its address back: the prompt did carry it
