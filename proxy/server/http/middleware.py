"""The error middleware: every failure becomes an OpenAI error object, every request is counted.

``sonate_requests_total{route, result}``: ``result`` is ``ok``, ``client_error``, or the
:attr:`GatewayError.result` of the failure (auth_error, upstream_error, ledger_error, rate_limited,
overloaded), ``client_disconnected`` for a client that closed the connection while its event
stream was written (:func:`proxy.server.http.requests.send_events`: one INFO line, no traceback; the
stream's receipt is appended all the same), or
``server_error`` for an unexpected exception, which is logged and answered with a 500 that
carries no traceback.

A request aiohttp cannot parse as HTTP (a control byte in a header, a bad request line) is
answered 400 by aiohttp itself before any middleware runs; aiohttp logs it at ERROR with a
traceback. :class:`ClientProtocolErrorFilter` (attached to ``aiohttp.server`` on import) turns
that into one WARNING line without the traceback: a client's malformed bytes are not a proxy fault
(zero unhandled exceptions in the log).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.server.errors import GatewayError
from proxy.server.flow.wire import error_body
from proxy.server.http.requests import CLIENT_GONE, services
from proxy.server.telemetry import logs, tracing

__all__ = ["ERROR_BODIES", "ClientProtocolErrorFilter", "ErrorBody", "error_middleware", "json_error",
           "trace_middleware"]

log = logging.getLogger("sonate.server")


class ClientProtocolErrorFilter(logging.Filter):
    """Rewrites aiohttp's ERROR record of a client's unparseable HTTP (an ``HttpProcessingError``
    with a 4xx code, answered 400 by aiohttp) as one WARNING line naming the error, no traceback.
    Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500:
            record.msg = "malformed HTTP request from %s answered %d: %s"
            record.args = (record.args[0] if isinstance(record.args, tuple) and record.args else "?", exc.code,
                           type(exc).__name__)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


_PROTOCOL_FILTER = ClientProtocolErrorFilter()
logging.getLogger("aiohttp.server").addFilter(_PROTOCOL_FILTER)  # idempotent: the same instance

_HTTP_CODES = {404: ("not_found", "Unknown URL"), 405: ("method_not_allowed", "Method not allowed"),
               413: ("request_too_large", "Request body too large")}


#: An API's error object: ``(status, message, type, code, param) -> dict``.
ErrorBody = Callable[[int, str, str, "str | None", "str | None"], dict[str, Any]]
#: Path → the error object of the dialect served there (registered by its route, e.g. Anthropic's on
#: ``/v1/messages``); every other path answers OpenAI's (:func:`proxy.server.flow.wire.error_body`).
ERROR_BODIES: web.AppKey[dict[str, ErrorBody]] = web.AppKey("error_bodies", dict)


def _openai_error(status: int, message: str, type: str, code: str | None, param: str | None) -> dict[str, Any]:
    return error_body(message, type, param, code)


def json_error(status: int, message: str, type: str = "invalid_request_error", code: str | None = None,
               param: str | None = None, render: ErrorBody | None = None) -> web.Response:
    """An error response with HTTP ``status``: the object ``render`` builds (a dialect's, see
    :data:`ERROR_BODIES`), else OpenAI's (docs/api.md "Errors")."""
    return web.json_response((render or _openai_error)(status, message, type, code, param), status=status)


def _renderer(request: web.Request) -> ErrorBody | None:
    """The error object of the dialect served on ``request.path`` (None: OpenAI's)."""
    return request.app.get(ERROR_BODIES, {}).get(request.path)


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _http_error(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's own 4xx/5xx (unknown URL, wrong method, body too large) as an OpenAI error."""
    code, text = _HTTP_CODES.get(exc.status, ("http_error", exc.reason))
    if exc.status == 413:
        text = f"{text}: the limit is {services(request).config.server.max_body_bytes} bytes"
    elif exc.status in (404, 405):
        text = f"{text} ({request.method}); the path is not echoed"
    return json_error(exc.status, text, code=code, render=_renderer(request))


@web.middleware
async def trace_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """The outermost middleware: every request gets a fresh log context
    (:func:`proxy.server.telemetry.logs.start_request`); an API request (``/v1/...``; not probes, scrapes or
    static pages), when tracing is on, its request span (:func:`proxy.server.telemetry.tracing.request`, child
    of an incoming W3C ``traceparent``) with the response status the client got."""
    logs.start_request()
    if not request.path.startswith("/v1/"):
        return await handler(request)
    with tracing.request(request.method, _route_label(request), request.headers) as span:
        response = await handler(request)
        tracing.respond(span, response.status)
        return response


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Run ``handler``; answer every failure as an OpenAI error object and count requests by result."""
    metrics = services(request).metrics
    route = _route_label(request)
    try:
        response = await handler(request)
        result = "client_disconnected" if request.get(CLIENT_GONE) else "ok" if response.status < 400 else "client_error"
        metrics.requests.labels(route, result).inc()
        return response
    except GatewayError as exc:
        metrics.requests.labels(route, exc.result).inc()
        response = json_error(exc.status, exc.message, exc.type, exc.code, exc.param, _renderer(request))
        response.headers.update(exc.headers)
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        metrics.requests.labels(route, "client_error").inc()
        return _http_error(request, exc)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        metrics.requests.labels(route, "server_error").inc()
        return json_error(500, "The proxy had an internal error; it has been logged.", "api_error", "internal_error",
                          render=_renderer(request))
