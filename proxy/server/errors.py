"""The request path's basic types: :class:`GatewayError` (an OpenAI error object as an exception),
:class:`Caller` (who is asking) and the one "ledger unavailable" error.

No aiohttp and no pipeline here: every layer of the request path (auth, request parsing, the
pipeline, the review workflows, the routes) raises these, and
:mod:`proxy.server.http.middleware` turns a :class:`GatewayError` into the HTTP response.
"""

from __future__ import annotations

import logging
import re
import traceback
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["Caller", "GatewayError", "guardrail_failed", "ledger_unavailable", "param_path"]

log = logging.getLogger("sonate.guardrails")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def param_path(loc: Iterable[object]) -> str:
    """A dotted parameter path (``messages.0.x_contact``) from a validation error location, for an
    error message or ``param``. Indices and identifier-like keys (a letter or ``_`` then up to 63
    letters, digits or ``_``) are shown; any other key a client wrote is shown as ``<key>``, so an
    e-mail address or a sentence used as a JSON key is never echoed (error messages never
    echo request content)."""
    return ".".join(str(p) if isinstance(p, int) or _NAME.fullmatch(str(p)) else "<key>" for p in loc)


@dataclass
class GatewayError(Exception):
    """A request failure as an OpenAI error object.

    ``status``: the HTTP status; ``message``, ``type``, ``code``, ``param``: the fields of the
    OpenAI ``error`` object; ``result``: the label counted in ``sonate_requests_total{result}``
    (client_error, auth_error, upstream_error, ledger_error, rate_limited, overloaded, guardrail_error); ``headers``:
    extra response headers.
    """

    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None
    result: str = "client_error"
    #: Extra response headers (e.g. ``Retry-After`` on 429/503, proxy.server.admission.limits).
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


def guardrail_failed(stage: str, request_id: str, exc: BaseException) -> GatewayError:
    """The 503 ``guardrail_error`` (type ``api_error``, counted as ``sonate_requests_total{result=
    "guardrail_error"}``) of a detector that raised ``exc`` while screening ``stage`` (``input`` or
    ``output``) for ``request_id``, logged by exception type and place only: its message may quote
    the screened text, so it is not logged. Fail closed: an input that could not be
    screened is not forwarded, an answer that could not be screened is not delivered; no receipt
    is written for a JSON answer (nothing was decided).
    """
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f"{frame.filename}:{frame.lineno}" if frame else "?"
    log.error("%s guardrails raised %s at %s for %s (message withheld)", stage, type(exc).__name__, where, request_id)
    return GatewayError(503, f"The {stage} guardrails failed on this request; it was not "
                        f"{'forwarded' if stage == 'input' else 'delivered'}. Please retry.",
                        "api_error", "guardrail_error", result="guardrail_error", headers={"Retry-After": "1"})
