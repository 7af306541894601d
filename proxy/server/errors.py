"""The request path's basic types: :class:`GatewayError` (an OpenAI error object as an exception),
:class:`Caller` (who is asking) and the one "ledger unavailable" error.

No aiohttp and no pipeline here: every layer of the request path (auth, request parsing, the
pipeline, the review workflows, the routes) raises these, and
:mod:`proxy.server.middleware` turns a :class:`GatewayError` into the HTTP response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Caller", "GatewayError", "ledger_unavailable"]


@dataclass
class GatewayError(Exception):
    """A request failure as an OpenAI error object.

    ``status``: the HTTP status; ``message``, ``type``, ``code``, ``param``: the fields of the
    OpenAI ``error`` object; ``result``: the label counted in ``sonate_requests_total{result}``
    (client_error, auth_error, upstream_error, ledger_error, rate_limited, overloaded); ``headers``:
    extra response headers.
    """

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    result: str = "client_error"
    #: Extra response headers (e.g. ``Retry-After`` on 429/503, proxy.server.limits).
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Caller:
    """The authenticated bearer of a key: ``actor`` (the name written into receipts) and ``role``
    (``client``, ``reviewer`` or ``admin``)."""

    actor: str
    role: str


def ledger_unavailable(detail: str | None = None) -> GatewayError:
    """The 503 ``ledger_unavailable`` error (type ``api_error``, counted as ``ledger_error``).

    ``detail``, when given, follows the message after a semicolon: what was not done
    (e.g. "the request was not forwarded (fail_closed)") or why the store failed.
    Fail-closed: no response that needs a receipt leaves without it (docs/architecture.md
    "Request flow").
    """
    message = "The trust ledger is unavailable" + (f"; {detail}" if detail else "") + "."
    return GatewayError(503, message, "api_error", "ledger_unavailable", result="ledger_error")
