"""Request helpers shared by the route modules: the app's services, the authenticated caller and
validated JSON bodies.

:data:`SERVICES` is the typed application key under which :func:`proxy.server.http.app.create_app`
stores the :class:`proxy.server.http.services.Services`; route modules reach them through :func:`services`.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, AsyncIterable, Awaitable, Callable, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from proxy.server.errors import Caller, GatewayError, param_path

if TYPE_CHECKING:
    from proxy.server.flow.pipeline import ChatResult
    from proxy.server.http.services import Services

__all__ = ["ADMIN", "ANY_ROLE", "CLIENT_GONE", "REVIEWERS", "SERVICES", "admitted", "caller", "read_model",
           "send_events", "services", "start_event_stream", "validation_error"]

log = logging.getLogger("sonate.server")

ANY_ROLE = ("client", "admin", "reviewer")
ADMIN = ("admin",)
REVIEWERS = ("admin", "reviewer")
Model = TypeVar("Model", bound=BaseModel)
Response = TypeVar("Response", bound=web.StreamResponse)

SERVICES: web.AppKey[Services] = web.AppKey("services")
"""The running proxy's services (set once by ``create_app``)."""

CLIENT_GONE = "sonate.client_gone"
"""Request key set (True) when the client closed the connection while its event stream was written."""


def services(request: web.Request) -> Services:
    """The :class:`proxy.server.http.services.Services` of the app serving ``request``."""
    return request.app[SERVICES]


def caller(request: web.Request, roles: tuple[str, ...] = ANY_ROLE) -> Caller:
    """The authenticated caller of ``request``; GatewayError 401/403 (see Authenticator)."""
    return services(request).auth.authenticate(request.headers.get("Authorization"), roles=roles)


async def admitted(request: web.Request, answer: Callable[[web.Request, Caller], Awaitable[Response]]) -> Response:
    """Authenticate ``request`` (401/403), admit it under its key's limits (429 ``Retry-After``,
    :class:`proxy.server.admission.limits.KeyLimiter`; the slot is held until ``answer`` returns), then
    ``answer(request, caller)``. A refused request writes no receipt: nothing was screened or forwarded."""
    who = caller(request)
    limiter = services(request).limiter
    if limiter is None:
        return await answer(request, who)
    with limiter.acquire(who.actor):
        return await answer(request, who)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def json_depth(value: Any, limit: int) -> int:
    """Nesting depth of a parsed JSON value (a scalar is 0, ``[]`` is 1), counted up to ``limit + 1``.

    Iterative (no recursion), stops descending once ``limit`` is exceeded, so its work is bounded
    by the size of the value. Returns a number > ``limit`` when the value is nested deeper.
    """
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                return depth
            stack.extend((child, depth) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _too_deep(limit: int) -> GatewayError:
    return GatewayError(400, f"The JSON body is nested deeper than {limit} levels (arrays and objects; "
                             "server.limits.max_json_depth); flatten it.", code="invalid_json")


def validation_error(exc: ValidationError) -> GatewayError:
    """A pydantic ValidationError as a 400 ``invalid_value`` naming the first bad parameter."""
    first = exc.errors()[0]
    param = param_path(first["loc"]) or None
    more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
    where = f"Invalid value for '{param}'" if param else "Invalid request body"  # a check of the whole body
    return GatewayError(400, f"{where}: {first['msg']}{more}", param=param, code="invalid_value")


async def read_model(request: web.Request, model: type[Model]) -> tuple[Model, dict[str, Any]]:
    """(validated body, the JSON object as received) of ``request``.

    Raises GatewayError 400 for malformed JSON (NaN/Infinity and unpaired UTF-16 surrogate escapes
    such as ``"\\ud800"``, which are no text, included), a body nested deeper
    than ``server.limits.max_json_depth`` (a 5,000-level array answered 500), a body that
    is not a JSON object, or a body ``model`` rejects; aiohttp raises 413 above ``client_max_size``.
    """
    depth = services(request).config.server.limits.max_json_depth
    raw_bytes = await request.read()
    try:
        raw = json.loads(raw_bytes, parse_constant=_reject_constant)
    except RecursionError:  # the C decoder's own bound (sys.getrecursionlimit()) was hit first
        raise _too_deep(depth) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GatewayError(400, f"We could not parse the JSON body of your request: {exc}",
                           code="invalid_json") from None
    if not isinstance(raw, dict):
        raise GatewayError(400, "The request body must be a JSON object.", code="invalid_json")
    if json_depth(raw, depth) > depth:
        raise _too_deep(depth)
    try:
        return model.model_validate_json(raw_bytes), raw
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":  # text Python's parser reads but pydantic's refuses: a lone surrogate
            raise GatewayError(400, "We could not parse the JSON body of your request: "
                                    f"{first.get('ctx', {}).get('error', first['msg'])} (a \\ud800-\\udfff "
                                    "escape is only text as one half of a surrogate pair)",
                               code="invalid_json") from None
        raise validation_error(exc) from None


async def start_event_stream(request: web.Request, headers: dict[str, str], result: ChatResult) -> web.StreamResponse:
    """Send the headers of a server-sent-events answer (``text/event-stream``, no caching or proxy
    buffering, plus ``headers``) for the streamed ``result``; the caller then writes its events and
    ``write_eof``. If the client is gone before the headers leave, ``result``'s forwarded stream is
    abandoned (its receipts still appended) and the error propagates."""
    response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
    except BaseException:
        if result.events is not None:
            await result.events.abandon()
        raise
    return response


async def send_events(request: web.Request, response: web.StreamResponse,
                      events: AsyncIterable[bytes]) -> web.StreamResponse:
    """Write ``events`` (SSE bytes) to the prepared ``response`` and end it; returns ``response``.

    A client that closes the connection meanwhile is no proxy fault: the write's ``ConnectionError``
    ends the loop (the caller's ``aclosing`` then appends the stream's receipts), one INFO line is
    logged and :data:`CLIENT_GONE` is set on the request (the middleware counts
    ``result="client_disconnected"``). Returning the response lets aiohttp finish the dead connection
    quietly; raised, the error was logged with a traceback."""
    try:
        async for event in events:
            await response.write(event)
        await response.write_eof()
    except ConnectionError:
        log.info("client closed the connection during the response to %s %s", request.method, request.path)
        request[CLIENT_GONE] = True
    return response
