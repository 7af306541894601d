"""proxy.server.http.middleware.ClientProtocolErrorFilter: a client's malformed HTTP is one WARNING
line, no traceback."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadHttpMessage

from proxy.server.http.middleware import ClientProtocolErrorFilter


def _record(exc: BaseException | None) -> logging.LogRecord:
    return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling request from %s",
                             ("127.0.0.1",), (type(exc), exc, None) if exc else None)


def test_a_bad_http_message_becomes_one_warning_line_without_traceback() -> None:
    record = _record(BadHttpMessage("Invalid header value char"))
    assert ClientProtocolErrorFilter().filter(record)
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == "malformed HTTP request from 127.0.0.1 answered 400: BadHttpMessage"


def test_other_errors_keep_their_level_and_traceback() -> None:
    error = RuntimeError("boom")
    record = _record(error)
    assert ClientProtocolErrorFilter().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info[1] is error
    assert record.getMessage() == "Error handling request from 127.0.0.1"
