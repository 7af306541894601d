"""Structured logs: one JSON object per line (``observability.log_format: json``), and the request's
log context (request id, receipt id, actor, action) that every line written during a request carries.

A JSON line (docs/operations.md "Logs and traces")::

    {"timestamp": "2026-11-23T16:20:01.123Z", "level": "ERROR", "logger": "sonate.pipeline",
     "message": "ledger append failed for req_…: …", "request_id": "req_…", "receipt_id": null,
     "actor": "alice", "action": null, "trace_id": "4bf9…", "span_id": "00f0…"}

``trace_id``/``span_id`` (W3C hex, the OpenTelemetry log-correlation fields) are present while a
recorded span is current (:mod:`proxy.server.telemetry.tracing`); ``exception`` holds the formatted traceback
when the record has one. The formatter adds identifiers, never values: a line says what the
record's own message says, and the proxy's log messages name requests, policies and receipts,
never prompt text or a PII value (docs/security.md); library DEBUG bodies are redacted before
they reach any handler (:func:`proxy.cli.redact_record`).

The context lives in a :class:`contextvars.ContextVar`: each aiohttp request runs in its own task,
so :func:`start_request` (called by the tracing middleware) scopes it to one request, its access
log line included. Guardrail work in executor threads does not inherit it (``run_in_executor``
does not copy the context).
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace

__all__ = ["CONTEXT_FIELDS", "JsonFormatter", "bind", "context", "start_request"]

#: The request fields of every JSON line (null outside a request or before they are known).
CONTEXT_FIELDS = ("request_id", "receipt_id", "actor", "action")

_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("sonate_log_context", default=None)


def context() -> dict[str, str]:
    """The current request's log fields (a copy; empty outside a request)."""
    return dict(_context.get() or {})


def bind(**fields: str | None) -> None:
    """Add ``fields`` (names from :data:`CONTEXT_FIELDS`; None values are skipped) to the current
    request's log context, creating one for the current task when none is open. Raises
    ValueError for any other name (a value-carrying field must not slip in by a typo)."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"not log context fields: {sorted(unknown)}")
    current = _context.get()
    if current is None:
        current = {}
        _context.set(current)
    current.update({k: v for k, v in fields.items() if v is not None})


def start_request() -> None:
    """Give the current task a fresh, empty log context. aiohttp runs each request in a task of its
    own (aiohttp/web_protocol.py: "a new task is used for copy context vars"), so the context
    is the request's, from the first middleware to its access log line, and dies with the task."""
    _context.set({})


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line (keys: ``timestamp`` (RFC 3339, UTC, ms),
    ``level``, ``logger``, ``message``, the :data:`CONTEXT_FIELDS`, ``trace_id``, ``span_id``, and
    ``exception`` when the record carries one). Non-ASCII stays as is (``ensure_ascii=False``)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line (no trailing newline; the handler adds it)."""
        when = datetime.fromtimestamp(record.created, timezone.utc)
        fields = _context.get() or {}
        line: dict[str, Any] = {
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **{name: fields.get(name) for name in CONTEXT_FIELDS},
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"], line["span_id"] = format(span.trace_id, "032x"), format(span.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)
